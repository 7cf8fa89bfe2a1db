"""The jump of a run folded in time (:mod:`astra_folding.time_fold`, whose docstring says why it is exact): the
``k`` repeats' finished nodes reported (in bulk, or one by one to an observer of its own), the gpu model's
contention records replayed, and the state moved on by ``k`` periods. :class:`JumpMixin` is the half of
:class:`~astra_folding.time_fold.TimeFolder` that does it; the kernel's event methods that a compared state may
hold are named here, for both halves."""

from __future__ import annotations

from collections import Counter, deque
from heapq import heapify

import numpy as np

from astra_sim.chakra import types as T
from astra_sim.errors import FoldAbandoned
from astra_sim.limits import LONG_STEP_NS
from astra_sim.system.collectives import TimedCollective
from astra_sim.system.frontend import COLLECTIVE_TAG_BASE, NATIVE_TAG_BASE, Message, SendRecvMatcher
from astra_sim.system.sys import Sys
from astra_sim.workload.workload import RankWorkload

from astra_folding import time_host
from astra_folding.matcher import FoldedSendRecvMatcher
from astra_folding.time_collectives import move_contention, move_system

#: the kernel's methods a compared state may hold as events, by (class, name): a method of a mypyc-compiled class
#: (tools/compile_core.py) has no __func__ to compare
NODE_DONE, LAUNCH, CALL_EVENTS, ARRIVED, TIMED_OUT, WAKE = "done", "launch", "tick", "arrive", "timed out", "wake"
KERNEL_METHODS = {(RankWorkload, "_node_done"): NODE_DONE, (RankWorkload, "_launch"): LAUNCH,
                  (RankWorkload, "_host_wake"): WAKE,
                  (Sys, "_call_events"): CALL_EVENTS, (Sys, "_call_events_folded"): CALL_EVENTS,
                  (SendRecvMatcher, "_arrived"): ARRIVED, (FoldedSendRecvMatcher, "_arrived"): ARRIVED}


def kernel_method(fn):
    """Which of the kernel's methods ``fn`` is bound from (:data:`KERNEL_METHODS`; :data:`TIMED_OUT`: the end of a
    timed collective phase, of any subclass), or None."""
    owner, name = getattr(fn, "__self__", None), getattr(fn, "__name__", None)
    found = KERNEL_METHODS.get((owner.__class__, name))
    if found is None and name == "_timed_out" and isinstance(owner, TimedCollective):
        return TIMED_OUT
    return found


def wrap_tag(tag):
    """The tag the matcher keys a send or receive of ``comm_tag`` ``tag`` by (``Sys.native_send``)."""
    return tag % (COLLECTIVE_TAG_BASE - NATIVE_TAG_BASE) + NATIVE_TAG_BASE


def channel(rank, node, symmetry=None):
    """The channel of a node of ``rank`` with a ``comm_tag``: (src, dst, size) of the messages a send or receive
    keys (its tag steps per period on its own, :meth:`~astra_folding.time_fold.TimeFolder._tag_steps`), None for
    any other node (their tags, which nothing matches, step together). Ranks folded by ``symmetry``: a send to a
    rank not simulated is keyed as its receiver's representative sees it (``FoldedSendRecvMatcher.send``)."""
    if node.type == T.COMM_SEND_NODE:
        attrs = node.attrs
        dst = attrs.get("comm_dst")
        if symmetry is not None and dst is not None:
            offsets = symmetry.offsets(dst)
            if any(offsets):
                return symmetry.moved(rank, offsets, -1), symmetry.moved(dst, offsets, -1), attrs.get("comm_size")
        return rank, dst, attrs.get("comm_size")
    if node.type == T.COMM_RECV_NODE:
        attrs = node.attrs
        return attrs.get("comm_src"), rank, attrs.get("comm_size")
    return None


def message_key(rank, node, symmetry=None):
    """The matcher's key (tag, src, dst, size) a send or receive node of ``rank`` looks up, or None."""
    if node is None or node.type not in (T.COMM_SEND_NODE, T.COMM_RECV_NODE):
        return None
    return (wrap_tag(node.attrs.get("comm_tag", 0)),) + channel(rank, node, symmetry)


def interval_marks(contention):
    """How far the gpu model's contention records are: (contended kernels, per rank its compute intervals, per
    rank its communication intervals)."""
    return (contention.contended_nodes, {r: len(iv.start) for r, iv in contention.compute.items()},
            {r: len(iv.start) for r, iv in contention.comm.items()})


class JumpMixin:
    """Moves a :class:`~astra_folding.time_fold.TimeFolder`'s run on by ``k`` periods (its ``_jump``)."""

    def _jump(self, k, period, shift, tag_steps, log, acc_a, acc_b, inert, lands=None):
        """Report the ``k`` repeats' nodes, then move the state by ``σ^k`` (see the module docstring); ``lands``: per
        rank whose host is ahead, where its walk is after them (:mod:`astra_folding.time_ahead`)."""
        from astra_folding import time_ahead

        used = {w.rank: set() for w in self.workloads}  # pre-posted receives the repeats finish or match
        lands = lands or {}
        if lands:  # (before the report: the held receives posted over the repeats start at their launch)
            time_ahead.start_times(self, lands)
            taken = time_ahead.take_wakes(self, lands, self.engine.buckets)
        bulk = self._in_bulk(k, period, log)
        if bulk:
            self._report_in_bulk(k, period, shift, log, used)
        else:
            self._report_each(k, period, shift, log, used)
        dt = k * period
        dn = {r: k * s for r, s in shift.items()}
        dtag = {c: k * step for c, step in tag_steps.items()}
        self._moved = set()
        self._used = used
        engine = self.engine
        buckets = {t + dt: self._move_events(flat, dt, dn, dtag, self.width) for t, flat in engine.buckets.items()}
        engine.buckets.clear()
        engine.buckets.update(buckets)
        engine.times[:] = list(buckets)
        heapify(engine.times)
        for w in self.workloads:
            rank, d = w.rank, dn[w.rank]
            sys = self.systems[rank]
            sys._pending = {t + dt: self._move_events(flat, dt, dn, dtag) for t, flat in sys._pending.items()}
            w.fresh = [n + d for n in w.fresh]
            w.ready = [[n + d for n in heap] for heap in w.ready]  # a heap moved by a constant stays a heap
            old, roots, waiting = w.node_start_ns, self.root_recvs[rank], inert[rank]
            if rank in lands:  # a host ahead: where its walk is then
                held = time_ahead.land(self, rank, lands[rank], engine.now + dt)
            else:
                held = () if w.host is None else time_host.move(w, k, dt, d, engine.now)  # (held at B: not moved)
            # those still held after the jump, first as in the run (the others ran in the repeats: moved, or finished)
            running = {n: old[n] for n in w.host.held[w.host.held_next:]} if held else {}
            for n, start in old.items():
                if n not in waiting and n not in held:
                    running[n + d] = old[n + d] if n in roots else start + dt
                    if n in roots:
                        used[rank].add(n + d)
            for n in [n for n in old if n in waiting]:  # (in the rank's own order)
                if n not in used[rank]:
                    running[n] = old[n]
            for n, start in lands[rank][0] if rank in lands else ():  # posted over the repeats, not used by them
                if n not in used[rank]:
                    running[n] = start
            w.node_start_ns = running
            if w.comm_running:
                w.comm_running = {n + d for n in w.comm_running}
            before, after = acc_a[0][rank], acc_b[0][rank]
            move_system(sys, w, k, dt, d, before[5], after[5])
            w.compute_ns += k * (after[0] - before[0])
            w.cpu_ns += k * (after[1] - before[1])
            w.comm_ns += k * (after[2] - before[2])
            w.issued += k * (after[3] - before[3])
        matcher = self.matcher
        waiting, shared = {}, []  # (keys with more than one message: a list, then a deque)
        moved_keys = self.moved_keys = set()  # the keys of the messages moved (InertReceives.after_jump)
        known = self.inert_cache.known if self.inert_cache is not None else {}  # lone pre-posted, as of this look
        preposted = self._preposted
        for key, head in matcher._waiting.items():
            for m in ([head] if head.__class__ is Message else head):
                if (m is head and known.get(key) is m) or preposted(m):  # (the cache: no call per receive)
                    if m.recv_arg in used[key[2]]:
                        continue  # finished or matched by the repeats
                    new_key = key
                else:
                    self._move_message(m, dn, dtag)
                    new_key = m.key
                    moved_keys.add(new_key)
                got = waiting.get(new_key)
                if got is None:
                    waiting[new_key] = m
                elif got.__class__ is list:
                    got.append(m)
                else:
                    waiting[new_key] = [got, m]
                    shared.append(new_key)
        for key in shared:
            messages = waiting[key]
            if len({m.posted for m in messages}) > 1:  # a send and a receive of one key would have met
                raise FoldAbandoned("time folding left a send and a receive of one message unmatched")
            waiting[key] = deque(messages)
        matcher._waiting = waiting
        matcher.messages += k * (acc_b[1] - acc_a[1])
        matcher.bytes += k * (acc_b[2] - acc_a[2])
        if self.gpu is not None:  # how the gpu model timed its kernels
            for how, n in acc_b[3].items():
                self.gpu.counts[how] += k * (n - acc_a[3].get(how, 0))
        if self.contention is not None:
            self._repeat_intervals(k, period, acc_a[4], acc_b[4], bulk)
            move_contention(self.contention, dt)
        engine.now += dt
        for rank, found in lands.items():  # the receives it posted over the repeats, and its wake-up
            time_ahead.post(self, rank, found, used[rank])
            time_ahead.register_wake(self, rank, found, taken)

    def _report_each(self, k, period, shift, log, used):
        """Report every repeat's nodes one by one (``record_node``, in the unfolded run's order) and free their
        children: what an output that reads each finished node (an observer of its own) needs."""
        record = self.record
        rows = [(rank, node_id, start, end, shift[rank], self.by_rank[rank], self.root_recvs[rank], used[rank],
                 self.touched[rank]) for rank, node_id, start, end in log]
        for j in range(1, k + 1):
            dt = j * period
            for rank, node_id, start, end, step, w, roots, used_here, touched in rows:
                moved = node_id + j * step
                if moved in roots:  # posted at the start: its own start time
                    start = w.node_start_ns[moved] - dt
                    used_here.add(moved)
                record(rank, w.nodes[moved], start + dt, end + dt)
                left = w.parents_left
                for child in w.children[moved]:
                    left[child] -= 1
                    touched.add(child)

    def _in_bulk(self, k, period, log):
        """Whether the repeats can be reported in bulk (:meth:`_report_in_bulk`): nothing but the span recorder
        observes finished nodes, and no repeated node can end past a year (``record_node``'s step check, which
        needs ``end - start`` over :data:`LONG_STEP_NS` or ``end`` over :data:`MAX_TIME_NS`, then cannot fire:
        every start is >= 0)."""
        sim = self.sim
        observers = [fn for fn in sim.node_observers
                     if self.contention is None or fn != self.contention.record_node]  # replayed in bulk too
        if self.record != sim.record_node or len(observers) != (sim.recorder is not None):
            return False
        return not log or max(row[3] for row in log) + k * period <= LONG_STEP_NS

    def _report_in_bulk(self, k, period, shift, log, used):
        """What reporting every repeat's node would leave, made in O(state + period): the node counts move on by
        ``k`` times the period's, each rank's spans get the period's moved by ``j`` periods (in its order: a
        rank's spans are in its finish order), and the parent counts are those of the state ``σ^k(B)``: 0 for
        the nodes the repeats finish and their children, but for ``σ^k`` of the nodes partly freed at B, which
        keep B's counts (any node with a finished parent is finished, ready, running or partly freed then)."""
        sim = self.sim
        types = Counter(self.by_rank[rank].nodes[node_id].type for rank, node_id, _s, _e in log)
        for node_type, n in types.items():
            sim.node_counts[node_type] = sim.node_counts.get(node_type, 0) + k * n
        rows = {}
        for row in log:
            rows.setdefault(row[0], []).append(row[1:])
        spans = sim.recorder.spans if sim.recorder is not None else None
        steps = np.arange(1, k + 1, dtype=np.int64)
        for rank, triples in rows.items():
            w, step, roots = self.by_rank[rank], shift[rank], self.root_recvs[rank]
            base = np.array(triples, dtype=np.int64)
            ids = base[:, 0]
            children = w.children
            freed = np.unique(np.fromiter((c for n in ids.tolist() for c in children[n]), np.int64))
            freed = np.union1d(freed, ids)
            left = w.parents_left
            partial = {c + k * step: left[c] for c in self.touched[rank]}
            left.update(dict.fromkeys((freed[None, :] + (steps * step)[:, None]).ravel().tolist(), 0))
            left.update(partial)
            self.touched[rank] = set(partial)
            root_rows = [i for i, n in enumerate(ids.tolist()) if n in roots]
            moved = base[None, :, :] + steps[:, None, None] * np.array([step, period, period], dtype=np.int64)
            starts = w.node_start_ns
            for j in range(1, k + 1):  # posted at the start: its own start time
                for i in root_rows:
                    node_id = int(moved[j - 1, i, 0])
                    moved[j - 1, i, 1] = starts[node_id]
                    used[rank].add(node_id)
            if spans is not None:
                spans[rank].frombytes(moved.tobytes())  # native int64, as array("q") holds them

    def _repeat_intervals(self, k, period, marks_a, marks_b, comm_too):
        """The gpu model's ``--gpu-contention`` records: per rank an interval per kernel timed (at its issue) and,
        when the repeats were reported in bulk, per collective or send finished (its node observer's). The
        repeats time and finish the period's images, so each rank's intervals since A are appended again ``k``
        times, moved by ``j P``, in their order; and the count of contended kernels moves on."""
        contention = self.contention
        contention.contended_nodes += k * (marks_b[0] - marks_a[0])
        steps = np.arange(1, k + 1, dtype=np.int64) * period
        for table, a_of, b_of in ((contention.compute, marks_a[1], marks_b[1]),
                                  (contention.comm, marks_a[2], marks_b[2])):
            if table is contention.comm and not comm_too:
                continue  # reported one by one: the observer saw them
            for rank, b in b_of.items():
                a = a_of.get(rank, 0)
                if b <= a:
                    continue
                intervals = table[rank]
                for name in ("start", "end"):
                    column = getattr(intervals, name)
                    part = np.frombuffer(column[a:b], dtype=np.int64)
                    column.frombytes((part[None, :] + steps[:, None]).tobytes())
                for name in ("compute_sms", "comm_sms", "hbm"):
                    column = getattr(intervals, name)
                    column.extend(column[a:b] * k)

    def _move_events(self, flat, dt, dn, dtag, width=2):
        out = []
        for i in range(0, len(flat), width):
            fn, arg = flat[i], flat[i + 1]
            func = kernel_method(fn)
            if func is NODE_DONE:
                arg += dn[fn.__self__.rank]
            elif func is CALL_EVENTS:
                arg += dt
            elif func is LAUNCH:
                w = fn.__self__
                arg = (w.nodes[arg[0].id + dn[w.rank]], arg[1])
            elif func is WAKE:
                arg += dn[fn.__self__.rank]
            elif func is ARRIVED:
                self._move_message(arg, dn, dtag)
            # TIMED_OUT (the only other kind a compared state holds): its stream and dataset move with the system
            out.append(fn)
            out.append(arg)
            if width == 3:  # a folded run's history: its times were reset at B's look (astra_folding.time_ties)
                out.append(flat[i + 2])
        return out

    def _move_message(self, m, dn, dtag):
        if id(m) in self._moved:
            return
        self._moved.add(id(m))
        tag, src, dst, size = m.key
        step = dtag.get((src, dst, size))
        if step is None:  # its node was touched, so its channel has a step: not reached
            raise FoldAbandoned(f"time folding found no tag step for the messages {src} -> {dst} of {size} bytes")
        m.key = (wrap_tag(tag + step), src, dst, size)
        if m.send_fn is not None:  # (a folded run keys a message by its receiver's representative's view)
            m.send_arg += dn[m.send_fn.__self__.rank]
        if m.recv_fn is not None:
            m.recv_arg += dn[m.recv_fn.__self__.rank]
