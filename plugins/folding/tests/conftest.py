"""Fixtures the folding tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def fold_whenever_possible(monkeypatch):
    """Every symmetry found is taken, even a fold by 2 or 3 that the planner's cost rule declines by default (the
    rule is tested in test_fold_cost.py): the exactness and search tests need the folds themselves."""
    from astra_folding import plan

    monkeypatch.setattr(plan, "FOLDED_EVENT_COST", 0)
    monkeypatch.setattr(plan, "FOLDED_EVENT_COST_PRICED", 0)
