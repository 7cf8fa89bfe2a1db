#!/usr/bin/env python3
"""Print each preset's sustained GEMM factor and what it rests on (issue 36; nothing is fitted or written).

Run (from the repository root):

    .venv/bin/python plugins/gpu_model/fit/check_sustained_gemm.py

Data: ``astra_gpu_model.power_clock.SUSTAINED_GEMM``, stas00/ml-engineering's MAMF (boost-validated burst) and MSMF
(soaked, power-saturated) rows with their power, clock and MSMF shape (branch ``fast-mamf``, commit 082816f,
``compute/accelerator/README.md``). For a burst-fitted preset (``sustained_gemm``) the factor is MSMF / MAMF moved to
the board's limit by the DVFS law; for a per-layer fit (``sustained_gemm_cap``) it is the sustained rate at the
board's limit over the model's own rate, at each measured shape (MSMF's and the H200 runs of
``calibration/nvidia-h200-2026-11-30``), the median of those, at most 1; the table's model and sustained columns
are MSMF's shape's. Presets with neither print nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))  # run from a checkout without installing

from astra_gpu_model.gpu import load_gpu, preset_names  # noqa: E402
from astra_gpu_model.power_clock import SUSTAINED_GEMM, model_tflops_at_shape, sustained_gemm_factor  # noqa: E402


def rows():
    """``(preset, rule, class, model at MSMF's shape, sustained at the limit, burst, limit W, factor)`` per class."""
    out = []
    for name in preset_names():
        gpu = load_gpu(name)
        silicon = gpu.sustained_gemm or gpu.sustained_gemm_cap
        if silicon is None:
            continue
        rule = "burst x MSMF/MAMF" if gpu.sustained_gemm else "cap, median of measured shapes"
        for (measured, gemm_class), point in SUSTAINED_GEMM.items():
            if measured != silicon or gemm_class not in gpu.tensor_tflops:
                continue
            model = model_tflops_at_shape(gpu, gemm_class, point.shape)
            out.append((name, rule, gemm_class, model, point.sustained_tflops_at(gpu.tdp_w), point.burst_tflops,
                        gpu.tdp_w, sustained_gemm_factor(gpu, gemm_class, gpu.tdp_w)))
    return out


def main():
    print("| preset | rule | class | model at MSMF's shape | sustained at the limit | burst | limit (W) | factor |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rule, gemm_class, model, sustained, burst, limit, factor in rows():
        print(f"| {name} | {rule} | {gemm_class} | {model:,.1f} | {sustained:,.1f} | {burst:,.1f} | {limit:g} | "
              f"{factor:.4f} |")


if __name__ == "__main__":
    main()
