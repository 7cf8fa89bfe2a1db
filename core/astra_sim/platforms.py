"""Platforms: the machines ``--platform NAME`` stands for, one registered role (``astra_register_platforms``).

Every command and the Python API resolve a name through this registry, so a platform gives the same system, network
and defaults whichever door a question comes through. A platform says what it is (:meth:`Platform.describe`) and what
a run on ``nodes`` of it uses (:meth:`Platform.resolve`): generated configurations, the options it implies (GPU, NIC
rate, host model) and the defaults it chose, with why (the report's ``settings.platform_defaults``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from astra_sim.errors import ConfigError


@dataclass
class PlatformSetup:
    """What a platform gives one run: configurations (paths or :class:`astra_sim.generated.GeneratedFile`), the options
    and compute model it implies (option values may be GeneratedFiles too), and ``defaults``: what it chose and why."""

    system_configuration: object
    network_configuration: object
    remote_memory_configuration: object = None
    comm_group_configuration: object = None
    options: dict = field(default_factory=dict)
    compute_model: str | None = None
    defaults: dict = field(default_factory=dict)


class Platform:
    """A machine: ``nodes`` scale-up domains (or slices) of ``gpus_per_node`` devices. Subclasses (often frozen
    dataclasses) have ``name``, ``description``, ``family`` and ``gpus_per_node`` and implement :meth:`describe` and
    :meth:`resolve`. (No defaults here: a dataclass subclass would take them as its fields' defaults.)"""

    name: str
    description: str
    gpus_per_node: int
    family = "gpu"

    def describe(self, nodes: int = 1) -> dict:
        """What ``astra platforms`` shows for ``nodes`` nodes: ``name``, ``description``, ``family``, ``gpu``,
        ``gpus_per_node``, ``total_gpus``, ``scaleup_gb_per_s_per_direction``, ``nic_gbit_per_s_per_gpu``,
        ``hbm_bandwidth_gbps``, ``bf16_tflops`` and ``sources``."""
        raise NotImplementedError

    def resolve(self, nodes: int, options: dict) -> PlatformSetup:
        """The run's configurations and implied options on ``nodes`` nodes (an option the user gave wins)."""
        raise NotImplementedError

    def devices_per_node(self, options) -> int:
        """Devices in one node under the run's ``options`` (a TPU slice's size follows ``--tpu-topology``)."""
        return self.gpus_per_node

    def device_memory_bytes(self) -> int | None:
        """One device's memory (HBM) in bytes, for memory checks (layouts, a KV cache); None when unknown."""
        return None

    def peak_tflops(self, dtype="bf16") -> float | None:
        """Dense peak TFLOP/s of one device in ``dtype`` (for MFU); None when the device has no such rate."""
        return None

    def device_peak_tflops(self, dtype, options) -> float | None:
        """:meth:`peak_tflops` of the device a run with these ``options`` uses (``--gpu`` may replace it)."""
        return self.peak_tflops(dtype)

    def variant(self, **changes) -> "Platform":
        """The platform with some numbers changed (a sweep's ``platform.<key>`` axes), or a ConfigError naming them."""
        raise ConfigError(f"platform {self.name!r} has no variable numbers ({', '.join(sorted(changes))})")

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


def check_nodes(nodes) -> int:
    """``nodes`` as a positive int, or a ConfigError naming ``--nodes``."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"--nodes must be an integer >= 1, got {nodes!r}")
    return nodes


def platforms(pm=None) -> dict:
    """``{name: Platform}`` of every loaded plugin (``pm``: a plugin manager; default: every installed plugin)."""
    from astra_sim.plugins import registry_of

    return {name: reg.factory for name, reg in registry_of(pm).entries["platform"].items()}


def fit_workload(platform, nodes, ranks, options):
    """``(platform, nodes)`` for a workload of ``ranks`` ranks (None: unknown): whole nodes, or one partial node (a 1-,
    2- or 4-GPU job on an 8-GPU machine). ``nodes`` None follows the workload; one that disagrees is a ConfigError
    saying what would fit."""
    per_node = platform.devices_per_node(options)
    name = platform.name
    if nodes is not None:
        check_nodes(nodes)
        if ranks is None or ranks == nodes * per_node:
            return platform, nodes
        if not (nodes == 1 and ranks < per_node):
            fits = (f"--nodes {ranks // per_node}" if ranks % per_node == 0 else
                    f"a workload of a multiple of {per_node} ranks")
            raise ConfigError(f"--nodes {nodes} of {name} is {nodes * per_node} devices but the workload has {ranks} "
                              f"ranks: leave --nodes out (it follows the workload) or give {fits}")
    elif ranks is None:
        return platform, 1
    elif ranks % per_node == 0:
        return platform, ranks // per_node
    elif ranks > per_node:
        below = ranks // per_node
        raise ConfigError(f"the workload's {ranks} ranks are not whole {name} nodes of {per_node} devices: generate it "
                          f"for {below} or {below + 1} nodes ({below * per_node} or {(below + 1) * per_node} ranks)")
    try:  # fewer ranks than one node: a partial node
        return platform.variant(gpus_per_node=ranks), 1
    except ConfigError as exc:
        raise ConfigError(f"the workload has {ranks} ranks, fewer than one {name} node of {per_node} devices, and "
                          f"{name} has no partial node: {exc}") from None


def get_platform(name, pm=None) -> Platform:
    """The registered platform called ``name`` (case-insensitive), or a ConfigError listing the known ones."""
    if isinstance(name, Platform):
        return name
    known = platforms(pm)
    key = str(name).strip().lower()
    if key not in known:
        from astra_sim.cliutil import did_you_mean

        hint = did_you_mean(key, known)
        raise ConfigError(f"unknown --platform {name!r}{hint}; known platforms: "
                          f"{', '.join(known) or 'none (install plugins/gpu_model)'} (see `astra platforms`)")
    return known[key]
