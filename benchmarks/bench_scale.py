"""Scale benchmarks from issue #2, compared with the reference's wall time on this machine.

* allreduce: one 1 GiB all-reduce on 4096 ranks (Ring 8 x FullyConnected 8 x Switch 64);
  reference: 13 s.
* training: a 20-layer data-parallel step on 1024 ranks (Ring 8 x FullyConnected 8 x Switch 16):
  per rank 20 forward and 20 backward 50 us compute nodes and 20 all-reduces of 16 MiB;
  reference: 16 s.

Each prints wall time, simulated time, events per second and peak memory.

    python benchmarks/bench_scale.py [allreduce|training|all] [--workdir DIR]
"""

import argparse
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads  # noqa: E402

from astra_sim.simulation import Simulation  # noqa: E402

REFERENCE_WALL_S = {"allreduce": 13.0, "training": 16.0}


def bench(name, folder):
    if name == "allreduce":
        inputs = workloads.all_reduce(folder)
    else:
        inputs = workloads.data_parallel_training(folder)
    start = time.perf_counter()
    sim = Simulation(*inputs)
    report = sim.run()
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats = report.stats
    budget = 2 * REFERENCE_WALL_S[name]
    verdict = "OK" if wall <= budget else "TOO SLOW"
    print(f"{name}: {len(report.ranks)} ranks, simulated {report.max_finish_ns:,} ns; wall {wall:.2f} s "
          f"(build {stats['build_s']:.2f} s, run {stats['run_s']:.2f} s), {stats['events']:,} events "
          f"= {stats['events'] / stats['run_s'] / 1e6:.2f} M events/s, peak RSS {peak_mib:.0f} MiB; "
          f"budget 2 x {REFERENCE_WALL_S[name]:.0f} s: {verdict}")
    return wall <= budget


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", default="all", choices=["allreduce", "training", "all"])
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    names = ["allreduce", "training"] if args.which == "all" else [args.which]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            folder = os.path.join(args.workdir or tmp, name)
            ok &= bench(name, folder)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
