"""Time folding (:mod:`astra_folding.time_fold`) of a rank whose host runs ahead of its GPU: left out of the compared
state, run forward at the jump (:mod:`astra_folding.time_host` for what else of a host is compared).

*Ahead.* While the host has held ops left (the receives issued at the start, posted at its launches:
:class:`~astra_sim.workload.host.Host`) and waits for nothing (no ``host_waits`` op, no op issued before its walk
reached it), its walk is a function of the trace alone: op ``i`` of the walk is launched at ``clock + launch_ns *
(c[i] - c[p])`` (``p`` its position, ``c`` the launches counted along the ops, a CUDA graph once), every held op is
posted at its own launch, and one wake-up of the rank at each distinct launch time of a held op posts them. Its
position and clock drift against the GPU every period, so they are not compared (the state says :data:`AHEAD`), nor
its wake-up (a batch of the system layer holding only it), nor the receives it posted that wait for their message
(pre-posted, as once it has posted them all). A jump from A to B (``k`` repeats of ``P`` ns, ``D`` nodes) then needs
the GPU side of the run not to see the host, in the period and in each repeat ``j``:

1. no op waits for its launch: every op the period issued is at or below ``y`` (the largest touched op, not held),
   and ``launch(y + j D) <= t_A + j P`` (an op issued in repeat ``j`` is issued after ``t_A + j P``); ``j = 0`` is
   the period itself;
2. every held receive is posted before its message arrives, strictly (a receive posted in the nanosecond of its
   message's arrival, or after it, completes by another path): for one finished over the period (``s``, ``e``),
   ``s < e`` and ``launch(n + j D) < e + j P``; one matched and in flight at B is posted at ``σ^k`` by ``t_B + k P``;
   the ops the host posts over the repeats are all receives;
3. no wake-up shares a batch with the GPU's events: a batch the wake-up opened that the GPU's joined runs them at
   the wake-up's place in the nanosecond (:class:`TickLog` records the ticks of the GPU's batches and any such
   batch); none over the period, and no repeat's wake-up at a tick of the period's GPU batches, moved;
4. no op the walk passes makes the host wait (``host_waits``), and a held op is left after the repeats.

The posts are then invisible to the GPU side until their messages arrive, which the checks above order; the
repeats are the period's, moved, as for a rank without a host. At the jump the host is put where its walk is at
``t_B + k P`` (:func:`land`): the held receives it posted over the repeats get their start times (those the
repeats finished are reported with them), those still waiting are posted to the matcher in their order, and its
wake-up is registered at its shifted time, after the landing's events of that nanosecond, which must all be other
ranks' (the unfolded run may have registered it before some of them; ranks meet only through messages, which take
time, and a folded run's tie check compares a rank's own events, so their order in a nanosecond is not read).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from heapq import heappush

from astra_sim.chakra import types as T
from astra_sim.errors import FoldAbandoned
from astra_sim.system.frontend import Message

from astra_folding import time_host
from astra_folding.time_jump import (
    ARRIVED, CALL_EVENTS, KERNEL_METHODS, TIMED_OUT, WAKE, kernel_method, message_key,
)


class TickLog:
    """Stands in for a rank's system-layer batch runner (``Sys._call_events_fn``) while its host may be ahead:
    records the ticks of the batches that hold an event of the GPU's (``ticks``, in time order) with when each was
    opened (``opened``: the start of the node whose completion opened it, else its tick), those a wake-up opened that
    the GPU's events joined (``hazards``) and those of a wake-up alone (``wakes``: the events a jump skips count
    them), then runs the batch."""

    __slots__ = ("sys", "w", "rank", "fn", "wake", "done", "ticks", "opened", "hazards", "wakes", "arrivals")

    def __init__(self, sys, w):
        self.sys, self.w, self.rank, self.fn = sys, w, sys.rank, sys._call_events_fn
        self.wake, self.done = w._host_wake, w._node_done
        self.ticks = []
        self.opened = []
        self.hazards = []
        self.wakes = []
        self.arrivals = []  # (ArrivalLog)

    def _call_events(self, tick):
        batch = self.sys._pending[tick]
        first = batch[0]
        if first == self.wake and len(batch) == 2:
            self.wakes.append(tick)
        else:
            if first == self.wake:
                self.hazards.append(tick)
            self.ticks.append(tick)  # (a node's completion is registered at its start, in its nanosecond)
            self.opened.append(self.w.node_start_ns.get(batch[1], tick) if first == self.done else tick)
        self.fn(tick)


class ArrivalLog:
    """Stands in for the matcher's arrival callback (``_arrived_fn``) while a host may be ahead: records the time of
    each message's arrival in the :class:`TickLog` of its sender and of its receiver (``arrivals``), then delivers
    it. An arrival is the one event of a rank's outside its batches whose place in a nanosecond a batch moved to a
    wake-up's place can cross (:func:`_landing`)."""

    __slots__ = ("engine", "logs", "fn")

    def __init__(self, matcher, logs):
        self.engine, self.logs, self.fn = matcher.engine, logs, matcher._arrived_fn

    def _arrived(self, message):
        logs, now = self.logs, self.engine.now
        log = logs.get(message.key[2])  # (a folded run keys it by its receiver's representative's view)
        if log is not None:
            log.arrivals.append(now)
        if message.send_fn is not None:
            log = logs.get(message.send_fn.__self__.rank)
            if log is not None:
                log.arrivals.append(now)
        self.fn(message)


KERNEL_METHODS[(TickLog, "_call_events")] = CALL_EVENTS
KERNEL_METHODS[(ArrivalLog, "_arrived")] = ARRIVED


def install(folder):
    """Record the GPU's batches and the arrivals of every rank whose host holds ops (:class:`TickLog`,
    :class:`ArrivalLog`); {rank: TickLog}."""
    logs = {}
    for w in folder.workloads:
        if w.host is not None and w.host.held_next < len(w.host.held):
            sys = folder.systems[w.rank]
            logs[w.rank] = log = TickLog(sys, w)
            sys._call_events_fn = log._call_events
    if logs:
        folder.matcher._arrived_fn = ArrivalLog(folder.matcher, logs)._arrived
    return logs


def uninstall(folder, logs):
    """Give the ranks their own batch runner back (batches already pending keep the log's: it runs them alike)."""
    for rank, log in logs.items():
        folder.systems[rank]._call_events_fn = log.fn
    arrived = folder.matcher._arrived_fn
    if logs and isinstance(getattr(arrived, "__self__", None), ArrivalLog):
        folder.matcher._arrived_fn = arrived.__self__.fn
    logs.clear()


def clear(logs):
    """Forget the ticks recorded (the finished-node log and the snapshots were dropped)."""
    for log in logs.values():
        for ticks in (log.ticks, log.opened, log.hazards, log.wakes, log.arrivals):
            ticks.clear()


def wake_only(sys, tick, w):
    """Whether the system layer's batch at ``tick`` holds only the host's wake-up."""
    batch = sys._pending.get(tick)
    return batch is not None and len(batch) == 2 and kernel_method(batch[0]) is WAKE and batch[0].__self__ is w


class Walk:
    """A rank's host walk as a function of the trace (no ``host_waits`` between): the launches counted along its
    ops, the last CUDA graph after each, where the ops that make it wait are."""

    def __init__(self, w):
        host = w.host
        self.ops, self.launch_ns = host.ops, host.launch_ns
        counts, graphs, n, graph = [], [], 0, 0
        for g in host.graphs:
            if g is None or g > graph:
                n += 1
                if g is not None:
                    graph = g
            counts.append(n)
            graphs.append(graph)
        self.counts, self.graphs = counts, graphs
        self.waits = sorted(i for i, op in enumerate(host.ops) if op in host.waits)
        self.held_set = frozenset(host.held)
        nodes = w.nodes
        self.keys = {h: message_key(w.rank, nodes[h]) for h in host.held
                     if nodes[h].type == T.COMM_RECV_NODE}  # the matcher's keys of its held receives

    def index(self, op):
        """The index of the last op of the walk at or below node ``op``."""
        return bisect_right(self.ops, op) - 1

    def launch(self, host, i):
        """The launch time of the walk's op ``i`` (the host's clock is its position's)."""
        return host.clock + self.launch_ns * (self.counts[i] - self.counts[host.next - 1])

    def waits_between(self, lo, hi):
        """Whether an op that makes the host wait lies at an index in ``lo..hi``."""
        return bisect_left(self.waits, lo) < bisect_right(self.waits, hi)


def messages_take_time(walk, delay):
    """Whether every held receive's message takes at least 1 ns on the network (``delay``: its closed-form
    ``delay_ns``). The landing's ordering argument rests on it (ranks meet only through messages, which take time);
    a rank with a zero-ns message is not run ahead: its host stays compared, as a host behind its GPU."""
    return all(delay(src, dst, size or 0) > 0 for _tag, src, dst, size in walk.keys.values())


def candidates(folder, inert, ahead):
    """The receives a repeat's lookup may find: the pre-posted ones waiting (``inert``) and, per rank whose host is
    ahead, the held receives it has not posted yet (it may post them before a repeat looks them up)."""
    if not ahead:
        return inert
    out = {r: dict(keys) for r, keys in inert.items()}
    for rank in ahead:
        w = folder.by_rank[rank]
        walk = folder.walks[rank]
        for h in time_host.undispatched(w):
            key = walk.keys.get(h)
            if key is not None:
                out[rank][h] = key
    return out


def plan(folder, ahead, k, period, shift, log, inert, t_a, t_b, probe=False):
    """The most repeats (``k`` at most) the ranks whose host is ahead allow (the module docstring's checks), and
    per such rank what :func:`land` needs; (0, reason) when none. ``probe``: only what the first repeat needs
    whatever the number of repeats (:func:`early`)."""
    engine = folder.engine
    landing = {}
    rows = {}  # the period's finished nodes per rank
    for row in log:
        rows.setdefault(row[0], []).append(row)
    for rank in ahead:
        w = folder.by_rank[rank]
        host, walk, ticks = w.host, folder.walks[rank], folder.tick_logs.get(rank)
        if ticks is None:
            return 0, f"rank {rank}'s host was not followed"
        arrivals = _between(ticks.arrivals, t_a, t_b)
        if _between(ticks.hazards, t_a, t_b) & arrivals:
            return 0, (f"rank {rank}'s wake-up opened a batch of the system layer that the GPU's events joined, beside "
                       "an arrival")
        d = shift[rank]
        held_set = walk.held_set
        b_wake = host.held[host.held_next]
        if not wake_only(folder.systems[rank], host.at[b_wake], w):
            return 0, f"rank {rank}'s wake-up shares its batch with the GPU's events"
        y = _last_issued(walk, w, rows.get(rank, ()))
        limit = _launched_in_time(walk, host, y, d, k, period, t_a)  # 1: no op waits for its launch
        if limit < 1:
            return 0, f"rank {rank}'s host is not far enough ahead of its GPU: an op would wait for its launch"
        # 2: held receives posted before their messages arrive
        ends = [(n, s, e) for _r, n, s, e in rows.get(rank, ()) if n in held_set]
        for n, s, e in ends:
            if s >= e or w.nodes[n].type != T.COMM_RECV_NODE:
                return 0, f"rank {rank}'s host posted a receive as its message arrived or after"
            for j in range(1, limit + 1):
                if walk.launch(host, walk.index(n + j * d)) >= e + j * period:
                    limit = j - 1
                    break
        low = min([y] + [walk.index(n) for n, _s, _e in ends])
        if walk.waits_between(low, host.next - 1):
            return 0, f"rank {rank}'s host waited for an op since the period's first launch"
        in_flight = (w.node_start_ns.keys() & held_set) - inert[rank].keys() - time_host.undispatched(w)
        landing[rank] = (walk, in_flight, d)
        k = min(k, limit)
        if k < 1:
            return 0, f"rank {rank}'s host would post a receive as its message arrives"
    # 3 and 4, and the landing, from the largest k down
    for kk in range(k, 0, -1):
        found = _landing(folder, landing, kk, period, t_a, t_b, engine, probe)
        if isinstance(found, dict):
            return kk, found
        reason = found
    return 0, reason


def _last_issued(walk, w, rows):
    """The index in the walk of the largest node not held that the period finished or that runs at B: every op the
    period issued is one of them."""
    held_set = walk.held_set
    issued = [n for _r, n, _s, _e in rows if n not in held_set]
    issued += [n for n in w.node_start_ns.keys() - held_set]
    return walk.index(max(issued)) if issued else w.host.next - 1


def _launched_in_time(walk, host, y, d, k, period, t_a):
    """The most repeats (``k`` at most) in which no op waits for its launch (check 1), or -1 when the period's did."""
    for j in range(0, k + 1):
        if walk.launch(host, walk.index(walk.ops[y] + j * d)) > t_a + j * period:
            return j - 1
    return k


def early(folder, ahead, period, shift, log, inert, t_a, t_b):
    """Why no jump from A to B can be taken, from the checks on the period and its first repeat (which every number
    of repeats needs, and which cost little beside comparing the trace), or None."""
    repeats, found = plan(folder, ahead, 1, period, shift, log, inert, t_a, t_b, probe=True)
    return None if repeats else found


def _landing(folder, landing, k, period, t_a, t_b, engine, probe=False):
    """Per rank the host at ``t_B + k P`` (see :func:`land`), or why the jump cannot land there."""
    t_l = t_b + k * period
    out = {}
    for rank, (walk, in_flight, d) in landing.items():
        w = folder.by_rank[rank]
        host = w.host
        held = host.held
        posts = []  # (held op, launch) posted over the repeats
        i = host.held_next
        while i < len(held):
            launch = walk.launch(host, walk.index(held[i]))
            if launch > t_l:
                break
            posts.append((held[i], launch))
            i += 1
        if any(w.nodes[h].type != T.COMM_RECV_NODE for h, _t in posts):
            return f"rank {rank}'s host launches a held op that is not a receive over the repeats"
        star = held[i] if i < len(held) else None  # (None: it posts its last over the repeats, and then waits)
        i_star = walk.index(held[-1] if star is None else star)
        if walk.waits_between(host.next - 1, i_star):
            return f"rank {rank}'s host would wait for an op over the repeats"
        t_star = walk.launch(host, i_star) if star is not None else None
        tick_log = folder.tick_logs[rank]
        ticks = tick_log.ticks
        lo, hi = bisect_right(ticks, t_a), bisect_right(ticks, t_b)
        gpu_ticks = dict(zip(ticks[lo:hi], tick_log.opened[lo:hi]))
        arrivals = _between(tick_log.arrivals, t_a, t_b)
        i_b = host.held_next
        for x, (h, t) in enumerate(posts):  # a wake-up is registered at the launch before it (the last wake-up's)
            if x and posts[x - 1][1] == t:
                continue  # posted by the same wake-up
            j = -(-(t - t_b) // period)
            opened = gpu_ticks.get(t - j * period)
            if opened is not None and t - j * period in arrivals:  # (harmless without an arrival of the rank there)
                if x == 0 and i_b == 0:
                    return f"rank {rank}'s first wake-up would share a tick with the GPU's events"
                registered = posts[x - 1][1] if x else walk.launch(host, walk.index(held[i_b - 1]))
                if opened + j * period >= registered:  # (harmless when the GPU's batch was first: the wake-up joins)
                    return (f"rank {rank}'s wake-up at {t:,} ns would open a batch the GPU's events join, beside an "
                            "arrival")
        if probe:
            continue
        for n in in_flight:  # matched at B: its image is posted by the landing
            if walk.launch(host, walk.index(n + k * d)) > t_l:
                return f"rank {rank}'s host would post a receive matched at the landing after it"
        bucket = engine.buckets.get(t_star - k * period) if star is not None else None
        if bucket is not None and not _apart(folder, bucket, rank):
            return f"rank {rank}'s wake-up would share its nanosecond ({t_star:,} ns) with events of its rank"
        alone = len({t for _h, t in posts if t - -(-(t - t_b) // period) * period not in gpu_ticks})
        out[rank] = (posts, i, star, i_star, t_star, alone)
    return out


def wake_event(folder, fn, arg):
    """Whether an engine event runs a batch that holds only the wake-up of a host ahead (not compared, dropped by a
    jump)."""
    if kernel_method(fn) is not CALL_EVENTS:
        return False
    rank = fn.__self__.rank
    return rank in folder.ahead_now and wake_only(folder.systems[rank], arg, folder.by_rank[rank])


def _between(times, t_a, t_b):
    """The times of a sorted list in ``t_a < t <= t_b``, as a set."""
    return set(times[bisect_right(times, t_a):bisect_right(times, t_b)])


def _apart(folder, bucket, rank):
    """Whether no event of an engine bucket (moved to the landing) is ``rank``'s, but the wake-ups of hosts ahead
    (dropped): events of other ranks may run before or after its wake-up in one nanosecond alike (ranks meet
    through messages, which take time; a folded run's tie check compares a rank's own events only)."""
    width = folder.width
    for i in range(0, len(bucket), width):
        fn, arg = bucket[i], bucket[i + 1]
        if wake_event(folder, fn, arg):
            continue
        func = kernel_method(fn)
        owner = getattr(fn, "__self__", None)
        if func is ARRIVED:
            ends = [f.__self__.rank for f in (arg.send_fn, arg.recv_fn) if f is not None]
        elif func is TIMED_OUT:
            ends = [owner.sys.rank]
        elif func is not None:
            ends = [owner.rank]
        else:
            return False
        if rank in ends:
            return False
    return True


def events_skipped(folder, lands, k, t_a, t_b):
    """The engine events the repeats run beyond ``k`` times the period's: each rank's wake-ups alone in their batch
    over them (one a launch time, but at a tick of the GPU's batches, moved) less ``k`` times those over the
    period."""
    extra = 0
    for rank, (*_rest, alone) in lands.items():
        wakes = folder.tick_logs[rank].wakes
        extra += alone - k * (bisect_right(wakes, t_b) - bisect_right(wakes, t_a))
    return extra


def start_times(folder, lands):
    """Before the repeats are reported: the held receives posted over them start at their launch."""
    for rank, (posts, *_rest) in lands.items():
        starts = folder.by_rank[rank].node_start_ns
        for h, t in posts:
            starts[h] = t


def take_wakes(folder, lands, buckets_before):
    """Drop the wake-ups pending at B of the ranks landed (their batches hold only them) from the engine's buckets
    and the system layers; returns per rank (the batch runner, its history or None) to register the new one with."""
    width = folder.width
    taken = {}
    for rank in lands:
        w = folder.by_rank[rank]
        sys = folder.systems[rank]
        tick = w.host.at[w.host.held[w.host.held_next]]
        del sys._pending[tick]
        bucket = buckets_before[tick]
        for i in range(0, len(bucket), width):
            fn = bucket[i]
            if bucket[i + 1] == tick and getattr(getattr(fn, "__self__", None), "rank", None) == rank \
                    and kernel_method(fn) is CALL_EVENTS:
                taken[rank] = (fn, bucket[i + 2] if width == 3 else None, w._host_wake)
                del bucket[i:i + width]
                break
        if not bucket:
            del buckets_before[tick]
    return taken


def land(folder, rank, found, t_l):
    """Put the host of ``rank`` where its walk is at ``t_l`` (:func:`plan`'s ``found``); returns the held ops not
    dispatched at B (the caller does not move them)."""
    w = folder.by_rank[rank]
    host = w.host
    walk = folder.walks[rank]
    posts, i, star, i_star, t_star, _alone = found
    held_b = time_host.undispatched(w)
    launch = walk.launch
    first = i_star
    while first > 0 and launch(host, first - 1) > t_l:
        first -= 1
    at = {walk.ops[x]: t for x in range(first, i_star + 1) if (t := launch(host, x)) > t_l}
    clock = launch(host, i_star)
    host.held_next = i
    host.next = i_star + 1
    host.graph = walk.graphs[i_star]
    host.clock = clock
    host.at = at
    host.wake = star
    return held_b


def post(folder, rank, found, used):
    """After the matcher is rebuilt: post the receives the host posted over the repeats that no repeat used, in
    their order (one whose message has arrived would complete by another path: the fold is abandoned, not seen)."""
    w = folder.by_rank[rank]
    waiting = folder.matcher._waiting
    for h, _t in found[0]:
        if h in used:
            continue
        head = waiting.get(folder.walks[rank].keys[h])
        if head is not None and head.__class__ is not Message:
            head = head[0]
        if head is not None and head.posted and head.arrived:
            raise FoldAbandoned(f"time folding would post rank {rank}'s receive {h} after its message arrived")
        w._recv(w.nodes[h])


def register_wake(folder, rank, found, taken):
    """The host's wake-up at its shifted time, the one event of its nanosecond (:func:`plan` checked none other)."""
    _posts, _i, star, _i_star, t_star, _alone = found
    if star is None:
        return  # it has posted every held op
    fn, history, wake = taken[rank]
    sys = folder.systems[rank]
    sys._pending[t_star] = [wake, star]
    engine = folder.engine
    event = [fn, t_star] if history is None else [fn, t_star, history]
    bucket = engine.buckets.get(t_star)
    if bucket is None:
        engine.buckets[t_star] = event
        heappush(engine.times, t_star)
    else:  # after other ranks' events (:func:`_apart`)
        bucket += event
