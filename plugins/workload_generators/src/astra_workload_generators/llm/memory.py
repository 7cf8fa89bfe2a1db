"""Each rank's peak HBM use in one step, estimated from the model, its layout and the pipeline schedule, so that
a configuration that cannot fit a GPU is known before (or without) simulating it.

The estimate per rank (bytes) is the sum of

* **weights, gradients, optimizer states** of the parameters the rank holds (its stage's layers, TP-sharded;
  the embedding on the first and the LM head on the last stage; its E/EP experts), as mixed-precision Adam
  keeps them (ZeRO, Rajbhandari et al. 2020): weights and gradients in ``--dtype``, an fp32 master copy
  (unless ``--dtype fp32``) and two fp32 moments = 12 bytes per parameter. ZeRO-1 shards the optimizer
  states over the data-parallel group (DP x CP; expert weights over expert-DP), ZeRO-2 the gradients too and
  ZeRO-3 the weights too -- but only where the generated step lets it: gradients accumulated over several
  micro-batches are reduced once, after the last one, so they stay whole until then unless
  ``--grad-sync-every-micro-batch``; ZeRO-3 keeps each unit's gathered weights for the whole step unless
  ``--reshard-after-forward`` (then two units are whole at a time: the one computing and the one prefetched).
  FP8 GEMMs add Transformer Engine's cached FP8 copy of each linear weight and its transpose (2 bytes);
* **activations** kept for the backward pass: per layer and micro-batch, Korthikanti et al. 2022's count
  (``s*b*h*(34 + 5*a*s/h)`` bytes for a GPT layer in 16 bit without parallelism: ``10 + 24/t`` with tensor
  parallelism, everything ``/t`` with sequence parallelism; the ``5*a*s/h`` attention-score term is not stored
  with FlashAttention or selective recomputation; full recomputation keeps only each layer's input), written
  for any head count, GQA, FFN size, gated FFN, dropout on or off, context parallelism (``s/CP`` tokens) and
  MoE layers (the routed token copies through the experts). The number of micro-batches whose activations are
  alive at once comes from the pipeline schedule itself (1F1B: ``PP - p`` on stage p; interleaved: Megatron's
  ``1 + (PP-1)/(PP*V)`` factor follows), plus the embedding's dropout mask on the first and the output layer's
  logits (fp32) on the last stage; with full recomputation one layer's full activations while it is
  recomputed;
* **KV cache** (inference): every resident sequence's keys and values for the stage's layers;
* an **allowance**: ``WORKSPACE_BYTES`` (CUDA context, cuBLAS / NCCL workspaces and buffers) plus
  ``FRAGMENTATION`` of everything else (the caching allocator's fragmentation).

Not counted: temporary buffers inside a kernel, communication buffers beyond the allowance, the activation
gradients alive during one layer's backward, FP8 activations saved in 1 byte (counted in ``--dtype``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import DTYPES, LlmConfig
from .model import ModelDims, _lengths, layer_shards, mtp_shards, padded_vocab
from .routing import ep_loads, routed_rows
from .schedule import pipeline_schedule

#: CUDA context, cuBLAS workspace, NCCL buffers and the like: a fixed allowance per GPU
WORKSPACE_BYTES = 1 << 30
#: the caching allocator's fragmentation, as a share of everything else
FRAGMENTATION = 0.05
#: fp32 master weights + Adam's two fp32 moments per parameter (mixed precision); fp32 training: moments only
OPTIMIZER_BYTES = 12
#: Transformer Engine's cached FP8 copy of a linear layer's weight and of its transpose
FP8_WEIGHT_BYTES = 2
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class MemoryEstimate:
    """One rank's estimated peak HBM use (bytes), by what holds it."""

    stage: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    kv_cache: int
    workspace: int
    #: model chunks' forward passes (micro-batch x chunk) whose activations are alive at the peak
    in_flight: int

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.optimizer + self.activations + self.kv_cache
                + self.workspace)

    def to_dict(self):
        return {**asdict(self), "total": self.total}

    def describe(self):
        """``"45.2 GB (weights 12.1, gradients 6.0, ...)"`` in decimal GB, for terminals."""
        parts = [(k, getattr(self, k)) for k in ("weights", "gradients", "optimizer", "activations", "kv_cache",
                                                   "workspace")]
        return (f"{self.total / 1e9:.1f} GB (" + ", ".join(f"{k.replace('_', ' ')} {v / 1e9:.1f}"
                                                            for k, v in parts if v) + ")")


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
    if moe:
        f = dims.expert_ffn
        rows = routed_rows(dims, cfg, tokens)
        if cfg.moe_expert_load:
            rows = cfg.ep * max(ep_loads(dims, cfg, tokens, dims.moe_index(layer)))
        sharded += tokens * dims.shared_experts * f * (m1 + 1) * nb  # shared experts: FC1 outputs, FC2 input
        sharded += rows * f * (m1 + 1) * nb  # routed experts, on the token copies this rank computes
        expert_inputs = rows * h * nb  # the dispatched tokens (FC1 input), whole on every TP rank
        router = tokens * dims.experts * 4  # fp32 routing probabilities
    else:
        sharded += tokens * dims.ffn_hidden * (m1 + 1) * nb
        expert_inputs = router = 0
    scores = 0
    if mode == "none":  # softmax output, dropout mask and output of the attention scores
        scores = a * b * q * c * (nb + mask * (1 + nb))
    return replicated // replicated_div + (sharded + scores) // t + expert_inputs + router


def _stage_units(dims: ModelDims, cfg: LlmConfig, p: int):
    """{chunk: (first virtual stage?, last?, layer indices)} of pipeline rank ``p``."""
    P, V = cfg.pp, cfg.virtual_stages
    per_chunk = dims.layers // (P * V)
    out = {}
    for ch in range(V):
        v = ch * P + p
        out[ch] = (v == 0, v == P * V - 1, range(v * per_chunk, (v + 1) * per_chunk))
    return out


def stage_memory(dims: ModelDims, cfg: LlmConfig, p: int) -> MemoryEstimate:
    """The estimate for the ranks of pipeline stage ``p`` (every rank of a stage holds the same)."""
    nb = DTYPES[cfg.dtype][0]
    units = _stage_units(dims, cfg, p)
    vocab = padded_vocab(dims, cfg.tp) // cfg.tp
    dense = expert = linear = 0
    unit_sizes = []
    for first, last, layers in units.values():
        for i in layers:
            ld, le = layer_shards(dims, cfg, dims.is_moe_layer(i))
            dense, expert, linear = dense + ld, expert + le, linear + ld + le
            unit_sizes.append(ld + le)
        for edge in (first, last):
            if edge:
                dense += vocab * dims.hidden
                unit_sizes.append(vocab * dims.hidden)
        if last and dims.mtp_layers and not cfg.inference:  # the MTP modules' weights (not their activations)
            md, me = mtp_shards(dims, cfg)
            dense, expert = dense + dims.mtp_layers * md, expert + dims.mtp_layers * me
            linear += dims.mtp_layers * (md + me)
    params = dense + expert
    dp_group = cfg.dp * cfg.cp
    edp_group = cfg.dp // cfg.ep * cfg.cp

    def sharded(count, bytes_per):
        """``count`` dense-and-expert-proportioned parameters' bytes, sharded over their DP groups."""
        if not params:
            return 0
        d_part = dense * count // params
        return -(-d_part * bytes_per // dp_group) + -(-(count - d_part) * bytes_per // edp_group)

    fp8 = FP8_WEIGHT_BYTES * linear if cfg.gemm_dtype == "fp8" and not cfg.inference else 0
    if cfg.inference:
        weights, gradients, optimizer = params * nb, 0, 0
    else:
        zero = cfg.zero
        if zero == 3 and cfg.reshard_after_forward:
            weights = sharded(params, nb) + 2 * max(unit_sizes) * nb
        else:  # ZeRO-3 gathers each unit once per step and keeps it (as the generated step does)
            weights = params * nb
        reduced_each_micro_batch = cfg.grad_sync_every_micro_batch or cfg.micro_batches == 1
        gradients = sharded(params, nb) if zero >= 2 and reduced_each_micro_batch else params * nb
        opt_bytes = OPTIMIZER_BYTES - (4 if nb >= 4 else 0)
        optimizer = sharded(params, opt_bytes) if zero >= 1 else params * opt_bytes
    weights += fp8
    activations, in_flight = _activation_peak(dims, cfg, p, units, vocab)
    kv = _kv_cache_bytes(dims, cfg, units) if cfg.inference else 0
    subtotal = weights + gradients + optimizer + activations + kv
    workspace = WORKSPACE_BYTES + int(FRAGMENTATION * subtotal)
    return MemoryEstimate(p, weights, gradients, optimizer, activations, kv, workspace, in_flight)


def _activation_peak(dims, cfg, p, units, vocab):
    """(bytes, chunk passes alive) at the schedule's peak: each forward pass keeps its chunk's activations
    until the matching backward; inference keeps one layer's working set of one micro-batch."""
    nb = DTYPES[cfg.dtype][0]
    mode = recompute_mode(cfg)
    per_layer = {}

    def layer_bytes(i):
        moe = dims.is_moe_layer(i)
        key = (moe, i if moe and cfg.moe_expert_load else 0)
        if key not in per_layer:
            per_layer[key] = layer_activation_bytes(dims, cfg, mode, moe, i)
        return per_layer[key]

    q = _lengths(dims, cfg)[0] // cfg.cp
    tokens = cfg.micro_batch_size * q + cfg.prefill_chunk
    div = cfg.tp if cfg.sequence_parallel else 1
    mask = 1 if cfg.dropout and not cfg.inference else 0
    chunk_bytes = {}
    for ch, (first, last, layers) in units.items():
        total = sum(layer_bytes(i) for i in layers)
        if first:  # the embedding output's dropout mask
            total += tokens * dims.hidden * mask // div
        if last:  # final LayerNorm input, LM-head input, fp32 logits for the cross entropy
            total += 2 * tokens * dims.hidden * nb // div + 4 * tokens * vocab
        chunk_bytes[ch] = total
    if cfg.inference:  # nothing is kept for a backward pass: one layer's working set, and the logits
        largest = max(layer_bytes(i) for _, _, layers in units.values() for i in layers)
        logits = any(last for _, last, _ in units.values())
        return largest + (4 * tokens * vocab if logits else 0), 1
    # the recomputed layer's full activations exist while it runs its backward
    recomputing = max(layer_activation_bytes(dims, cfg, "selective", dims.is_moe_layer(i), i)
                      for _, _, layers in units.values() for i in layers) if mode == "full" else 0
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
    return peak + recomputing, peak_alive


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
    """The estimate as GlobalMetadata attributes of the stage's traces (``memory_<part>_bytes``), which
    ``astra run`` checks against the GPU's HBM with the gpu compute model."""
    out = {"memory_peak_bytes": estimate.total}
    for key in ("weights", "gradients", "optimizer", "activations", "kv_cache", "workspace"):
        out[f"memory_{key}_bytes"] = getattr(estimate, key)
    return out
