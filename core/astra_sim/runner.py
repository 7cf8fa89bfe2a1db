"""Running a :class:`~astra_sim.spec.RunSpec`: the one path from a spec to a report, behind ``astra run``,
:func:`astra_sim.simulate` and every command that simulates. Generated configurations exist on disk only while the
run reads them; the report records them inline, with what the platform implied.
"""

from __future__ import annotations

from astra_sim.errors import ConfigError
from astra_sim.spec import RunSpec

#: ``simulate()`` keywords that say how to run, not what (they are not RunSpec fields or run options)
CONTROL_KEYWORDS = ("plugins", "block", "extra_plugins", "plugin_manager", "on_warning", "measure_memory")


class Run:
    """One spec simulated: :meth:`execute`, :meth:`partial_report`; ``resolved``: a ``spec.resolve(pm)`` made before."""

    def __init__(self, spec: RunSpec, pm=None, on_warning=None, resolved=None):
        from astra_sim.plugins import plugin_manager_for

        self.spec = spec
        self.pm = plugin_manager_for(plugin_manager=pm)
        self.on_warning = on_warning
        self.resolved = spec.resolve(self.pm) if resolved is None else resolved
        self.simulation = None
        self.paths = {}

    def execute(self, measure_memory=False):
        """Simulate and return the :class:`~astra_sim.report.Report`."""
        from astra_sim.generated import materialized

        with materialized(self.resolved.generated) as paths:
            self.paths = dict(paths)
            self.simulation = self._simulation(paths)
            report = self.simulation.run(measure_memory=measure_memory)
            return self._finish(report)

    def partial_report(self, reason):
        """What an interrupted run knew, marked ``complete: False`` (None before the simulation was built)."""
        if self.simulation is None:
            return None
        return self._finish(self.simulation.partial_report(reason))

    def _simulation(self, paths):
        from astra_sim.simulation import Simulation

        spec, resolved = self.spec, self.resolved
        configs = dict(resolved.configs)
        options = dict(resolved.options)
        for key, path in paths.items():
            if key.startswith("option:"):
                options[key[len("option:"):]] = path
            else:
                configs[key] = path
        options.update({k: configs[k] for k in ("system_configuration", "network_configuration")})
        options.update(platform=spec.platform, nodes=resolved.nodes)
        return Simulation(
            spec.workload, configs["system_configuration"], configs["network_configuration"],
            configs["remote_memory_configuration"], configs["comm_group_configuration"],
            network_backend=spec.network_backend, memory_backend=spec.memory_backend,
            compute_model=resolved.compute_model, workload_format=spec.workload_format,
            num_queues_per_dim=spec.num_queues_per_dim, injection_scale=spec.injection_scale,
            rendezvous=spec.rendezvous, plugin_manager=self.pm, options=options, fold=spec.fold,
            on_warning=self.on_warning, allow_unmatched=spec.allow_unmatched, breakdown=spec.breakdown)

    def _finish(self, report):
        from astra_sim.generated import inline_settings

        if self.resolved.platform_defaults:
            report.settings["platform"] = {"name": self.resolved.platform, "nodes": self.resolved.nodes,
                                           "devices_per_node": self.resolved.devices_per_node}
            report.settings["platform_defaults"] = dict(self.resolved.platform_defaults)
        inline_settings(report.settings, self.resolved.generated, self.paths)
        return report


def run_spec(spec: RunSpec, pm=None, on_warning=None, measure_memory=False, resolved=None):
    """Simulate ``spec`` and return its report (``resolved``: see :class:`Run`)."""
    return Run(spec, pm, on_warning, resolved).execute(measure_memory)


def make_spec(args, kwargs):
    """``(spec, pm, control keywords)`` of :func:`astra_sim.simulate`'s arguments."""
    from astra_sim.plugins import plugin_manager_for

    kwargs = dict(kwargs)
    control = {k: kwargs.pop(k) for k in CONTROL_KEYWORDS if k in kwargs}
    pm = plugin_manager_for(control.get("plugins"), control.get("block", ()), control.get("extra_plugins", ()),
                            control.get("plugin_manager"))
    if args and isinstance(args[0], RunSpec):
        if len(args) > 1:
            raise ConfigError("simulate(spec): give the spec alone (change it with spec.replace(...))")
        spec = args[0].replace(**kwargs) if kwargs else args[0]
        return spec, pm, control
    names = ("workload", "system", "network", "memory", "comm_groups")
    if len(args) > len(names):
        raise ConfigError(f"simulate() takes at most {len(names)} positional arguments ({', '.join(names)})")
    mapping = {}
    for name, value in zip(names, args):
        if name in kwargs:
            raise ConfigError(f"simulate(): {name} given twice")
        mapping[name] = value
    raw_options = kwargs.pop("options", None) or {}
    mapping.update(kwargs)
    if mapping.get("workload") is None:
        raise ConfigError("simulate(): the workload (a trace prefix) is required")
    mapping = {k: (str(v) if k in names and v is not None else v) for k, v in mapping.items()}
    spec = RunSpec.from_mapping(mapping, pm, where="simulate()")
    if raw_options:
        spec.options.update(raw_options)
    return spec, pm, control
