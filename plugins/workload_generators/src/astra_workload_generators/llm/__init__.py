"""``astra workload llm``: Chakra traces of one transformer step, training or inference, dense or
mixture-of-experts (Megatron-style parallelism).

A package with one concept per module, so that the model, its layout and its schedule can be used without
writing traces (``astra search``, the memory estimate): :mod:`.model` (dimensions, presets, parameter counts,
FLOPs), :mod:`.config` (one step's settings and their checks), :mod:`.layout` (rank coordinates, communicator
groups, symmetry), :mod:`.schedule` (1F1B, interleaved), :mod:`.routing` (MoE token routing), node emission
(:mod:`.emit`, :mod:`.layers` (dense layer, TP), :mod:`.attention` (flash / unfused, CP ring), :mod:`.moe`,
:mod:`.fp8`, :mod:`.zero` (DP / ZeRO sync, optimizer), :mod:`.overlap` (comm SMs, TE userbuffers)),
:mod:`.stage` (a stage's graph), :mod:`.generate` (writing the files), :mod:`.spec` (:class:`LlmSpec`, the
command's options as one typed object, and the public calls :func:`generate_llm_workload` and
:func:`llm_summary`) and :mod:`.cli`.

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

Element-wise nodes (``elementwise``, default on; in inference the layer forward's norms, residual adds and
activation, with ``inference_elementwise``, default on since issue 34, as ``astra serve`` times its steps): LayerNorm, bias+GeLU / SiLU*mul, dropout and
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

from .config import ATTENTIONS, DTYPES, GEMM_DTYPES, MODES, LlmConfig, check_config
from .fp8 import FP8_AMAX_HISTORY, SCALED_MM
from .generate import generate_llm
from .layout import comm_groups, coords_of, cp_coords_of, rank_of, rank_symmetry
from .memory import MemoryEstimate, layer_activation_bytes, memory_estimate, peak_memory, stage_memory
from .model import (
    PRESETS, ModelDims, activated_layer_parameters, activated_parameter_count, dense_layer_parameters,
    expert_layer_parameters, inference_flops, layer_parameters, layer_shards, model_dims, padded_vocab,
    parameter_count, router_parameters, training_flops, vocab_padding, vocab_shard,
)
from .overlap import COMM_SMS_GROUPS, TE_OVERLAP_NAMES, TE_OVERLAPS, load_tp_overlap_sms, parse_comm_sms
from .routing import ep_loads, expert_capacity, parse_expert_load, routed_rows
from .schedule import pipeline_schedule
from .zero import ADAM_BYTES_PER_PARAM
from .spec import LlmSpec, generate_llm_workload, llm_summary
from .cli import add_llm_command

__all__ = [
    "PRESETS", "ModelDims", "LlmConfig", "model_dims", "parameter_count", "activated_parameter_count",
    "training_flops", "inference_flops", "generate_llm", "rank_of", "coords_of", "cp_coords_of", "rank_symmetry",
    "check_config", "comm_groups", "pipeline_schedule", "layer_shards", "padded_vocab", "vocab_padding",
    "vocab_shard", "layer_parameters",
    "dense_layer_parameters", "expert_layer_parameters", "router_parameters", "activated_layer_parameters",
    "ATTENTIONS", "DTYPES", "GEMM_DTYPES", "MODES", "FP8_AMAX_HISTORY", "SCALED_MM", "COMM_SMS_GROUPS",
    "TE_OVERLAP_NAMES", "TE_OVERLAPS", "load_tp_overlap_sms", "parse_comm_sms", "ep_loads", "expert_capacity",
    "parse_expert_load", "routed_rows", "ADAM_BYTES_PER_PARAM", "add_llm_command", "MemoryEstimate",
    "layer_activation_bytes", "memory_estimate", "peak_memory", "stage_memory",
    "LlmSpec", "generate_llm_workload", "llm_summary",
]
