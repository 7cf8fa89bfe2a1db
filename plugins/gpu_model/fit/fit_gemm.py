#!/usr/bin/env python3
"""Fit the GEMM model's efficiency parameters on measured GEMM times, per GPU family.

Regenerate the checked-in fit (from the repository root):

    .venv/bin/python plugins/gpu_model/fit/fit_gemm.py \
        --data ../shared/calibration/vidur_measured_gemm_a100_h100.csv \
        --holdout ../shared/calibration/llmcompass_measured_gemm_a100_fp16_sweep.csv \
        --out plugins/gpu_model/src/astra_gpu_model/data/gemm_fit.json

(``--data``/``--holdout`` default to ``shared/calibration`` found beside the repository or via
$ASTRA_SHARED_DIR). It prints the error tables that README.md shows.

Method: for each device of the fitting file (``a100``, ``h100``) the six parameters of
:class:`astra_gpu_model.gemm.GemmParams` are fitted by minimising the mean of ``|log(predicted/measured)|``
over every row (each measurement counts once; repeated shapes weigh more), with a hand-written
Nelder-Mead simplex (numpy only) over transformed parameters (logit for fractions, log for positive
values), restarted from the best point until it stops improving. The hardware numbers (SMs, dense fp16 peak,
HBM bandwidth) come from the presets A100-SXM4-80GB and H100-SXM5-80GB. The hold-out file is never used in
the fit; its errors are only reported. Then ``fit_gemm_fp8.py``'s step fits the h100 family's FP8 efficiency scale.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))  # run from a checkout without installing

from astra_gpu_model.calibration import (  # noqa: E402
    DEVICE_PRESETS, LLMCOMPASS_GEMM, VIDUR_GEMM, error_stats, find_calibration_dir, load_llmcompass_gemm,
    load_vidur_gemm,
)
from astra_gpu_model.gemm import GemmParams, gemm_time_s_np  # noqa: E402
from astra_gpu_model.gpu import load_gpu  # noqa: E402
from fit_gemm_fp8 import fit_fp8_scale  # noqa: E402

NAMES = ("compute_efficiency", "tile_penalty", "k_overhead", "hbm_efficiency", "launch_us", "overlap_exponent")
START = np.array([0.8, 64.0, 128.0, 0.85, 4.0, 3.0])
#: The attention efficiencies are not fitted (no measured attention data): stored beside the fit so that a
#: YAML description choosing a calibration family gets a value; presets override them with sourced values.
ATTENTION_DEFAULT = {"a100": 0.6, "h100": 0.45}
PLACEHOLDER = {f: {"params": dict(zip(NAMES, START))} for f in DEVICE_PRESETS}


def to_theta(x):
    eta, c, k0, hbm, t0, p = x
    return np.array([np.log(eta / (1 - eta)), np.log(c), np.log(k0), np.log(hbm / (1 - hbm)), np.log(t0),
                     np.log(p - 1)])


def from_theta(th):
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    return np.array([sig(th[0]), np.exp(th[1]), np.exp(th[2]), sig(th[3]), np.exp(th[4]), 1 + np.exp(th[5])])


def nelder_mead(f, x0, step=0.3, iters=600, tol=1e-7):
    n = len(x0)
    pts = [np.array(x0, dtype=float)]
    for i in range(n):
        x = np.array(x0, dtype=float)
        x[i] += step
        pts.append(x)
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        centroid = np.mean(pts[:-1], axis=0)
        xr = centroid + (centroid - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2 * (centroid - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (pts[-1] - centroid)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, len(pts)):
                    pts[i] = pts[0] + 0.5 * (pts[i] - pts[0])
                    vals[i] = f(pts[i])
    best = int(np.argmin(vals))
    return pts[best], vals[best]


def fit_device(gpu, m, n, k, measured, counts):
    peak = gpu.peak_flops("fp16")

    def predict(x):
        params = GemmParams(*[float(v) for v in x])
        return gemm_time_s_np(m, n, k, np.ones_like(m), peak_flops=peak, sm_count=gpu.sm_count,
                              hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=2, out_bytes=2, params=params,
                              tiles=gpu.gemm_tiles)

    total = counts.sum()

    def loss(th):
        x = from_theta(th)
        return float(np.sum(counts * np.abs(np.log(predict(x) / measured))) / total)

    th = to_theta(START)
    best = loss(th)
    for _ in range(8):
        th_new, val = nelder_mead(loss, th)
        if val > best - 1e-6:
            th, best = (th_new, val) if val < best else (th, best)
            break
        th, best = th_new, val
    x = from_theta(th)
    return GemmParams(*[float(round(v, 6)) for v in x]), best


def unique_shapes(d):
    m = np.array(d["m"], dtype=np.float64)
    n = np.array(d["n"], dtype=np.float64)
    k = np.array(d["k"], dtype=np.float64)
    t = np.array(d["time_s"], dtype=np.float64)
    key = np.stack([m, n, k, t])
    uniq, counts = np.unique(key, axis=1, return_counts=True)
    return uniq[0], uniq[1], uniq[2], uniq[3], counts.astype(np.float64)


def table_rows(stats):
    return (f"| {stats['n']} | {100 * stats['median_abs']:.1f}% | {100 * stats['mean_abs']:.1f}% | "
            f"{100 * stats['p90_abs']:.1f}% | {100 * stats['max_abs']:.1f}% | {100 * stats['median_signed']:+.1f}% | "
            f"{100 * stats['within_10pct']:.0f}% |")


def main(argv=None):
    cal = find_calibration_dir(HERE)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(cal / VIDUR_GEMM) if cal else None)
    ap.add_argument("--holdout", default=str(cal / LLMCOMPASS_GEMM) if cal else None)
    ap.add_argument("--out", default=str(HERE.parents[1] / "src" / "astra_gpu_model" / "data" / "gemm_fit.json"))
    args = ap.parse_args(argv)
    if not args.data:
        ap.error("--data is required (shared/calibration not found)")

    started = time.time()
    data = load_vidur_gemm(args.data)
    families = {}
    print("| device | rows | median abs err | mean | p90 | max | median signed | rows within 10% |")
    print("|---|---|---|---|---|---|---|---|")
    for device in sorted(data):
        preset = DEVICE_PRESETS[device]
        gpu = load_gpu(preset, fit=PLACEHOLDER)
        m, n, k, t, counts = unique_shapes(data[device])
        params, loss = fit_device(gpu, m, n, k, t, counts)
        gpu.gemm = params
        d = data[device]
        pred = gemm_time_s_np(np.array(d["m"], float), np.array(d["n"], float), np.array(d["k"], float),
                              np.ones(len(d["m"])), peak_flops=gpu.peak_flops("fp16"), sm_count=gpu.sm_count,
                              hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=2, out_bytes=2, params=params,
                              tiles=gpu.gemm_tiles)
        stats = error_stats(pred, d["time_s"])
        families[device] = {
            "preset": preset,
            "params": params.to_dict(),
            "attention_efficiency": ATTENTION_DEFAULT[device],
            "fit_loss_mean_abs_log": round(loss, 6),
            "error_on_fitting_data": {k2: round(v, 6) if isinstance(v, float) else v for k2, v in stats.items()},
        }
        print(f"| {device} ({preset}) " + table_rows(stats))

    holdout = None
    if args.holdout and Path(args.holdout).exists():
        h = load_llmcompass_gemm(args.holdout)
        gpu = load_gpu("A100-SXM4-80GB", fit={f: {"params": v["params"]} for f, v in families.items()})
        pred = gemm_time_s_np(np.array(h["m"], float), np.array(h["n"], float), np.array(h["k"], float),
                              np.ones(len(h["m"])), peak_flops=gpu.peak_flops("fp16"), sm_count=gpu.sm_count,
                              hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=2, out_bytes=2, params=gpu.gemm,
                              tiles=gpu.gemm_tiles)
        holdout = {"file": Path(args.holdout).name, "error": error_stats(pred, h["time_s"])}
        print(f"\nhold-out {Path(args.holdout).name} (A100, never fitted):")
        print("| M | N | K | measured ms | model ms | error |")
        print("|---|---|---|---|---|---|")
        for i in range(len(h["m"])):
            err = (pred[i] - h["time_s"][i]) / h["time_s"][i]
            print(f"| {h['m'][i]} | {h['n'][i]} | {h['k'][i]} | {h['time_s'][i] * 1e3:.4f} | "
                  f"{pred[i] * 1e3:.4f} | {100 * err:+.1f}% |")
        print("| all " + table_rows(holdout["error"]))
        big = np.array(h["time_s"]) >= 100e-6
        holdout["error_measured_ge_100us"] = error_stats(pred[big], np.array(h["time_s"])[big])
        print("| >= 100 us " + table_rows(holdout["error_measured_ge_100us"]))
        # the same shapes measured in both A100 data sets
        v = data.get("a100")
        if v is not None:
            times = {}
            for m_, n_, k_, t_ in zip(v["m"], v["n"], v["k"], v["time_s"]):
                times.setdefault((m_, n_, k_), []).append(t_)
            shared = []
            for m_, n_, k_, t_ in zip(h["m"], h["n"], h["k"], h["time_s"]):
                if (m_, n_, k_) in times:
                    shared.append({"m": m_, "n": n_, "k": k_, "vidur_ms": float(np.median(times[(m_, n_, k_)])) * 1e3,
                                   "llmcompass_ms": t_ * 1e3})
                    print(f"same shape {m_}x{n_}x{k_}: Vidur {shared[-1]['vidur_ms']:.4f} ms, "
                          f"LLMCompass {t_ * 1e3:.4f} ms (ratio {shared[-1]['vidur_ms'] / (t_ * 1e3):.3f})")
            holdout["shapes_in_both_a100_sets"] = shared

    out = {
        "generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_gemm.py  (from the repository root; reads "
                        "shared/calibration/" + VIDUR_GEMM + ", writes this file)",
        "fitting_data": Path(args.data).name,
        "objective": "mean |log(predicted / measured)| over all rows",
        "model": "astra_gpu_model.gemm (tiles, waves, split-K, tile-size and K-overhead efficiency, HBM roofline)",
        "families": families,
        "holdout": holdout,
    }
    print()
    fit_fp8_scale(families)  # the FP8 stage rests on the h100 parameters just fitted
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {args.out} in {time.time() - started:.1f} s")
    for device, fam in families.items():
        print(device, json.dumps(fam["params"]))


if __name__ == "__main__":
    main()
