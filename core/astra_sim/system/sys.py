"""One rank's system layer (the reference's ``Sys``): a collective in chunks (streams), each in phases per logical
dimension, on per-dimension queues running at most ``ceil(active-chunks-per-dimension / queues)`` streams; endpoint
and reduction delays; events batched per tick as the reference does. ``comm-streams: per-communicator`` (not the
reference's) gives each group queues of its own, so that overlapping groups do not wait for each other's chunks.
"""

from __future__ import annotations

import math
from collections import deque

from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError, SimulationError
from astra_sim.system.collectives import (
    ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, GROUP_FALLBACK_ALGORITHM, REDUCE_SCATTER, TimedCollective,
)
from astra_sim.system.frontend import (
    COLLECTIVE_TAG_BASE, NATIVE_TAG_BASE, RENDEZVOUS_BYTES, RENDEZVOUS_TAG_BASE,
)
from astra_sim.system.topology import (
    ANTICLOCKWISE, CLOCKWISE, DIM_LOCAL, GeneralComplexTopology, RingTopology, differing_dims,
)


class DataSet:
    """All chunks of one collective; tells the workload when the last one ends."""

    __slots__ = ("total_streams", "finished_streams", "notifier", "creation_ns", "active", "node_id",
                 "timed_streams", "timed_end_ns")
    finished_streams: int  # typed for mypyc (tools/compile_core.py), as the hot attributes below

    def __init__(self, total_streams, creation_ns, node_id=-1):
        self.node_id = node_id  # the collective's trace node (timelines label its phases with it)
        self.total_streams = total_streams
        self.finished_streams = 0
        self.notifier = None
        self.creation_ns = creation_ns
        self.active = True
        # streams whose last phase is a running TimedCollective, and the latest of their ends (end_ns)
        self.timed_streams = 0
        self.timed_end_ns = 0

    def end_ns(self):
        """The collective's end once every chunk runs its last phase as a :class:`TimedCollective` (NCCL's model,
        whose end is fixed when it starts); None until then."""
        return self.timed_end_ns if self.active and self.timed_streams == self.total_streams else None

    def stream_finished(self, now_ns) -> None:
        self.finished_streams += 1
        if self.finished_streams == self.total_streams and self.notifier is not None:
            notifier, self.notifier = self.notifier, None
            notifier(now_ns - self.creation_ns)


class Stream:
    """One chunk of a collective moving through its phases."""

    __slots__ = ("sys", "stream_id", "tag", "priority", "phases", "dataset", "current_queue_id", "initialized",
                 "algorithm")
    sys: Sys
    phases: deque
    dataset: DataSet
    current_queue_id: int
    initialized: bool

    def __init__(self, sys, stream_id, phases, priority, dataset):
        self.sys = sys
        self.stream_id = stream_id
        self.tag = stream_id % (RENDEZVOUS_TAG_BASE - COLLECTIVE_TAG_BASE) + COLLECTIVE_TAG_BASE
        self.priority = priority
        self.phases = phases
        self.dataset = dataset
        self.current_queue_id = -1
        self.initialized = False
        self.algorithm = None
        for _queue, algorithm in phases:
            algorithm.bind(self)

    def init(self) -> None:
        self.initialized = True
        algorithm = self.algorithm
        algorithm.run_init()
        if not self.phases and isinstance(algorithm, TimedCollective):  # the last phase, over at a known time
            dataset = self.dataset
            dataset.timed_streams += 1
            dataset.timed_end_ns = max(dataset.timed_end_ns, self.sys.engine.now + algorithm.time_ns)


class QueueLevel:
    """The queues of one dimension and the reference's three allocators."""

    __slots__ = ("queues", "allocator", "first_allocator", "last_allocator")

    def __init__(self, start, count):
        self.queues = list(range(start, start + count))
        self.allocator, self.first_allocator, self.last_allocator = 0, 0, count // 2

    def next_queue(self):
        queues, n, i = self.queues, len(self.queues), self.allocator
        self.allocator = i + 1 if i + 1 < n else 0
        return queues[i], ANTICLOCKWISE if (n > 1 and i >= n // 2) else CLOCKWISE

    def next_queue_first(self):
        i = self.first_allocator
        self.first_allocator = i + 1 if i + 1 < len(self.queues) // 2 else 0
        return self.queues[i], CLOCKWISE

    def next_queue_last(self):
        i = self.last_allocator
        self.last_allocator = i + 1 if i + 1 < len(self.queues) else len(self.queues) // 2
        return self.queues[i], ANTICLOCKWISE


class CommunicatorGroup:
    """A sub-communicator as one rank sees it (plans are cached per collective)."""

    __slots__ = ("group_id", "npus", "position", "num_streams", "plans")

    def __init__(self, group_id, npus, rank, stream_base_id=None):
        self.group_id = group_id
        self.npus = list(npus)
        ordered = sorted(npus)
        self.position = ordered.index(rank) if rank in ordered else -1
        # Stream ids (message tags) count from the group id; a folded run counts all groups of one class from one id
        # so that mirrored messages carry the tags their receivers expect.
        self.num_streams = (group_id if stream_base_id is None else stream_base_id) * 1_000_000
        self.plans = {}


class Sys:
    """The system layer of one rank."""

    __slots__ = ("shared", "rank", "engine", "endpoint_delay_ns", "local_mem_bw", "_pending", "_spare", "_last_tick",
                 "_last_batch", "_call_events_fn", "num_streams", "priority_counter", "_topologies", "levels",
                 "active_streams", "running_streams", "queue_threshold", "msg_send", "msg_recv", "group_levels",
                 "collectives")
    engine: EventEngine
    # pending batches, tick -> [fn, arg, ...]. A dict, not a scanned list: a pipeline rank with the host model holds
    # hundreds of future ticks (a scan made the MLPerf GPT-3 step 1.85x slower). Not dict[int]: compiled, each lookup
    # would box the tick anew
    _pending: dict[object, list]
    _spare: list | None  # a run batch's list of two, reused by the next (not a list made and freed per batch)
    _last_tick: object  # the tick object and list of the batch opened last: mostly the next to run (found by identity)
    _last_batch: list
    active_streams: list[list[Stream]]
    running_streams: list[int]
    queue_threshold: int

    def __init__(self, shared, rank):
        self.shared = shared
        self.rank = rank
        self.engine = shared.engine
        self.endpoint_delay_ns = shared.system_config.endpoint_delay_ns
        self.local_mem_bw = shared.system_config.local_mem_bw_bytes_per_s
        self._pending = {}
        self._spare, self._last_tick, self._last_batch = None, None, []
        self._call_events_fn = self._call_events if shared.symmetry is None else self._call_events_folded
        self.num_streams = 0
        self.priority_counter = 0
        self._topologies = {}
        queues_per_dim = shared.queues_per_dim
        starts = [sum(queues_per_dim[:d]) for d in range(len(queues_per_dim) + 1)]
        self.levels = [QueueLevel(start, count) for start, count in zip(starts, queues_per_dim)]
        start = starts[-1]
        self.active_streams = [[] for _ in range(start)]
        self.running_streams = [0] * start
        self.queue_threshold = math.ceil(shared.system_config.active_chunks_per_dimension / queues_per_dim[0])
        # comm-streams per-communicator: group id -> its own QueueLevel per dimension
        self.group_levels = {} if shared.system_config.comm_streams == "per-communicator" else None
        self.collectives = {}  # trace node id -> DataSet of its running collective (collective_end_ns)
        self.msg_send, self.msg_recv = ((self._rendezvous_send, self._rendezvous_recv) if shared.rendezvous
                                        else (shared.matcher.send, shared.matcher.recv))

    # ------------------------------------------------------------ events
    def register_event(self, fn, arg, delay_ns: int) -> None:
        """Run ``fn(arg)`` after ``delay_ns``, batched per tick like the reference: the first event of a tick
        schedules the one engine event that runs the batch."""
        engine = self.engine  # typed: compiled, engine.schedule is a native call
        tick: object = engine.now + delay_ns  # (compiled: boxed once for the dict and the engine, not at each use)
        new, self._spare = self._spare, None
        if new is None:
            new = [fn, arg]
        else:
            new[0], new[1] = fn, arg
        batch = self._pending.setdefault(tick, new)  # (one lookup: on the scale cases 98 % open a batch)
        if batch is new:
            if delay_ns + engine.now > 256:  # (CPython shares the ints up to 256: their identity is not this batch's)
                self._last_tick, self._last_batch = tick, new
            engine.schedule(delay_ns, self._call_events_fn, tick)
        else:
            batch.append(fn)
            batch.append(arg)

    def _call_events_folded(self, tick):
        """A folded run's batch: shown to the engine's tie check first (the astra-folding plugin)."""
        self.engine.fold.tie_check(self.rank, self.engine.current, (self._call_events_fn, tick))
        self._call_events(tick)

    def _call_events(self, tick) -> None:
        batch = self._last_batch if tick is self._last_tick else self._pending[tick]
        i = 0
        while i < len(batch):  # (events for this tick registered while it runs join it)
            batch[i](batch[i + 1])
            i += 2
        del self._pending[tick]
        if i == 2:
            batch[0] = batch[1] = None
            self._spare = batch

    # ------------------------------------------------------------ packets
    def reduction_delay_ns(self, size: int) -> int:
        """Write + two reads of ``size`` bytes at local-mem-bw, truncated separately."""
        bw: float = self.local_mem_bw  # (typed: compiled, native float arithmetic)
        if bw <= 0:
            path = self.shared.system_config.path
            raise ConfigError(f"{path}: 'local-mem-bw' must be > 0 (GB/s): collectives that reduce data need it")
        return 3 * int(size / bw * 1e9)

    def native_send(self, dst, size, tag, fn, arg):
        self.msg_send(self.rank, dst, size, tag % (COLLECTIVE_TAG_BASE - NATIVE_TAG_BASE) + NATIVE_TAG_BASE, fn, arg)

    def native_recv(self, src, size, tag, fn, arg):
        self.msg_recv(src, self.rank, size, tag % (COLLECTIVE_TAG_BASE - NATIVE_TAG_BASE) + NATIVE_TAG_BASE, fn, arg)

    def _rendezvous_send(self, src, dst, size, tag, fn, arg):
        """Wait for the receiver's 8 KiB handshake, then send for real."""
        matcher = self.shared.matcher
        matcher.recv(dst, src, RENDEZVOUS_BYTES, tag + RENDEZVOUS_TAG_BASE,
                     lambda _arg: matcher.send(src, dst, size, tag, fn, arg), None)

    def _rendezvous_recv(self, src, dst, size, tag, fn, arg):
        """Send the 8 KiB handshake; post the real receive once it has arrived."""
        matcher = self.shared.matcher
        matcher.send(dst, src, RENDEZVOUS_BYTES, tag + RENDEZVOUS_TAG_BASE,
                     lambda _arg: matcher.recv(src, dst, size, tag, fn, arg), None)

    # ------------------------------------------------------------ collectives
    def logical_topology(self, com_type):
        topo = self._topologies.get(com_type)
        if topo is None:
            impls = self.shared.native_impls(com_type)
            kinds = [spec.dimension_topology or spec.topology for spec, _window in impls]
            self.shared.check_dimensions_covered(com_type, kinds)
            topo = GeneralComplexTopology(self.rank, self.shared.npus_per_dim, kinds)
            self._topologies[com_type] = topo
        return topo

    def _group_plan(self, group, com_type):
        plan = group.plans.get(com_type)
        if plan is not None:
            return plan
        impls = self.shared.native_impls(com_type)
        if len(group.npus) == self.shared.total_npus:
            plan = (self.logical_topology(com_type), impls, None)
        else:
            if self.rank not in group.npus:
                raise SimulationError(
                    f"rank {self.rank} issues a collective on communicator group {group.group_id} "
                    f"but is not one of its NPUs {group.npus}"
                )
            if len(impls) > 1:
                # the reference's rule (ring), unless the first algorithm prices the whole group itself, the group
                # lies in one dimension whose algorithm runs on groups (inSwitch), or spans several and an algorithm
                # listed for one of them plans such groups itself
                whole = impls[0][0].whole_group
                dims = differing_dims(group.npus, self.shared.npus_per_dim) if not whole else []
                planner = next((impls[d][0].group_planner for d in dims
                                if d < len(impls) and impls[d][0].group_planner is not None), None)
                if len(dims) == 1 and dims[0] < len(impls) and impls[dims[0]][0].per_dimension_groups:
                    impls = [impls[dims[0]]]
                elif len(dims) > 1 and planner is not None:
                    plan = planner.plan(self.rank, group, com_type, impls, dims, self.shared.npus_per_dim,
                                        self.shared.warn)
                    if plan is not None:
                        group.plans[com_type] = plan
                        return plan
                    impls = [self.shared.algorithm_spec(GROUP_FALLBACK_ALGORITHM)]
                else:
                    impls = [impls[0] if whole else self.shared.algorithm_spec(GROUP_FALLBACK_ALGORITHM)]
            if impls[0][0].dimension_topology is not None:  # only one algorithm is listed: the one named
                name = self.shared.system_config.implementations[com_type][0]
                raise ConfigError(
                    f"{self.shared.system_config.path}: {name} cannot run on communicator "
                    f"group {group.group_id} (a subset of the NPUs); use ring or direct"
                )
            plan = (RingTopology(self.rank, group.npus, DIM_LOCAL), impls, [True])
        group.plans[com_type] = plan
        return plan

    def get_priority(self, explicit_priority):
        policy = self.shared.system_config.scheduling_policy
        if policy != "LIFO" and policy != "FIFO":
            return explicit_priority
        priority = self.priority_counter  # (LIFO counts up from 0, FIFO down)
        self.priority_counter += 1 if policy == "LIFO" else -1
        return priority

    def generate_collective(self, com_type: str, size, involved_dims, group, explicit_priority, notifier, node_id=-1):
        """Create the streams of one collective; ``notifier(elapsed_ns)`` runs when it ends."""
        if group is not None and self.shared.plan_observers:
            for observe in self.shared.plan_observers:
                observe(self.rank, group, com_type)
        custom = self.shared.custom_impl(com_type, node_id)
        if custom is not None:
            return self._generate_custom(custom, com_type, size, group, explicit_priority, notifier)
        if group is None:
            topology = self.logical_topology(com_type)
            impls = self.shared.native_impls(com_type)
        else:
            topology, impls, group_dims = self._group_plan(group, com_type)
            # A group spanning every NPU ignores the node's involved_dim.
            involved_dims = group_dims
        splits = self.shared.system_config.preferred_dataset_splits
        if splits <= 0:
            raise ConfigError(f"{self.shared.system_config.path}: 'preferred-dataset-splits' must be set to a "
                              "positive number of chunks per collective")
        chunk_size = size // splits
        if com_type != ALL_GATHER and self.shared.total_npus > chunk_size:
            chunk_size = self.shared.total_npus
            size = splits * chunk_size
        if chunk_size == 0:
            raise SimulationError(f"an all-gather of {size} bytes cannot be split into {splits} chunks "
                                  "('preferred-dataset-splits'); each chunk would be empty")
        dataset = DataSet(math.ceil(size / chunk_size), self.engine.now, node_id)
        dataset.notifier = notifier
        priority = self.get_priority(explicit_priority)
        ndims = topology.num_dimensions()
        # The dimensions the collective runs in, asked once, not per chunk. Those past the end of involved_dim are not
        # involved (the reference reads past its vector there, which in practice gives False).
        active = [topology.nodes_in_dimension(dim) != 1 and (
            involved_dims is None or (dim < len(involved_dims) and bool(involved_dims[dim]))) for dim in range(ndims)]
        dim_mapper = list(range(ndims))[::-1] if com_type == ALL_GATHER else list(range(ndims))

        def add_phase(phases, d, kind, allocate, size):
            """Append a chunk's phase in dimension ``d`` (queue from ``allocate``); returns the next phase's size."""
            queue, direction = allocate()
            algorithm = self._make_algorithm(kind, topology.basic_topology(d, kind), size, direction, impls[d])
            phases.append((queue, algorithm))
            return algorithm.final_data_size

        count = 0
        levels = self._queue_levels(group, ndims)
        local_bw_aware = self.shared.system_config.collective_optimization == "localBWAware"
        while size > 0:
            count += 1
            size = 0 if chunk_size > size else size - chunk_size
            remain = chunk_size
            phases = deque()
            if com_type != ALL_REDUCE or not local_bw_aware:
                for d in dim_mapper:
                    if active[d]:
                        remain = add_phase(phases, d, com_type, levels[d].next_queue, remain)
            else:
                last_active_dim = max([dim for dim in range(ndims) if active[dim_mapper[dim]]] or [0])
                for d in dim_mapper[:last_active_dim]:
                    if active[d]:
                        remain = add_phase(phases, d, REDUCE_SCATTER, levels[d].next_queue_first, remain)
                dim = last_active_dim
                while dim > 0 and not active[dim_mapper[dim]]:
                    dim -= 1
                d = dim_mapper[dim]
                if active[d]:
                    remain = add_phase(phases, d, ALL_REDUCE, levels[d].next_queue_first, remain)
                for d in reversed(dim_mapper[:dim]):
                    if active[d]:
                        remain = add_phase(phases, d, ALL_GATHER, levels[d].next_queue_last, remain)
            if not phases:
                dataset.active = False
                break
            stream = Stream(self, self._next_stream_id(group), phases, priority, dataset)
            self.proceed_to_next_phase(stream)
        if dataset.active:
            dataset.total_streams = count
            if node_id >= 0 and dataset.finished_streams < count:
                self.collectives[node_id] = dataset
        else:
            # Nothing to communicate (every dimension has one NPU or is not involved): the reference hangs here; we
            # finish at once.
            dataset.notifier = None
            self.register_event(lambda _arg: notifier(0), None, 0)
        return dataset

    def collective_end_ns(self, node_id):
        """When the running collective of trace node ``node_id`` ends (:meth:`DataSet.end_ns`; ``--platform-collective
        nccl``), or None (a phase to come, a native algorithm's packets, a custom collective, not running)."""
        dataset = self.collectives.get(node_id)
        return None if dataset is None else dataset.end_ns()

    def _queue_levels(self, group, ndims):
        """The QueueLevel per dimension of ``group``'s collectives: the rank's, or with ``comm-streams:
        per-communicator`` the group's own, made on first use (as many queues as the native dimension)."""
        if group is None or self.group_levels is None:
            return self.levels
        levels = self.group_levels.setdefault(group.group_id, [])
        queues_per_dim = self.shared.queues_per_dim
        while len(levels) < ndims:
            count = queues_per_dim[min(len(levels), len(queues_per_dim) - 1)]
            levels.append(QueueLevel(len(self.active_streams), count))
            self.active_streams.extend([] for _ in range(count))
            self.running_streams.extend([0] * count)
        return levels

    def _generate_custom(self, custom, com_type, size, group, explicit_priority, notifier):
        """A custom collective is one stream with one phase (the level's first queue) covering the whole size. (The
        reference's dataset expects one stream per chunk but gets one, so it waits forever unless
        preferred-dataset-splits is 1; here it expects one stream and the key is not needed.)"""
        dataset = DataSet(1, self.engine.now)
        dataset.notifier = notifier
        priority = self.get_priority(explicit_priority)
        position = self.rank if group is None else group.position
        npus = None if group is None else group.npus
        algorithm = custom.make_algorithm(com_type, self.rank, position, npus, size)
        queue = self._queue_levels(group, 1)[0].queues[0]
        stream = Stream(self, self._next_stream_id(group), deque(((queue, algorithm),)), priority, dataset)
        self.proceed_to_next_phase(stream)
        return dataset

    def _next_stream_id(self, group):
        """Stream ids (message tags) count per rank, or per communicator group for its collectives."""
        owner = self if group is None else group
        owner.num_streams += 1
        return owner.num_streams - 1

    def _make_algorithm(self, com_type, topo, size, direction, impl):
        spec, window = impl
        try:
            return spec.factory(com_type, self.rank, topo, size, direction, window)
        except ConfigError as exc:
            path = self.shared.system_config.path
            if str(exc).startswith(path):
                raise
            raise ConfigError(f"{path}: {exc}") from None

    # ------------------------------------------------------------ scheduling
    def _insert_stream(self, queue: list[Stream], stream: Stream) -> None:
        i, n, priority = 0, len(queue), stream.priority
        while i < n and (queue[i].initialized or queue[i].priority >= priority):
            i += 1
        queue.insert(i, stream)

    def _start_waiting(self, vnet: int) -> None:
        queue = self.active_streams[vnet]
        running = self.running_streams[vnet]
        threshold = self.queue_threshold
        while running < len(queue) and running < threshold:
            queue[running].init()
            running += 1
            self.running_streams[vnet] = running

    def proceed_to_next_phase(self, stream: Stream) -> None:
        """A phase ended (or the stream is new): move the stream to its next queue."""
        previous = stream.current_queue_id
        if not stream.phases:
            dataset = stream.dataset
            if dataset.finished_streams + 1 == dataset.total_streams and dataset.node_id >= 0:
                self.collectives.pop(dataset.node_id, None)
            dataset.stream_finished(self.engine.now)
        if previous >= 0:
            self.active_streams[previous].remove(stream)
        if not stream.phases:
            stream.algorithm = None  # breaks the stream <-> algorithm cycle
            if previous >= 0:
                self.running_streams[previous] -= 1
                self._start_waiting(previous)
            return
        queue_id, algorithm = stream.phases.popleft()
        queue_id = abs(queue_id)
        stream.current_queue_id = queue_id
        stream.algorithm = algorithm
        stream.initialized = False
        self._insert_stream(self.active_streams[queue_id], stream)
        if previous >= 0:
            self.running_streams[previous] -= 1
            self._start_waiting(previous)
        self._start_waiting(queue_id)


__all__ = ["Sys", "DataSet", "Stream", "CommunicatorGroup", "ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"]
