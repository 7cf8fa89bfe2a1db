"""Fit the SM-side rates of memory-bound ops on the measured H200 memops (``calibration/nvidia-h200-*``).

A memory-bound kernel streams its bytes at most at ``hbm_efficiency x HBM``. Many do not reach it: a layer
norm's backward reduces across the hidden dimension and writes two outputs, a softmax is latency-bound on
its row reductions. On one H200 (4.8 TB/s) an add streams 4.3 TB/s but a layer-norm backward 1.6 TB/s.
These rates are the SMs' limit, not HBM's, so they carry to another GPU in proportion to its SMs x clock,
and a GPU's op runs at ``min(rate x its SMs x clock / the H200's, hbm_efficiency x its HBM)``.

For each measured op (``memops.csv``, bf16, tokens x hidden from 2048 x 4096 up), the rate is the median of
``bytes / time`` over the rows of at least 50 µs, with ``bytes`` as the gpu model counts them for the ATen op
the generator writes (so the fit and the model agree on what a byte is) and 2 µs of fixed kernel time taken
off (the GPU-side cost of a small kernel measured in the same run, ``launch.csv``).

    .venv/bin/python plugins/gpu_model/fit/fit_memops.py [--data DIR] [--out FILE]

writes ``src/astra_gpu_model/data/memops_fit.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from astra_gpu_model.ops import classify

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent / "calibration" / "nvidia-h200-2026-11-26"
DEFAULT_OUT = HERE.parent / "src" / "astra_gpu_model" / "data" / "memops_fit.json"
#: the measuring GPU's SMs x boost clock (MHz): the rates' reference point
REFERENCE = {"gpu": "NVIDIA H200 (SXM, 141 GB)", "sm_count": 132, "boost_clock_mhz": 1980}
FIXED_US = 2.0
MIN_US = 50.0
BF = "Tensor(c10::BFloat16)"


def _aten(op, pass_, t, h):
    """(ATen op names, shapes, types) the generator writes for a measured op, or None."""
    x = [t, h]
    if op in ("add", "mul"):
        return [f"aten::{op}", f"aten::{op}_"], [x, x], [BF, BF]
    if op in ("gelu_tanh", "silu") or op == "gelu":
        base = "gelu" if op.startswith("gelu") else "silu"
        if pass_ == "fwd":
            return [f"aten::{base}"], [x], [BF]
        return [f"aten::{base}_backward"], [x, x], [BF, BF]
    if op == "dropout":
        if pass_ == "fwd":
            return ["aten::native_dropout"], [x], [BF]
        return ["aten::native_dropout_backward"], [x, x], [BF, "Tensor(bool)"]
    if op == "layer_norm":
        if pass_ == "fwd":
            return ["aten::native_layer_norm"], [x, [h], [h]], [BF, BF, BF]
        return ["aten::native_layer_norm_backward"], [x, x, [t, 1], [t, 1], [h], [h]], [BF] * 6
    if op == "rms_norm":
        if pass_ == "fwd":
            return ["aten::_fused_rms_norm", "aten::rms_norm"], [x, [h]], [BF, BF]
        return ["aten::_fused_rms_norm_backward"], [x, x, [t, 1], [h]], [BF] * 4
    if op == "softmax":
        if pass_ == "fwd":
            return ["aten::_softmax", "aten::_log_softmax"], [x], [BF]
        return ["aten::_softmax_backward_data", "aten::_log_softmax_backward_data"], [x, x], [BF, BF]
    if op == "clone":
        return ["aten::clone", "aten::copy_"], [x], [BF]
    if op == "embedding" and pass_ == "fwd":
        return ["aten::embedding"], [[50304, h], [t]], [BF, "Tensor(long int)"]
    return None


def fit(data_dir):
    rows = list(csv.DictReader(open(Path(data_dir) / "memops.csv")))
    samples = {}
    for r in rows:
        if not r["status"].startswith("ok") or not r["tokens"]:
            continue
        t, h = int(r["tokens"]), int(r["hidden"])
        spec = _aten(r["op"], r["pass"], t, h)
        if spec is None:
            continue
        names, shapes, types = spec
        time_us = float(r["time_us"])
        if time_us < MIN_US:
            continue
        op = classify(names[0], str(shapes), str(types), "", "bf16")
        rate = op.nbytes / ((time_us - FIXED_US) * 1e-6)
        for name in names:
            samples.setdefault(name, []).append(rate)
    # the optimizer: AdamW fused over fp32 parameters (28 bytes per parameter as measured; the gpu model
    # counts _fused_adam_'s tensor lists: params, grads, exp_avg, exp_avg_sq read, params and both moments
    # written, the same 28 bytes)
    for r in rows:
        if r["op"] == "adamw_fused" and r["status"].startswith("ok") and float(r["time_us"]) >= MIN_US:
            rate = float(r["bytes"]) / ((float(r["time_us"]) - FIXED_US) * 1e-6)
            for name in ("aten::_fused_adam_", "aten::_fused_adamw_"):
                samples.setdefault(name, []).append(rate)
    rates = {name: statistics.median(v) for name, v in sorted(samples.items())}
    return rates, {name: len(v) for name, v in samples.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    rates, counts = fit(args.data)
    out = {
        "generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_memops.py (from the repository root)",
        "data": str(Path(args.data).relative_to(HERE.parent)) + "/memops.csv",
        "reference": REFERENCE,
        "method": f"median of bytes / (time - {FIXED_US} us) over rows of at least {MIN_US} us; bytes as the gpu "
                  "model counts them for the ATen op",
        "rates_bytes_per_s": {name: round(rate) for name, rate in rates.items()},
        "rows": counts,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{'op':45s} {'TB/s':>6s} {'rows':>5s}")
    for name, rate in rates.items():
        print(f"{name:45s} {rate / 1e12:6.2f} {counts[name]:5d}")


if __name__ == "__main__":
    main()
