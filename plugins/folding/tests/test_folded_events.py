"""The folded run's event order (astra_folding.engine.FoldedEvents): the run's engine delegates to it, and stays
an :class:`~astra_sim.engine.EventEngine` (no class swap: a compiled engine class cannot change its type)."""

from __future__ import annotations

import pytest

from astra_folding.engine import EventHistory, FoldedEvents
from astra_folding.groups import BlockShift, RankSymmetry
from astra_sim.engine import EventEngine

SYMMETRY = RankSymmetry([BlockShift(1, 4, 2)])  # 4 NPUs, folded by 2


def test_the_engine_keeps_its_class_and_delegates_its_order():
    engine = EventEngine()
    fold = FoldedEvents.fold(engine, SYMMETRY)
    assert type(engine) is EventEngine and engine.fold is fold
    seen = []

    def record(label):
        seen.append((engine.now, label, engine.current.root))
        if label == "a":
            engine.schedule(0, record, "a-now")  # for now: the same batch, after "b"

    fold.start_rank(0)
    engine.schedule(3, record, "a")
    fold.start_rank(1)
    engine.schedule_at(3, record, "b")
    assert engine.run() == 3
    # Each event ran with its own history as the engine's current, in the unfolded engine's order.
    assert seen == [(3, "a", 0), (3, "b", 1), (3, "a-now", 0)]
    assert engine.events_run == 3 and engine.now == 3


def test_histories_chain_the_scheduling_times():
    engine = EventEngine()
    fold = FoldedEvents.fold(engine, SYMMETRY)
    histories = []
    fold.start_rank(1)
    engine.schedule(5, lambda _: histories.append(engine.current))
    engine.run()
    (history,) = histories
    assert isinstance(history, EventHistory)
    assert history.root == 1 and history.times == hash((0, 0))


def test_only_an_empty_engine_folds():
    engine = EventEngine()
    engine.schedule(1, print)
    with pytest.raises(ValueError, match="before anything is scheduled"):
        FoldedEvents.fold(engine, SYMMETRY)
    assert engine.fold is None


def test_an_unfolded_engine_has_no_fold_state():
    """The plain engine carries none of the fold's state (it lives in FoldedEvents)."""
    engine = EventEngine()
    assert engine.fold is None
    for name in ("symmetry", "_identity", "_ties", "_significance", "_links"):
        assert not hasattr(engine, name)
        assert hasattr(FoldedEvents(engine, SYMMETRY), name)
