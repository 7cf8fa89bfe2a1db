"""Fit paged decode attention's fixed time and HBM rate on measured decode kernels (``data/measured_decode_attention.csv``).

A decode step's attention (one query a sequence against its KV cache: FlashInfer's BatchDecodeWithPagedKVCache,
FlashAttention-2's paged ``flash_attn_with_kvcache``) streams the cache once, but it is not a plain memory stream:
each thread block handles one (sequence, KV head) group, a small batch is split along the keys to fill the GPU and
its partial outputs are merged by a second pass, so a kernel of a few MB costs far more than its bytes
(FlashInfer on an A100: 20 us at one sequence of 448 keys, 1.8 MB; 23 us at 13 sequences, 24 MB). The model is
the straight line ``time = floor + bytes / (hbm_fraction x HBM)`` per measured GPU, with ``bytes`` as the gpu
model counts them (Q, K, V and the output, ``ops._attention``). Its two constants are fitted by least squares on
the relative error (weights 1 / measured time; linear in ``floor`` and ``1 / rate``, so solved exactly).

    .venv/bin/python plugins/gpu_model/fit/fit_decode_attention.py [--out FILE]

writes ``src/astra_gpu_model/data/decode_attention_fit.json`` and prints each row against the fit.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

import numpy as np

from astra_gpu_model.gpu import load_gpu

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "src" / "astra_gpu_model" / "data" / "measured_decode_attention.csv"
DEFAULT_OUT = HERE.parent / "src" / "astra_gpu_model" / "data" / "decode_attention_fit.json"
ELEMENT_BYTES = 2  # fp16 / bf16 KV cache and query


def decode_bytes(batch, kv_len, q_heads, kv_heads, head_dim):
    """Bytes of one decode attention as ``ops._attention`` counts them: Q, K, V and the output."""
    return ELEMENT_BYTES * batch * head_dim * (2 * q_heads + 2 * kv_heads * kv_len)


def read_rows(path=DATA):
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return [dict(r, **{k: int(r[k]) for k in ("batch", "kv_len", "q_heads", "kv_heads", "head_dim", "page_size")},
                 time_us=float(r["time_us"])) for r in csv.DictReader(lines)]


def fit(rows):
    """``(floor_us, bytes_per_us)`` minimising the squared relative error of ``floor + bytes / rate``."""
    x = np.array([decode_bytes(r["batch"], r["kv_len"], r["q_heads"], r["kv_heads"], r["head_dim"]) for r in rows],
                 dtype=float)
    t = np.array([r["time_us"] for r in rows])
    a = np.stack([np.ones_like(x), x], axis=1) / t[:, None]
    (floor_us, us_per_byte), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(floor_us), 1.0 / float(us_per_byte)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    rows = read_rows()
    out = {"generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_decode_attention.py (from the repository root)",
           "data": DATA.name, "model": "time = floor_us + bytes / (hbm_fraction x HBM); bytes = Q + K + V + output",
           "objective": "least squares on (predicted - measured) / measured", "gpus": {}}
    for preset in sorted({r["gpu"] for r in rows}):
        own = [r for r in rows if r["gpu"] == preset]
        floor_us, bytes_per_us = fit(own)
        hbm_bytes_per_us = load_gpu(preset).hbm_bytes_per_s * 1e-6
        errors = []
        for r in own:
            nbytes = decode_bytes(r["batch"], r["kv_len"], r["q_heads"], r["kv_heads"], r["head_dim"])
            predicted = floor_us + nbytes / bytes_per_us
            errors.append(predicted / r["time_us"] - 1)
            print(f"{preset:16} {r['kernel']:10} b={r['batch']:4} kv={r['kv_len']:6} {nbytes / 1e6:9.2f} MB "
                  f"measured {r['time_us']:8.1f} us  fit {predicted:8.1f} us  {errors[-1]:+.1%}")
        out["gpus"][preset] = {
            "kernel": own[0]["kernel"], "source": own[0]["source"], "rows": len(own),
            "floor_us": round(floor_us, 3), "hbm_fraction": round(bytes_per_us / hbm_bytes_per_us, 4),
            "error": {"median_abs": round(statistics.median(abs(e) for e in errors), 4),
                      "max_abs": round(max(abs(e) for e in errors), 4),
                      "median_signed": round(statistics.median(errors), 4)}}
        print(preset, out["gpus"][preset])
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
