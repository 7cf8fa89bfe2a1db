"""One rank's workload, issuing Chakra nodes as their dependencies finish. As in the reference, ready nodes are
examined in ascending id order after every completion, on one CPU, one GPU-compute and one GPU-communication slot
(receives need none): collectives never overlap on a rank, compute and communication can. ``comm-streams:
per-communicator`` (not the reference's) gives each group a slot, and sends one per (group, destination), as NCCL
gives each communicator its own CUDA stream. One id heap per slot: a pass looks only at the free slots' heads
(sorting every waiting node was quadratic with thousands of sends behind one busy slot).
"""

from __future__ import annotations

import json
from heapq import heappop, heappush

from astra_sim.api import reads_comm_in_flight
from astra_sim.chakra import ChakraError, types as T
from astra_sim.errors import AstraError, WorkloadError
from astra_sim.system.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER
from astra_sim.system.sys import CommunicatorGroup
from astra_sim.workload.host import Host

_COLLECTIVES = {
    T.ALL_REDUCE: ALL_REDUCE,
    T.ALL_GATHER: ALL_GATHER,
    T.REDUCE_SCATTER: REDUCE_SCATTER,
    T.ALL_TO_ALL: ALL_TO_ALL,
}
_CPU, _COMP, _COMM, _NONE = range(4)
#: the slot of a node that needs none (a receive), as :meth:`RankWorkload.slot_of` gives it
NO_SLOT = _NONE
#: node types the host launches on the GPU (host_issue), and waits for when they carry host_waits
_GPU_OPS = frozenset((T.COMP_NODE, T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE))
#: ``pg_name`` values of the default all-NPU group (the reference's rule; backends reading a node's group use it)
DEFAULT_PG_NAMES = ("", "0", None)


def _comm_slot_key(node):
    """What a collective's or send's communication slot is keyed by: (communicator, destination of a send)."""
    pg_name = node.attrs.get("pg_name", "")
    if pg_name in DEFAULT_PG_NAMES:
        pg_name = ""
    return pg_name, node.attrs.get("comm_dst") if node.type == T.COMM_SEND_NODE else None


class RankWorkload:
    """The trace of one rank and the state of its execution."""

    def __init__(self, shared, rank, path, graph, sys):
        #: the narrow context every rank shares (:class:`astra_sim.system.context.SharedContext`)
        self.shared = shared
        self.rank = rank
        self.path = path
        self.sys = sys
        self.nodes, self.children, self.parents_left, roots = graph
        # Dependency-free nodes: ``fresh`` (freed since the last pass began, not yet examined: the reference
        # examines a copy of its set) and one id heap per slot; ``ready_count`` counts both.
        self.fresh = list(roots)
        self.ready = [[], [], [], []]
        self.ready_count = len(self.fresh)
        self.passes = 0  # passes over the ready nodes started (_issue_dep_free_nodes)
        self.slot_busy = [0, 0, 0, 0]
        # comm-streams per-communicator: (pg_name, send destination or None) -> a slot made on first use
        self.comm_slots = {} if shared.system_config.comm_streams == "per-communicator" else None
        self.compute_ns = 0  # GPU compute time (replay or model)
        self.cpu_ns = 0
        self.comm_ns = 0  # sum of collective durations
        self.finish_ns = None
        self.node_start_ns = {}  # the running nodes: id -> start time
        self.comm_running = None  # ids of the running collectives and sends (a set once the first one runs)
        self.comm_groups = {}
        groups = shared.comm_groups
        if groups:
            stream_ids = shared.group_stream_ids or {}
            for group_id, npus in groups.items():
                self.comm_groups[group_id] = CommunicatorGroup(group_id, npus, rank, stream_ids.get(group_id))
        self.issued = 0
        # The host (host_launch_us / host_sync_us, :mod:`astra_sim.workload.host`) launches the GPU ops in trace
        # order; traces with CPU ops time the host themselves and do not get it.
        host = shared.host_issue
        if host is not None and any(n.attrs.get("is_cpu_op") for n in self.nodes.values()):
            host = None
        self.host = None if host is None else Host(host, self.nodes, _GPU_OPS)
        #: COMP nodes are timed at the end of their nanosecond (the model reads the communication beside them)
        self.time_at_end_of_ns = reads_comm_in_flight(shared.compute_model)
        self.issue_log = None  # a list of the issued node ids, in order, when --astra-sim-log needs them

    # ------------------------------------------------------------ helpers
    def _slot(self, node):
        if node.attrs.get("is_cpu_op"):
            return _CPU
        if node.type == T.COMP_NODE:
            return _COMP
        if node.type == T.COMM_RECV_NODE:
            return _NONE
        if self.comm_slots is not None and node.type in (T.COMM_COLL_NODE, T.COMM_SEND_NODE):
            return self._comm_slot(node)
        return _COMM

    def _comm_slot(self, node):
        """The slot of a collective (per communicator) or a send (per communicator and destination)."""
        key = _comm_slot_key(node)
        if key == ("", None):
            return _COMM
        slot = self.comm_slots.get(key)
        if slot is None:
            slot = self.comm_slots[key] = len(self.ready)
            self.ready.append([])
            self.slot_busy.append(0)
        return slot

    def _error(self, node, message):
        return WorkloadError(f"{self.path}: node {node.id} ({node.name!r}): {message}")

    def _int_attr(self, node, key, default=None):
        value = node.attrs.get(key)
        if value is None:
            if default is None:
                raise self._error(node, f"attribute {key!r} is required for a {T.node_type_name(node.type)}")
            return default
        if isinstance(value, bool):
            return int(value)
        if not isinstance(value, int):
            raise self._error(node, f"attribute {key!r} must be an integer, got {value!r}")
        return value

    # ------------------------------------------------------------ issue loop
    def start(self):
        host = self.host
        if host is not None:
            host.starting = True  # the GPU ops issued now wait out of the engine (Host.held)
        self._issue_ready()
        if host is not None:
            host.starting = False
            host.held.sort()
            self._host_due(self.shared.engine.now)
        self._check_finished()

    def _issue_ready(self):
        self._issue_dep_free_nodes()
        # The reference stops here even when a node that finished at issue time (INVALID, METADATA, zero-size
        # roofline) freed new nodes while nothing else runs: a silent hang. Keep issuing instead.
        while not self.node_start_ns and self.ready_count:
            self._issue_dep_free_nodes()

    def _issue_dep_free_nodes(self):
        """One pass in ascending id order over the nodes ready when it began, issuing each whose slot is free."""
        ready = self.ready
        nodes = self.nodes
        fresh = self.fresh
        slots = None  # the slots that may hold ids: all, or (heaps empty before) those the fresh ids went to
        if fresh:
            self.fresh = []
            slot_of = self._slot
            if self.ready_count == len(fresh):  # nothing waits in a heap
                slots = set()
                for node_id in fresh:
                    slot = slot_of(nodes[node_id])
                    heappush(ready[slot], node_id)
                    slots.add(slot)
            else:
                for node_id in fresh:
                    heappush(ready[slot_of(nodes[node_id])], node_id)
        self.passes += 1
        passes = self.passes
        busy = self.slot_busy
        passed = -1  # the last id issued in this pass
        set_aside = None
        while True:
            best = best_slot = None
            # The order of the slots does not matter: ids are unique, the smallest head wins.
            for slot in range(len(ready)) if slots is None else slots:
                heap = ready[slot]
                if not heap or (slot != _NONE and busy[slot]):
                    continue
                if heap[0] < passed:
                    # The slot was busy when the pass went by these ids: they wait for the next pass.
                    if set_aside is None:
                        set_aside = []
                    while heap and heap[0] < passed:
                        set_aside.append(heappop(heap))
                    if not heap:
                        continue
                if best is None or heap[0] < best:
                    best = heap[0]
                    best_slot = slot
            if best is None:
                break
            heappop(ready[best_slot])
            self.ready_count -= 1
            passed = best
            self._issue(nodes[best], best_slot)
            if self.passes != passes:  # a node that finished at once started a pass of its own: look at all
                slots = None
        if set_aside:
            self.fresh.extend(set_aside)

    def _issue(self, node, slot):
        if slot != _NONE:
            self.slot_busy[slot] += 1
            if slot > _COMP:  # a communication slot (_COMM, or a per-communicator one)
                running = self.comm_running
                if running is None:
                    running = self.comm_running = set()
                running.add(node.id)
        now = self.shared.engine.now
        self.node_start_ns[node.id] = now
        self.issued += 1
        if self.issue_log is not None:
            self.issue_log.append(node.id)
        host = self.host
        if host is not None and slot != _CPU and node.type in _GPU_OPS:
            if host.starting:
                return host.held.append(node.id)
            launched = host.launch_of(node.id)
            if launched is None:  # the host waits (host_waits) before it reaches this op
                host.pending[node.id] = slot
            else:
                self._host_launch(node, slot, launched, now)
            return
        self._launch((node, slot))

    def _host_launch(self, node, slot, launched, now):
        """Dispatch ``node`` at its launch: later (its stream held meanwhile), or now, after the held ops before it
        that are due (the host launches in id order, also within a nanosecond)."""
        self.node_start_ns[node.id] = max(launched, now)
        if launched > now:
            return self.sys.register_event(self._launch, (node, slot), launched - now)
        host = self.host
        if host.held_next < len(host.held) and host.held[host.held_next] < node.id:
            self._host_due(now, node.id)
        self._launch((node, slot))

    def _host_wake(self, _op):
        """The rank's wake-up event: the host launches the held op ``_op`` (and any other due)."""
        self.host.wake = None
        self._host_due(self.shared.engine.now)

    def _host_due(self, now, below=None):
        """Dispatch the held ops the host has launched by now (those below id ``below``), in id order; then the
        wake-up event for the next, unless one is pending or the host waits before it."""
        host = self.host
        held = host.held
        while host.held_next < len(held) and (below is None or held[host.held_next] < below):
            op, launched = host.next_held()
            if launched is None:
                return
            if launched > now:
                if host.wake is None:
                    host.wake = op
                    self.sys.register_event(self._host_wake, op, launched - now)
                return
            host.held_next += 1
            del host.at[op]
            self.node_start_ns[op] = now
            self._launch((self.nodes[op], self._slot(self.nodes[op])))

    def _host_resume(self):
        """The op the host waited for (host_waits) completed: it launches the ops issued meanwhile, in id order."""
        host, now = self.host, self.shared.engine.now
        host.resume(now)
        for op in sorted(host.pending):
            launched = host.launch_of(op)
            if launched is None:
                break
            self._host_launch(self.nodes[op], host.pending.pop(op), launched, now)
        if host.wake is None:
            self._host_due(now)

    def _launch(self, item):
        node, slot = item
        try:
            self._dispatch(node, slot)
        except (ChakraError, AstraError) as exc:
            raise self._named(node, exc) from None

    def _named(self, node, exc):
        """``exc`` naming the trace and node, of the same kind (exit code); a ChakraError becomes a WorkloadError."""
        if isinstance(exc, ChakraError):
            return WorkloadError(str(exc))
        message = str(exc)
        if not message.startswith(self.path):
            message = f"{self.path}: node {node.id} ({node.name!r}): {message}"
        return type(exc)(message)

    def _dispatch(self, node, slot):
        shared = self.shared
        node_type = node.type
        if shared.system_config.replay_only:
            return self._replay(node, slot)
        if node_type in (T.MEM_LOAD_NODE, T.MEM_STORE_NODE):
            return self._remote_memory(node)
        if node_type == T.COMP_NODE:
            if slot == _CPU:
                return self._replay(node, slot)
            if self.time_at_end_of_ns:  # the model reads what runs beside the node: all of this nanosecond
                shared.engine.at_end_of_ns(self._time_compute, node)
                return None
            duration = shared.compute_model.compute_time_ns(node, self.rank)
            if duration is None:  # the model says the node takes no time at all
                return self._finish_now(node)
            self.compute_ns += duration
            self.sys.register_event(self._node_done, node.id, duration)
            return None
        if node_type in (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE):
            if slot == _CPU:
                raise self._error(node, "communication nodes cannot be CPU ops (is_cpu_op is set)")
            if node_type == T.COMM_COLL_NODE:
                return self._collective(node)
            if node_type == T.COMM_SEND_NODE:
                return self._send(node)
            return self._recv(node)
        if node_type == T.INVALID_NODE:
            return self._finish_now(node)
        if node_type == T.METADATA_NODE:
            self._metadata(node)
            return self._finish_now(node)
        raise self._error(node, f"unknown node type {node_type}")

    def _time_compute(self, node):
        """A COMP node timed once every event of its nanosecond has run (``reads_comm_in_flight``), so that the
        order of that nanosecond's events does not change it; one that takes no time completes now, as an event."""
        try:
            duration = self.shared.compute_model.compute_time_ns(node, self.rank)
        except (ChakraError, AstraError) as exc:
            raise self._named(node, exc) from None
        if duration is None:
            duration = 0
        self.compute_ns += duration
        self.sys.register_event(self._node_done, node.id, duration)

    def _replay(self, node, slot):
        duration = node.duration_micros * 1000 if node.duration_micros else 1
        if slot == _CPU:
            self.cpu_ns += duration
        else:
            self.compute_ns += duration
        self.sys.register_event(self._node_done, node.id, duration)

    def _remote_memory(self, node):
        size = self._int_attr(node, "tensor_size")
        try:
            self.shared.memory.issue(self.rank, node.type == T.MEM_STORE_NODE, size, self._node_done, node.id)
        except AstraError as exc:
            raise self._error(node, str(exc)) from None

    def _collective(self, node):
        attrs = node.attrs
        if "involved_dim" in attrs:
            involved = attrs["involved_dim"]
            if not isinstance(involved, list):
                raise self._error(node, f"attribute 'involved_dim' must be a bool list, got {involved!r}")
        else:
            involved = [True, True, True, True]
        group = self._comm_group(node)
        comm_type = self._int_attr(node, "comm_type")
        size = self._int_attr(node, "comm_size")
        priority = self._int_attr(node, "comm_priority", 0)
        if comm_type in _COLLECTIVES:
            # comm_size 0 runs as in the reference: inflated to preferred-dataset-splits x NPUs bytes (an empty
            # all-gather would never end there).
            if size < 0 or (size == 0 and comm_type == T.ALL_GATHER):
                raise self._error(node, f"comm_size must be > 0 bytes for this collective, got {size}")
            def done(elapsed_ns, node_id=node.id):
                self.comm_ns += elapsed_ns
                self._node_done(node_id)

            self.sys.generate_collective(_COLLECTIVES[comm_type], size, involved, group, priority, done, node.id)
        elif comm_type == T.BROADCAST:
            # Not simulated by the reference either: replay the recorded time.
            duration = node.duration_micros * 1000 if node.duration_micros else 1

            def done_broadcast(_arg, node_id=node.id, duration=duration):
                self.comm_ns += duration
                self._node_done(node_id)

            self.sys.register_event(done_broadcast, None, duration)
        else:
            name = T.comm_type_name(comm_type)
            raise self._error(
                node,
                f"collective type {name} is not supported (supported: ALL_REDUCE, ALL_GATHER, "
                "REDUCE_SCATTER, ALL_TO_ALL, BROADCAST)",
            )

    def _comm_group(self, node):
        pg_name = node.attrs.get("pg_name", "")
        if pg_name in DEFAULT_PG_NAMES:
            return None
        try:
            if isinstance(pg_name, bool) or not isinstance(pg_name, (int, str)):
                raise TypeError  # a float would be truncated to some other group's id
            group_id = int(pg_name)
        except (TypeError, ValueError):
            raise self._error(node, f"pg_name {pg_name!r} is not an integer communicator-group id") from None
        group = self.comm_groups.get(group_id)
        if group is None:
            known = ", ".join(str(g) for g in sorted(self.comm_groups)) or "none (no --comm-group-configuration)"
            raise self._error(node, f"communicator group {group_id} is not defined; defined groups: {known}")
        return group

    def _send(self, node):
        src = self._int_attr(node, "comm_src", self.rank)
        if src != self.rank:
            raise self._error(node, f"a send must be issued by its sender: comm_src is {src}, this is rank {self.rank}")
        dst = self._int_attr(node, "comm_dst")
        self._check_peer(node, "comm_dst", dst)
        size = self._message_size(node)
        tag = self._int_attr(node, "comm_tag")
        self.sys.native_send(dst, size, tag, self._node_done, node.id)

    def _recv(self, node):
        src = self._int_attr(node, "comm_src")
        self._check_peer(node, "comm_src", src)
        dst = self._int_attr(node, "comm_dst", self.rank)
        if dst != self.rank:
            raise self._error(node, f"a receive must be issued by its receiver: comm_dst is {dst}, this is rank {self.rank}")
        size = self._message_size(node)
        tag = self._int_attr(node, "comm_tag")
        self.sys.native_recv(src, size, tag, self._node_done, node.id)

    def _message_size(self, node):
        size = self._int_attr(node, "comm_size")
        if size <= 0:
            raise self._error(node, f"comm_size must be > 0 bytes for a send or receive, got {size}")
        return size

    def _check_peer(self, node, key, peer):
        if not 0 <= peer < self.shared.total_npus:
            raise self._error(node, f"{key} is {peer}, but the network has NPUs 0..{self.shared.total_npus - 1}")
        if peer == self.rank:
            raise self._error(node, f"{key} is this rank ({peer}); a rank cannot send to or receive from itself")

    def _metadata(self, node):
        """PyTorch process groups: ``inputs.values`` holds ``[[{"pg_name", "ranks"}, ...]]``-ish JSON."""
        info = node.inputs_values
        if not info:
            return
        total = self.shared.total_npus
        try:
            items = json.loads(info[2:-2])
            for item in items:
                pg = int(item["pg_name"])
                ranks = [int(r) for r in item["ranks"]] or list(range(total))
                bad = [r for r in ranks if not 0 <= r < total]
                if bad or len(set(ranks)) != len(ranks):
                    what = f"NPUs {bad} outside 0..{total - 1}" if bad else "an NPU twice"
                    raise self._error(node, f"process group {pg} lists {what}: {item['ranks']}")
                self.comm_groups[pg] = CommunicatorGroup(pg + 1, ranks, self.rank)
        except (ValueError, KeyError, TypeError) as exc:
            # The reference prints the parse error and goes on; so do we, with a warning.
            self.shared.warn(f"{self.path}: node {node.id} ({node.name!r}): process-group metadata not understood ({exc}); ignored")

    # ------------------------------------------------------------ completion
    def _finish_now(self, node):
        """A node that takes no time frees its children without re-examining the ready set (the reference)."""
        self._release(node)
        self._finish_node(node.id)

    def _release(self, node):
        slot = self._slot(node)
        if slot != _NONE:
            self.slot_busy[slot] -= 1
            if slot > _COMP:
                self.comm_running.discard(node.id)

    def _finish_node(self, node_id):
        self.shared.record_node(self.rank, self.nodes[node_id], self.node_start_ns.pop(node_id), self.shared.engine.now)
        parents_left = self.parents_left
        for child in self.children[node_id]:
            parents_left[child] -= 1
            if parents_left[child] == 0:
                self.fresh.append(child)
                self.ready_count += 1

    def _node_done(self, node_id):
        if self.finish_ns is not None:
            return
        if self.host is not None and node_id == self.host.blocked:
            self._host_resume()
        self._release(self.nodes[node_id])
        self._finish_node(node_id)
        self._issue_ready()
        self._check_finished()

    def _check_finished(self):
        if self.finish_ns is None and not self.ready_count and not self.node_start_ns and not any(self.slot_busy):
            self.finish_ns = self.shared.engine.now
            self.shared.rank_finished(self)

    # ------------------------------------------------------------ queries (a folded run's tie check, astra-folding)
    def waiting(self):
        """The ids of the ready nodes not yet issued (fresh, or waiting for their slot), as a new set."""
        waiting = set(self.fresh)
        for heap in self.ready:
            waiting.update(heap)
        return waiting

    def slot_of(self, node_id):
        """The slot node ``node_id`` is issued on (:data:`NO_SLOT` for a receive); None for a slot not made yet."""
        node = self.nodes[node_id]
        if (self.comm_slots is not None and node.type in (T.COMM_COLL_NODE, T.COMM_SEND_NODE)
                and not node.attrs.get("is_cpu_op")):
            key = _comm_slot_key(node)
            return _COMM if key == ("", None) else self.comm_slots.get(key)
        return self._slot(node)

    def could_issue(self, node_id, busy):
        """Whether ready node ``node_id`` would be issued were the slots' occupancy ``busy`` (like ``slot_busy``)."""
        slot = self.slot_of(node_id)
        return slot is None or slot == _NONE or not busy[slot]

    def moves_host_clock(self, node_id):
        """Whether node ``node_id``'s completion moves the host's launch clock (it waits for it: ``host_waits``)."""
        node = self.nodes[node_id]
        return self.host is not None and node.type in _GPU_OPS and bool(node.attrs.get("host_waits"))

    def comm_in_flight(self):
        """Communication operations running now (the GPU-communication slots)."""
        running = self.comm_running
        return len(running) if running else 0

    def comm_nodes_in_flight(self):
        """The running collectives and sends (those :meth:`comm_in_flight` counts), as trace nodes."""
        running = self.comm_running
        return [self.nodes[i] for i in running] if running else []

    def stuck_description(self):
        """What keeps this rank from finishing (for deadlock reports)."""
        parts = []
        for node_id in sorted(self.node_start_ns)[:5]:
            node = self.nodes[node_id]
            parts.append(f"running node {node_id} ({node.name!r}, {T.node_type_name(node.type)})")
        waiting = sorted(self.fresh + [i for heap in self.ready for i in heap])[:5]
        for node_id in waiting:
            node = self.nodes[node_id]
            parts.append(f"ready node {node_id} ({node.name!r}) waiting for a busy slot")
        return "; ".join(parts) or "nothing running"
