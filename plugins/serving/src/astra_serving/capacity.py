"""What a replica's GPUs hold: the model's weights, one iteration's activations and, in what is left of
``gpu_memory_utilization`` x HBM, the paged KV cache. The memory model is the workload generator's
(:mod:`astra_workload_generators.llm.memory`, the one ``astra search`` and ``astra run``'s OOM check use),
evaluated for a prefill iteration of ``max_num_batched_tokens`` tokens (vLLM profiles the same worst case)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from astra_sim.errors import ConfigError, InfeasibleError

_PARSER = {}


def llm_parser():
    """``astra workload llm``'s parser (with every installed plugin's options), built once."""
    if not _PARSER:
        from astra_sim.cli import build_parser
        from astra_sim.plugins import make_plugin_manager

        parser = build_parser(make_plugin_manager())

        def sub(p, name):
            for action in p._actions:  # argparse has no public way to reach a sub-command's parser
                if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                    return action.choices[name]
            raise KeyError(name)

        _PARSER["llm"] = sub(sub(parser, "workload"), "llm")
    return _PARSER["llm"]


def model_of(layout, argv=()):
    """(dims, cfg) of the layout's generator flags plus ``argv`` (a decode step by default)."""
    from astra_workload_generators.llm.cli import dims_and_config

    args = llm_parser().parse_args([*layout.generator_args(), *(argv or ["--mode", "decode", "--batch-size", "1",
                                                                          "--prompt-len", "1"])])
    return dims_and_config(args)


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
    from astra_gpu_model.gpu import load_gpu
    from astra_gpu_model.platforms import get_platform
    from astra_workload_generators.llm.config import DTYPES
    from astra_workload_generators.llm.memory import FRAGMENTATION, peak_memory

    dims, _ = model_of(layout)
    max_context = max_model_len or dims.seq_len
    tokens = min(max_num_batched_tokens, max_context)
    dims, cfg = model_of(layout, ["--mode", "prefill", "--batch-size", "1", "--prompt-len", str(tokens)])
    m = peak_memory(dims, cfg)
    gpu = load_gpu(get_platform(layout.platform).gpu)
    if gpu.hbm_capacity_gb is None:
        raise ConfigError(f"the {gpu.name} has no hbm_capacity_gb: the KV cache cannot be sized")
    hbm = int(gpu.hbm_capacity_gb * 1e9)
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
        raise InfeasibleError(f"no room for a KV cache: {gpu.name} x {layout.gpus} (TP {layout.tp}, PP {layout.pp}) "
                              f"holds {usable / 1e9:.1f} GB usable of {hbm / 1e9:.0f} GB, the weights take "
                              f"{m.weights / 1e9:.1f} GB and an iteration's activations {m.activations / 1e9:.1f} "
                              "GB per GPU")
    return KvCapacity(hbm, usable, m.weights, m.activations, workspace, max(kv, 0), per_token,
                      per_position_model * dims.layers, block_size, int(blocks), max_context)
