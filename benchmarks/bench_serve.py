"""Benchmark: astra serve, 10,000 requests at 20 QPS on one 8-GPU TP8 replica of Llama-3 70B (hgx-h100,
prompts lognormal mean 512, outputs lognormal mean 128), in one process from a cold start (every batch shape
simulated here). The target is under 60 s on the project's 2-core machine.

    python benchmarks/bench_serve.py [--requests N] [--qps Q] [--model NAME]
"""

import argparse
import json
import os
import sys
import tempfile
import time

from astra_sim.cli import main


def run(requests, qps, model):
    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "serve.json")
        started, cpu = time.perf_counter(), time.process_time()
        code = main(["serve", "--model", model, "--platform", "hgx-h100", "--tp", "8", "--qps", str(qps),
                     "--requests", str(requests), "--prompt-len", "lognormal:512:1.0", "--output-len",
                     "lognormal:128:1.0", "--seed", "1", "-o", report, "-q"])
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        if code:
            sys.exit(code)
        with open(report) as handle:
            return wall, cpu, json.load(handle)


def main_():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--qps", type=float, default=20.0)
    parser.add_argument("--model", default="llama3-70b")
    args = parser.parse_args()
    wall, cpu, r = run(args.requests, args.qps, args.model)
    s = r["step_simulator"]
    print(f"{args.requests} requests at {args.qps:g} QPS, {args.model} TP8 on hgx-h100: {wall:.1f} s wall, "
          f"{cpu:.1f} s CPU "
          f"({s['shapes_simulated']} shapes simulated in {s['simulation_wall_s']:.1f} s for {s['lookups']} "
          f"iterations); simulated {r['duration_ns'] / 1e9:.0f} s, {r['throughput_tokens_per_s']:.0f} output tok/s, "
          f"TTFT p50 {r['ttft_ns']['p50'] / 1e6:.1f} ms, TPOT p50 {r['tpot_ns']['p50'] / 1e6:.1f} ms")
    print("PASS" if wall < 60 else "FAIL", "(target: < 60 s)")
    return 0 if wall < 60 else 1


if __name__ == "__main__":
    sys.exit(main_())
