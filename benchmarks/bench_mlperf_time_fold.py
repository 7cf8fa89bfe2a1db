"""Issue 37's time-folding bar on the MLPerf Training v3.1 GPT-3 175B layout (``bench_mlperf_gpt3.py``'s workload:
TP 4, PP 8, 12 virtual stages, DP 16 on 64 ``hgx-h100`` nodes, 512 ranks folded by symmetry to 8), ``astra run
--time-fold`` at 16, 32 and 64 micro-batches: this checkout against an earlier one (``--baseline DIR``, e.g. ``git
archive COMMIT core plugins testing | tar -x -C DIR``), and against the same run without ``--time-fold``
(``--plain``), alternated. Prints the user CPU of each whole ``astra run`` (min of ``--rounds``), what was jumped
over, and whether every report is the same as the baseline's and the plain run's (every number but the run's own
timings and ``settings.fold.time``).

    python benchmarks/bench_mlperf_time_fold.py [--micro-batches 16,32,64] [--baseline DIR] [--this DIR] [--plain]
                                                [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_mlperf_gpt3 import _source_path, _without_timings, _workload  # noqa: E402


def _run(prefix, report, source_root, fold):
    env = dict(os.environ)
    if source_root is not None:
        env["PYTHONPATH"] = _source_path(source_root)
    args = [sys.executable, "-m", "astra_sim.cli", "run", "--workload-configuration", prefix, "--platform", "hgx-h100",
            "--nodes", "64", "--report-json", report, "-q", *(["--time-fold"] if fold else [])]
    start = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/")
    _pid, status, usage = os.wait4(child.pid, 0)  # this child's own CPU
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"astra run failed: {' '.join(args)}")
    with open(report) as handle:
        return usage.ru_utime, time.perf_counter() - start, json.load(handle)


def _comparable(report):
    report = _without_timings(report)
    report.get("settings", {}).get("fold", {}).pop("time", None)
    report.get("stats", {}).pop("time_fold", None)  # (its terminal line)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro-batches", default="16,32,64")
    parser.add_argument("--baseline", help="an earlier checkout's root, run beside this one")
    parser.add_argument("--this", help="run this tree's sources (a checkout's root) instead of the installed ones")
    parser.add_argument("--plain", action="store_true", help="also run this checkout without --time-fold")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workdir", default=os.path.join("/tmp", "bench-mlperf-gpt3"))
    args = parser.parse_args(argv)
    this = os.path.abspath(args.this) if args.this else None
    runs = [("this", this, True)]
    if args.baseline:
        runs.append(("baseline", os.path.abspath(args.baseline), True))
    if args.plain:
        runs.append(("plain", this, False))
    for micro_batches in args.micro_batches.split(","):
        prefix, _dp = _workload(f"dp16-m{micro_batches}", args.workdir)
        best, reports = {}, {}
        for _ in range(args.rounds):
            for name, root, fold in reversed(runs):
                cpu, wall, report = _run(prefix, os.path.join(args.workdir, f"tf-{name}.json"), root, fold)
                best[name] = min(best.get(name, (cpu, wall)), (cpu, wall))
                reports[name] = report
        info = reports["this"]["settings"]["fold"].get("time", {})
        cells = [f"{name} {best[name][0]:.1f} s" for name, _r, _f in runs]
        same = all(_comparable(reports[name]) == _comparable(reports["this"]) for name in reports)
        print(f"DP 16, {micro_batches} micro-batches: {reports['this']['stats']['events']:,} events, "
              f"{info.get('skipped_events', 0):,} jumped in {info.get('jumps', 0)} jump(s); user CPU "
              + ", ".join(cells) + f"; reports {'identical' if same else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
