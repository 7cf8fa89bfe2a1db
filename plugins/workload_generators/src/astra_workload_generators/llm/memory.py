"""Each rank's peak HBM use in one training or inference step, estimated from the model, its layout, the pipeline
schedule and the framework that runs it (``--framework``: Megatron-LM/NeMo, FSDP2/torchtitan or DeepSpeed), so that
a configuration that cannot fit a GPU is known before (or without) simulating it. docs/memory.md gives every term
with its source and the published peaks it is checked against (``cases/memory.yaml``).

The estimate per rank (bytes) is the sum of

* **weights, gradients, optimizer states** of the parameters the rank holds (its stage's layers, TP-sharded;
  the embedding on the first and the LM head on the last stage; its E/EP experts; the norms' weights, whole on
  every TP rank, and the final norm's on the last stage), as the framework keeps them
  (:mod:`.memory_terms`): Megatron-LM's bf16 weights, fp32 main gradients and fp32 main weights and moments (its
  distributed optimizer, ``--zero 1``, shards those over DP x CP); FSDP2's fp32 sharded parameters, gradients and
  moments plus the bf16 compute copies of the units gathered at a time; DeepSpeed's ZeRO stages (Rajbhandari et
  al. 2020: 2 + 2 + 12 bytes per parameter, sharded by stage). Gradients accumulated over several micro-batches
  without ``--grad-sync-every-micro-batch`` are reduced once, after the last one, so they stay whole until then.
  ZeRO-3 keeps each unit's gathered weights for the whole step with ``--no-reshard-after-forward``. FP8 GEMMs
  under Megatron add Transformer Engine's cached FP8 copy of each linear weight and its transpose (2 bytes);
  block-scaled ones (``--gemm-dtype fp4 | mxfp8 | mxfp6 | mxfp4``) its two quantized copies with their scales (NVFP4:
  2 x 9/16 bytes), and in inference hold the linear weights in that format only (NVFP4: 9/16 byte each); with
  ``--fp8-params`` (FP8: TE's fp8_model_init; MXFP8: Megatron's parameter gather into the gradient buffer) the FP8
  weights replace the ``--dtype`` copy. LoRA keeps its frozen base in ``--dtype``, or in FP8 (1 byte) with
  ``--fp8-params``, and its frozen linear layers keep no inputs for a weight gradient;
* **activations** kept for the backward pass: per layer and micro-batch, Korthikanti et al. 2022's count
  (``s*b*h*(34 + 5*a*s/h)`` bytes for a GPT layer in 16 bit without parallelism: ``10 + 24/t`` with tensor
  parallelism, everything ``/t`` with sequence parallelism; the ``5*a*s/h`` attention-score term is not stored
  with FlashAttention or selective recomputation; full recomputation keeps only each layer's input), written
  for any head count, GQA, FFN size, gated FFN, dropout on or off, context parallelism (``s/CP`` tokens) and
  MoE layers (the routed token copies through the experts); FSDP2's ``--recompute selective`` is torchtitan's
  op-level policy instead (:func:`.memory_terms.op_sac_layer_bytes`). The number of micro-batches whose
  activations are alive at once comes from the pipeline schedule itself (1F1B: ``PP - p`` on stage p;
  interleaved: Megatron's ``1 + (PP-1)/(PP*V)`` factor follows), plus the embedding's dropout mask on the first
  stage; with recomputation one layer's full activations while it is recomputed;
* **logits and loss** (last stage): the LM head's output and the cross entropy's copies of it, per element of
  tokens x vocabulary/TP as the framework computes them (:data:`.memory_terms.LOGITS_BYTES`);
* **buffers** the framework allocates beside the model states: FSDP2's unsharded gradients of the unit being
  reduced, DeepSpeed's reduce bucket; with ``--defer-embedding-wgrad-compute`` the LM head's inputs and logit
  gradients Megatron keeps for the pipeline drain (:func:`.memory_terms.deferred_head_bytes`);
* **GEMM workspaces** (training): the cuBLAS workspaces PyTorch and Transformer Engine keep allocated
  (:func:`.memory_terms.gemm_workspace_bytes`);
* **KV cache** (inference): every resident sequence's keys and values for the stage's layers;
* the **allocator reserve**: what PyTorch's caching allocator holds beyond what tensors use (fragmentation), a
  fitted share of the allocated bytes (training) or ``FRAGMENTATION`` (inference);
* the **context**: ``WORKSPACE_BYTES`` outside the allocator (CUDA context, NCCL's buffers).

``MemoryEstimate.allocated_bytes`` is what ``torch.cuda.max_memory_allocated`` reports, ``reserved_bytes`` what
``max_memory_reserved`` reports, ``total`` (with the context) what ``nvidia-smi`` shows. The estimate's stated
uncertainty is ``UNCERTAINTY``: a configuration that misses the device by less is a warning, not a refusal.

Not counted: temporary buffers inside a kernel, CUDA-graph pools, the activation gradients alive during one
layer's backward, the quantized inputs of MoE layers and of FSDP2's and DeepSpeed's FP8 linears (counted in
``--dtype``; Megatron's dense layers keep theirs quantized, :func:`_saved_input_bytes`), HSDP replication and CPU
offload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import DTYPES, LlmConfig, implied_framework
from .memory_terms import (
    CUDA_GRAPH_ACTIVATION_FRACTION, LOGITS_BYTES, RESERVE_FRACTION, WORKSPACE_BYTES, context_bytes,
    deferred_head_bytes, gemm_workspace_bytes, logits_bytes, model_states, moe_dispatch_bytes, op_sac_layer_bytes,
)
from .blockscale import block_format, fp8_checkpoint_weight_bytes, low_precision_weight_bytes
from .lora import adapter_parameters, frozen_input_elements
from .model import (MTP_MODULE_NORMS, ModelDims, _lengths, embedding_shard, layer_norm_parameters, layer_shards,
                    mtp_shards, norm_weights, vocab_padding, vocab_shard)
from .routing import ep_loads, routed_rows
from .schedule import pipeline_schedule
from .split import stage_layers

#: the caching allocator's fragmentation in inference, as a share of everything else (an allowance)
FRAGMENTATION = 0.05
#: the model's stated uncertainty: within it of the device's memory a configuration is a near miss (a warning)
UNCERTAINTY = 0.10
#: fp32 master weights + Adam's two fp32 moments per parameter (mixed precision); fp32 training: moments only
OPTIMIZER_BYTES = 12
#: Transformer Engine's cached FP8 copy of a linear layer's weight and of its transpose; with --fp8-params (TE's
#: fp8_model_init, NeMo's fp8_params) they are the weight itself, held without a --dtype copy. On a GPU whose FP8
#: GEMMs take any layout (Blackwell, ``cfg.fp8_transpose`` False) TE keeps no transpose: the copy alone, 1 byte
FP8_WEIGHT_BYTES = 2
#: LoRA with --fp8-params: a frozen linear weight held in FP8 (1 byte; NeMo's fp8_params, TE's fp8_model_init:
#: AMD's and NVIDIA's MLPerf Training v5.1 llama2_70b_lora recipes) and no cached transpose: no optimizer step
#: re-casts it, and AMD's recipe disables the cache (disable_parameter_transpose_cache: True,
#: ENABLE_TRANSPOSE_CACHE=0). NVIDIA's H200 run (TP 1) is the other evidence: 69 GB of FP8 weights and their
#: transposes would fill its 141 GB before any activation. docs/memory.md, "LoRA's frozen base"
FROZEN_FP8_WEIGHT_BYTES = 1
#: --fp8-activation-input: Megatron-LM's activation_func_fp8_input_store ("Store the input of MLP activation
#: function in FP8 for backprop to save memory", megatron/core/transformer/transformer_config.py) keeps a dense
#: FFN's FC1 output in 1 byte; both MLPerf Training v5.1 llama2_70b_lora runs of docs/memory.md set it
FP8_ACTIVATION_INPUT_BYTES = 1
#: block-scaled GEMMs (--gemm-dtype fp4 | mxfp8 | mxfp6 | mxfp4) in training: the cached quantized copies of a linear
#: layer's weight, row-wise (forward) and column-wise (data-gradient GEMM), each with its block scales
BLOCK_WEIGHT_COPIES = 2
RECOMPUTE = ("none", "selective", "full")
#: the parts of an estimate, in the order terminals list them
PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "buffers", "gemm_workspace",
         "reserve", "context")

__all__ = ["FRAGMENTATION", "LOGITS_BYTES", "MemoryEstimate", "PARTS", "RESERVE_FRACTION", "UNCERTAINTY",
           "WORKSPACE_BYTES", "layer_activation_bytes", "memory_estimate", "metadata_attrs", "peak_memory",
           "stage_memory"]


@dataclass(frozen=True)
class MemoryEstimate:
    """One rank's estimated peak HBM use (bytes), by what holds it."""

    stage: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    kv_cache: int
    logits: int = 0
    buffers: int = 0
    reserve: int = 0
    context: int = 0
    #: model chunks' forward passes (micro-batch x chunk) whose activations are alive at the peak
    in_flight: int = 0
    framework: str = "megatron"
    #: (dims, cfg) it was estimated for, so that the changes that would make it fit can be computed on demand
    source: tuple | None = field(default=None, compare=False, repr=False)
    #: cuBLAS workspaces held by the allocator (training)
    gemm_workspace: int = 0

    @property
    def allocated_bytes(self) -> int:
        """What the tensors hold at the peak (``torch.cuda.max_memory_allocated``)."""
        return (self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.kv_cache
                + self.buffers + self.gemm_workspace)

    @property
    def reserved_bytes(self) -> int:
        """What the caching allocator holds at the peak (``torch.cuda.max_memory_reserved``)."""
        return self.allocated_bytes + self.reserve

    @property
    def total(self) -> int:
        """The device memory the process uses (``nvidia-smi``): reserved plus the CUDA context and NCCL."""
        return self.reserved_bytes + self.context

    @property
    def workspace(self) -> int:
        """Everything beyond model states, activations, logits and KV cache: buffers, GEMM workspaces, reserve and
        context."""
        return self.buffers + self.gemm_workspace + self.reserve + self.context

    def measured(self, what: str) -> int:
        """The number a measurement of ``what`` reports: ``max_memory_allocated``, ``max_memory_reserved`` or
        ``nvidia-smi`` (the names may carry a ``torch.cuda.`` prefix)."""
        key = what.rsplit(".", 1)[-1]
        if key == "max_memory_allocated":
            return self.allocated_bytes
        if key == "max_memory_reserved":
            return self.reserved_bytes
        if key == "nvidia-smi":
            return self.total
        raise ValueError(f"unknown memory measurement {what!r} (expected max_memory_allocated, max_memory_reserved "
                         "or nvidia-smi)")

    def parts(self) -> dict:
        """{part: bytes} of :data:`PARTS`."""
        return {k: getattr(self, k) for k in PARTS}

    def largest_part(self) -> str:
        parts = self.parts()
        return max(parts, key=parts.get)

    def to_dict(self):
        return {"stage": self.stage, **self.parts(), "in_flight": self.in_flight, "framework": self.framework,
                "allocated_bytes": self.allocated_bytes, "reserved_bytes": self.reserved_bytes,
                "workspace": self.workspace, "total": self.total}

    def describe(self):
        """``"45.2 GB (weights 12.1, gradients 6.0, ...)"`` in decimal GB, for terminals."""
        return (f"{self.total / 1e9:.1f} GB (" + ", ".join(f"{k.replace('_', ' ')} {v / 1e9:.1f}"
                                                            for k, v in self.parts().items() if v) + ")")


def recompute_mode(cfg: LlmConfig) -> str:
    """``full`` (``--recompute``), ``selective`` or ``none``. FlashAttention never stores the attention
    scores, which is what selective recomputation saves, so flash attention counts as selective."""
    if cfg.recompute:
        return "full"
    if cfg.recompute_selective or cfg.attention == "flash":
        return "selective"
    return "none"


def layer_activation_bytes(dims: ModelDims, cfg: LlmConfig, mode: str | None = None, moe: bool = False,
                           layer: int = 0) -> int:
    """Bytes one layer keeps for its backward, per micro-batch, on one rank (Korthikanti et al. 2022, Table 2,
    generalised): ``mode`` ``none``, ``selective`` or ``full`` (default: :func:`recompute_mode`)."""
    mode = mode or recompute_mode(cfg)
    nb = DTYPES[cfg.dtype][0]
    t = cfg.tp
    q, c = _lengths(dims, cfg)
    q //= cfg.cp
    b = cfg.micro_batch_size
    tokens = b * q + cfg.prefill_chunk
    h, d, kv, a = dims.hidden, dims.head_dim, dims.kv_heads, dims.heads
    replicated_div = t if cfg.sequence_parallel else 1
    if mode == "full":  # only the layer's input survives the forward pass
        return tokens * h * nb // replicated_div
    mask = 1 if cfg.dropout and not cfg.inference else 0
    # outside the TP region (split over TP only with sequence parallelism): two LayerNorm inputs, the QKV and
    # FFN inputs (LayerNorm outputs), two dropout masks (1 byte per element)
    replicated = tokens * h * (4 * nb + 2 * mask)
    m1 = 2 if dims.gated else 1  # FC1 outputs: gate and up for a gated FFN
    # Q, K, V; the output projection's input
    sharded = tokens * (dims.q_width + kv * (d + dims.v_dim)) * nb + tokens * dims.o_width * nb
    quantized = None if moe else _saved_input_bytes(cfg)
    if quantized:  # Transformer Engine keeps the linear layers' inputs quantized for their weight gradients
        replicated += 2 * quantized(tokens * h) - 2 * tokens * h * nb  # the QKV and FC1 inputs
        # the projection's: a quantized copy beside the attention output FlashAttention's backward keeps
        sharded += quantized(tokens * dims.o_width) - (tokens * dims.o_width * nb if cfg.attention == "unfused" else 0)
    if moe:
        f = dims.expert_ffn
        rows = routed_rows(dims, cfg, tokens)
        if cfg.moe_expert_load:
            rows = cfg.ep * max(ep_loads(dims, cfg, tokens, dims.moe_index(layer)))
        sharded += tokens * dims.shared_experts * f * (m1 + 1) * nb  # shared experts: FC1 outputs, FC2 input
        sharded += rows * f * (m1 + 1) * nb  # routed experts, on the token copies this rank computes
        expert_inputs = rows * h * nb  # the dispatched tokens (FC1 input), whole on every TP rank
        router = tokens * dims.experts * 4  # fp32 routing probabilities
    else:  # FC1's outputs (the activation's input: 1 byte with --fp8-activation-input) and FC2's input
        fc1_out = FP8_ACTIVATION_INPUT_BYTES if cfg.fp8_activation_input else nb
        fc2_in = quantized(tokens * dims.ffn_hidden) if quantized else tokens * dims.ffn_hidden * nb
        sharded += tokens * dims.ffn_hidden * m1 * fc1_out + fc2_in
        expert_inputs = router = 0
    if cfg.lora_rank:  # the frozen base keeps no inputs for its weight gradients (adapters' targets excepted)
        frozen_replicated, frozen_sharded = frozen_input_elements(dims, cfg)
        replicated -= tokens * frozen_replicated * nb
        sharded -= tokens * frozen_sharded * nb
    scores = 0
    if mode == "none":  # softmax output, dropout mask and output of the attention scores
        scores = a * b * q * c * (nb + mask * (1 + nb))
    return replicated // replicated_div + (sharded + scores) // t + expert_inputs + router


def _saved_input_bytes(cfg: LlmConfig):
    """``elements -> bytes`` of a linear layer's input kept for its weight gradient in Megatron's FP8 or
    block-scaled training, or None where it is kept in ``--dtype``. Transformer Engine quantizes the input for
    the forward GEMM and keeps that copy, not the high-precision one ("By default, TE saves the columnwise quantized
    input for the backward pass", TE docs/features/low_precision_training/performance_considerations): FP8 1 byte,
    MXFP8 1 + 1/32, NVFP4 9/16. Not under LoRA (a frozen base keeps no inputs, the adapters theirs in
    ``--dtype``), FSDP2 or DeepSpeed (their FP8 paths are not Transformer Engine's), nor in inference."""
    if cfg.inference or cfg.lora_rank or implied_framework(cfg) != "megatron":
        return None
    if cfg.gemm_dtype == "fp8":
        return lambda elements: elements
    fmt = block_format(cfg)
    if fmt is None:
        return None
    num, den = fmt.bytes_per_element()
    return lambda elements: -(-elements * num // den)


def _stage_units(dims: ModelDims, cfg: LlmConfig, p: int):
    """{chunk: (first virtual stage?, last?, layer indices)} of pipeline rank ``p``."""
    P, V = cfg.pp, cfg.virtual_stages
    split = stage_layers(dims.layers, cfg)
    out = {}
    for ch in range(V):
        v = ch * P + p
        out[ch] = (v == 0, v == P * V - 1, split[v])
    return out


def stage_memory(dims: ModelDims, cfg: LlmConfig, p: int) -> MemoryEstimate:
    """The estimate for the ranks of pipeline stage ``p`` (every rank of a stage holds the same)."""
    nb = DTYPES[cfg.dtype][0]
    framework = implied_framework(cfg)
    units = _stage_units(dims, cfg, p)
    vocab = vocab_shard(dims, cfg.tp, vocab_padding(cfg))  # (the framework's padding: .model padded_vocab)
    dense = expert = linear = edges = 0
    unit_sizes = []
    # a tied LM head is the embedding's own weight when the rank holds both ends (PP 1, or interleaved chunks);
    # on different ranks each keeps a copy (Megatron's shared embedding on the first and last stage)
    holds_first, holds_last = (any(unit[k] for unit in units.values()) for k in (0, 1))
    one_table = dims.tied_embeddings and holds_first and holds_last
    # the norms' weights (and LayerNorm's biases), whole on every TP rank, beside the linear weights: the model's
    # parameters (.model layer_norm_parameters / norm_weights), in every framework's buffers and optimizer
    norms, one = layer_norm_parameters(dims), norm_weights(dims)
    for first, last, layers in units.values():
        for i in layers:
            ld, le = layer_shards(dims, cfg, dims.is_moe_layer(i))
            dense, expert, linear = dense + ld + norms, expert + le, linear + ld + le
            unit_sizes.append(ld + le + norms)
        table_first = embedding_shard(dims, cfg.tp, padding=vocab_padding(cfg))
        for edge, table in ((first, table_first), (last and not one_table, vocab * dims.hidden)):
            if edge:  # (the embedding's: with a learned position table, .model embedding_shard)
                dense += table
                edges += table
                if framework != "fsdp2":  # (FSDP2 keeps the root, embedding and LM head, gathered apart)
                    unit_sizes.append(table)
        if last:  # the final norm (torchtitan: in the root unit with the embedding and the head)
            dense += one
            edges += one if framework == "fsdp2" else 0
        if last and dims.mtp_layers and not cfg.inference:  # the MTP modules' weights (not their activations)
            md, me = mtp_shards(dims, cfg)
            dense, expert = dense + dims.mtp_layers * md, expert + dims.mtp_layers * me
            linear += dims.mtp_layers * (md + me)
            dense += dims.mtp_layers * (norms + MTP_MODULE_NORMS * one)
    params = dense + expert
    dp_group = (cfg.dp_shard or cfg.dp) * cfg.cp  # HSDP (--dp-shard): sharded within its shard group only
    edp_group = cfg.dp // cfg.ep * cfg.cp

    def sharded(count, bytes_per):
        """``count`` dense-and-expert-proportioned parameters' bytes, sharded over their DP groups."""
        if not params:
            return 0
        d_part = dense * count // params
        return -(-d_part * bytes_per // dp_group) + -(-(count - d_part) * bytes_per // edp_group)

    activations, recomputing, in_flight = _activation_peak(dims, cfg, p, units, framework)
    fmt = block_format(cfg)
    if cfg.inference:  # weights only; the logits stay in the activations, the allowance as before
        weights = params * nb
        if fmt is not None:  # block-scaled GEMMs: the linear layers' weights held in their format only
            weights += low_precision_weight_bytes(fmt, linear) - linear * nb
        elif cfg.fp8_params:  # an FP8 checkpoint (--gemm-dtype fp8): the linear layers' weights in E4M3 only
            weights += fp8_checkpoint_weight_bytes(linear) - linear * nb
        kv = _kv_cache_bytes(dims, cfg, units)
        reserve = int(FRAGMENTATION * (weights + activations + kv))
        return MemoryEstimate(p, weights, 0, 0, activations, kv, reserve=reserve, context=WORKSPACE_BYTES,
                              in_flight=in_flight, framework=framework, source=(dims, cfg))
    if cfg.lora_rank:  # LoRA: the frozen base beside the adapters' full model states
        adapters = sum(len(layers) for _, _, layers in units.values()) * adapter_parameters(dims, cfg)
        weights, gradients, optimizer, buffers = model_states(framework, cfg, adapters, [], 0, sharded)
        weights += _frozen_base_bytes(cfg, params, linear, nb)
    else:
        weights, gradients, optimizer, buffers = model_states(framework, cfg, params, unit_sizes, edges, sharded)
    if cfg.cuda_graphs:  # the graphs' pools keep the captured forward's temporaries too
        activations += int(CUDA_GRAPH_ACTIVATION_FRACTION * activations)
    moe = [i for _, _, layers in units.values() for i in layers if dims.is_moe_layer(i)]
    if moe:  # one MoE layer's dispatch at a time: the largest
        q = _lengths(dims, cfg)[0] // cfg.cp
        tokens = cfg.micro_batch_size * q
        buffers += max(moe_dispatch_bytes(dims, cfg, tokens, _moe_rows(dims, cfg, tokens, i)) for i in moe)
    frozen_fp8 = cfg.lora_rank and cfg.fp8_params  # (the frozen base's FP8 weights: _frozen_base_bytes)
    if cfg.gemm_dtype == "fp8" and framework == "megatron" and not frozen_fp8:  # FP8 primary weights replace the
        fp8_bytes = FP8_WEIGHT_BYTES if cfg.fp8_transpose is not False else FP8_WEIGHT_BYTES - 1
        weights += fp8_bytes * linear - (nb * linear if cfg.fp8_params else 0)  # --dtype copy
    elif fmt is not None and framework == "megatron" and not frozen_fp8:  # TE's quantized copies beside the
        # --dtype weights; with --fp8-params (MXFP8 parameter gather) instead of them
        weights += BLOCK_WEIGHT_COPIES * low_precision_weight_bytes(fmt, linear) - (nb * linear if cfg.fp8_params
                                                                                     else 0)
    logits = 0
    if any(last for _, last, _ in units.values()):
        q = _lengths(dims, cfg)[0] // cfg.cp
        logits = logits_bytes(framework, cfg, cfg.micro_batch_size * q, vocab)
        buffers += deferred_head_bytes(cfg, dims, cfg.micro_batch_size * q, vocab)  # (kept for the drain)
    # the loss is over before the first layer is recomputed: the larger of the two transients counts
    activations += max(0, recomputing - logits)
    gemm = gemm_workspace_bytes(framework)
    allocated = weights + gradients + optimizer + activations + logits + buffers + gemm
    return MemoryEstimate(p, weights, gradients, optimizer, activations, 0, logits, buffers,
                          int(RESERVE_FRACTION * allocated), context_bytes(cfg), in_flight, framework, (dims, cfg), gemm)


def _frozen_base_bytes(cfg, params, linear, nb) -> int:
    """LoRA's frozen base weights: in --dtype, or with --fp8-params its linear layers' weights in FP8 only
    (:data:`FROZEN_FP8_WEIGHT_BYTES`; the embedding, LM head and norms stay in --dtype)."""
    if cfg.fp8_params:
        return (params - linear) * nb + FROZEN_FP8_WEIGHT_BYTES * linear
    return params * nb


def _moe_rows(dims, cfg, tokens, layer):
    """Token copies the rank's experts compute in MoE layer ``layer`` (as :func:`layer_activation_bytes`)."""
    if cfg.moe_expert_load:
        return cfg.ep * max(ep_loads(dims, cfg, tokens, dims.moe_index(layer)))
    return routed_rows(dims, cfg, tokens)


def _activation_peak(dims, cfg, p, units, framework):
    """(bytes kept, bytes of the layer being recomputed, chunk passes alive) at the schedule's peak: each forward
    pass keeps its chunk's activations until the matching backward; inference keeps one layer's working set of
    one micro-batch (and the logits)."""
    nb = DTYPES[cfg.dtype][0]
    mode = recompute_mode(cfg)
    op_sac = framework == "fsdp2" and cfg.recompute_selective
    q = _lengths(dims, cfg)[0] // cfg.cp
    tokens = cfg.micro_batch_size * q + cfg.prefill_chunk
    per_layer = {}

    def layer_bytes(i):
        moe = dims.is_moe_layer(i)
        key = (moe, i if moe and cfg.moe_expert_load else 0)
        if key not in per_layer:
            per_layer[key] = (op_sac_layer_bytes(dims, cfg, tokens) if op_sac and not moe
                              else layer_activation_bytes(dims, cfg, mode, moe, i))
        return per_layer[key]

    vocab = vocab_shard(dims, cfg.tp, vocab_padding(cfg))
    div = cfg.tp if cfg.sequence_parallel else 1
    mask = 1 if cfg.dropout and not cfg.inference else 0
    chunk_bytes = {}
    for ch, (first, last, layers) in units.items():
        total = sum(layer_bytes(i) for i in layers)
        if first:  # the embedding output's dropout mask
            total += tokens * dims.hidden * mask // div
        if last:  # final LayerNorm input, LM-head input (the logits are their own part)
            total += 2 * tokens * dims.hidden * nb // div
        chunk_bytes[ch] = total
    if cfg.inference:  # nothing is kept for a backward pass: one layer's working set, and the logits
        largest = max(layer_bytes(i) for _, _, layers in units.values() for i in layers)
        logits = any(last for _, last, _ in units.values())
        # fp32 logits of every position, or of each sequence's last one (--logits last: serving, vLLM's profile)
        rows = cfg.micro_batch_size if cfg.logits == "last" else tokens
        return largest + (4 * rows * vocab if logits else 0), 0, 1
    # a recomputed layer's full activations exist while it runs its backward (unfused: with its scores)
    full = "none" if cfg.attention == "unfused" else "selective"
    recomputing = max(layer_activation_bytes(dims, cfg, full, dims.is_moe_layer(i), i)
                      for _, _, layers in units.values() for i in layers) if mode == "full" or op_sac else 0
    live = peak = alive = peak_alive = 0
    for kind, ch, _mb in pipeline_schedule(cfg, p):
        if kind == "F":
            live += chunk_bytes[ch]
            alive += 1
            if live > peak:
                peak, peak_alive = live, alive
        else:
            live -= chunk_bytes[ch]
            alive -= 1
    return peak, recomputing, peak_alive


def _kv_cache_bytes(dims, cfg, units):
    """Keys and values of every sequence resident on the rank (all micro-batches of its DP replica), for the
    stage's layers, at the largest context of the step (the last decode step's)."""
    nb = DTYPES[cfg.dtype][0]
    layers = [i for _, _, r in units.values() for i in r]
    q, c = _lengths(dims, cfg)
    context = q if cfg.mode == "prefill" else c + cfg.steps - 1
    heads = dims.kv_heads // cfg.tp
    per_position = 2 * heads * dims.head_dim * nb  # one layer's
    if dims.mla:  # the compressed latent and the shared rotary key, whole on every TP rank
        per_position = (dims.kv_lora_rank + dims.rope_dim) * nb
    sequences = cfg.micro_batches * cfg.micro_batch_size
    kept = context // cfg.cp if cfg.mode == "prefill" else context
    # a sliding-window layer keeps only the window's last positions
    total = per_position * sequences * sum(dims.attn_keys(i, kept) for i in layers)
    if cfg.mode == "mixed":  # each micro-batch's prefill request: its cached prompt and this chunk
        keys = cfg.prefill_done + cfg.prefill_chunk
        total += per_position * cfg.micro_batches * sum(dims.attn_keys(i, keys) for i in layers)
    return total


def memory_estimate(dims: ModelDims, cfg: LlmConfig) -> list:
    """:class:`MemoryEstimate` of every pipeline stage, in stage order."""
    return [stage_memory(dims, cfg, p) for p in range(cfg.pp)]


def peak_memory(dims: ModelDims, cfg: LlmConfig) -> MemoryEstimate:
    """The stage that needs the most memory."""
    return max(memory_estimate(dims, cfg), key=lambda m: m.total)


def metadata_attrs(estimate: MemoryEstimate) -> dict:
    """The estimate as GlobalMetadata attributes of the stage's traces (``memory_<part>_bytes``, the allocated
    and reserved bytes, the framework and ``memory_fixes``: the single changes that would lower the step's peak,
    as JSON ``[[flags, peak bytes], ...]``), which ``astra run`` checks against the GPU's HBM with the gpu model."""
    import json

    out = {"memory_peak_bytes": estimate.total, "memory_allocated_bytes": estimate.allocated_bytes,
           "memory_reserved_bytes": estimate.reserved_bytes, "memory_workspace_bytes": estimate.workspace,
           "memory_framework": estimate.framework}
    for key, value in estimate.parts().items():
        out[f"memory_{key}_bytes"] = value
    if estimate.source is not None:
        from .memory_fit import fixes

        out["memory_fixes"] = json.dumps([[flags, peak] for flags, peak in fixes(*estimate.source)])
    return out
