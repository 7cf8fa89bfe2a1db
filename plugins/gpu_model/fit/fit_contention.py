"""Fit the measured compute/communication interference (``--gpu-contention-model measured``).

``calibration/nvidia-h200-*/interference.csv``: a kernel timed alone and while a communication-like kernel
runs on another stream (a Triton kernel whose k CTAs stream memory, as NCCL's channels do; k = 2 .. 64), and
with cuBLAS told to leave k SMs free (``torch._C._set_sm_carveout_experimental``, what Transformer Engine's
``sm_margin`` asks for). Per k, the median slowdown of

* compute-bound kernels: three GEMMs (8192³, 4096x20480x5120, 4096x2560x5120 bf16) and FlashAttention forward;
* memory-bound kernels: a 512 MB add and a layer norm;
* GEMMs launched with k SMs carved out (no communication beside them).

Measured on one H200 (132 SMs): the slowdowns are for Hopper; another GPU uses them by the fraction of its SMs
taken (k / SMs).

    .venv/bin/python plugins/gpu_model/fit/fit_contention.py     # writes src/astra_gpu_model/data/contention_fit.json
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "calibration" / "nvidia-h200-2026-11-26" / "interference.csv"
OUT = HERE.parent / "src" / "astra_gpu_model" / "data" / "contention_fit.json"
SM_COUNT = 132
COMPUTE = ("gemm_8192^3_bf16", "gemm_4096x20480x5120_bf16", "gemm_4096x2560x5120_bf16", "flash_attn_fwd_b1h40s2048")
MEMORY = ("add_512MB_bf16", "layer_norm_8192x5120")


def fit(path=DATA):
    rows = [r for r in csv.DictReader(open(path)) if r["status"] == "ok"]
    by = defaultdict(list)
    alone = {}
    for r in rows:
        k = int(r["comm_ctas"])
        if r["comm_kind"] == "stream":
            kind = "compute" if r["victim"] in COMPUTE else "memory" if r["victim"] in MEMORY else None
            if kind:
                by[(kind, k)].append(float(r["slowdown"]))
        elif r["comm_kind"] == "cublas_sm_carveout":
            if k == 0:
                alone[r["victim"]] = float(r["victim_with_comm_us"])
    for r in rows:
        if r["comm_kind"] == "cublas_sm_carveout" and int(r["comm_ctas"]) > 0 and r["victim"] in alone:
            by[("carveout", int(r["comm_ctas"]))].append(float(r["victim_with_comm_us"]) / alone[r["victim"]])
    table = {}
    for (kind, k), values in sorted(by.items()):
        table.setdefault(kind, []).append([round(k / SM_COUNT, 4), round(statistics.median(values), 4)])
    return table


def main():
    table = fit()
    OUT.write_text(json.dumps({
        "generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_contention.py (from the repository root)",
        "data": "calibration/nvidia-h200-2026-11-26/interference.csv",
        "measured_on": f"NVIDIA H200, {SM_COUNT} SMs",
        "slowdown_by_fraction_of_sms_taken": table,
    }, indent=1) + "\n")
    for kind, points in table.items():
        print(kind, " ".join(f"{f:.3f}:x{s:.2f}" for f, s in points))


if __name__ == "__main__":
    main()
