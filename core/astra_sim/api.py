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
    #: ``schedule_for_rank(rank, delay_ns, fn, arg)``: an event on the rank, as the reference's ``Sys::register_event``
    schedule_for_rank: Callable = None
    #: ``comm_in_flight(rank) -> int``: collectives and sends the rank runs now (a compute model's contention).
    comm_in_flight: Callable = None
    #: ``comm_nodes_in_flight(rank) -> [EtNode]``: those operations as trace nodes (e.g. their ``comm_sms``).
    comm_nodes_in_flight: Callable = None
    #: ``{group id (a collective's pg_name): [NPU, ...]}`` of ``--comm-group-configuration`` (not a trace's own)
    comm_groups: dict = field(default_factory=dict)
    #: ``rank_nodes(rank) -> {node id: EtNode}``: a rank's trace (once the run is built).
    rank_nodes: Callable = None
    #: ``add_node_observer(fn)``: ``fn(rank, node, start_ns, end_ns)`` per finished node (keep it cheap).
    add_node_observer: Callable = None


class NetworkBackend(Protocol):
    """A network model (``npus_per_dim``: the simulated NPUs). Its optional capabilities are the protocols below, each
    asked for through one helper; setting a capability's attribute to None withdraws it."""

    npus_per_dim: list

    def send(self, src: int, dst: int, size_bytes: int, fn, arg) -> None:
        """Deliver a message: schedule ``fn(arg)`` on the engine at its arrival time."""

    def describe(self) -> dict:
        """Settings for the report (topology, bandwidths, latencies, units in keys)."""


@runtime_checkable
class StatelessNetwork(Protocol):
    """A closed-form delay, memoised per ``(src, dst, size)``: the kernel schedules arrivals, skipping ``send``."""

    def delay_ns(self, src: int, dst: int, size_bytes: int) -> int:
        """The message's delay in ns (an int)."""


@runtime_checkable
class SymmetricNetwork(Protocol):
    """Delays that depend only on the endpoints (no shared state but a :class:`LinkFoldingNetwork`'s), with the
    relabellings that keep them: runs on it may fold."""

    def symmetry_dims(self) -> list | None:
        """Per dimension ``"rotation"`` (a ring) or ``"any"`` (a switch: any permutation); None: cannot fold."""


@runtime_checkable
class LinkFoldingNetwork(Protocol):
    """A :class:`SymmetricNetwork` with shared links, told a folded run's symmetry: a message stands for its images."""

    def fold_links(self, symmetry) -> None:
        """Fold the links by ``symmetry``, or raise :class:`astra_sim.errors.FoldAbandoned` saying why not."""


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
    """Remote memory for MEM_LOAD / MEM_STORE nodes; :class:`Foldable` without a server the NPUs share."""

    def issue(self, rank: int, is_store: bool, size_bytes: int, fn, arg) -> None:
        """Schedule ``fn(arg)`` when the access completes; raise AstraError if unsupported."""


class ComputeModel(Protocol):
    """Times the GPU's COMP nodes; :class:`Foldable` when a node's time does not depend on the rank's number."""

    def compute_time_ns(self, node, rank: int):
        """Duration in ns (int), or None for a node that takes no time at all."""


@runtime_checkable
class Foldable(Protocol):
    """A backend whose answers do not depend on the rank's number when ``foldable``; without it runs do not fold."""

    foldable: bool


@runtime_checkable
class CommAwareCompute(Protocol):
    """A compute model whose times depend on the communication beside a node (contention): a COMP node is timed once
    every event of its nanosecond has run, so that their order does not decide it."""

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

    # Optional: ``rank_digest(prefix, rank) -> (path, digest)``: ranks with equal digests share one parsed trace;
    # ``ranks(prefix)``: the rank count (``--platform`` fits its nodes to it); ``compact(prefix)`` and
    # ``load_trace(path)``: a :class:`CompactWorkload`, one trace per class of ranks instead of one per rank.


class CompactWorkload(Protocol):
    """One trace per class of ranks and a rank map (``PREFIX.workload.json``): a rank runs its class's relabelled."""

    path: str  #: the file errors name
    npus: int
    symmetry: object  #: an :class:`astra_folding.symmetry.RankSymmetry`: the classes, which folding may use
    traces: dict  #: ``{representative rank: trace path}``
    comm_groups: str | None  #: its groups file, used when the run names none

    def relabeller(self, groups):
        """An object whose ``nodes_for(nodes, offsets)`` relabels a representative's nodes for the rank at offsets."""


class CustomCollectiveFormat(Protocol):
    """A file format of custom collectives (MSCCL-IR XML, ...), registered as ``CollectiveAlgorithmSpec(topology=
    "custom", factory=<format>)``: a path the system config names is loaded by the first format that ``matches`` it."""

    def matches(self, path: str) -> bool:
        """Whether this format reads ``path`` (a file, or a prefix of per-rank files)."""

    def load(self, path: str, context) -> "CustomCollective":
        """Read and check the algorithm once per run; ``context`` is the RunContext."""


class CustomCollective(Protocol):
    def make_algorithm(self, com_type: str, rank: int, position: int, group_npus, data_size: int):
        """``rank``'s one-phase algorithm (a native one's interface; ``group_npus`` None: all NPUs)."""


@dataclass(frozen=True)
class CollectiveAlgorithmSpec:
    """A collective algorithm the system config can name (fields in docs/plugins/hooks.md).

    ``topology``: ``"ring"``, ``"one"``, ``"custom"`` (``factory`` is a :class:`CustomCollectiveFormat`) or its own
    (``"tree"``, built by ``dimension_topology``). ``whole_group``: kept first on a subset group where several listed
    algorithms fall back to ``ring`` (the reference's rule), as it prices the group itself (``nccl``). ``symmetry``:
    the relabellings leaving what every rank does unchanged, so that a run may fold: ``"rotation"`` (it looks only at
    ring neighbours), ``"any"`` (only at the group's size and shape), ``"xor"`` (partners are the index XOR 2^k:
    halving-doubling; flips of index bits keep it) or None (rank positions matter: tree roles).
    """

    topology: str
    factory: Callable
    takes_window: bool = False
    whole_group: bool = False
    symmetry: str | None = None
    #: False for one timed without messages (NCCL's cost model): tags a folded run need not keep apart
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
        """``rank``'s topology along ``npus`` NPUs ``stride`` apart, with ``num_nodes`` and ``basic_topology``."""


class GroupPlanner(Protocol):
    """How an algorithm runs on a communicator group spanning several network dimensions
    (``CollectiveAlgorithmSpec.group_planner``; e.g. network_analytical's in-switch aggregation trees)."""

    def plan(self, rank: int, group, com_type: str, impls: list, dims: list, npus_per_dim: list, warn):
        """``rank``'s ``(topology, implementations, involved dimensions)`` for ``group``; None runs ``ring`` (say why
        with ``warn``)."""


@dataclass(frozen=True)
class InSwitchSpec:
    """What the switch of one network dimension offers ``inSwitch`` (bytes per ns, ns, bytes): ``line_rate`` and
    ``link_latency_ns`` of an NPU <-> switch link; ``reduce_rate``: one collective's reduction throughput (output bytes
    per ns); ``latency_ns`` per reduction; ``buffer_bytes`` per collective (0: unlimited), which caps the rate at
    buffer / credit loop (two link latencies + ``latency_ns``) when smaller than ``reduce_rate`` x the loop.
    """

    can_reduce: bool
    line_rate: float
    reduce_rate: float
    latency_ns: int = 0
    buffer_bytes: int = 0
    link_latency_ns: float = 0.0
