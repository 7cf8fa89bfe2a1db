"""The discrete-event engine: integer nanoseconds, FIFO among equal times.

Events are ``(fn, arg)`` pairs in one list per distinct time, with a heap of the times; an event scheduled for now
while now's list runs joins that batch (the reference's event-queue semantics). Collectives make many ranks act at
one instant, so bucketing by time keeps heap traffic low (and run() keeps the last bucket scheduled into: ``_hot``).
"""

from heapq import heappop, heappush
from typing import Any


class EventEngine:
    """Single global event queue; ``now`` is the current time in ns."""

    __slots__ = ("now", "buckets", "times", "events_run", "_end_of_ns", "current", "fold", "_hot_ns", "_hot",
                 "_hot2_ns", "_hot2")

    def __init__(self) -> None:  # typed (int times, typed containers) for tools/compile_core.py's mypyc
        self.now: int = 0
        # time -> flat [fn, arg, fn, arg, ...] and a heap of its keys, public for astra_folding's own event orders
        self.buckets: dict[int, list[Any]] = {}
        self.times: list[int] = []
        self.events_run: int = 0
        self._end_of_ns: list[Any] = []  # [fn, arg, current, ...] to run once every event of the current time has run
        self.current: Any = None
        # A folded run's event order (astra_folding's FoldedEvents), set before anything is scheduled (use_fold):
        # the backends, built before the fold is decided, keep this engine.
        self.fold: Any = None
        # The buckets of the last two distinct times scheduled to (-1: none; -2: not in run(), which drops them as it
        # deletes a bucket): most events go to one (ranks act alike; a congestion link's arrival and free alternate).
        self._hot_ns: int = -2
        self._hot: list[Any] = []
        self._hot2_ns: int = -2
        self._hot2: list[Any] = []

    def use_fold(self, fold):
        """Hand this empty engine's event order to a folded run's ``fold`` (its ``schedule_at`` and ``run``)."""
        if self.times or self._end_of_ns:
            raise ValueError("an engine can only be folded before anything is scheduled")
        self.fold = fold

    def schedule(self, delay_ns: int, fn: Any, arg: Any = None) -> None:
        """Run ``fn(arg)`` ``delay_ns`` (an int >= 0) after now."""
        time_ns = self.now + delay_ns
        if time_ns == self._hot_ns:  # (>= now: a negative delay misses them)
            bucket = self._hot
        elif time_ns == self._hot2_ns:
            bucket = self._hot2
        else:
            if delay_ns < 0:
                raise ValueError(f"cannot schedule {delay_ns} ns in the past")
            if self.fold is not None:
                self.fold.schedule_at(time_ns, fn, arg)
                return
            new = self.buckets.get(time_ns)
            if new is None:
                new = self.buckets[time_ns] = [fn, arg]  # (made with its event: most buckets hold one or two)
                heappush(self.times, time_ns)
            else:
                new.append(fn)
                new.append(arg)
            if self._hot_ns != -2:
                self._hot2_ns, self._hot2 = self._hot_ns, self._hot
                self._hot_ns, self._hot = time_ns, new
            return
        bucket.append(fn)
        bucket.append(arg)

    def schedule_at(self, time_ns: int, fn: Any, arg: Any = None) -> None:
        """Run ``fn(arg)`` at absolute time ``time_ns`` (>= now)."""
        if time_ns < self.now:
            raise ValueError(f"cannot schedule at {time_ns} ns, before now ({self.now} ns)")
        self.schedule(time_ns - self.now, fn, arg)

    def at_end_of_ns(self, fn: Any, arg: Any = None) -> None:
        """Run ``fn(arg)`` after every event of now, those they schedule included (a decision that must not depend on
        their order: what runs beside a kernel), with the deferring event's :attr:`current` (a folded run's history)."""
        self._end_of_ns += (fn, arg, self.current)

    def pending(self) -> int:
        """Number of distinct future times with events (cheap emptiness test)."""
        return len(self.times)

    def next_time(self):
        """The next time with events (None: none), up to which a co-simulator (ns-3) may advance its own clock."""
        return self.times[0] if self.times else None

    def has_end_of_ns(self):
        """Whether something waits for the end of the current nanosecond (:meth:`at_end_of_ns`)."""
        return bool(self._end_of_ns)

    def _run_end_of_ns(self) -> int:
        """Run what waits for the end of now until something is scheduled for now (it runs first) or nothing waits."""
        count = 0
        while self._end_of_ns and self.now not in self.buckets:
            late, self._end_of_ns = self._end_of_ns, []
            for i in range(0, len(late), 3):
                self.current = late[i + 2]
                late[i](late[i + 1])
            count += len(late) // 3
        return count

    def is_last_now(self, fn, arg):
        """Whether ``(fn, arg)`` is the last event booked for now."""
        bucket = self.buckets.get(self.now)
        return not self._end_of_ns and bucket is not None and bucket[-2] is fn and bucket[-1] is arg

    def run(self, until_ns: int | None = None) -> int:
        """Run events until none are left (or the next is after ``until_ns``)."""
        if self.fold is not None:
            return self.fold.run(until_ns)
        times = self.times
        buckets = self.buckets
        count = self._run_end_of_ns() if self._end_of_ns else 0  # deferred before the first event (rank starts)
        self._hot_ns = self._hot2_ns = -1
        try:
            while times:
                if until_ns is not None and times[0] > until_ns:
                    break
                self.now = time_ns = heappop(times)
                bucket = buckets[time_ns]
                i = 0
                # The bucket may grow while it runs (events for "now").
                while i < len(bucket):
                    bucket[i](bucket[i + 1])
                    i += 2
                count += i >> 1
                if self._hot_ns == time_ns:  # (one of them may be this bucket)
                    self._hot_ns = -1
                elif self._hot2_ns == time_ns:
                    self._hot2_ns = -1
                del buckets[time_ns]
                if self._end_of_ns:
                    count += self._run_end_of_ns()
        finally:
            self._hot_ns = self._hot2_ns = -2
            self._hot = self._hot2 = []
        self.events_run += count
        return count
