"""The system layer's collectives in a state folded in time (:mod:`astra_folding.time_fold`): how they are written
canonically and how a jump moves them on.

*What runs.* A collective is a :class:`~astra_sim.system.sys.DataSet` (its trace node, chunk counts, creation time,
the workload's notifier) and one :class:`~astra_sim.system.sys.Stream` per chunk, waiting or running in the rank's
queues (``active_streams``, ``running_streams``), each with its phases' algorithms. Only timed phases are written
(:data:`TIMED_ALGORITHMS`: NCCL's model, ``--platform-collective nccl``, every GPU platform's default): a phase
that waits a time it fixed when it started and sends nothing. A phase of packets (the native ring, tree, ...) keeps
per-packet state and messages whose handlers are its own: the state is then not compared (no jump there).

*Written relative.* Times relative to now (a dataset's creation, its known end), node ids relative to the rank's
finished count (as every node id of the state), a stream's priority relative to the rank's counter (``LIFO`` and
``FIFO`` number streams from it; a comparison of two priorities is all that reads them), and the stream counters
(``num_streams`` of the rank and of each communicator group, ``priority_counter``) not at all: they only number
streams, and a stream's number only becomes the tag of its packets, which a timed phase never sends. A queue's
allocators (cyclic) are compared as they are.

*Why the repeats are then determined.* A timed phase's time is a function of what it was made from (type, sizes,
ranks in its ring, the topology object its plan cached, the run's NCCL configuration; all compared), of its
trace node's attributes (``comm_sms``: the node is named by the state, so its signature is compared) and of the
gpu model's contention at its start (the rank's compute kernels running then: compared running nodes, whose
``(start, end)`` the model keeps in ``_running``; :func:`move_contention` moves them with the jump). Its end is
an event of the rank's batches (compared, relative). What the workload does when the collective ends reads the
elapsed time (``now - creation``: relative) and the node id (relative). The counters move on by ``k`` times their
change over the period, which is what ``k`` repeats add (each repeat makes the period's streams again). So two
states equal so written differ by ``σ`` in the collectives too, and the module docstring's argument holds.
"""

from __future__ import annotations

from functools import partial


class Incomparable(Exception):
    """A piece of the state that the time fold cannot compare (the message says which)."""


#: the timed phases a compared state may hold, by (module, class name): NCCL's model (astra_gpu_model.nccl). A class
#: is listed only where its time is shown a function of the compared state (the module docstring)
TIMED_ALGORITHMS = frozenset({("astra_gpu_model.nccl", "NcclCollective")})
#: the workload's notifier of a collective (RankWorkload._collective's closure), by qualified name
NOTIFIER = "RankWorkload._collective.<locals>.done"


def _notifier_node(notifier):
    """The node id the workload's collective notifier finishes (its ``node_id`` default, or the keyword a jump gave
    it), or raise :class:`Incomparable` when it is not that notifier."""
    base, node_id = notifier, None
    if isinstance(notifier, partial):
        base, node_id = notifier.func, notifier.keywords.get("node_id")
    if getattr(base, "__qualname__", None) != NOTIFIER:
        raise Incomparable("a collective notifies something other than its rank's workload")
    return node_id if node_id is not None else base.__defaults__[0]


def _known(algorithm):
    cls = algorithm.__class__
    if (cls.__module__, cls.__name__) not in TIMED_ALGORITHMS:
        raise Incomparable(f"a collective phase of {cls.__name__} is running (packets, or a time not shown to be a "
                           "function of the compared state)")


class CollectiveCanon:
    """Writes one rank's collectives (its streams, datasets and their ends) for
    :meth:`astra_folding.time_fold.TimeFolder._rank`. ``node(rank, node_id)`` writes a node id (relative, noted)."""

    def __init__(self, node, now):
        self.node = node
        self.now = now
        self.datasets = {}

    def algorithm(self, a):
        _known(a)
        return (a.__class__.__name__, a.com_type, a.data_size, a.final_data_size, a.nodes_in_ring, id(a.topo),
                a.time_ns, id(getattr(a, "config", None)), getattr(a, "choice", None))

    def dataset(self, rank, ds):
        seen = self.datasets.get(id(ds))
        if seen is not None:
            return ("same", seen)
        self.datasets[id(ds)] = len(self.datasets)
        if ds.node_id < 0:
            raise Incomparable("a collective without a trace node is running")
        if ds.notifier is not None and _notifier_node(ds.notifier) != ds.node_id:
            raise Incomparable("a collective notifies another node than its own")
        now = self.now
        return (self.node(rank, ds.node_id), ds.total_streams, ds.finished_streams, ds.creation_ns - now, ds.active,
                ds.notifier is None, ds.timed_streams, ds.timed_end_ns - now if ds.timed_streams else ds.timed_end_ns)

    def system(self, sys):
        """The rank's queues: per queue its streams in order (priority relative to the counter, phases, dataset),
        the running counts, and the running collectives by node."""
        rank, counter = sys.rank, sys.priority_counter
        queues = []
        for vnet, queue in enumerate(sys.active_streams):
            if queue:
                queues.append((vnet, tuple(
                    (s.priority - counter, s.initialized, s.current_queue_id, self.algorithm(s.algorithm),
                     tuple((q, self.algorithm(a)) for q, a in s.phases), self.dataset(rank, s.dataset))
                    for s in queue)))
        collectives = tuple(sorted((self.node(rank, n), self.dataset(rank, ds)) for n, ds in sys.collectives.items()))
        return tuple(queues), tuple(sys.running_streams), collectives

    @staticmethod
    def timed_out(algorithm):
        """Where the stream of a timed phase whose end is pending stands: (queue, place in it)."""
        _known(algorithm)
        stream = algorithm.stream
        if stream.algorithm is not algorithm:
            raise Incomparable("a timed collective phase ends that its stream no longer runs")
        queue = algorithm.sys.active_streams[stream.current_queue_id]
        return stream.current_queue_id, next(i for i, s in enumerate(queue) if s is stream)


def counters(sys, w):
    """The stream counters of a rank (see the module docstring): accumulators of a jump."""
    return (sys.num_streams, sys.priority_counter, tuple(g.num_streams for g in w.comm_groups.values()))


def move_system(sys, w, k, dt, d, before, after):
    """Move a rank's collectives on by ``k`` periods of ``dt / k`` ns and ``d / k`` nodes: datasets (node, creation,
    known end, notifier), the running collectives' index, stream priorities and the counters (``before`` and
    ``after``: :func:`counters` at the two states)."""
    d_prio = k * (after[1] - before[1])
    moved = set()

    def move(ds):
        if id(ds) in moved:
            return
        moved.add(id(ds))
        ds.node_id += d
        ds.creation_ns += dt
        if ds.timed_streams:
            ds.timed_end_ns += dt
        if ds.notifier is not None:
            base = ds.notifier.func if isinstance(ds.notifier, partial) else ds.notifier
            ds.notifier = partial(base, node_id=ds.node_id)

    for queue in sys.active_streams:
        for stream in queue:
            stream.priority += d_prio
            move(stream.dataset)
    for ds in sys.collectives.values():
        move(ds)
    sys.collectives = {n + d: ds for n, ds in sys.collectives.items()}
    sys.num_streams += k * (after[0] - before[0])
    sys.priority_counter += d_prio
    for group, a, b in zip(w.comm_groups.values(), before[2], after[2]):
        group.num_streams += k * (b - a)


def move_contention(contention, dt):
    """The measured contention model's running compute kernels ``(start, end)`` per rank (``_running``, read by a
    timed collective starting beside them) moved by ``dt``: those still running are the compared running nodes; those
    ended stay ended (``end + dt`` is at most the new now, and only kernels running past now are read)."""
    running = getattr(contention, "_running", None)
    if running:
        for rank, kernels in running.items():
            kernels[:] = [(a + dt, b + dt) for a, b in kernels]
