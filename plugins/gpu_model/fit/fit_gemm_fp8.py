#!/usr/bin/env python3
"""Fit ``fp8_gemm_scale`` of the ``h100`` family on measured FP8 GEMMs, in the checked-in GEMM fit.

Regenerate (from the repository root; ``fit_gemm.py`` also runs this step after it rewrites the file):

    .venv/bin/python plugins/gpu_model/fit/fit_gemm_fp8.py

Why: the GEMM parameters are fitted on fp16/bf16 GEMMs; an FP8 GEMM was timed with the same efficiency against
the doubled FP8 peak, which is optimistic. Data: DeepGEMM's published FP8 table on H800 SXM5
(``astra_gpu_model/data/deepgemm_measured_fp8_gemm_h800.csv``; same SMs, clocks and FP8 peak as H100 SXM5).
Method: one scalar ``s`` (FP8 compute efficiency = ``s x compute_efficiency``) minimising the mean of
``|log(predicted / measured)|`` over the table's compute-bound rows (``m >= FP8_FIT_MIN_M``: the regime of
training GEMMs; its decode rows with m = 64 / 128 are launch- and memory-bound and ``s`` barely moves them), by
golden-section search on [0.3, 1.5]. Every other parameter stays as fitted on fp16. The error on every row, before
and after, is printed and stored beside the value.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))  # run from a checkout without installing

from astra_gpu_model.calibration import (  # noqa: E402
    DEEPGEMM_FP8_GEMM, FP8_FIT_MIN_M, error_stats, load_deepgemm_fp8, predict_gemm_s,
)
from astra_gpu_model.gpu import load_gpu  # noqa: E402

FAMILY, PRESET = "h100", "H100-SXM5-80GB"
DEFAULT_FIT = HERE.parents[1] / "src" / "astra_gpu_model" / "data" / "gemm_fit.json"


def _predict(gpu, d, scale):
    """Model times of the table's GEMMs on ``gpu`` with ``fp8_gemm_scale = scale`` (E4M3 in, bf16 out)."""
    return predict_gemm_s(replace(gpu, fp8_gemm_scale=scale), d["m"], d["n"], d["k"], dtype="fp8", out_dtype="bf16")


def fit_fp8_scale(families, data=None, verbose=True):
    """Add ``fp8_gemm_scale`` and its ``fp8_fit`` record to ``families[FAMILY]`` (the fit JSON's families)."""
    d = data or load_deepgemm_fp8()
    gpu = load_gpu(PRESET, fit={f: {"params": v["params"]} for f, v in families.items()})
    measured = np.array(d["time_s"])
    fit_rows = np.array(d["m"]) >= FP8_FIT_MIN_M

    def loss(scale):
        return float(np.mean(np.abs(np.log(_predict(gpu, d, scale)[fit_rows] / measured[fit_rows]))))

    lo, hi = 0.3, 1.5
    g = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(a) < loss(b):
            hi = b
        else:
            lo = a
    scale = round((lo + hi) / 2, 4)
    before, after = _predict(gpu, d, 1.0), _predict(gpu, d, scale)
    rnd = lambda stats: {k: round(v, 6) if isinstance(v, float) else v for k, v in stats.items()}  # noqa: E731
    families[FAMILY]["fp8_gemm_scale"] = scale
    families[FAMILY]["fp8_fit"] = {
        "generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_gemm_fp8.py (from the repository root)",
        "data": DEEPGEMM_FP8_GEMM,
        "fitted_rows": f"m >= {FP8_FIT_MIN_M}",
        "objective": "mean |log(predicted / measured)| over the fitted rows",
        "loss_before": round(loss(1.0), 6), "loss_after": round(loss(scale), 6),
        "error_fitted_rows_before": rnd(error_stats(before[fit_rows], measured[fit_rows])),
        "error_fitted_rows_after": rnd(error_stats(after[fit_rows], measured[fit_rows])),
        "error_all_rows_after": rnd(error_stats(after, measured)),
    }
    if verbose:
        print(f"fp8_gemm_scale ({FAMILY}) = {scale} (fitted on {int(fit_rows.sum())} rows with m >= {FP8_FIT_MIN_M})")
        print("| m | n | k | measured TFLOP/s | model, scale 1.0 | error | model, fitted | error |")
        print("|---|---|---|---|---|---|---|---|")
        for i in range(len(measured)):
            flops = 2.0 * d["m"][i] * d["n"][i] * d["k"][i]
            print(f"| {d['m'][i]} | {d['n'][i]} | {d['k'][i]} | {flops / measured[i] / 1e12:.0f} | "
                  f"{flops / before[i] / 1e12:.0f} | {100 * (before[i] / measured[i] - 1):+.0f}% | "
                  f"{flops / after[i] / 1e12:.0f} | {100 * (after[i] / measured[i] - 1):+.0f}% |")
    return scale


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", default=str(DEFAULT_FIT), help="the GEMM fit JSON to update in place")
    args = ap.parse_args(argv)
    path = Path(args.fit)
    fit = json.loads(path.read_text())
    fit_fp8_scale(fit["families"])
    path.write_text(json.dumps(fit, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
