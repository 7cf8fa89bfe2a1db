"""Measurement: astra serve against vLLM v0.6.0 serving Llama 3.1 70B on 4 x H100 (SGLang's reproduction,
sgl-project/sglang benchmark/benchmark_vllm_060/README.md), one engine cause at a time. It runs the three
deployments of the five `astra validate` serving cases (RPS 4 with 1200 prompts, RPS 8 with 2400, 5000 prompts
at once) under each step of docs/serving.md's fidelity table and prints median TPOT, TTFT and E2E and output
throughput with their errors. Minutes per step on 2 cores. The steps before "spread" ran with the defaults of
their time; with today's defaults (element-wise kernels in every step, 42 us host time per sequence) "separate"
is the fidelity table's "host time re-derived" row and "spread" the cases now.

    python benchmarks/serve_fidelity.py [--only STEP] [--jobs N]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

MEASURED = {"rps4": {"tpot": 23.58, "ttft": 179.15, "e2e": 2915.60}, "rps8": {"tpot": 29.15, "ttft": 207.12,
                                                                           "e2e": 3752.38},
            "offline": {"throughput": 3700.64}}
RUNS = {"rps4": ["--qps", "4", "--requests", "1200"], "rps8": ["--qps", "8", "--requests", "2400"],
        "offline": ["--qps", "1000000", "--requests", "5000"]}
BASE = ["--model", "llama3-70b", "--platform", "hgx-h100", "--tp", "4", "--max-model-len", "4096",
        "--no-chunked-prefill", "--max-num-batched-tokens", "4096", "--num-scheduler-steps", "10", "--seed", "1"]
OLD_LENGTHS = ["--prompt-len", "lognormal:240:1.0", "--output-len", "lognormal:194:1.0"]
SHAREGPT = ["--prompt-len", "lognormal:228:1.0", "--output-len", "lognormal:196:1.0", "--prune", "4:1024:2048"]
#: outputs with the spread the page's own medians imply (docs/serving.md: median output 119, CV 1.4)
SHAREGPT_SPREAD = ["--prompt-len", "lognormal:228:1.0", "--output-len", "lognormal:207:1.4", "--prune", "4:1024:2048"]
STEPS = {
    "before": OLD_LENGTHS + ["--host-us-per-seq", "0", "--cuda-graphs", "off"],
    "host": OLD_LENGTHS + ["--cuda-graphs", "off"],
    "graphs": OLD_LENGTHS,
    "sharegpt": SHAREGPT,
    "separate": SHAREGPT + ["--separate-prefills"],
    "spread": SHAREGPT_SPREAD + ["--separate-prefills"],
}


def one(step, run):
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "r.json")
        subprocess.run([sys.executable, "-m", "astra_sim.cli", "serve", *BASE, *RUNS[run], *STEPS[step],
                        "-o", out, "-q"], check=True)
        with open(out) as handle:
            r = json.load(handle)
    # the report keeps integer ns; the table shows ms
    return {"tpot": r["tpot_ns"]["p50"] / 1e6, "ttft": r["ttft_ns"]["p50"] / 1e6, "e2e": r["e2e_ns"]["p50"] / 1e6,
            "throughput": r["throughput_tokens_per_s"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", action="append", choices=sorted(STEPS))
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    steps = args.only or list(STEPS)
    jobs = [(s, r) for s in steps for r in RUNS]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = dict(zip(jobs, pool.map(lambda job: one(*job), jobs)))
    for step in steps:
        cells = []
        for run, metrics in MEASURED.items():
            for metric, measured in metrics.items():
                value = results[(step, run)][metric]
                cells.append(f"{run} {metric} {value:.1f} ({(value / measured - 1) * 100:+.1f} %)")
        print(f"{step}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
