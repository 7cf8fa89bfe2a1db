"""The interfaces backends implement; plugins register factories for them. The kernel calls these objects
directly on the hot path, never through hooks."""

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
    #: ``schedule_for_rank(rank, delay_ns, fn, arg)``: run ``fn(arg)`` through the rank's system layer, batched per
    #: tick like the reference's ``Sys::register_event`` (where the reference books an event on the rank).
    schedule_for_rank: Callable = None
    #: ``comm_in_flight(rank) -> int``: collectives and sends the rank runs now (a compute model's contention).
    comm_in_flight: Callable = None
    #: ``comm_nodes_in_flight(rank) -> [EtNode]``: those operations as trace nodes (e.g. their ``comm_sms``).
    comm_nodes_in_flight: Callable = None
    #: ``{group id: [NPU, ...]}`` of ``--comm-group-configuration`` (a collective's ``pg_name`` is the id); not the
    #: groups a trace declares in its own METADATA nodes.
    comm_groups: dict = field(default_factory=dict)
    #: ``rank_nodes(rank) -> {node id: EtNode}``: a rank's trace (once the run is built).
    rank_nodes: Callable = None
    #: ``add_node_observer(fn)``: ``fn(rank, node, start_ns, end_ns)`` per finished node (keep it cheap).
    add_node_observer: Callable = None


class NetworkBackend(Protocol):
    """A network model; ``npus_per_dim`` fixes the number of simulated NPUs. Optional capabilities are the protocols
    below, each asked for through one helper (:func:`delay_function`, :func:`symmetry_dims`, ...); setting a
    capability's attribute to None withdraws it."""

    npus_per_dim: list

    def send(self, src: int, dst: int, size_bytes: int, fn, arg) -> None:
        """Deliver a message: schedule ``fn(arg)`` on the engine at its arrival time."""

    def describe(self) -> dict:
        """Settings for the report (topology, bandwidths, latencies, units in keys)."""


@runtime_checkable
class StatelessNetwork(Protocol):
    """A delay that is a closed form of the endpoints and the size: the kernel memoises it per ``(src, dst, size)``
    and schedules arrivals itself, skipping ``send()``."""

    def delay_ns(self, src: int, dst: int, size_bytes: int) -> int:
        """The message's delay in ns (an int)."""


@runtime_checkable
class SymmetricNetwork(Protocol):
    """Delays that depend only on the endpoints (no state shared between messages, unless a
    :class:`LinkFoldingNetwork`), with the relabellings of each dimension that keep them: runs on it may fold."""

    def symmetry_dims(self) -> list | None:
        """Per dimension ``"rotation"`` (a ring: only rotations keep every delay) or ``"any"`` (a switch, a fully
        connected dimension: every permutation does); None when this instance cannot fold."""


@runtime_checkable
class LinkFoldingNetwork(Protocol):
    """A :class:`SymmetricNetwork` whose messages share links, told the rank symmetry of a folded run: each
    simulated message then stands for its images, each link's queue for its orbit's."""

    def fold_links(self, symmetry) -> None:
        """Fold the links by ``symmetry`` (a :class:`astra_sim.symmetry.RankSymmetry`), or raise
        :class:`astra_sim.errors.FoldAbandoned` saying why not."""


@runtime_checkable
class NetworkWithStats(Protocol):
    """A network that reports what happened (per-link bytes, busy time, ...) after the run."""

    def stats(self) -> dict:
        """The report's ``network_stats``."""


@runtime_checkable
class SwitchNetwork(Protocol):
    """A network with switch dimensions the ``inSwitch`` collective can reduce in."""

    def in_switch(self, dim: int) -> "InSwitchSpec | None":
        """The switch of dimension ``dim``, or None when it is not a switch."""


@runtime_checkable
class LinkLoadRecorder(Protocol):
    """A network whose links can record their use over time (the timelines' link-load tracks)."""

    def record_link_load(self, load) -> None:
        """Add every link's busy intervals to ``load`` (an :class:`astra_analysis.links.LinkLoad`)."""


class MemoryBackend(Protocol):
    """Remote (expanded) memory for MEM_LOAD / MEM_STORE nodes; :class:`Foldable` when every NPU's accesses are
    independent of the others' (no shared server)."""

    def issue(self, rank: int, is_store: bool, size_bytes: int, fn, arg) -> None:
        """Schedule ``fn(arg)`` when the access completes; raise AstraError if unsupported."""


class ComputeModel(Protocol):
    """Times the GPU's COMP nodes; :class:`Foldable` when a node's time does not depend on the rank's number (only
    on the node and the rank's own state)."""

    def compute_time_ns(self, node, rank: int):
        """Duration in ns (int), or None for a node that takes no time at all."""


@runtime_checkable
class Foldable(Protocol):
    """A compute model or memory backend whose answers for a rank do not depend on the rank's number when
    ``foldable`` (a class attribute or property) is true; without it, runs are not folded."""

    foldable: bool


@runtime_checkable
class CommAwareCompute(Protocol):
    """A compute model whose node times depend on the communication running beside the node (the gpu model's
    contention): the workload times each COMP node once every event of its nanosecond has run, so that the order of
    those events does not decide it."""

    reads_comm_in_flight: bool


# ------------------------------------------------------------------ one helper per optional capability


def delay_function(network):
    """``network.delay_ns`` for a :class:`StatelessNetwork`, else None."""
    return network.delay_ns if isinstance(network, StatelessNetwork) else None


def symmetry_dims(network):
    """The per-dimension symmetry kinds of a :class:`SymmetricNetwork` that can fold, else None."""
    kinds = network.symmetry_dims() if isinstance(network, SymmetricNetwork) else None
    return None if kinds is None else list(kinds)


def network_stats(network):
    """``network.stats()`` of a :class:`NetworkWithStats`, else an empty dict."""
    return network.stats() if isinstance(network, NetworkWithStats) else {}


def in_switch_query(network):
    """``network.in_switch`` of a :class:`SwitchNetwork`, else None (no dimension is a switch)."""
    return network.in_switch if isinstance(network, SwitchNetwork) else None


def link_load_recorder(network):
    """``network.record_link_load`` of a :class:`LinkLoadRecorder`, else None."""
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

    # Optional: ``prepare(context)``, called once with the RunContext before the first ``load_rank``.

    def load_rank(self, prefix: str, rank: int):
        """``(path, nodes)`` of ``rank``: its file and its list of Chakra nodes."""

    # Optional: ``rank_digest(prefix, rank) -> (path, digest)``, a cheap fingerprint (e.g. a hash of the file):
    # ranks with equal digests share one parsed trace and dependency graph (data-parallel traces often are equal).
    # Optional: ``ranks(prefix) -> int | None``, the workload's rank count (``--platform`` fits its nodes to it).
    # Optional: ``compact(prefix) -> CompactWorkload | None`` with ``load_trace(path) -> nodes``: one trace per class
    # of ranks, read once each, instead of ``load_rank`` per rank.


class CompactWorkload(Protocol):
    """One trace per class of ranks and a rank map (the workload_compact plugin's ``PREFIX.workload.json``): rank
    ``q`` runs its class representative's trace relabelled for it."""

    path: str  #: the file errors name
    npus: int
    symmetry: object  #: an :class:`astra_sim.symmetry.RankSymmetry`: the classes, which folding may use
    traces: dict  #: ``{representative rank: trace path}``
    comm_groups: str | None  #: its groups file, used when the run names none

    def relabeller(self, groups):
        """An object whose ``nodes_for(nodes, offsets)`` gives a representative's ``nodes`` as the rank at
        ``offsets`` (``symmetry.offsets(rank)``) runs them, communicators mapped through ``groups``."""


class CustomCollectiveFormat(Protocol):
    """A file format of custom collective algorithms (MSCCL-IR XML, Chakra-ET prefixes, ...), registered as
    ``CollectiveAlgorithmSpec(topology="custom", factory=<format>)``. A path the system config names
    (``all-reduce-implementation-custom: [path]``, ``per-node-custom-implementation``) is loaded by the first
    format whose ``matches(path)`` says yes."""

    def matches(self, path: str) -> bool:
        """Whether this format reads ``path`` (a file, or a prefix of per-rank files)."""

    def load(self, path: str, context) -> "CustomCollective":
        """Read and check the algorithm once per run; ``context`` is the RunContext."""


class CustomCollective(Protocol):
    def make_algorithm(self, com_type: str, rank: int, position: int, group_npus, data_size: int):
        """The one-phase algorithm of ``rank`` (``position`` in the communicator; ``group_npus`` the group's NPUs
        in order, or None for all), with a native algorithm's interface; it calls ``finish()`` when done."""


@dataclass(frozen=True)
class CollectiveAlgorithmSpec:
    """A collective algorithm the system config can name.

    ``topology``: the logical topology it walks: ``"ring"`` (one ring per network dimension), ``"one"`` (one ring
    over every NPU), ``"custom"`` (``factory`` is a :class:`CustomCollectiveFormat`), or a name of its own
    (``"tree"``) built by ``dimension_topology``. ``factory(com_type, rank, topology, data_size, direction, window)``
    returns an algorithm object (``bind``, ``run_init``, ``run_general``, ``run_received``, ``data_size``,
    ``final_data_size``: :mod:`astra_sim.system.collectives`). ``takes_window``: the name may carry a numeric
    suffix (``direct4``). ``whole_group``: on a communicator group that is a subset of the NPUs, a list of several
    implementations falls back to ``ring`` (the reference's rule), but an algorithm that prices the whole group
    itself (``nccl``) is kept when listed first. ``symmetry``: the relabellings of its ranks that leave what every
    rank does unchanged, so that a run may fold: ``"rotation"`` (it looks only at each rank's ring neighbours),
    ``"any"`` (only at the group's size and shape), or None (it depends on each rank's position, e.g.
    halving-doubling partners or tree roles: not folded).
    """

    topology: str
    factory: Callable
    takes_window: bool = False
    whole_group: bool = False
    symmetry: str | None = None
    #: False for an algorithm timed by a model without messages (NCCL's cost model): its tags never meet, which a
    #: folded run need not keep apart.
    exchanges_messages: bool = True
    #: A group whose NPUs differ in one network dimension only runs this algorithm when the list names it for that
    #: dimension (instead of the reference's fallback to ``ring``); only ``inSwitch`` sets it.
    per_dimension_groups: bool = False
    #: What plans a group spanning several network dimensions when the list names this algorithm for one of them
    #: (``inSwitch``'s hierarchical reduction), instead of the reference's fallback to ``ring``.
    group_planner: "GroupPlanner | None" = None
    #: The algorithm's own topology of each network dimension (collectives_native's double binary trees); None
    #: walks ``topology``'s rings. Such an algorithm does not run on a group that is a subset of the NPUs.
    dimension_topology: "DimensionTopology | None" = None


class DimensionTopology(Protocol):
    """Builds an algorithm's topology of one network dimension (``CollectiveAlgorithmSpec.dimension_topology``)."""

    def __call__(self, rank: int, npus: int, stride: int, last: bool):
        """``rank``'s topology along a dimension of ``npus`` NPUs ``stride`` apart (``last``: the list's last
        dimension), with ``num_nodes()`` and ``basic_topology(dim, com_type)`` (asked once per phase, in order)."""


class GroupPlanner(Protocol):
    """How an algorithm runs on a communicator group spanning several network dimensions
    (``CollectiveAlgorithmSpec.group_planner``; e.g. network_analytical's in-switch aggregation trees)."""

    def plan(self, rank: int, group, com_type: str, impls: list, dims: list, npus_per_dim: list, warn):
        """``rank``'s plan for ``group``: ``(topology, implementations, involved dimensions)`` as the system layer
        walks a collective (``impls``: the config's ``[(spec, window)]`` per dimension; ``dims``: those the group
        spans). None runs ``ring`` (say why with ``warn``)."""


@dataclass(frozen=True)
class InSwitchSpec:
    """What the switch of one network dimension offers ``inSwitch`` (a :class:`SwitchNetwork`'s answer).

    Rates in bytes per ns, times ns, sizes bytes. ``can_reduce``: False refuses ``inSwitch`` there. ``line_rate``:
    the NPU <-> switch link bandwidth. ``reduce_rate``: the reduction throughput of one collective, in output bytes
    per ns. ``latency_ns``: added once per reduction. ``buffer_bytes``: the reduction buffer per collective (0:
    unlimited); one smaller than ``reduce_rate`` x the credit loop (two link latencies + ``latency_ns``) caps the
    rate at buffer / loop. ``link_latency_ns``: one NPU <-> switch link's latency.
    """

    can_reduce: bool
    line_rate: float
    reduce_rate: float
    latency_ns: int = 0
    buffer_bytes: int = 0
    link_latency_ns: float = 0.0
