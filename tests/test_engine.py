"""The discrete-event engine (core/astra_sim/engine.py).

Reference semantics (shared/reference/astra-sim-semantics.md §2): integer ns,
events at equal times run FIFO in insertion order, and an event scheduled for
the current time while that time's batch runs is appended to the same batch.
"""

from __future__ import annotations

import pytest

from astra_sim.engine import EventEngine


def test_equal_times_run_in_insertion_order():
    engine = EventEngine()
    seen = []
    for label in "abcde":
        engine.schedule(10, seen.append, label)
    engine.schedule_at(10, seen.append, "f")
    engine.schedule(5, seen.append, "early")
    engine.run()
    assert seen == ["early", "a", "b", "c", "d", "e", "f"]
    assert engine.now == 10


def test_schedule_and_schedule_at_share_one_fifo_per_time():
    engine = EventEngine()
    seen = []
    engine.schedule_at(7, seen.append, 1)
    engine.schedule(7, seen.append, 2)
    engine.schedule_at(7, seen.append, 3)
    engine.run()
    assert seen == [1, 2, 3]


def test_event_for_now_runs_in_the_same_batch_after_the_others():
    engine = EventEngine()
    seen = []

    def first(_):
        seen.append(("first", engine.now))
        engine.schedule(0, second, None)  # for "now": appended to the running batch
        engine.schedule(1, later, None)

    def second(_):
        seen.append(("second", engine.now))

    def later(_):
        seen.append(("later", engine.now))

    engine.schedule(3, first)
    engine.schedule(3, seen.append, ("sibling", 3))
    count = engine.run()
    # The zero-delay event runs after the sibling already queued at t=3, still at t=3.
    assert seen == [("first", 3), ("sibling", 3), ("second", 3), ("later", 4)]
    assert count == 4
    assert engine.events_run == 4


def test_zero_delay_event_does_not_create_a_new_time():
    engine = EventEngine()
    times = []

    def chain(n):
        times.append(engine.now)
        if n:
            engine.schedule(0, chain, n - 1)

    engine.schedule(2, chain, 3)
    engine.run()
    assert times == [2, 2, 2, 2]
    assert engine.pending() == 0


def test_times_are_integers_and_accumulate_exactly():
    engine = EventEngine()
    stamps = []

    def tick(n):
        stamps.append(engine.now)
        if n:
            engine.schedule(1_000_000_007, tick, n - 1)

    engine.schedule(0, tick, 3)
    engine.run()
    assert stamps == [0, 1_000_000_007, 2_000_000_014, 3_000_000_021]
    assert all(type(t) is int for t in stamps)
    assert type(engine.now) is int


def test_run_until_stops_before_later_events_and_resumes():
    engine = EventEngine()
    seen = []
    for t in (5, 10, 15, 20):
        engine.schedule_at(t, seen.append, t)
    assert engine.run(until_ns=10) == 2
    assert seen == [5, 10]
    assert engine.now == 10
    assert engine.pending() == 2
    # Nothing between 10 and 12: no event runs, time does not move.
    assert engine.run(until_ns=12) == 0
    assert engine.now == 10
    assert engine.run() == 2
    assert seen == [5, 10, 15, 20]
    assert engine.now == 20
    assert engine.pending() == 0
    assert engine.events_run == 4


def test_run_until_includes_events_scheduled_for_now_during_the_batch():
    engine = EventEngine()
    seen = []

    def at_ten(_):
        seen.append("ten")
        engine.schedule(0, seen.append, "ten-again")
        engine.schedule(1, seen.append, "eleven")

    engine.schedule_at(10, at_ten)
    engine.run(until_ns=10)
    assert seen == ["ten", "ten-again"]
    engine.run()
    assert seen == ["ten", "ten-again", "eleven"]


def test_schedule_is_relative_to_now():
    engine = EventEngine()
    seen = []

    def at(_):
        engine.schedule(5, lambda _a: seen.append(engine.now))

    engine.schedule_at(100, at)
    engine.run()
    assert seen == [105]


def test_schedule_at_in_the_past_raises():
    engine = EventEngine()
    engine.schedule_at(50, lambda _a: None)
    engine.run()
    assert engine.now == 50
    with pytest.raises(ValueError, match="before now"):
        engine.schedule_at(49, lambda _a: None)
    # Scheduling at exactly now is allowed and runs.
    seen = []
    engine.schedule_at(50, seen.append, "now")
    engine.run()
    assert seen == ["now"]


def test_empty_run_returns_zero():
    engine = EventEngine()
    assert engine.run() == 0
    assert engine.now == 0
    assert engine.pending() == 0


def test_next_time_and_is_last_now_for_co_simulators():
    """What the ns3 backend's lockstep reads: the next time with events, and whether an event is the batch's last."""
    engine = EventEngine()
    seen = []

    def probe(token):
        seen.append((engine.now, token, engine.next_time(), engine.is_last_now(probe, token)))

    first, second = object(), object()
    engine.schedule(10, probe, first)
    engine.schedule(10, probe, second)
    engine.schedule(25, lambda _a: None)
    assert engine.next_time() == 10
    engine.run()
    assert seen == [(10, first, 25, False), (10, second, 25, True)]
    assert engine.next_time() is None


def test_end_of_ns_waits_for_every_event_of_its_nanosecond():
    engine = EventEngine()
    log = []

    def event(name):
        log.append((engine.now, name))
        if name == "a":
            engine.at_end_of_ns(lambda _: log.append((engine.now, "late")))
            engine.schedule(0, event, "a-now")  # scheduled for now after the deferral: still runs first

    engine.schedule(5, event, "a")
    engine.schedule(5, event, "b")
    engine.schedule(6, event, "c")
    assert engine.run() == 5
    assert log == [(5, "a"), (5, "b"), (5, "a-now"), (5, "late"), (6, "c")]


def test_what_the_end_of_ns_schedules_for_now_runs_next_then_its_own_end():
    engine = EventEngine()
    log = []

    def late(round_):
        log.append(("late", round_, engine.now))
        if round_ == 1:
            engine.schedule(0, lambda _: log.append(("now again", engine.now)))
            engine.at_end_of_ns(late, 2)

    engine.at_end_of_ns(late, 1)  # before the first event (a rank's start): runs at once, at 0 ns
    engine.schedule(3, lambda _: log.append(("later", engine.now)))
    engine.run()
    assert log == [("late", 1, 0), ("now again", 0), ("late", 2, 0), ("later", 3)]
    assert not engine.has_end_of_ns()


def test_is_last_now_is_false_while_something_waits_for_the_end_of_ns():
    engine = EventEngine()
    seen = []

    def probe(token):
        seen.append(engine.is_last_now(probe, token))

    engine.schedule(1, probe, "x")
    engine.schedule(1, lambda _: engine.at_end_of_ns(lambda _: None))
    engine.schedule(1, probe, "y")
    engine.run()
    assert seen == [False, False]


def test_two_alternating_times_keep_each_times_fifo_order():
    """Issue 37: run() keeps the buckets of the last two distinct times scheduled into (a congestion link's arrival
    and free alternate); events of one time still run in the order they were scheduled."""
    engine = EventEngine()
    ran = []

    def start(k):
        ran.append(("start", k, engine.now))
        engine.schedule(30, ran.append, ("arrive", k))   # two times, alternating
        engine.schedule(20, ran.append, ("free", k))
        if k == 0:
            engine.schedule(20, lambda _: engine.schedule(0, ran.append, ("late", 0)), None)

    for k in range(3):
        engine.schedule(0, start, k)
    engine.run()
    frees = [e for e in ran if e[0] == "free"]
    arrivals = [e for e in ran if e[0] == "arrive"]
    assert frees == [("free", 0), ("free", 1), ("free", 2)]
    assert arrivals == [("arrive", 0), ("arrive", 1), ("arrive", 2)]
    assert ran.index(("late", 0)) == ran.index(("free", 2)) + 1  # (joined time 20's running bucket, at its end)
    assert ran[-3:] == arrivals and engine.now == 30 and not engine.buckets and engine._hot_ns == -2
