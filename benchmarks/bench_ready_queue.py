"""Benchmark: many dependency-free nodes queued behind one busy slot.

Each of 64 ranks holds N sends (one communication slot, so they run one at a
time) and N receives, all ready at time 0. Issuing must stay linear in N: the
wall time at 2N may be at most 2.5 x the time at N. (Sorting every ready node
after every completion, as the workload layer did before per-slot heaps, is
quadratic: on the 2-core machine N = 2000 ran 66 s instead of 1.4 s, and 2N
took 3.8 x as long.)

    python benchmarks/bench_ready_queue.py [--messages N]
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads  # noqa: E402

from astra_sim.simulation import Simulation  # noqa: E402


def wall_s(folder, messages):
    inputs = workloads.ready_queue(folder, messages=messages)
    start = time.perf_counter()
    report = Simulation(*inputs).run()
    wall = time.perf_counter() - start
    print(f"{messages} sends + {messages} receives per rank, {len(report.ranks)} ranks: simulated "
          f"{report.max_finish_ns:,} ns, wall {wall:.2f} s (run {report.stats['run_s']:.2f} s)")
    return report.stats["run_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small = wall_s(os.path.join(tmp, "n"), args.messages)
        large = wall_s(os.path.join(tmp, "2n"), 2 * args.messages)
    ratio = large / small
    verdict = "OK" if ratio <= 2.5 else "NOT LINEAR"
    print(f"run time 2N / N = {ratio:.2f} (linear: 2.0, limit 2.5): {verdict}")
    return 0 if ratio <= 2.5 else 1


if __name__ == "__main__":
    sys.exit(main())
