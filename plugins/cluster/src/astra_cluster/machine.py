"""The cluster's machine: how many GPUs, how they group into nodes, and one simulation on it.

Every simulation goes through the kernel's public API (:class:`astra_sim.spec.RunSpec`,
:func:`astra_sim.runner.run_spec`), so a cluster's step is what ``astra run`` gives for the same workload, machine
and options, to the ns."""

from __future__ import annotations

from astra_sim.errors import ConfigError

from .slowed import SLOWED

#: the backends on which a cable can go down in the middle of a step (the run option ``link_failures``); on
#: ``analytical`` a cable changes the bandwidth of whole steps
MID_STEP_BACKENDS = ("flow", "ns3")


class Machine:
    """``total_gpus`` GPUs in ``nodes`` nodes of ``gpus_per_node`` (GPU ``g`` is on node ``g // gpus_per_node``)."""

    def __init__(self, spec, pm=None):
        self.spec = spec
        self.pm = pm
        if spec.platform is not None:
            from astra_sim import get_platform

            platform = get_platform(spec.platform)
            self.gpus_per_node = platform.devices_per_node(dict(spec.run))
            self.nodes = spec.nodes
        else:
            counts = [spec.gpus] if spec.gpus is not None else _network_counts(spec.network)
            total = 1
            for count in counts:
                total *= count
            self.gpus_per_node = spec.gpus_per_node or counts[0]
            if total % self.gpus_per_node:
                raise ConfigError(f"{spec.path}: key 'gpus_per_node' ({self.gpus_per_node}) must divide the "
                                  f"network's {total} NPUs")
            self.nodes = total // self.gpus_per_node
        self.total_gpus = self.nodes * self.gpus_per_node
        self._inner_model = None
        #: the simulations' warnings, each once, in order (the report's ``warnings``)
        self.warnings = []
        collective = str(spec.run.get("platform_collective", spec.run.get("platform-collective", "nccl")))
        if spec.platform is not None and (spec.fabric or spec.failed_links) and collective != "ring":
            self.warnings.append(f"{spec.path}: on a platform, collectives are timed by the NCCL model, which sends "
                                 "nothing over the links: only point-to-point traffic sees the fabric and failed "
                                 "links (run: {platform_collective: ring} sends collectives as messages)")

    def node_of(self, gpu) -> int:
        return gpu // self.gpus_per_node

    @property
    def cables(self) -> list:
        """Every cable the spec names: those down throughout (``failed_links``), then those of failure events."""
        failures = self.spec.failures
        later = [list(cable) for _at, cable, _for in failures.cables] if failures is not None else []
        return [list(pair) for pair in self.spec.failed_links] + later

    @property
    def mid_step(self) -> bool:
        """Whether a cable can fail in the middle of a step here (flow, ns3), not only between steps."""
        return self.spec.network_backend in MID_STEP_BACKENDS

    def run_spec(self, prefix, comm_groups, nodes=None, down=(), failing=()):
        """The :class:`RunSpec` of ``prefix`` on this machine (``nodes``: fewer nodes of the platform; ``down``:
        cables down now besides ``failed_links``; ``failing``: ``((cable, offset ns), ...)``, cables that go down
        that far into the step)."""
        from astra_sim.spec import RunSpec

        mapping = dict(self.spec.run)
        mapping.update(workload=prefix, comm_groups=comm_groups, network_backend=self.spec.network_backend)
        if self.spec.platform is not None:
            mapping.update(platform=self.spec.platform, nodes=nodes or self.nodes)
        else:
            mapping.update(system=self.spec.system, network=self.spec.network)
        spec = RunSpec.from_mapping(mapping, self.pm, where=f"{self.spec.path}: run")
        options = {}  # set from Python (not astra run flags): read by the network backends
        failed = [list(pair) for pair in self.spec.failed_links] + [list(pair) for pair in down]
        if failed:  # the backend routes around them
            options["failed_links"] = failed
        if failing:  # the backend takes them down mid-step (flow, ns3)
            options["link_failures"] = [{"link": list(cable), "at_ns": int(at_ns)} for cable, at_ns in failing]
        if self.spec.fabric:  # the scale-out Switch as leaves under a spine
            options.update(fabric_nodes_per_leaf=self.spec.fabric["nodes_per_leaf"],
                           fabric_oversubscription=self.spec.fabric["oversubscription"])
        return spec.replace(options=options) if options else spec

    @property
    def renumberable(self) -> bool:
        """Whether renumbering nodes changes no delay: a platform's nodes on one switch per rail, no failed link
        named and no leaves (a job's nodes are then simulated as nodes 0..n-1)."""
        return self.spec.platform is not None and not self.cables and not self.spec.fabric

    def check_failed_links(self, folder):
        """Build the network once with the spec's ``failed_links`` (an empty workload: no step is simulated), so an
        unknown link is one line naming the spec's key before any simulation."""
        import os

        from .workloads import write_combined

        if not self.cables:
            return
        prefix = os.path.join(folder, "failed-links-check", "trace")
        combined = write_combined(prefix, self.total_gpus, [])
        try:
            self.simulate(prefix, combined["comm_groups"], down=[pair for pair in self.cables
                                                                 if pair not in self.spec.failed_links])
        except ConfigError as exc:
            if "failed_links" not in str(exc):
                raise
            message = str(exc).split("failed_links: ", 1)[-1]
            keys = " or ".join(key for key, used in (("failed_links", self.spec.failed_links), (
                "failures.events", self.spec.failures is not None and self.spec.failures.cables)) if used)
            raise ConfigError(f"{self.spec.path}: key '{keys}': {message}") from None

    def simulate(self, prefix, comm_groups, factors=None, nodes=None, down=(), jitter=None, failing=()):
        """The report of ``prefix`` on this machine; ``factors`` (``{rank: slowdown}``) slows those ranks' compute;
        ``down``: cables down now (routed around); ``jitter``: ``(sigma, seed)`` of every compute op's jitter;
        ``failing``: cables that go down mid-step, ``((cable, offset ns), ...)``."""
        from astra_sim.runner import run_spec

        spec = self.run_spec(prefix, comm_groups, nodes, down, failing)
        if factors or jitter:
            inner = self.inner_compute_model(spec)
            options = {"slowed_inner": inner, "slowed_factors": dict(factors or {})}
            if jitter:
                options.update(slowed_jitter_sigma=jitter[0], slowed_jitter_seed=jitter[1])
            spec = spec.replace(compute_model=SLOWED, options=options)
        return run_spec(spec, self.pm, on_warning=self._warn)

    def _warn(self, message):
        if message not in self.warnings:
            self.warnings.append(message)

    def inner_compute_model(self, spec):
        """The compute model a run of ``spec`` uses (what ``slowed`` wraps)."""
        if self._inner_model is None:
            resolved = spec.resolve(self.pm)
            name = resolved.compute_model
            if name is None:
                from astra_sim.config import parse_system_config

                system = resolved.configs["system_configuration"]
                roofline = system is not None and parse_system_config(system, 1.0).roofline_enabled
                name = "roofline" if roofline else "replay"
            self._inner_model = name
        return self._inner_model


def _network_counts(path):
    """The analytical network's ``npus_count`` (a list of ints), or a ConfigError naming the file."""
    from astra_sim.safeio import load_yaml

    data = load_yaml(path, "network configuration")
    counts = data.get("npus_count") if isinstance(data, dict) else None
    if not isinstance(counts, list) or not counts or not all(isinstance(c, int) and c > 0 for c in counts):
        raise ConfigError(f"{path}: astra cluster needs an analytical network with npus_count (a list of NPU "
                          "counts per dimension), or the spec's key 'gpus' (e.g. for ns-3), or a platform")
    return counts
