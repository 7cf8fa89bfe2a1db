"""The event order of a folded run (:mod:`astra_folding`), which the run's engine delegates to: the
unfolded engine's order of the events of one nanosecond, and the check that a representative's ties are
ordered as in the unfolded run, or :class:`FoldTieBroken` (the run is then simulated unfolded)."""

from __future__ import annotations

from heapq import heappop, heappush

from astra_sim.errors import FoldAbandoned
from astra_sim.workload.workload import RankWorkload

from astra_folding.ties import arrival_commutes, completions_commute, group_commutes, why_not


class FoldTieBroken(FoldAbandoned):
    """Two events met one rank at the same nanosecond in an order that may differ between the members of
    its class (or between the folded and the unfolded run): the fold is not exact; run unfolded."""


class EventHistory:
    """What decides an event's place among the events of its nanosecond, as the unfolded engine orders
    them (:class:`FoldedEvents`): ``times``, a digest of the chain of times at which its ancestors
    were scheduled; ``root``, the rank whose start the chain goes back to, in the folded run; ``rel``, the
    relabelling (offsets of the symmetry) that maps the folded chain to the real one; ``taint``, a cell
    shared with its descendants, set when the real root is not known (see ``tie_check``)."""

    __slots__ = ("times", "root", "rel", "taint")

    def __init__(self, times, root, rel, taint):
        self.times = times
        self.root = root
        self.rel = rel
        self.taint = taint

    def child(self, now):
        return EventHistory(hash((now, self.times)), self.root, self.rel, self.taint)

    def relabelled(self, symmetry, offsets):
        """The history of the real event that is this one moved by minus ``offsets``."""
        rel = tuple((r - k) % s.block for r, k, s in zip(self.rel, offsets, symmetry.shifts))
        return EventHistory(self.times, self.root, rel, self.taint)


class FoldedEvents:
    """The event order of a folded run's engine: the unfolded engine's order, plus a check that it is exact.

    The unfolded engine runs the events of one nanosecond in the order they were scheduled; events
    scheduled at the same time are in the order of the events that scheduled them, and so on back to the
    ranks' starts, which run in rank order. Two events of one rank whose chains of scheduling times are
    equal all the way back are therefore ordered by the ranks their chains start from. In a folded run a
    representative sees, as events of its own, real events of other members of its classes: the check
    (:meth:`tie_check`) makes sure that whenever such an order decides something, the folded run has
    the real order and every member of the class has the same order (relabelled). Otherwise it raises
    :class:`FoldTieBroken` and the run is simulated unfolded.

    The run's :class:`~astra_sim.engine.EventEngine` (which the backends keep) hands its ``schedule_at`` and
    ``run`` to this object (:meth:`~astra_sim.engine.EventEngine.use_fold`); an event is ``fn, arg, history``
    in the engine's buckets, and the engine's ``current`` is the history of the event running.
    """

    __slots__ = ("engine", "symmetry", "_identity", "_ties", "_links", "_significance", "watched")

    def __init__(self, engine, symmetry):
        self.engine = engine
        self.symmetry = symmetry
        self._identity = tuple(0 for _ in symmetry.shifts)
        self._ties = {}  # rank -> [time, {history digest: [(history, op, issued), ...]}, the last of them to run]
        self._links = (-1, [])  # (now, [(taint cell, cell copied from it), ...]) for this nanosecond
        # The shifted digits, most significant first (for the order of two ranks under every relabelling).
        self._significance = sorted(symmetry.shifts, key=lambda sh: -sh.stride)
        # (now, {message: [records of the callbacks tied after its arrival]}): unpaired arrivals whose tie holds
        # only while those callbacks pair no receive with them (ties.arrival_commutes; the matcher checks)
        self.watched = None

    @classmethod
    def fold(cls, engine, symmetry):
        """Fold an (empty) :class:`~astra_sim.engine.EventEngine` by ``symmetry``: the object now ordering its events."""
        fold = cls(engine, symmetry)
        engine.use_fold(fold)
        engine.current = None
        return fold

    def start_rank(self, rank):
        """Events scheduled now belong to ``rank``'s start (the roots of every history)."""
        self.engine.current = EventHistory(0, rank, self._identity, [False])

    def schedule_at(self, time_ns, fn, arg):
        """The engine's ``schedule_at`` (checked there): the event carries its history."""
        engine = self.engine
        history = engine.current.child(engine.now)
        bucket = engine.buckets.get(time_ns)
        if bucket is None:
            engine.buckets[time_ns] = [fn, arg, history]
            heappush(engine.times, time_ns)
        else:
            bucket.extend((fn, arg, history))

    def run(self, until_ns=None):
        """The engine's ``run``: each event runs with its history as the engine's ``current``."""
        engine = self.engine
        times = engine.times
        buckets = engine.buckets
        count = engine._run_end_of_ns() if engine._end_of_ns else 0  # deferred before the first event (rank starts)
        while times:
            time_ns = times[0]
            if until_ns is not None and time_ns > until_ns:
                break
            heappop(times)
            engine.now = time_ns
            bucket = buckets[time_ns]
            i = 0
            while i < len(bucket):
                engine.current = bucket[i + 2]
                bucket[i](bucket[i + 1])
                i += 3
            count += i // 3
            del buckets[time_ns]
            if engine._end_of_ns:
                count += engine._run_end_of_ns()
        engine.events_run += count
        return count

    # -- the check --------------------------------------------------------------------------------
    def tie_check(self, rank, history, op):
        """A callback ``op`` of ``rank`` (a representative) runs now with ``history``: compare it with the
        callbacks that ran before it at this nanosecond and were scheduled at the same time. Sets the
        history its own events descend from (:attr:`current`).

        Two callbacks that are one and the same call (``op``: the function and its argument, e.g. the
        arrivals of a direct collective's messages from several peers) leave the same state in either
        order; so do two completions of one rank's nodes when neither, run first, would issue anything
        (:func:`astra_folding.ties.completions_commute` proves it from the workload). Only which real event
        comes first is unknown then, so the histories of what they schedule are marked (tainted) and any later
        tie that would need them must again be one of these, or it breaks the fold."""
        now = self.engine.now
        cell = [history.taint[0]]
        links = self._links
        if links[0] != now:
            links = self._links = (now, [])
        links[1].append((history.taint, cell))
        history = EventHistory(history.times, history.root, history.rel, cell)
        self.engine.current = history
        owner = getattr(op[0], "__self__", None) if op.__class__ is tuple else None
        issued = getattr(owner, "issued", None)
        entry = self._ties.get(rank)
        if entry is None or entry[0] != now:
            record = (history, op, issued, 0)
            # [now, {history digest: [records]}, the last record, digests with a swap, callbacks not a workload's,
            #  the last record whose group _group_inert passed]
            self._ties[rank] = [now, {history.times: [record]}, record, None, int(issued is None), None]
            return
        if issued is None:
            entry[4] += 1
        record = (history, op, issued, entry[4])  # (..., how many callbacks not a workload's ran before it)
        last = entry[2]
        entry[2] = record
        same = entry[1].get(history.times)
        if same is None:
            entry[1][history.times] = [record]
            return
        for earlier, earlier_op, earlier_issued, _ in same:
            if earlier.rel == history.rel and not earlier.taint[0] and not history.taint[0]:
                continue
            if not earlier.taint[0] and not history.taint[0] and self._ordered_alike(earlier, history):
                continue
            if earlier_op == op or _completions_commute(earlier_op, earlier_issued, op, owner, last[0] is earlier):
                if earlier_op != op:
                    self._one_swap(entry, same, record, owner, rank, now)
                self._taint(earlier.taint)
                self._taint(history.taint)
                continue
            if arrival_commutes(self, earlier_op, op, record):
                continue  # the arrival schedules nothing: no other event's order depends on which came first
            why = _why_not(earlier_op, earlier_issued, op, owner, last[0] is earlier)
            raise FoldTieBroken(
                f"rank {rank}: two events at {now} ns ({_op_name(earlier_op)}, {_op_name(op)}) were "
                "scheduled at the same time by histories that differ only in rank numbering, so their order "
                "may differ between ranks of a class" + (f" ({why})" if why else ""))
        same.append(record)

    @staticmethod
    def _one_swap(entry, same, record, owner, rank, now):
        """A commute proven from the workload's state (:func:`astra_folding.ties.completions_commute`) holds for two
        completions swapped in the state the folded run is in. With a third that may also move (a second such
        swap in the group), other orders pass through states that proof never saw (three completions, each pair
        commuting here, can free a kernel before or after another): the fold is abandoned, unless the whole group
        is shown to reach one state in every order (:func:`_group_inert`)."""
        swapped = entry[3]
        times = record[0].times
        if swapped is None:
            swapped = entry[3] = set()
        elif times in swapped:
            if entry[5] is record:
                return  # shown for this member and those before it (against another of them)
            why = _group_inert(entry, same, record, owner)
            if why is None:
                entry[5] = record
                return
            raise FoldTieBroken(
                f"rank {rank}: three or more node completions at {now} ns were scheduled at the same time by "
                "histories that differ only in rank numbering: a commute proven for two of them in one state "
                f"need not hold in the orders a third allows ({why})")
        swapped.add(times)

    def watch(self, message, record):
        """The tie of ``message``'s unpaired arrival with the later callback ``record`` holds only if that callback
        pairs no receive with it (:meth:`paired`)."""
        now = self.engine.now
        watched = self.watched
        if watched is None or watched[0] != now:
            watched = self.watched = (now, {})
        watched[1].setdefault(message, []).append(record)

    def paired(self, rank, message):
        """A receive of ``rank`` is paired with ``message``, which has arrived: if that happens in a callback tied
        after the arrival (:meth:`watch`), the other order would have paired it before the arrival (delivered
        within the arrival, not by an event of its own): the order matters."""
        watched = self.watched
        if watched is None or watched[0] != self.engine.now or message not in watched[1]:
            return
        entry = self._ties.get(rank)
        if entry is not None and entry[0] == watched[0] and any(r is entry[2] for r in watched[1][message]):
            raise FoldTieBroken(
                f"rank {rank}: a message arrived at {watched[0]} ns before its receive was posted, by a callback "
                "scheduled at the same time (whose order may differ between ranks of a class): the receive "
                "completes within the arrival in one order and as an event of its own in the other")

    def _taint(self, cell):
        """Mark a history's cell and the cells of its descendants that already ran at this nanosecond
        (later ones copy the mark when they run)."""
        cell[0] = True
        links = self._links[1] if self._links[0] == self.engine.now else ()
        marked = [cell]
        while marked:
            parent = marked.pop()
            for old, new in links:
                if old is parent and not new[0]:
                    new[0] = True
                    marked.append(new)

    def _ordered_alike(self, earlier, later):
        """Whether the real events behind ``earlier`` and ``later`` run in that order, and in the same
        order at every member of the class (their chains differ only in the ranks they start from)."""
        symmetry = self.symmetry
        first = symmetry.moved(earlier.root, earlier.rel)
        second = symmetry.moved(later.root, later.rel)
        if not first < second:
            return False
        # Every relabelling must keep the order. Going down from the most significant shifted digit: a
        # difference above it (in digits no shift moves) keeps the order; a difference in the digit keeps
        # it only if the two values sit in different blocks (a shift moves both inside their blocks).
        for shift in self._significance:
            top = shift.stride * shift.radix
            if first // top != second // top:
                return True
            a = (first // shift.stride) % shift.radix
            b = (second // shift.stride) % shift.radix
            if a != b:
                return a // shift.block != b // shift.block
        return True


def _group_inert(entry, same, record, owner):
    """None when every order of a group of tied node completions of ``owner`` (``same``, then ``record`` about to
    run) reaches one state, only the last pass issuing nodes; else why not. Every callback of the rank since the
    group's first member is a completion of ``owner``'s nodes (``entry[4]``, the count of other callbacks, has not
    moved: the members and any completion between them, which keep their places), none issued a node
    (``owner.issued`` unchanged), and :func:`astra_folding.ties.group_commutes` shows that in every order a pass
    before the last has nothing to issue."""
    first = same[0]
    if not all(_node_done_of(owner, r[1]) for r in (*same, record)):
        return "not all of them are node completions of the rank"
    if first[3] != entry[4]:
        return "other callbacks of the rank ran between them"
    if owner.issued != first[2]:
        return "some of them issued nodes"
    if not group_commutes(owner, [r[1][1] for r in same], record[1][1]):
        return "a pass before the last of them would issue a node in some order"
    return None


def _node_done_of(owner, op):
    """Whether the tie-checked callback ``op`` is a node completion of ``owner``, a rank's workload
    (``RankWorkload._node_done`` bound to it). By name, since a method of a mypyc-compiled class
    (tools/compile_core.py) has no __func__."""
    return (isinstance(owner, RankWorkload) and op.__class__ is tuple
            and getattr(op[0], "__self__", None) is owner and getattr(op[0], "__name__", None) == "_node_done")


def _completions_commute(earlier_op, earlier_issued, op, owner, adjacent):
    """Whether two node completions of one rank's workload (``RankWorkload._node_done``) leave the same state in
    either order (:func:`astra_folding.ties.completions_commute`); ``earlier_issued``: the workload's issue count
    when the earlier one started; ``adjacent``: no other callback of the rank ran since the earlier one."""
    if not (_node_done_of(owner, earlier_op) and _node_done_of(owner, op)):
        return False
    return completions_commute(owner, earlier_op[1], op[1], owner.issued - earlier_issued, adjacent)


def _why_not(earlier_op, earlier_issued, op, owner, adjacent):
    """Why two node completions of ``owner`` were not shown to commute (:func:`astra_folding.ties.why_not`), or None
    for other callbacks."""
    if not (_node_done_of(owner, earlier_op) and _node_done_of(owner, op)):
        return None
    if earlier_op[1] not in owner.nodes or op[1] not in owner.node_start_ns:
        return None
    return why_not(owner, earlier_op[1], op[1], owner.issued - earlier_issued, adjacent)


def _op_name(op):
    """A short name for a tie-checked callback (for the reason a fold was abandoned)."""
    if isinstance(op, tuple):
        fn = op[0]
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
        return name.replace("._call_events_folded", ".events").replace("RankWorkload._node_done", "node done")
    return "message arrival"
