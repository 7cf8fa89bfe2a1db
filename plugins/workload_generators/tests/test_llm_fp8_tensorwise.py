"""``--fp8-recipe tensorwise`` (torchao's Float8Linear, torchtitan's Float8; an FSDP2 training step's default): every
linear's input and weight cast at each forward, its output gradient at each backward, each cast writing FP8 row- and
column-major (torchao eab345c ``float8/roofline_utils.py``), no transposes and no amax history. Bytes by hand."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
N, H, FF = 128, 256, 512  # tokens (one sequence, TP 1), hidden, FFN hidden
QKV = 256 + 2 * 4 * 32  # 8 query heads + 2 x 4 KV heads of 32


def _nodes(tmp_path, name, **kw):
    cfg = LlmConfig(dp=2, zero=3, framework="fsdp2", micro_batches=1, gemm_dtype="fp8", **kw)
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return cfg, read_rank_nodes(tmp_path / name, 0)


def test_fsdp2_step_defaults_to_tensorwise_and_megatron_keeps_delayed():
    assert LlmConfig(zero=3, gemm_dtype="fp8").fp8_recipe == "tensorwise"
    assert LlmConfig(framework="fsdp2", gemm_dtype="fp8").fp8_recipe == "tensorwise"
    assert LlmConfig(gemm_dtype="fp8").fp8_recipe == "delayed"  # Megatron: Transformer Engine's delayed scaling
    assert LlmConfig(zero=3).fp8_recipe == "delayed"  # (no FP8 GEMMs: the recipe is unused)
    assert LlmConfig(zero=3, gemm_dtype="fp8", fp8_recipe="current").fp8_recipe == "current"


def test_tensorwise_casts_by_hand(tmp_path):
    cfg, nodes = _nodes(tmp_path, "tw")
    assert cfg.fp8_recipe == "tensorwise"
    casts = {n.attrs["label"]: n.attrs["tensor_size"] for n in nodes if n.name == "torchao::float8_cast"}
    assert not [n for n in nodes if n.name.startswith("transformer_engine::")]  # no TE transposes, no amax update
    assert not [n for n in nodes if n.attrs.get("label", "").startswith("amax.")]  # no amax all-reduce
    # inputs: bf16 read once (the amax fused into the norm / activation before it), FP8 written twice: 4 B
    for name, k in (("qkv", H), ("proj", H), ("fc1", H), ("fc2", FF)):
        assert casts[f"fwd.l0.mb0.{name}.fp8_cast"] == N * k * (2 + 2)
    # weights ([n, k] each): amax read, cast read, FP8 written twice: 6 B
    for name, n, k in (("qkv", QKV, H), ("proj", H, H), ("fc1", 2 * FF, H), ("fc2", H, FF)):
        assert casts[f"fwd.l0.mb0.{name}.weight.fp8_cast"] == n * k * (2 + 2 + 2)
    # output gradients, cast to E5M2 in backward: 4 B (FC1's is [N, 2 x FFN]: w1 and w3 as one)
    for name, cols in (("fc2", H), ("fc1", 2 * FF), ("proj", H), ("qkv", QKV)):
        assert casts[f"bwd.l0.mb0.{name}.dgrad.fp8_cast"] == N * cols * (2 + 2)
    assert len(casts) == 12


def test_tensorwise_full_recompute_casts_weights_again(tmp_path):
    _, nodes = _nodes(tmp_path, "ac", recompute=True)
    labels = {n.attrs["label"] for n in nodes if n.name == "torchao::float8_cast"}
    assert {"recompute.l0.mb0.qkv.weight.fp8_cast", "recompute.l0.mb0.fc2.fp8_cast"} <= labels


def test_tensorwise_needs_an_fsdp2_training_step(tmp_path):
    with pytest.raises(ConfigError, match="--fp8-recipe tensorwise"):
        generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, gemm_dtype="fp8", fp8_recipe="tensorwise"),
                     tmp_path / "x")
