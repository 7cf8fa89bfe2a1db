"""The native collective algorithms as packet state machines.

Each algorithm runs one phase of one chunk (a stream) on one rank. It reacts
to three events: ``run_init`` (the stream was scheduled), ``run_general`` (a
packet bundle finished its memory-bus and reduction delays) and
``run_received`` (a message arrived). The send pattern, the bookkeeping order
and every delay follow the reference simulator exactly, because per-rank
finish times must match it to the nanosecond.
"""

from __future__ import annotations

import math
from collections import deque

from astra_sim.errors import ConfigError
from astra_sim.system.topology import ANTICLOCKWISE, CLOCKWISE, DIM_LOCAL

#: Memory-bus delay on a communicator-group ("local") ring, in ns (the
#: reference's "Fast" transmission), instead of endpoint-delay.
LOCAL_RING_DELAY_NS = 10

ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_TO_ALL = "all_to_all"


class Algorithm:
    """Shared fields: the stream it serves and the sizes the system layer reads.

    ``bind`` caches the rank's message and event functions and the bound
    methods used as callbacks: they are used for every packet.
    """

    __slots__ = (
        "stream", "sys", "com_type", "data_size", "final_data_size",
        "_send", "_recv", "_register", "_tag", "_bus_delay", "_general", "_received", "_reduce",
    )

    def bind(self, stream):
        sys = stream.sys
        self.stream = stream
        self.sys = sys
        self._send = sys.msg_send
        self._recv = sys.msg_recv
        self._register = sys.register_event
        self._tag = stream.tag
        self._bus_delay = sys.endpoint_delay_ns
        self._general = self.run_general
        self._received = self.run_received
        self._reduce = self._reduce_then_general

    def bundle(self, size, processed):
        """A packet bundle: endpoint delay, the reduction if ``processed``, then General."""
        if processed:
            self._register(self._reduce, size, self._bus_delay)
        else:
            self._register(self._general, None, self._bus_delay)

    def _reduce_then_general(self, size):
        self._register(self._general, None, self.sys.reduction_delay_ns(size))

    def finish(self):
        """This phase is over: the stream moves on.

        The cached bound methods refer back to this object; dropping them lets
        reference counting free it (the cyclic collector is paused during runs).
        """
        self._general = self._received = self._reduce = None
        self.sys.proceed_to_next_phase(self.stream)


class TimedCollective(Algorithm):
    """A collective phase whose time comes from a model instead of packets (e.g. NCCL's cost model).

    Subclasses implement :meth:`duration_ns`; the phase waits that long (through the rank's
    per-tick batching) and finishes. ``nodes_in_ring`` is the number of ranks in the phase and
    :attr:`options` the run's options (after ``bind``).
    """

    __slots__ = ("rank", "topo", "nodes_in_ring", "time_ns")

    def __init__(self, com_type, rank, topo, data_size):
        self.com_type = com_type
        self.rank = rank
        self.topo = topo
        n = max(1, int(getattr(topo, "nodes_in_ring", 1)))
        self.nodes_in_ring = n
        self.data_size = data_size
        if com_type == ALL_GATHER:
            self.final_data_size = data_size * n
        elif com_type == REDUCE_SCATTER:
            self.final_data_size = data_size // n
        else:
            self.final_data_size = data_size
        self.time_ns = None

    @property
    def options(self):
        """The run's options (``astra run`` flags by ``dest``, or ``simulate(options=...)``)."""
        options = self.sys.shared.options
        return options if isinstance(options, dict) else {}

    def duration_ns(self):
        raise NotImplementedError

    def run_init(self):
        self.time_ns = max(0, int(round(self.duration_ns())))
        self._register(self._timed_out, None, self.time_ns)

    def _timed_out(self, _arg=None):
        self.finish()

    def run_general(self, _arg=None):
        pass

    def run_received(self, _arg=None):
        pass


class Ring(Algorithm):
    """Ring algorithm: every step sends one message to the ring neighbour.

    The reference's per-packet counters ``max_count`` and
    ``remained_packets_per_*`` never change what happens (each inserted packet
    is released at once, each send takes one step off ``stream_count``), so
    they are not kept.
    """

    __slots__ = (
        "rank", "topo", "direction", "nodes_in_ring", "curr_receiver", "curr_sender",
        "parallel_reduce", "stream_count", "msg_size", "zero_latency_packets",
        "non_zero_latency_packets", "toggle", "free_packets", "total_received", "packets", "fast",
    )

    def __init__(self, com_type, rank, topo, data_size, direction):
        self.com_type = com_type
        self.rank = rank
        self.topo = topo
        self.data_size = data_size
        self.direction = direction
        n = topo.nodes_in_ring
        self.nodes_in_ring = n
        self.curr_receiver = topo.get_receiver(rank, direction)
        self.curr_sender = topo.get_sender(rank, direction)
        self.parallel_reduce = 1
        self.total_received = 0
        self.free_packets = 0
        self.zero_latency_packets = 0
        self.non_zero_latency_packets = 0
        self.toggle = False
        self.fast = topo.dimension == DIM_LOCAL
        if com_type == ALL_REDUCE:
            self.stream_count = 2 * (n - 1)
        elif com_type == ALL_TO_ALL:
            self.stream_count = ((n - 1) * n) // 2
        else:
            self.stream_count = n - 1
        if com_type == ALL_REDUCE:
            self.final_data_size = data_size
            self.msg_size = data_size // n
        elif com_type == ALL_GATHER:
            self.final_data_size = data_size * n
            self.msg_size = data_size
        elif com_type == REDUCE_SCATTER:
            self.final_data_size = data_size // n
            self.msg_size = data_size // n
        else:  # all-to-all
            self.final_data_size = data_size
            self.msg_size = data_size // n
        self.packets = deque()

    def bind(self, stream):
        super().bind(stream)
        if self.fast:
            self._bus_delay = LOCAL_RING_DELAY_NS

    # -- events ---------------------------------------------------------
    def run_init(self):
        for _ in range(self.parallel_reduce):
            self.insert_packet()

    def run_general(self, _arg=None):
        self.free_packets += 1
        if self.packets and self.stream_count and self.free_packets:
            self.send_next()
        if self.stream_count == 0 and self.free_packets == self.parallel_reduce:
            self.packets.clear()
            self.finish()

    def run_received(self, _arg=None):
        self.total_received += 1
        self.insert_packet()

    # -- internals ------------------------------------------------------
    def non_zero_latency_packets_count(self):
        return (self.nodes_in_ring - 1) * self.parallel_reduce

    def insert_packet(self):
        """Queue the next packet and release it to the memory bus.

        The first ``parallel_reduce`` packets of every round are
        "zero-latency" (no reduction); the rest reduce on reduce-scatter and
        on the first round of all-reduce.
        """
        zero = self.zero_latency_packets
        if zero == 0 and self.non_zero_latency_packets == 0:
            zero = self.zero_latency_packets = self.parallel_reduce
            self.non_zero_latency_packets = self.non_zero_latency_packets_count()
            self.toggle = not self.toggle
        if zero > 0:
            self.zero_latency_packets = zero - 1
            processed = False
        elif self.non_zero_latency_packets > 0:
            self.non_zero_latency_packets -= 1
            com_type = self.com_type
            processed = com_type == REDUCE_SCATTER or (com_type == ALL_REDUCE and self.toggle)
        else:
            raise AssertionError("collective algorithm asked to inject a packet it does not have")
        self.packets.append((self.curr_sender, self.curr_receiver, self.msg_size))
        self.release(processed)

    def release(self, processed):
        self.bundle(self.msg_size, processed)

    def send_next(self):
        """Send the oldest packet to its receiver and post the matching receive."""
        src, dst, size = self.packets.popleft()
        rank = self.rank
        self._send(rank, dst, size, self._tag, None, None)
        self._recv(src, rank, size, self._tag, self._received, None)
        self.stream_count -= 1
        self.free_packets -= 1


class Direct(Ring):
    """Direct algorithm: messages to every peer, ``window`` of them in flight."""

    __slots__ = ("middle_point",)

    def __init__(self, com_type, rank, topo, data_size, direction, window):
        super().__init__(com_type, rank, topo, data_size, direction)
        n = self.nodes_in_ring
        self.middle_point = n - 1
        self.parallel_reduce = n - 1 if window == -1 else min(window, n - 1)
        if com_type == ALL_TO_ALL:
            self.stream_count = n - 1

    def run_general(self, _arg=None):
        self.free_packets += 1
        if self.com_type == ALL_REDUCE and self.stream_count <= self.middle_point:
            # All-reduce: the second half starts once every first-half message arrived.
            if self.total_received < self.middle_point:
                return
            for _ in range(self.parallel_reduce):
                if self.packets and self.stream_count and self.free_packets:
                    self.send_next()
        elif self.packets and self.stream_count and self.free_packets:
            self.send_next()
        if self.stream_count == 0 and self.free_packets == self.parallel_reduce:
            self.packets.clear()
            self.finish()

    def release(self, processed):
        self.bundle(self.msg_size, processed)
        topo, rank, direction = self.topo, self.rank, self.direction
        receiver = topo.get_receiver(self.curr_receiver, direction)
        if receiver == rank:
            receiver = topo.get_receiver(receiver, direction)
        self.curr_receiver = receiver
        sender = topo.get_sender(self.curr_sender, direction)
        if sender == rank:
            sender = topo.get_sender(sender, direction)
        self.curr_sender = sender

    def non_zero_latency_packets_count(self):
        if self.topo.dimension != DIM_LOCAL:
            return self.parallel_reduce
        return (self.nodes_in_ring - 1) * self.parallel_reduce


class HalvingDoubling(Ring):
    """Recursive halving (reduce-scatter) then doubling (all-gather) along the ring index."""

    __slots__ = ("rank_offset", "offset_multiplier")

    def __init__(self, com_type, rank, topo, data_size):
        # Ring.__init__ is not reused: the sizes and counts differ.
        self.com_type = com_type
        self.rank = rank
        self.topo = topo
        self.data_size = data_size
        n = topo.nodes_in_ring
        if n & (n - 1):
            raise ConfigError(
                f"halvingDoubling needs a power-of-two number of NPUs in each dimension it runs on, got {n} "
                "(its partner pattern cannot pair the others; the reference hangs)"
            )
        self.nodes_in_ring = n
        self.parallel_reduce = 1
        self.total_received = 0
        self.free_packets = 0
        self.zero_latency_packets = 0
        self.non_zero_latency_packets = 0
        self.toggle = False
        self.fast = topo.dimension == DIM_LOCAL
        log2n = math.log2(n)
        self.stream_count = int(2 * log2n) if com_type == ALL_REDUCE else int(log2n)
        if com_type == ALL_REDUCE:
            self.final_data_size = data_size
            self.msg_size = data_size // 2
            self.rank_offset = 1
            self.offset_multiplier = 2.0
        elif com_type == ALL_GATHER:
            self.final_data_size = data_size * n
            self.msg_size = data_size
            self.rank_offset = n // 2
            self.offset_multiplier = 0.5
        elif com_type == REDUCE_SCATTER:
            self.final_data_size = data_size // n
            self.msg_size = data_size // 2
            self.rank_offset = 1
            self.offset_multiplier = 2.0
        else:
            raise ConfigError("halvingDoubling does not implement all-to-all; choose ring or direct")
        self.direction = self.specify_direction()
        self.curr_receiver = rank
        for _ in range(self.rank_offset):
            self.curr_receiver = topo.get_receiver(self.curr_receiver, self.direction)
        self.curr_sender = self.curr_receiver
        self.packets = deque()

    def specify_direction(self):
        if self.rank_offset == 0:
            return CLOCKWISE
        if (self.topo.index_in_ring // self.rank_offset) % 2 == 0:
            return CLOCKWISE
        return ANTICLOCKWISE

    def non_zero_latency_packets_count(self):
        return int(math.log2(self.nodes_in_ring) - 1 * self.parallel_reduce)

    def release(self, processed):
        """Release, then move to the next partner (distance and size halve or double)."""
        self.bundle(self.msg_size, processed)
        self.rank_offset = int(self.rank_offset * self.offset_multiplier)
        self.msg_size = int(self.msg_size / self.offset_multiplier)
        if self.rank_offset == self.nodes_in_ring and self.com_type == ALL_REDUCE:
            self.offset_multiplier = 0.5
            self.rank_offset = int(self.rank_offset * self.offset_multiplier)
            self.msg_size = int(self.msg_size / self.offset_multiplier)
        receiver = self.rank
        direction = self.specify_direction()
        for _ in range(self.rank_offset):
            receiver = self.topo.get_receiver(receiver, direction)
        self.curr_receiver = receiver
        self.curr_sender = receiver


# Double-binary-tree states.
_BEGIN, _TO_PARENT, _FROM_PARENT, _END, _TWO_CHILDREN, _ONE_CHILD, _TO_CHILDREN = range(7)
_EV_INIT, _EV_GENERAL, _EV_RECEIVED = range(3)


class DoubleBinaryTree(Algorithm):
    """Tree all-reduce (the collective type is ignored, as in the reference)."""

    __slots__ = ("rank", "state", "reductions", "parent", "left_child", "right_child", "node_type")

    def __init__(self, rank, tree, data_size):
        self.rank = rank
        self.data_size = data_size
        self.final_data_size = data_size
        self.com_type = ALL_REDUCE
        self.state = _BEGIN
        self.reductions = 0
        self.parent = tree.parent[rank]
        self.left_child = tree.left[rank]
        self.right_child = tree.right[rank]
        self.node_type = tree.node_type(rank)

    def run_init(self):
        self._run(_EV_INIT)

    def run_general(self, _arg=None):
        self._run(_EV_GENERAL)

    def run_received(self, _arg=None):
        self._run(_EV_RECEIVED)

    def _to(self, peer):
        self._send(self.rank, peer, self.data_size, self._tag, None, None)

    def _from(self, peer):
        self._recv(peer, self.rank, self.data_size, self._tag, self._received, None)

    def _run(self, event):
        state, kind = self.state, self.node_type
        if kind == "leaf":
            if state == _BEGIN:
                self.bundle(self.data_size, False)
                self.state = _TO_PARENT
            elif state == _TO_PARENT:
                self._to(self.parent)
                self._from(self.parent)
                self.state = _FROM_PARENT
            elif state == _FROM_PARENT:
                self.bundle(self.data_size, False)
                self.state = _END
            elif state == _END:
                self.finish()
        elif kind == "intermediate":
            if state == _BEGIN:
                self.state = _TWO_CHILDREN
                self._from(self.left_child)
                self._from(self.right_child)
            elif state == _TWO_CHILDREN and event == _EV_RECEIVED:
                self.bundle(self.data_size, True)
                self.state = _ONE_CHILD
            elif state == _ONE_CHILD and event == _EV_RECEIVED:
                self.bundle(self.data_size, True)
                self.state = _TO_PARENT
            elif self.reductions < 1 and event == _EV_GENERAL:
                self.reductions += 1
            elif state == _TO_PARENT:
                self.state = _FROM_PARENT
                self._to(self.parent)
                self._from(self.parent)
            elif state == _FROM_PARENT and event == _EV_RECEIVED:
                self.bundle(self.data_size, True)
                self.state = _TO_CHILDREN
            elif state == _TO_CHILDREN:
                self._to(self.left_child)
                self._to(self.right_child)
                self.finish()
        else:  # root
            only_child = self.left_child if self.left_child >= 0 else self.right_child
            if state == _BEGIN:
                self.state = _ONE_CHILD
                self._from(only_child)
            elif state == _ONE_CHILD:
                self.bundle(self.data_size, True)
                self.state = _TO_CHILDREN
            elif state == _TO_CHILDREN:
                self._to(only_child)
                self.finish()
