"""Registers the fold planner: a run whose inputs keep a symmetry simulates one rank per class; a pipeline's
steady state is jumped over with ``--time-fold`` (time folding), and the summary says so."""

from __future__ import annotations

from astra_sim import hookimpl

from astra_folding.plan import FoldPlanner


@hookimpl
def astra_add_run_options(parser):
    parser.add_argument(
        "--time-fold", action="store_true",
        help="jump over the repeats of a pipeline's steady state, to the ns (astra-folding; settings.fold.time says "
             "what was jumped over, or why not). Off by default: a jump costs about what simulating costs here")


@hookimpl
def astra_fold_planner(setup, catalogue, requested, refused):
    return FoldPlanner(setup, catalogue, requested, refused)


@hookimpl
def astra_run_finish(run, report):
    """The terminal's line for a run folded in time (``stats.time_fold.summary_line``; the numbers are in
    ``settings.fold.time``)."""
    info = (report.settings.get("fold") or {}).get("time") or {}
    if info.get("folded"):
        from astra_folding.time_fold import summary_line  # (numpy: imported only when a run folded in time)

        report.stats["time_fold"] = {"summary_line": summary_line(info)}
