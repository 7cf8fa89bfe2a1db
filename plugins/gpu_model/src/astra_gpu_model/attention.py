"""Which attention kernel runs, and how much of a Hopper GPU it reaches: FlashAttention-2 (what PyTorch's SDPA
flash backend runs), FlashAttention-3 and cuDNN's fused attention, by sequence length, causal or not, forward or
backward, as the FlashAttention-3 paper measured them on an H100.

A trace names the kernel on its attention node (attribute ``attention_kernel``: ``fa2``, ``fa3`` or ``cudnn``;
the LLM generator's ``--attention-kernel``, ``fa2`` by default under ``--framework fsdp2``). Without the attribute,
or on a GPU that is not Hopper, the GPU preset's ``attention_efficiency`` stays what the node is timed at.

Source: Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao, "FlashAttention-3: Fast and Accurate Attention with
Asynchrony and Low-precision", arXiv:2407.08608 (v2), Figure 5 (c) and (d), forward without and with the causal
mask, and Figure 6 (b), backward without it, all at head dimension 128, FP16/BF16, on an H100 80GB SXM5; TFLOP/s as
the bars are labelled. Their setup (Sec. 4.1): batch x sequence = 16k tokens, hidden 2048 (16 heads of 128);
FLOPs 4 x seqlen^2 x head_dim x heads, halved with the causal mask, x 2.5 for the backward -- the FLOPs
``ops._attention`` counts. The head-dimension-128 rows are used at every head dimension (ASSUMPTION; FA2's
forward without the mask at 8k reaches 322 TFLOP/s at head dim 64 and 324 at 256, Fig. 5(a) and (e), against 370).
"""

from __future__ import annotations

import math

KERNELS = ("fa2", "fa3", "cudnn")

#: the sequence lengths of the paper's bars
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)

#: (kernel, backward, causal) -> TFLOP/s at SEQ_LENS on an H100 80GB SXM5, head dim 128 (arXiv:2407.08608 v2:
#: Fig. 5(c) forward, no mask; Fig. 5(d) forward, causal; Fig. 6(b) backward, no mask)
MEASURED_TFLOPS = {
    ("fa2", False, False): (309, 350, 362, 368, 370, 370),
    ("fa2", False, True): (191, 260, 298, 319, 333, 335),
    ("fa2", True, False): (214, 260, 291, 310, 318, 322),
    ("fa3", False, False): (467, 565, 625, 638, 646, 648),
    ("fa3", False, True): (292, 423, 521, 579, 602, 616),
    ("fa3", True, False): (316, 424, 501, 542, 559, 561),
    ("cudnn", False, False): (497, 574, 617, 609, 600, 595),
    ("cudnn", False, True): (315, 410, 484, 518, 529, 539),
    ("cudnn", True, False): (305, 408, 465, 499, 518, 516),
}

#: the H100 80GB SXM5's dense BF16/FP16 peak (NVIDIA H100 datasheet: 1,979 TFLOPS with sparsity); the paper's
#: "740 TFLOPs/s, 75% of the theoretical maximum" is the same peak
MEASURED_PEAK_TFLOPS = 989.4
#: the paper's shape gives ``batch x heads x seqlen/128`` = 16384/s x 16 x s/128 = 2048 thread blocks of 128
#: queries at every length; on the H100's 132 SMs that is 16 waves, the last one 68 % full
MEASURED_CTAS = 2048
MEASURED_SMS = 132


def measured_utilisation():
    """The wave utilisation of the paper's shape on its GPU (2048 / (16 x 132) = 0.970): the model applies its own
    wave quantisation, so the table is divided by this one."""
    waves = -(-MEASURED_CTAS // MEASURED_SMS)
    return MEASURED_CTAS / (waves * MEASURED_SMS)


def is_hopper(gpu):
    """The table was measured on Hopper; another architecture keeps its preset's ``attention_efficiency``."""
    return gpu.architecture.lower().startswith("hopper")


def _interpolate(points, seq_len):
    """``points`` at :data:`SEQ_LENS`, linear in log2(sequence length), clamped to the measured range."""
    x = math.log2(min(max(seq_len, SEQ_LENS[0]), SEQ_LENS[-1]))
    xs = [math.log2(s) for s in SEQ_LENS]
    for i in range(len(xs) - 1):
        if x <= xs[i + 1]:
            t = (x - xs[i]) / (xs[i + 1] - xs[i])
            return points[i] + t * (points[i + 1] - points[i])
    return points[-1]


def kernel_tflops(kernel, backward, causal, seq_len):
    """TFLOP/s of ``kernel`` on the H100 SXM5 at ``seq_len`` keys (the paper's shape). The paper has no causal
    backward: ASSUMPTION, the backward loses to the mask what the forward loses at the same length
    (backward x causal forward / forward): 286 TFLOP/s for FA2 at 8k. A check, not used: Dao-AILab/flash-attention
    pull request #1791's benchmark_attn.py on a Hopper GPU measured FA2's causal backward at head dim 128 and 8k at
    287.1 TFLOP/s (its forward 284.1)."""
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if backward and causal:
        return (_interpolate(MEASURED_TFLOPS[(kernel, True, False)], seq_len)
                * _interpolate(MEASURED_TFLOPS[(kernel, False, True)], seq_len)
                / _interpolate(MEASURED_TFLOPS[(kernel, False, False)], seq_len))
    return _interpolate(MEASURED_TFLOPS[(kernel, backward, causal)], seq_len)


def kernel_efficiency(kernel, backward, causal, seq_len):
    """The fraction of peak the model times ``kernel`` at (before its own wave quantisation): the measured TFLOP/s
    over the H100 SXM5's peak, over the paper's wave utilisation."""
    return kernel_tflops(kernel, backward, causal, seq_len) / MEASURED_PEAK_TFLOPS / measured_utilisation()


__all__ = ["KERNELS", "MEASURED_TFLOPS", "is_hopper", "kernel_efficiency", "kernel_tflops", "measured_utilisation"]
