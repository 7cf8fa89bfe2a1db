"""What a replica's GPUs hold: the model's weights, one iteration's activations and, in what is left of
``gpu_memory_utilization`` x HBM, the paged KV cache. The memory model is the workload generator's
(:mod:`astra_workload_generators.llm.memory`, the one ``astra search`` and ``astra run``'s OOM check use),
evaluated for a prefill iteration of ``max_num_batched_tokens`` tokens (vLLM profiles the same worst case)."""

from __future__ import annotations

from dataclasses import dataclass

from astra_sim.errors import ConfigError, InfeasibleError


def model_of(layout, **shape):
    """(dims, cfg) of one step of the layout (a decode step of one sequence by default)."""
    spec = layout.llm_spec(**(shape or {"mode": "decode", "batch_size": 1, "prompt_len": 1}))
    return spec.resolve()


@dataclass
class KvCapacity:
    hbm_bytes: int
    usable_bytes: int
    weights_bytes: int
    activations_bytes: int
    workspace_bytes: int
    kv_bytes: int                 # per GPU, for the cache
    kv_bytes_per_token: int       # per GPU (its TP share of the heads, its PP stage's layers)
    kv_bytes_per_token_model: int  # the whole model's, one copy (what a KV transfer moves in all)
    block_size: int
    blocks: int
    max_context: int

    @property
    def tokens(self):
        return self.blocks * self.block_size

    def to_dict(self):
        return {k: getattr(self, k) for k in ("hbm_bytes", "usable_bytes", "weights_bytes", "activations_bytes",
                                              "workspace_bytes", "kv_bytes", "kv_bytes_per_token",
                                              "kv_bytes_per_token_model", "block_size", "blocks", "max_context")} | {
            "tokens": self.tokens}


def kv_capacity(layout, gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=2048,
                max_model_len=None):
    """The KV-cache blocks of one replica (every GPU holds ``blocks`` blocks of its share)."""
    from astra_sim.platforms import get_platform
    from astra_workload_generators.llm.config import DTYPES
    from astra_workload_generators.llm.memory import FRAGMENTATION, peak_memory

    dims, _ = model_of(layout)
    max_context = max_model_len or dims.seq_len
    tokens = min(max_num_batched_tokens, max_context)
    dims, cfg = model_of(layout, mode="prefill", batch_size=1, prompt_len=tokens)
    m = peak_memory(dims, cfg)
    platform = get_platform(layout.platform)
    hbm = platform.device_memory_bytes()  # a GPU's HBM or a TPU chip's: what holds the KV cache
    device = platform.describe(1).get("gpu", platform.name)
    if hbm is None:
        raise ConfigError(f"--platform {platform.name} states no device memory: the KV cache cannot be sized")
    usable = int(hbm * gpu_memory_utilization)
    workspace = m.workspace - int(FRAGMENTATION * m.kv_cache)  # the prompt's own KV is part of the pool
    kv = usable - m.weights - m.activations - workspace
    nb = DTYPES[cfg.dtype][0]
    if dims.mla:
        per_position = (dims.kv_lora_rank + dims.rope_dim) * nb
        per_position_model = per_position
    else:
        per_position = 2 * max(1, dims.kv_heads // layout.tp) * dims.head_dim * nb
        per_position_model = 2 * dims.kv_heads * dims.head_dim * nb
    per_token = per_position * -(-dims.layers // layout.pp)
    blocks = kv // (per_token * block_size) if kv > 0 else 0
    if blocks * block_size < max_context and blocks * block_size < 1:
        raise InfeasibleError(f"no room for a KV cache: {device} x {layout.gpus} (TP {layout.tp}, PP {layout.pp}) "
                              f"holds {usable / 1e9:.1f} GB usable of {hbm / 1e9:.0f} GB, the weights take "
                              f"{m.weights / 1e9:.1f} GB and an iteration's activations {m.activations / 1e9:.1f} "
                              "GB per GPU")
    return KvCapacity(hbm, usable, m.weights, m.activations, workspace, max(kv, 0), per_token,
                      per_position_model * dims.layers, block_size, int(blocks), max_context)
