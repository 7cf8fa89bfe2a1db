"""Fit the grouped-GEMM kernel's stream rate and per-group overhead on the measured H200 grouped GEMMs.

``calibration/nvidia-h200-2026-11-26/gemm_extra.csv``, rows ``set=grouped``: ``torch._grouped_mm`` (bf16,
torch 2.11 / CUDA 13.0, CUDA-graph medians, made by ``fit/measure_gpu.py``) of E experts with m tokens each,
``[E*m, k] x [E, k, n]``, for MoE expert shapes of Mixtral, Qwen1.5/Qwen2-MoE, Qwen3-MoE and DeepSeek-V3.

The dense GEMM parameters stay those of the H200's family fit (``gemm_fit.json``, family h100); the two
parameters of :mod:`astra_gpu_model.grouped` are fitted here by a grid search (coarse, then fine) minimising
the mean ``|log(predicted / measured)|`` over the rows:

* ``stream_bytes_per_s``: the HBM bytes/s a grouped kernel sustains (its small-m rows read 0.4-7.5 GB of expert
  weights at 2.5-3.3 TB/s, where a dense GEMM of one row reaches 4.0 TB/s on the same GPU, ``gemm.csv``);
* ``group_us``: the cost per group.

    .venv/bin/python plugins/gpu_model/fit/fit_grouped_gemm.py [--data DIR] [--out FILE]

writes ``src/astra_gpu_model/data/grouped_gemm_fit.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from pathlib import Path

from astra_gpu_model.gemm import gemm_time_s
from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.grouped import grouped_gemm_time_s

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent / "calibration" / "nvidia-h200-2026-11-26"
DEFAULT_OUT = HERE.parent / "src" / "astra_gpu_model" / "data" / "grouped_gemm_fit.json"
GPU = "H200-SXM"
#: the measuring GPU's SMs x boost clock (MHz), the stream rate's reference point (as data/memops_fit.json)
REFERENCE = {"gpu": "NVIDIA H200 (SXM, 141 GB)", "sm_count": 132, "boost_clock_mhz": 1980}


def read_rows(folder):
    """``(experts, m, n, k, measured seconds)`` of every grouped row that was measured."""
    out = []
    with open(Path(folder) / "gemm_extra.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["set"] == "grouped" and row["status"] == "ok":
                out.append((int(row["model"].split("=")[1]), int(row["m"]), int(row["n"]), int(row["k"]),
                            float(row["time_us"]) * 1e-6))
    return out


def predict(gpu, experts, m, n, k, stream, group_us):
    """The model's seconds for E experts of m tokens on ``gpu`` with these two parameters."""
    return grouped_gemm_time_s([(m, n, k)] * experts, peak_flops=gpu.peak_flops("bf16"), sm_count=gpu.sm_count,
                               hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=2, out_bytes=2,
                               params=gpu.gemm_params("bf16"), stream_bytes_per_s=stream, group_us=group_us,
                               tiles=gpu.gemm_tiles)


def dense(gpu, experts, m, n, k):
    """The dense GEMM of all E*m rows with one expert's weights (how expert GEMMs were timed before)."""
    return gemm_time_s(experts * m, n, k, 1, peak_flops=gpu.peak_flops("bf16"), sm_count=gpu.sm_count,
                       hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=2, out_bytes=2,
                       params=gpu.gemm_params("bf16"), tiles=gpu.gemm_tiles)


def loss(gpu, rows, stream, group_us):
    return statistics.fmean(abs(math.log(predict(gpu, e, m, n, k, stream, group_us) / t)) for e, m, n, k, t in rows)


def fit(gpu, rows):
    """(stream bytes/s, group µs, loss): a coarse grid, then a fine one around its best point."""
    best = None
    for stream_tb in [1.0 + 0.1 * i for i in range(39)]:
        for group_us in [0.1 * j for j in range(31)]:
            value = loss(gpu, rows, stream_tb * 1e12, group_us)
            if best is None or value < best[2]:
                best = (stream_tb * 1e12, group_us, value)
    s0, g0, _ = best
    for i in range(-20, 21):
        for j in range(-20, 21):
            stream, group_us = s0 + i * 0.005e12, g0 + j * 0.005
            if stream <= 0 or group_us < 0:
                continue
            value = loss(gpu, rows, stream, group_us)
            if value < best[2]:
                best = (stream, group_us, value)
    return best


def errors(values):
    absolute = [abs(v) for v in values]
    return {"n": len(values), "median_abs": round(statistics.median(absolute), 4),
            "mean_abs": round(statistics.fmean(absolute), 4), "max_abs": round(max(absolute), 4),
            "within_10pct": round(sum(a <= 0.1 for a in absolute) / len(absolute), 4)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    gpu = load_gpu(GPU)
    rows = read_rows(args.data)
    stream, group_us, value = fit(gpu, rows)
    hbm_rate = gpu.gemm.hbm_efficiency * gpu.hbm_bytes_per_s
    g_only = min((loss(gpu, rows, hbm_rate, 0.01 * j), 0.01 * j) for j in range(301))
    table, rel, rel_dense = [], [], []
    for e, m, n, k, t in rows:
        p, d = predict(gpu, e, m, n, k, stream, group_us), dense(gpu, e, m, n, k)
        rel.append(p / t - 1)
        rel_dense.append(d / t - 1)
        table.append({"experts": e, "m": m, "n": n, "k": k, "measured_us": round(t * 1e6, 2),
                      "predicted_us": round(p * 1e6, 2), "error": round(p / t - 1, 4),
                      "dense_gemm_of_all_rows_us": round(d * 1e6, 2)})
        print(f"E={e:4d} m={m:5d} n={n:6d} k={k:6d}  measured {t * 1e6:9.1f} us  grouped model "
              f"{p * 1e6:9.1f} ({p / t - 1:+.1%})  dense E*m GEMM {d * 1e6:9.1f} ({d / t - 1:+.1%})")
    out = {
        "generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_grouped_gemm.py (from the repository root)",
        "data": "calibration/nvidia-h200-2026-11-26/gemm_extra.csv (set=grouped: torch._grouped_mm, bf16)",
        "gpu_preset": GPU,
        "reference": REFERENCE,
        "objective": "mean |log(predicted / measured)|; dense GEMM parameters fixed (gemm_fit.json, h100)",
        "params": {"stream_bytes_per_s": round(stream), "group_us": round(group_us, 4)},
        "fit_loss_mean_abs_log": round(value, 6),
        "error": errors(rel),
        "error_dense_gemm_of_all_rows": errors(rel_dense),
        "alternative_group_us_only": {
            "note": "weights streamed at the dense hbm_efficiency x HBM, only group_us fitted",
            "group_us": round(g_only[1], 4), "fit_loss_mean_abs_log": round(g_only[0], 6)},
        "rows": table,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"stream rate {stream / 1e12:.3f} TB/s ({stream / gpu.hbm_bytes_per_s:.1%} of {GPU}'s HBM), "
          f"{group_us:.3f} us per group; mean |log| {value:.4f} (dense E*m GEMM: "
          f"{statistics.fmean(abs(math.log(1 + r)) for r in rel_dense):.4f}); "
          f"group_us alone at the dense HBM rate: {g_only[1]:.2f} us, {g_only[0]:.4f}; wrote {args.out}")


if __name__ == "__main__":
    main()
