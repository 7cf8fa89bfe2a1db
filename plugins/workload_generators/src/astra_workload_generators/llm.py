"""``astra workload llm``: Chakra traces of one transformer step, training or inference, dense or
mixture-of-experts (Megatron-style parallelism).

Rank layout: ``rank = t + TP * (d + DP * p)`` (tensor-parallel index fastest, then data-parallel, then pipeline
stage). Communicator groups (``PREFIX.groups.json``): TP groups first (ids 1..), then DP groups, then PP groups;
groups of size 1 are not written and get no collectives.

FLOPs (what the COMP nodes' ``num_ops`` add up to over all ranks, without recomputation)::

    6 * P * tokens + 12 * L * s^2 * h * sequences

with ``P = L * (h*(h + 2*kv*d) + h*h + m*h*f) + V*h`` (matmul weights: QKV, output projection, FFN with m = 3
for gated (SwiGLU) FFNs and 2 otherwise, plus the LM head; no biases, norms or embedding lookup) and the
attention term ``4*b*s^2*h`` forward + ``8*b*s^2*h`` backward per layer (QK^T and AV; model FLOPs without the
causal-mask saving, as Megatron-LM counts them). The flash-attention nodes carry ``is_causal`` (``causal``, default
on) in ``inputs.values``, so the gpu compute model times only the lower triangle that FlashAttention computes.

Mixture of experts (``experts`` > 0): every layer's FFN is ``top_k`` of ``experts`` routed experts (inner size
``moe_ffn``) plus ``shared_experts`` always-on experts, except the first ``moe_dense_layers``, which keep a dense
FFN of ``ffn_hidden`` (DeepSeekMoE); P above becomes the *activated* parameters (attention + (top_k + shared)
experts per MoE layer + dense FFNs + LM head; the router's h*E weights are counted). Expert parallelism
``ep`` is carved out of DP (Megatron): ``d = e + EP*q`` with EP index ``e = d % EP``; EP groups are the EP
consecutive DP indices ``q*EP .. q*EP+EP-1`` (same t, p), expert-data-parallel groups the DP indices with the same
``e``. Per MoE layer and micro-batch an all-to-all dispatch before and a combine after the expert GEMMs (again in
backward), each ``tokens_per_microbatch * top_k * h * bytes`` per rank (EP = 1: none). Routing is balanced
(every expert gets ``tokens * top_k / experts`` of a rank's token copies). ``moe_capacity_factor`` C (GShard /
Megatron ``--moe-expert-capacity-factor``): each expert takes at most ``ceil(tokens * top_k / experts * C)`` of a
rank's token copies (C < 1 drops the rest); with ``moe_pad_to_capacity`` every expert gets exactly that many
(padding), so the all-to-all bytes and the expert GEMM rows (and FLOPs) are ``experts * capacity`` instead of
``tokens * top_k`` (see :func:`routed_rows`). ``moe_imbalance`` F (dropless only): the busiest EP rank receives F
times the balanced load, and since every rank waits for it in the combine all-to-all, every rank is timed as that
rank: expert rows and all-to-all bytes ``ceil(tokens * top_k * F)``. ``moe_expert_load`` (see
:func:`parse_expert_load`, :func:`ep_loads`): the experts' relative loads; each EP rank computes its own experts'
rows and the all-to-alls are timed by their busiest rank.

ZeRO-3 (``zero=3``): per unit (layer, embedding, LM head) one parameter all-gather before its first forward
and one before its first backward per step (reused by all micro-batches; ``reshard_after_forward``: before every
micro-batch's), one gradient reduce-scatter after its last backward (``grad_sync_every_micro_batch``: after
every micro-batch's, for any ZeRO stage). Context parallelism (``cp``): ``rank = t + TP*(c + CP*(d + DP*p))``;
s/CP tokens per rank, attention against all s keys via a ring of CP-1 K/V send/recv steps forward and CP-1
dK/dV steps backward, each ``2*b*(s/CP)*(kv/TP)*d*bytes`` (prefill: the forward ring only), and one
flash-attention call per ring step (causal: Megatron's load-balanced chunks, see ``_StageBuilder._attn_steps``); dense gradients over DP x CP.
Interleaved 1F1B (``virtual_stages``): Megatron's interleaved schedule, virtual stage v = chunk*PP + p; per rank
``2*V*M - M*[p==0] - M*[p==PP-1]`` sends.

Element-wise nodes (``elementwise``, training only, default on): LayerNorm, bias+GeLU / SiLU*mul, dropout and
residual adds per layer, embedding lookup and cross entropy per micro-batch, one ``_fused_adam_`` per step over
the rank's parameters (ADAM_BYTES_PER_PARAM); ``num_ops = 0`` so the FLOP totals above are unchanged; the ``gpu``
compute model times them from ``inputs_shapes`` as memory-bound. ``attention="unfused"``: QK^T / AV ``aten::bmm``
plus softmax and dropout over the b*heads*s^2 scores instead of the flash-attention nodes (same FLOPs).

Inference (``mode`` prefill / decode): forward only, no DP synchronisation. Prefill: s = prompt_len,
``2*P*tokens + 4*L*s^2*h*sequences``. Decode: one token per sequence against a KV cache of
``c = prompt_len + decode_len`` positions: ``2*P + 4*L*c*h`` FLOPs per sequence, attention reads
``2*L*kv*d*c*bytes`` of KV cache per sequence (``kv_cache_bytes`` attribute; included in ``tensor_size``).
Mixed (continuous batching with chunked prefill, as vLLM and Sarathi-Serve run it): every micro-batch is the b
decode sequences' next tokens plus one chunk of ``prefill_chunk`` prompt tokens of a request whose first
``prefill_done`` tokens are already cached; the GEMMs run on all ``b + chunk`` rows, the decode tokens attend
to their caches and the chunk (causally) to ``prefill_done + chunk`` keys: ``2*P*(b + chunk) + 4*L*h*(b*c +
chunk*(prefill_done + chunk))`` FLOPs per micro-batch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, asdict

from astra_sim.chakra import types as T
from astra_sim.chakra.writer import encode_varint, make_metadata, make_node
from astra_sim.errors import ConfigError
from astra_sim.symmetry import BlockShift, RankSymmetry
from astra_sim.workload.compact import write_atomically, write_compact_workload

from .common import ensure_parent

__all__ = ["PRESETS", "ModelDims", "LlmConfig", "model_dims", "parameter_count", "activated_parameter_count",
           "training_flops", "inference_flops",
           "generate_llm", "rank_of", "coords_of", "rank_symmetry"]

# Published dimensions. gpt3-13b uses hidden 5120 (Megatron; the GPT-3 paper's 5140 is not divisible by its
# 40 heads). Llama's ffn_hidden is the SwiGLU inner size.
PRESETS = {
    "gpt3-175b": dict(layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152, vocab=50257, seq_len=2048,
                      gated=False),
    "gpt3-13b": dict(layers=40, hidden=5120, heads=40, kv_heads=40, ffn_hidden=20480, vocab=50257, seq_len=2048,
                     gated=False),
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000, seq_len=4096,
                      gated=True),
    "llama2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000, seq_len=4096,
                       gated=True),
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, seq_len=8192,
                      gated=True),
    "llama3-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256, seq_len=8192,
                       gated=True),
    # Mixture of experts: 8 experts, top-2, every layer MoE (Mixtral 8x7B).
    "mixtral-8x7b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=32000, seq_len=4096,
                         gated=True, experts=8, top_k=2, moe_ffn=14336),
    # DeepSeekMoE 16B: 64 fine-grained routed experts (top-6) + 2 shared, expert inner size 1408; the first layer
    # keeps a dense FFN of 10944 (its config's first_k_dense_replace = 1).
    "deepseek-moe-16b": dict(layers=28, hidden=2048, heads=16, kv_heads=16, ffn_hidden=10944, vocab=102400,
                             seq_len=4096, gated=True, experts=64, top_k=6, moe_ffn=1408, shared_experts=2,
                             moe_dense_layers=1),
}
MODES = ("train", "prefill", "decode", "mixed")

DTYPES = {"bf16": (2, "c10::BFloat16"), "fp16": (2, "c10::Half"), "fp32": (4, "float")}
MM = "aten::mm"
SCALED_MM = "aten::_scaled_mm"  # FP8 GEMM (Transformer Engine style): fp8 operands, per-tensor scales, bf16 output
#: --gemm-dtype choices: the linear layers' operand type; "fp8" = Transformer Engine's hybrid recipe (E4M3 for
#: weights/activations, E5M2 for gradients)
GEMM_DTYPES = ("same", "fp8")
FP8_FWD, FP8_GRAD = "Tensor(c10::Float8_e4m3fn)", "Tensor(c10::Float8_e5m2)"
#: Transformer Engine's FP8 bookkeeping kernels (``--gemm-dtype fp8`` with element-wise nodes): not ATen ops, so
#: the gpu model times them from ``tensor_size`` (memory-bound)
TE_CAST_TRANSPOSE = "transformer_engine::cast_transpose"
TE_FP8_TRANSPOSE = "transformer_engine::fp8_transpose"
TE_AMAX_UPDATE = "transformer_engine::amax_and_scale_update"
#: TE's DelayedScaling amax history length (its default, and MLPerf v3.1 GPT-3's FP8_AMAX_HISTORY)
FP8_AMAX_HISTORY = 1024
#: FP8 tensors with an amax per linear layer: input, weight, output in forward; grad output, grad input in backward
FP8_AMAX_FWD, FP8_AMAX_BWD = 3, 2
BMM = "aten::bmm"
ATTENTIONS = ("flash", "unfused")
#: Bytes per parameter the optimizer node moves (as the gpu model counts an in-place ``_fused_adam_``): it reads
#: fp32 master weights, fp32 gradients and the two fp32 Adam moments (16 B) and writes the weights back (4 B).
#: A real kernel also writes the two moments (+8 B) and the fp16/bf16 model copy (+2 B), which is not counted.
ADAM_BYTES_PER_PARAM = 20
#: Bandwidth used only for the nodes' ``duration_micros`` (replay); the gpu model times them from their shapes.
EW_REPLAY_BYTES_PER_S = 1.5e12
TP_TAG_BASE = 1 << 28  # comm_tag of --tp-comm-overlap ring messages: TP_TAG_BASE + a per-stage counter
CP_TAG_BASE = 1 << 24  # comm_tag of context-parallel ring messages: CP_TAG_BASE + ((phase*L + layer)*M + mb)*CP + j
#: ``--comm-sms`` keys for NCCL communicators: TP collectives (without --tp-comm-overlap, and the backward
#: re-gathers when no userbuffers name is given), DP gradient/parameter collectives (dense and expert), pipeline
#: messages, expert all-to-alls, context-parallel ring messages and FP8 amax all-reduces
COMM_SMS_GROUPS = ("tp", "dp", "pp", "ep", "cp", "amax")
#: Transformer Engine's userbuffers overlaps (``--tp-comm-overlap``), keyed by what the generator emits: (ring or
#: re-gather, the activation it carries) -> TE's name for it. TE overlaps the backward reduce-scatter of the QKV / FC1
#: input gradient ("bulk") with the weight-gradient GEMM and names it after that GEMM; the generator pipelines it
#: with the dgrad GEMM chunks.
TE_OVERLAPS = {
    ("ag", "attn_in"): "qkv_fprop", ("ag", "mlp_in"): "fc1_fprop",
    ("ag", "mlp_out"): "fc2_dgrad", ("ag", "attn_out"): "proj_dgrad",
    ("rs", "attn_out"): "proj_fprop", ("rs", "mlp_out"): "fc2_fprop",
    ("rs", "attn_in"): "qkv_wgrad", ("rs", "mlp_in"): "fc1_wgrad",
    ("regather", "attn_in"): "qkv_dgrad", ("regather", "mlp_in"): "fc1_dgrad",
}
TE_OVERLAP_NAMES = tuple(sorted(set(TE_OVERLAPS.values())))
TE_OVERLAP_METHODS = ("ring_exchange", "pipeline", "bulk")
#: TE's ``initialize_ub`` defaults: ``num_sm`` 16; ``ring_exchange`` uses the copy engines (``use_ce``) unless told not to
TE_DEFAULT_NUM_SM = 16
#: keys a TE ``tp_overlap`` YAML entry may have (``initialize_ub``'s ``add_ub`` arguments)
TE_OVERLAP_KEYS = ("method", "num_sm", "cga_size", "set_sm_margin", "num_splits", "aggregate", "atomic_gemm",
                   "use_ce", "fp8_buf", "is_reduce_scatter")
ATTN = "aten::_scaled_dot_product_flash_attention"
ATTN_BWD = "aten::_scaled_dot_product_flash_attention_backward"


@dataclass(frozen=True)
class ModelDims:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    gated: bool = False
    experts: int = 0          # routed experts E (0: dense FFN)
    top_k: int = 1            # experts per token
    moe_ffn: int = 0          # expert inner size (0: ffn_hidden)
    shared_experts: int = 0   # always-active experts of size moe_ffn
    moe_dense_layers: int = 0  # MoE: the first K layers keep a dense FFN of ffn_hidden (DeepSeek first_k_dense_replace)
    moe_layer_freq: int = 1    # MoE: layer i has experts only if i % freq == 0 (Megatron's --moe-layer-freq N)

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def moe(self):
        return self.experts > 0

    @property
    def expert_ffn(self):
        return self.moe_ffn or self.ffn_hidden

    def is_moe_layer(self, layer):
        """Whether layer ``layer`` (0-based) has routed experts: not one of the first ``moe_dense_layers``, and a
        multiple of ``moe_layer_freq``; the others keep a dense FFN."""
        return self.moe and layer >= self.moe_dense_layers and layer % self.moe_layer_freq == 0

    @property
    def moe_layers(self):
        return sum(1 for i in range(self.layers) if self.is_moe_layer(i))

    def moe_index(self, layer):
        """The MoE layer ``layer`` is among the model's MoE layers (0 for the first)."""
        return sum(1 for i in range(layer) if self.is_moe_layer(i))


@dataclass(frozen=True)
class LlmConfig:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batches: int = 1
    micro_batch_size: int = 1
    sequence_parallel: bool = False
    zero: int = 0
    recompute: bool = False
    dtype: str = "bf16"
    tflops: float = 312.0
    ep: int = 1                     # expert parallelism, carved out of dp
    mode: str = "train"             # train | prefill | decode
    prompt_len: int | None = None   # inference; default: the model's seq_len
    decode_len: int = 1             # decode: generated tokens so far, this one included
    decode_steps: int = 1           # decode: consecutive steps in one trace (the KV cache grows by one each)
    prefill_chunk: int = 0          # mixed: prompt tokens prefilled per micro-batch beside its decode tokens
    prefill_done: int = 0           # mixed: tokens of that prompt already in the KV cache (earlier chunks)
    cp: int = 1                     # context parallelism (sequence split over CP ranks; training, prefill)
    virtual_stages: int = 1         # interleaved 1F1B: model chunks per pipeline rank (training only)
    elementwise: bool = True        # training: emit norms, activations, dropout, residual adds, CE, optimizer
    attention: str = "flash"        # flash (one fused node) | unfused (bmm + softmax + dropout + bmm; training)
    causal: bool = True             # flash: causal mask (decoder LMs), timed as the lower triangle only
    dropout: bool = True            # training: emit dropout kernels (off: Megatron with hidden/attention dropout 0)
    gemm_dtype: str = "same"        # linear-layer GEMM operands: "same" as dtype, or "fp8" (Transformer Engine)
    overlap_param_gather: bool = False  # ZeRO-1/2: gather updated parameters at the step's start, overlapping it
    reshard_after_forward: bool = False  # ZeRO-3: gather each unit before every micro-batch's forward and backward
    grad_sync_every_micro_batch: bool = False  # reduce gradients after every micro-batch's backward, not the last only
    tp_comm_overlap: bool = False   # SP: TP all-gathers / reduce-scatters as rings pipelined with GEMM chunks
    moe_capacity_factor: float | None = None  # MoE: expert capacity = ceil(tokens*top_k/E * C); None: dropless
    moe_pad_to_capacity: bool = False  # MoE: pad every expert's input to its capacity
    moe_imbalance: float = 1.0      # MoE dropless: busiest EP rank's token copies / the balanced share (>= 1)
    moe_expert_load: tuple = ()     # MoE: the experts' relative loads, one tuple of E for every MoE layer or one
    #                                 per MoE layer (see parse_expert_load); () = balanced routing
    comm_sms: tuple = ()            # ((key, SMs), ...): comm_sms attribute per kind of communication (see --comm-sms)
    sm_margins: tuple = ()          # ((TE overlap name, SMs), ...): its GEMMs' sm_margin (TE's set_sm_margin)
    logits: str = "all"             # inference: LM head on "all" positions, or the "last" of each sequence (serving)
    pp_scatter_gather: bool = False  # TP without SP: each TP rank sends 1/TP of a stage boundary, all-gathered after

    @property
    def npus(self):
        return self.tp * self.pp * self.dp * self.cp

    @property
    def inference(self):
        return self.mode != "train"

    @property
    def steps(self):
        """Steps in one trace: the decode steps, else 1."""
        return self.decode_steps if self.mode == "decode" else 1

    @property
    def ew(self):
        """Element-wise / memory-bound nodes are emitted (training only)."""
        return self.elementwise and not self.inference


def model_dims(preset=None, **overrides) -> ModelDims:
    """A preset's dimensions, with any non-None ``overrides`` (layers, hidden, heads, ...) applied."""
    base = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        base = dict(PRESETS[preset])
    base.update({k: v for k, v in overrides.items() if v is not None})
    if "kv_heads" not in base and "heads" in base:
        base["kv_heads"] = base["heads"]
    if "ffn_hidden" not in base and "hidden" in base:
        base["ffn_hidden"] = 4 * base["hidden"]
    missing = [k for k in ("layers", "hidden", "heads", "vocab", "seq_len") if k not in base]
    if missing:
        raise ConfigError(f"give --preset or the model dimensions; missing: {', '.join('--' + m.replace('_', '-') for m in missing)}")
    dims = ModelDims(**base)
    for k, v in asdict(dims).items():
        if k in ("experts", "moe_ffn", "shared_experts", "moe_dense_layers"):
            if not isinstance(v, int) or v < 0:
                raise ConfigError(f"{k} must be a non-negative integer, got {v!r}")
        elif k != "gated" and (not isinstance(v, int) or v < 1):
            raise ConfigError(f"{k} must be a positive integer, got {v!r}")
    if dims.moe and dims.top_k > dims.experts:
        raise ConfigError(f"top-k {dims.top_k} exceeds the {dims.experts} experts")
    for key in ("moe_dense_layers", "moe_layer_freq"):
        if getattr(dims, key) != ModelDims.__dataclass_fields__[key].default and not dims.moe:
            raise ConfigError(f"--{key.replace('_', '-')} needs a mixture-of-experts model (--experts)")
    if dims.moe and not dims.moe_layers:
        raise ConfigError(f"--moe-dense-layers {dims.moe_dense_layers} and --moe-layer-freq {dims.moe_layer_freq} "
                          f"leave no MoE layer of the {dims.layers} layers (use a dense model instead)")
    if dims.hidden % dims.heads:
        raise ConfigError(f"hidden {dims.hidden} is not divisible by heads {dims.heads}")
    if dims.heads % dims.kv_heads:
        raise ConfigError(f"heads {dims.heads} is not divisible by kv heads {dims.kv_heads}")
    return dims


def padded_vocab(dims: ModelDims, tp: int) -> int:
    """The vocabulary padded up to a multiple of TP (so the LM head splits evenly)."""
    return -(-dims.vocab // tp) * tp


def _ffn_mats(dims: ModelDims) -> int:
    return 3 if dims.gated else 2


# Per-layer parameter counts take ``moe``: whether the layer has routed experts (``dims.is_moe_layer(i)``; a
# dense model's layers and an MoE model's first ``moe_dense_layers`` have a dense FFN of ffn_hidden instead).

def dense_layer_parameters(dims: ModelDims, moe: bool = True) -> int:
    """Per layer: attention plus the dense FFN (dense layer) or the shared experts (MoE layer) -- synced over
    full DP."""
    h, d = dims.hidden, dims.head_dim
    attn = h * (h + 2 * dims.kv_heads * d) + h * h
    if dims.moe and moe:
        return attn + dims.shared_experts * _ffn_mats(dims) * h * dims.expert_ffn
    return attn + _ffn_mats(dims) * h * dims.ffn_hidden


def expert_layer_parameters(dims: ModelDims, moe: bool = True) -> int:
    """Per layer: all routed experts' weights (0 for a dense layer)."""
    return dims.experts * _ffn_mats(dims) * dims.hidden * dims.expert_ffn if dims.moe and moe else 0


def router_parameters(dims: ModelDims, moe: bool = True) -> int:
    """Per layer: the MoE router (gate) ``h x E``, replicated on every TP rank (0 for a dense layer)."""
    return dims.hidden * dims.experts if dims.moe and moe else 0


def layer_parameters(dims: ModelDims, moe: bool = True) -> int:
    return dense_layer_parameters(dims, moe) + expert_layer_parameters(dims, moe) + router_parameters(dims, moe)


def activated_layer_parameters(dims: ModelDims, moe: bool = True) -> int:
    if not (dims.moe and moe):
        return layer_parameters(dims, False)
    return (dense_layer_parameters(dims) + dims.top_k * _ffn_mats(dims) * dims.hidden * dims.expert_ffn
            + router_parameters(dims))


def layer_shards(dims: ModelDims, cfg: "LlmConfig", moe: bool = True):
    """(dense, expert) parameters of one layer on one rank: the dense part is TP-sharded (plus the replicated
    router) and synced over DP; with EP > 1 this rank's E/EP experts (TP-sharded) are synced over expert-DP."""
    router = router_parameters(dims, moe)
    if cfg.ep == 1:
        return (dense_layer_parameters(dims, moe) + expert_layer_parameters(dims, moe)) // cfg.tp + router, 0
    return (dense_layer_parameters(dims, moe) // cfg.tp + router,
            expert_layer_parameters(dims, moe) // cfg.ep // cfg.tp)


def _over_layers(dims: ModelDims, per_layer) -> int:
    """``per_layer(dims, moe)`` summed over the model's layers (MoE and dense layers)."""
    dense = dims.layers - dims.moe_layers
    return dims.moe_layers * per_layer(dims, True) + (dense * per_layer(dims, False) if dense else 0)


def parameter_count(dims: ModelDims, tp: int = 1) -> int:
    """Matmul parameters: all layers (all experts) plus the LM head (vocab padded to TP)."""
    return _over_layers(dims, layer_parameters) + padded_vocab(dims, tp) * dims.hidden


def activated_parameter_count(dims: ModelDims, tp: int = 1) -> int:
    """Matmul parameters a token passes through (P of the 6*P*tokens rule; = parameter_count for dense models)."""
    return _over_layers(dims, activated_layer_parameters) + padded_vocab(dims, tp) * dims.hidden


def training_flops(dims: ModelDims, sequences: int, tp: int = 1) -> int:
    """6 * P_activated * tokens + 12 * L * s^2 * h * sequences."""
    s = dims.seq_len
    return (6 * activated_parameter_count(dims, tp) * sequences * s
            + 12 * dims.layers * s * s * dims.hidden * sequences)


def inference_flops(dims: ModelDims, cfg: "LlmConfig") -> int:
    """Forward FLOPs of the prefill step, the decode steps or the mixed step over all ranks."""
    seqs = cfg.dp * cfg.micro_batches * cfg.micro_batch_size
    q, c = _lengths(dims, cfg)
    P = activated_parameter_count(dims, cfg.tp)
    head = padded_vocab(dims, cfg.tp) * dims.hidden
    last = cfg.logits == "last"  # the LM head on one position per sequence (and per prefill chunk)
    flops = sum(2 * (P - head) * seqs * q + 2 * head * seqs * (1 if last else q)
                + 4 * dims.layers * q * (c + i) * dims.hidden * seqs for i in range(cfg.steps))
    if cfg.mode == "mixed":  # one prefill chunk per micro-batch and DP replica
        chunk, keys = cfg.prefill_chunk, cfg.prefill_done + cfg.prefill_chunk
        flops += cfg.dp * cfg.micro_batches * (2 * (P - head) * chunk + 2 * head * (1 if last else chunk)
                                               + 4 * dims.layers * chunk * keys * dims.hidden)
    return flops


def _lengths(dims: ModelDims, cfg: "LlmConfig"):
    """(query positions per sequence, attended context positions) for the mode."""
    if cfg.mode == "train":
        return dims.seq_len, dims.seq_len
    prompt = cfg.prompt_len or dims.seq_len
    if cfg.mode == "prefill":
        return prompt, prompt
    return 1, prompt + cfg.decode_len  # decode, and the decode tokens of a mixed step


def expert_capacity(dims: ModelDims, cfg: "LlmConfig", tokens: int):
    """Token copies one expert takes from a rank holding ``tokens`` tokens: ``ceil(tokens * top_k / E * C)``
    (Megatron's ``get_capacity``), or None without a capacity factor (dropless)."""
    if cfg.moe_capacity_factor is None:
        return None
    return math.ceil(tokens * dims.top_k / dims.experts * cfg.moe_capacity_factor)


def routed_rows(dims: ModelDims, cfg: "LlmConfig", tokens: int) -> int:
    """Token copies a rank sends to the experts (and, routing being balanced and symmetric, the rows its local
    experts compute): ``tokens * top_k`` dropless; ``min(tokens * top_k, E * capacity)`` with a capacity factor
    (balanced routing overflows only when C < 1); ``E * capacity`` with padding; dropless with
    ``moe_imbalance`` F: ``ceil(tokens * top_k * F)``, the busiest EP rank's load."""
    copies = tokens * dims.top_k
    capacity = expert_capacity(dims, cfg, tokens)
    if capacity is None:  # dropless; with --moe-imbalance the busiest rank's load (every rank waits for it)
        return copies if cfg.moe_imbalance == 1 else math.ceil(copies * cfg.moe_imbalance)
    if cfg.moe_pad_to_capacity:
        return dims.experts * capacity
    return min(copies, dims.experts * capacity)


def parse_expert_load(spec, experts, moe_layers):
    """``--moe-expert-load``: the E experts' relative token loads, as a tuple of per-MoE-layer tuples (one tuple
    when every MoE layer has the same loads). ``spec``:

    - ``w0,w1,...`` (E non-negative numbers, any scale): every MoE layer;
    - ``zipf:S`` (S >= 0): expert e's load is ``(e + 1) ** -S``, every layer; experts sit on the EP ranks in
      order (rank j holds experts j*E/EP..), so EP rank 0 is the busiest, the worst placement;
    - ``zipf:S:SEED``: the same loads, dealt to the experts in a random order per MoE layer (Python's
      ``random.Random(SEED + layer)``), so the hot experts differ from layer to layer;
    - ``FILE.json``: a list of E numbers (every layer), or a list of one such list per MoE layer (in layer order),
      e.g. token counts per expert logged from a real router."""
    import random

    where = f"--moe-expert-load {spec!r}"
    if spec.endswith(".json"):
        try:
            with open(spec) as fh:
                data = json.load(fh)
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read it: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ConfigError(f"{spec}: not valid JSON: {exc}") from None
        where = spec
        rows = data if isinstance(data, list) and data and all(isinstance(r, list) for r in data) else [data]
        if len(rows) not in (1, moe_layers):
            raise ConfigError(f"{spec}: {len(rows)} lists of expert loads, expected 1 (every MoE layer) or one per "
                              f"MoE layer ({moe_layers})")
    elif spec.startswith("zipf:"):
        parts = spec.split(":")[1:]
        try:
            skew = float(parts[0])
            seed = int(parts[1]) if len(parts) == 2 else None
        except (ValueError, IndexError):
            raise ConfigError(f"{where}: expected zipf:S or zipf:S:SEED (S a number >= 0, SEED an integer)") \
                from None
        if len(parts) > 2 or not skew >= 0 or math.isinf(skew):
            raise ConfigError(f"{where}: expected zipf:S or zipf:S:SEED (S a number >= 0, SEED an integer)")
        base = [(e + 1) ** -skew for e in range(experts)]
        if seed is None:
            rows = [base]
        else:
            rows = []
            for layer in range(moe_layers):
                dealt = list(base)
                random.Random(seed + layer).shuffle(dealt)
                rows.append(dealt)
    else:
        try:
            rows = [[float(x) for x in spec.split(",")]]
        except ValueError:
            raise ConfigError(f"{where}: expected E comma-separated numbers, zipf:S[:SEED] or a .json file") \
                from None
    out = []
    for i, row in enumerate(rows):
        what = where if len(rows) == 1 else f"{where}: MoE layer {i}"
        if not isinstance(row, list) or len(row) != experts:
            raise ConfigError(f"{what}: expected the loads of the {experts} experts, got "
                              f"{len(row) if isinstance(row, list) else type(row).__name__}")
        if any(isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf for w in row) \
                or not sum(row) > 0:
            raise ConfigError(f"{what}: expert loads must be finite numbers >= 0, not all 0")
        out.append(tuple(float(w) for w in row))
    return tuple(out)


def _water_fill(weights, copies, limit):
    """``copies`` split over the experts in proportion to ``weights``, none above ``limit``: a token picks
    ``top_k`` *distinct* experts, so one expert gets at most one copy of each token. An expert whose share would
    pass the limit gets the limit, and the rest is split again over the others; what the weighted experts cannot
    take goes evenly to the experts of weight 0 (every token still needs its top_k experts)."""
    alloc = [0.0] * len(weights)
    active = [e for e, x in enumerate(weights) if x > 0]
    share = {e: weights[e] for e in active}
    left = copies
    while left > 1e-9 and active:
        total = sum(share[e] for e in active)
        full = [e for e in active if left * share[e] / total > limit]
        if not full:
            for e in active:
                alloc[e] = left * share[e] / total
            break
        for e in full:
            alloc[e] = limit
            left -= limit
        active = [e for e in active if e not in full]
        if not active:  # the weighted experts are full: the unweighted ones take the rest, evenly
            active = [e for e, x in enumerate(weights) if x <= 0]
            share = {e: 1.0 for e in active}
    return alloc


def ep_loads(dims: ModelDims, cfg: "LlmConfig", tokens: int, moe_index: int):
    """``--moe-expert-load``: the token copies one rank sends to each EP rank's experts in MoE layer
    ``moe_index`` (a tuple of EP ints). Every rank routes its ``tokens * top_k`` copies by the same loads, no
    expert taking more than ``tokens`` (:func:`_water_fill`), rounded to whole copies by largest remainder (so
    they add up); a capacity factor caps each expert at its capacity
    (the hot experts drop), padding fills every expert to it. EP rank j's experts then compute
    ``EP * loads[j]`` rows."""
    table = cfg.moe_expert_load
    w = table[moe_index] if len(table) > 1 else table[0]
    copies = tokens * dims.top_k
    exact = _water_fill(w, copies, tokens)
    per_expert = [math.floor(x) for x in exact]
    short = copies - sum(per_expert)
    for e in sorted(range(len(w)), key=lambda e: (per_expert[e] - exact[e], e))[:short]:
        per_expert[e] += 1
    capacity = expert_capacity(dims, cfg, tokens)
    if capacity is not None:
        per_expert = [capacity if cfg.moe_pad_to_capacity else min(c, capacity) for c in per_expert]
    per_rank = dims.experts // cfg.ep
    return tuple(sum(per_expert[j * per_rank:(j + 1) * per_rank]) for j in range(cfg.ep))


def rank_of(cfg: LlmConfig, t, d, p, c=0):
    """``t + TP*(c + CP*(d + DP*p))`` (CP = 1: ``t + TP*(d + DP*p)``)."""
    return t + cfg.tp * (c + cfg.cp * (d + cfg.dp * p))


def coords_of(cfg: LlmConfig, rank):
    """(t, d, p) of a rank (see :func:`cp_coords_of` for the CP index)."""
    t, _, d, p = cp_coords_of(cfg, rank)
    return t, d, p


def cp_coords_of(cfg: LlmConfig, rank):
    """(t, c, d, p) of a rank."""
    t, rest = rank % cfg.tp, rank // cfg.tp
    return t, rest % cfg.cp, (rest // cfg.cp) % cfg.dp, rest // (cfg.cp * cfg.dp)


def comm_groups(cfg: LlmConfig):
    """{'tp': {(d, p): id}, 'dp': {(t, p): id}, 'pp': {(t, d): id}, 'ep': {(t, p, q): id},
    'edp': {(t, p, e): id}} and the JSON mapping {id: ranks}. EP groups (DP indices q*EP .. q*EP+EP-1) and
    expert-data-parallel groups (DP indices = e mod EP) follow the PP groups, only when EP > 1. With CP > 1 the
    tp/dp/pp/ep keys end with the CP index c, and 'cp' {(t, d, p)} and 'dpcp' {(t, p)} groups follow. FP8
    training adds 'amax' {(p,)}: every rank of pipeline stage p (see _amax_reduction)."""
    ids = {"tp": {}, "dp": {}, "pp": {}, "ep": {}, "edp": {}, "cp": {}, "dpcp": {}, "amax": {}}
    groups = {}

    def add(kind, key, members):
        """The next group id (ids count from 1 in order of creation)."""
        gid = len(groups) + 1
        ids[kind][key] = gid
        groups[str(gid)] = members

    cps = range(cfg.cp)
    # keys carry the CP index c only when CP > 1 (CP = 1: the historical keys and ids)
    k = (lambda *key, c: key + (c,)) if cfg.cp > 1 else (lambda *key, c: key)
    if cfg.tp > 1:
        for p in range(cfg.pp):
            for d in range(cfg.dp):
                for c in cps:
                    add("tp", k(d, p, c=c), [rank_of(cfg, t, d, p, c) for t in range(cfg.tp)])
    if cfg.dp > 1:
        for p in range(cfg.pp):
            for c in cps:
                for t in range(cfg.tp):
                    add("dp", k(t, p, c=c), [rank_of(cfg, t, d, p, c) for d in range(cfg.dp)])
    if cfg.pp > 1:
        for d in range(cfg.dp):
            for c in cps:
                for t in range(cfg.tp):
                    add("pp", k(t, d, c=c), [rank_of(cfg, t, d, p, c) for p in range(cfg.pp)])
    ep = cfg.ep
    if ep > 1:
        # EP groups inside one CP index (each CP rank routes its own sequence chunk); the expert-DP group of EP
        # rank e holds the same experts across the DP/EP blocks and every CP index
        for p in range(cfg.pp):
            for q in range(cfg.dp // ep):
                for c in cps:
                    for t in range(cfg.tp):
                        add("ep", k(t, p, q, c=c), [rank_of(cfg, t, q * ep + e, p, c) for e in range(ep)])
        if cfg.dp // ep * cfg.cp > 1:
            for p in range(cfg.pp):
                for e in range(ep):
                    for t in range(cfg.tp):
                        add("edp", (t, p, e), [rank_of(cfg, t, q * ep + e, p, c)
                                               for q in range(cfg.dp // ep) for c in cps])
    if cfg.cp > 1:
        for p in range(cfg.pp):
            for d in range(cfg.dp):
                for t in range(cfg.tp):
                    add("cp", (t, d, p), [rank_of(cfg, t, d, p, c) for c in cps])
        if cfg.dp > 1:
            for p in range(cfg.pp):
                for t in range(cfg.tp):
                    add("dpcp", (t, p), [rank_of(cfg, t, d, p, c) for d in range(cfg.dp) for c in cps])
    if _amax_reduction(cfg):
        for p in range(cfg.pp):
            add("amax", (p,), [rank_of(cfg, t, d, p, c) for d in range(cfg.dp) for c in cps for t in range(cfg.tp)])
    return ids, groups


def _amax_reduction(cfg):
    """FP8 training reduces the amaxes over the ranks of a pipeline stage (Megatron-core's amax reduction group:
    TP x DP x CP) after every forward and backward of a model chunk."""
    return cfg.gemm_dtype == "fp8" and not cfg.inference and cfg.tp * cfg.dp * cfg.cp > 1


def _check(dims: ModelDims, cfg: LlmConfig):
    for name in ("tp", "pp", "dp", "micro_batches", "micro_batch_size", "ep", "cp", "virtual_stages"):
        v = getattr(cfg, name)
        if not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name.replace('_', '-')} must be a positive integer, got {v!r}")
    if dims.layers % cfg.pp:
        raise ConfigError(f"layers {dims.layers} are not divisible by --pp {cfg.pp}")
    V = cfg.virtual_stages
    if V > 1:
        if cfg.inference:
            raise ConfigError("--virtual-stages is for --mode train")
        if cfg.pp < 2:
            raise ConfigError("--virtual-stages needs --pp >= 2")
        if dims.layers % (cfg.pp * V):
            raise ConfigError(f"layers {dims.layers} are not divisible by --pp x --virtual-stages {cfg.pp * V}")
        if cfg.micro_batches % cfg.pp:
            raise ConfigError(f"--micro-batches {cfg.micro_batches} must be a multiple of --pp {cfg.pp} "
                              "with --virtual-stages")
    if cfg.cp > 1:
        if cfg.mode in ("decode", "mixed"):
            raise ConfigError("--cp is for --mode train or prefill")
        seq, what = (dims.seq_len, "seq len") if cfg.mode == "train" else (_lengths(dims, cfg)[0], "prompt len")
        if seq % cfg.cp:
            raise ConfigError(f"{what} {seq} is not divisible by --cp {cfg.cp}")
        if cfg.causal and cfg.attention == "flash" and seq % (2 * cfg.cp):
            raise ConfigError(f"{what} {seq} is not divisible by 2 x --cp {cfg.cp}: causal context "
                              "parallelism splits the sequence into 2 x CP load-balanced chunks (Megatron-LM's "
                              "requirement); use --no-causal for a bidirectional model")
    if cfg.attention not in ATTENTIONS:
        raise ConfigError(f"--attention must be one of {', '.join(ATTENTIONS)}, got {cfg.attention!r}")
    if cfg.attention == "unfused" and cfg.inference:
        raise ConfigError("--attention unfused is for --mode train")
    if dims.kv_heads % cfg.tp:
        raise ConfigError(f"kv heads {dims.kv_heads} (and heads {dims.heads}) must be divisible by --tp {cfg.tp}")
    if dims.ffn_hidden % cfg.tp:
        raise ConfigError(f"ffn hidden {dims.ffn_hidden} is not divisible by --tp {cfg.tp}")
    if cfg.zero not in (0, 1, 2, 3):
        raise ConfigError(f"--zero must be 0, 1, 2 or 3, got {cfg.zero!r}")
    if cfg.dtype not in DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, got {cfg.dtype!r}")
    if cfg.overlap_param_gather and (cfg.zero not in (1, 2) or cfg.inference):
        raise ConfigError("--overlap-param-gather is for training with --zero 1 or 2 (ZeRO-3 gathers every unit "
                          "anyway)")
    if cfg.pp_scatter_gather and (cfg.tp == 1 or cfg.pp == 1 or cfg.sequence_parallel):
        raise ConfigError("--pp-scatter-gather needs --tp > 1 and --pp > 1, without --sequence-parallel (which "
                          "already splits the stage boundary over TP)")
    if cfg.logits not in ("all", "last"):
        raise ConfigError(f"--logits must be all or last, got {cfg.logits!r}")
    if cfg.logits == "last" and not cfg.inference:
        raise ConfigError("--logits last is for inference (training computes the loss on every position)")
    if cfg.logits == "last" and cfg.cp > 1:
        raise ConfigError("--logits last with --cp is not modelled (only the CP rank holding a sequence's end "
                          "would compute its logits)")
    if cfg.reshard_after_forward and (cfg.zero != 3 or cfg.inference):
        raise ConfigError("--reshard-after-forward is for training with --zero 3 (it re-gathers the sharded "
                          "parameters)")
    if cfg.grad_sync_every_micro_batch and cfg.inference:
        raise ConfigError("--grad-sync-every-micro-batch is for --mode train")
    if cfg.tp_comm_overlap and not (cfg.sequence_parallel and cfg.tp > 1):
        raise ConfigError("--tp-comm-overlap needs --sequence-parallel and --tp > 1 (it overlaps the sequence-"
                          "parallel all-gathers and reduce-scatters with their GEMMs)")
    if cfg.gemm_dtype not in GEMM_DTYPES:
        raise ConfigError(f"--gemm-dtype must be one of {', '.join(GEMM_DTYPES)}, got {cfg.gemm_dtype!r}")
    if not cfg.tflops > 0:
        raise ConfigError(f"--tflops must be > 0, got {cfg.tflops!r}")
    if cfg.mode not in MODES:
        raise ConfigError(f"--mode must be one of {', '.join(MODES)}, got {cfg.mode!r}")
    if cfg.prompt_len is not None and (not isinstance(cfg.prompt_len, int) or cfg.prompt_len < 1):
        raise ConfigError(f"--prompt-len must be a positive integer, got {cfg.prompt_len!r}")
    if not isinstance(cfg.decode_len, int) or cfg.decode_len < 1:
        raise ConfigError(f"--decode-len must be a positive integer, got {cfg.decode_len!r}")
    if not isinstance(cfg.decode_steps, int) or cfg.decode_steps < 1:
        raise ConfigError(f"--decode-steps must be a positive integer, got {cfg.decode_steps!r}")
    if cfg.decode_steps > 1 and cfg.mode != "decode":
        raise ConfigError("--decode-steps is for --mode decode")
    for key in ("prefill_chunk", "prefill_done"):
        value = getattr(cfg, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"--{key.replace('_', '-')} must be a non-negative integer, got {value!r}")
    if cfg.mode == "mixed" and cfg.prefill_chunk < 1:
        raise ConfigError("--mode mixed needs --prefill-chunk >= 1 (the prompt tokens prefilled beside the decodes)")
    if cfg.mode != "mixed" and (cfg.prefill_chunk or cfg.prefill_done):
        raise ConfigError("--prefill-chunk / --prefill-done are for --mode mixed")
    if cfg.ep > 1 and not dims.moe:
        raise ConfigError("--ep needs a mixture-of-experts model (--experts)")
    if cfg.dp % cfg.ep:
        raise ConfigError(f"--dp {cfg.dp} is not divisible by --ep {cfg.ep} (EP is carved out of DP)")
    if dims.moe and dims.experts % cfg.ep:
        raise ConfigError(f"experts {dims.experts} are not divisible by --ep {cfg.ep}")
    if dims.moe and dims.expert_ffn % cfg.tp:
        raise ConfigError(f"expert ffn {dims.expert_ffn} is not divisible by --tp {cfg.tp}")
    c = cfg.moe_capacity_factor
    if c is not None:
        if not dims.moe:
            raise ConfigError("--moe-capacity-factor needs a mixture-of-experts model (--experts)")
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not c > 0:
            raise ConfigError(f"--moe-capacity-factor must be a number > 0, got {c!r}")
    if cfg.moe_pad_to_capacity and c is None:
        raise ConfigError("--moe-pad-to-capacity needs --moe-capacity-factor")
    f = cfg.moe_imbalance
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not f >= 1:
        raise ConfigError(f"--moe-imbalance must be a number >= 1 (busiest EP rank's load / the mean), got {f!r}")
    if f != 1 and not dims.moe:
        raise ConfigError("--moe-imbalance needs a mixture-of-experts model (--experts)")
    if f != 1 and c is not None:
        raise ConfigError("--moe-imbalance is for dropless routing; with --moe-capacity-factor every expert's load "
                          "is capped at its capacity (use --moe-pad-to-capacity for the capped worst case)")
    if cfg.moe_expert_load:
        if not dims.moe:
            raise ConfigError("--moe-expert-load needs a mixture-of-experts model (--experts)")
        if f != 1:
            raise ConfigError("--moe-expert-load and --moe-imbalance are two models of the same thing; give one")
        table = cfg.moe_expert_load
        if len(table) not in (1, dims.moe_layers) or any(len(w) != dims.experts for w in table):
            raise ConfigError(f"--moe-expert-load: expected 1 or {dims.moe_layers} (MoE layers) lists of "
                              f"{dims.experts} expert loads")
        if any(not sum(w) > 0 or min(w) < 0 for w in table):
            raise ConfigError("--moe-expert-load: expert loads must be numbers >= 0, not all 0")
    if f != 1 and f > min(cfg.ep, dims.experts / dims.top_k):
        # an EP rank gets at most all of a rank's copies (EP x the balanced share) and at most one copy of each
        # token per expert it holds (E/EP experts: E/K x the balanced share)
        raise ConfigError(f"--moe-imbalance {f} is more than the busiest EP rank can get: at most "
                          f"min(EP, experts / top-k) = {min(cfg.ep, dims.experts / dims.top_k):g} x the balanced "
                          "share (with --ep 1 every expert is on every rank and the load cannot be uneven)")
    known = COMM_SMS_GROUPS + TE_OVERLAP_NAMES
    for key, sms in cfg.comm_sms:
        if key not in known:
            raise ConfigError(f"--comm-sms: unknown key {key!r} (known: {', '.join(known)})")
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 0:
            raise ConfigError(f"--comm-sms: {key} must be a non-negative integer (SMs), got {sms!r}")
        if key not in COMM_SMS_GROUPS and not cfg.tp_comm_overlap:
            raise ConfigError(f"--comm-sms: {key} is a Transformer Engine userbuffers overlap, emitted only with "
                              "--tp-comm-overlap")
    for name, sms in cfg.sm_margins:
        if name not in TE_OVERLAP_NAMES or not cfg.tp_comm_overlap:
            raise ConfigError(f"sm_margins: {name!r} is not a Transformer Engine userbuffers overlap emitted here "
                              f"(known: {', '.join(TE_OVERLAP_NAMES)}; they need --tp-comm-overlap)")
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
            raise ConfigError(f"sm_margins: {name} must be a positive integer (SMs), got {sms!r}")


def parse_comm_sms(spec):
    """``--comm-sms "dp=8,pp=2,qkv_fprop=0"`` -> ``{"dp": 8, "pp": 2, "qkv_fprop": 0}`` (checked by the config)."""
    out = {}
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError
            out[key.strip()] = int(value)
        except ValueError:
            raise ConfigError(f"--comm-sms: expected KEY=SMS (an integer), got {item!r}") from None
    return out


def load_tp_overlap_sms(path, with_margins=False):
    """SMs of each userbuffers overlap in a Transformer Engine ``tp_overlap`` YAML (the ``ub_cfgs`` NeMo and
    Megatron pass to ``initialize_ub``: per layer name ``method``, ``num_sm``, ``use_ce``, ...). A
    ``ring_exchange`` takes 0 SMs (copy engines) unless ``use_ce`` is false; ``pipeline`` and ``bulk`` take
    ``num_sm`` (TE's default 16). Returns ``{te name: SMs}``; ``with_margins``: also ``{te name: SMs}`` of the
    overlaps with ``set_sm_margin`` (TE's default off), whose GEMMs TE launches on the other SMs only, for
    their whole duration (``sm_margin`` attribute, see :meth:`_StageBuilder.mm`)."""
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"--tp-overlap-config: cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--tp-overlap-config: {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of Transformer Engine layer names (qkv_fprop, ...) to their "
                          f"overlap settings, got {type(data).__name__}")
    out, margins = {}, {}
    for name, entry in data.items():
        if name not in TE_OVERLAP_NAMES:
            raise ConfigError(f"{path}: unknown layer {name!r} (Transformer Engine's userbuffers names: "
                              f"{', '.join(TE_OVERLAP_NAMES)})")
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: {name}: expected a mapping (method, num_sm, ...), got {entry!r}")
        for key in entry:
            if key not in TE_OVERLAP_KEYS:
                raise ConfigError(f"{path}: {name}: unknown key {key!r} (known: {', '.join(TE_OVERLAP_KEYS)})")
        method = entry.get("method")
        if method not in TE_OVERLAP_METHODS:
            raise ConfigError(f"{path}: {name}.method must be one of {', '.join(TE_OVERLAP_METHODS)}, got "
                              f"{method!r}")
        sms = entry.get("num_sm", TE_DEFAULT_NUM_SM)
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 0:
            raise ConfigError(f"{path}: {name}.num_sm must be a non-negative integer, got {sms!r}")
        use_ce = entry.get("use_ce", True)
        if not isinstance(use_ce, (bool, int)):
            raise ConfigError(f"{path}: {name}.use_ce must be true or false, got {use_ce!r}")
        out[name] = 0 if method == "ring_exchange" and use_ce else sms
        margin = entry.get("set_sm_margin", False)
        if not isinstance(margin, (bool, int)) or margin not in (0, 1):
            raise ConfigError(f"{path}: {name}.set_sm_margin must be true or false (1 or 0), got {margin!r}")
        if margin and out[name]:
            margins[name] = out[name]
    return (out, margins) if with_margins else out


def _te_overlap(label):
    """Transformer Engine's userbuffers name of a TP ring or re-gather labelled ``"<ag|rs|regather>.<...>.<site>"``."""
    return TE_OVERLAPS.get((label.split(".", 1)[0], label.rsplit(".", 1)[-1]))


class _StageBuilder:
    """The node graph of one pipeline stage, identical for every rank of the stage except for rank-specific
    attributes (``pg_name``, ``comm_src``/``comm_dst``), which are appended per rank as trailing attributes."""

    def __init__(self, dims: ModelDims, cfg: LlmConfig, stage: int, ep_index: int = 0):
        self.dims, self.cfg, self.p = dims, cfg, stage
        self.e = ep_index  # this graph's EP index (--moe-expert-load gives each EP index its own graph)
        self._ep_loads = {}  # layer -> ep_loads()

        self.nbytes, tname = DTYPES[cfg.dtype]
        self.ttype = f"Tensor({tname})"
        self.items = []  # (static bytes, dynamic key or None)
        self.prev = None  # last node of the compute chain
        self.seq, self.ctx = _lengths(dims, cfg)
        self.seq //= cfg.cp  # context parallelism: this rank's query chunk (keys/values: the whole sequence)
        # dense-gradient group: DP, or DP x CP with context parallelism
        self.dgroup = "dp" if cfg.cp == 1 else ("cp" if cfg.dp == 1 else "dpcp")
        self.tokens = cfg.micro_batch_size * self.seq + cfg.prefill_chunk  # (mixed: + the prefill chunk)
        self.act_bytes = self.tokens * dims.hidden * self.nbytes
        # --tp-comm-overlap with FP8 GEMMs: Transformer Engine's userbuffers all-gather the FP8 GEMM inputs (its
        # default FP8 buffers: qkv/fc1 fprop, proj/fc2 dgrad rings, qkv/fc1 bulk re-gathers), 1 byte per element;
        # the reduce-scatters stay in --dtype
        fp8_ag = cfg.gemm_dtype == "fp8" and cfg.tp_comm_overlap
        self.ag_bytes = self.tokens * dims.hidden * (1 if fp8_ag else self.nbytes)
        # pipeline p2p: with sequence parallelism the stage boundary's activation is already split over TP (each
        # TP rank sends its s/TP rows, as Megatron does); without it every TP rank sends the whole b*s*h
        # (--pp-scatter-gather: Megatron-LM 2021's split of the boundary activation without SP, all-gathered over TP
        # on arrival, see _pp_arrival)
        split = cfg.sequence_parallel or cfg.pp_scatter_gather
        self.p2p_bytes = self.act_bytes // cfg.tp if split else self.act_bytes
        # MoE: token copies this rank dispatches, and (balanced routing) rows its experts compute
        self.routed = routed_rows(dims, cfg, self.tokens) if dims.moe else 0
        self.a2a_bytes = self.routed * dims.hidden * self.nbytes
        # rows of the element-wise ops on the residual stream (LayerNorm, dropout, residual add): this rank's
        # tokens, split over TP with sequence parallelism (replicated on every TP rank otherwise)
        self.ln_rows = self.tokens // cfg.tp if cfg.sequence_parallel else self.tokens
        self.fwd_tag = "fwd"  # label prefix of forward nodes ("fwd.s<i>" for decode step i of several)
        self.syncs = []      # gradient reductions the optimizer waits for
        self.tp_tags = 0     # --tp-comm-overlap ring messages so far (their tags; identical on every TP rank)
        self.comm_sms = dict(cfg.comm_sms)  # --comm-sms: key -> SMs (the comm_sms attribute)
        self.sm_margins = dict(cfg.sm_margins)  # TE overlap name -> its GEMMs' sm_margin
        self.deferred = []   # ZeRO-1/2 parameter all-gathers, issued after the optimizer

    # -- node emission ------------------------------------------------------------------------------------
    def _add(self, name, type_, attrs, deps=(), dyn=None, duration=0, shapes=None, types=None, chain=True,
             values=None):
        nid = len(self.items)
        deps = list(deps)
        if chain and self.prev is not None:
            deps.insert(0, self.prev)
        node = make_node(nid, name, type_, data_deps=deps, duration_micros=duration, attrs=attrs,
                         inputs_shapes=shapes, inputs_types=types, inputs_values=values)
        self.items.append((node._raw, dyn))
        if chain:
            self.prev = nid
        return nid

    def comp(self, op, label, shapes, flops, elems, deps=(), extra=None, types=None, nbytes=None, values=None):
        """A compute node; ``elems`` counts ``--dtype`` elements (``tensor_size = elems * bytes`` unless
        ``nbytes`` gives it); ``types``: the inputs' types (default: every input ``--dtype``); ``values``: the
        ``inputs.values`` text (the op's non-tensor arguments, e.g. attention's ``is_causal``)."""
        if types is None:
            types = [self.ttype] * (shapes.count("[") - 1)
        types = "[" + ", ".join(repr(t) for t in types) + "]"
        dur = max(1, round(flops / (self.cfg.tflops * 1e12) * 1e6))
        attrs = {"is_cpu_op": False, "num_ops": flops, "tensor_size": elems * self.nbytes if nbytes is None else nbytes,
                 "label": label}
        attrs.update(extra or {})
        return self._add(op, T.COMP_NODE, attrs, deps, duration=dur, shapes=shapes, types=types, values=values)

    def mm(self, label, m, k, n, deps=(), linear=True, overlap=None):
        """``[m,k] x [k,n]``. ``linear``: a transformer linear layer (QKV, projection, FFN, experts), which
        ``--gemm-dtype fp8`` runs as an FP8 ``_scaled_mm`` (E4M3 operands, E5M2 for the gradient operand of
        ``*.dgrad``/``*.wgrad``, two fp32 scales, bf16 output); the router and LM head stay in ``--dtype``.
        ``overlap``: the Transformer Engine userbuffers overlap this GEMM runs beside; with its ``set_sm_margin``
        (``--tp-overlap-config``) the node gets ``sm_margin`` = that overlap's SMs, which TE keeps free of it."""
        margin = self.sm_margins.get(overlap) if overlap else None
        extra = {"sm_margin": margin} if margin else None
        if not (linear and self.cfg.gemm_dtype == "fp8"):
            return self.comp(MM, label, f"[[{m}, {k}], [{k}, {n}]]", 2 * m * k * n, m * k + k * n + m * n, deps,
                             extra)
        a = FP8_GRAD if label.endswith(".dgrad") else FP8_FWD
        b = FP8_GRAD if label.endswith(".wgrad") else FP8_FWD
        return self.comp(SCALED_MM, label, f"[[{m}, {k}], [{k}, {n}], [], []]", 2 * m * k * n, 0, deps, extra,
                         types=[a, b, "Tensor(float)", "Tensor(float)"], nbytes=m * k + k * n + 2 * m * n)

    def ew(self, op, label, args, deps=()):
        """An element-wise / memory-bound ATen node. ``args``: per argument ``(shape, type)`` or a list of those
        (a tensor list). ``num_ops = 0`` (FLOP totals stay the matmul/attention FLOPs); ``tensor_size`` = the
        bytes moved as the gpu model counts them (it re-derives them from ``inputs_shapes``/``inputs_types``)."""
        shapes, types, tensors = [], [], []
        for a in args:
            if isinstance(a, list):
                shapes.append([list(sh) for sh, _ in a])
                types.append("GenericList[" + ",".join(t for _, t in a) + "]")
                tensors.extend(a)
            else:
                shapes.append(list(a[0]))
                types.append(a[1])
                tensors.append(a)
        size = {"Tensor(float)": 4, "Tensor(long int)": 8, "Tensor(bool)": 1}

        def nb(t):
            sh, ty = t
            n = 1
            for v in sh:
                n *= v
            return n * size.get(ty, self.nbytes)
        read = sum(nb(t) for t in tensors)
        first = args[0] if isinstance(args[0], list) else [args[0]]
        name = op.split("::")[-1]
        if name == "copy_":  # read src, write dst (dst's old content is not read)
            nbytes = read
        elif name.endswith("_"):
            nbytes = read + sum(nb(t) for t in first)
        elif name == "embedding":
            nbytes = nb(args[1]) + 2 * nb((args[1][0], args[0][1])) * args[0][0][1]
        elif name == "embedding_dense_backward":
            nbytes = 2 * nb(args[0])
        else:
            ndim = max(len(sh) for sh, _ in tensors)
            out = [1] * ndim
            for sh, _ in tensors:
                for i, v in enumerate(sh):
                    j = ndim - len(sh) + i
                    out[j] = v if out[j] == 1 else (out[j] if v == 1 else max(out[j], v))
            nbytes = read + nb((out, first[0][1]))
        return self._memory_node(op, label, nbytes, repr(shapes), repr(types), deps)

    def _memory_node(self, op, label, nbytes, shapes, types, deps):
        """A memory-bound COMP node moving ``nbytes`` (``tensor_size``; replayed at ``EW_REPLAY_BYTES_PER_S``)."""
        dur = max(1, round(nbytes / EW_REPLAY_BYTES_PER_S * 1e6))
        attrs = {"is_cpu_op": False, "num_ops": 0, "tensor_size": nbytes, "label": label}
        return self._add(op, T.COMP_NODE, attrs, deps, duration=dur, shapes=shapes, types=types)

    def _t(self, *shape):
        return (tuple(shape), self.ttype)

    @property
    def te_fp8(self):
        """Transformer Engine's FP8 casts and transposes are emitted: FP8 linear layers, element-wise nodes on."""
        return self.cfg.gemm_dtype == "fp8" and self.cfg.ew

    def fp8_cast(self, label, rows, cols, deps=()):
        """TE's fused cast + transpose of a ``rows x cols`` GEMM operand to FP8 before an FP8 linear layer:
        read once in ``--dtype``, written as FP8 and as its FP8 transpose (Hopper's FP8 GEMMs take only the
        TN layout, so the weight-gradient GEMM needs the transposed copy). Memory-bound."""
        if not self.te_fp8:
            return None
        return self._te(TE_CAST_TRANSPOSE, label + ".fp8_cast", rows, cols, self.ttype,
                        rows * cols * (self.nbytes + 2), deps)

    def fp8_transpose(self, label, rows, cols, deps=()):
        """TE's transpose of an FP8 operand that was cast without one (a LayerNorm or GeLU output, cast inside
        that kernel), for the weight-gradient GEMM: read and write ``rows x cols`` bytes."""
        if not self.te_fp8:
            return None
        return self._te(TE_FP8_TRANSPOSE, label + ".fp8_transpose", rows, cols, FP8_FWD, 2 * rows * cols, deps)

    def _te(self, op, label, rows, cols, ttype, nbytes, deps):
        return self._memory_node(op, label, nbytes, f"[[{rows}, {cols}]]", f"[{ttype!r}]", deps)

    def fp8_amax(self, label, layers, backward):
        """The end of an FP8 region (one model chunk's forward or backward): TE all-reduces (max) the amaxes of
        its FP8 tensors over the amax group, on the compute stream, then updates the amax histories and scales
        (one kernel over ``FP8_AMAX_HISTORY`` x tensors fp32 values)."""
        if self.cfg.gemm_dtype != "fp8" or self.cfg.inference:
            return
        linears = 4 * layers  # QKV, projection, FC1, FC2 (MoE experts: counted as one FC1/FC2 pair)
        tensors = linears * (FP8_AMAX_BWD if backward else FP8_AMAX_FWD)
        if _amax_reduction(self.cfg):
            self.coll(f"amax.{label}", T.ALL_REDUCE, 4 * tensors, "amax")
        if self.cfg.ew:
            self._te(TE_AMAX_UPDATE, f"{label}.amax_update", FP8_AMAX_HISTORY, tensors, "Tensor(float)",
                     2 * 4 * FP8_AMAX_HISTORY * tensors, ())

    def layer_norm(self, label, deps=()):
        h, r = self.dims.hidden, self.ln_rows
        return self.ew("aten::native_layer_norm", label + ".ln", [self._t(r, h), self._t(h), self._t(h)], deps)

    def layer_norm_bwd(self, label, deps=()):
        h, r, f = self.dims.hidden, self.ln_rows, "Tensor(float)"
        return self.ew("aten::native_layer_norm_backward", label + ".ln",
                       [self._t(r, h), self._t(r, h), ((r, 1), f), ((r, 1), f), self._t(h), self._t(h)], deps)

    def dropout_add(self, label, deps=()):
        """Bias (GPT) + dropout + residual add on the residual stream (Megatron's fused bias-dropout-add, as two
        nodes: ``native_dropout`` of the branch output, then the in-place residual ``add_``)."""
        h, r = self.dims.hidden, self.ln_rows
        if self.cfg.dropout:
            self.ew("aten::native_dropout", label + ".dropout", [self._t(r, h)], deps)
            deps = ()
        bias = [] if self.dims.gated else [self._t(h)]
        return self.ew("aten::add_", label + ".residual", [self._t(r, h), self._t(r, h)] + bias, deps)

    def dropout_bwd(self, label, deps=()):
        """The dropout's backward on the residual stream's gradient (nothing without dropout: the gradient
        passes through unchanged)."""
        h, r = self.dims.hidden, self.ln_rows
        if not self.cfg.dropout:
            return None
        return self.ew("aten::native_dropout_backward", label + ".dropout",
                       [self._t(r, h), ((r, h), "Tensor(bool)")], deps)

    def residual_grad(self, label, deps=()):
        h, r = self.dims.hidden, self.ln_rows
        return self.ew("aten::add_", label + ".residual", [self._t(r, h), self._t(r, h)], deps)

    def act_fwd(self, label, rows, cols):
        """FFN activation on this rank's ``rows x cols`` (cols: the FFN inner size shard): bias + GeLU (fused,
        GPT) or SiLU(gate) * up (gated)."""
        if not self.cfg.ew:
            return
        if self.dims.gated:
            self.ew("aten::silu", label + ".silu", [self._t(rows, cols)])
            self.ew("aten::mul", label + ".mul", [self._t(rows, cols), self._t(rows, cols)])
        else:
            self.ew("aten::gelu", label + ".gelu", [self._t(rows, cols), self._t(cols)])

    def act_bwd(self, label, rows, cols):
        if not self.cfg.ew:
            return
        if self.dims.gated:
            self.ew("aten::mul", label + ".mul.dup", [self._t(rows, cols), self._t(rows, cols)])
            self.ew("aten::mul", label + ".mul.dgate", [self._t(rows, cols), self._t(rows, cols)])
            self.ew("aten::silu_backward", label + ".silu", [self._t(rows, cols), self._t(rows, cols)])
        else:
            self.ew("aten::gelu_backward", label + ".gelu", [self._t(rows, cols), self._t(rows, cols)])

    def attn_unfused_fwd(self, lab, b, hq, q, c, d, deps=()):
        """Megatron-LM (2021) attention without FlashAttention: QK^T bmm, fused scale-mask-softmax and dropout on
        the b*heads*q*c scores, AV bmm (GQA: K/V heads repeated to hq)."""
        bh = b * hq
        sc = (b, hq, q, c)
        self.comp(BMM, lab + ".attn.qk", f"[[{bh}, {q}, {d}], [{bh}, {d}, {c}]]", 2 * bh * q * c * d,
                  bh * (q * d + d * c + q * c), deps)
        self.ew("aten::_softmax", lab + ".attn.softmax", [self._t(*sc)])
        if self.cfg.dropout:
            self.ew("aten::native_dropout", lab + ".attn.dropout", [self._t(*sc)])
        return self.comp(BMM, lab + ".attn.av", f"[[{bh}, {q}, {c}], [{bh}, {c}, {d}]]", 2 * bh * q * c * d,
                         bh * (q * c + c * d + q * d))

    def attn_unfused_bwd(self, lab, b, hq, q, c, d):
        bh = b * hq
        sc = (b, hq, q, c)
        e = bh * (q * c + c * d + q * d)
        f = 2 * bh * q * c * d
        self.comp(BMM, lab + ".attn.dp", f"[[{bh}, {q}, {d}], [{bh}, {d}, {c}]]", f, e)
        self.comp(BMM, lab + ".attn.dv", f"[[{bh}, {c}, {q}], [{bh}, {q}, {d}]]", f, e)
        if self.cfg.dropout:
            self.ew("aten::native_dropout_backward", lab + ".attn.dropout", [self._t(*sc), (sc, "Tensor(bool)")])
        self.ew("aten::_softmax_backward_data", lab + ".attn.softmax", [self._t(*sc), self._t(*sc)])
        self.comp(BMM, lab + ".attn.dq", f"[[{bh}, {q}, {c}], [{bh}, {c}, {d}]]", f, e)
        return self.comp(BMM, lab + ".attn.dk", f"[[{bh}, {c}, {q}], [{bh}, {q}, {d}]]", f, e)

    def _attn_steps(self, q):
        """FlashAttention calls per layer: ``[(keys timed, keys of the model FLOPs, is_causal), ...]``.

        Without context parallelism one call of the ``q`` queries against all ``self.ctx`` keys, causal in
        training and prefill (decode: one query against the whole cache). With ``--cp``: one call per ring step,
        as Transformer Engine runs it (step j on the K/V chunk received at step j, overlapping the next
        transfer). Causal CP uses Megatron's load-balanced layout (rank c holds sequence chunks c and
        2CP-1-c of 2CP): step 0 is the rank's own chunks, causal; every other step does half a block, which TE
        computes as all queries against the first half of an earlier rank's keys or the second half of the
        queries against all of a later rank's keys -- the same work; both are timed here as all ``q`` queries
        against ``q/2`` keys, so that every rank of a stage gets the same trace. ``num_ops`` counts the model's
        FLOPs (the full ``q x keys`` block, no causal saving, as Megatron-LM's FLOP formula does); the gpu model
        times the executed work from the shapes and ``is_causal``."""
        cfg = self.cfg
        causal = cfg.causal and cfg.mode not in ("decode", "mixed")
        if cfg.cp == 1:
            return [(self.ctx, self.ctx, causal)]
        return [(q, q, causal)] + [(q // 2 if causal else q, q, False)] * (cfg.cp - 1)

    def flash_fwd(self, lab, b, hq, hkv, q, d, recvs, extra=None, steps=None):
        """Forward FlashAttention (see :meth:`_attn_steps`, or the given ``steps``); ``recvs``: the CP ring's K/V
        receives."""
        node = None
        for j, (k, kf, causal) in enumerate(steps or self._attn_steps(q)):
            label = lab + ".attn" + (f".cp{j}" if self.cfg.cp > 1 else "")
            # _scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask)
            node = self.comp(ATTN, label, f"[[{b}, {hq}, {q}, {d}], [{b}, {hkv}, {k}, {d}], [{b}, {hkv}, {k}, {d}]]",
                             4 * b * q * kf * d * hq, b * d * (2 * q * hq + 2 * k * hkv), recvs[j - 1:j],
                             extra=extra, values=f"[[], [], [], 0.0, {causal}, False]")
        return node

    def flash_bwd(self, lab, b, hq, hkv, q, d):
        """Backward FlashAttention, one call per forward call. Returns the node after which the CP ring can send
        dK/dV back (step 1's, the first remote chunk; without CP the only node)."""
        nodes = []
        for j, (k, kf, causal) in enumerate(self._attn_steps(q)):
            label = lab + ".attn" + (f".cp{j}" if self.cfg.cp > 1 else "")
            # _scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, logsumexp,
            #     cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset)
            nodes.append(self.comp(ATTN_BWD, label, f"[[{b}, {hq}, {q}, {d}], [{b}, {hq}, {q}, {d}], "
                                   f"[{b}, {hkv}, {k}, {d}], [{b}, {hkv}, {k}, {d}]]",
                                   8 * b * q * kf * d * hq, b * q * d * 4 * hq + b * k * d * 4 * hkv,
                                   values=f"[[], [], [], [], [], [], None, None, 0, 0, 0.0, {causal}, None, None]"))
        return nodes[min(1, len(nodes) - 1)]

    def optimizer(self, params):
        """Adam over this rank's ``params`` (fp32 master weights, grads, two moments): one ``_fused_adam_``
        node after every gradient reduction of the step; ZeRO-1/2 parameter all-gathers follow it."""
        f = "Tensor(float)"
        one = [((params,), f)]
        node = self.ew("aten::_fused_adam_", "optimizer.adam", [one, one, one, one], self.syncs)
        for label, size, group in self.deferred:
            self.coll(label, T.ALL_GATHER, size, group, [node], chain=False)
        return node

    def coll(self, label, comm_type, size, group, deps=(), chain=True, overlap=None):
        """A collective over ``group`` on a buffer of ``size`` bytes: the input of an all-reduce, reduce-scatter
        or all-to-all, the gathered output of an all-gather, whose ``comm_size`` becomes each rank's share.
        ``overlap``: its Transformer Engine userbuffers name, if it is one (for ``--comm-sms``)."""
        if comm_type == T.ALL_GATHER:
            size = self._gather_bytes(size, group)
        attrs = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size}
        self._sms(attrs, overlap, "dp" if group in ("dpcp", "edp") else group)
        return self._add(label, T.COMM_COLL_NODE, attrs, deps, dyn=(group,), chain=chain)

    def send(self, label, direction, tag, deps, size=None, kind="send", sms_key="pp"):
        size = self.p2p_bytes if size is None else size
        attrs = {"is_cpu_op": False, "comm_size": size, "comm_tag": tag}
        self._sms(attrs, sms_key)
        return self._add(label, T.COMM_SEND_NODE, attrs, deps, dyn=(kind, direction), chain=False)

    def recv(self, label, direction, tag, size=None, kind="recv", sms_key="pp"):
        size = self.p2p_bytes if size is None else size
        attrs = {"is_cpu_op": False, "comm_size": size, "comm_tag": tag}
        self._sms(attrs, sms_key)
        return self._add(label, T.COMM_RECV_NODE, attrs, (), dyn=(kind, direction), chain=False)

    def _pp_arrival(self, label, direction, tag):
        """A pipeline receive (``label``) and what the stage's first node waits for after it: the receive, or with
        ``--pp-scatter-gather`` the TP all-gather (``tp_ag.<label>``) that rebuilds the whole ``b*s*h``
        activation or gradient from the TP ranks' 1/TP pieces (Megatron-LM's scatter-gather optimisation)."""
        recv = self.recv(label, direction, tag)
        if not self.cfg.pp_scatter_gather:
            return [recv]
        return [self.coll(f"tp_ag.{label}", T.ALL_GATHER, self.act_bytes, "tp", [recv], chain=False)]

    def _sms(self, attrs, *keys):
        """``--comm-sms``: the first of ``keys`` that has a value sets the node's ``comm_sms`` attribute (the SMs
        its kernel occupies, for the gpu model's contention)."""
        for key in keys:
            if key is not None and key in self.comm_sms:
                attrs["comm_sms"] = self.comm_sms[key]
                return

    def _cp_ring(self, label, layer, mb, phase, start):
        """Ring exchange over the CP group: CP-1 steps, each sending the chunk held (own K,V chunk first, then the
        one received in the previous step) to CP index c+1 and receiving from c-1. Returns the receive ids."""
        cfg, dims = self.cfg, self.dims
        if cfg.cp == 1:
            return []
        size = 2 * cfg.micro_batch_size * self.seq * (dims.kv_heads // cfg.tp) * dims.head_dim * self.nbytes
        recvs, prev = [], start
        for j in range(1, cfg.cp):
            tag = CP_TAG_BASE + (((phase * dims.layers + layer) * cfg.micro_batches + mb) * cfg.cp + j)
            self.send(f"cp_send.{label}.{j}", +1, tag, [prev], size, "cpsend", "cp")
            prev = self.recv(f"cp_recv.{label}.{j}", -1, tag, size, "cprecv", "cp")
            recvs.append(prev)
        return recvs

    def _tp_ring_step(self, label, j, deps, gathered_bytes):
        """One step of a TP ring (``--tp-comm-overlap``): send one shard (``gathered_bytes/TP``: ``b*s*h``
        elements) to TP index t+1 after ``deps``, receive one from t-1. Returns the receive's id."""
        tag = TP_TAG_BASE + self.tp_tags
        self.tp_tags += 1
        size = gathered_bytes // self.cfg.tp
        overlap = _te_overlap(label)
        self.send(f"tp_send.{label}.{j}", +1, tag, deps, size, "tpsend", overlap)
        return self.recv(f"tp_recv.{label}.{j}", -1, tag, size, "tprecv", overlap)

    def ag_mm(self, ag_label, mm_label, m, k, n, deps=()):
        """Sequence-parallel all-gather of the ``[m, k]`` input (none without sequence parallelism), then
        ``[m,k] x [k,n]``. With
        ``--tp-comm-overlap`` (Transformer Engine's userbuffers): the GEMM runs in TP row chunks; chunk 0 on the
        local shard while a ring passes the other shards along, chunk j as soon as shard j arrived."""
        if not self.cfg.tp_comm_overlap:
            if self.cfg.sequence_parallel and self._tp("ag", ag_label, deps) is not None:
                deps = []
            return self.mm(mm_label, m, k, n, deps)
        tp = self.cfg.tp
        start = list(deps) + ([] if self.prev is None else [self.prev])
        # each transfer is emitted before the GEMM chunk launched with it (lower id: issued first when both become
        # ready at once), so that the gpu model's --gpu-contention sees it running beside that chunk
        overlap = _te_overlap(f"ag.{ag_label}")
        recv = self._tp_ring_step(f"ag.{ag_label}", 1, start, self.ag_bytes)
        node = self.mm(f"{mm_label}.c0", m // tp, k, n, deps, overlap=overlap)
        for j in range(1, tp):
            arrived = recv
            if j + 1 < tp:
                recv = self._tp_ring_step(f"ag.{ag_label}", j + 1, [arrived], self.ag_bytes)
            node = self.mm(f"{mm_label}.c{j}", m // tp, k, n, [arrived], overlap=overlap)
        return node

    def mm_rs(self, mm_label, rs_label, m, k, n, deps=()):
        """``[m,k] x [k,n]``, then the TP reduction of its output (reduce-scatter with sequence parallelism,
        all-reduce without). With
        ``--tp-comm-overlap``: the GEMM runs in TP row chunks, and a ring accumulates the partial sums (send the
        partial of the previous chunk, receive one, add it to this chunk's: ``aten::add_`` of one shard)
        while the next chunk computes."""
        if not self.cfg.tp_comm_overlap:
            node = self.mm(mm_label, m, k, n, deps)
            self._tp("rs" if self.cfg.sequence_parallel else "ar", rs_label)
            return node
        tp = self.cfg.tp
        rows = m // tp
        overlap = _te_overlap(f"rs.{rs_label}")
        node = self.mm(f"{mm_label}.c0", rows, k, n, deps, overlap=overlap)
        for j in range(1, tp):
            recv = self._tp_ring_step(f"rs.{rs_label}", j, [node], self.act_bytes)
            self.mm(f"{mm_label}.c{j}", rows, k, n, overlap=overlap)
            node = self.ew("aten::add_", f"{rs_label}.rs_add{j}", [self._t(rows, n), self._t(rows, n)], [recv])
        return node

    # -- the model ------------------------------------------------------------------------------------------
    def _tp(self, kind, label, deps=()):
        """A TP collective: kind 'ar' (all-reduce), 'ag' (all-gather) or 'rs' (reduce-scatter)."""
        if self.cfg.tp == 1:
            return None
        comm = {"ar": T.ALL_REDUCE, "ag": T.ALL_GATHER, "rs": T.REDUCE_SCATTER}[kind]
        return self.coll(f"tp_{kind}.{label}", comm, self.act_bytes, "tp", deps)

    def layer_forward(self, layer, mb, deps=(), tag=None):
        dims, cfg, tp = self.dims, self.cfg, self.cfg.tp
        h, d, b, n = dims.hidden, dims.head_dim, cfg.micro_batch_size, self.tokens
        q, c = self.seq, self.ctx
        sp = cfg.sequence_parallel
        tag = tag or self.fwd_tag
        lab = f"{tag}.l{layer}.mb{mb}"
        qkv = (h + 2 * dims.kv_heads * d) // tp
        f1 = (2 if dims.gated else 1) * dims.ffn_hidden // tp
        deps = list(deps)
        ew = cfg.ew
        if ew:  # deps stay on the first GEMM too (ZeRO-3 gathers; already ordered by the chain)
            self.layer_norm(lab + ".ln1", deps)
        qkv_node = self.ag_mm(lab + ".attn_in", lab + ".qkv", n, h, qkv, deps)
        hq, hkv = dims.heads // tp, dims.kv_heads // tp
        if cfg.inference:  # this step's keys and values go into the KV cache (K and V as one copy)
            kv_new = self._t(2, b, hkv, q, d)
            qkv_node = self.ew("aten::copy_", lab + ".kv_write", [kv_new, kv_new])
            if cfg.mode == "mixed":
                kv_chunk = self._t(2, 1, hkv, cfg.prefill_chunk, d)
                qkv_node = self.ew("aten::copy_", lab + ".prefill.kv_write", [kv_chunk, kv_chunk])
        ring = self._cp_ring(lab + ".kv", layer, mb, 1 if tag == "recompute" else 0, qkv_node)
        if cfg.attention == "unfused":
            self.attn_unfused_fwd(lab, b, hq, q, c, d, ring)
        else:
            decode = cfg.mode in ("decode", "mixed")
            kv_bytes = {"kv_cache_bytes": 2 * b * c * d * hkv * self.nbytes} if decode else None
            self.flash_fwd(lab, b, hq, hkv, q, d, ring, kv_bytes)
            if cfg.mode == "mixed":  # the prefill chunk: causal over the cached prompt tokens and itself
                chunk, keys = cfg.prefill_chunk, cfg.prefill_done + cfg.prefill_chunk
                self.flash_fwd(lab + ".prefill", 1, hq, hkv, chunk, d, [],
                               {"kv_cache_bytes": 2 * keys * d * hkv * self.nbytes},
                               steps=[(keys, keys, cfg.causal)])
        self.fp8_cast(lab + ".proj", n, h // tp)  # (QKV, FC1, FC2 inputs: cast inside LayerNorm / GeLU)
        self.mm_rs(lab + ".proj", lab + ".attn_out", n, h // tp, h)
        if ew:
            self.dropout_add(lab + ".attn_out")
            self.layer_norm(lab + ".ln2")
        if dims.is_moe_layer(layer):
            if sp:
                self._tp("ag", lab + ".mlp_in")
            self.moe_forward(lab, layer)
            self._tp("rs" if sp else "ar", lab + ".mlp_out")
        else:
            self.ag_mm(lab + ".mlp_in", lab + ".fc1", n, h, f1)
            self.act_fwd(lab + ".fc1", n, dims.ffn_hidden // tp)
            self.mm_rs(lab + ".fc2", lab + ".mlp_out", n, dims.ffn_hidden // tp, h)
        if ew:
            self.dropout_add(lab + ".mlp_out")

    def _a2a(self, label, layer, deps=()):
        """An expert all-to-all (EP > 1; returns whether there is one). Balanced routing: ``a2a_bytes`` per rank.
        With ``--moe-expert-load`` it is an all-to-all-v: rank e sends ``loads[j]`` token copies to EP rank j
        (:func:`ep_loads`) and gets ``loads[e]`` from each in the dispatch, the reverse in the combine. Its time
        is set by the busiest receiver (dispatch) or sender (combine), whose EP - 1 messages all carry
        ``max(loads)`` copies, so it is timed as the all-to-all whose per-peer message has that size:
        ``comm_size = EP * max(loads) * h * bytes`` on every rank (balanced loads: ``a2a_bytes``)."""
        cfg = self.cfg
        if cfg.ep == 1:
            return False
        size = self.a2a_bytes
        if cfg.moe_expert_load:
            size = cfg.ep * max(self.ep_loads(layer)) * self.dims.hidden * self.nbytes
        self.coll(f"ep_a2a.{label}", T.ALL_TO_ALL, size, "ep", deps)
        return True

    def ep_loads(self, layer):
        """Token copies this rank sends to each EP rank's experts in ``layer`` (see :func:`ep_loads`; computed
        once per layer, as every micro-batch and phase routes the same)."""
        if layer not in self._ep_loads:
            self._ep_loads[layer] = ep_loads(self.dims, self.cfg, self.tokens, self.dims.moe_index(layer))
        return self._ep_loads[layer]

    def expert_rows(self, layer):
        """Token copies this rank's experts compute in ``layer``: :func:`routed_rows` (balanced routing, or the
        --moe-imbalance straggler), or with --moe-expert-load EP x its share from every rank."""
        if not self.cfg.moe_expert_load:
            return self.routed
        return self.cfg.ep * self.ep_loads(layer)[self.e]

    def moe_forward(self, lab, layer):
        """The router (gate GEMM + softmax over the experts) on this rank's tokens (split over TP with sequence
        parallelism, replicated without); shared experts on every token; all-to-all dispatch; the routed experts
        as one grouped GEMM over the token copies this rank receives (balanced routing: tokens*top_k, or
        :func:`routed_rows` with a capacity factor; :meth:`expert_rows`); all-to-all combine."""
        dims, tp, n, h = self.dims, self.cfg.tp, self.tokens, self.dims.hidden
        mf = dims.expert_ffn // tp
        gm = 2 if dims.gated else 1
        self.mm(lab + ".router", self.ln_rows, h, dims.experts, linear=False)
        if self.cfg.ew:
            self.ew("aten::_softmax", lab + ".router.softmax", [self._t(self.ln_rows, dims.experts)])
        if dims.shared_experts:
            sf = dims.shared_experts * mf
            self.fp8_cast(lab + ".shared.fc1", n, h)  # (FP8: the expert MLPs are plain TE linears, no fused casts)
            self.mm(lab + ".shared.fc1", n, h, gm * sf)
            self.act_fwd(lab + ".shared.fc1", n, sf)
            self.fp8_cast(lab + ".shared.fc2", n, sf)
            self.mm(lab + ".shared.fc2", n, sf, h)
        self._a2a(lab + ".dispatch", layer)
        nk = self.expert_rows(layer)
        self.fp8_cast(lab + ".experts.fc1", nk, h)
        self.mm(lab + ".experts.fc1", nk, h, gm * mf)
        self.act_fwd(lab + ".experts.fc1", nk, mf)
        self.fp8_cast(lab + ".experts.fc2", nk, mf)
        self.mm(lab + ".experts.fc2", nk, mf, h)
        self._a2a(lab + ".combine", layer)

    def moe_backward(self, lab, layer, deps=()):
        dims, tp, n, h = self.dims, self.cfg.tp, self.tokens, self.dims.hidden
        mf = dims.expert_ffn // tp
        f1 = (2 if dims.gated else 1) * mf
        nk = self.expert_rows(layer)
        if self._a2a(lab + ".combine", layer, deps):
            deps = ()
        if self.fp8_cast(lab + ".experts.fc2.dgrad", nk, h, deps) is not None:  # FP8: the output gradients
            deps = ()
        self.mm(lab + ".experts.fc2.dgrad", nk, h, mf, deps)
        self.mm(lab + ".experts.fc2.wgrad", mf, nk, h)
        self.act_bwd(lab + ".experts.fc1", nk, mf)
        self.fp8_cast(lab + ".experts.fc1.dgrad", nk, f1)
        self.mm(lab + ".experts.fc1.dgrad", nk, f1, h)
        self.mm(lab + ".experts.fc1.wgrad", h, nk, f1)
        self._a2a(lab + ".dispatch", layer)
        if dims.shared_experts:
            sf, sf1 = dims.shared_experts * mf, dims.shared_experts * f1
            self.fp8_cast(lab + ".shared.fc2.dgrad", n, h)
            self.mm(lab + ".shared.fc2.dgrad", n, h, sf)
            self.mm(lab + ".shared.fc2.wgrad", sf, n, h)
            self.act_bwd(lab + ".shared.fc1", n, sf)
            self.fp8_cast(lab + ".shared.fc1.dgrad", n, sf1)
            self.mm(lab + ".shared.fc1.dgrad", n, sf1, h)
            self.mm(lab + ".shared.fc1.wgrad", h, n, sf1)
        rows, E = self.ln_rows, dims.experts
        if self.cfg.ew:
            self.ew("aten::_softmax_backward_data", lab + ".router.softmax",
                    [self._t(rows, E), self._t(rows, E)])
        self.mm(lab + ".router.dgrad", rows, E, h, linear=False)
        self.mm(lab + ".router.wgrad", h, rows, E, linear=False)

    def layer_backward(self, layer, mb, deps=()):
        dims, cfg, tp = self.dims, self.cfg, self.cfg.tp
        h, d, b, s, n = dims.hidden, dims.head_dim, cfg.micro_batch_size, dims.seq_len, self.tokens
        q = self.seq  # this rank's queries (s / CP); keys/values: all s
        sp = cfg.sequence_parallel
        lab = f"bwd.l{layer}.mb{mb}"
        qkv = (h + 2 * dims.kv_heads * d) // tp
        f1 = (2 if dims.gated else 1) * dims.ffn_hidden // tp
        ff = dims.ffn_hidden // tp
        deps = list(deps)
        ew = cfg.ew
        if ew:  # the residual stream's gradient through the MLP branch's dropout (before any SP gather)
            self.dropout_bwd(lab + ".mlp_out", deps)
        overlap = cfg.tp_comm_overlap  # (the ring helpers: dgrad GEMMs in chunks, wgrad after)
        if overlap and not dims.is_moe_layer(layer):
            if self.fp8_cast(lab + ".fc2.dgrad", n, h, deps) is not None:  # FP8: the output gradient
                deps = []
            self.ag_mm(lab + ".mlp_out", lab + ".fc2.dgrad", n, h, ff, deps)
            self.fp8_transpose(lab + ".fc2.wgrad", n, ff)  # the GeLU output, cast in forward
            self.mm(lab + ".fc2.wgrad", ff, n, h)
            self.act_bwd(lab + ".fc1", n, ff)  # (FP8: the cast of its output is fused into it)
            gathered = self._regather(lab + ".mlp_in")
            self.mm_rs(lab + ".fc1.dgrad", lab + ".mlp_in", n, f1, h)
            self.fp8_transpose(lab + ".fc1.wgrad", n, h, gathered)  # the LayerNorm output
            self.mm(lab + ".fc1.wgrad", h, n, f1, gathered)
        else:
            if sp and self._tp("ag", lab + ".mlp_out", deps) is not None:
                deps = []
            if dims.is_moe_layer(layer):
                self.moe_backward(lab, layer, deps)
            else:
                if self.fp8_cast(lab + ".fc2.dgrad", n, h, deps) is not None:
                    deps = []
                self.mm(lab + ".fc2.dgrad", n, h, ff, deps)
                self.fp8_transpose(lab + ".fc2.wgrad", n, ff)
                self.mm(lab + ".fc2.wgrad", ff, n, h)
                self.act_bwd(lab + ".fc1", n, ff)
                gathered = self._regather(lab + ".mlp_in")
                self.mm(lab + ".fc1.dgrad", n, f1, h)
                self.fp8_transpose(lab + ".fc1.wgrad", n, h, gathered)
                self.mm(lab + ".fc1.wgrad", h, n, f1, gathered)
            self._tp("rs" if sp else "ar", lab + ".mlp_in")
        if ew:
            self.layer_norm_bwd(lab + ".ln2")
            self.residual_grad(lab + ".ln2")
            self.dropout_bwd(lab + ".attn_out")
        self.fp8_cast(lab + ".proj.dgrad", n, h)
        self.ag_mm(lab + ".attn_out", lab + ".proj.dgrad", n, h, h // tp)
        self.mm(lab + ".proj.wgrad", h // tp, n, h)  # (its input's transpose was written by the forward cast)
        hq, hkv = dims.heads // tp, dims.kv_heads // tp
        if cfg.attention == "unfused":
            attn = self.attn_unfused_bwd(lab, b, hq, q, s, d)
        else:  # (CP: the dK/dV ring starts when the first remote chunk's gradients are done)
            attn = self.flash_bwd(lab, b, hq, hkv, q, d)
        ring = self._cp_ring(lab + ".dkv", layer, mb, 2, attn)  # dK, dV back to their owners
        gathered = self._regather(lab + ".attn_in", ring)
        if self.fp8_cast(lab + ".qkv.dgrad", n, qkv, ring) is not None:
            ring = []
        if overlap:
            out = self.mm_rs(lab + ".qkv.dgrad", lab + ".attn_in", n, qkv, h, ring)
            self.fp8_transpose(lab + ".qkv.wgrad", n, h, gathered)
            self.mm(lab + ".qkv.wgrad", h, n, qkv, gathered)
        else:
            self.mm(lab + ".qkv.dgrad", n, qkv, h, ring)
            self.fp8_transpose(lab + ".qkv.wgrad", n, h, gathered)
            self.mm(lab + ".qkv.wgrad", h, n, qkv, gathered)
            out = self._tp("rs" if sp else "ar", lab + ".attn_in")
        if ew:
            self.layer_norm_bwd(lab + ".ln1")
            out = self.residual_grad(lab + ".ln1")
        return out

    def _regather(self, label, deps=()):
        """Sequence parallelism: Megatron-LM (and Transformer Engine) keep only this rank's shard of a
        column-parallel layer's input (QKV, FC1) and all-gather it again in backward for the weight gradient,
        launched just before the input-gradient GEMM so that it overlaps it. Off the compute chain; returns
        ``[gather id]`` for the wgrad GEMM to wait on (``[]`` without sequence parallelism)."""
        if not self.cfg.sequence_parallel or self.cfg.tp == 1:
            return []
        deps = list(deps) + ([] if self.prev is None else [self.prev])
        overlap = _te_overlap(f"regather.{label}") if self.cfg.tp_comm_overlap else None
        return [self.coll(f"tp_ag.{label}.regather", T.ALL_GATHER, self.ag_bytes, "tp", deps, chain=False,
                          overlap=overlap)]

    def grad_sync(self, label, params, group="dp", mb=None):
        """Gradient synchronisation of ``params`` (this rank's shard) over the DP group (or, for expert weights,
        the expert-data-parallel group of DP/EP ranks), off the compute chain. ``mb``: with
        ``--grad-sync-every-micro-batch``, the micro-batch whose gradients these are (label ``.mb<k>``); ZeRO-1/2
        gather the updated parameters once, after the last one."""
        cfg = self.cfg
        group = self.dgroup if group == "dp" else group
        if cfg.inference or self._group_size(group) == 1 or params == 0:
            return
        size = params * self.nbytes
        last = mb is None or mb == cfg.micro_batches - 1
        ag_label = f"{group}_ag.{label}"
        if mb is not None:
            label = f"{label}.mb{mb}"
        if cfg.zero == 3:  # parameters stay sharded: gradients are only reduce-scattered
            self.syncs.append(self.coll(f"{group}_rs.{label}", T.REDUCE_SCATTER, size, group, [self.prev],
                                        chain=False))
        elif cfg.zero:
            rs = self.coll(f"{group}_rs.{label}", T.REDUCE_SCATTER, size, group, [self.prev], chain=False)
            self.syncs.append(rs)
            if cfg.overlap_param_gather or not last:  # (overlapped: gathered at the next step's start)
                pass
            elif cfg.ew:  # the updated shards are gathered after the optimizer step
                self.deferred.append((ag_label, size, group))
            else:
                self.coll(ag_label, T.ALL_GATHER, size, group, [rs], chain=False)
        else:
            self.syncs.append(self.coll(f"{group}_ar.{label}", T.ALL_REDUCE, size, group, [self.prev],
                                        chain=False))

    def _group_size(self, group):
        cfg = self.cfg
        return {"tp": cfg.tp, "dp": cfg.dp, "cp": cfg.cp, "dpcp": cfg.dp * cfg.cp,
                "edp": cfg.dp // cfg.ep * cfg.cp, "amax": cfg.tp * cfg.dp * cfg.cp}[group]

    def _gather_bytes(self, total_bytes, group):
        """An all-gather's ``comm_size``: what each rank contributes, i.e. the gathered ``total_bytes`` over the
        group's ranks, rounded up (Chakra's and the reference's meaning: the output is group size x comm_size)."""
        n = self._group_size(group)
        return -(-total_bytes // n)

    def _gather(self, label, dense, expert):
        """ZeRO-3: all-gather a unit's parameter shards (dense over DP(xCP), experts over expert-DP), off the
        chain, issued at the current point of the compute chain; returns the ids (compute waits on them)."""
        cfg, out = self.cfg, []
        if cfg.zero != 3 or cfg.inference:
            return out
        for group, params in ((self.dgroup, dense), ("edp", expert)):
            if params and self._group_size(group) > 1:
                deps = [] if self.prev is None else [self.prev]
                out.append(self.coll(f"{group}_ag.{label}", T.ALL_GATHER, params * self.nbytes, group, deps,
                                     chain=False))
        return out

    def _z3(self, units, name, store, params, phase):
        """Gather ``name`` (if not yet) and prefetch the next unit of ``units``; the ids ``name``'s compute needs."""
        i = units.index(name)
        for u in units[i:i + 2]:
            if u not in store:
                store[u] = self._gather(f"{u}.{phase}", *params[u])
        return store[name]

    def param_gathers(self, params):
        """``--overlap-param-gather`` (Megatron's ``--overlap-param-gather``, NeMo's ``overlap_param_sync``): the
        ZeRO-1/2 all-gathers of the parameters the previous step's optimizer updated, issued at the start of the
        step in forward order, one unit after the other (each waits for the previous, as bucketed prefetching
        does); a unit's first forward waits for its own. In steady state this is the same as gathering after
        the optimizer and overlapping with the next step's forward. Returns {unit: [gather ids]}."""
        cfg, p = self.cfg, self.p
        P, V = cfg.pp, cfg.virtual_stages
        if not cfg.overlap_param_gather:
            return {}
        per_chunk = self.dims.layers // (P * V)
        out, prev = {}, []
        order = [(v, u) for v in range(p, P * V, P) for u in
                 (["embedding"] if v == 0 else []) + [f"l{i}" for i in range(v * per_chunk, (v + 1) * per_chunk)]
                 + (["head"] if v == P * V - 1 else [])]
        for _, unit in order:
            dense, expert = params[unit]
            ids = []
            for group, n in ((self.dgroup, dense), ("edp", expert)):
                if n and self._group_size(group) > 1:
                    label = unit if group == self.dgroup else f"{unit}.experts"
                    prev = [self.coll(f"{group}_ag.{label}", T.ALL_GATHER, n * self.nbytes, group, prev,
                                      chain=False)]
                    ids += prev
            out[unit] = ids
        return out

    def schedule(self):
        """[(kind 'F'/'B', model chunk, micro-batch)] of this pipeline rank, in execution order."""
        cfg, p, P, M, V = self.cfg, self.p, self.cfg.pp, self.cfg.micro_batches, self.cfg.virtual_stages
        if cfg.inference:
            return [("F", 0, i) for i in range(M)]
        if V == 1:
            warmup = min(P - p - 1, M)
            order = [("F", 0, i) for i in range(warmup)]
            for i in range(M - warmup):
                order += [("F", 0, warmup + i), ("B", 0, i)]
            return order + [("B", 0, i) for i in range(M - warmup, M)]
        # Megatron's interleaved schedule: virtual micro-batch k runs chunk (k mod PV) // P (backward: reversed)
        total = M * V
        warmup = min((P - p - 1) * 2 + (V - 1) * P, total)

        def item(kind, k):
            c = (k % (P * V)) // P
            return (kind, c if kind == "F" else V - 1 - c, (k // (P * V)) * P + k % P)
        order = [item("F", k) for k in range(warmup)]
        for i in range(total - warmup):
            order += [item("F", warmup + i), item("B", i)]
        return order + [item("B", k) for k in range(total - warmup, total)]

    def _steps(self):
        """``(step, (kind, chunk, micro-batch))`` in execution order: the schedule once, or once per decode step
        (each attends to one more cached position and labels its forward nodes ``fwd.s<step>``)."""
        steps = self.cfg.steps
        ctx = self.ctx
        for step in range(steps):
            self.ctx = ctx + step
            if steps > 1:
                self.fwd_tag = f"fwd.s{step}"
            for item in self.schedule():
                yield step, item
        self.ctx = ctx

    def build(self):
        dims, cfg, p, P = self.dims, self.cfg, self.p, self.cfg.pp
        V = cfg.virtual_stages
        per_chunk = dims.layers // (P * V)
        vocab = padded_vocab(dims, cfg.tp) // cfg.tp
        n, h = self.tokens, dims.hidden
        M = cfg.micro_batches
        params = {"embedding": (vocab * h, 0), "head": (vocab * h, 0)}
        params.update({f"l{i}": layer_shards(dims, cfg, dims.is_moe_layer(i)) for i in range(dims.layers)})
        # ZeRO-3: (chunk, phase[, mb]) -> {unit: gather ids}; gathered once per step per phase and reused by the
        # micro-batches, or with --reshard-after-forward again for every micro-batch (labels .fwd|bwd.mb<k>)
        z3 = {}
        reshard = cfg.reshard_after_forward
        every = cfg.grad_sync_every_micro_batch
        steps = cfg.steps
        token_tags = 2 * M * V * steps  # decode: next-token messages (last stage -> first) use tags from here
        token_bytes = cfg.micro_batch_size * 8  # one int64 token id per sequence
        pg = self.param_gathers(params)
        for step, (kind, ch, mb) in self._steps():
            base = 2 * M * V * step  # p2p tags of this decode step
            v = ch * P + p  # virtual stage
            first, last = v == 0, v == P * V - 1
            layers = range(v * per_chunk, (v + 1) * per_chunk)
            cs = f".c{ch}" if V > 1 else ""
            if kind == "F":
                units = (["embedding"] if first else []) + [f"l{i}" for i in layers] + (["head"] if last else [])
                gather = cfg.zero == 3 and (mb == 0 or reshard)
                phase = f"fwd.mb{mb}" if reshard else "fwd"
                store = z3.setdefault((ch, phase), {})
                sc = ch if p > 0 else ch - 1  # the sender's chunk
                deps = [] if first else self._pp_arrival(f"recv_act{cs}.mb{mb}", -1, base + 2 * (sc * M + mb))
                if first and step > 0 and P > 1:  # the token the last stage sampled in the previous step
                    deps = [self.recv(f"recv_token.s{step}.mb{mb}", -1, token_tags + step * M + mb, token_bytes)]
                for i, layer in enumerate(layers):
                    extra = []
                    emb = pg["embedding"] if pg and mb == 0 and first and i == 0 else []
                    if pg and mb == 0:
                        extra += pg[f"l{layer}"]
                    if gather:
                        if first and i == 0:
                            extra += self._z3(units, "embedding", store, params, phase)
                        extra += self._z3(units, f"l{layer}", store, params, phase)
                    if i == 0 and first and cfg.ew:  # the embedding lookup
                        idx = ((cfg.micro_batch_size, self.seq), "Tensor(long int)")
                        self.ew("aten::embedding", f"fwd.embedding.mb{mb}", [self._t(vocab, h), idx],
                                deps + emb + (extra if cfg.zero == 3 else []))
                        deps = emb = []  # (the layer's first GEMM still names its ZeRO-3 gathers)
                    self.layer_forward(layer, mb, (deps if i == 0 else []) + emb + extra)
                self.fp8_amax(f"{self.fwd_tag}{cs}.mb{mb}", len(layers), backward=False)
                if last:
                    extra = self._z3(units, "head", store, params, phase) if gather else []
                    if pg and mb == 0:
                        extra += pg["head"]
                    rows = n
                    if cfg.logits == "last":  # serving: only each sequence's last position (and the chunk's) is sampled
                        rows = cfg.micro_batch_size + (1 if cfg.mode == "mixed" else 0)
                    self.mm(f"{self.fwd_tag}.head.mb{mb}", rows, h, vocab, extra, linear=False)
                    if cfg.ew:  # vocab-parallel cross entropy over this rank's logits
                        self.ew("aten::_log_softmax", f"fwd.head.mb{mb}.cross_entropy", [self._t(n, vocab)])
                if last and step + 1 < steps and P > 1:
                    self.send(f"send_token.s{step + 1}.mb{mb}", +1, token_tags + (step + 1) * M + mb, [self.prev],
                              token_bytes)
                if not last:
                    self.send(f"send_act{cs}.mb{mb}", +1, base + 2 * (ch * M + mb), [self.prev])
            else:
                units = (["head"] if last else []) + [f"l{i}" for i in reversed(layers)] + \
                        (["embedding"] if first else [])
                gather = cfg.zero == 3 and (mb == 0 or reshard)
                phase = f"bwd.mb{mb}" if reshard else "bwd"
                store = z3.setdefault((ch, phase), {})
                sync = mb == M - 1 or every  # gradients reduced after this micro-batch
                smb = mb if every else None
                sc = ch if p < P - 1 else ch + 1
                deps = [] if last else self._pp_arrival(f"recv_grad{cs}.mb{mb}", +1, 2 * (sc * M + mb) + 1)
                if last:
                    extra = self._z3(units, "head", store, params, phase) if gather else []
                    if cfg.ew:
                        self.ew("aten::_log_softmax_backward_data", f"bwd.head.mb{mb}.cross_entropy",
                                [self._t(n, vocab), self._t(n, vocab)], deps + extra)
                        deps, extra = [], []
                    self.mm(f"bwd.head.mb{mb}.dgrad", n, vocab, h, deps + extra, linear=False)
                    self.mm(f"bwd.head.mb{mb}.wgrad", h, n, vocab, linear=False)
                    deps = []
                    if sync:
                        self.grad_sync("head", vocab * h, mb=smb)
                for layer in reversed(layers):
                    if gather:
                        deps = deps + self._z3(units, f"l{layer}", store, params, phase)
                    if cfg.recompute:
                        self.layer_forward(layer, mb, deps, tag="recompute")
                        deps = []
                    self.layer_backward(layer, mb, deps)
                    deps = []
                    if sync:
                        lp, elp = params[f"l{layer}"]
                        self.grad_sync(f"l{layer}", lp, mb=smb)
                        self.grad_sync(f"l{layer}.experts", elp, "edp", mb=smb)
                self.fp8_amax(f"bwd{cs}.mb{mb}", len(layers), backward=True)
                if not first:
                    self.send(f"send_grad{cs}.mb{mb}", -1, 2 * (ch * M + mb) + 1, [self.prev])
                else:
                    if cfg.ew:
                        idx = ((cfg.micro_batch_size, self.seq), "Tensor(long int)")
                        self.ew("aten::embedding_dense_backward", f"bwd.embedding.mb{mb}", [self._t(n, h), idx])
                    if gather:  # FSDP gathers every unit before its backward (the embedding's needs no weights)
                        self._z3(units, "embedding", store, params, phase)
                    if sync:
                        self.grad_sync("embedding", vocab * h, mb=smb)
        if cfg.ew:
            self.optimizer(self.optimizer_params(params))
        return self.items

    def optimizer_params(self, params):
        """Parameters this rank updates: its stage's units (layers; embedding on the first, LM head on the last
        virtual stage; ``params``: build()'s {unit: (dense, expert) shard}), TP-sharded, and under ZeRO >= 1 also
        sharded over the (expert-)DP group."""
        dims, cfg, p, P, V = self.dims, self.cfg, self.p, self.cfg.pp, self.cfg.virtual_stages
        per_chunk = dims.layers // (P * V)
        dense = expert = 0
        for ch in range(V):
            v = ch * P + p
            units = ((["embedding"] if v == 0 else []) + [f"l{i}" for i in range(v * per_chunk, (v + 1) * per_chunk)]
                     + (["head"] if v == P * V - 1 else []))
            for unit in units:
                dense += params[unit][0]
                expert += params[unit][1]
        if cfg.zero:
            dense = -(-dense // self._group_size(self.dgroup))
            if expert:
                expert = -(-expert // self._group_size("edp"))
        return max(1, dense + expert)


def _dyn_bytes(key, rank, cfg, gids):
    t, c, d, p = cp_coords_of(cfg, rank)
    cx = (c,) if cfg.cp > 1 else ()
    if key[0] == "tp":
        attrs = {"pg_name": str(gids["tp"][(d, p) + cx])}
    elif key[0] == "dp":
        attrs = {"pg_name": str(gids["dp"][(t, p) + cx])}
    elif key[0] == "dpcp":
        attrs = {"pg_name": str(gids["dpcp"][(t, p)])}
    elif key[0] == "cp":
        attrs = {"pg_name": str(gids["cp"][(t, d, p)])}
    elif key[0] == "ep":
        attrs = {"pg_name": str(gids["ep"][(t, p, d // cfg.ep) + cx])}
    elif key[0] == "edp":
        attrs = {"pg_name": str(gids["edp"][(t, p, d % cfg.ep)])}
    elif key[0] == "amax":
        attrs = {"pg_name": str(gids["amax"][(p,)])}
    elif key[0] in ("tpsend", "tprecv"):  # ring neighbour in the TP group (--tp-comm-overlap)
        peer = rank_of(cfg, (t + key[1]) % cfg.tp, d, p, c)
        src, dst = (rank, peer) if key[0] == "tpsend" else (peer, rank)
        attrs = {"comm_src": src, "comm_dst": dst}
    elif key[0] in ("cpsend", "cprecv"):  # ring neighbour in the CP group
        peer = rank_of(cfg, t, d, p, (c + key[1]) % cfg.cp)
        src, dst = (rank, peer) if key[0] == "cpsend" else (peer, rank)
        attrs = {"comm_src": src, "comm_dst": dst}
    else:  # pipeline neighbour (interleaved: the last rank's next is rank 0)
        peer = rank_of(cfg, t, d, (p + key[1]) % cfg.pp, c)
        src, dst = (rank, peer) if key[0] == "send" else (peer, rank)
        attrs = {"comm_src": src, "comm_dst": dst}
    return make_node(0, attrs=attrs)._raw


def rank_symmetry(cfg: LlmConfig):
    """The relabellings of ranks that map every rank's trace onto another's (block shifts of the rank's digits,
    :class:`astra_sim.symmetry.BlockShift`): the TP position, the CP position and the DP replica. With EP > 1
    the DP index is ``e + EP*q`` (EP groups hold the q-th EP consecutive DP indices, expert-data-parallel groups
    one e): e and q are shifted apart; with ``--moe-expert-load`` each e computes its own experts' rows, so
    only q. Pipeline stages differ."""
    shifts = []
    if cfg.tp > 1:
        shifts.append(BlockShift(1, cfg.tp, cfg.tp))
    if cfg.cp > 1:
        shifts.append(BlockShift(cfg.tp, cfg.cp, cfg.cp))
    stride = cfg.tp * cfg.cp
    if cfg.ep > 1:
        if not cfg.moe_expert_load:
            shifts.append(BlockShift(stride, cfg.ep, cfg.ep))
        outer = cfg.dp // cfg.ep
        if outer > 1:
            shifts.append(BlockShift(stride * cfg.ep, outer, outer))
    elif cfg.dp > 1:
        shifts.append(BlockShift(stride, cfg.dp, cfg.dp))
    return shifts


def generate_llm(dims: ModelDims, cfg: LlmConfig, prefix, *, write=True, per_rank_files=False):
    """Write the workload and ``PREFIX.groups.json``; returns a summary dict.

    Ranks of one pipeline stage share their graph: it is encoded once per stage and each rank only appends its
    own ``pg_name`` / ``comm_src`` / ``comm_dst`` attributes. With ``--moe-expert-load`` each EP index of a stage
    has its own graph (its experts compute their own rows). By default the workload is compact
    (:mod:`astra_sim.workload.compact`): one trace per class of ranks that :func:`rank_symmetry` relates
    (``PREFIX.class<i>.et``) and ``PREFIX.workload.json``; ``per_rank_files`` writes ``PREFIX.<rank>.et``
    for every rank instead."""
    _check(dims, cfg)
    gids, groups = comm_groups(cfg)
    prefix = str(prefix)
    if write:
        ensure_parent(prefix)
        write_atomically(f"{prefix}.groups.json", json.dumps(groups).encode())
        # what each group is for, for the breakdown's communicator names (read beside the groups file)
        roles = {str(gid): role for role, by_key in gids.items() for gid in by_key.values()}
        write_atomically(f"{prefix}.groups.roles.json", json.dumps(dict(sorted(roles.items(), key=lambda kv: int(kv[0])))).encode())
    meta = make_metadata(attrs={"generator": "astra workload llm"}).SerializeToString()
    head = encode_varint(len(meta)) + meta
    nodes_per_stage = []
    per_ep = cfg.ep if cfg.moe_expert_load else 1
    symmetry = RankSymmetry(rank_symmetry(cfg))
    classes = []
    for p in range(cfg.pp):
        graphs = [_StageBuilder(dims, cfg, p, e).build() for e in range(per_ep)]
        nodes_per_stage.append(len(graphs[0]))
        keys = sorted({dyn for items in graphs for _, dyn in items if dyn is not None})
        for t, d, c in ((t, d, c) for t in range(cfg.tp) for d in range(cfg.dp) for c in range(cfg.cp)):
            rank = rank_of(cfg, t, d, p, c)
            if not per_rank_files and not symmetry.is_representative(rank):
                continue
            items = graphs[d % per_ep]
            suffix = {k: _dyn_bytes(k, rank, cfg, gids) for k in keys}
            chunks = [head]
            for raw, dyn in items:
                body = raw + suffix[dyn] if dyn is not None else raw
                chunks.append(encode_varint(len(body)))
                chunks.append(body)
            if not write:
                continue
            if per_rank_files:
                write_atomically(f"{prefix}.{rank}.et", b"".join(chunks))
            else:
                classes.append((rank, b"".join(chunks)))
    if write and not per_rank_files:
        classes.sort()
        write_compact_workload(prefix, cfg.npus, symmetry.shifts, classes, comm_groups=f"{prefix}.groups.json",
                               generator="astra workload llm")
    flops = (inference_flops(dims, cfg) if cfg.inference
             else training_flops(dims, cfg.dp * cfg.micro_batches * cfg.micro_batch_size, cfg.tp))
    return {"npus": cfg.npus, "nodes_per_stage": nodes_per_stage, "groups": len(groups),
            "parameters": parameter_count(dims, cfg.tp), "classes": cfg.npus // symmetry.order,
            "activated_parameters": activated_parameter_count(dims, cfg.tp), "flops": flops}


# ------------------------------------------------------------------------------------------------ command line
def add_llm_command(sub):
    import argparse

    from astra_sim.cliutil import non_negative_int, positive_float, positive_int

    p = sub.add_parser(
        "llm", help="training/inference traces for a transformer (TP, PP 1F1B/interleaved, DP/ZeRO-1..3, CP, "
        "MoE/EP, recomputation)",
        description="Write PREFIX.<rank>.et for one step of a transformer, dense or mixture-of-experts: a "
        "training step (--mode train, default) or inference (--mode prefill, decode or mixed), and "
        "PREFIX.groups.json (TP, DP, PP and, when used, CP and EP communicator groups; rank = tp + TP*(cp + CP*(dp + "
        "DP*pp))). "
        "Run them with astra run --comm-group-configuration PREFIX.groups.json.")
    p.add_argument("--preset", choices=sorted(PRESETS), help="published model dimensions")
    for flag, what in (("layers", "transformer layers"), ("hidden", "hidden size h"), ("heads", "attention heads"),
                       ("kv-heads", "key/value heads (GQA; default: heads)"),
                       ("ffn-hidden", "FFN inner size (default 4h)"), ("vocab", "vocabulary size"),
                       ("seq-len", "sequence length s")):
        p.add_argument(f"--{flag}", type=positive_int, metavar="N", help=f"{what} (overrides the preset)")
    for flag, what in (("experts", "routed experts E (mixture of experts; default: the preset's, else dense)"),
                       ("top-k", "experts per token K"), ("moe-ffn", "expert FFN inner size (default: ffn hidden)"),
                       ("shared-experts", "always-active shared experts S of size moe-ffn"),
                       ("moe-layer-freq", "MoE on every N-th layer only (layers 0, N, 2N, ...; Megatron's "
                        "--moe-layer-freq N), dense FFNs of ffn-hidden between (default 1: every layer)"),
                       ("moe-dense-layers", "the first N layers keep a dense FFN of ffn-hidden (DeepSeekMoE's "
                        "first_k_dense_replace, Megatron's --moe-layer-freq with leading zeros; default 0)")):
        p.add_argument(f"--{flag}", type=positive_int if flag in ("top-k", "moe-layer-freq") else non_negative_int,
                       metavar="N",
                       help=f"{what} (overrides the preset)")
    p.add_argument("--gated", action=argparse.BooleanOptionalAction, default=None,
                   help="gated (SwiGLU, 3 matrices) FFN (default: the preset's; off without preset)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline-parallel stages (1F1B)")
    p.add_argument("--dp", type=positive_int, default=1, help="data-parallel size")
    p.add_argument("--ep", type=positive_int, default=1,
                   help="expert-parallel size, carved out of DP (DP must be divisible by it)")
    p.add_argument("--moe-capacity-factor", type=positive_float, metavar="C",
                   help="MoE expert capacity factor (Megatron --moe-expert-capacity-factor): each expert takes at "
                   "most ceil(tokens x top-k / experts x C) of a rank's token copies, the rest are dropped "
                   "(default: dropless)")
    p.add_argument("--moe-pad-to-capacity", action="store_true",
                   help="with --moe-capacity-factor: pad every expert's input to its capacity (all-to-all bytes "
                   "and expert GEMM rows become experts x capacity)")
    p.add_argument("--moe-imbalance", type=float, default=1.0, metavar="F",
                   help="dropless MoE: the busiest EP rank gets F x the balanced token copies; every rank is timed "
                   "as that straggler (expert rows and all-to-all bytes x F; default 1, balanced)")
    p.add_argument("--pp-scatter-gather", action="store_true",
                   help="TP without sequence parallelism: each TP rank sends 1/TP of the stage-boundary tensor and the "
                   "receiving stage all-gathers it over TP (Megatron-LM's scatter/gather optimisation, its 2021 "
                   "default); without it every TP rank sends the whole b x s x h")
    p.add_argument("--logits", choices=("all", "last"), default="all",
                   help="inference: the LM head on every position (default, as a training forward does) or only on "
                   "each sequence's last one (and the prefill chunk's), as serving engines do")
    p.add_argument("--moe-expert-load", metavar="SPEC",
                   help="MoE: the experts' relative token loads instead of balanced routing: E comma-separated "
                   "numbers, zipf:S (expert e gets (e+1)^-S; EP rank 0 holds the hottest), zipf:S:SEED (the same "
                   "loads dealt at random to the experts of each MoE layer), or a .json list of E loads or of one "
                   "list per MoE layer (e.g. logged router counts). Each EP rank computes its experts' rows; the "
                   "all-to-alls are timed by their busiest rank (per-peer message: the largest EP rank's share)")
    p.add_argument("--mode", choices=MODES, default="train",
                   help="train (default), or one inference step: prefill (forward over the prompt), decode "
                   "(one token per sequence against a KV cache of prompt-len + decode-len) or mixed (continuous "
                   "batching: the decode tokens plus a --prefill-chunk of a new prompt per micro-batch)")
    p.add_argument("--batch-size", type=positive_int, metavar="N",
                   help="inference: sequences per DP replica (split into --micro-batches; default M x B)")
    p.add_argument("--prompt-len", type=positive_int, metavar="N", help="inference: prompt length (default seq-len)")
    p.add_argument("--decode-len", type=positive_int, default=1, metavar="N",
                   help="decode: tokens generated so far including this step's (default 1)")
    p.add_argument("--decode-steps", type=positive_int, default=1, metavar="N",
                   help="decode: N consecutive steps in one trace, the KV cache growing by one position per step; "
                        "with PP the last stage sends each sampled token back to the first (default 1)")
    p.add_argument("--prefill-chunk", type=positive_int, metavar="N",
                   help="mixed: prompt tokens prefilled per micro-batch beside its decode tokens (chunked prefill)")
    p.add_argument("--prefill-done", type=int, default=0, metavar="N",
                   help="mixed: tokens of that prompt already in the KV cache from earlier chunks (default 0)")
    p.add_argument("--micro-batches", type=positive_int, default=1, metavar="M",
                   help="micro-batches per step (gradient accumulation steps)")
    p.add_argument("--micro-batch-size", type=positive_int, default=1, metavar="B", help="sequences per micro-batch")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="TP with all-gather/reduce-scatter instead of all-reduce")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                   help="ZeRO stage: 1/2 reduce-scatter gradients and all-gather parameters over DP; 3 (FSDP): "
                   "parameters sharded, all-gathered per layer before forward and before backward, gradients "
                   "reduce-scattered")
    p.add_argument("--overlap-param-gather", action="store_true",
                   help="ZeRO-1/2: all-gather the updated parameters at the start of the step (each layer's first "
                   "forward waits for its own) instead of after the optimizer (Megatron --overlap-param-gather)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="with --sequence-parallel: each TP all-gather / reduce-scatter runs as a ring of TP-1 "
                   "send/recv steps pipelined with TP row chunks of its GEMM (Transformer Engine userbuffers)")
    p.add_argument("--comm-sms", metavar="KEY=N[,KEY=N...]",
                   help="SMs each kind of communication kernel occupies, written as the nodes' comm_sms attribute "
                   "for the gpu model's --gpu-contention (nodes without it take --gpu-comm-sms). Keys: "
                   f"{', '.join(COMM_SMS_GROUPS)} (NCCL communicators, e.g. Megatron's *_MAX_CTAS) and, with "
                   "--tp-comm-overlap, Transformer Engine's userbuffers names (qkv_fprop, proj_fprop, fc1_fprop, "
                   "fc2_fprop, qkv_dgrad, fc1_dgrad, qkv_wgrad, fc1_wgrad, proj_dgrad, fc2_dgrad); 0 = copy engine")
    p.add_argument("--tp-overlap-config", metavar="YAML",
                   help="with --tp-comm-overlap: Transformer Engine's tp_overlap / ub_cfgs YAML (per layer name: "
                   "method, num_sm, use_ce, ...); gives each userbuffers overlap's SMs (ring_exchange: 0, copy "
                   "engine, unless use_ce is false; pipeline and bulk: num_sm, default 16). --comm-sms overrides")
    p.add_argument("--reshard-after-forward", action="store_true",
                   help="--zero 3: all-gather each unit's parameters before every micro-batch's forward and again "
                   "before its backward (FSDP FULL_SHARD, DeepSpeed ZeRO-3; default: once per step per phase, "
                   "reused by all micro-batches)")
    p.add_argument("--grad-sync-every-micro-batch", action="store_true",
                   help="reduce the gradients after every micro-batch's backward (all-reduce, or reduce-scatter with "
                   "--zero; DDP/FSDP without no_sync, DeepSpeed) instead of after the last one only")
    p.add_argument("--cp", type=positive_int, default=1,
                   help="context-parallel size, training and prefill (sequence split; ring K/V exchange; "
                   "rank = t + TP*(c + CP*(d + DP*p)))")
    p.add_argument("--virtual-stages", type=positive_int, default=1, metavar="V",
                   help="interleaved 1F1B: model chunks per pipeline rank (micro-batches a multiple of --pp)")
    p.add_argument("--recompute", action="store_true", help="full activation recomputation before each backward")
    p.add_argument("--elementwise", action=argparse.BooleanOptionalAction, default=True,
                   help="training: emit the memory-bound ops (LayerNorm, GeLU/SwiGLU, dropout, residual adds, "
                   "embedding, cross entropy, Adam) as ATen nodes the gpu compute model times from their shapes "
                   "(default on; --no-elementwise: GEMMs, attention and communication only)")
    p.add_argument("--attention", choices=ATTENTIONS, default="flash",
                   help="flash: one FlashAttention node per layer (default); unfused: QK^T and AV aten::bmm with "
                   "softmax and dropout over the b x heads x s^2 scores (Megatron-LM before FlashAttention)")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="flash attention: causal mask, timed by the gpu model as the lower triangle only, and "
                   "with --cp Megatron's load-balanced chunks (default on, decoder LMs; --no-causal: every "
                   "query attends to every key). num_ops counts the full block either way")
    p.add_argument("--dropout", action=argparse.BooleanOptionalAction, default=True,
                   help="training with --elementwise: emit the dropout kernels (default on; --no-dropout for "
                   "models trained with hidden and attention dropout 0, e.g. MLPerf GPT-3)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="activation/gradient type (default bf16)")
    p.add_argument("--gemm-dtype", choices=GEMM_DTYPES, default="same",
                   help="operand type of the linear layers' GEMMs: same as --dtype (default), or fp8 "
                   "(Transformer Engine: aten::_scaled_mm with E4M3 weights/activations and E5M2 gradients, bf16 "
                   "output; the router, LM head and attention stay in --dtype)")
    p.add_argument("--tflops", type=positive_float, default=312.0,
                   help="peak TFLOP/s for duration_micros (default 312, A100 BF16 dense)")
    p.add_argument("--per-rank-files", action="store_true",
                   help="write PREFIX.<rank>.et for every rank (default: the compact workload, "
                        "PREFIX.workload.json and one trace per class of symmetric ranks, which astra run "
                        "reads the same way; see docs/compact-workload.md)")
    p.add_argument("-o", "--output", required=True, metavar="PREFIX")
    p.set_defaults(run_command=_cmd_llm)


def _cmd_llm(args):
    dims = model_dims(args.preset, layers=args.layers, hidden=args.hidden, heads=args.heads,
                      kv_heads=args.kv_heads, ffn_hidden=args.ffn_hidden, vocab=args.vocab, seq_len=args.seq_len,
                      gated=args.gated, experts=args.experts, top_k=args.top_k, moe_ffn=args.moe_ffn,
                      shared_experts=args.shared_experts, moe_dense_layers=args.moe_dense_layers,
                      moe_layer_freq=args.moe_layer_freq)
    mbs = args.micro_batch_size
    if args.batch_size is not None:
        if args.mode == "train":
            raise ConfigError("--batch-size is for --mode prefill/decode/mixed (training uses --micro-batch-size)")
        if args.batch_size % args.micro_batches:
            raise ConfigError(f"--batch-size {args.batch_size} is not divisible by --micro-batches "
                              f"{args.micro_batches}")
        mbs = args.batch_size // args.micro_batches
    comm_sms, margins = {}, {}
    if args.tp_overlap_config:
        if not args.tp_comm_overlap:
            raise ConfigError("--tp-overlap-config needs --tp-comm-overlap (it sets the userbuffers overlaps' SMs)")
        sms, margins = load_tp_overlap_sms(args.tp_overlap_config, with_margins=True)
        comm_sms.update(sms)
    comm_sms.update(parse_comm_sms(args.comm_sms))
    margins = {name: comm_sms[name] for name in margins if comm_sms[name]}  # (--comm-sms overrides the file's SMs)
    load = ()
    if args.moe_expert_load is not None:
        if not dims.moe:
            raise ConfigError("--moe-expert-load needs a mixture-of-experts model (--experts)")
        load = parse_expert_load(args.moe_expert_load, dims.experts, dims.moe_layers)
    cfg = LlmConfig(tp=args.tp, pp=args.pp, dp=args.dp, micro_batches=args.micro_batches,
                    micro_batch_size=mbs, sequence_parallel=args.sequence_parallel,
                    zero=args.zero, recompute=args.recompute, dtype=args.dtype, tflops=args.tflops, ep=args.ep,
                    mode=args.mode, prompt_len=args.prompt_len, decode_len=args.decode_len,
                    decode_steps=args.decode_steps, prefill_chunk=args.prefill_chunk or 0,
                    prefill_done=args.prefill_done, cp=args.cp,
                    virtual_stages=args.virtual_stages, elementwise=args.elementwise, attention=args.attention,
                    causal=args.causal, dropout=args.dropout, gemm_dtype=args.gemm_dtype,
                    overlap_param_gather=args.overlap_param_gather, tp_comm_overlap=args.tp_comm_overlap,
                    reshard_after_forward=args.reshard_after_forward,
                    grad_sync_every_micro_batch=args.grad_sync_every_micro_batch,
                    moe_capacity_factor=args.moe_capacity_factor, moe_pad_to_capacity=args.moe_pad_to_capacity,
                    moe_imbalance=args.moe_imbalance, moe_expert_load=load, logits=args.logits,
                    pp_scatter_gather=args.pp_scatter_gather,
                    comm_sms=tuple(sorted(comm_sms.items())), sm_margins=tuple(sorted(margins.items())))
    s = generate_llm(dims, cfg, args.output, per_rank_files=args.per_rank_files)
    if args.per_rank_files:
        wrote = f"{args.output}.0.et .. {args.output}.{s['npus'] - 1}.et"
    else:
        wrote = (f"{args.output}.workload.json with {s['classes']} class trace{'s' if s['classes'] > 1 else ''} "
                 f"({args.output}.class<i>.et; --per-rank-files writes one file per rank)")
    print(f"{s['npus']} ranks, {s['parameters'] / 1e9:.2f}B matmul parameters "
          f"({s['activated_parameters'] / 1e9:.2f}B activated), {s['flops'] / 1e15:.4f} PFLOP "
          f"{'per step' if cfg.steps == 1 else f'over {cfg.steps} steps'}, nodes per rank by stage "
          f"{s['nodes_per_stage']}; wrote {wrote} and {args.output}.groups.json ({s['groups']} groups)")
    return 0
