"""``astra sweep`` and ``astra search``: the command lines."""

from __future__ import annotations

import sys

from .sweep_spec import SweepSpec


def add_commands(sub):
    p = sub.add_parser(
        "sweep", help="run every point of a sweep spec (YAML) and write one row per point (Parquet or CSV)",
        description="Run the points of SPEC.yaml (workload, run options, axes: grid / zip / random; or workload.serve: "
        "astra serve's options, one serving run per point) on a local "
        "process pool or a Dask cluster and write one row per point to RESULTS (.parquet or .csv). Each finished "
        "point is kept at once; the same command after an interruption runs only the missing points.")
    SweepSpec.add_cli_args(p)
    p.set_defaults(run_command=_cmd_sweep)

    from .search import add_search_command

    add_search_command(sub)


def _cmd_sweep(args):
    summary = SweepSpec.from_cli_args(args).run()
    rate = summary["points_per_minute"]
    print(f"{summary['points']} points: {summary['ok']} ok, {summary['infeasible']} infeasible, "
          f"{summary['error']} errors; ran {summary['ran']}"
          + (f" ({summary['earlier']} already in {summary['output']})" if summary["earlier"] else "")
          + f" in {summary['wall_s']:.1f} s" + (f" ({rate:.1f} points/min)" if rate else "")
          + f"; wrote {summary['output']}", file=sys.stdout)
    return 0
