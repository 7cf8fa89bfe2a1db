#!/usr/bin/env python3
"""Print the gpu model's attention time beside every row measured on the H200 at long sequences (check only).

Run (from the repository root):

    .venv/bin/python plugins/gpu_model/fit/check_attention_long.py [--csv PATH] [--gpu h200 --gpu h100]

Data: ``plugins/gpu_model/calibration/nvidia-h200-2026-11-30/attention_long.csv`` (``fit/measure_gpu_sustained.py``:
PyTorch SDPA flash = FlashAttention-2 and SDPA cuDNN, bf16, batch 1, forward and backward (= (fwd+bwd) - fwd),
eager with CUDA events, median of 3; causal 16k-128k and the blocks PyTorch's load-balanced ring computes at 32k
local tokens: 32k x 16k and 16k x 32k not causal, 32k x 32k causal). For each row the model times the same SDPA call
(BHSD, the KV heads as measured) as a node naming ``fa2`` (the flash rows) or ``cudnn``, on each preset asked
(default: H200-SXM and H100-SXM5-80GB, the same SMs, clocks and tensor rates). ``ratio`` is model time / measured
time (> 1: the model is slower). ``spread`` is the measurement's (max - min) / median of its 3 timed calls;
``beyond spread``: the first preset's |ratio - 1| exceeds it. ``--write-table PATH`` writes the table the model uses
(:func:`long_table`; the shipped one is ``src/astra_gpu_model/data/measured_attention_hopper_long.csv``).
Issue 36: attention at 16k-128k tokens and context parallelism's ring blocks on Hopper.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))  # run from a checkout without installing

from astra_gpu_model import attention  # noqa: E402
from astra_gpu_model.model import GpuComputeModel  # noqa: E402
from astra_gpu_model.ops import classify  # noqa: E402

CSV = HERE.parents[1] / "calibration" / "nvidia-h200-2026-11-30" / "attention_long.csv"
KERNEL = attention.SDPA_KERNELS
BF16 = "'Tensor(c10::BFloat16)'"


def sdpa_op(row):
    """The :class:`astra_gpu_model.ops.Op` of the measured SDPA call (batch, heads, lengths, mask, pass)."""
    b, hq, hkv, d = (int(row[c]) for c in ("batch", "heads_q", "heads_kv", "head_dim"))
    sq, sk, causal = int(row["seq_q"]), int(row["seq_kv"]), row["causal"] == "True"
    q, kv = f"[{b}, {hq}, {sq}, {d}]", f"[{b}, {hkv}, {sk}, {d}]"
    if row["pass"] == "bwd":
        name = "aten::_scaled_dot_product_flash_attention_backward"
        shapes, values = f"[{q}, {q}, {kv}, {kv}, {q}]", f"[[], [], [], [], [], [], None, None, 0, 0, 0.0, {causal}]"
    else:
        name = "aten::_scaled_dot_product_flash_attention"
        shapes, values = f"[{q}, {kv}, {kv}]", f"[[], [], [], 0.0, {causal}, False]"
    return classify(name, shapes, "[" + ", ".join([BF16] * 5) + "]", values)


def measured_rows(path=CSV):
    """The file's rows that timed a kernel (status ok)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["status"] == "ok"]


#: the distillation rule of ``data/measured_attention_hopper_long.csv`` (attention.LONG_ATTENTION): rows of at least
#: the FlashAttention-3 paper's 2,048 thread blocks of 128 queries (the regime of the rows they extend; the model
#: quantises smaller grids itself), keys from 16k (the paper's last bar) up, at each head dimension measured (64, 128)
TABLE_MIN_CTAS, TABLE_MIN_KEYS = attention.TABLE_MIN_CTAS, 16384


def long_table(rows, sm_count=132):
    """``[(kernel, pass, mask, head_dim, seq_k, median TFLOP/s, median TFLOP/s in full waves, shapes)]``: the rule
    above (:func:`astra_gpu_model.attention.measured_table`), the median of the shapes measured at each (kernel, pass,
    mask, head dimension, key length); in full waves: each shape's TFLOP/s over its wave utilisation on the H200's
    ``sm_count`` SMs (e.g. 32 heads of 32k queries, 8,192 blocks in 63 waves: 0.985), the rate the model's own wave
    quantisation starts from."""
    def label(r):
        return f"h{r['heads_q']}/{r['heads_kv']} q{int(r['seq_q']) // 1024}k"
    return attention.measured_table(rows, label, min_keys=TABLE_MIN_KEYS, min_ctas=TABLE_MIN_CTAS, sm_count=sm_count)


TABLE_HEADER = """\
# FlashAttention-2 (PyTorch SDPA flash) and cuDNN 9.19 (SDPA cuDNN) BF16 attention on one NVIDIA H200 SXM (700 W limit),
# measured by this project: plugins/gpu_model/calibration/nvidia-h200-2026-11-30/attention_long.csv (made by
# plugins/gpu_model/fit/measure_gpu_sustained.py; torch 2.11.0+cu130, cuDNN 9.19.0, driver 580.159.04; batch 1, eager
# with CUDA events, 1 warm-up + 3 timed calls, median; backward = (forward + backward) - forward). Calibration data
# (a kernel measurement), not a validation case. Written by plugins/gpu_model/fit/check_attention_long.py --write-table
# (its long_table: at least 2,048 thread blocks of 128 queries, keys from 16k; the median TFLOP/s of the shapes
# measured at each kernel, pass, mask, head dimension and key length; `tflops_full_waves`: the median of each shape's
# TFLOP/s over its wave utilisation on 132 SMs, what the model uses; `shapes`: each shape's query/KV heads and
# queries).
# TFLOP/s as the file gives them: 4 x b x s_q x s_k x heads x dim (causal: s (s + 1) / 2 pairs), x 2.5 backward --
# ops._attention's count. Clocks: the FA2 rows ran near the boost clock (the FA2 ring block sustained for 50 s
# settles at 1,957 MHz, 678 W), the cuDNN rows at the board's power cap (its ring block settles at 1,672 MHz, 691 W,
# from its first 2 s on): both are the rates AT the 700 W limit. The H100 SXM5 has the same SMs, clocks, tensor rates
# and 700 W limit.
"""


def write_table(rows, path):
    """Write :func:`long_table` of ``rows`` to ``path`` under :data:`TABLE_HEADER`."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(TABLE_HEADER)
        f.write("kernel,pass,mask,head_dim,seq_k,tflops,tflops_full_waves,shapes\n")
        for kernel, way, mask, dim, sk, tflops, full, shapes in long_table(rows):
            f.write(f"{kernel},{way},{mask},{dim},{sk},{tflops:.1f},{full:.1f},{shapes}\n")


def compare(rows, gpus):
    """``[(row, {gpu: model seconds})]``: each measured row timed by the model on each preset."""
    models = {g: GpuComputeModel(None, g) for g in gpus}
    return [(r, {g: m.op_seconds(sdpa_op(r), kernel=KERNEL[r["backend"]]) for g, m in models.items()}) for r in rows]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(CSV))
    ap.add_argument("--gpu", action="append", help="preset (repeatable; default h200 and h100)")
    ap.add_argument("--write-table", metavar="PATH", help="write the model's long-attention table (long_table) there")
    args = ap.parse_args(argv)
    if args.write_table:
        write_table(measured_rows(args.csv), args.write_table)
        return
    gpus = args.gpu or ["H200-SXM", "H100-SXM5-80GB"]
    table = compare(measured_rows(args.csv), gpus)
    head = " | ".join(f"{g} ms | ratio" for g in gpus)
    print(f"| set | kernel | pass | heads q/kv | d | q x kv | causal | measured ms | TFLOP/s | spread | {head} | "
          "beyond spread |")
    print("|---" * (11 + 2 * len(gpus)) + "|")
    ratios = {}
    for r, model in table:
        t = float(r["time_us"]) * 1e-3
        cells = " | ".join(f"{model[g] * 1e3:,.2f} | {model[g] * 1e3 / t:.3f}" for g in gpus)
        print(f"| {r['set']} | {KERNEL[r['backend']]} | {r['pass']} | {r['heads_q']}/{r['heads_kv']} | "
              f"{r['head_dim']} | {int(r['seq_q']) // 1024}k x {int(r['seq_kv']) // 1024}k | {r['causal'][0]} | "
              f"{t:,.2f} | {float(r['tflops']):.0f} | {float(r['spread']):.3f} | {cells} | "
              f"{'yes' if abs(model[gpus[0]] * 1e3 / t - 1) > float(r['spread']) else ''} |")
        for g in gpus:
            ratios.setdefault((g, KERNEL[r["backend"]], r["pass"]), []).append(model[g] * 1e3 / t)
    print()
    print("| preset | kernel | pass | rows | median ratio | min | max |")
    print("|---|---|---|---|---|---|---|")
    for (g, k, p), xs in sorted(ratios.items()):
        print(f"| {g} | {k} | {p} | {len(xs)} | {statistics.median(xs):.3f} | {min(xs):.3f} | {max(xs):.3f} |")


if __name__ == "__main__":
    main()
