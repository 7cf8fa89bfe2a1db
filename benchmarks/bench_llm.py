"""Benchmark: ``astra workload llm`` for GPT-3 175B with TP 8, PP 16, DP 8 (1024 ranks).

Target: under 60 s and under 4 GB peak memory (both printed). Each pipeline stage's graph is built once; every
rank of the stage reuses its encoded nodes and only appends its own pg_name / comm_src / comm_dst.

    python benchmarks/bench_llm.py [--micro-batches M] [--keep DIR]
"""

import argparse
import os
import resource
import shutil
import tempfile
import time

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batches", type=int, default=16)
    ap.add_argument("--keep", metavar="DIR", help="write the traces into DIR and keep them")
    args = ap.parse_args()
    out = args.keep or tempfile.mkdtemp(prefix="bench_llm_")
    cfg = LlmConfig(tp=8, pp=16, dp=8, micro_batches=args.micro_batches, micro_batch_size=1)
    try:
        start = time.perf_counter()
        summary = generate_llm(model_dims("gpt3-175b"), cfg, os.path.join(out, "gpt3"))
        elapsed = time.perf_counter() - start
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"gpt3-175b TP8 PP16 DP8, {cfg.micro_batches} micro-batches: {summary['npus']} ranks, "
          f"nodes per rank {min(summary['nodes_per_stage'])}..{max(summary['nodes_per_stage'])}, "
          f"{size / 2**20:.0f} MiB written")
    print(f"time {elapsed:.2f} s (target < 60 s), peak memory {peak_mb:.0f} MiB (target < 4096 MiB)")
    ok = elapsed < 60 and peak_mb < 4096
    print("OK" if ok else "SLOW")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
