"""The ``inSwitch`` collective algorithm: the switch of a Switch dimension reduces and multicasts.

It lives with the backends that declare switches (``in_switch(dim)`` -> :class:`astra_sim.api.InSwitchSpec`:
analytical here, congestion / flow and ns-3 elsewhere) and is registered by this plugin; the kernel keeps only
the generic pieces it uses (the span recorder's in-switch phases, ``shared.algorithm_state``, and
``per_dimension_groups`` and ``group_planner`` in :class:`astra_sim.api.CollectiveAlgorithmSpec`; the groups
spanning several dimensions are planned in :mod:`astra_network_analytical.group_plan`).

Each NPU streams its data up to the switch of the dimension; the switch reduces the N streams at its
reduction rate and multicasts the result down. One phase on one rank:

1. endpoint delay (the NPU hands the chunk to its NIC);
2. one message through the switch, to the NPU's ring neighbour: it loads the NPU's up link and the
   neighbour's down link once, as the in-switch traffic does, and takes the switch's cut-through time
   (on the analytical backend ``2 L + m / B``). ``m`` is the larger of the up and down streams:
   all-reduce ``c`` up and ``c`` down; reduce-scatter ``c`` up, ``c / N`` down; all-gather ``c`` up,
   ``(N - 1) c`` down (so the lighter direction is overstated on congestion backends);
3. the switch waits for every member's message (a barrier: the reduction needs all inputs), then adds
   its reduction latency and whatever its reduction rate (capped by its buffer) is slower than the
   line rate: ``latency + max(0, r / rate - m / line_rate)`` with ``r`` the reduced bytes (``c`` for
   all-reduce and reduce-scatter, 0 for all-gather, which multicasts only and adds nothing);
4. endpoint delay (the result lands in memory); the phase ends.

The switch streams (as SHARP and NVLS do): it reduces and multicasts each packet as it comes, so the up and
the down link of step 2 overlap and the message costs one ``m / B``, not two. The analytical and flow backends
time a message cut-through already. A backend that stores and forwards whole messages (its network object has
``store_and_forward = True``: the ``congestion`` backend) would charge ``m / B`` on every hop, ``2 S / B`` for an
all-reduce; there the message goes as :data:`STREAM_SEGMENTS` back-to-back segments, which pipeline through the
switch: ``(1 + (hops - 1) / STREAM_SEGMENTS) m / B``, within 4 % of ``m / B`` through one switch.

When the run records spans (breakdown, timeline), each phase is also recorded as an in-switch phase
(:meth:`astra_sim.spans.SpanRecorder.in_switch_phase`): the breakdown counts its exposed time
as in-switch communication and the timelines draw it as an in-switch reduce / multicast slice.

The switch itself is the shared :class:`SwitchReduction` record of the phase. In a folded run
(the folding plugin) it waits only for the members that are simulated: the others are their
mirror images and arrive at the same time.
"""

from __future__ import annotations

from astra_sim.api import InSwitchSpec, in_switch_query
from astra_sim.errors import ConfigError
from astra_sim.spans import (
    IN_SWITCH_ALL_REDUCE as OP_ALL_REDUCE,
    IN_SWITCH_MULTICAST as OP_MULTICAST,
    IN_SWITCH_OP_NAMES as OP_NAMES,
    IN_SWITCH_REDUCE as OP_REDUCE,
)
from astra_sim.system.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, Algorithm
from astra_sim.system.topology import CLOCKWISE, differing_dims

_SEND, _WAIT, _LAND, _DONE = range(4)
#: segments a message is cut into on a store-and-forward backend so that it streams through the switch; each
#: store-and-forward hop after the first then adds 1/32 of the message's time (a model choice, not a measurement)
STREAM_SEGMENTS = 32
#: what a phase does at the switch, as recorded for the breakdown and the timelines (the recorder's codes)
_OPS = {ALL_REDUCE: OP_ALL_REDUCE, REDUCE_SCATTER: OP_REDUCE, ALL_GATHER: OP_MULTICAST}


class SwitchReduction:
    """One phase of one collective at one switch: the members whose data has come through."""

    __slots__ = ("members",)

    def __init__(self):
        self.members = []


class InSwitch(Algorithm):
    """One rank's part of an in-switch all-reduce, reduce-scatter or all-gather on one dimension."""

    __slots__ = ("rank", "topo", "nodes_in_ring", "msg_size", "reduced_bytes", "state", "key", "spec", "expected",
                 "dim", "start_ns", "segments", "segments_left")

    def __init__(self, com_type, rank, topo, data_size):
        if com_type == ALL_TO_ALL:
            raise ConfigError("inSwitch does not implement all-to-all (a switch does not reduce it); choose direct")
        self.com_type = com_type
        self.rank = rank
        self.topo = topo
        self.data_size = data_size
        n = topo.nodes_in_ring
        self.nodes_in_ring = n
        if com_type == ALL_REDUCE:
            self.final_data_size = data_size
            self.msg_size = data_size
            self.reduced_bytes = data_size
        elif com_type == REDUCE_SCATTER:
            self.final_data_size = data_size // n
            self.msg_size = data_size
            self.reduced_bytes = data_size
        else:  # all-gather: multicast only
            self.final_data_size = data_size * n
            self.msg_size = data_size * (n - 1)
            self.reduced_bytes = 0
        self.state = _SEND
        self.key = None
        self.spec = None
        self.expected = n
        self.dim = 0  # the network dimension, or a tuple of them (an aggregation tree)
        self.start_ns = 0
        self.segments = 1
        self.segments_left = 0

    def bind(self, stream):
        super().bind(stream)
        self.spec = switch_spec(self.sys, self.topo)
        self.dim = _dimension_of(self.sys, self.topo)
        members = tuple(self.topo.members)
        self.key = (members, self._tag, self.com_type)
        if getattr(self.sys.shared.network, "store_and_forward", False):
            self.segments = max(1, min(STREAM_SEGMENTS, self.msg_size))
        symmetry = self.sys.shared.symmetry
        if symmetry is not None:
            self.expected = sum(1 for npu in members if symmetry.is_representative(npu))

    def run_init(self):
        self.start_ns = self.sys.engine.now
        self.bundle(self.data_size, False)

    def run_general(self, _arg=None):
        if self.state == _SEND:
            self.state = _WAIT
            topo, rank = self.topo, self.rank
            receiver, sender = topo.get_receiver(rank, CLOCKWISE), topo.get_sender(rank, CLOCKWISE)
            self.segments_left = self.segments
            for size in segment_sizes(self.msg_size, self.segments):
                self._send(rank, receiver, size, self._tag, None, None)
                self._recv(sender, rank, size, self._tag, self._received, None)
        elif self.state == _LAND:
            self.state = _DONE
            recorder = self.sys.shared.recorder
            if recorder is not None:
                recorder.in_switch_phase(self.sys.rank, self.stream.dataset.node_id, _OPS[self.com_type], dims_mask(self.dim),
                                         self.data_size, self.start_ns, self.sys.engine.now)
            self.finish()

    def run_received(self, _arg=None):
        """This rank's data has come through the switch (its last segment); the last member's releases everyone."""
        self.segments_left -= 1
        if self.segments_left:
            return
        pending = self.sys.shared.algorithm_state.setdefault("in_switch_pending", {})
        record = pending.get(self.key)
        if record is None:
            record = pending[self.key] = SwitchReduction()
        record.members.append(self)
        if len(record.members) < self.expected:
            return
        del pending[self.key]
        delay = self.switch_delay_ns()
        for member in record.members:
            member._register(member._landed, None, delay)

    def switch_delay_ns(self):
        """The switch's time beyond the message's cut-through time: latency and a slow reduction."""
        if not self.reduced_bytes:
            return 0
        spec = self.spec
        slower = self.reduced_bytes / effective_rate(spec) - self.msg_size / spec.line_rate
        return int(spec.latency_ns) + max(0, int(slower))

    def _landed(self, _arg=None):
        self.state = _LAND
        self.bundle(self.final_data_size, False)


def segment_sizes(size, segments):
    """``size`` bytes cut into ``segments`` back-to-back pieces (the first ones a byte larger where it does not
    divide)."""
    base, extra = divmod(size, segments)
    return [base + 1] * extra + [base] * (segments - extra)


def _dimension_of(sys, topo):
    """The network dimension a ring runs along (a group's ring: the one dimension its members differ in), or
    the dimensions of an aggregation tree (a tuple; :class:`astra_network_analytical.group_plan.TreeRingTopology`)."""
    if topo.native_dim is not None:
        return topo.native_dim
    tree = getattr(topo, "switch_dims", None)
    if tree:
        return tree
    differ = differing_dims(topo.members, sys.shared.npus_per_dim)
    if len(differ) != 1:
        raise ConfigError(
            f"inSwitch needs the NPUs of a collective phase to share one switch; communicator group "
            f"{list(topo.members)[:8]} spans dimensions {differ}"
        )
    return differ[0]


def switch_spec(sys, topo):
    """The switch of the ring's dimension (checked: a Switch that can reduce); a ConfigError naming the
    dimension otherwise. For an aggregation tree over several dimensions, their switches combined
    (:func:`tree_spec`)."""
    dim = _dimension_of(sys, topo)
    if isinstance(dim, tuple):
        cache = sys.shared.algorithm_state.setdefault("in_switch_specs", {})
        if dim not in cache:
            cache[dim] = tree_spec([_one_switch(sys, d) for d in dim])
        return cache[dim]
    return _one_switch(sys, dim)


def effective_rate(spec):
    """The reduction rate the switch's buffer allows (bytes per ns): a buffer smaller than ``reduce_rate`` x the
    credit loop (two link latencies + ``latency_ns``) caps it at buffer / loop (:class:`astra_sim.api.InSwitchSpec`)."""
    loop = 2 * spec.link_latency_ns + spec.latency_ns
    if spec.buffer_bytes > 0 and loop > 0:
        return min(spec.reduce_rate, spec.buffer_bytes / loop)
    return spec.reduce_rate


def tree_spec(specs):
    """An aggregation tree of switch tiers as one switch: each tier reduces once (latencies add up), the data
    cross every tier's links (link latencies add up), and the slowest tier's rates and smallest buffer bind."""
    buffers = [s.buffer_bytes for s in specs if s.buffer_bytes]
    return InSwitchSpec(can_reduce=True, line_rate=min(s.line_rate for s in specs),
                        reduce_rate=min(effective_rate(s) for s in specs),
                        latency_ns=sum(int(s.latency_ns) for s in specs), buffer_bytes=min(buffers) if buffers else 0,
                        link_latency_ns=sum(s.link_latency_ns for s in specs))


def dims_mask(dim):
    """A phase's dimension(s) as a bit mask (for the span recorder)."""
    return sum(1 << d for d in dim) if isinstance(dim, tuple) else 1 << dim


def _one_switch(sys, dim):
    shared = sys.shared
    path = shared.system_config.path
    cache = shared.algorithm_state.setdefault("in_switch_specs", {})
    if dim in cache:
        return cache[dim]
    ask = in_switch_query(shared.network)
    spec = ask(dim) if ask is not None else None
    if spec is None:
        raise ConfigError(f"{path}: inSwitch runs only on Switch dimensions; network dimension {dim} is not a Switch")
    if not spec.can_reduce:
        raise ConfigError(f"{path}: inSwitch on network dimension {dim}: its switch cannot reduce "
                          "(switch_reduction is false in the network configuration)")
    cache[dim] = spec
    return spec


__all__ = ["InSwitch", "SwitchReduction", "STREAM_SEGMENTS", "segment_sizes", "switch_spec", "tree_spec", "dims_mask",
           "OP_ALL_REDUCE", "OP_REDUCE", "OP_MULTICAST", "OP_NAMES"]
