"""The interfaces backends implement. Plugins register factories for them.

The kernel calls these objects directly on the hot path (never through hooks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable


@dataclass
class RunContext:
    """What a backend factory gets: the run's inputs and its event engine."""

    engine: object
    system_config: object
    network_config_path: str | None = None
    memory_config: dict = field(default_factory=dict)
    memory_config_path: str | None = None
    total_npus: int = 0
    npus_per_dim: list = field(default_factory=list)
    options: dict = field(default_factory=dict)
    warn: Callable[[str], None] = print
    #: ``schedule_for_rank(rank, delay_ns, fn, arg)``: run ``fn(arg)`` through
    #: that rank's system layer, whose events are batched per tick like the
    #: reference's ``Sys::register_event`` (use it where the reference books
    #: an event on the rank, e.g. remote-memory completions).
    schedule_for_rank: Callable = None
    #: ``comm_in_flight(rank) -> int``: communication operations (collectives, sends) the rank is
    #: running now (its GPU-communication slot); lets a compute model charge contention.
    comm_in_flight: Callable = None
    #: ``comm_nodes_in_flight(rank) -> [EtNode]``: those operations as trace nodes (e.g. to read how many SMs
    #: each one's kernel occupies, the ``comm_sms`` attribute).
    comm_nodes_in_flight: Callable = None
    #: ``{group id: [NPU, ...]}`` from ``--comm-group-configuration`` (``pg_name`` of a collective is the id);
    #: groups a trace declares in its own METADATA nodes are not in it.
    comm_groups: dict = field(default_factory=dict)
    #: ``rank_nodes(rank) -> {node id: EtNode}``: a rank's trace (once the run is built).
    rank_nodes: Callable = None
    #: ``add_node_observer(fn)``: ``fn(rank, node, start_ns, end_ns)`` runs when any node finishes
    #: (for timelines and utilisation reports; keep it cheap, it runs once per node).
    add_node_observer: Callable = None


class NetworkBackend(Protocol):
    """A network model. ``npus_per_dim`` fixes the number of simulated NPUs.

    Optional capabilities are declared by the protocols below (:class:`StatelessNetwork`,
    :class:`SymmetricNetwork`, :class:`NetworkWithStats`, :class:`SwitchNetwork`,
    :class:`LinkLoadRecorder`); the kernel asks for each through one helper (:func:`delay_function`,
    :func:`symmetry_dims`, :func:`network_stats`, :func:`in_switch_query`, :func:`link_load_recorder`).
    Setting a capability's attribute to None (on the class or the instance) withdraws it."""

    npus_per_dim: list

    def send(self, src: int, dst: int, size_bytes: int, fn, arg) -> None:
        """Deliver a message: schedule ``fn(arg)`` on the engine at its arrival time."""

    def describe(self) -> dict:
        """Settings for the report (topology, bandwidths, latencies, units in keys)."""


@runtime_checkable
class StatelessNetwork(Protocol):
    """A network whose delay is a closed form of the endpoints and the size: the kernel memoises it per
    ``(src, dst, size)`` and schedules arrivals itself, skipping ``send()``."""

    def delay_ns(self, src: int, dst: int, size_bytes: int) -> int:
        """The message's delay in ns (an int)."""


@runtime_checkable
class SymmetricNetwork(Protocol):
    """A network whose delays depend only on the endpoints (no state shared between messages, unless it is a
    :class:`LinkFoldingNetwork`), and which says which relabellings of each dimension keep them: runs on it may
    fold (the astra-folding plugin)."""

    def symmetry_dims(self) -> list | None:
        """Per dimension, ``"rotation"`` (only rotating the dimension's coordinates keeps every delay: a
        ring) or ``"any"`` (every permutation does: a switch, a fully connected dimension); None when this
        instance cannot fold."""


@runtime_checkable
class LinkFoldingNetwork(Protocol):
    """A :class:`SymmetricNetwork` whose messages share links, told before a folded run which rank symmetry
    it runs under: each simulated message then stands for its images, and each link's queue for its orbit's."""

    def fold_links(self, symmetry) -> None:
        """Fold the links by ``symmetry`` (an :class:`astra_sim.symmetry.RankSymmetry`), or raise
        :class:`astra_sim.errors.FoldAbandoned` saying why they cannot."""


@runtime_checkable
class NetworkWithStats(Protocol):
    """A network that reports what happened (per-link bytes, busy time, ...) after the run."""

    def stats(self) -> dict:
        """The report's ``network_stats``."""


@runtime_checkable
class SwitchNetwork(Protocol):
    """A network with switch dimensions the ``inSwitch`` collective can reduce in."""

    def in_switch(self, dim: int) -> "InSwitchSpec | None":
        """The switch of dimension ``dim`` (:class:`InSwitchSpec`), or None when it is not a switch."""


@runtime_checkable
class LinkLoadRecorder(Protocol):
    """A network with links that can record their use over time (the timelines' link-load tracks)."""

    def record_link_load(self, load) -> None:
        """Add every link's busy intervals to ``load`` (an :class:`astra_analysis.links.LinkLoad`)."""


class MemoryBackend(Protocol):
    """Remote (expanded) memory for MEM_LOAD / MEM_STORE nodes. It may be :class:`Foldable`: true when every
    NPU's accesses are independent of the others' (no shared server), so runs with MEM nodes may fold."""

    def issue(self, rank: int, is_store: bool, size_bytes: int, fn, arg) -> None:
        """Schedule ``fn(arg)`` when the access completes; raise AstraError if unsupported."""


class ComputeModel(Protocol):
    """Times COMP nodes that run on the GPU. It may be :class:`Foldable`: true when a node's time does not
    depend on the rank's number (only on the node and on the rank's own state); runs may then simulate one
    rank per class of symmetric ranks (the astra-folding plugin)."""

    def compute_time_ns(self, node, rank: int):
        """Duration in ns (int), or None for a node that takes no time at all."""


@runtime_checkable
class Foldable(Protocol):
    """A compute model or memory backend that says whether runs using it may fold: ``foldable`` (a class
    attribute or a property) is true only when its answers for a rank do not depend on the rank's number.
    Without it, runs are not folded."""

    foldable: bool


@runtime_checkable
class CommAwareCompute(Protocol):
    """A compute model whose node times depend on the rank's communication running beside the node
    (``reads_comm_in_flight`` true: the gpu model's contention). The workload then times each COMP node once
    every event of its nanosecond has run, so that order of those events does not decide it."""

    reads_comm_in_flight: bool


# ------------------------------------------------------------------ one helper per optional capability


def delay_function(network):
    """``network.delay_ns`` when the network is a :class:`StatelessNetwork`, else None."""
    return network.delay_ns if isinstance(network, StatelessNetwork) else None


def symmetry_dims(network):
    """The network's per-dimension symmetry kinds (a list) when it is a :class:`SymmetricNetwork` that can fold,
    else None (the run does not fold)."""
    kinds = network.symmetry_dims() if isinstance(network, SymmetricNetwork) else None
    return None if kinds is None else list(kinds)


def network_stats(network):
    """The network's ``stats()`` after a run (:class:`NetworkWithStats`), or an empty dict."""
    return network.stats() if isinstance(network, NetworkWithStats) else {}


def in_switch_query(network):
    """``network.in_switch`` (dimension -> :class:`InSwitchSpec` or None) for a :class:`SwitchNetwork`, else
    None (no dimension is a switch)."""
    return network.in_switch if isinstance(network, SwitchNetwork) else None


def link_load_recorder(network):
    """``network.record_link_load`` for a :class:`LinkLoadRecorder`, else None."""
    return network.record_link_load if isinstance(network, LinkLoadRecorder) else None


def is_foldable(backend):
    """Whether a compute model or memory backend declares rank-independent answers (:class:`Foldable`)."""
    return isinstance(backend, Foldable) and bool(backend.foldable)


def reads_comm_in_flight(model):
    """Whether a compute model's times depend on the communication in flight (:class:`CommAwareCompute`)."""
    return isinstance(model, CommAwareCompute) and bool(model.reads_comm_in_flight)


class WorkloadFormat(Protocol):
    """A trace format: one file (or more) per rank. Registered as an object (not a factory)."""

    def matches(self, prefix: str) -> bool:
        """Whether this format reads the workload named ``prefix``."""

    # Optional: ``prepare(context)`` is called once before the first ``load_rank`` with the
    # RunContext (the network's ``npus_per_dim`` and ``total_npus``, the run ``options``).

    def load_rank(self, prefix: str, rank: int):
        """Return ``(path, nodes)`` for ``rank``: its file and its list of Chakra nodes."""

    # Optional: ``rank_digest(prefix, rank) -> (path, digest)``, a cheap fingerprint of the rank's
    # trace (e.g. a hash of its file). Ranks with equal digests share one parsed trace and its
    # dependency graph, which the run only reads (data-parallel traces are often identical).
    # Optional: ``ranks(prefix) -> int | None``, the workload's rank count (``--platform`` fits its nodes to it).
    # Optional: ``compact(prefix) -> CompactWorkload | None`` with ``load_trace(path) -> nodes``: the workload is
    # one trace per class of ranks, read once each, instead of ``load_rank`` per rank.


class CompactWorkload(Protocol):
    """A workload stored as one trace per class of ranks and a rank map (the workload_compact plugin's
    ``PREFIX.workload.json``). Rank ``q`` runs its class representative's trace relabelled for it."""

    path: str  #: the file errors name
    npus: int
    symmetry: object  #: an :class:`astra_sim.symmetry.RankSymmetry`: the classes, which folding may use
    traces: dict  #: ``{representative rank: trace path}``
    comm_groups: str | None  #: its groups file, used when the run names none

    def relabeller(self, groups):
        """An object whose ``nodes_for(nodes, offsets)`` gives a representative's ``nodes`` as the rank at
        ``offsets`` (``symmetry.offsets(rank)``) runs them, communicators mapped through ``groups``."""


class CustomCollectiveFormat(Protocol):
    """A file format for custom collective algorithms (MSCCL-IR XML, Chakra-ET prefixes, ...).

    Registered as ``CollectiveAlgorithmSpec(topology="custom", factory=<format>)``. When the system
    config names a custom implementation (``all-reduce-implementation-custom: [path]`` or
    ``per-node-custom-implementation``), the kernel asks every custom format ``matches(path)`` and
    loads the path with the first that says yes.
    """

    def matches(self, path: str) -> bool:
        """Whether this format reads ``path`` (a file, or a prefix of per-rank files)."""

    def load(self, path: str, context) -> "CustomCollective":
        """Read and check the algorithm once per run; ``context`` is the RunContext."""


class CustomCollective(Protocol):
    def make_algorithm(self, com_type: str, rank: int, position: int, group_npus, data_size: int):
        """The one-phase algorithm object for ``rank`` (its ``position`` in the communicator;
        ``group_npus``: the group's NPUs in the order given, or None for all NPUs). The object has
        the same interface as a native algorithm (``bind``, ``run_init``, ``run_general``,
        ``run_received``, ``data_size``, ``final_data_size``) and calls ``finish()`` when done."""


@dataclass(frozen=True)
class CollectiveAlgorithmSpec:
    """A collective algorithm the system config can name.

    ``topology``: which logical topology the algorithm walks: ``"ring"`` (one
    ring per network dimension), ``"one"`` (one ring over every NPU), ``"custom"`` for a custom
    collective format (then ``factory`` is a :class:`CustomCollectiveFormat`), or a name of the algorithm's
    own (``"tree"``) with ``dimension_topology`` building it (a :class:`DimensionTopology`). ``factory(com_type, rank,
    topology, data_size, direction, window)`` returns an algorithm object with
    ``bind``, ``run_init``, ``run_general``, ``run_received``, ``data_size`` and
    ``final_data_size`` (see :mod:`astra_sim.system.collectives`).
    ``takes_window``: the name may carry a numeric suffix (``direct4``).
    ``whole_group``: on a communicator group that is a subset of the NPUs, a system config listing
    several implementations normally falls back to ``ring`` (the reference's rule); an algorithm that
    prices the whole group itself (e.g. ``nccl``) sets this and is kept when it is the first listed.
    ``symmetry``: which relabellings of its ranks leave what every rank does unchanged (relabelled), so
    that a run may simulate one rank per class (the astra-folding plugin): ``"rotation"`` (it only
    looks at each rank's neighbours on its ring: any rotation of the ring), ``"any"`` (only at the
    group's size and shape: any permutation of a dimension's coordinates), or None (it depends on each
    rank's position, e.g. halving-doubling partners or tree roles: runs using it are not folded).
    """

    topology: str
    factory: Callable
    takes_window: bool = False
    whole_group: bool = False
    symmetry: str | None = None
    #: False for an algorithm that times a collective from a model without sending messages (NCCL's cost
    #: model): its message tags never meet, which a folded run then need not keep apart.
    exchanges_messages: bool = True
    #: On a communicator group whose NPUs differ in one network dimension only, a multi-dimensional
    #: implementation list naming this algorithm for that dimension runs it there (instead of the reference's
    #: fallback to ``ring``). Only ``inSwitch`` sets it, so the reference's configurations are unchanged.
    per_dimension_groups: bool = False
    #: On a communicator group spanning several network dimensions, with this algorithm listed for one of them:
    #: the :class:`GroupPlanner` that plans the group (``inSwitch``'s hierarchical reduction), instead of the
    #: reference's fallback to ``ring``.
    group_planner: "GroupPlanner | None" = None
    #: The algorithm's own topology of each network dimension (a :class:`DimensionTopology`; e.g.
    #: collectives_native's double binary trees); None walks ``topology``'s rings. Such an algorithm does not run
    #: on a communicator group that is a subset of the NPUs.
    dimension_topology: "DimensionTopology | None" = None


class DimensionTopology(Protocol):
    """Builds an algorithm's topology of one network dimension (:class:`CollectiveAlgorithmSpec`'s
    ``dimension_topology``)."""

    def __call__(self, rank: int, npus: int, stride: int, last: bool):
        """``rank``'s topology along a dimension of ``npus`` NPUs ``stride`` apart (``last``: the implementation
        list's last dimension). It has ``num_nodes()`` and ``basic_topology(dim, com_type)``, which gives each
        phase of a collective what its algorithm object walks (asked once per phase, in order)."""


class GroupPlanner(Protocol):
    """How an algorithm runs on a communicator group that spans several network dimensions (a
    :class:`CollectiveAlgorithmSpec`'s ``group_planner``; e.g. the network_analytical plugin's in-switch
    aggregation trees)."""

    def plan(self, rank: int, group, com_type: str, impls: list, dims: list, npus_per_dim: list, warn):
        """``rank``'s plan for ``group`` (``group_id``, ``npus``): ``(topology, implementations, involved
        dimensions)``, as the system layer walks a collective (``topology`` has ``num_dimensions()``,
        ``nodes_in_dimension(d)`` and ``basic_topology(d, com_type)``; ``impls`` is the system config's
        ``[(spec, window)]`` per dimension; ``dims`` the dimensions the group spans). None runs ``ring``
        (say why with ``warn``)."""


@dataclass(frozen=True)
class InSwitchSpec:
    """What the switch of one network dimension offers the ``inSwitch`` collective algorithm.

    A network backend that has switch dimensions answers ``in_switch(dim)`` with one of these (None for a
    dimension that is not a switch). Rates are bytes per ns, times ns, sizes bytes.
    ``can_reduce``: the switch reduces (False: ``inSwitch`` is refused on the dimension).
    ``line_rate``: the NPU <-> switch link bandwidth. ``reduce_rate``: the switch's reduction throughput
    for one collective, in reduced (output) bytes per ns. ``latency_ns``: added once per reduction.
    ``buffer_bytes``: the switch's reduction buffer per collective (0: unlimited); a buffer smaller than
    ``reduce_rate`` x the credit loop (two link latencies + ``latency_ns``) caps the rate at buffer / loop.
    ``link_latency_ns``: one NPU <-> switch link's latency.
    """

    can_reduce: bool
    line_rate: float
    reduce_rate: float
    latency_ns: int = 0
    buffer_bytes: int = 0
    link_latency_ns: float = 0.0
