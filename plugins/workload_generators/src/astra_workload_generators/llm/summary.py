"""``astra workload llm --summary``: what a model is (parameters, FLOPs and KV cache per token) and what a step
needs in memory, without writing traces; the numbers a model card publishes, to check a config against."""

from __future__ import annotations

from .config import DTYPES, LlmConfig
from .memory import UNCERTAINTY, peak_memory
from .memory_fit import first_fix, fixes, verdict
from .model import ModelDims, activated_parameter_count, mtp_parameters, total_parameters

#: the unit of each group of ``--summary --json``'s numbers, as every command's JSON declares in ``units`` (the
#: kernel's ``{"time": "ns", "size": "bytes"}``; there is no time here): ``size`` the ``*_bytes`` keys, ``memory``
#: the per-part dict ``memory`` (whose keys name parts, not units), ``params`` the ``params_*`` counts, ``flops``
#: the ``*flops_per_token`` FLOPs of one token; ``seq_len`` and ``sliding_window`` are positions (tokens).
UNITS = {"size": "bytes", "memory": "bytes", "params": "count", "flops": "flop", "seq_len": "tokens",
         "sliding_window": "tokens"}


def params_total(dims: ModelDims) -> int:
    """All parameters as a model card counts them (every expert, embeddings, norms, biases; MTP modules apart):
    :func:`.model.total_parameters`, the count the per-rank shards split."""
    return total_parameters(dims)


def params_active(dims: ModelDims) -> int:
    """Parameters one token passes through (routed top-k and shared experts, embeddings, norms, biases)."""
    return total_parameters(dims, activated=True)


def params_mtp(dims: ModelDims) -> int:
    """DeepSeek-V3's multi-token-prediction modules (:func:`.model.mtp_parameters`: a layer, the 2h x h
    projection of its two inputs and three norms each; the embedding and the LM head are the main model's)."""
    return mtp_parameters(dims)


def flops_per_token(dims: ModelDims) -> int:
    """Forward FLOPs of one token at a context of seq_len: 2 x the activated matmul parameters plus the attention
    scores and values against seq_len keys (a sliding-window layer's: the window's; training: 3x)."""
    return (2 * activated_parameter_count(dims)
            + 2 * dims.attn_key_sum(dims.seq_len) * (dims.q_width + dims.o_width))


def kv_cache_bytes_per_token(dims: ModelDims, dtype: str = "bf16") -> int:
    """KV-cache bytes of one position over all layers (MLA: the latent and the rotary key), before any sliding
    window caps a layer's cache (see :func:`kv_cache_bytes_per_sequence`)."""
    return dims.layers * _kv_position_bytes(dims, dtype)


def _kv_position_bytes(dims: ModelDims, dtype: str) -> int:
    nb = DTYPES[dtype][0]
    if dims.mla:
        return (dims.kv_lora_rank + dims.rope_dim) * nb
    return 2 * dims.kv_heads * dims.head_dim * nb


def kv_cache_bytes_per_sequence(dims: ModelDims, dtype: str = "bf16") -> int:
    """KV-cache bytes of one sequence of seq_len: local layers keep only their window."""
    return _kv_position_bytes(dims, dtype) * dims.attn_key_sum(dims.seq_len)


def model_summary(dims: ModelDims, cfg: LlmConfig, hbm_bytes: int | None = None) -> dict:
    """The summary as one JSON-able dict (``--summary --json``); ``hbm_bytes``: the device's memory, for the
    margin, the verdict and (when it does not fit) the one change that would make it fit."""
    peak = peak_memory(dims, cfg)
    out = {"units": dict(UNITS), "params_total": params_total(dims), "params_active": params_active(dims),
           "flops_per_token": flops_per_token(dims), "train_flops_per_token": 3 * flops_per_token(dims),
           "kv_cache_bytes_per_token": kv_cache_bytes_per_token(dims, cfg.dtype),
           "kv_cache_bytes_per_sequence": kv_cache_bytes_per_sequence(dims, cfg.dtype),
           "sliding_window": dims.window, "local_layers": sum(map(dims.is_local, range(dims.layers))),
           "layers": dims.layers, "hidden": dims.hidden, "heads": dims.heads, "kv_heads": dims.kv_heads,
           "head_dim": dims.head_dim, "experts": dims.experts, "top_k": dims.top_k if dims.moe else 0,
           "seq_len": dims.seq_len, "npus": cfg.npus,
           "memory_peak_bytes": peak.total, "memory_stage": peak.stage, "memory_framework": peak.framework,
           "memory_allocated_bytes": peak.allocated_bytes, "memory_reserved_bytes": peak.reserved_bytes,
           "memory": peak.parts()}
    if hbm_bytes is not None:
        out["memory_capacity_bytes"] = hbm_bytes
        out["memory_margin_bytes"] = hbm_bytes - peak.total
        out["memory_verdict"] = verdict(peak.total, hbm_bytes)
        if out["memory_verdict"] != "fits":
            fix = first_fix(fixes(dims, cfg), hbm_bytes)
            out["memory_fix"] = {"flags": fix[0], "peak_bytes": fix[1]} if fix else None
    if dims.mtp_layers:
        out["params_mtp"] = params_mtp(dims)
    return out


def describe(summary: dict) -> str:
    """The summary as lines of text."""
    s = summary
    lines = [f"parameters: {s['params_total'] / 1e9:.2f}B total, {s['params_active'] / 1e9:.2f}B active"
             + (f" (+{s['params_mtp'] / 1e9:.2f}B in MTP modules)" if "params_mtp" in s else ""),
             f"FLOPs per token: {s['flops_per_token'] / 1e9:.2f} GFLOP forward at {s['seq_len']} context "
             f"({s['train_flops_per_token'] / 1e9:.2f} GFLOP training)",
             f"KV cache per token: {s['kv_cache_bytes_per_token'] / 1024:.1f} KiB; per sequence of {s['seq_len']}: "
             f"{s['kv_cache_bytes_per_sequence'] / 2**20:.1f} MiB"
             + (f" ({s['local_layers']} layers keep a window of {s['sliding_window']})" if s["local_layers"] else ""),
             f"estimated peak HBM per GPU ({s['npus']} GPUs, {s['memory_framework']}): "
             f"{s['memory_peak_bytes'] / 1e9:.1f} GB on stage {s['memory_stage']} ("
             + ", ".join(f"{k.replace('_', ' ')} {v / 1e9:.1f}" for k, v in s["memory"].items() if v)
             + f" GB; allocated {s['memory_allocated_bytes'] / 1e9:.1f}, reserved "
             f"{s['memory_reserved_bytes'] / 1e9:.1f} GB)"]
    if "memory_capacity_bytes" in s:
        margin = s["memory_margin_bytes"]
        line = (f"device memory {s['memory_capacity_bytes'] / 1e9:.1f} GB: "
                + {"fits": f"fits, {margin / 1e9:.1f} GB to spare",
                   "near": f"a near miss, {-margin / 1e9:.1f} GB over (within the estimate's "
                           f"{UNCERTAINTY:.0%} uncertainty)",
                   "oom": f"does not fit, {-margin / 1e9:.1f} GB over"}[s["memory_verdict"]])
        if s["memory_verdict"] != "fits":
            fix = s.get("memory_fix")
            line += (f"; {fix['flags']} would fit ({fix['peak_bytes'] / 1e9:.1f} GB)" if fix else
                     "; no single change of recomputation, ZeRO, micro-batch or TP/PP fits: add GPUs")
        lines.append(line)
    return "\n".join(lines)
