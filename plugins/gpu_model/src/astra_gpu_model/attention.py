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
``ops._attention`` counts. The same figures' other panels time the other head dimensions (Fig. 5(a),(b) at 64,
(e),(f) at 256, Fig. 6(a) the backward at 64; ``data/published_attention_hopper_head_dim.csv``, the source of each
row named in it): :func:`kernel_tflops` interpolates them linearly in the head dimension (a head of 96: halfway
between the 64 and 128 rows), clamped to the measured ones (below 64 the 64 rows, above 256 the 256 rows; the
backward above 128 the 128 rows: Fig. 6's head-dim-256 panel was not found). A head whose values are narrower than
its queries and keys (MLA: 192 and 128) is looked up at their mean (:func:`effective_head_dim`: 160).

Past 8k keys FA2 and cuDNN are timed at this project's own H200 measurement of 16k-128k tokens and of context
parallelism's ring blocks (``data/measured_attention_hopper_long.csv`` from
``plugins/gpu_model/calibration/nvidia-h200-2026-11-30/attention_long.csv``: PyTorch 2.11's SDPA flash and cuDNN 9.19,
at the 700 W limit): :func:`long_factor`. The paper's bars were taken at a clock fixed at 1,830 MHz (its Appendix
C.1), each after a 1 s rest "to avoid residual power throttling" (Dao-AILab/flash-attention hopper/benchmark_attn.py
at dfe1a59e); at these lengths FA2 stays near the boost clock, cuDNN runs at the power cap.

FP8 attention (a node whose Q, K, V are ``Float8_e4m3fn``: ``astra workload llm --attention-dtype fp8``) is timed
from the same paper's FP8 forward figure (Figure 7: FlashAttention-3, cuDNN and Triton at head dimensions 64, 128
and 256, with and without the causal mask, same setup) on Hopper. See :func:`fp8_efficiency`.

On Blackwell, cuDNN's fused attention (what Transformer Engine runs there; a node naming ``cudnn`` or no kernel)
is timed from NVIDIA's own published cuDNN measurements of the B200, GB200 and GB300, BF16 and FP8, forward and
backward, by sequence length (``data/published_attention_blackwell.csv``, NVIDIA/cudnn-frontend's
``benchmark/sdpa_benchmark_training``): :func:`blackwell_efficiency`. They are causal at head dimension 128; a
non-causal node runs faster by the ratio NVIDIA measured without and with the mask on GB200 / GB300
(``data/published_attention_blackwell_masks.csv``: :func:`blackwell_mask_ratio`); another head dimension is timed
at the same rows (ASSUMPTION: those files are head dim 128; the same benchmark's dsv3 (192/128, causal) and gpt_oss
(64, with a sliding window) rows of GB200/GB300 are not used). A Blackwell node naming ``fa2``
or ``fa3`` keeps the preset's ``attention_efficiency`` (no measurement of those kernels on Blackwell is used).

GB200 trays (platforms ``gb200-nvl72``, ``gb200-nvl72-64``: the B200 preset at a 1,200 W board) time attention at
the B200 rows, on purpose (issue 36): those rows and the GB300 rows are cuDNN 9.13.1 (NGC 25.09, the MLPerf v5.1
GB200 runs' ngc25.09), the GB200 rows cuDNN 9.17.0 (NGC 25.11). The same benchmark on one GPU, GB300, gains from
9.13.1 to 9.17.0 (artifacts/sdpa_fp8_benchmark_results_NVIDIA_GB300.csv at 0b1577c8 and d48a60eb, 8k causal):
BF16 1,716 -> 1,899 forward (x1.107), 1,150 -> 1,293 backward (x1.124); FP8 x1.237 / x0.925; but the benchmark's
timing changed between those commits (CUDA events -> the torch profiler's kernel times after an L2 flush, b372d39),
so not all of it is the newer cuDNN (at 512 keys BF16 forward moves x2.6, more than a release explains; the like-for-
like B200 step 9.10.2 -> 9.13.1 is :mod:`.cudnn_versions`'). GB200's rows lead
B200's by x1.144 / x1.217 (BF16), x1.261 / x1.007 (FP8): most of it the newer cuDNN and timing. What is left (GB200 over
B200 after GB300's version gain: x1.03-1.05 forward, x1.04-1.09 backward from 4k up; x0.59-0.90 at 512-2k, which
no hardware explains) does not separate the board from the software, so no GB200 factor is applied. Attention
takes no board-power factor (``power_clock`` moves GEMMs only), so nothing is counted twice either way. GB300 trays
(``gb300-nvl72``, the B300 preset) already run the GB300 rows.

FP8 attention backward (Transformer Engine's FP8 DPA with ``NVTE_FP8_DPA_BWD=1``, its default: the backward's Q, K,
V, O and dO in FP8) runs cuDNN's fused attention: cuDNN frontend v1.3.0 added ``sdpa_fp8_backward`` ("Added new
operations sdpa_fp8_forward and sdpa_fp8_backward", NVIDIA/cudnn-frontend release notes) and its support matrix lists
fp8 for Hopper and Blackwell "Bprop" (docs.nvidia.com/deeplearning/cudnn/frontend/latest/operations/Attention.html).
FlashAttention-3 has none ("Currently released: FP16 / BF16 forward and backward, FP8 forward", Dao-AILab/
flash-attention README). No published FP8 backward rate was found: ASSUMPTION, cuDNN's FP8 backward loses to its FP8
forward what its BF16 backward loses to its BF16 forward at the same length (Fig. 6(b) over Fig. 5(c)/(d)); see
:func:`fp8_backward_kernel_efficiency`.

That assumption (838 TFLOP/s at 8k without the mask) is replaced where a measurement exists: NVIDIA's own cuDNN
measurements of the H200 (``data/published_attention_hopper.csv``, NVIDIA/cudnn-frontend's
``sdpa_benchmark_training``, cuDNN 9.19, Llama 3.1's 64/8 heads of 128) time FP8 attention on the H200 and the H100
SXM5 (same GH100 compute: ASSUMPTION) by mask and length, forward and backward: :func:`hopper_fp8_efficiency`. The
measured FP8 backward is far slower than assumed (8k: 430 TFLOP/s causal, 636 without the mask). Those rows are
bursts near the boost clock; from 16k keys they are divided by what NVIDIA's BF16 rows lose to the 700 W cap against
this project's (:data:`HOPPER_BURST_OVER_CAP`), so FP8 runs at the cap as BF16 cuDNN does there.

On AMD's MI300X, MI325X (the MI300X's rows: ASSUMPTION) and MI355X, BF16/FP16 attention is timed from AMD's own
aiter FMHA measurements (``data/published_attention_amd.csv``, ROCm/aiter ``op_tests/cpp/mha/README.md``): forward
and the FP32-atomic backward Transformer Engine on ROCm runs, by mask and length (:func:`amd_efficiency`), not at the
preset's assumed ``attention_efficiency``; FP8 attention there keeps the preset's (no measurement used).
"""

from __future__ import annotations

import csv
import functools
import math
from importlib import resources

from astra_sim.errors import ConfigError

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

#: the same figures' rows at the other head dimensions (sources per row in its header and ``source`` column)
HEAD_DIM_ATTENTION = "published_attention_hopper_head_dim.csv"
#: the head dimension of :data:`MEASURED_TFLOPS`
MEASURED_HEAD_DIM = 128


def data_rows(file):
    """The rows of the package's table ``data/FILE`` (its ``#`` lines are the header comment), as dicts."""
    text = (resources.files("astra_gpu_model") / "data" / file).read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


@functools.lru_cache(maxsize=None)
def measured_by_head_dim():
    """``{(kernel, backward, causal): {head_dim: TFLOP/s at SEQ_LENS}}``: :data:`MEASURED_TFLOPS` at 128 and the rows
    of :data:`HEAD_DIM_ATTENTION` (forward at 64 and 256, backward without the mask at 64)."""
    table = {key: {MEASURED_HEAD_DIM: row} for key, row in MEASURED_TFLOPS.items()}
    columns = ("tflops_512", "tflops_1k", "tflops_2k", "tflops_4k", "tflops_8k", "tflops_16k")
    for r in data_rows(HEAD_DIM_ATTENTION):
        key = (r["kernel"], r["pass"] == "bwd", r["mask"] == "causal")
        table[key][int(r["head_dim"])] = tuple(int(r[c]) for c in columns)
    return table


def effective_head_dim(head_dim, head_dim_v=0):
    """The head dimension an attention is looked up at: the mean of its query/key and value widths, the square head
    of the same FLOPs (``ops`` counts 2 x (d_qk + d_v) a query-key pair; the paper's 4 x d is that count at
    d_qk = d_v = d); MLA's 192/128 -> 160. ASSUMPTION: the kernels' efficiency follows the FLOPs a pair (what the
    tensor cores do between the softmax's fixed per-pair work), not the query/key width alone. 0 (unknown):
    :data:`MEASURED_HEAD_DIM`. A check, not used: NVIDIA's cuDNN 9.19 on the H200 (NVIDIA/cudnn-frontend
    benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/dsv3_20260227_034744.csv at afa9f7c0: 128 heads of
    192/128, causal) runs MLA at 522 / 599 / 643 TFLOP/s at 2k / 4k / 8k, x1.08 / 1.01 / 1.00 its own head-dim-128
    rows (:data:`HOPPER_ATTENTION`); the cuDNN rows here give x0.98 at 160, x0.97 at 192."""
    if not head_dim:
        return MEASURED_HEAD_DIM
    return (head_dim + (head_dim_v or head_dim)) / 2


#: the H100 80GB SXM5's dense BF16/FP16 peak (NVIDIA H100 datasheet: 1,979 TFLOPS with sparsity); the paper's
#: "740 TFLOPs/s, 75% of the theoretical maximum" is the same peak
MEASURED_PEAK_TFLOPS = 989.4
#: the paper's shape gives ``batch x heads x seqlen/128`` = 16384/s x 16 x s/128 = 2048 thread blocks of 128
#: queries at every length; on the H100's 132 SMs that is 16 waves, the last one 68 % full
MEASURED_CTAS = 2048
MEASURED_SMS = 132


#: (kernel, causal, head dim) -> FP8 (E4M3) forward TFLOP/s at SEQ_LENS on an H100 80GB SXM5 (arXiv:2407.08608 v2,
#: Figure 7, as the bars are labelled; read from the transcriptions of its panels at
#: https://subtext.edge.nugit.net/image/c33ff2e13f4bb6e7197b8bd6416abdbe6f2123c229c60407af47e89c60dcf3b8 (head dim 128),
#: .../32f2f2fec0fa3843531d75854adc12b775b435f234a01edd2e63c4c71c1ed980 (256) and
#: .../f474e7f251aa9be1b1c05f2d7976fe4f4c44c3e740ec1e6d0e3c04145aa34c16 (256, causal); which panel is causal is
#: told by the short-sequence bars, lower with the mask as in Fig. 5). The causal head-dim-128 panel was not found:
#: :func:`fp8_kernel_tflops` derives it (ASSUMPTION).
FP8_MEASURED_TFLOPS = {
    ("fa3", False, 128): (348, 596, 733, 918, 974, 1008),
    ("fa3", False, 256): (510, 744, 931, 966, 1151, 1171),
    ("fa3", True, 256): (329, 521, 703, 856, 960, 1024),
    ("cudnn", False, 128): (617, 751, 886, 864, 971, 1005),
    ("cudnn", False, 256): (686, 878, 1001, 1087, 1122, 1139),
    ("cudnn", True, 256): (304, 449, 768, 1015, 1056, 1099),
}
#: the head dimensions of the FP8 rows
FP8_HEAD_DIMS = (128, 256)
#: the H100 80GB SXM5's dense FP8 peak (NVIDIA H100 datasheet: 3,958 TFLOPS with sparsity)
MEASURED_FP8_PEAK_TFLOPS = 1978.9


def measured_utilisation():
    """The wave utilisation of the paper's shape on its GPU (2048 / (16 x 132) = 0.970): the model applies its own
    wave quantisation, so the table is divided by this one."""
    waves = -(-MEASURED_CTAS // MEASURED_SMS)
    return MEASURED_CTAS / (waves * MEASURED_SMS)


def is_hopper(gpu):
    """The table was measured on Hopper; another architecture keeps its preset's ``attention_efficiency``."""
    return gpu.architecture.lower().startswith("hopper")


def _interpolate(points, seq_len, lengths=SEQ_LENS):
    """``points`` at ``lengths`` (:data:`SEQ_LENS` by default), linear in log2(sequence length), clamped to the
    measured range."""
    x = math.log2(min(max(seq_len, lengths[0]), lengths[-1]))
    xs = [math.log2(s) for s in lengths]
    for i in range(len(xs) - 1):
        if x <= xs[i + 1]:
            t = (x - xs[i]) / (xs[i + 1] - xs[i])
            return points[i] + t * (points[i + 1] - points[i])
    return points[-1]


def _at_seq(kernel, backward, causal, seq_len, head_dim):
    """TFLOP/s of the row measured at ``head_dim`` (a measured one), at ``seq_len``; the causal backward (not in the
    paper): ASSUMPTION, at each head dimension the backward loses to the mask what the forward loses there."""
    rows = measured_by_head_dim()
    if backward and causal:
        return (_interpolate(rows[(kernel, True, False)][head_dim], seq_len)
                * _interpolate(rows[(kernel, False, True)][head_dim], seq_len)
                / _interpolate(rows[(kernel, False, False)][head_dim], seq_len))
    return _interpolate(rows[(kernel, backward, causal)][head_dim], seq_len)


def kernel_tflops(kernel, backward, causal, seq_len, head_dim=MEASURED_HEAD_DIM):
    """TFLOP/s of ``kernel`` on the H100 SXM5 at ``seq_len`` keys and ``head_dim`` (the paper's shape): the rows
    measured at the head dimensions either side, each interpolated in log2(length), then linearly in the head
    dimension; clamped to the measured head dimensions (64-256 forward, 64-128 backward). The paper has no causal
    backward: ASSUMPTION, the backward loses to the mask what the forward loses at the same length and head
    dimension (backward x causal forward / forward): 286 TFLOP/s for FA2 at 8k, head dim 128. A check, not used:
    Dao-AILab/flash-attention pull request #1791's benchmark_attn.py on a Hopper GPU measured FA2's causal backward at
    head dim 128 and 8k at 287.1 TFLOP/s (its forward 284.1). The model times FA2 and cuDNN past 8k keys at these
    rows times :func:`long_factor` (:func:`kernel_efficiency`): from 16k the H200's measured causal backward replaces
    the assumption (FA2 318-323 TFLOP/s at 16k-128k, where it gives 291)."""
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    dims = sorted(measured_by_head_dim()[(kernel, backward, False)])
    return _by_head_dim(dims, head_dim, lambda d: _at_seq(kernel, backward, causal, seq_len, d))


def _by_head_dim(dims, head_dim, at):
    """``at(d)`` at ``head_dim``: at a measured head dimension (``dims``, sorted) itself, linear between the two either
    side, clamped to the measured ones outside."""
    dim = min(max(head_dim, dims[0]), dims[-1])
    if dim in dims:
        return at(dim)
    hi = next(d for d in dims if d > dim)
    lo = dims[dims.index(hi) - 1]
    t = (dim - lo) / (hi - lo)
    low, high = at(lo), at(hi)
    return low + t * (high - low)


#: FA2 (SDPA flash) and cuDNN 9.19 BF16 attention measured on this project's H200 at 16k-128k keys, head dims 64 and
#: 128, at the 700 W limit (plugins/gpu_model/calibration/nvidia-h200-2026-11-30/attention_long.csv, distilled by
#: fit/check_attention_long.py; the file's header has the rule and the clocks)
LONG_ATTENTION = "measured_attention_hopper_long.csv"
#: the paper's bars are used up to this many keys; the measurement from :data:`LONG_FROM` on; log-linear between
PAPER_UNTIL, LONG_FROM = 8192, 16384


@functools.lru_cache(maxsize=None)
def long_rows():
    """``{(kernel, backward, causal, head_dim): (lengths, TFLOP/s in full waves)}`` from :data:`LONG_ATTENTION` (each
    shape's measured rate over its wave utilisation on the H200's 132 SMs, the median over the shapes)."""
    points = {}
    for r in data_rows(LONG_ATTENTION):
        key = (r["kernel"], r["pass"] == "bwd", r["mask"] == "causal", int(r["head_dim"]))
        points.setdefault(key, []).append((int(r["seq_k"]), float(r["tflops_full_waves"])))
    return {key: tuple(zip(*sorted(p))) for key, p in points.items()}


#: SDPA's backend names -> the model's kernel names
SDPA_KERNELS = {"flash": "fa2", "cudnn": "cudnn"}
#: the rule's smallest grid: the FlashAttention-3 paper's 2,048 thread blocks of 128 queries (the regime of the rows the
#: measurements extend; the model quantises smaller grids itself)
TABLE_MIN_CTAS = 2048


def measured_table(rows, label, min_keys=0, min_ctas=TABLE_MIN_CTAS, sm_count=132):
    """The rule that distils a measurement run's SDPA rows (``measure_gpu*.py``'s attention CSVs) into the model's
    tables (:data:`LONG_ATTENTION`, ``cudnn_versions.HOPPER_919``): rows of at least ``min_ctas`` thread blocks of 128
    queries and ``min_keys`` keys, grouped by (kernel, pass, mask, head dimension, key length), each group's median
    TFLOP/s and the median of each shape's TFLOP/s over its wave utilisation on ``sm_count`` SMs (thread blocks /
    (waves x SMs): the rate the model's own wave quantisation starts from). ``[(kernel, pass, mask, head_dim, seq_k,
    TFLOP/s, TFLOP/s in full waves, "; "-joined label(row) of the shapes)]``, sorted."""
    import statistics

    groups = {}
    for r in rows:
        b, hq, sq, sk = (int(r[c]) for c in ("batch", "heads_q", "seq_q", "seq_kv"))
        ctas = b * hq * -(-sq // 128)
        if ctas < min_ctas or sk < min_keys:
            continue
        key = (SDPA_KERNELS[r["backend"]], r["pass"], "causal" if r["causal"] == "True" else "none",
               int(r["head_dim"]), sk)
        utilisation = ctas / (-(-ctas // sm_count) * sm_count)
        groups.setdefault(key, []).append((float(r["tflops"]), float(r["tflops"]) / utilisation, label(r)))
    return [(*key, statistics.median(v[0] for v in vs), statistics.median(v[1] for v in vs),
             "; ".join(v[2] for v in vs)) for key, vs in sorted(groups.items())]


def long_factor(kernel, backward, causal, seq_len, head_dim=MEASURED_HEAD_DIM):
    """How much faster (> 1) or slower FA2 and cuDNN BF16 attention run at ``seq_len`` keys than the paper's rows
    (:func:`kernel_tflops`: their 16k bar clamped above, the causal backward ASSUMPTION) say: 1 up to 8k keys; from 16k
    the H200's measured TFLOP/s (:data:`LONG_ATTENTION`, log2-interpolated, clamped to its lengths) over the paper's;
    between 8k and 16k, log-linear from the paper's 8k rate to the measured 16k one. By head dimension: the factor of
    each measured one (128; 64 causal only), linear between, clamped outside (below 64: 64's; above 128, and 64
    without the mask: 128's, ASSUMPTION). 1 for FA3 (not measured). Why the rates differ (head dim 128): the causal
    backward loses nothing to the mask at these lengths (FA2 318-323 TFLOP/s against the 291 assumed), cuDNN 9.19 at
    the power cap is faster than the paper's 2024 cuDNN (forward 555-684 against 539-595), FA2's forward without the
    mask is slower (344-356 against 370)."""
    if seq_len <= PAPER_UNTIL:
        return 1.0
    rows = long_rows()
    dims = sorted(d for (k, b, c, d) in rows if (k, b, c) == (kernel, bool(backward), bool(causal)))
    if not dims:
        return 1.0
    return _by_head_dim(dims, head_dim, lambda d: _long_factor_at(kernel, backward, causal, seq_len, d))


def _long_factor_at(kernel, backward, causal, seq_len, head_dim):
    """:func:`long_factor` at a measured head dimension (``seq_len`` above :data:`PAPER_UNTIL`)."""
    lengths, tflops = long_rows()[(kernel, bool(backward), bool(causal), head_dim)]
    # the measured rate in the paper's terms: in full waves, times the paper's own wave utilisation
    measured = [t * measured_utilisation() for t in tflops]
    paper = kernel_tflops(kernel, backward, causal, seq_len, head_dim)
    if seq_len >= LONG_FROM:
        return _interpolate(measured, seq_len, lengths) / paper
    start = kernel_tflops(kernel, backward, causal, PAPER_UNTIL, head_dim)
    t = math.log2(seq_len / PAPER_UNTIL) / math.log2(LONG_FROM / PAPER_UNTIL)
    return (start + t * (_interpolate(measured, LONG_FROM, lengths) - start)) / paper


def hopper_cudnn_factor(table, backward, causal, seq_len, head_dim=MEASURED_HEAD_DIM):
    """How much faster (> 1) the cuDNN release ``table`` (:mod:`.cudnn_versions`' Hopper state) runs than the paper's
    bars (:func:`kernel_tflops`, the causal backward its ASSUMPTION): 1 at :data:`.cudnn_versions.HOPPER_PAPER` (the
    paper's own cuDNN 9.1.1); at :data:`.cudnn_versions.HOPPER_919` the measured TFLOP/s (in the paper's wave terms)
    over the paper's at each measured key length, log2-interpolated, clamped outside the measured lengths (2k-128k
    causal; without the mask only 16k-32k was measured: ASSUMPTION, shorter keys keep 16k's factor, e.g. forward x1.14,
    backward x0.98). By head dimension as :func:`long_factor` (128 and, causal, 64 measured; linear between,
    clamped)."""
    from astra_gpu_model.cudnn_versions import HOPPER_PAPER, hopper_rows

    if table == HOPPER_PAPER:
        return 1.0
    rows = hopper_rows(table)
    dims = sorted(d for (b, c, d) in rows if (b, c) == (bool(backward), bool(causal)))

    def at(d):
        lengths, tflops = rows[(bool(backward), bool(causal), d)]
        factors = [t * measured_utilisation() / kernel_tflops("cudnn", backward, causal, n, d)
                   for n, t in zip(lengths, tflops)]
        return _interpolate(factors, seq_len, lengths)
    return _by_head_dim(dims, head_dim, at)


def kernel_efficiency(kernel, backward, causal, seq_len, head_dim=MEASURED_HEAD_DIM, cudnn_table=None):
    """The fraction of peak the model times ``kernel`` at (before its own wave quantisation): the measured TFLOP/s
    (:func:`kernel_tflops` x :func:`long_factor`) over the H100 SXM5's peak, over the paper's wave utilisation (the
    same 0.970 at every head dimension: 32 heads of 64 give 4096 blocks of 128 queries, 32 waves of 132 SMs; 8 of
    256, 1024 blocks, 8 waves). ``cudnn_table`` (``--cudnn-version`` on the H100 SXM5 / H200:
    :func:`.cudnn_versions.hopper_table`): cuDNN at that release, :func:`hopper_cudnn_factor` in place of
    :func:`long_factor`."""
    if kernel == "cudnn" and cudnn_table is not None:
        factor = hopper_cudnn_factor(cudnn_table, backward, causal, seq_len, head_dim)
    else:
        factor = long_factor(kernel, backward, causal, seq_len, head_dim)
    return (kernel_tflops(kernel, backward, causal, seq_len, head_dim) * factor / MEASURED_PEAK_TFLOPS
            / measured_utilisation())


def _fp8_row(kernel, causal, head_dim):
    """The FP8 TFLOP/s at :data:`SEQ_LENS` of ``kernel`` at head dim 128 or 256. Causal at 128 is not in the figure:
    ASSUMPTION, it loses to the mask what 256 loses (128 without the mask x 256 causal / 256 without)."""
    if causal and head_dim == 128:
        return tuple(a * c / n for a, c, n in zip(FP8_MEASURED_TFLOPS[(kernel, False, 128)],
                                                   FP8_MEASURED_TFLOPS[(kernel, True, 256)],
                                                   FP8_MEASURED_TFLOPS[(kernel, False, 256)]))
    return FP8_MEASURED_TFLOPS[(kernel, causal, head_dim)]


def fp8_kernel_tflops(kernel, causal, seq_len, head_dim):
    """FP8 forward TFLOP/s of ``kernel`` (``fa3`` or ``cudnn``) on the H100 SXM5 at ``seq_len`` keys: the head-dim-128
    row up to 128, the 256 row from 256, linear in the head dimension between (MLA's 192: halfway)."""
    lo, hi = (_interpolate(_fp8_row(kernel, causal, dim), seq_len) for dim in FP8_HEAD_DIMS)
    t = min(max((head_dim - FP8_HEAD_DIMS[0]) / (FP8_HEAD_DIMS[1] - FP8_HEAD_DIMS[0]), 0.0), 1.0)
    return lo + t * (hi - lo)


def fp8_kernel_efficiency(kernel, causal, seq_len, head_dim):
    """The fraction of the FP8 peak ``kernel`` reaches (before the model's wave quantisation): the measured TFLOP/s
    over the H100 SXM5's FP8 peak, over the paper's wave utilisation (the same at head dim 256: 8 heads of 256 give
    1024 thread blocks, 8 waves of 132, 97 %)."""
    return fp8_kernel_tflops(kernel, causal, seq_len, head_dim) / MEASURED_FP8_PEAK_TFLOPS / measured_utilisation()


def fp8_backward_kernel_efficiency(causal, seq_len, head_dim):
    """The fraction of the FP8 peak cuDNN's FP8 attention backward reaches (before the model's wave quantisation).
    ASSUMPTION (no published FP8 backward rate): its FP8 forward's (Fig. 7) times what the backward keeps of the
    forward in BF16 (cuDNN's bars: Fig. 6(b) over Fig. 5(c), causal through :func:`kernel_tflops`'s own assumption).
    No mask, 8k, head dim 128: 971 x 518 / 600 = 838 TFLOP/s."""
    keeps = kernel_tflops("cudnn", True, causal, seq_len) / kernel_tflops("cudnn", False, causal, seq_len)
    return fp8_kernel_efficiency("cudnn", causal, seq_len, head_dim) * keeps


def check_fp8_attention(gpu, kernel, backward):
    """Refuse FP8 attention (one line, ConfigError) where nothing times it: a GPU without FP8 tensor cores
    (``tensor_tflops.fp8``: A100, MI250...), FlashAttention-2 (no FP8 kernel), or an FP8 backward named
    FlashAttention-3 (FA3 has an FP8 forward only; TE's FP8 backward is cuDNN's)."""
    if not gpu.tensor_tflops.get("fp8"):
        raise ConfigError(f"GPU {gpu.name} has no FP8 tensor cores (no tensor_tflops.fp8): a trace of `astra workload "
                          "llm --attention-dtype fp8` needs a GPU with FP8 (e.g. H100, H200, B200, GB200, MI300X)")
    if kernel == "fa2":
        raise ConfigError("FP8 attention node names attention_kernel fa2: FlashAttention-2 has no FP8 kernel (fa3 or "
                          "cudnn)")
    if backward and kernel == "fa3":
        raise ConfigError("FP8 attention backward node names attention_kernel fa3: FlashAttention-3 has an FP8 "
                          "forward only (Dao-AILab/flash-attention README); an FP8 backward is cuDNN's "
                          "(attention_kernel cudnn, Transformer Engine's FP8 DPA)")


def fp8_efficiency(gpu, kernel, causal, seq_len, head_dim, backward=False, cudnn_version=None):
    """The fraction of the FP8 peak an FP8 attention runs at on ``gpu``: on a Blackwell GPU with published cuDNN
    measurements, theirs (:func:`blackwell_efficiency`: FP8 attention there is cuDNN's, whatever the node names);
    on the H200 and H100 SXM5, cuDNN's measured H200 rates (:func:`hopper_fp8_efficiency`; a forward naming fa3
    keeps Figure 7's); on other Hopper GPUs (and a Blackwell GPU without them: ASSUMPTION, Hopper's efficiency at
    its FP8 peak) the forward at Figure 7's rate of ``kernel`` (``cudnn``, else FlashAttention-3's), the backward at
    :func:`fp8_backward_kernel_efficiency` (cuDNN's, whatever the node names: the only FP8 backward); on another GPU
    with FP8 (Ada, AMD CDNA 3/4) the preset's ``attention_efficiency`` (ASSUMPTION: no FP8 attention measurement of
    those GPUs is used). On the H100 SXM5 / H200 ``--cudnn-version`` does not move FP8 attention: NVIDIA's H200 rows
    (cuDNN 9.19.1) are the only FP8 backward measured, and the paper's cuDNN 9.1.1 (Figure 7) has no FP8 backward and
    no causal head-dim-128 panel, so a 9.1.1 state would be mostly ASSUMPTION (its backward 838 TFLOP/s at 8k without
    the mask, where 9.19.1 measures 636)."""
    arch = gpu.architecture.lower()
    measured = blackwell_efficiency(gpu, "cudnn", "fp8", backward, seq_len, causal, cudnn_version)
    if measured is None:
        measured = hopper_fp8_efficiency(gpu, kernel, causal, backward, seq_len, head_dim)
    if measured is not None:
        return measured
    if arch.startswith("hopper") or arch.startswith("blackwell"):
        if backward:
            return fp8_backward_kernel_efficiency(causal, seq_len, head_dim)
        return fp8_kernel_efficiency("cudnn" if kernel == "cudnn" else "fa3", causal, seq_len, head_dim)
    return gpu.attention_efficiency


#: Published attention measurements shipped with the plugin (sources in each file's header): NVIDIA's cuDNN SDPA on
#: the H200, AMD's aiter FMHA on the MI300X and MI355X, NVIDIA's cuDNN SDPA on Blackwell. A table without a
#: ``precision`` column measured BF16; one without a ``mask`` column, causal attention.
HOPPER_ATTENTION = "published_attention_hopper.csv"
AMD_ATTENTION = "published_attention_amd.csv"
BLACKWELL_ATTENTION = "published_attention_blackwell.csv"
#: each benchmark's shape: batch 1, this many query heads (of dimension 128), so heads x s/128 thread blocks of 128
#: queries (what its wave utilisation on the measured GPU is computed from)
BENCH_HEADS = {HOPPER_ATTENTION: 64, AMD_ATTENTION: 64, BLACKWELL_ATTENTION: 128,
               "published_attention_blackwell_cudnn_9.10.2.csv": 128}  # cudnn_versions.MEASURED's older rows


@functools.lru_cache(maxsize=None)
def published_attention(file, gpu_column="preset"):
    """``{GPU: {(precision, causal, "fwd" | "bwd"): (lengths, tflops)}}`` from the shipped table ``file``, its GPUs
    named by column ``gpu_column`` (``preset``, or ``measured_on`` in :data:`BLACKWELL_MASKS`)."""
    table = {}
    for r in data_rows(file):
        for way in ("fwd", "bwd"):
            key = (r.get("precision", "bf16"), r.get("mask", "causal") == "causal", way)
            table.setdefault(r[gpu_column], {}).setdefault(key, []).append((int(r["seq_len"]),
                                                                            float(r[f"{way}_tflops"])))
    return {preset: {key: tuple(zip(*sorted(points))) for key, points in rows.items()} for preset, rows in table.items()}


def published_efficiency(file, gpu, precision, causal, backward, seq_len):
    """The fraction of ``gpu``'s ``precision`` peak the attention measured in ``file`` reaches on it, by mask and key
    length (before the model's wave quantisation): the measured TFLOP/s over the preset's peak, over the benchmark's
    wave utilisation on the preset's SMs (e.g. 64 heads at 8k: 4096 blocks, 32 waves of 132 SMs, 97 %). None where the
    table has no rows for the preset or the preset no such peak."""
    rows = published_attention(file).get(gpu.name)
    peak = gpu.tensor_tflops.get(precision)
    if rows is None or not peak:
        return None
    lengths, tflops = rows[(precision, bool(causal), "bwd" if backward else "fwd")]
    length = min(max(seq_len, lengths[0]), lengths[-1])
    ctas = BENCH_HEADS[file] * -(-length // 128)
    utilisation = ctas / (-(-ctas // gpu.sm_count) * gpu.sm_count)
    return _interpolate(tflops, seq_len, lengths) / peak / utilisation


#: backward? -> NVIDIA's BF16 cuDNN TFLOP/s (:data:`HOPPER_ATTENTION`: bursts, each case in its own subprocess, 10
#: iterations, near the 1,980 MHz boost clock) over this project's on the same shape at the 700 W cap
#: (``calibration/nvidia-h200-2026-11-30/attention_long.csv``: cuDNN 9.19's kernels settle at 1,672 MHz), the median
#: per pass of ``fit/check_fp8_cap.py``'s rule (same heads 64/8, head dim 128, mask and key length, 16k-128k keys).
#: Only one shape qualifies: causal 32k, 688 / 583.2 forward, 581 / 536.8 backward (ours in NVIDIA's s^2 / 2 count).
#: The forward's is the clock ratio (1,980 / 1,672 = 1.18); the backward's 82 ms kernel is likely part-capped in
#: NVIDIA's run too.
HOPPER_BURST_OVER_CAP = {False: 1.179704, True: 1.082322}


def hopper_fp8_cap_factor(backward, seq_len):
    """What NVIDIA's FP8 rows keep at the 700 W cap (< 1). ASSUMPTION: a cuDNN FP8 attention kernel in a training step
    draws at least what BF16 cuDNN does (more FLOP/s on the same tensor cores), so it settles at the cap as BF16 does
    from 16k keys (the power controller holds each kernel class at its settled clock within ~100 ms: the mix phase of
    ``calibration/nvidia-h200-2026-11-30/README.md``), and loses to it what BF16 loses on NVIDIA's rows,
    1 / :data:`HOPPER_BURST_OVER_CAP`. As :func:`long_factor` does for BF16: 1 up to 8k keys (where BF16 cuDNN is the
    FA3 paper's bars at a fixed 1,830 MHz, not capped either), the full factor from 16k, log-linear between."""
    if seq_len <= PAPER_UNTIL:
        return 1.0
    t = min(math.log2(seq_len / PAPER_UNTIL) / math.log2(LONG_FROM / PAPER_UNTIL), 1.0)
    return 1.0 + t * (1.0 / HOPPER_BURST_OVER_CAP[bool(backward)] - 1.0)


def hopper_fp8_efficiency(gpu, kernel, causal, backward, seq_len, head_dim):
    """The fraction of ``gpu``'s FP8 peak cuDNN's FP8 attention reaches on it, from NVIDIA's measurements of the H200
    (:data:`HOPPER_ATTENTION`) times :func:`hopper_fp8_cap_factor` (their bursts at the 700 W cap from 16k keys);
    None where there are none (no rows for the preset, a head dimension above the measured 128) or for a forward
    naming ``fa3`` (FlashAttention-3's own FP8 forward: Fig. 7)."""
    if head_dim > 128 or (kernel == "fa3" and not backward):
        return None
    measured = published_efficiency(HOPPER_ATTENTION, gpu, "fp8", causal, backward, seq_len)
    return None if measured is None else measured * hopper_fp8_cap_factor(backward, seq_len)


def amd_efficiency(gpu, causal, backward, seq_len):
    """The fraction of ``gpu``'s BF16 peak a BF16/FP16 attention reaches on an AMD GPU with AMD's published aiter
    measurements (:data:`AMD_ATTENTION`: the forward and the FP32-atomic backward Transformer Engine on ROCm runs);
    None for a preset without rows. Every head dimension is timed at the 128 rows (ASSUMPTION)."""
    return published_efficiency(AMD_ATTENTION, gpu, "bf16", causal, backward, seq_len)


def blackwell_efficiency(gpu, kernel, dtype, backward, seq_len, causal=True, cudnn_version=None):
    """The fraction of ``gpu``'s ``dtype`` (``bf16`` or ``fp8``) peak cuDNN's fused attention reaches on it, from
    NVIDIA's published measurements of that GPU (:data:`BLACKWELL_ATTENTION`, causal); without the mask those rows
    times :func:`blackwell_mask_ratio`. None where there are none (not Blackwell, no rows for the preset) or the node
    names ``fa2`` / ``fa3``. ``cudnn_version`` (``--cudnn-version``): the rows measured at that cuDNN release, or the
    newest measured below it (:func:`.cudnn_versions.attention_file`)."""
    if kernel not in (None, "cudnn") or not gpu.architecture.lower().startswith("blackwell"):
        return None
    file = BLACKWELL_ATTENTION
    if cudnn_version is not None:  # --cudnn-version: the rows measured at (or newest below) that release
        from astra_gpu_model.cudnn_versions import attention_file

        file = (attention_file(gpu.name, cudnn_version) or (file,))[0]
    measured = published_efficiency(file, gpu, dtype, True, backward, seq_len)
    if measured is None or causal:
        return measured
    return measured * blackwell_mask_ratio(gpu, dtype, backward, seq_len)


#: NVIDIA's cuDNN 9.22 measurements of GB200 and GB300 with and without the causal mask (sources in its header)
BLACKWELL_MASKS = "published_attention_blackwell_masks.csv"
#: the Blackwell preset -> the GPU whose measurements give its ratio (B200 takes GB200's, B300 GB300's: ASSUMPTION,
#: the same dies; no such measurement of the HGX parts was found)
MASK_RATIO_GPU = {"GB200": "GB200", "B200": "GB200", "B300": "GB300"}


def blackwell_mask_ratio(gpu, dtype, backward, seq_len):
    """How much faster cuDNN runs attention without the causal mask than with it on ``gpu`` at ``seq_len`` keys:
    NVIDIA's measured no-mask over causal TFLOP/s (both interpolated in log length, clamped to 2k-32k) of the same
    cuDNN on the same GPU (:data:`BLACKWELL_MASKS`; e.g. GB200 BF16 forward at 2k: 1,433 / 1,097 = 1.306). This
    replaces the ASSUMPTION that a non-causal node runs at the causal rows (the rows of
    :data:`BLACKWELL_ATTENTION` are causal only); 1 for a preset without a measured counterpart."""
    measured = MASK_RATIO_GPU.get(gpu.name)
    if measured is None:
        return 1.0
    table, way = published_attention(BLACKWELL_MASKS, "measured_on")[measured], "bwd" if backward else "fwd"
    lengths, none = table[(dtype, False, way)]
    _, causal = table[(dtype, True, way)]
    return _interpolate(none, seq_len, lengths) / _interpolate(causal, seq_len, lengths)


#: NVIDIA's cuDNN measurements of attention with a sliding window (sources in its header)
WINDOW_ATTENTION = "published_attention_window.csv"

#: (kernel, backward) -> ((largest head dim, kBlockM, kBlockN), ...): the BF16 tiles FlashAttention runs a sliding
#: window ("local") with on Hopper, no dropout or softcap, Dao-AILab/flash-attention at 0251105a. FA3 forward:
#: hopper/tile_size.h tile_size_fwd_sm90 (is_local); FA3 backward: hopper/flash_bwd_launch_template.h
#: run_mha_bwd_hdim{64,96,128,192,256}, Arch >= 90; FA2 (sm90 runs the sm80 code): csrc/flash_attn/src/
#: flash_fwd_launch_template.h run_mha_fwd_hdim* (not sm8x, no dropout; 256: the H100's smem takes the 64 x 64 branch)
#: and flash_bwd_launch_template.h run_mha_bwd_hdim* (max_smem_per_block >= 144 KB / 176 KB: the H100's).
#: A head dimension is rounded up to the next instantiated one (static_switch.h HEADDIM_SWITCH); above 256: 256's.
WINDOW_TILES = {
    ("fa3", False): ((64, 192, 128), (96, 192, 128), (128, 128, 128), (192, 128, 96), (256, 128, 64)),
    ("fa3", True): ((64, 128, 128), (96, 64, 128), (128, 64, 128), (192, 64, 96), (256, 64, 80)),
    ("fa2", False): ((64, 128, 128), (96, 128, 64), (128, 128, 64), (192, 128, 64), (256, 64, 64)),
    ("fa2", True): ((64, 128, 128), (96, 64, 128), (128, 64, 128), (192, 64, 64), (256, 64, 64)),
}


def window_tiles(kernel, backward, head_dim):
    """``(kBlockM, kBlockN)`` of ``kernel`` (``fa2``/``fa3``) on a sliding window at ``head_dim`` (:data:`WINDOW_TILES`)."""
    rows = WINDOW_TILES[(kernel, bool(backward))]
    return next(((m, n) for dim, m, n in rows if head_dim <= dim), rows[-1][1:])


def _div0(a, b):
    """C's ``a / b`` on ints (toward zero), as block.h divides."""
    return abs(a) // b * (1 if a >= 0 else -1)


@functools.lru_cache(maxsize=256)
def band_tiles(seq_len, window, block_m, block_n, backward=False):
    """``(tiles, loop_len)`` FlashAttention executes a head of a band of ``seq_len`` queries over as many keys, each
    query seeing ``window`` keys ending at its own (window_size = (window - 1, 0)). Forward: query tile m runs the key
    tiles [n_min, n_max) of hopper/block.h ``get_n_block_min_max`` (FA2: flash_fwd_kernel.h lines 90-95, the same
    range), whole tiles that touch the band, masked inside; backward: key tile n runs the query tiles of
    ``get_m_block_min_max`` (FA2: flash_bwd_kernel.h lines 103-105, 318-320). ``loop_len``: the keys (backward:
    queries) a tile's loop iterates on average, the length its rate is looked up at."""
    left = window - 1  # (keys before a query; none after it: right = 0)
    if backward:  # key tiles over the query tiles they meet: the forward's range with the tiles and sides swapped
        return _tile_ranges(seq_len, block_n, block_m, 0, left)
    return _tile_ranges(seq_len, block_m, block_n, left, 0)


def _tile_ranges(seq_len, outer, inner, before, after):
    """``(tiles, loop_len)``: for each tile of ``outer`` rows, the ``inner`` tiles its band reaches, ``before`` rows
    ahead of it and ``after`` past it (block.h's ``[max(0, (i outer - before) / inner), min(ceil(s / inner),
    ceil(((i + 1) outer + after) / inner)))``), summed; ``loop_len`` the inner rows a tile iterates on average."""
    blocks = -(-seq_len // outer)
    tiles = 0
    for i in range(blocks):
        hi = min(-(-seq_len // inner), -(-((i + 1) * outer + after) // inner))
        lo = max(0, _div0(i * outer - before, inner))
        tiles += max(0, hi - lo)
    return tiles, tiles * inner / blocks


def band_pairs(seq_len, window):
    """Query-key pairs a head of the band computes usefully (NVIDIA's benchmark_single_sdpa.py ``flops()``):
    window (window + 1) / 2 + (s - window) window; a sequence no longer than the window: the causal triangle."""
    if seq_len <= window:
        return seq_len * (seq_len + 1) // 2
    return window * (window + 1) // 2 + (seq_len - window) * window


@functools.lru_cache(maxsize=None)
def window_rows():
    """``{(preset, window): {"fwd" | "bwd": (lengths, tflops), "heads": batch x heads}}`` from
    :data:`WINDOW_ATTENTION`."""
    points = {}
    for r in data_rows(WINDOW_ATTENTION):
        s = int(r["seq_len"])
        points.setdefault((r["preset"], int(r["window"])), []).append(
            (s, float(r["fwd_tflops"]), float(r["bwd_tflops"]), int(r["batch"]) * int(r["heads"])))
    table = {}
    for key, rows in points.items():
        rows.sort()
        table[key] = {"fwd": ([r[0] for r in rows], [r[1] for r in rows]),
                      "bwd": ([r[0] for r in rows], [r[2] for r in rows]), "heads": rows[0][3]}
    return table


def window_efficiency(gpu, window, backward, seq_len):
    """The fraction of ``gpu``'s BF16 peak cuDNN reaches on a band of ``window`` keys over ``seq_len`` queries, in the
    band's useful FLOPs (:func:`band_pairs`), from NVIDIA's measurement of that window on that GPU
    (:data:`WINDOW_ATTENTION`; interpolated in log2 length, clamped to the measured 2k-32k), over the benchmark's
    wave utilisation on the preset's SMs (batch x heads x s/128 thread blocks); None where there is none (another
    window, another preset)."""
    rows = window_rows().get((gpu.name, window))
    peak = gpu.tensor_tflops.get("bf16")
    if rows is None or not peak:
        return None
    lengths, tflops = rows["bwd" if backward else "fwd"]
    ctas = rows["heads"] * -(-min(max(seq_len, lengths[0]), lengths[-1]) // 128)
    utilisation = ctas / (-(-ctas // gpu.sm_count) * gpu.sm_count)
    return _interpolate(tflops, seq_len, lengths) / peak / utilisation


def band_work(gpu, kernel, backward, seq_len, window, head_dim, bf16=True):
    """How a marked band (``attention_window``) is timed: ``("measured", pairs, efficiency)`` where NVIDIA measured
    cuDNN at that window on ``gpu`` (BF16; ``pairs`` the useful ones a head, the efficiency in those terms), else
    ``("tiles", pairs, loop_len)``: the executed pairs a head (tiles x kBlockM x kBlockN, :func:`band_tiles`) to be
    timed at the kernel's dense rate without the mask at ``loop_len`` keys. FA2 and FA3 with their own tiles; cuDNN
    without a measurement: FlashAttention-3's tiles (ASSUMPTION: cuDNN's tiles for a band are not published; NVIDIA's
    GB200 window-128 rows, 0.28-0.30 of the window-1024 useful rate at 2k-16k, show at least that much waste).
    ``bf16``: the node runs BF16/FP16 (the measurements' precision; FP8 takes the tiles)."""
    if kernel == "cudnn" and bf16:
        measured = window_efficiency(gpu, window, backward, seq_len)
        if measured is not None:
            return "measured", band_pairs(seq_len, window), measured
    block_m, block_n = window_tiles("fa2" if kernel == "fa2" else "fa3", backward, head_dim)
    tiles, loop_len = band_tiles(seq_len, window, block_m, block_n, backward)
    return "tiles", tiles * block_m * block_n, loop_len


#: measured paged decode attention's fitted fixed time and HBM rate per GPU (fit/fit_decode_attention.py)
DECODE_FIT = "decode_attention_fit.json"
#: the architecture (the preset's ``architecture`` up to its first space) -> the measured GPU whose fit it takes
#: (the same SMs and front end: ASSUMPTION for the other Hopper and GA100 parts; their own HBM sets the rate)
DECODE_FIT_GPU = {"ampere": "A100-SXM4-80GB", "hopper": "H100-SXM5-80GB"}


@functools.lru_cache(maxsize=None)
def decode_fit():
    """``{measured preset: {"floor_us", "hbm_fraction", ...}}`` from :data:`DECODE_FIT`."""
    import json

    text = (resources.files("astra_gpu_model") / "data" / DECODE_FIT).read_text(encoding="utf-8")
    return json.loads(text)["gpus"]


def decode_params(gpu):
    """``(floor_s, bytes_per_s)`` of paged decode attention on ``gpu`` (a query of one token a sequence against its
    KV cache), or None where no measurement covers its architecture (Ada, Blackwell, AMD: the node keeps the
    general attention model). Measured (``data/measured_decode_attention.csv``): on an A100, FlashInfer's
    BatchDecodeWithPagedKVCache (microsoft/vidur's Llama-3-8B profile, 53 rows), on an H100 SXM, FlashAttention-2's
    paged batch decode (microsoft/onnxruntime PR #21414's nvbench table, 4 rows). Each thread block takes one
    (sequence, KV head) group and a small batch is split along the keys and merged in a second pass, so a few MB
    cost far more than their bytes: 14.8 us + bytes at 78.7 % of HBM on the A100, 16.5 us + bytes at 80.1 % on the
    H100. The kernel the engine runs (FlashInfer, FlashAttention-2, TurboMind's or TensorRT-LLM's own) is not
    told apart: the architecture's measured kernel stands for all (ASSUMPTION)."""
    measured = DECODE_FIT_GPU.get(gpu.architecture.split(" ", 1)[0].lower())
    if measured is None:
        return None
    fit = decode_fit()[measured]
    return fit["floor_us"] * 1e-6, fit["hbm_fraction"] * gpu.hbm_bytes_per_s


__all__ = ["AMD_ATTENTION", "DECODE_FIT", "DECODE_FIT_GPU", "decode_fit", "decode_params", "amd_efficiency", "BENCH_HEADS", "BLACKWELL_ATTENTION", "BLACKWELL_MASKS",
           "blackwell_mask_ratio", "HOPPER_ATTENTION", "MASK_RATIO_GPU",
           "hopper_fp8_efficiency", "blackwell_efficiency", "published_attention", "published_efficiency",
           "FP8_MEASURED_TFLOPS", "KERNELS", "check_fp8_attention", "fp8_backward_kernel_efficiency",
           "fp8_efficiency", "fp8_kernel_efficiency", "fp8_kernel_tflops", "MEASURED_TFLOPS", "is_hopper",
           "kernel_efficiency", "kernel_tflops", "measured_utilisation", "HEAD_DIM_ATTENTION",
           "MEASURED_HEAD_DIM", "effective_head_dim", "measured_by_head_dim", "WINDOW_ATTENTION", "WINDOW_TILES",
           "band_pairs", "band_tiles", "band_work", "window_efficiency", "window_rows", "window_tiles", "LONG_ATTENTION",
           "long_factor", "long_rows", "hopper_cudnn_factor", "HOPPER_BURST_OVER_CAP",
           "hopper_fp8_cap_factor", "data_rows", "measured_table", "SDPA_KERNELS", "TABLE_MIN_CTAS"]
