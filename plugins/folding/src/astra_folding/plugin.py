"""Registers the fold planner: a run whose inputs keep a symmetry simulates one rank per class."""

from __future__ import annotations

from astra_sim import hookimpl

from astra_folding.plan import FoldPlanner


@hookimpl
def astra_fold_planner(setup, catalogue, requested, refused):
    return FoldPlanner(setup, catalogue, requested, refused)
