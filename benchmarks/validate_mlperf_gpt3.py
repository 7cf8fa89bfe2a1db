"""Compare simulated step times with MLPerf Training v3.1 GPT-3 175B measurements (issue 6).

Measured numbers: NVIDIA's closed-division submissions to MLPerf Training v3.1 (github.com/mlcommons/
training_results_v3.1, ``NVIDIA/results/eos_n64_ngc23.09_nemo/gpt3/result_{0,1,2}.txt`` and ``eos_n96_...``).
Their MLLOG lines log ``train_step_timing`` (seconds per optimizer step) for every step; the medians over the
three runs' 288 / 200 steps are used. The configuration is the submission's own
(``NVIDIA/benchmarks/gpt3/implementations/pytorch``: ``config_DGXH100_*x4x8_mbs1.sh``, ``config_common.sh``,
``config_fp8.sh``, ``conf/custom.yaml``) and the log's ``global_batch_size`` / ``gradient_accumulation_steps``:
GPT-3 175B (96 layers, h 12288, 96 heads, s 2048), DGX H100 nodes (8 x H100-SXM5-80GB, NVLink 4,
8 x 400 Gb/s NDR per node), TP 4, PP 8, interleaved with 12 virtual stages, sequence parallelism, micro-batch 1,
128 micro-batches per step, distributed optimizer (ZeRO-1) with overlapped gradient reduce-scatter and parameter
all-gather, Transformer Engine FP8 (hybrid) GEMMs, TP communication overlap (userbuffers), hidden and attention
dropout 0, no activation recomputation, bf16 otherwise.

Simulated as ``astra workload llm ... --gemm-dtype fp8 --no-dropout --tp-comm-overlap --overlap-param-gather``
on ``astra run --platform hgx-h100 --compute-model gpu``. Nothing is fitted to these numbers.

Reduction (the full 512-rank x 128-micro-batch trace is ~90 M nodes, beyond this machine's memory): the step is
split into the per-pipeline part, which does not depend on DP, and the DP part. The DP part has a piece that
does not depend on the number of micro-batches (gradient reduce-scatter at the end of the step, parameter
all-gather at its start) and one that grows with it (the FP8 amax all-reduce after every chunk's forward and
backward spans TP x DP ranks: 4 at DP 1, 64 at DP 16). With D(M) = T(DP, M) - T(DP=1, M) measured at M = 8 and 16:

    T(DP, M=128) = T(DP=1, M=128) + D(16) + (128 - 16) * [D(16) - D(8)] / 8

T(DP=1, M=128) is simulated in full (32 ranks, about 3 min and 5 GB). It is linear in M, as the interleaved 1F1B
steady state adds one slot per micro-batch: before the FP8 bookkeeping was in the trace, M = 16, 32, 64, 128 gave
1.1236, 2.1490, 4.1999 and 8.3015 s, each within 0.01 ms of the line through the first two; now M = 8, 16, 128 give
0.6851, 1.2669 and 9.4125 s (nccl), M = 128 within 0.3 ms of the line through the other two. Results and their
history: docs/validation-llm.md.

``--gpu-contention`` also charges the SMs and HBM bandwidth the communication kernels take from the compute
kernels beside them (the gpu model's ``--gpu-contention``), with the submission's own SM budgets written into the
trace (``astra workload llm --comm-sms`` / ``--tp-overlap-config``): ``config_common.sh`` caps the NCCL
communicators' CTAs (``MEGATRON_CORE_DP_MAX_CTAS=8``, ``TP_MAX_CTAS=8``, ``P2P_MAX_CTAS=2``, ``AMAX_MAX_CTAS=1``),
and ``conf/tp_overlap/h100tp4pp8mbs1.yaml`` sets Transformer Engine's userbuffers overlaps (the all-gather rings
``ring_exchange`` on the copy engines; the forward reduce-scatters ``pipeline`` with 24 SMs for the projection and
4 for FC2, both with ``set_sm_margin``, so their GEMM chunks run on the other SMs throughout; the backward ``bulk``
overlaps 2 to 8 SMs). ``TP_OVERLAP_CONFIG`` below restates those numbers.

Usage:  python benchmarks/validate_mlperf_gpt3.py [--only NAME ...] [--json OUT.json] [--platform-collective nccl]
                                                  [--gpu-contention]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from astra_sim.report import read_report

GPUS_PER_NODE = 8
LLM_FLAGS = ["--preset", "gpt3-175b", "--tp", "4", "--pp", "8", "--virtual-stages", "12", "--micro-batch-size", "1",
             "--sequence-parallel", "--zero", "1", "--overlap-param-gather", "--tp-comm-overlap",
             "--gemm-dtype", "fp8", "--no-dropout", "--dtype", "bf16"]
#: --gpu-contention: the NCCL communicators' CTA caps of the submission (config_common.sh, MEGATRON_CORE_*_MAX_CTAS)
SUBMISSION_COMM_SMS = "tp=8,dp=8,pp=2,amax=1"
#: --gpu-contention: the submission's Transformer Engine userbuffers settings (conf/tp_overlap/h100tp4pp8mbs1.yaml),
#: in TE's own YAML layout (layer name -> method, num_sm); written out for --tp-overlap-config
TP_OVERLAP_CONFIG = {
    "qkv_dgrad": {"method": "bulk", "num_sm": 4}, "qkv_wgrad": {"method": "bulk", "num_sm": 8},
    "fc1_dgrad": {"method": "bulk", "num_sm": 2}, "fc1_wgrad": {"method": "bulk", "num_sm": 4},
    "qkv_fprop": {"method": "ring_exchange"}, "proj_dgrad": {"method": "ring_exchange"},
    "fc1_fprop": {"method": "ring_exchange"}, "fc2_dgrad": {"method": "ring_exchange"},
    "proj_fprop": {"method": "pipeline", "num_sm": 24, "set_sm_margin": 1},
    "fc2_fprop": {"method": "pipeline", "num_sm": 4, "set_sm_margin": 1},
}
MICRO_BATCHES = 128  # gradient_accumulation_steps in both logs
SHORT_MS = (8, 16)   # micro-batches of the DP runs (multiples of PP, as the interleaved schedule needs)


@dataclass
class Row:
    name: str
    source: str
    gpus: int
    global_batch: int
    measured_step_s: float  # median train_step_timing over the submission's three runs

    @property
    def dp(self) -> int:
        return self.gpus // 32


ROWS = [
    Row("mlperf-v3.1-gpt3-512", "NVIDIA eos_n64_ngc23.09_nemo", 512, 2048, 11.05),
    # its DP=24, M=16 run (768 ranks) takes 13 minutes with --platform-collective nccl and peaks at 18.9 GB: not
    # run by default
    Row("mlperf-v3.1-gpt3-768", "NVIDIA eos_n96_ngc23.09_nemo", 768, 3072, 11.075),
]
DEFAULT_ROWS = ("mlperf-v3.1-gpt3-512",)


def _exe(name: str) -> str:
    cand = os.path.join(os.path.dirname(sys.executable), name)
    return cand if os.path.exists(cand) else name


def contention_flags(workdir: str) -> tuple[list, list]:
    """(generator flags, run flags) that charge SM/HBM contention with the submission's SM budgets."""
    path = os.path.join(workdir, "tp_overlap.yaml")
    with open(path, "w") as f:
        json.dump(TP_OVERLAP_CONFIG, f, indent=1)  # JSON is YAML
    return (["--comm-sms", SUBMISSION_COMM_SMS, "--tp-overlap-config", path], ["--gpu-contention"])


def simulate(dp: int, micro_batches: int, workdir: str, collective: str = "ring", contention=None) -> dict:
    """One run; ``contention``: :func:`contention_flags`' (generator flags, run flags), or None."""
    gen_flags, run_flags = contention or ([], [])
    prefix = os.path.join(workdir, f"dp{dp}.m{micro_batches}", "w")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    report = prefix + ".report.json"
    subprocess.run([_exe("astra"), "workload", "llm", *LLM_FLAGS, *gen_flags, "--dp", str(dp), "--micro-batches",
                    str(micro_batches), "-o", prefix], check=True, stdout=subprocess.DEVNULL)
    t0 = time.time()
    nodes = max(1, dp * 32 // GPUS_PER_NODE)
    subprocess.run([_exe("astra"), "run", "--platform", "hgx-h100", "--nodes", str(nodes), "--compute-model", "gpu",
                    "--gpu", "H100-SXM5-80GB", "--platform-collective", collective,
                    "--workload-configuration", prefix, "--comm-group-configuration", prefix + ".groups.json",
                    "--report-json", report, "-q",
                    # a reduced DP (the time of a step does not depend on it beyond the DP collectives) does not
                    # shard the distributed optimizer as the real DP does: its memory is not the submission's
                    *(["--allow-oom"] if dp < 16 else []), *run_flags],
                   check=True, stdout=subprocess.DEVNULL)
    r = read_report(report)  # astra run writes the compact layout by default; this gives every rank
    shutil.rmtree(os.path.dirname(prefix), ignore_errors=True)
    ranks = r["ranks"]
    return {"dp": dp, "micro_batches": micro_batches, "step_s": r["summary"]["max_finish_ns"] * 1e-9,
            "max_compute_s": max(x["compute_ns"] for x in ranks) * 1e-9,
            "max_exposed_comm_s": r["summary"]["max_exposed_comm_ns"] * 1e-9, "wall_s": time.time() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help=f"row names (default: {', '.join(DEFAULT_ROWS)}; known: "
                    f"{', '.join(r.name for r in ROWS)})")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--platform-collective", choices=("ring", "nccl"), default="ring",
                    help="collective timing: ring (the reference's algorithms, default) or nccl (NCCL's own "
                    "algorithm/protocol choice and calibrated times; tiny all-reduces take tens of µs)")
    ap.add_argument("--gpu-contention", action="store_true",
                    help="charge the SMs and HBM bandwidth communication takes from compute, with the submission's "
                    "SM budgets (NCCL CTA caps, Transformer Engine userbuffers settings)")
    a = ap.parse_args(argv)
    coll = a.platform_collective
    rows = [r for r in ROWS if r.name in (a.only or DEFAULT_ROWS)]
    workdir = tempfile.mkdtemp(prefix="astra-mlperf-")
    out = []
    try:
        cont = contention_flags(workdir) if a.gpu_contention else None
        base = {m: simulate(1, m, workdir, coll, cont) for m in SHORT_MS}
        base_full = simulate(1, MICRO_BATCHES, workdir, coll, cont)
        steps = {**{m: r["step_s"] for m, r in base.items()}, MICRO_BATCHES: base_full["step_s"]}
        print("# DP=1: " + ", ".join(f"M={m} {t:.4f} s" for m, t in steps.items()), file=sys.stderr, flush=True)
        for row in rows:
            assert row.global_batch == row.dp * MICRO_BATCHES, row
            short = {m: simulate(row.dp, m, workdir, coll, cont) for m in SHORT_MS}
            diff = {m: short[m]["step_s"] - base[m]["step_s"] for m in SHORT_MS}
            (m1, m2) = SHORT_MS
            per_mb = (diff[m2] - diff[m1]) / (m2 - m1)  # FP8 amax all-reduces over TP x DP ranks
            fixed = diff[m2] - m2 * per_mb  # gradient reduce-scatters, parameter all-gathers
            dp_cost = fixed + MICRO_BATCHES * per_mb
            step = base_full["step_s"] + dp_cost
            out.append({"name": row.name, "source": row.source, "gpus": row.gpus, "dp": row.dp, "collective": coll,
                        "gpu_contention": a.gpu_contention,
                        "global_batch": row.global_batch, "measured_step_s": row.measured_step_s,
                        "sim_step_s": step, "dp_cost_s": dp_cost, "dp_fixed_s": fixed,
                        "dp_per_micro_batch_s": per_mb,
                        "err_pct": 100.0 * (step - row.measured_step_s) / row.measured_step_s,
                        "runs": [*base.values(), base_full, *short.values()]})
            print(f"# {row.name}: done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("| row | source | GPUs | TPxPPxDP (VP) | GBS | M | measured s/step | simulated s/step | DP part (s) "
          "| error % |")
    print("|" + "---|" * 10)
    for r in out:
        print(f"| {r['name']} | {r['source']} | {r['gpus']} | 4x8x{r['dp']} (12) | {r['global_batch']} "
              f"| {MICRO_BATCHES} | {r['measured_step_s']:.3f} | {r['sim_step_s']:.3f} | {r['dp_cost_s']:.3f} "
              f"| {r['err_pct']:+.1f} |")
    if out:
        print(f"\nDP=1 pipeline: M={MICRO_BATCHES} step {base_full['step_s']:.3f} s (compute "
              f"{base_full['max_compute_s']:.3f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
