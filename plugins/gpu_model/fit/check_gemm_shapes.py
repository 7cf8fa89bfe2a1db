#!/usr/bin/env python3
"""Print the GEMM model beside published per-shape GEMM measurements at training shapes (check only, nothing fitted).

Run (from the repository root):

    .venv/bin/python plugins/gpu_model/fit/check_gemm_shapes.py

Data: ``astra_gpu_model/data/published_gemm_shapes.csv`` (H100/H800 and B200 rows from float8_experimental, vLLM and
DeepGEMM threads; each row names its source and kernel). For each row it prints the model's TFLOP/s on that row's
preset, as the compute model times one GEMM: E4M3 in and bf16 out for fp8, the preset's tiles and schedule. It
also prints the sustained rate at the preset's TDP: the burst fits (``sustained_gemm``: B200) scaled, the Hopper SXM
fits (``sustained_gemm_cap``) capped for BF16.
``model vs measured`` is model rate / measured rate - 1, so + means the model is faster. Issue 36: the small dense
models' GEMMs at their real shapes.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))  # run from a checkout without installing

from astra_gpu_model.calibration import load_published_gemm_shapes, predict_gemm_s  # noqa: E402
from astra_gpu_model.gpu import load_gpu  # noqa: E402
from astra_gpu_model.power_clock import sustained_gemm_factor  # noqa: E402


def model_tflops(gpu, row):
    """The model's TFLOP/s for one published row on ``gpu`` (a GpuSpec): as fitted, and sustained at the preset's
    TDP (power_clock.sustained_gemm_factor)."""
    out = "bf16" if row["dtype"] == "fp8" else row["dtype"]
    seconds = predict_gemm_s(gpu, [row["m"]], row["n"], row["k"], dtype=row["dtype"], out_dtype=out)[0]
    burst = 2.0 * row["m"] * row["n"] * row["k"] / seconds / 1e12
    return burst, burst * sustained_gemm_factor(gpu, row["dtype"], gpu.tdp_w)


def main():
    rows = load_published_gemm_shapes()
    print("| GPU | dtype | kernel | M x N x K | measured | model | model vs measured | sustained | vs measured | source |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        gpu = load_gpu(row["gpu"])
        burst, sustained = model_tflops(gpu, row)
        meas = row["tflops"]
        print(f"| {row['gpu']} | {row['dtype']} | {row['kernel']} | {row['m']}x{row['n']}x{row['k']} | {meas:,.1f} | "
              f"{burst:,.0f} | {burst / meas - 1:+.1%} | {sustained:,.0f} | {sustained / meas - 1:+.1%} | "
              f"{row['source']} |")


if __name__ == "__main__":
    main()
