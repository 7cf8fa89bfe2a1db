"""What seeing where the time goes costs (issue 18).

* ``recording``: the run time (``stats.run_s``, the event loop) with and without recording spans for the
  breakdown (``breakdown=False`` records nothing), best of ``--repeat`` runs each, on the 1024-rank
  data-parallel training step folded and unfolded-by-backend (congestion), and the 1 GiB all-reduce on 4096 ranks.
* ``timeline``: the 1 GiB all-reduce on 4096 ranks (Ring 8 x FullyConnected 8 x Switch 64) without and with
  ``--timeline`` (gzip), each in a fresh process: wall time of the whole run (build, simulation, analysis and
  writing) and peak RSS. Budget (issue 18): with the timeline at most 2x the time and below 1 GB of memory.

    python benchmarks/bench_timeline.py [recording|timeline|all] [--repeat N]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads  # noqa: E402

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {bench!r})
from astra_sim.simulation import Simulation
inputs = {inputs!r}
timeline = {timeline!r}
start = time.perf_counter()
report = Simulation(*inputs, timeline=timeline).run()
wall = time.perf_counter() - start
print(json.dumps({{"wall_s": wall, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "stats": report.stats, "timeline": report.timeline}}))
"""


def _child(inputs, timeline):
    code = _CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), inputs=list(inputs), timeline=timeline)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_timeline(folder):
    inputs = workloads.all_reduce(os.path.join(folder, "ar"))
    path = os.path.join(folder, "ar_timeline.json.gz")
    _child(inputs, None)  # warm the file cache
    plain = _child(inputs, None)
    traced = _child(inputs, path)
    ratio = traced["wall_s"] / plain["wall_s"]
    ok = ratio <= 2.0 and traced["rss"] < 1 << 30
    info = traced["timeline"]
    print(f"timeline, 1 GiB all-reduce on 4096 ranks: without {plain['wall_s']:.3f} s, peak RSS "
          f"{plain['rss'] / 2**20:.0f} MiB; with --timeline {traced['wall_s']:.3f} s ({ratio:.2f}x; writing "
          f"{traced['stats']['timeline_s']:.3f} s), peak RSS {traced['rss'] / 2**20:.0f} MiB; "
          f"{info['events']:,} events for {info['ranks_written']:,} ranks, {info['bytes'] / 2**20:.2f} MiB: "
          f"budget 2x and 1 GiB: {'OK' if ok else 'MISSED'}")
    return ok


def _best_run_s(inputs, repeat, **kwargs):
    from astra_sim.simulation import Simulation

    best = None
    for _ in range(repeat):
        report = Simulation(*inputs, **kwargs).run()
        best = report.stats["run_s"] if best is None else min(best, report.stats["run_s"])
    return best, report


def bench_recording(folder, repeat):
    cases = [
        ("training, 1024 ranks (folded)", workloads.data_parallel_training(os.path.join(folder, "dp")), {}),
        ("training, 64 ranks, congestion (unfolded)",
         workloads.data_parallel_training(os.path.join(folder, "dp64"), npus=(4, 4, 4)),
         {"network_backend": "congestion"}),
        ("all-reduce 1 GiB, 4096 ranks (folded)", workloads.all_reduce(os.path.join(folder, "ar")), {}),
    ]
    for name, inputs, kwargs in cases:
        off, _ = _best_run_s(inputs, repeat, breakdown=False, **kwargs)
        on, report = _best_run_s(inputs, repeat, **kwargs)
        nodes = sum(report.stats["nodes_by_type"].values()) * report.stats["simulated_ranks"] // len(report.ranks)
        print(f"recording, {name}: event loop {off:.3f} s without spans, {on:.3f} s with ({(on / off - 1) * 100:+.1f}%; "
              f"{report.stats['events']:,} events, about {nodes:,} nodes recorded); breakdown "
              f"{report.stats['analysis_s']:.3f} s after the run")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", default="all", choices=("recording", "timeline", "all"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        if args.case in ("recording", "all"):
            ok &= bench_recording(folder, args.repeat)
        if args.case in ("timeline", "all"):
            ok &= bench_timeline(folder)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
