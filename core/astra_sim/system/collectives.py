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

ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_TO_ALL = "all_to_all"


class Algorithm:
    """Shared fields: the stream it serves and the sizes the system layer reads."""

    __slots__ = ("stream", "sys", "com_type", "data_size", "final_data_size")

    def bind(self, stream):
        self.stream = stream
        self.sys = stream.sys


class Ring(Algorithm):
    """Ring algorithm: every step sends one message to the ring neighbour."""

    __slots__ = (
        "rank", "topo", "direction", "nodes_in_ring", "curr_receiver", "curr_sender",
        "parallel_reduce", "stream_count", "max_count", "remained_per_message",
        "remained_per_max_count", "msg_size", "zero_latency_packets",
        "non_zero_latency_packets", "toggle", "free_packets", "total_sent",
        "total_received", "packets", "processed", "fast",
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
        self.total_sent = 0
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
        self.max_count = 0 if com_type in (ALL_TO_ALL, ALL_GATHER) else n - 1
        self.remained_per_message = 1
        self.remained_per_max_count = 1
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
        self.processed = False

    # -- events ---------------------------------------------------------
    def run_init(self):
        for _ in range(self.parallel_reduce):
            self.insert_packet()

    def run_general(self):
        self.free_packets += 1
        self.ready()
        self.iteratable()

    def run_received(self):
        self.total_received += 1
        self.insert_packet()

    # -- internals ------------------------------------------------------
    def non_zero_latency_packets_count(self):
        return (self.nodes_in_ring - 1) * self.parallel_reduce

    def insert_packet(self):
        if self.zero_latency_packets == 0 and self.non_zero_latency_packets == 0:
            self.zero_latency_packets = self.parallel_reduce
            self.non_zero_latency_packets = self.non_zero_latency_packets_count()
            self.toggle = not self.toggle
        if self.zero_latency_packets > 0:
            self.packets.append((self.curr_sender, self.curr_receiver, self.msg_size))
            self.processed = False
            self.process_max_count()
            self.zero_latency_packets -= 1
            return
        if self.non_zero_latency_packets > 0:
            self.packets.append((self.curr_sender, self.curr_receiver, self.msg_size))
            com_type = self.com_type
            self.processed = com_type == REDUCE_SCATTER or (com_type == ALL_REDUCE and self.toggle)
            self.process_max_count()
            self.non_zero_latency_packets -= 1
            return
        raise AssertionError("ring algorithm asked to inject a packet it does not have")

    def release_packets(self):
        self.sys.packet_bundle(self.stream, self.msg_size, self.processed, self.fast)

    def process_max_count(self):
        if self.remained_per_max_count > 0:
            self.remained_per_max_count -= 1
        if self.remained_per_max_count == 0:
            self.max_count -= 1
            self.release_packets()
            self.remained_per_max_count = 1

    def process_stream_count(self):
        if self.remained_per_message > 0:
            self.remained_per_message -= 1
        if self.remained_per_message == 0 and self.stream_count > 0:
            self.stream_count -= 1
            if self.stream_count > 0:
                self.remained_per_message = 1

    def ready(self):
        if not self.packets or self.stream_count == 0 or self.free_packets == 0:
            return False
        src, dst, _size = self.packets[0]
        stream = self.stream
        self.sys.collective_send(dst, self.msg_size, stream)
        self.sys.collective_recv(src, self.msg_size, stream)
        self.process_stream_count()
        self.packets.popleft()
        self.free_packets -= 1
        self.total_sent += 1
        return True

    def iteratable(self):
        if self.stream_count == 0 and self.free_packets == self.parallel_reduce:
            self.packets.clear()
            self.sys.proceed_to_next_phase(self.stream)
            return False
        return True


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

    def run_general(self):
        self.free_packets += 1
        if self.com_type == ALL_REDUCE and self.stream_count <= self.middle_point:
            if self.total_received < self.middle_point:
                return
            for _ in range(self.parallel_reduce):
                self.ready()
            self.iteratable()
        else:
            self.ready()
            self.iteratable()

    def process_max_count(self):
        if self.remained_per_max_count > 0:
            self.remained_per_max_count -= 1
        if self.remained_per_max_count == 0:
            self.max_count -= 1
            self.release_packets()
            self.remained_per_max_count = 1
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
        # Fields shared with Ring are set here; Ring.__init__ is not reused
        # because the sizes and counts differ.
        self.com_type = com_type
        self.rank = rank
        self.topo = topo
        self.data_size = data_size
        n = topo.nodes_in_ring
        self.nodes_in_ring = n
        self.parallel_reduce = 1
        self.total_sent = 0
        self.total_received = 0
        self.free_packets = 0
        self.zero_latency_packets = 0
        self.non_zero_latency_packets = 0
        self.toggle = False
        self.fast = topo.dimension == DIM_LOCAL
        log2n = math.log2(n)
        self.stream_count = int(2 * log2n) if com_type == ALL_REDUCE else int(log2n)
        self.max_count = 0 if com_type == ALL_GATHER else int(log2n)
        self.remained_per_message = 1
        self.remained_per_max_count = 1
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
        self.processed = False

    def specify_direction(self):
        if self.rank_offset == 0:
            return CLOCKWISE
        if (self.topo.index_in_ring // self.rank_offset) % 2 == 0:
            return CLOCKWISE
        return ANTICLOCKWISE

    def non_zero_latency_packets_count(self):
        return int(math.log2(self.nodes_in_ring) - 1 * self.parallel_reduce)

    def process_max_count(self):
        if self.remained_per_max_count > 0:
            self.remained_per_max_count -= 1
        if self.remained_per_max_count == 0:
            self.max_count -= 1
            self.release_packets()
            self.remained_per_max_count = 1
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

    def ready(self):
        if not self.packets or self.stream_count == 0 or self.free_packets == 0:
            return False
        src, dst, size = self.packets[0]
        stream = self.stream
        self.sys.collective_send(dst, size, stream)
        self.sys.collective_recv(src, size, stream)
        self.process_stream_count()
        self.packets.popleft()
        self.free_packets -= 1
        self.total_sent += 1
        return True


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

    def run_general(self):
        self._run(_EV_GENERAL)

    def run_received(self):
        self._run(_EV_RECEIVED)

    def _run(self, event):
        sys, stream, size = self.sys, self.stream, self.data_size
        state, kind = self.state, self.node_type
        if kind == "leaf":
            if state == _BEGIN:
                sys.packet_bundle(stream, size, False, False)
                self.state = _TO_PARENT
            elif state == _TO_PARENT:
                sys.collective_send(self.parent, size, stream)
                sys.collective_recv(self.parent, size, stream)
                self.state = _FROM_PARENT
            elif state == _FROM_PARENT:
                sys.packet_bundle(stream, size, False, False)
                self.state = _END
            elif state == _END:
                sys.proceed_to_next_phase(stream)
        elif kind == "intermediate":
            if state == _BEGIN:
                self.state = _TWO_CHILDREN
                sys.collective_recv(self.left_child, size, stream)
                sys.collective_recv(self.right_child, size, stream)
            elif state == _TWO_CHILDREN and event == _EV_RECEIVED:
                sys.packet_bundle(stream, size, True, False)
                self.state = _ONE_CHILD
            elif state == _ONE_CHILD and event == _EV_RECEIVED:
                sys.packet_bundle(stream, size, True, False)
                self.state = _TO_PARENT
            elif self.reductions < 1 and event == _EV_GENERAL:
                self.reductions += 1
            elif state == _TO_PARENT:
                self.state = _FROM_PARENT
                sys.collective_send(self.parent, size, stream)
                sys.collective_recv(self.parent, size, stream)
            elif state == _FROM_PARENT and event == _EV_RECEIVED:
                sys.packet_bundle(stream, size, True, False)
                self.state = _TO_CHILDREN
            elif state == _TO_CHILDREN:
                sys.collective_send(self.left_child, size, stream)
                sys.collective_send(self.right_child, size, stream)
                sys.proceed_to_next_phase(stream)
        else:  # root
            only_child = self.left_child if self.left_child >= 0 else self.right_child
            if state == _BEGIN:
                self.state = _ONE_CHILD
                sys.collective_recv(only_child, size, stream)
            elif state == _ONE_CHILD:
                sys.packet_bundle(stream, size, True, False)
                self.state = _TO_CHILDREN
            elif state == _TO_CHILDREN:
                sys.collective_send(only_child, size, stream)
                sys.proceed_to_next_phase(stream)
