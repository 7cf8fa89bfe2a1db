"""The native algorithms on their own: one phase on every rank of a ring or tree, driven by a small event
loop instead of the system layer (each message takes ``LINK_NS``; the memory bus ``ENDPOINT_NS``; a reduction
``reduce_ns(size)``), so each algorithm's send pattern, sizes and per-rank time can be checked by hand.
The kernel's parity tests (tests/test_parity.py) check the same classes against the reference, end to end."""

from __future__ import annotations

import heapq
from collections import defaultdict, deque

import pytest
from astra_sim.errors import ConfigError
from astra_sim.system.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER
from astra_sim.system.topology import CLOCKWISE, DIM_LOCAL, RingTopology
from hypothesis import given, settings, strategies as st

from astra_collectives_native import LOCAL_RING_DELAY_NS, Direct, DoubleBinaryTree, HalvingDoubling, Ring
from astra_collectives_native.tree_topology import BinaryTree

LINK_NS = 100
ENDPOINT_NS = 25  # not LOCAL_RING_DELAY_NS (10), so a test can tell the two apart


def reduce_ns(size):
    """3 ns per 1600 bytes, whole steps (the shape of the reference's local-mem-bw cost)."""
    return 3 * (size // 1600)


class Loop:
    """Events in time order, messages matched to receives by (source, destination, tag)."""

    def __init__(self):
        self.now = 0
        self._events = []
        self._seq = 0
        self.arrived = defaultdict(int)  # (src, dst, tag) -> messages arrived, not yet received
        self.posted = defaultdict(deque)  # (src, dst, tag) -> receive callbacks waiting
        self.sent = defaultdict(list)  # src -> [(dst, size, time)]
        self.finished = {}  # rank -> time

    def at(self, delay, fn, arg):
        self._seq += 1
        heapq.heappush(self._events, (self.now + delay, self._seq, fn, arg))

    def run(self):
        while self._events:
            self.now, _, fn, arg = heapq.heappop(self._events)
            fn(arg)

    def send(self, src, dst, size, tag):
        self.sent[src].append((dst, size, self.now))
        self.at(LINK_NS, self._arrive, (src, dst, tag))

    def _arrive(self, key):
        if self.posted[key]:
            fn, arg = self.posted[key].popleft()
            fn(arg)
        else:
            self.arrived[key] += 1

    def recv(self, src, dst, tag, fn, arg):
        key = (src, dst, tag)
        if self.arrived[key]:
            self.arrived[key] -= 1
            self.at(0, fn, arg)
        else:
            self.posted[key].append((fn, arg))


class FakeSys:
    """What :meth:`Algorithm.bind` reads from a rank's system layer."""

    endpoint_delay_ns = ENDPOINT_NS

    def __init__(self, loop, rank):
        self.loop, self.rank = loop, rank

    def msg_send(self, src, dst, size, tag, fn, arg):
        self.loop.send(src, dst, size, tag)

    def msg_recv(self, src, dst, size, tag, fn, arg):
        self.loop.recv(src, dst, tag, fn, arg)

    def register_event(self, fn, arg, delay):
        self.loop.at(delay, fn, arg)

    def reduction_delay_ns(self, size):
        return reduce_ns(size)

    def proceed_to_next_phase(self, stream):
        assert self.rank not in self.loop.finished, f"rank {self.rank} finished twice"
        self.loop.finished[self.rank] = self.loop.now


class FakeStream:
    tag = 7

    def __init__(self, sys):
        self.sys = sys


def run_phase(algorithms):
    """Bind ``{rank: algorithm}``, start them all at t = 0, run to the end: the loop (finish times, sends)."""
    loop = Loop()
    for rank, algorithm in algorithms.items():
        algorithm.bind(FakeStream(FakeSys(loop, rank)))
    for algorithm in algorithms.values():
        loop.at(0, lambda a: a.run_init(), algorithm)
    loop.run()
    assert sorted(loop.finished) == sorted(algorithms), "every rank finishes its phase"
    assert not any(loop.posted.values()) and not any(loop.arrived.values()), "every message is received"
    return loop


def rings(n, dimension=None):
    out = {rank: RingTopology.homogeneous(rank, n, 1) for rank in range(n)}
    if dimension is not None:
        out = {rank: RingTopology(rank, list(range(n)), dimension) for rank in range(n)}
    return out


# ---------------------------------------------------------------- ring


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_all_reduce_closed_form(n):
    """2(n-1) messages of S/n to the clockwise neighbour; T = 2(n-1) L + (2n-1) E + (n-1) R(S/n)."""
    size = 1 << 20
    loop = run_phase({r: Ring(ALL_REDUCE, r, topo, size, CLOCKWISE) for r, topo in rings(n).items()})
    m = size // n
    expected = 2 * (n - 1) * LINK_NS + (2 * n - 1) * ENDPOINT_NS + (n - 1) * reduce_ns(m)
    assert loop.finished == {r: expected for r in range(n)}
    for rank in range(n):
        assert [(dst, s) for dst, s, _ in loop.sent[rank]] == [((rank + 1) % n, m)] * (2 * (n - 1))


@pytest.mark.parametrize("com_type,messages,msg,final,reductions", [
    (ALL_GATHER, 3, 4096, 4 * 4096, 0),
    (REDUCE_SCATTER, 3, 1024, 1024, 3),
    (ALL_TO_ALL, 6, 1024, 4096, 0),
])
def test_ring_other_collectives_on_4(com_type, messages, msg, final, reductions):
    """All-gather sends the whole buffer n-1 times, reduce-scatter a quarter n-1 times (reducing each),
    all-to-all a quarter n(n-1)/2 times."""
    algorithms = {r: Ring(com_type, r, topo, 4096, CLOCKWISE) for r, topo in rings(4).items()}
    loop = run_phase(algorithms)
    for rank, algorithm in algorithms.items():
        assert algorithm.final_data_size == final
        assert [s for _, s, _ in loop.sent[rank]] == [msg] * messages
    expected = messages * LINK_NS + (messages + 1) * ENDPOINT_NS + reductions * reduce_ns(msg)
    assert set(loop.finished.values()) == {expected}


def test_anticlockwise_ring_sends_the_other_way():
    loop = run_phase({r: Ring(ALL_REDUCE, r, topo, 4096, 1 - CLOCKWISE) for r, topo in rings(4).items()})
    assert {dst for dst, _, _ in loop.sent[0]} == {3}


def test_communicator_group_ring_uses_the_fast_bus_delay():
    """A local (communicator-group) ring replaces endpoint-delay by LOCAL_RING_DELAY_NS."""
    assert LOCAL_RING_DELAY_NS != ENDPOINT_NS  # else this test could not tell them apart
    n, size = 4, 1 << 16
    loop = run_phase({r: Ring(ALL_GATHER, r, topo, size, CLOCKWISE) for r, topo in rings(n, DIM_LOCAL).items()})
    assert set(loop.finished.values()) == {(n - 1) * LINK_NS + n * LOCAL_RING_DELAY_NS}


# ---------------------------------------------------------------- direct


@pytest.mark.parametrize("window,in_flight", [(-1, 3), (1, 1), (2, 2), (9, 3)])
def test_direct_all_gather_sends_to_every_peer_window_at_a_time(window, in_flight):
    """Each rank sends its buffer to every other rank; ``window`` (-1: n-1) of them start together."""
    algorithms = {r: Direct(ALL_GATHER, r, topo, 4096, CLOCKWISE, window) for r, topo in rings(4).items()}
    loop = run_phase(algorithms)
    assert algorithms[0].parallel_reduce == in_flight
    for rank in range(4):
        assert sorted(dst for dst, _, _ in loop.sent[rank]) == sorted(set(range(4)) - {rank})
        assert {s for _, s, _ in loop.sent[rank]} == {4096}
    first_wave = [t for _, _, t in loop.sent[0] if t == ENDPOINT_NS]
    assert len(first_wave) == in_flight


def test_direct_all_reduce_waits_for_the_whole_first_half():
    """All-reduce: n-1 reduce-scatter messages, then (once all of them arrived) n-1 all-gather messages."""
    n, size = 4, 1 << 16
    algorithms = {r: Direct(ALL_REDUCE, r, topo, size, CLOCKWISE, -1) for r, topo in rings(n).items()}
    loop = run_phase(algorithms)
    for rank in range(n):
        times = [t for _, _, t in loop.sent[rank]]
        assert len(times) == 2 * (n - 1)
        assert max(times[:n - 1]) + LINK_NS <= min(times[n - 1:])
        assert {s for _, s, _ in loop.sent[rank]} == {size // n}


# ---------------------------------------------------------------- halving-doubling


def test_halving_doubling_all_reduce_partners_and_sizes():
    """On 8 ranks: partners rank ^ 1, ^ 2, ^ 4 with S/2, S/4, S/8 (halving), then back (doubling)."""
    size = 1 << 16
    algorithms = {r: HalvingDoubling(ALL_REDUCE, r, topo, size) for r, topo in rings(8).items()}
    loop = run_phase(algorithms)
    for rank in range(8):
        sent = [(dst, s) for dst, s, _ in loop.sent[rank]]
        assert sent == [(rank ^ 1, size // 2), (rank ^ 2, size // 4), (rank ^ 4, size // 8),
                        (rank ^ 4, size // 8), (rank ^ 2, size // 4), (rank ^ 1, size // 2)]
    assert len(set(loop.finished.values())) == 1


def test_halving_doubling_all_gather_doubles_from_the_farthest_partner():
    algorithms = {r: HalvingDoubling(ALL_GATHER, r, topo, 1024) for r, topo in rings(4).items()}
    loop = run_phase(algorithms)
    assert [(dst, s) for dst, s, _ in loop.sent[1]] == [(3, 1024), (0, 2048)]
    assert algorithms[1].final_data_size == 4096


def test_halving_doubling_needs_a_power_of_two():
    with pytest.raises(ConfigError, match=r"power-of-two .* got 6"):
        HalvingDoubling(ALL_REDUCE, 0, RingTopology.homogeneous(0, 6, 1), 4096)


def test_halving_doubling_has_no_all_to_all():
    with pytest.raises(ConfigError, match="all-to-all"):
        HalvingDoubling(ALL_TO_ALL, 0, RingTopology.homogeneous(0, 4, 1), 4096)


# ---------------------------------------------------------------- double binary tree


@pytest.mark.parametrize("n,root_max", [(2, True), (4, True), (8, False), (16, True)])
def test_double_binary_tree_reduces_up_and_broadcasts_down(n, root_max):
    """Every tree edge carries the whole buffer once up and once down: 2(n-1) messages in all."""
    size = 8192
    tree = BinaryTree(n, 0, 1, root_max=root_max)
    loop = run_phase({r: DoubleBinaryTree(r, tree, size) for r in range(n)})
    edges = {(child, parent) for child, parent in tree.parent.items() if parent >= 0}
    sends = [(src, dst) for src, out in loop.sent.items() for dst, s, _ in out if s == size]
    assert sorted(sends) == sorted(edges | {(p, c) for c, p in edges})
    root = next(r for r in range(n) if tree.parent[r] < 0)
    leaves = [r for r in range(n) if tree.node_type(r) == "leaf"]
    # A leaf finishes last: the broadcast reaches it after the root's.
    assert max(loop.finished.values()) == max(loop.finished[r] for r in leaves) > loop.finished[root]


def test_double_binary_tree_ignores_the_collective_type():
    tree = BinaryTree(4, 0, 1, root_max=True)
    assert DoubleBinaryTree(0, tree, 64).com_type == ALL_REDUCE


# ---------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), size=st.integers(1, 1 << 20), com_type=st.sampled_from([ALL_REDUCE, ALL_GATHER,
                                                                                       REDUCE_SCATTER, ALL_TO_ALL]),
       window=st.sampled_from([-1, 1, 2, 5]))
def test_ring_and_direct_always_complete_and_send_what_they_receive(n, size, com_type, window):
    for make in (lambda r, t: Ring(com_type, r, t, size, CLOCKWISE),
                 lambda r, t: Direct(com_type, r, t, size, CLOCKWISE, window)):
        loop = run_phase({r: make(r, topo) for r, topo in rings(n).items()})
        counts = {len(out) for out in loop.sent.values()}
        assert len(counts) == 1, "every rank sends as many messages"


@settings(max_examples=20, deadline=None)
@given(log2n=st.integers(1, 5), size=st.integers(64, 1 << 20), com_type=st.sampled_from([ALL_REDUCE, ALL_GATHER,
                                                                                           REDUCE_SCATTER]))
def test_halving_doubling_always_completes(log2n, size, com_type):
    n = 1 << log2n
    loop = run_phase({r: HalvingDoubling(com_type, r, topo, size) for r, topo in rings(n).items()})
    steps = 2 * log2n if com_type == ALL_REDUCE else log2n
    assert all(len(out) == steps for out in loop.sent.values())
