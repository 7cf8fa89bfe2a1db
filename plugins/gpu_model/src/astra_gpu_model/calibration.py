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
    compute model times them (``params`` overrides the GPU's; output in ``out_dtype``, default ``dtype``)."""
    import numpy as np

    from astra_gpu_model.gemm import gemm_time_s_np

    m = np.asarray(m, dtype=np.float64)
    return gemm_time_s_np(
        m, n, k, np.ones_like(m) if batch is None else batch,
        peak_flops=gpu.peak_flops(dtype), sm_count=gpu.sm_count, hbm_bytes_per_s=gpu.hbm_bytes_per_s,
        in_bytes=gpu.dtype_bytes(dtype), out_bytes=gpu.dtype_bytes(out_dtype or dtype),
        params=params or gpu.gemm_params(gpu.rate_dtype(dtype)), tiles=gpu.gemm_tiles,
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
