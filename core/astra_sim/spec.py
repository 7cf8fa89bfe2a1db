"""``RunSpec``: one simulation as every door states it (``astra run``, sweeps, search, serving, validation, Python).

The spec owns its flags (:meth:`RunSpec.add_cli_args`, :meth:`RunSpec.from_cli_args`), and :meth:`RunSpec.from_mapping`
reads a mapping (a sweep's ``run:``, Python keywords) through the same parser, so types, checks and defaults are the
same through every door. :meth:`RunSpec.resolve` gives the concrete run, resolving ``--platform`` in the registry.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

from astra_sim.cliutil import non_negative_float, platform_names, positive_int
from astra_sim.errors import ConfigError, PluginError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: Reference flags accepted for script compatibility, without effect (as in the reference's analytical binaries).
IGNORED_REFERENCE_FLAGS = ("--logging-configuration", "--logging-folder", "--comm-scale", "--compute-scale")

#: ``astra run`` options that say how to show or write the result, not what to simulate (not part of a spec).
OUTPUT_DESTS = ("report_json", "quiet", "max_table_ranks", "partial_report", "plugin", "command", "json", "output",
                "per_rank", *(flag[2:].replace("-", "_") for flag in IGNORED_REFERENCE_FLAGS))

#: RunSpec field -> ``astra run`` option dest (where the names differ)
_DESTS = {"workload": "workload_configuration", "system": "system_configuration",
          "network": "network_configuration", "memory": "remote_memory_configuration",
          "comm_groups": "comm_group_configuration", "rendezvous": "rendezvous_protocol"}
#: RunSpec fields whose option is the negation (``--no-fold``)
_NEGATED = {"fold": "no_fold", "breakdown": "no_breakdown"}


def parse_bool(text):
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


@dataclass
class RunSpec:
    """One simulation; ``options``: every plugin option by ``dest`` (defaults included when parsed)."""

    workload: str
    system: str | None = None
    network: str | None = None
    memory: str | None = None
    comm_groups: str | None = None
    platform: str | None = None
    #: nodes of ``platform``; None: as many as the workload's ranks fill (one partial node for a smaller job)
    nodes: int | None = None
    network_backend: str = "analytical"
    memory_backend: str | None = None
    compute_model: str | None = None
    workload_format: str | None = None
    num_queues_per_dim: int = 1
    injection_scale: float = 1.0
    rendezvous: bool = False
    fold: bool = True
    allow_unmatched: bool = False
    breakdown: bool = True
    options: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ command line
    @staticmethod
    def add_cli_args(parser):
        """``astra run``'s own options (plugins add theirs with ``astra_add_run_options``)."""
        ref = parser.add_argument_group("reference simulator flags (ASTRA-sim 2.x compatible)")
        ref.add_argument("--workload-configuration", required=True, metavar="PREFIX",
                         help="trace prefix: rank r reads PREFIX.r.et")
        ref.add_argument("--system-configuration", metavar="SYS.json", help="required unless --platform provides it")
        ref.add_argument("--network-configuration", metavar="NET.yml", help="required unless --platform provides it")
        ref.add_argument("--remote-memory-configuration", metavar="MEM.json")
        ref.add_argument("--comm-group-configuration", metavar="GROUPS.json",
                         help="JSON {\"id\": [npus]}; a value containing 'empty' disables groups")
        ref.add_argument("--num-queues-per-dim", type=positive_int, default=1, metavar="N")
        ref.add_argument("--injection-scale", type=non_negative_float, default=1.0, metavar="X",
                         help="multiplies endpoint-delay")
        ref.add_argument("--rendezvous-protocol", type=parse_bool, nargs="?", const=True, default=False,
                         metavar="BOOL", help="8 KiB handshake before every send")
        for flag in IGNORED_REFERENCE_FLAGS:
            ref.add_argument(flag, help=argparse.SUPPRESS)
        machine = parser.add_argument_group(
            "platforms (a machine's system and network configurations)",
            "--platform generates the configurations of a registered machine (`astra platforms` lists them) and "
            "the defaults it implies (its compute model, collectives, host); --system-configuration / "
            "--network-configuration given explicitly win. The report's settings.platform_defaults says what was "
            "implied and why.")
        machine.add_argument("--platform", default=None, metavar="NAME",
                             help="a registered platform, e.g. hgx-h100").completer = platform_names
        machine.add_argument("--nodes", type=positive_int, default=None, metavar="N",
                             help="nodes (scale-up domains, or slices) of --platform (default: as many as the "
                                  "workload's ranks fill; a job smaller than a node gets a partial node)")
        ours = parser.add_argument_group("astra-sim-py options")
        ours.add_argument("--network-backend", default="analytical", metavar="NAME",
                          help="network backend by name (default: analytical); see `astra plugins`")
        ours.add_argument("--memory-backend", default=None, metavar="NAME",
                          help="remote-memory backend (default: analytical if installed, else none)")
        ours.add_argument("--compute-model", default=None, metavar="NAME",
                          help="compute model (default: --platform's, else roofline if roofline-enabled, else replay)")
        ours.add_argument("--workload-format", default=None, metavar="NAME",
                          help="trace format (default: detected from the files)")
        ours.add_argument("--host-launch-us", type=float, default=None, metavar="US",
                          help="the host launches one GPU operation per US microseconds, in order, ahead of the GPU; "
                               "a kernel starts no earlier than its launch (default: off; --platform sets a measured "
                               "value)")
        ours.add_argument("--host-sync-us", type=float, default=None, metavar="US",
                          help="with the host model: after a send/receive whose node has host_waits the host waits "
                               "for it and US more microseconds (a training loop's synchronize after its pipeline "
                               "transfers)")
        ours.add_argument("--no-fold", action="store_true",
                          help="simulate every rank, even those a symmetry makes identical to another "
                               "(by default one rank per class of symmetric ranks is simulated; same results)")
        ours.add_argument("--allow-unmatched", action="store_true",
                          help="a send never received (or a receive never sent) is a warning listed in the report's "
                               "unmatched_messages, not an error (exit 3)")
        ours.add_argument("--no-breakdown", action="store_true",
                          help="do not record where each rank's time goes (the report's breakdown)")

    @classmethod
    def from_cli_args(cls, args) -> "RunSpec":
        """The spec of parsed ``astra run`` arguments (every option a plugin added lands in ``options``)."""
        values = vars(args)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name == "options":
                continue
            if f.name in _NEGATED:
                kwargs[f.name] = not values.get(_NEGATED[f.name], False)
            else:
                dest = _DESTS.get(f.name, f.name)
                if dest in values:
                    kwargs[f.name] = values[dest]
        taken = set(_DESTS.values()) | set(_NEGATED.values()) | set(kwargs) | set(OUTPUT_DESTS)
        options = {k: v for k, v in values.items() if k not in taken and not k.startswith("_")
                   and k not in ("run_command", "plugin_manager")}
        return cls(**kwargs, options=options)

    @classmethod
    def from_mapping(cls, mapping, pm=None, where="run") -> "RunSpec":
        """The spec of ``{option: value}`` (``astra run``'s option names or the spec's fields), read by ``astra run``'s
        parser: the command line's types, checks and defaults. ``where`` names the mapping in errors."""
        from astra_sim.cliutil import mapping_to_argv, parse_or_raise
        from astra_sim.platforms import Platform

        parser = run_parser(pm)
        renamed = {}
        platform = mapping.get("platform") if hasattr(mapping, "get") else None
        if isinstance(platform, Platform):  # a platform object (a variant) stands for itself, not for a name
            mapping = {k: v for k, v in dict(mapping).items() if k != "platform"}
        for key, value in dict(mapping).items():
            name = str(key).replace("-", "_")
            if name in _NEGATED:
                name, value = _NEGATED[name], (not value if isinstance(value, bool) else value)
            renamed[_DESTS.get(name, name)] = value
        argv = mapping_to_argv(parser, renamed, where)
        spec = cls.from_cli_args(parse_or_raise(parser, argv, where))
        return dataclasses.replace(spec, platform=platform) if isinstance(platform, Platform) else spec

    @classmethod
    def from_argv(cls, argv, pm=None, where="astra run") -> "RunSpec":
        """The spec of ``astra run``'s command-line words; what the parser refuses is a ConfigError naming ``where``."""
        from astra_sim.cliutil import parse_or_raise

        return cls.from_cli_args(parse_or_raise(run_parser(pm), [str(word) for word in argv], where))

    def to_mapping(self) -> dict:
        """The spec as ``{option dest: value}`` (what :meth:`from_mapping` reads back)."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name == "options":
                continue
            value = getattr(self, f.name)
            if f.name in _NEGATED:
                out[_NEGATED[f.name]] = not value
            else:
                out[_DESTS.get(f.name, f.name)] = value
        out.update(self.options)
        return out

    def replace(self, **changes) -> "RunSpec":
        """A copy with fields changed; unknown names are options (``spec.replace(gpu="B200")``)."""
        names = {f.name for f in dataclasses.fields(self)}
        fields_ = {k: v for k, v in changes.items() if k in names}
        options = dict(self.options)
        options.update(fields_.pop("options", None) or {})
        options.update({k: v for k, v in changes.items() if k not in names})
        return dataclasses.replace(self, **fields_, options=options)

    # ------------------------------------------------------------------ resolution
    def resolve(self, pm=None) -> "ResolvedRun":
        """The concrete run, with what a platform implied (``platform_defaults``); files the user named win."""
        from astra_sim.generated import CONFIG_KEYS, GeneratedFile, generated_options

        options = dict(self.options)
        configs = {"system_configuration": self.system, "network_configuration": self.network,
                   "remote_memory_configuration": self.memory, "comm_group_configuration": self.comm_groups}
        compute_model = self.compute_model
        defaults = None
        generated = {}
        platform = None
        nodes = self.nodes
        if self.platform is not None:
            from astra_sim.platforms import fit_workload, get_platform
            platform, nodes = fit_workload(get_platform(self.platform, pm), self.nodes,
                                           workload_ranks(self.workload, pm, self.workload_format), options)
            setup = platform.resolve(nodes, {**options, "compute_model": self.compute_model})
            for key in CONFIG_KEYS:
                value = getattr(setup, key)
                if configs[key] is None and value is not None:
                    if isinstance(value, GeneratedFile):
                        generated[key] = value
                    else:
                        configs[key] = value
            options.update(setup.options)
            if compute_model is None:
                compute_model = setup.compute_model
            defaults = dict(setup.defaults)
            generated.update(generated_options(options))
        for key in ("system_configuration", "network_configuration"):
            if configs[key] is None and key not in generated:
                flag = "--" + key.replace("_", "-")
                raise ConfigError(f"{flag} is required (or --platform, which provides it)")
        return ResolvedRun(self, configs, generated, options, compute_model, defaults,
                           None if platform is None else platform.name, nodes,
                           None if platform is None else platform.devices_per_node(options))


@dataclass
class ResolvedRun:
    """A spec made concrete; ``generated``: {key: GeneratedFile}, written only while the run reads them."""

    spec: RunSpec
    configs: dict
    generated: dict
    options: dict
    compute_model: str | None
    platform_defaults: dict | None
    platform: str | None
    #: the platform's nodes and devices per node this run has (a job smaller than a node: one partial node)
    nodes: int | None = None
    devices_per_node: int | None = None


def workload_ranks(prefix, pm=None, workload_format=None):
    """The workload's rank count, as the first format reading it counts them (``ranks(prefix)``; ``workload_format``:
    that format only); None when none knows (a typo: the run then says what is missing)."""
    from astra_sim.plugins import registry_of

    registry = registry_of(pm)
    names = registry.names("workload_format")
    for name in [workload_format] if workload_format in names else names:
        fmt = registry.get("workload_format", name).factory
        count = getattr(fmt, "ranks", None)
        if count is not None and fmt.matches(prefix):
            return count(prefix)
    return None


def run_parser(pm=None):
    """``astra run``'s parser with every loaded plugin's options, made once per plugin manager."""
    from astra_sim.plugins import registry_once

    def make(pm):
        parser = argparse.ArgumentParser(prog="astra run", description="Run a simulation.")
        RunSpec.add_cli_args(parser)
        call_parser_hook(pm, "astra_add_run_options", parser=parser)
        return parser

    return registry_once(pm, "_astra_run_parser", make)


def call_parser_hook(pm, name, **kwargs):
    """Every plugin's parser hook ``name``; a clash of options is a PluginError."""
    try:
        getattr(pm.hook, name)(**kwargs)
    except argparse.ArgumentError as exc:
        raise PluginError(f"a plugin's {name} failed: {exc}") from None
