"""Time folding: jump over the repeats of a pipeline's steady state, to the ns (issue 37; ``astra run
--time-fold``, off by default: it pays only where the steady state is several periods long, see the plugin's
README for what it measured and what bounds it).

Design. A 1F1B or interleaved pipeline's steady state repeats: after a period of ``P`` ns every rank is
``D_r`` nodes further in its trace and the whole simulation state is the same, moved on. The run is then
determined: the next period does what the last did, ``D_r`` nodes and ``P`` ns on. So the run is simulated
up to a second occurrence of one state, the repeats that follow are jumped over (their finished nodes are
reported as the simulated period's, moved on), and the rest (the cool-down) is simulated as usual.

*What is compared.* At anchor points (the end of a nanosecond in which the first rank with sends or receives
finished one; once per so many of its sends and receives, :mod:`astra_folding.time_anchor`, and within a
budget of work per event simulated; a run may jump several times), the whole state is written canonically, with every time relative to now and every node id of
rank ``r`` relative to the number of nodes ``f_r`` it has finished:

* the engine's pending events (time, then ``(fn, arg)`` in order): a system layer's batch of its tick, a node's
  completion or launch, a message's arrival, the end of a timed collective phase; anything else (a packet of a
  native collective, a backend's event) cannot be compared and no jump is made there;
* per rank its system layer (the batches waiting for their ticks, the queue allocators, and its collectives:
  every stream in its queues with its phases and dataset, written relative by
  :mod:`astra_folding.time_collectives`, whose docstring says why its stream counters need not be compared) and
  its workload (ready nodes in heap order, busy slots, running nodes with their start times, the nodes with some
  but not all parents finished and their counts, and its host's walk, or that the host is behind, see below);
* the matcher's waiting messages (ends, size, which node sent or will receive them, arrived or not), the tag
  taken relative to that node's ``comm_tag``;
* but not the receives without parents still waiting for their message (a trace may post them all at the
  start, as the LLM generator does; with a host, once it has posted them all): they are the trace's future. The jump checks instead that every one the
  repeats finish is still waiting, and that every one a repeat's send or receive could find (its key one
  step on from a key the period looked up) is the image of one the period touched; their start times are
  their own.

*Why that suffices.* Two anchor states A (at ``t_A``) and B (at ``t_B``) that are equal so written differ by
``σ``: node ``n`` of rank ``r`` -> ``n + D_r`` (``D_r = f_r(B) - f_r(A)``), time + ``P``, the tags of the
messages of channel ``c`` (sender, receiver, size) + ``T_c``. Messages match only within a channel (the key
holds it), so moving each channel's tags by its own step is a bijection of the keys that keeps every match: a
pipeline's transfers (numbered by micro-batch) and tensor-parallel exchanges (numbered by a running count) may
step differently.
The run is deterministic, and what it does from a state depends on that state and on the trace nodes it
touches (type, attributes, duration, children, number of parents). So if every node the run touched from A
to B (those it finished, their children, and those in A's state) equals its image under ``σ^j`` for
``j = 1..k`` (same type, duration, attributes, children and parents moved by ``j D_r``, ``comm_tag`` +
``j T_c``), the run from B repeats the run from A ``k`` times, moved by ``σ``: the state after them is
``σ^k(B)`` at ``t_B + k P``. Ranks are not relabelled, so delays between the same ranks stay the same.
Only what the simulation never reads is left out: node names and ``label`` attributes (outputs read them, and
see the real nodes; ``replay`` and ``roofline`` time a node from its duration or its ``num_ops`` and
``tensor_size``), accumulators (compute, communication and CPU time, messages, bytes, events, node counts),
which move on by ``k`` times their change over the period (so do the system layer's stream counters), and the
order of the matcher's keys (read only to list unmatched messages at the end).

*The gpu compute model* (``--compute-model gpu``) times a kernel at its issue
from the node: its attributes and ``inputs_values`` (compared), its name when it is an ATen op's (the op it
is timed as: compared then, :func:`_gpu_name_key`) and, for a kernel with ``ctrl_deps``, the CPU op that
launched it and that op's other kernels (not compared: such a node stops the jump). What it keeps besides
is memoised (per op and shapes: the same answer again) or counted (``counts``, how nodes were timed: an
accumulator, moved on by ``k`` times the period's change); its warnings are once per op and shapes, so
the repeats, timing the period's images, warn nothing new. So its time for a node is a function of what is
compared, and the argument above holds. With ``--gpu-contention`` (every ``--platform`` run's default, the
``measured`` model) a kernel's time also reads the rank's collectives and sends running then: their nodes
are in the compared state (running nodes) and their attributes compared, and what is read of them is a sum
of integer SM counts (or a fixed HBM share), whatever order the running set is iterated in; ``sm-hbm`` with
per-transfer HBM shares adds floats in that order, which a jump does not keep, and is refused. The model's
records, an interval per kernel timed and per collective or send finished, and its count of contended
kernels, are the period's images: they are replayed per rank (``_repeat_intervals``), ``k`` times moved by
``j P``.

*A host* (``host_launch_us``, every ``--platform`` run's default) launches the GPU ops in trace order: its
position, clock and what waits for it are compared, or that it is behind its GPU; the ops it holds from the start
(the receives without parents) are the trace's, posted at its launches (:mod:`astra_folding.time_host`). A host
ahead of its GPU, posting them early, is not compared and is run forward at the jump
(:mod:`astra_folding.time_ahead`, whose checks keep the GPU side blind to it).

*The jump.* The repeats' finished nodes are reported: when nothing but the span recorder observes finished
nodes (the breakdown, timelines and the critical path read spans), in bulk: each rank's spans get the
period's, moved by ``j D_r`` and ``j P`` (numpy, in the rank's finish order, which is the unfolded run's),
the node counts move on by ``k`` times the period's, and the parent counts are set to those of ``σ^k(B)``
(:meth:`TimeFolder._report_in_bulk`), O(period) rather than O(nodes jumped over) calls; otherwise (an
observer of its own: the gpu model's contention, a plugin's) every one is reported again, ``k`` times, in
the order the unfolded run reports them. Then the state B is moved by ``σ^k`` (events, batches, ready and
running nodes, messages) and the accumulators move on. The run then goes on as usual.

*When it does not jump* (``settings.fold.time.reason`` says why): ranks folded by symmetry (the folded
engine's events carry digests of their absolute scheduling histories, which its tie check compares; moving
them on is not shown to keep the check's answers), a network backend with its own state (congestion queues,
flows, packets), rendezvous messages, a compute model not known to be a function of the node (any but
``replay``, ``roofline`` and ``gpu``; ``gpu`` with per-transfer float HBM shares), the reference log (it
records every issue) or another observer of collective plans, an anchor rank whose sends and receives have
no long run of rows alike (no steady state: nothing is looked at), or a state that never
repeated or could not be compared where it did (a native collective's packets in flight at every anchor).
"""

from __future__ import annotations

from heapq import heappop
from operator import itemgetter

from astra_sim.api import delay_function
from astra_sim.chakra import types as T
from astra_sim.compute import ReplayModel, RooflineModel
from astra_sim.system.frontend import Message

from astra_folding.time_collectives import CollectiveCanon, Incomparable, counters
from astra_folding.time_anchor import MAX_P2P_PERIOD, p2p_period as _p2p_period
from astra_folding import time_ahead, time_host
from astra_folding.time_inert import InertReceives, preposted_repeats
from astra_folding.time_ties import RESET_TIMES
from astra_folding.time_jump import (
    ARRIVED, CALL_EVENTS, LAUNCH, NODE_DONE, TIMED_OUT, WAKE, JumpMixin, channel, interval_marks, kernel_method,
    message_key as _key,
)

#: compute models whose time for a node depends on the node only and that keep no per-node records
STATELESS_COMPUTE = (ReplayModel, RooflineModel)
#: node attributes that only outputs read (the critical path, timelines: they see the real nodes, replayed); a
#: node's name is not compared either (outputs and error messages read it; the compute models above do not)
UNREAD_ATTRS = frozenset(("label",))
#: anchor snapshots kept before they are dropped (and the finished-node log with them), and per state
MAX_SNAPSHOTS = 4096
MAX_OCCURRENCES = 256
#: finished nodes kept for a jump (from the oldest snapshot on) before the snapshots start again
MAX_LOG = 1 << 21
#: looking for repeats may cost this many units (a node or waiting message named by a state, a node pair compared
#: x 8) per event simulated so far, plus the floor: it stays a small part of a run that never repeats (measured on
#: benchmarks/bench_time_fold.py 1f1b: a unit about 0.6 us of CPU, an event 4-7 us; the floor about 30 ms). The
#: floor lets the first looks come one anchor apart, where the shortest period shows
LOOK_WORK_PER_EVENT = 1
LOOK_WORK_FLOOR = 50_000
_P2P = (T.COMM_SEND_NODE, T.COMM_RECV_NODE)
def _is_gpu_model(sim):
    """Whether the run times its kernels with the gpu plugin's model (``--compute-model gpu``): see
    :func:`_gpu_name_key` for what it reads of a node."""
    return sim.compute_model_name == "gpu" and hasattr(sim.compute_model, "counts")


def _gpu_name_key(node):
    """What the gpu model reads of a node beyond the compared signature: its name when it is an ATen op's (the op
    it times the node as: ``aten::...``), else only that it is not one. A node launched by a CPU op (``ctrl_deps``)
    is timed from that op and its other kernels, which are not compared."""
    if node.ctrl_deps:
        raise Incomparable(f"node {node.id} is launched by a CPU op (ctrl_deps), which the gpu model times it from")
    return node.name if node.name.startswith("aten::") else None


def refusal(sim):
    """Why the run must not fold in time (a sentence), or None."""
    if delay_function(sim.network) is None:
        return (f"the {sim.network_backend_name} network backend keeps its own state (queues, flows or packets), "
                "which is not compared")
    if sim.rendezvous:
        return "rendezvous messages wait on handshakes that are not compared"
    model = sim.compute_model
    contention = getattr(model, "contention", None) if _is_gpu_model(sim) else None
    if contention is not None and contention.mode == "sm-hbm" and contention.per_transfer:
        return ("the gpu model's --gpu-contention with per-transfer HBM shares adds the running transfers' shares as "
                "floats in the order of a set, which a jump does not keep (--gpu-comm-hbm-share or "
                "--gpu-contention-model measured fold)")
    if not isinstance(model, STATELESS_COMPUTE) and not _is_gpu_model(sim):
        return (f"the {sim.compute_model_name} compute model is not known to time a node from the node alone "
                "without per-node records")
    if any(w is not None and w.issue_log is not None for w in sim.workloads):
        return "the reference log records every issued node"
    if sim.ranks.shared.plan_observers:
        return "an observer of collective plans sees every collective, which a jump does not plan again"
    return None


class TimeFolder(JumpMixin):
    """Runs a built simulation's engine, jumping over the repeats of a steady state (see the module docstring).
    ``info`` is the report's ``settings.fold.time``."""

    def __init__(self, sim, info):
        self.sim = sim
        self.engine = sim.engine
        self.workloads = [w for w in sim.workloads if w is not None]
        self.by_rank = {w.rank: w for w in self.workloads}
        self.systems = {s.rank: s for s in sim.systems if s is not None}
        self.matcher = sim.matcher
        self.shared = sim.ranks.shared
        self.info = info
        self.anchor = next((w.rank for w in self.workloads
                            if any(n.type in _P2P for n in w.nodes.values())), None)
        # look at the state once per repeat of the anchor's sends and receives (every one when they do not repeat)
        self.every = _p2p_period(self.by_rank[self.anchor]) if self.anchor is not None else None
        self.anchor_p2p = 0
        self.record = self.shared.record_node
        self.gpu = sim.compute_model if _is_gpu_model(sim) else None  # its counts move on with the jumps
        self.contention = getattr(self.gpu, "contention", None)  # --gpu-contention: its intervals too
        self.name_key = _gpu_name_key if self.gpu is not None else None  # what else of a node it reads
        self.log = []  # (rank, node id, start, end) of the nodes finished since the oldest snapshot
        self.touched = {w.rank: set() for w in self.workloads}  # children of finished nodes (partial counts)
        self.snapshots = {}
        self.hit = False
        self.reason = None  # why a repeated state was not jumped over
        self.incomparable = None  # the first piece of state that could not be compared
        self.looks = 0
        self.kept = 0  # snapshots kept
        self.work = 0  # what looking for repeats has cost (see LOOK_WORK_PER_EVENT)
        self.signatures = {w.rank: {} for w in self.workloads}  # see _signature
        self.parents = self.root_recvs = self.inert_cache = None  # see _trace_facts
        self._live = ()  # the matcher's keys the last look found not all pre-posted (see _canonical)
        self._posted_keys = set()  # the keys sends and receives finished since the last look looked up (_scan_log)
        self.scanned = 0  # how much of the log _scan_log has seen
        self.posting = None  # the ranks whose receives without parents are pre-posted (time_host.posts_all)
        self.ahead_now = frozenset()  # the ranks whose host is ahead of its GPU (time_ahead), of them
        self.walks = {}  # per rank whose host was ahead: its walk (time_ahead.Walk; None: not run ahead)
        self.tick_logs = {}  # per rank whose host holds ops: its GPU's batches (time_ahead.TickLog)
        self.symmetry = sim.symmetry  # ranks folded by symmetry: see _histories
        self.width = 2 if self.engine.fold is None else 3  # an engine event: fn, arg (and its history)

    # ------------------------------------------------------------ the event loop
    def run(self):
        """:meth:`astra_sim.engine.EventEngine.run`, with a look at the state at the end of every anchor's
        nanosecond."""
        engine = self.engine
        if self.anchor is None:
            self.info.update(folded=False, reason="no rank sends or receives: there is no pipeline to fold")
            return engine.run()
        if self.every is None:  # a repeat of the whole state repeats the anchor's sends and receives
            self.info.update(folded=False, reason=f"rank {self.anchor}'s sends and receives do not repeat long enough "
                             "anywhere in its trace: no steady state long enough to jump over")
            return engine.run()
        self.shared.record_node = self._record
        self.tick_logs = time_ahead.install(self)
        try:
            times, buckets = engine.times, engine.buckets
            count = engine._run_end_of_ns() if engine._end_of_ns else 0
            while times:
                time_ns = heappop(times)
                engine.now = time_ns
                bucket = buckets[time_ns]
                i = 0
                if self.width == 2:
                    while i < len(bucket):
                        bucket[i](bucket[i + 1])
                        i += 2
                else:  # a folded engine's events carry their histories (FoldedEvents.run)
                    while i < len(bucket):
                        engine.current = bucket[i + 2]
                        bucket[i](bucket[i + 1])
                        i += 3
                count += i // self.width
                del buckets[time_ns]
                if engine._end_of_ns:
                    count += engine._run_end_of_ns()
                if self.hit:
                    self.hit = False
                    count += self._at_anchor(count)
        finally:
            self.shared.record_node = self.record
            time_ahead.uninstall(self, self.tick_logs)
        engine.events_run += count
        self.info.pop("_most", None)
        if "periods" not in self.info:
            reason = self.reason or f"the state never repeated at the {self.looks:,} points it was compared"
            if self.incomparable is not None and self.reason is None:
                reason += f" (at some it could not be: {self.incomparable})"
            self.info.update(folded=False, reason=reason)
        return count

    def _record(self, rank, node, start_ns, end_ns):
        self.log.append((rank, node.id, start_ns, end_ns))
        if rank == self.anchor and node.type in _P2P:
            self.anchor_p2p += 1
            if self.anchor_p2p % self.every == 0:
                self.hit = True
        self.record(rank, node, start_ns, end_ns)

    # ------------------------------------------------------------ snapshots
    def _at_anchor(self, count):
        """Write the state canonically; when it was seen before (the shortest period first), try to jump.
        Returns the events jumped over."""
        if any(w.finish_ns is not None for w in self.workloads):
            return 0  # the cool-down: nothing repeats any more
        if len(self.log) > MAX_LOG:  # too long since the oldest snapshot: start again from here
            self._scan_log()
            self.snapshots = {}
            self.kept = self.scanned = 0
            self.log = []
        if self.work > LOOK_WORK_PER_EVENT * count + LOOK_WORK_FLOOR:
            return 0  # looking has cost its share of the run so far: skip this one
        self.looks += 1
        try:
            key, refs, tags = self._canonical()
        except Incomparable as exc:
            if self.incomparable is None:
                self.incomparable = str(exc)
            return 0
        snap = (self.engine.now, {w.rank: self._finished(w) for w in self.workloads}, len(self.log), count,
                self._accumulators(), refs, tags)
        seen = self.snapshots.setdefault(key, [])
        best = None
        for tries, earlier in enumerate(reversed(seen)):
            if tries and self.work > LOOK_WORK_PER_EVENT * count + LOOK_WORK_FLOOR:
                break  # the nearest earlier occurrence is always tried; older ones within the budget
            # the tags the two states name must all have moved by one step: a cheap test before the trace's
            if _moved_evenly(earlier[6], tags):
                found = self._plan_jump(earlier, snap)
                if found is not None and (best is None or found[0] > best[0]):
                    best = found  # the earlier state whose repeats skip the most events
        if best is not None:  # its check is paid by the events it skips (it costs less per event than simulating)
            self.work -= best[-1]
            return self._take_jump(*best[1:-1])
        seen.append(snap)
        if len(seen) > MAX_OCCURRENCES:
            del seen[0]
        self.kept += 1
        if self.kept > MAX_SNAPSHOTS:  # start again from this one; the finished-node log with it
            self.snapshots = {key: [snap[:2] + (0,) + snap[3:]]}
            del self.log[:snap[2]]
            self.scanned -= snap[2]
            self.kept = 1
        return 0

    def _trace_facts(self):
        """Per rank each node's number of parents, and the receives without any (issued at the start, they wait
        for their message: see :meth:`_preposted`; with a host, only once it has posted them all): worked out at
        the first look."""
        if self.parents is None:
            self.parents = {w.rank: _parent_counts(w.children) for w in self.workloads}
            self.all_roots = {w.rank: {i for i, n in w.nodes.items() if n.type == T.COMM_RECV_NODE
                                       and not self.parents[w.rank].get(i)} for w in self.workloads}
        ahead = frozenset(w.rank for w in self.workloads if w.host is not None and time_host.ahead(w))
        posting = frozenset(w.rank for w in self.workloads if time_host.posts_all(w)) | ahead
        for rank in ahead - self.walks.keys():
            walk = time_ahead.Walk(self.by_rank[rank])
            timed = time_ahead.messages_take_time(walk, delay_function(self.sim.network))
            self.walks[rank] = walk if timed else None
        ahead = frozenset(rank for rank in ahead if self.walks[rank] is not None)
        if self.tick_logs and len(posting - ahead) == len(self.workloads):  # no host holds ops: nothing to follow
            time_ahead.uninstall(self, self.tick_logs)
        self.ahead_now = ahead  # (a state with a host ahead compares unequal to one without: no new start)
        if posting != self.posting:  # (a host ahead or done posting: look again)
            if self.posting is not None:
                self._scan_log()
                self.snapshots, self.log = {}, []
                self.kept = self.scanned = 0
                time_ahead.clear(self.tick_logs)
            self.posting = posting
            self.root_recvs = {r: roots if r in posting else set() for r, roots in self.all_roots.items()}
            if self.every <= MAX_P2P_PERIOD:  # looks close together: keep them from look to look (InertReceives)
                self.inert_cache = InertReceives(self.matcher, self._preposted, [w.rank for w in self.workloads])

    def _scan_log(self):
        """Note the children of the nodes finished since the last look (those with some parents finished)."""
        by_rank, touched, keys, symmetry = self.by_rank, self.touched, self._posted_keys, self.symmetry
        rows = self.log[self.scanned:]
        cache = self.inert_cache
        if cache is None or cache.full:
            for rank, node_id, _s, _e in rows:
                touched[rank].update(by_rank[rank].children[node_id])
        else:
            for rank, node_id, _s, _e in rows:
                w = by_rank[rank]
                touched[rank].update(w.children[node_id])
                node = w.nodes[node_id]
                if node.type in _P2P:  # its key may have changed in the matcher (InertReceives.update)
                    keys.add(_key(rank, node, symmetry))
            # over a quarter of the waiting keys to read: a full pass (in C) costs less (keys, not finished kernels)
            cache.full = len(keys) > len(self.matcher._waiting) // 4
        self.scanned = len(self.log)

    @staticmethod
    def _finished(w):
        return w.issued - len(w.node_start_ns)

    def _accumulators(self):
        m = self.matcher
        return ({w.rank: (w.compute_ns, w.cpu_ns, w.comm_ns, w.issued, w.host and w.host.clock,
                          counters(self.systems[w.rank], w), w.host and time_host.position(w))
                 for w in self.workloads},
                m.messages, m.bytes, None if self.gpu is None else dict(self.gpu.counts),
                None if self.contention is None else interval_marks(self.contention))

    def _canonical(self):
        """(the state written relative to now and to each rank's finished count, the node ids it names per rank)."""
        self._trace_facts()
        self._scan_log()
        engine = self.engine
        now = engine.now
        if engine._end_of_ns:
            raise Incomparable("something waits for the end of the nanosecond")
        if self.shared.algorithm_state:
            raise Incomparable("a collective algorithm keeps state shared between ranks")
        self._now = now
        self._f = {w.rank: self._finished(w) for w in self.workloads}
        self._refs = {w.rank: set() for w in self.workloads}
        self._tags = []  # (channel, comm_tag) of every node with a tag named, in the order named
        self._seen = {}
        self._running = {}  # per rank its running nodes but the pre-posted receives (see _rank)
        histories = self._histories() if self.width == 3 else None
        events = tuple((t - now, e) for t in sorted(engine.buckets)
                       if (e := self._events(engine.buckets[t], self.width)))
        ranks = tuple(self._rank(w) for w in self.workloads)
        waiting = []
        for w in (self.workloads if self.inert_cache is not None else ()):  # the sends and receives running now
            nodes = w.nodes
            self._posted_keys.update(_key(w.rank, nodes[n], self.symmetry) for n in self._running[w.rank]
                                     if nodes[n].type in _P2P)
        # the keys of messages that are not pre-posted receives (and rare others); every key when looks are far apart
        self._live = (self.inert_cache.update(self._posted_keys) if self.inert_cache is not None
                      else list(self.matcher._waiting))
        self._posted_keys = set()
        for key in self._live:
            head = self.matcher._waiting[key]
            messages = [m for m in ([head] if head.__class__ is Message else head) if not self._preposted(m)]
            if messages:
                waiting.append((key[1], key[2], key[3], tuple(self._message(m) for m in messages)))
        waiting.sort(key=repr)
        self.work += (len(self._tags) + len(self._live) + sum(len(r) for r in self._refs.values())
                      + len(self.matcher._waiting) // 32 + sum(len(w.node_start_ns) for w in self.workloads) // 32)
        return (events, histories, ranks, tuple(waiting)), self._refs, self._tags

    def _preposted(self, m):
        """Whether ``m`` is a receive without parents still waiting for its send. A trace may post all its
        receives at the start (the LLM generator does): they are the trace's future, not the state, and stay
        out of it. Their start times are their own (the jump keeps them); :meth:`_repeats` checks that the
        sends of the repeats find the same ones, moved."""
        return (not m.posted and kernel_method(m.recv_fn) is NODE_DONE
                and m.recv_arg in self.root_recvs[m.key[2]])

    def inert_receives(self):
        """Per rank the pre-posted receives still waiting (:meth:`_preposted`): {rank: {node id: key}}, as the
        last look found them (:class:`InertReceives`; read, not changed)."""
        if self.inert_cache is not None:
            return self.inert_cache.receives(self._live)
        out = {w.rank: {} for w in self.workloads}
        for key, head in self.matcher._waiting.items():
            for m in ([head] if head.__class__ is Message else head):
                if self._preposted(m):
                    out[key[2]][m.recv_arg] = key
        return out

    def _events(self, flat, width=2):
        events = (self._event(flat[i], flat[i + 1]) for i in range(0, len(flat), width))
        return tuple(e for e in events if e is not None)  # (None: the wake-up of a host ahead, time_ahead)

    def _histories(self):
        """A folded run's pending events' histories (:class:`~astra_folding.engine.EventHistory`), written for
        the state: per event in the engine's order its root, relabelling, taint and which taint cell it shares
        (by first appearance). Their ``times`` (a digest of the absolute times of their ancestors' scheduling) are
        first reset to one value: see :mod:`astra_folding.time_ties` for why that keeps the run exact."""
        if self._now in self.engine.buckets:  # (a reset needs every event after it to run after its nanosecond)
            raise Incomparable("events are pending at the nanosecond just run (a folded run's histories)")
        cells = {}
        out = []
        for t in sorted(self.engine.buckets):
            bucket = self.engine.buckets[t]
            for i in range(2, len(bucket), 3):
                history = bucket[i]
                history.times = RESET_TIMES
                if self.ahead_now and time_ahead.wake_event(self, bucket[i - 2], bucket[i - 1]):
                    continue  # a host ahead's wake-up (time_ahead)
                cell = cells.setdefault(id(history.taint), len(cells))
                out.append((history.root, history.rel, history.taint[0], cell))
        return tuple(out)

    def _node(self, rank, node_id):
        node = self.by_rank[rank].nodes[node_id]
        tag = node.attrs.get("comm_tag")
        if tag is not None:
            self._tags.append((channel(rank, node, self.symmetry), tag))
        rel = node_id - self._f[rank]
        self._refs[rank].add(rel)
        return rel

    def _event(self, fn, arg):
        func = kernel_method(fn)
        owner = getattr(fn, "__self__", None)
        if func is NODE_DONE:
            return ("done", owner.rank, self._node(owner.rank, arg))
        if func is CALL_EVENTS:
            if owner.rank in self.ahead_now and time_ahead.wake_event(self, fn, arg):
                return None  # a host ahead's wake-up alone: not compared (time_ahead)
            return ("tick", owner.rank, arg - self._now)
        if func is LAUNCH:
            return ("launch", owner.rank, self._node(owner.rank, arg[0].id), arg[1])
        if func is WAKE:
            return ("wake", owner.rank, self._node(owner.rank, arg))
        if func is ARRIVED:
            return ("arrive", self._message(arg))
        if func is TIMED_OUT:
            return ("timed out", owner.sys.rank, CollectiveCanon.timed_out(owner))
        raise Incomparable(f"an event of {getattr(fn, '__qualname__', repr(fn))} is pending")

    def _message(self, m):
        seen = self._seen.get(id(m))
        if seen is not None:
            return ("same", seen)
        self._seen[id(m)] = len(self._seen)
        tag, src, dst, size = m.key
        ends = []
        tag_rel = None
        for fn, arg in ((m.send_fn, m.send_arg), (m.recv_fn, m.recv_arg)):
            if fn is None:
                ends.append(None)
                continue
            if kernel_method(fn) is not NODE_DONE:
                raise Incomparable(f"a message completes {getattr(fn, '__qualname__', repr(fn))}")
            rank = fn.__self__.rank  # (a folded run keys a message by its receiver's representative's view)
            ends.append((rank, self._node(rank, arg)))
            tag_rel = tag - fn.__self__.nodes[arg].attrs.get("comm_tag", 0)
        if tag_rel is None:
            raise Incomparable("a message names no node")
        return (src, dst, size, tag_rel, m.posted, m.arrived, tuple(ends), m.route)

    def _rank(self, w):
        rank, now = w.rank, self._now
        sys = self.systems[rank]
        node = self._node
        roots = self.root_recvs[rank]
        if w.host is not None and (rank not in self.posting or rank in self.ahead_now):  # held: the trace's
            roots = roots | time_host.undispatched(w)
        running = w.node_start_ns
        touched = self.touched[rank]
        left = w.parents_left
        for child in [c for c in touched if left[c] == 0]:
            touched.discard(child)
        partial = tuple(sorted((node(rank, c), left[c]) for c in touched))
        batches = tuple((tick - now, self._events(sys._pending[tick])) for tick in sorted(sys._pending)
                        if rank not in self.ahead_now or not time_ahead.wake_only(sys, tick, w))
        levels = tuple((lv.allocator, lv.first_allocator, lv.last_allocator) for lv in sys.levels)
        group_levels = (tuple((g, tuple((lv.allocator, lv.first_allocator, lv.last_allocator) for lv in lvs))
                              for g, lvs in sys.group_levels.items()) if sys.group_levels else None)
        return (
            rank, batches, CollectiveCanon(node, now).system(sys), levels, group_levels,
            tuple(node(rank, n) for n in w.fresh), tuple(tuple(node(rank, n) for n in heap) for heap in w.ready),
            w.ready_count, tuple(w.slot_busy), tuple(w.comm_slots.items()) if w.comm_slots else None,
            # receives without parents are named by their messages' events when matched, else pre-posted
            tuple(sorted((node(rank, n), running[n] - now)
                         for n in self._running.setdefault(rank, running.keys() - roots))),
            tuple(sorted(node(rank, n) for n in w.comm_running)) if w.comm_running else (),
            None if w.host is None else time_host.state(w, node, now),
            tuple(w.comm_groups), partial,
        )

    # ------------------------------------------------------------ the repeat check
    def _plan_jump(self, a, b):
        """How far the repeats of the period from state ``a`` to state ``b`` (equal, written canonically) go:
        (events they skip, what :meth:`_take_jump` needs, the work the check cost), or None (``reason`` says why)."""
        t_a, f_a, log_a, count_a, acc_a, refs, _ = a
        t_b, f_b, log_b, count_b, acc_b, _, _ = b
        period = t_b - t_a
        work = self.work
        shift = {r: f_b[r] - f_a[r] for r in f_b}
        ahead = self.ahead_now
        inert = self.inert_receives()
        early = ahead and time_ahead.early(self, ahead, period, shift, self.log[log_a:log_b], inert, t_a, t_b)
        if early:  # (before the trace is compared: a host ahead of its GPU too little refuses most periods)
            self.reason = f"the state repeated after {period:,} ns but {early}"
            return None
        # the nodes the period touched: those named by the state at A and at B (its own and its images' are
        # the same relative to the finished counts), those it finished, and their children
        touched = {r: {f_a[r] + rel for rel in rels} | {f_b[r] + rel for rel in rels} for r, rels in refs.items()}
        self.work += 3 * (log_b - log_a) + len(self.matcher._waiting)
        for rank, node_id, _s, _e in self.log[log_a:log_b]:
            ids = touched[rank]
            ids.add(node_id)
            ids.update(self.by_rank[rank].children[node_id])
        self._now = t_b
        for w in self.workloads:
            if w.host is None or w.rank in ahead:  # (a host ahead is run forward: time_ahead)
                continue
            if not time_host.behind(w, t_b):  # the ops its walk passed over the period: the repeats pass theirs
                time_host.walked(w, touched[w.rank], acc_a[0][w.rank][6], acc_b[0][w.rank][6])
            elif not time_host.keeps_behind(w, t_a, t_b, shift[w.rank]):
                self.reason = (f"the state repeated after {period:,} ns but rank {w.rank}'s host, behind its GPU, is "
                               "not far enough behind to launch every repeat's kernels in time")
                return None
        try:
            repeats, tag_steps = self._repeats(touched, shift)
            for w in self.workloads:
                repeats = time_host.held_repeats(w, touched[w.rank], shift[w.rank], repeats, self.parents[w.rank])
            if repeats:
                repeats = preposted_repeats(self, repeats, touched, shift, tag_steps,
                                                  time_ahead.candidates(self, inert, ahead), self.log[log_a:log_b])
            lands = None
            if repeats and ahead:
                repeats, lands = time_ahead.plan(self, ahead, repeats, period, shift, self.log[log_a:log_b], inert,
                                                 t_a, t_b)
                if not repeats:
                    self.reason = f"the state repeated after {period:,} ns but {lands}"
                    return None
        except Incomparable as exc:
            self.reason = f"the state repeated after {period:,} ns but the trace does not: {exc}"
            return None
        if repeats < 1:
            self.reason = f"the state repeated after {period:,} ns but the trace does not repeat further"
            return None
        skipped = repeats * (count_b - count_a)
        if lands:  # (a host ahead's wake-ups over the repeats are not the period's)
            skipped += time_ahead.events_skipped(self, lands, repeats, t_a, t_b)
        return (skipped, repeats, period, shift, tag_steps, log_a, log_b, acc_a, acc_b, inert, lands, skipped,
                self.work - work)

    def _take_jump(self, repeats, period, shift, tag_steps, log_a, log_b, acc_a, acc_b, inert, lands, skipped):
        """Jump over the repeats :meth:`_plan_jump` found; ``settings.fold.time`` adds them up over the run's
        jumps (``period_ns``, ``periods`` and ``from_ns``: the jump that skipped the most events). Returns the
        events skipped."""
        t_b = self.engine.now
        self._jump(repeats, period, shift, tag_steps, self.log[log_a:log_b], acc_a, acc_b, inert, lands)
        info = self.info
        if skipped > info.get("_most", 0):
            info.update(period_ns=period, periods=repeats, from_ns=t_b, _most=skipped)
        info.update(folded=True, jumps=info.get("jumps", 0) + 1,
                    skipped_ns=info.get("skipped_ns", 0) + repeats * period,
                    skipped_events=info.get("skipped_events", 0) + skipped)
        info.pop("reason", None)
        if self.inert_cache is not None:  # the jump rebuilt the matcher's waiting messages
            self.inert_cache.after_jump(self._used, self.moved_keys)
        self.snapshots = {}
        self.log = []
        self.kept = self.scanned = 0
        time_ahead.clear(self.tick_logs)
        return skipped

    def _signature(self, rank, node_id):
        """(what must match between a node and its image, its ``comm_tag`` or None), or None for no node: the
        type, duration, attributes but those only outputs read (:data:`UNREAD_ATTRS`) and ``comm_tag``, children
        relative to the node and number of parents. Kept per node (each is looked at about once a jump)."""
        sigs = self.signatures[rank]
        sig = sigs.get(node_id)
        if sig is None and node_id not in sigs:
            w = self.by_rank[rank]
            node = w.nodes.get(node_id)
            if node is not None:
                if node.type in (T.MEM_LOAD_NODE, T.MEM_STORE_NODE):
                    raise Incomparable(f"rank {rank} loads or stores remote memory, whose backend's state is not "
                                       "compared")
                attrs = node.attrs
                sig = ((node.type, node.duration_micros, node.inputs_values, _read_attrs(attrs),
                        tuple(c - node_id for c in w.children[node_id]), self.parents[rank].get(node_id, 0),
                        self.name_key and self.name_key(node)), attrs.get("comm_tag"))
            sigs[node_id] = sig
        return sig

    def _alike(self, rank, a, b, tag_step):
        """Whether node ``b`` of ``rank`` is node ``a`` moved by ``b - a`` (:meth:`_signature`), its ``comm_tag``
        by ``tag_step`` (that of ``a``'s channel)."""
        sa, sb = self._signature(rank, a), self._signature(rank, b)
        if sa is None or sb is None or sa[0] != sb[0]:
            return False
        return sa[1] == sb[1] if sa[1] is None or sb[1] is None else sb[1] - sa[1] == tag_step

    def _tag_steps(self, touched, shift):
        """How much ``comm_tag`` moves per period, per channel (:func:`~astra_folding.time_jump.channel`): that of
        the first touched node of the channel with a tag and an image (:meth:`_repeats` checks the others). A
        channel's messages match among themselves only, so each may number its own (a pipeline's transfers by
        micro-batch, tensor-parallel exchanges by a running count)."""
        steps = {}
        for rank, ids in touched.items():
            nodes = self.by_rank[rank].nodes
            for node_id in ids:
                node = nodes.get(node_id)
                tag = node.attrs.get("comm_tag") if node is not None else None
                image = nodes.get(node_id + shift[rank])
                if tag is not None and image is not None and image.attrs.get("comm_tag") is not None:
                    steps.setdefault(channel(rank, node, self.symmetry), image.attrs["comm_tag"] - tag)
        return steps

    def _repeats(self, touched, shift):
        """How many times the nodes touched over the period repeat, moved by ``shift`` (per rank), with one
        step of ``comm_tag`` per channel for all ranks; and those steps."""
        limit = None
        for rank, ids in touched.items():
            step = shift[rank]
            if step > 0 and ids:  # a rank that finished nothing in the period keeps its (equal) state as it is
                bound = (max(self.by_rank[rank].nodes) - min(ids)) // step
                limit = bound if limit is None else min(limit, bound)
        if limit is None:
            return 0, {}
        tag_steps = self._tag_steps(touched, shift)
        name_key = self.name_key
        for rank, ids in touched.items():
            step = shift[rank]
            if step <= 0:
                continue
            w = self.by_rank[rank]
            nodes, children, parents = w.nodes, w.children, self.parents[rank]
            for node_id in ids:  # inline (this loop runs once per node jumped over): what _alike compares
                a = nodes.get(node_id)
                if a is None:
                    return 0, {}
                if a.type in (T.MEM_LOAD_NODE, T.MEM_STORE_NODE):
                    raise Incomparable(f"rank {rank} loads or stores remote memory, whose backend's state is not "
                                       "compared")
                kind, duration, values = a.type, a.duration_micros, a.inputs_values
                attrs = a.attrs
                keys = [key for key in attrs if key not in _SKIPPED_ATTRS]  # what the simulation reads
                n_read = len(keys)
                read = itemgetter(*keys) if keys else None
                wanted = read(attrs) if keys else None
                tag = attrs.get("comm_tag")
                tag_step = None if tag is None else tag_steps.get(channel(rank, a, self.symmetry))
                kids = children[node_id]
                n_parents = parents.get(node_id, 0)
                name = name_key and name_key(a)
                j = 1
                while j <= limit:
                    moved = node_id + j * step
                    b = nodes.get(moved)
                    if (b is None or b.type != kind or b.duration_micros != duration or b.inputs_values != values
                            or parents.get(moved, 0) != n_parents):
                        break
                    b_attrs = b.attrs
                    if b_attrs is not attrs:  # the same read attributes: as many, and the same values
                        if len(b_attrs) - ("label" in b_attrs) - ("comm_tag" in b_attrs) != n_read:
                            break
                        try:
                            if n_read and read(b_attrs) != wanted:
                                break
                        except KeyError:
                            break
                    if name_key is not None and (b.name != a.name or b.ctrl_deps) and name_key(b) != name:
                        break  # (the same name and no launcher: the same key, without the call)
                    b_tag = b_attrs.get("comm_tag")
                    if ((b_tag != tag) if tag is None or b_tag is None
                            else tag_step is None or b_tag - tag != j * tag_step):
                        break
                    kids_b = children[moved]
                    if len(kids_b) != len(kids):
                        break
                    if len(kids) == 1:
                        if kids_b[0] - kids[0] != j * step:
                            break
                    elif any(y - x != j * step for x, y in zip(kids, kids_b)):
                        break
                    j += 1
                self.work += 8 * j
                limit = j - 1
                if limit < 1:
                    return 0, {}
        return limit, tag_steps


def _read_attrs(attrs):
    """A node's attributes that the simulation reads (all but :data:`UNREAD_ATTRS` and ``comm_tag``)."""
    return {k: v for k, v in attrs.items() if k not in UNREAD_ATTRS and k != "comm_tag"}


#: attributes a node and its image may differ by (TimeFolder._repeats counts ``label`` and ``comm_tag`` by name: an
#: attribute added to UNREAD_ATTRS is then still compared, never skipped)
_SKIPPED_ATTRS = UNREAD_ATTRS | {"comm_tag"}


def _moved_evenly(before, after):
    """Whether the ``(channel, tag)`` lists two states name have the same channels, each tag moved by one step per
    channel: a cheap test before the trace's (:meth:`TimeFolder._repeats`)."""
    if len(before) != len(after):
        return False
    steps = {}
    for (ca, x), (cb, y) in zip(before, after):
        if ca != cb or steps.setdefault(ca, y - x) != y - x:
            return False
    return True


def _parent_counts(children):
    counts = {}
    for kids in children.values():
        for child in kids:
            counts[child] = counts.get(child, 0) + 1
    return counts


def summary_line(info):
    """What the terminal says about a run folded in time (``info``: ``settings.fold.time``)."""
    from astra_sim.humanize import format_ns

    jumps = info.get("jumps", 1)
    more = f"; {jumps} jumps, {format_ns(info['skipped_ns'])} jumped over in all" if jumps > 1 else ""
    return (f"time folded: {info['periods']:,} repeats of {format_ns(info['period_ns'])} jumped over from "
            f"{format_ns(info['from_ns'])}{more} (--time-fold; without it every event is simulated)")
