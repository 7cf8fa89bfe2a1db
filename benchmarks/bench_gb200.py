"""GB200 NVL72 at scale (issue 40): ``astra run --platform gb200-nvl72 --nodes N`` on a GPT-3 175B and a
Llama-3.1 405B training step and a DeepSeek-V3 decode step, at about 1k and 16k GPUs; each must take under a
minute on 2 cores (workload generation timed apart).

* GPT-3 175B: TP 4, PP 8, 12 virtual stages, sequence parallelism, ZeRO-1, FP8 GEMMs, 16 micro-batches; DP 36 on
  16 racks (1,152 GPUs) and DP 504 on 224 racks (16,128 GPUs).
* Llama-3.1 405B: TP 4, PP 8, CP 2, 8 virtual stages, sequence 8,192, FP8, ZeRO-1, full recomputation (so that it
  fits in 192 GB), 16 micro-batches; DP 18 (1,152 GPUs) and DP 252 (16,128 GPUs).
* DeepSeek-V3 decode: attention data-parallel, experts over 64 GPUs (EP 64), 64 sequences of 4,096 tokens per GPU,
  FP8 GEMMs, on ``gb200-nvl72-64`` (64 GPUs of each rack: an expert group is one NVLink domain, as deployments
  place it; on all 72, groups of 64 straddle racks and the ranks differ, so the run cannot fold); 1,024 and 16,384
  GPUs.
* DeepSeek-V3 decode on plain ``gb200-nvl72`` (all 72 GPUs of each rack): EP 8, the largest expert group that
  divides both 72 and the 256 experts, so that groups tile the racks and the ranks fold; attention data-parallel
  as the generator lays it out; the weights as DeepSeek ships them, FP8 E4M3 with an FP32 scale per 128x128 block
  (``--fp8-params``; deepseek-ai/DeepSeek-V3 README_WEIGHTS.md): in bf16, EP 8's 32 experts per layer need
  228 GB per GPU against 192 GB. 1,152 and 16,128 GPUs.

    python benchmarks/bench_gb200.py [small|large|all]
"""

import json
import os
import subprocess
import sys
import tempfile
import time

GPT3 = ["--preset", "gpt3-175b", "--tp", "4", "--pp", "8", "--virtual-stages", "12", "--micro-batches", "16",
        "--micro-batch-size", "1", "--sequence-parallel", "--zero", "1", "--gemm-dtype", "fp8"]
LLAMA405 = ["--model", "llama3.1-405b", "--seq-len", "8192", "--tp", "4", "--pp", "8", "--cp", "2",
            "--virtual-stages", "8", "--pipeline-embedding-layer", "--pipeline-loss-layer", "--micro-batches", "16",
            "--micro-batch-size", "1", "--sequence-parallel", "--gemm-dtype", "fp8", "--zero", "1", "--recompute",
            "full"]
DSV3 = ["--model", "deepseek-v3", "--mode", "decode", "--tp", "1", "--ep", "64", "--batch-size", "64",
        "--prompt-len", "4096", "--decode-len", "1", "--gemm-dtype", "fp8"]
DSV3_EP8 = ["--model", "deepseek-v3", "--mode", "decode", "--tp", "1", "--ep", "8", "--batch-size", "64",
            "--prompt-len", "4096", "--decode-len", "1", "--gemm-dtype", "fp8", "--fp8-params"]
#: name -> (workload flags, DP, platform, nodes)
CASES = {
    "small": [("gpt3-175b", GPT3, 36, "gb200-nvl72", 16), ("llama3.1-405b", LLAMA405, 18, "gb200-nvl72", 16),
              ("deepseek-v3-decode", DSV3, 1024, "gb200-nvl72-64", 16),
              ("deepseek-v3-decode-ep8", DSV3_EP8, 1152, "gb200-nvl72", 16)],
    "large": [("gpt3-175b", GPT3, 504, "gb200-nvl72", 224), ("llama3.1-405b", LLAMA405, 252, "gb200-nvl72", 224),
              ("deepseek-v3-decode", DSV3, 16384, "gb200-nvl72-64", 256),
              ("deepseek-v3-decode-ep8", DSV3_EP8, 16128, "gb200-nvl72", 224)],
}
BUDGET_S = 60.0


def _astra():
    return os.path.join(os.path.dirname(sys.executable), "astra")


def run_case(folder, name, flags, dp, platform, nodes):
    prefix = os.path.join(folder, f"{name}-{nodes}", "w")
    start = time.perf_counter()
    subprocess.run([_astra(), "workload", "llm", *flags, "--dp", str(dp), "-o", prefix], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    generated = time.perf_counter() - start
    report_path = prefix + ".report.json"
    start = time.perf_counter()
    subprocess.run([_astra(), "run", "--workload-configuration", prefix, "--comm-group-configuration",
                    prefix + ".groups.json", "--platform", platform, "--nodes", str(nodes), "-o", report_path, "-q"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    simulated = time.perf_counter() - start
    with open(report_path) as handle:
        report = json.load(handle)
    ok = simulated < BUDGET_S
    print(f"{name} on {report['summary']['npus']:,} GPUs ({platform}, {nodes} racks): step "
          f"{report['summary']['max_finish_ns'] / 1e6:,.1f} ms, {report['stats']['simulated_ranks']} ranks simulated; "
          f"generate {generated:.1f} s, simulate {simulated:.1f} s (budget {BUDGET_S:.0f} s): "
          f"{'OK' if ok else 'TOO SLOW'}", flush=True)
    return ok


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    names = ["small", "large"] if which == "all" else [which]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for size in names:
            for case in CASES[size]:
                ok &= run_case(tmp, *case)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
