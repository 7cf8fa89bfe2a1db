"""``astra sweep`` and ``astra search``: the command lines."""

from __future__ import annotations

import sys

from astra_sim.cliutil import add_executor_flags, positive_float


def add_commands(sub):
    p = sub.add_parser(
        "sweep", help="run every point of a sweep spec (YAML) and write one row per point (Parquet or CSV)",
        description="Run the points of SPEC.yaml (workload, run options, axes: grid / zip / random; or workload.serve: "
        "astra serve's options, one serving run per point) on a local "
        "process pool or a Dask cluster and write one row per point to RESULTS (.parquet or .csv). Each finished "
        "point is kept at once; the same command after an interruption runs only the missing points.")
    p.add_argument("spec", metavar="SPEC.yaml")
    p.add_argument("-o", "--output", required=True, metavar="RESULTS", help="results file: .parquet or .csv")
    add_executor_flags(p)  # --jobs N (default: one per core), --dask ADDRESS, --executor NAME[:ARG]
    p.add_argument("--point-timeout", type=positive_float, default=None, metavar="S",
                   help="a point running longer is recorded as an error and the sweep goes on")
    p.add_argument("--retry-errors", action="store_true", help="run again the points whose row is an error")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run_command=_cmd_sweep)

    from .search import add_search_command

    add_search_command(sub)


def _cmd_sweep(args):
    from .sweep import run_sweep

    summary = run_sweep(args.spec, args.output, jobs=args.jobs, dask=args.dask, executor=args.executor,
                        point_timeout=args.point_timeout, retry_errors=args.retry_errors,
                        progress=False if args.no_progress else None)
    rate = summary["points_per_minute"]
    print(f"{summary['points']} points: {summary['ok']} ok, {summary['infeasible']} infeasible, "
          f"{summary['error']} errors; ran {summary['ran']}"
          + (f" ({summary['earlier']} already in {summary['output']})" if summary["earlier"] else "")
          + f" in {summary['wall_s']:.1f} s" + (f" ({rate:.1f} points/min)" if rate else "")
          + f"; wrote {summary['output']}", file=sys.stdout)
    return 0
