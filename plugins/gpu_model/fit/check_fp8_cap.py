#!/usr/bin/env python3
"""Print NVIDIA's BF16 cuDNN burst rate over this project's capped rate on every shape both measured (check only).

Run (from the repository root):

    .venv/bin/python plugins/gpu_model/fit/check_fp8_cap.py

Why (issue 36): NVIDIA's H200 rows (``src/astra_gpu_model/data/published_attention_hopper.csv``, cudnn-frontend
``sdpa_benchmark_training`` at afa9f7c0, cuDNN 9.19.1, each case in its own subprocess, 10 iterations) are bursts near
the 1,980 MHz boost clock; this project's cuDNN rows from 16k keys
(``calibration/nvidia-h200-2026-11-30/attention_long.csv``) ran at the 700 W cap (1,672 MHz). The FP8 attention rows
have no capped twin, so the model divides them from 16k keys by what the BF16 rows lose to the cap
(``attention.HOPPER_BURST_OVER_CAP``). This script is that number's rule (:func:`burst_over_cap`):

- a pair is one NVIDIA BF16 row and one cuDNN row of this project of the same shape: batch 1, NVIDIA's 64 query and
  8 KV heads of dimension 128, the same mask, as many queries as keys, the same key length, within 16k-128k keys
  (this project's long range), forward and backward separately;
- the ratio is NVIDIA's TFLOP/s over ours, ours first put in NVIDIA's FLOP count (causal: s^2 / 2 query-key pairs,
  ours s (s + 1) / 2);
- the rule's number is the median ratio per pass.

Shapes of NVIDIA's not measured here (other heads or lengths) are listed but not used.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))  # run from a checkout without installing

from astra_gpu_model import attention  # noqa: E402

#: NVIDIA's benchmark shape (the file's header: config llama3.1)
BATCH, HEADS_Q, HEADS_KV, HEAD_DIM = 1, 64, 8, 128
#: the key lengths this project measured at the cap (attention.LONG_FROM up to 128k)
MIN_KEYS, MAX_KEYS = 16384, 131072


def _long_script():
    spec = importlib.util.spec_from_file_location("check_attention_long", HERE.parent / "check_attention_long.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def published_bf16():
    """``{(pass, causal, seq_len): TFLOP/s}``: NVIDIA's measured BF16 rows (the H200 preset's; the H100 SXM5 repeats
    them) of ``attention.HOPPER_ATTENTION``."""
    rows = attention.data_rows(attention.HOPPER_ATTENTION)
    return {(way, r["mask"] == "causal", int(r["seq_len"])): float(r[f"{way}_tflops"])
            for r in rows if r["preset"] == "H200-SXM" and r["precision"] == "bf16" for way in ("fwd", "bwd")}


def pairs(published, measured):
    """``[(pass, causal, seq_len, NVIDIA TFLOP/s, ours in NVIDIA's FLOP count, ratio)]`` by the rule above."""
    out = []
    for r in measured:
        if r["backend"] != "cudnn":
            continue
        b, hq, hkv, d, sq, sk = (int(r[c]) for c in ("batch", "heads_q", "heads_kv", "head_dim", "seq_q", "seq_kv"))
        causal = r["causal"] == "True"
        key = (r["pass"], causal, sk)
        if (b, hq, hkv, d) != (BATCH, HEADS_Q, HEADS_KV, HEAD_DIM) or sq != sk or not MIN_KEYS <= sk <= MAX_KEYS \
                or key not in published:
            continue
        ours = float(r["tflops"]) * (sk / (sk + 1) if causal else 1.0)
        out.append((*key, published[key], ours, published[key] / ours))
    return sorted(out)


def burst_over_cap(published=None, measured=None):
    """``{backward: median ratio}`` over :func:`pairs` (the number ``attention.HOPPER_BURST_OVER_CAP`` holds)."""
    published = published_bf16() if published is None else published
    measured = _long_script().measured_rows() if measured is None else measured
    ratios = {}
    for way, _, _, _, _, ratio in pairs(published, measured):
        ratios.setdefault(way == "bwd", []).append(ratio)
    return {backward: statistics.median(xs) for backward, xs in ratios.items()}


def main():
    published, measured = published_bf16(), _long_script().measured_rows()
    used = pairs(published, measured)
    print("| pass | mask | keys | NVIDIA burst TFLOP/s | ours at the cap (NVIDIA's count) | ratio |")
    print("|---|---|---|---|---|---|")
    for way, causal, sk, theirs, ours, ratio in used:
        print(f"| {way} | {'causal' if causal else 'none'} | {sk // 1024}k | {theirs:.0f} | {ours:.3f} | {ratio:.4f} |")
    print()
    for backward, ratio in sorted(burst_over_cap(published, measured).items()):
        n = sum((w == "bwd") == backward for w, *_ in used)
        print(f"median {'backward' if backward else 'forward'}: {ratio:.6f} over {n} shape(s)")
    seen = {(w, c, s) for w, c, s, *_ in used}
    missing = sorted(k for k in published if k not in seen and MIN_KEYS <= k[2] <= MAX_KEYS)
    print("NVIDIA rows from 16k keys with no shape measured here (not used): "
          + ", ".join(f"{w} {'causal' if c else 'none'} {s // 1024}k" for w, c, s in missing))


if __name__ == "__main__":
    sys.exit(main())
