"""What a replica's GPUs hold, sized as vLLM sizes its paged KV cache (``gpu_memory_utilization``).

vLLM (V0 from v0.6.5, ``vllm/worker/worker.py`` ``determine_num_available_blocks``; V1,
``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``) loads the weights, runs one profiling forward
pass of ``max_num_batched_tokens`` tokens over ``max_num_seqs`` sequences with the sampler on each sequence's last
position, and gives the KV cache what is left of its budget::

    kv_bytes = total_gpu_memory x gpu_memory_utilization
               - weights - activation peak of the profiling run - non-torch memory

``total_gpu_memory`` is what ``cudaMemGetInfo`` reports (less than the HBM: the driver's own reservation), the
activation peak is PyTorch's allocator peak above the weights, and the non-torch memory is what grew outside
PyTorch's allocator since the worker started (NCCL and custom all-reduce buffers, cuBLAS). Blocks are
``kv_bytes // (block_size x KV bytes per token)`` on each worker and the engine takes the smallest (the last
pipeline stage also runs the sampler). Two things are *outside* the budget: the CUDA context (it exists before
the worker's baseline is taken) and the CUDA-graph pool (graphs are captured after the KV cache is allocated:
V0's ``initialize_cache`` then ``_warm_up_model``, V1's ``initialize_from_config`` then
``compile_or_warm_up_model``); both live in the ``1 - gpu_memory_utilization`` headroom, so neither is
subtracted here.

The weights and the profiling run's activations are the workload generator's memory model
(:mod:`astra_workload_generators.llm.memory`, the one ``astra search`` and ``astra run``'s OOM check use).
docs/memory.md ("Serving: vLLM's accounting") gives every term with its source and the published logs it is
checked against (``astra validate``, kind ``kv_cache``)."""

from __future__ import annotations

from dataclasses import dataclass

from astra_sim.errors import ConfigError, InfeasibleError

GIB = 1 << 30
#: ``total_gpu_memory`` as vLLM logs it (``torch.cuda.mem_get_info``'s total), by the platform's GPU.
#: H100-SXM5-80GB: 79.22 GiB, vllm-project/vllm PR #10511 ("total_gpu_memory     79.22GiB", H100 80GB) and
#: PR #12126 ("total_gpu_memory (79.22GiB)", H100-80G). A100-SXM4-40GB: 39.38 GiB, vllm-project/vllm issue #16570
#: ("total_gpu_memory (39.38GiB)", 4 x A100 40GB).
VISIBLE_MEMORY_BYTES = {
    "H100-SXM5-80GB": round(79.22 * GIB),
    "A100-SXM4-40GB": round(39.38 * GIB),
}
#: a GPU without a logged total: its HBM times the H100's visible share (79.22 / 80 GiB), an assumption
VISIBLE_SHARE_ASSUMED = 79.22 / 80
#: the sampler's bytes per logit of each sampled row: the LM head's output in 16 bit (2) and the fp32 logits,
#: probabilities and log-probabilities vLLM's sampler computes from it (4 + 4 + 4:
#: vllm/model_executor/layers/sampler.py, Sampler.forward: ``logits.to(torch.float)``, ``torch.softmax(...,
#: dtype=torch.float)``, ``torch.log_softmax(..., dtype=torch.float)``)
SAMPLER_BYTES_PER_LOGIT = 2 + 3 * 4
#: non-torch memory of one worker (fit, on logs that are not registry cases): TP 1: 0.16 GiB, vllm-project/vllm
#: PR #12126 ("non_torch_memory takes 0.16GiB", H100, TP 1); TP > 1 (NCCL and custom all-reduce buffers): the
#: median, 0.34 GiB, of the worker values logged at TP 2 and 4 in vllm-project/vllm issues #13061 (0.25, RTX 4090
#: TP 2), #15815 (0.30, L40S TP 2) and #16570 (0.34, 0.38, 0.43, A100 40GB TP 4)
NON_TORCH_BYTES = round(0.16 * GIB)
NON_TORCH_TP_BYTES = round(0.34 * GIB)
#: vLLM's ``--kv-cache-dtype`` -> bytes per cached element; ``auto``: the model's dtype (None here). vLLM's engine
#: arguments: ``--kv-cache-dtype {auto,fp8,fp8_e5m2,fp8_e4m3}``, "If 'auto', will use model data type" (docs.vllm.ai
#: engine_args); an FP8 cache stores 1-byte E4M3 or E5M2 values ("fp8" is E4M3 on CUDA) with one scalar scale per
#: layer's K and V ("For now, only per-tensor (scalar) scaling factors are supported", docs.vllm.ai v0.6.6, "FP8 E4M3
#: KV Cache"): the scales' bytes are negligible and not counted
KV_CACHE_DTYPE_BYTES = {"auto": None, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def model_of(layout, **shape):
    """(dims, cfg) of one step of the layout (a decode step of one sequence by default)."""
    spec = layout.llm_spec(**(shape or {"mode": "decode", "batch_size": 1, "prompt_len": 1}))
    return spec.resolve()


@dataclass
class KvCapacity:
    hbm_bytes: int
    usable_bytes: int             # total_gpu_memory x gpu_memory_utilization: vLLM's budget per GPU
    weights_bytes: int
    activations_bytes: int        # the profiling run's layers (its largest stage)
    workspace_bytes: int          # non-torch memory (NCCL, custom all-reduce, cuBLAS)
    kv_bytes: int                 # per GPU, for the cache (the smallest stage's)
    kv_bytes_per_token: int       # per GPU (its TP share of the heads, its PP stage's layers)
    kv_bytes_per_token_model: int  # the whole model's, one copy (what a KV transfer moves in all)
    block_size: int
    blocks: int
    max_context: int
    visible_bytes: int = 0        # total_gpu_memory: what CUDA reports of the HBM
    sampler_bytes: int = 0        # the sampler's logits of max_num_seqs rows (last stage)
    kv_cache_dtype: str = "auto"  # vLLM's --kv-cache-dtype the cache is sized in (KV_CACHE_DTYPE_BYTES)

    @property
    def tokens(self):
        return self.blocks * self.block_size

    def to_dict(self):
        return {k: getattr(self, k) for k in ("hbm_bytes", "visible_bytes", "usable_bytes", "weights_bytes",
                                              "activations_bytes", "sampler_bytes", "workspace_bytes",
                                              "kv_bytes", "kv_bytes_per_token", "kv_bytes_per_token_model",
                                              "block_size", "blocks", "max_context", "kv_cache_dtype")} | {
            "tokens": self.tokens}


def visible_memory_bytes(platform):
    """``total_gpu_memory`` of the platform's GPU: logged (:data:`VISIBLE_MEMORY_BYTES`), else its HBM times
    :data:`VISIBLE_SHARE_ASSUMED`; None when the platform states no device memory."""
    hbm = platform.device_memory_bytes()
    if hbm is None:
        return None
    device = platform.describe(1).get("gpu", platform.name)
    return VISIBLE_MEMORY_BYTES.get(device, int(hbm * VISIBLE_SHARE_ASSUMED))


def non_torch_bytes(tp):
    """A worker's memory outside PyTorch's allocator: :data:`NON_TORCH_BYTES`, :data:`NON_TORCH_TP_BYTES` with TP."""
    return NON_TORCH_TP_BYTES if tp > 1 else NON_TORCH_BYTES


def kv_capacity(layout, gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=2048,
                max_model_len=None, max_num_seqs=256, kv_cache_dtype="auto"):
    """The KV-cache blocks of one replica (every GPU holds ``blocks`` blocks of its share), by vLLM's accounting
    (module docstring): the profiling run is ``max_num_batched_tokens`` tokens, its sampler ``max_num_seqs``
    rows; ``kv_cache_dtype`` as vLLM's ``--kv-cache-dtype`` (:data:`KV_CACHE_DTYPE_BYTES`)."""
    if kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise ConfigError(f"--kv-cache-dtype must be one of {', '.join(KV_CACHE_DTYPE_BYTES)}, got {kv_cache_dtype!r}")
    from astra_sim.platforms import get_platform
    from astra_workload_generators.llm.config import DTYPES
    from astra_workload_generators.llm.memory import memory_estimate

    dims, _ = model_of(layout)
    max_context = max_model_len or dims.seq_len
    tokens = min(max_num_batched_tokens, max_context)
    dims, cfg = model_of(layout, mode="prefill", batch_size=1, prompt_len=tokens)
    stages = memory_estimate(dims, cfg)
    platform = get_platform(layout.platform)
    hbm, visible = platform.device_memory_bytes(), visible_memory_bytes(platform)
    device = platform.describe(1).get("gpu", platform.name)
    if hbm is None:
        raise ConfigError(f"--platform {platform.name} states no device memory: the KV cache cannot be sized")
    usable = int(visible * gpu_memory_utilization)
    non_torch = non_torch_bytes(layout.tp)
    # the LM head's logits are gathered whole (every vocabulary entry) for each sampled row
    sampler = min(max_num_seqs, max_num_batched_tokens) * dims.vocab * SAMPLER_BYTES_PER_LOGIT
    kv = min(usable - m.weights - m.activations - non_torch - (sampler if m.stage == layout.pp - 1 else 0)
             for m in stages)
    nb = KV_CACHE_DTYPE_BYTES[kv_cache_dtype] or DTYPES[cfg.dtype][0]
    if dims.mla:
        per_position = (dims.kv_lora_rank + dims.rope_dim) * nb
        per_position_model = per_position
    else:
        per_position = 2 * max(1, dims.kv_heads // layout.tp) * dims.head_dim * nb
        per_position_model = 2 * dims.kv_heads * dims.head_dim * nb
    per_token = per_position * -(-dims.layers // layout.pp)
    blocks = kv // (per_token * block_size) if kv > 0 else 0
    weights, activations = max(m.weights for m in stages), max(m.activations for m in stages)
    if blocks < 1:
        raise InfeasibleError(f"no room for a KV cache: {device} x {layout.gpus} (TP {layout.tp}, PP {layout.pp}) "
                              f"gives vLLM {usable / 1e9:.1f} GB per GPU ({visible / 1e9:.1f} GB visible x "
                              f"{gpu_memory_utilization}), the weights take {weights / 1e9:.1f} GB, the profiling "
                              f"run's activations {activations / 1e9:.1f} GB and its sampler {sampler / 1e9:.1f} "
                              "GB per GPU")
    return KvCapacity(hbm, usable, weights, activations, non_torch, max(kv, 0), per_token,
                      per_position_model * dims.layers, block_size, int(blocks), max_context, visible, sampler,
                      kv_cache_dtype)
