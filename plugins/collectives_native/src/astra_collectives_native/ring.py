"""Ring and direct: every rank talks to its ring neighbours (ring) or to every peer in turn (direct)."""

from __future__ import annotations

from collections import deque
from typing import Any

from astra_sim.system.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, Algorithm, mypyc_attr
from astra_sim.system.frontend import SendRecvMatcher
from astra_sim.system.topology import DIM_LOCAL

from astra_collectives_native.channel import Channel, close_channel, open_channel

#: Memory-bus delay on a communicator-group ("local") ring, in ns (the
#: reference's "Fast" transmission), instead of endpoint-delay.
LOCAL_RING_DELAY_NS = 10


@mypyc_attr(allow_interpreted_subclasses=True)
class Ring(Algorithm):
    """Ring algorithm: every step sends one message to the ring neighbour.

    The reference's per-packet counters ``max_count`` and
    ``remained_packets_per_*`` never change what happens (each inserted packet
    is released at once, each send takes one step off ``stream_count``), so
    they are not kept. Every packet of a ring has the same sender, receiver and size, so a count of the packets
    waiting to be sent is kept (``queued``), not a copy of each; its subclasses, whose partners or sizes move,
    queue each packet's ``(sender, receiver, size)`` in ``packets`` (None in a ring: no deque made per phase).
    """

    __slots__ = (
        "rank", "topo", "direction", "nodes_in_ring", "curr_receiver", "curr_sender",
        "parallel_reduce", "stream_count", "msg_size", "zero_latency_packets",
        "non_zero_latency_packets", "toggle", "free_packets", "total_received", "queued", "packets", "fast",
        "_matcher", "_send_on", "_recv_on",
    )
    #: the rank's matcher, typed: compiled, every packet's calls into it are native calls (issue 37); None where it
    #: is a stand-in (tests) or the sends go through a rendezvous: then the cached bound methods
    _matcher: SendRecvMatcher | None
    #: the matcher's channels of this ring's sends and receives, each shared with the peer that posts the other side
    #: (:mod:`astra_collectives_native.channel`): no tuple built nor dict looked up per message, the delay known;
    #: None: the plain calls
    _send_on: Channel | None
    _recv_on: Channel | None
    #: typed for mypyc (tools/compile_core.py): native ints for the ring's size (halving-doubling's partner index)
    #: and the counters of every packet (not the ranks, the message size, nor Algorithm's tag and bus delay: they only
    #: go to Python calls, and a native int is boxed again for every one)
    nodes_in_ring: int
    parallel_reduce: int
    stream_count: int
    zero_latency_packets: int
    non_zero_latency_packets: int
    free_packets: int
    total_received: int
    queued: int
    toggle: bool
    fast: bool
    packets: deque[tuple[Any, Any, Any]] | None  # (typed: compiled, a packet is unpacked natively, not iterated)

    def __init__(self, com_type: str, rank, topo, data_size, direction):  # (str: compiled, its tests are native)
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
        self.queued = 0
        self.packets = None

    def bind(self, stream):
        super().bind(stream)
        matcher = getattr(self._send, "__self__", None)
        both = isinstance(matcher, SendRecvMatcher) and getattr(self._recv, "__self__", None) is matcher
        self._matcher = matcher if both else None
        self._send_on = self._recv_on = None
        # channels: the kernel's own matcher (a folded run's relabels sends), a ring (its partners stay), sizes > 0
        if both and type(matcher) is SendRecvMatcher and type(self) is Ring and self.msg_size > 0:
            self._send_on = open_channel(matcher, self._tag, self.rank, self.curr_receiver, self.msg_size)
            self._recv_on = open_channel(matcher, self._tag, self.curr_sender, self.rank, self.msg_size)
        if self.fast:
            self._bus_delay = LOCAL_RING_DELAY_NS

    # -- events ---------------------------------------------------------
    def run_init(self) -> None:
        for _ in range(self.parallel_reduce):
            self.insert_packet()

    def run_general(self, _arg: object = None) -> None:
        self.free_packets += 1
        if self.queued and self.stream_count and self.free_packets:
            self.send_next()
        if self.stream_count == 0 and self.free_packets == self.parallel_reduce:
            self.end()

    def run_received(self, _arg: object = None) -> None:
        self.total_received += 1
        self.insert_packet()

    # -- internals ------------------------------------------------------
    def non_zero_latency_packets_count(self) -> int:
        return (self.nodes_in_ring - 1) * self.parallel_reduce

    def insert_packet(self) -> None:
        """Queue the next packet and release it to the memory bus (:meth:`bundle`).

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
        self.queued += 1
        self.bundle(self.msg_size, processed)

    def send_next(self) -> None:
        """Send the next packet to its receiver and post the matching receive (a subclass's packet as queued)."""
        rank = self.rank
        m = self._matcher
        send_on = self._send_on
        recv_on = self._recv_on
        if send_on is not None and recv_on is not None and m is not None:
            send_on.send(m, None, None)
            recv_on.recv(m, self._received, None)
        else:
            packets = self.packets
            if packets:
                src, dst, size = packets.popleft()
            else:
                src, dst, size = self.curr_sender, self.curr_receiver, self.msg_size
            if m is None:
                self._send(rank, dst, size, self._tag, None, None)
                self._recv(src, rank, size, self._tag, self._received, None)
            else:
                m.send(rank, dst, size, self._tag, None, None)
                m.recv(src, rank, size, self._tag, self._received, None)
        self.queued -= 1
        self.stream_count -= 1
        self.free_packets -= 1

    def end(self) -> None:
        """The last packet is back: drop what is left, give the channels back, and finish."""
        if self.packets is not None:
            self.packets.clear()
        self.queued = 0
        m = self._matcher
        send_on = self._send_on
        recv_on = self._recv_on
        if send_on is not None and recv_on is not None and m is not None:
            self._send_on = self._recv_on = None
            close_channel(m, send_on)
            close_channel(m, recv_on)
        self.finish()


@mypyc_attr(allow_interpreted_subclasses=True)
class Direct(Ring):
    """Direct algorithm: messages to every peer, ``window`` of them in flight."""

    __slots__ = ("middle_point",)
    middle_point: int

    def __init__(self, com_type, rank, topo, data_size, direction, window):
        super().__init__(com_type, rank, topo, data_size, direction)
        self.packets = deque()
        n = self.nodes_in_ring
        self.middle_point = n - 1
        self.parallel_reduce = n - 1 if window == -1 else min(window, n - 1)
        if com_type == ALL_TO_ALL:
            self.stream_count = n - 1

    def run_general(self, _arg: object = None) -> None:
        self.free_packets += 1
        if self.com_type == ALL_REDUCE and self.stream_count <= self.middle_point:
            # All-reduce: the second half starts once every first-half message arrived.
            if self.total_received < self.middle_point:
                return
            for _ in range(self.parallel_reduce):
                if self.queued and self.stream_count and self.free_packets:
                    self.send_next()
        elif self.queued and self.stream_count and self.free_packets:
            self.send_next()
        if self.stream_count == 0 and self.free_packets == self.parallel_reduce:
            self.end()

    def bundle(self, size, processed: bool) -> None:
        """Queue the packet's partners, release it, then move to the next peer."""
        packets = self.packets
        assert packets is not None  # (only a Ring's is None)
        packets.append((self.curr_sender, self.curr_receiver, size))
        Algorithm.bundle(self, size, processed)
        topo, rank, direction = self.topo, self.rank, self.direction
        receiver = topo.get_receiver(self.curr_receiver, direction)
        if receiver == rank:
            receiver = topo.get_receiver(receiver, direction)
        self.curr_receiver = receiver
        sender = topo.get_sender(self.curr_sender, direction)
        if sender == rank:
            sender = topo.get_sender(sender, direction)
        self.curr_sender = sender

    def non_zero_latency_packets_count(self) -> int:
        if self.topo.dimension != DIM_LOCAL:
            return self.parallel_reduce
        return (self.nodes_in_ring - 1) * self.parallel_reduce


# The factories the plugin registers, here rather than in plugin.py: compiled with their classes
# (tools/compile_core.py), the system layer's call for every phase constructs the algorithm natively.
def make_ring(com_type, rank, topo, size, direction, window):
    return Ring(com_type, rank, topo, size, direction)


def make_direct(com_type, rank, topo, size, direction, window):
    return Direct(com_type, rank, topo, size, direction, window)
