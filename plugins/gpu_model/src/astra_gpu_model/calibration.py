"""Measured GEMM data sets, and the error of the GEMM model on them.

Used by the fitting script (``fit/fit_gemm.py``), the tests that recompute the README's error table, and
anyone who wants to check the model on their own measurements (same CSV layout: ``M,N,K`` and a time).

The files live in the project's reference folder (``shared/calibration/``); every CSV starts with ``#``
lines naming its source and method.
"""

from __future__ import annotations

import csv
from pathlib import Path

VIDUR_GEMM = "vidur_measured_gemm_a100_h100.csv"
LLMCOMPASS_GEMM = "llmcompass_measured_gemm_a100_fp16_sweep.csv"
#: Shipped with the plugin (``astra_gpu_model/data``), not in ``shared/calibration``: DeepGEMM's published FP8
#: GEMM table (H800 SXM5), the FP8 data behind ``fp8_gemm_scale`` (``fit/fit_gemm_fp8.py``).
DEEPGEMM_FP8_GEMM = "deepgemm_measured_fp8_gemm_h800.csv"
#: Rows of that table from which ``fp8_gemm_scale`` is fitted: the compute-bound ones (a training GEMM's rows).
FP8_FIT_MIN_M = 4096

#: The preset each data set's device column was measured on (the files do not record the exact SKU;
#: the H100 rows reach 740 TFLOP/s fp16, above the H100 PCIe's 756 TFLOP/s dense peak x 0.98, so SXM5).
DEVICE_PRESETS = {"a100": "A100-SXM4-80GB", "h100": "H100-SXM5-80GB"}


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def load_vidur_gemm(path):
    """``{device: {"m", "n", "k", "time_s", "label"} lists}`` from Vidur's measured linear layers (fp16)."""
    out = {}
    for row in _rows(path):
        d = out.setdefault(row["device"], {"m": [], "n": [], "k": [], "time_s": [], "label": []})
        d["m"].append(int(row["M"]))
        d["n"].append(int(row["N"]))
        d["k"].append(int(row["K"]))
        d["time_s"].append(float(row["time_ms_median"]) * 1e-3)
        d["label"].append(f"{row['model']} tp{row['tp']} {row['op']}")
    return out


def load_deepgemm_fp8(path=None):
    """``{"m", "n", "k", "time_s"}`` lists from DeepGEMM's FP8 table (default: the copy shipped with the plugin);
    ``time_s = 2*m*n*k / (tflops * 1e12)``."""
    if path is None:
        from importlib import resources

        path = resources.files("astra_gpu_model") / "data" / DEEPGEMM_FP8_GEMM
    d = {"m": [], "n": [], "k": [], "time_s": []}
    for row in _rows(path):
        m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
        d["m"].append(m)
        d["n"].append(n)
        d["k"].append(k)
        d["time_s"].append(2.0 * m * n * k / (float(row["tflops"]) * 1e12))
    return d


def load_llmcompass_gemm(path):
    """``{"m", "n", "k", "time_s"}`` lists from LLMCompass's real-hardware A100 fp16 matmul sweep."""
    d = {"m": [], "n": [], "k": [], "time_s": []}
    for row in _rows(path):
        d["m"].append(int(row["M"]))
        d["n"].append(int(row["N"]))
        d["k"].append(int(row["K"]))
        d["time_s"].append(float(row["latency_ms"]) * 1e-3)
    return d


#: Vidur's measured NCCL all-reduce sweeps: file stem -> (preset, NcclConfig topology).
VIDUR_ALL_REDUCE = {
    "a100_dgx": ("A100-SXM4-80GB", "nvswitch"),
    "a100_pairwise_nvlink": ("A100-SXM4-80GB", "pairwise"),
    "h100_dgx": ("H100-SXM5-80GB", "nvswitch"),
    "h100_pairwise_nvlink": ("H100-SXM5-80GB", "pairwise"),
}


def load_vidur_all_reduce(path, max_bytes=None, single_node=True, with_layout=False):
    """``[(n_gpus, size_bytes, time_us)]`` from a ``vidur_measured_all_reduce_*.csv`` (median column);
    ``with_layout``: ``(n_gpus, gpus_per_node, nodes, size_bytes, time_us)``."""
    out = []
    for row in _rows(path):
        if single_node and row["num_nodes"] != "1":
            continue
        size = int(row["size_bytes"])
        if max_bytes is not None and size > max_bytes:
            continue
        n, measured = int(row["num_workers"]), float(row["time_ms_median"]) * 1000.0
        if with_layout:
            out.append((n, int(row["devices_per_node"]), int(row["num_nodes"]), size, measured))
        else:
            out.append((n, size, measured))
    return out


def predict_gemm_s(gpu, m, n, k, dtype="fp16", batch=None, params=None, out_dtype=None):
    """Model times (seconds, numpy array) of GEMMs ``(m x k) @ (k x n)`` on ``gpu`` (a :class:`GpuSpec`), as the
    compute model times them, with its tiles and schedule (``params`` overrides the GPU's; output in ``out_dtype``,
    default ``dtype``)."""
    import numpy as np

    from astra_gpu_model.gemm import gemm_time_s_np
    from astra_gpu_model.gpu import BLOCK_SCALED

    m = np.asarray(m, dtype=np.float64)
    return gemm_time_s_np(
        m, n, k, np.ones_like(m) if batch is None else batch,
        peak_flops=gpu.peak_flops(dtype), sm_count=gpu.sm_count, hbm_bytes_per_s=gpu.hbm_bytes_per_s,
        in_bytes=gpu.dtype_bytes(dtype), out_bytes=gpu.dtype_bytes(out_dtype or dtype),
        params=params or gpu.gemm_params(dtype if dtype in BLOCK_SCALED else gpu.rate_dtype(dtype)),
        tiles=gpu.gemm_tiles, schedule=gpu.gemm_schedule,
    )


def error_stats(predicted, measured):
    """Relative errors ``|pred - meas| / meas``: dict of n, median, mean, p90, max, and signed median bias."""
    import numpy as np

    predicted = np.asarray(predicted, dtype=np.float64)
    measured = np.asarray(measured, dtype=np.float64)
    rel = (predicted - measured) / measured
    ab = np.abs(rel)
    return {
        "n": int(ab.size),
        "median_abs": float(np.median(ab)),
        "mean_abs": float(np.mean(ab)),
        "p90_abs": float(np.percentile(ab, 90)),
        "max_abs": float(np.max(ab)),
        "median_signed": float(np.median(rel)),
        "within_10pct": float(np.mean(ab <= 0.10)),
    }


def find_calibration_dir(start=None):
    """``shared/calibration`` ($ASTRA_SHARED_DIR/calibration, or ``../shared`` beside the repository)."""
    import os

    env = os.environ.get("ASTRA_SHARED_DIR")
    if env and (Path(env) / "calibration").is_dir():
        return Path(env) / "calibration"
    here = Path(start or __file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared" / "calibration"
        if (parent / "pyproject.toml").exists() and (parent / "core").is_dir() and candidate.is_dir():
            return candidate
    return None


__all__ = ["load_vidur_gemm", "load_vidur_all_reduce", "VIDUR_ALL_REDUCE", "load_llmcompass_gemm", "load_deepgemm_fp8",
           "predict_gemm_s", "error_stats", "find_calibration_dir",
           "VIDUR_GEMM", "LLMCOMPASS_GEMM", "DEEPGEMM_FP8_GEMM", "FP8_FIT_MIN_M", "DEVICE_PRESETS"]


# ------------------------------------------------------------------ published peak-GEMM points (partial calibration)
#: Shipped with the plugin: published large-GEMM TFLOP/s of GPUs without a GEMM sweep (B200, B300, MI300X, ...).
PUBLISHED_PEAK_GEMM = "published_peak_gemm.csv"


def load_published_peak_gemm(path=None):
    """``[{"gpu", "dtype", "m", "n", "k", "tflops", "source"}]`` from the published peak-GEMM table."""
    if path is None:
        from importlib import resources

        path = resources.files("astra_gpu_model") / "data" / PUBLISHED_PEAK_GEMM
    return [{"gpu": r["gpu"], "dtype": r["dtype"], "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]),
             "tflops": float(r["tflops"]), "source": r["source"]} for r in _rows(path)]


def _best_on_grid(loss, low, high, steps=100, rounds=4):
    """The argument in ``[low, high]`` minimising ``loss``: a grid, then ``rounds - 1`` finer grids around the best
    (the losses here have one minimum; 4 rounds of 100 resolve it to ~1e-7 of the range)."""
    import numpy as np

    best = low
    for _ in range(rounds):
        grid = np.linspace(low, high, steps + 1)
        best = float(grid[int(np.argmin([loss(x) for x in grid]))])
        width = (high - low) / steps
        low, high = max(low, best - width), min(high, best + width)
    return best


def _floor4(x):
    """``x`` rounded down to 4 decimals (a ceiling stays a ceiling once rounded as the presets hold it)."""
    import math

    return math.floor(x * 1e4) / 1e4


def fit_peak_efficiency(gpu_name, points=None):
    """``{"compute_efficiency": eta, "fp8_gemm_scale": s or None, "loss_bf16", "loss_fp8", "ceiling_tflops"}`` for
    ``gpu_name``, with its preset's tile set (``gemm_tiles``) and the other GEMM parameters its ``calibration``
    family's: eta minimises the mean |log(predicted / published)| over its bf16 rows, then ``s`` over its fp8 rows
    (None without fp8 rows), and, where it has nvfp4 or mxfp8 rows, ``fp4_gemm_scale`` / ``mxfp8_gemm_scale`` and
    ``loss_fp4`` / ``loss_mxfp8`` over those.

    Each is then held so that no GEMM shape runs faster than the dtype's published maximum achievable rate (its
    rows' largest TFLOP/s: a brute-force search's best shape, or AMD's max-achievable FLOPs): the model's best rate,
    ``gemm.peak_fraction_bound x peak``, is at most that (``ceiling_tflops``: the model's best rate per dtype, after
    the fit). Rounded to 4 decimals, as the presets hold them (a held value rounded down)."""
    import numpy as np
    from dataclasses import replace

    from astra_gpu_model.gpu import fitted_parameters, load_gpu
    from astra_gpu_model.gemm import GemmParams, peak_fraction_bound

    gpu = load_gpu(gpu_name)
    base = GemmParams.from_dict(fitted_parameters()["families"][gpu.calibration]["params"])
    rows = [p for p in (points if points is not None else load_published_peak_gemm()) if p["gpu"] == gpu.name]
    best_tile = peak_fraction_bound(replace(base, compute_efficiency=1.0), gpu.gemm_tiles)  # max e_tile

    def loss(dtype, params):
        sel = [p for p in rows if p["dtype"] == dtype]
        m, n, k = (np.array([p[key] for p in sel], dtype=np.float64) for key in ("m", "n", "k"))
        measured = 2.0 * m * n * k / (np.array([p["tflops"] for p in sel]) * 1e12)
        return float(np.mean(np.abs(np.log(predict_gemm_s(gpu, m, n, k, dtype=dtype, params=params) / measured))))

    def ceiling(dtype):
        """The largest efficiency (fraction of the dtype's peak) whose best shape stays at the published maximum."""
        top = max(p["tflops"] for p in rows if p["dtype"] == dtype) * 1e12
        return min(1.0, top / (gpu.peak_flops(dtype) * best_tile))

    if not any(p["dtype"] == "bf16" for p in rows):
        raise ValueError(f"no published bf16 GEMM for {gpu.name} in {PUBLISHED_PEAK_GEMM}")
    eta = round(_best_on_grid(lambda x: loss("bf16", replace(base, compute_efficiency=x)), 0.2, 1.0), 4)
    eta = min(eta, _floor4(ceiling("bf16")))
    fitted = replace(base, compute_efficiency=eta)
    out = {"compute_efficiency": eta, "fp8_gemm_scale": None, "loss_bf16": round(loss("bf16", fitted), 6),
           "loss_fp8": None, "ceiling_tflops": {"bf16": round(gpu.peak_flops("bf16") * eta * best_tile / 1e12, 1)}}
    for fmt, key in (("fp8", "fp8"), ("nvfp4", "fp4"), ("mxfp8", "mxfp8")):  # block-scaled: at the FP4 / FP8 peak
        if not any(p["dtype"] == fmt for p in rows):
            continue
        scale = round(_best_on_grid(
            lambda s: loss(fmt, replace(fitted, compute_efficiency=min(1.0, eta * s))), 0.3, 1.0 / eta), 4)
        scale = min(scale, _floor4(ceiling(fmt) / eta))
        efficiency = min(1.0, eta * scale)
        out[f"{key}_gemm_scale"] = scale
        out[f"loss_{key}"] = round(loss(fmt, replace(fitted, compute_efficiency=efficiency)), 6)
        out["ceiling_tflops"][fmt] = round(gpu.peak_flops(fmt) * efficiency * best_tile / 1e12, 1)
    return out


__all__ += ["PUBLISHED_PEAK_GEMM", "load_published_peak_gemm", "fit_peak_efficiency"]


# ------------------------------------------------------------------ published per-shape GEMMs (check data, never fitted)
#: Shipped with the plugin: published GEMM TFLOP/s at training shapes (M = tokens >= 1024) on H100/H800 and B200, each
#: row naming its thread and kernel. Check data: no fit reads it (``fit/check_gemm_shapes.py`` prints the model beside it).
PUBLISHED_GEMM_SHAPES = "published_gemm_shapes.csv"


def load_published_gemm_shapes(path=None):
    """``[{"gpu", "dtype", "kernel", "m", "n", "k", "tflops", "source"}]`` from the published per-shape table."""
    if path is None:
        from importlib import resources

        path = resources.files("astra_gpu_model") / "data" / PUBLISHED_GEMM_SHAPES
    return [{"gpu": r["gpu"], "dtype": r["dtype"], "kernel": r["kernel"], "m": int(r["m"]), "n": int(r["n"]),
             "k": int(r["k"]), "tflops": float(r["tflops"]), "source": r["source"]} for r in _rows(path)]


__all__ += ["PUBLISHED_GEMM_SHAPES", "load_published_gemm_shapes"]
