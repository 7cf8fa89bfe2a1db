"""Recursive halving (reduce-scatter) then doubling (all-gather): partners at distances 1, 2, 4, ..."""

from __future__ import annotations

import math
from collections import deque

from astra_sim.errors import ConfigError
from astra_sim.system.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, Algorithm, mypyc_attr
from astra_sim.system.topology import ANTICLOCKWISE, CLOCKWISE, DIM_LOCAL

from astra_collectives_native.ring import Ring


@mypyc_attr(allow_interpreted_subclasses=True)
class HalvingDoubling(Ring):
    """Recursive halving (reduce-scatter) then doubling (all-gather) along the ring index."""

    __slots__ = ("rank_offset", "offset_multiplier", "index_in_ring", "members")
    rank_offset: int  # typed for mypyc (tools/compile_core.py), as Ring's counters
    offset_multiplier: float
    #: the topology's ring index and members, read once: compiled, every packet's partner is found without two
    #: generic attribute reads on the untyped ``topo`` (``members`` a property)
    index_in_ring: int

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
        self.index_in_ring = topo.index_in_ring
        self.members = topo.members
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
        self.curr_receiver = self.curr_sender = self.partner(self.direction)
        self.queued = 0
        self.packets = deque()

    def specify_direction(self) -> int:
        if self.rank_offset == 0:
            return CLOCKWISE
        if (self.index_in_ring // self.rank_offset) % 2 == 0:
            return CLOCKWISE
        return ANTICLOCKWISE

    def non_zero_latency_packets_count(self) -> int:
        return int(math.log2(self.nodes_in_ring) - 1 * self.parallel_reduce)

    def bundle(self, size, processed: bool) -> None:
        """Queue the packet's partner, release it, then move to the next partner (distance and size halve or
        double)."""
        packets = self.packets
        assert packets is not None  # (only a Ring's is None)
        packets.append((self.curr_sender, self.curr_receiver, size))
        Algorithm.bundle(self, size, processed)
        msg_size: int = self.msg_size  # (typed: compiled, native arithmetic; Ring keeps the attribute untyped)
        self.rank_offset = int(self.rank_offset * self.offset_multiplier)
        msg_size = int(msg_size / self.offset_multiplier)
        if self.rank_offset == self.nodes_in_ring and self.com_type == ALL_REDUCE:
            self.offset_multiplier = 0.5
            self.rank_offset = int(self.rank_offset * self.offset_multiplier)
            msg_size = int(msg_size / self.offset_multiplier)
        self.msg_size = msg_size
        self.curr_receiver = self.curr_sender = self.partner(self.specify_direction())

    def partner(self, direction: int) -> int:
        """The NPU ``rank_offset`` steps from this rank along the ring in ``direction``: ``get_receiver`` applied
        ``rank_offset`` times, as one index step (the walk made a 256-NPU all-reduce O(N) per message)."""
        step = self.rank_offset if direction == CLOCKWISE else -self.rank_offset
        return self.members[(self.index_in_ring + step) % self.nodes_in_ring]


def make_halving_doubling(com_type, rank, topo, size, direction, window):
    """The plugin's factory, compiled with the class (see ring.make_ring)."""
    return HalvingDoubling(com_type, rank, topo, size)
