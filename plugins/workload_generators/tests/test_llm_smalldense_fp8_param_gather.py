"""With --fp8-params a layer's linear weights are Transformer Engine Float8Tensors, which Megatron-Core's
distributed optimizer keeps in a uint8 parameter buffer and all-gathers as such (core_r0.11.0
``distributed_data_parallel.py``: ``param_dtype = torch.uint8``; NeMo's ``fp8_params`` sets ``fp8_param_gather``):
ZeRO-1's gather moves 1 B per linear weight, the norms (and embedding, LM head) their --dtype bytes."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

#: one layer, hidden 256, 8 heads of 32 with 4 KV heads (QKV 256 x 512), SwiGLU FFN 512 (FC1 256 x 1024)
LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
LINEAR = 131_072 + 65_536 + 262_144 + 131_072  # QKV, projection, FC1, FC2 weights: 589,824
NORMS = 2 * 2 * 256  # two LayerNorms (weight and bias) of 256


def _gathers(tmp_path, name, **kw):
    cfg = dict(dp=2, micro_batches=1, zero=1, gemm_dtype="fp8")
    cfg.update(kw)
    generate_llm(model_dims(**LLAMA), LlmConfig(**cfg), tmp_path / name)
    return {n.name: n.attrs["comm_size"] for n in read_rank_nodes(tmp_path / name, 0) if "_ag." in n.name}


def test_fp8_weights_are_gathered_in_one_byte(tmp_path):
    bf16 = _gathers(tmp_path, "bf16w", overlap_param_gather=True)
    fp8 = _gathers(tmp_path, "fp8w", overlap_param_gather=True, fp8_params=True)
    # comm_size is each rank's share of the gathered buffer (DP 2)
    assert bf16["dp_ag.l0"] == (LINEAR + NORMS) * 2 // 2 == 590_848
    assert fp8["dp_ag.l0"] == (LINEAR * 1 + NORMS * 2) // 2 == 295_936
    assert fp8["dp_ag.embedding"] == bf16["dp_ag.embedding"]  # (the embedding stays in --dtype)
    # the gather after the optimizer (no --overlap-param-gather) moves the same bytes
    late = _gathers(tmp_path, "late", fp8_params=True)
    assert late["dp_ag.l0"] == fp8["dp_ag.l0"]
