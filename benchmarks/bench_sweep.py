"""Benchmark: a 100-point GPT-3 13B sweep on 64 H100s (10 TP/PP/DP layouts x ring / NCCL collectives x 5
micro-batch counts, the gpu compute model), on the local pool; prints points per minute.

    python benchmarks/bench_sweep.py [--jobs N] [--dask ADDRESS] [-o results.parquet]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

SPEC = """
workload:
  llm: {preset: gpt3-13b, tp: 2, pp: 2, dp: 16, micro-batches: 8, sequence-parallel: true}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  zip:
    workload.llm.tp: [1, 2, 4, 8, 1, 2, 4, 8, 2, 4]
    workload.llm.pp: [1, 1, 1, 1, 2, 2, 2, 2, 4, 4]
    workload.llm.dp: [64, 32, 16, 8, 32, 16, 8, 4, 8, 4]
    workload.llm.sequence-parallel: [false, true, true, true, false, true, true, true, true, true]
  grid:
    run.platform-collective: [ring, nccl]
    workload.llm.micro-batches: [4, 8, 12, 16, 24]
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--dask", default=None)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    from astra_sweep import run_sweep

    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "spec.yaml")
        with open(spec, "w") as handle:
            handle.write(SPEC)
        out = args.output or os.path.join(tmp, "results.parquet")
        started = time.perf_counter()
        s = run_sweep(spec, out, jobs=args.jobs, dask=args.dask, progress=sys.stderr.isatty())
        wall = time.perf_counter() - started
    print(f"{s['points']} points ({s['ok']} ok, {s['infeasible']} infeasible, {s['error']} errors) in {wall:.1f} s "
          f"on {args.jobs or os.cpu_count()} jobs: {s['points'] / wall * 60:.1f} points per minute")


if __name__ == "__main__":
    main()
