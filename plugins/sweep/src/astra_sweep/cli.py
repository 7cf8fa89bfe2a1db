"""``astra sweep`` and ``astra search``: the command lines."""

from __future__ import annotations

import os
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
    from astra_sim.errors import ConfigError
    from astra_sim.executors import Stopped
    from astra_sim.outputs import check_writable_folder

    check_writable_folder(os.path.dirname(os.path.abspath(args.output)), f"--output {args.output}")
    try:
        summary = SweepSpec.from_cli_args(args).run()
    except Stopped as stop:
        if getattr(stop, "kept", None):
            print(f"astra: {stop.signal_name}: {stop.kept[0]} of {stop.kept[1]} points kept; rerun the same command "
                  "to resume", file=sys.stderr)
        raise
    except OSError as exc:  # a write that fails late (a full disk): the finished points are in the journal
        journal = f"{args.output}.journal"
        kept = (f"; the finished points are kept in {journal}: rerun the same command to write {args.output}"
                if os.path.exists(journal) and os.path.getsize(journal) else "")
        raise ConfigError(f"--output {args.output}: cannot write: {exc.strerror or exc}{kept}") from None
    rate = summary["points_per_minute"]
    print(f"{summary['points']} points: {summary['ok']} ok, {summary['infeasible']} infeasible, "
          f"{summary['error']} errors; ran {summary['ran']}"
          + (f" ({summary['earlier']} already in {summary['output']})" if summary["earlier"] else "")
          + f" in {summary['wall_s']:.1f} s" + (f" ({rate:.1f} points/min)" if rate else "")
          + f"; wrote {summary['output']}", file=sys.stdout)
    return 0
