"""``--fp8-recipe current`` (Transformer Engine's Float8CurrentScaling, Megatron-Bridge's FP8-CS): every cast reads
its input twice (the amax, then the cast; a norm's output once: the norm computed its amax), the LayerNorm and SwiGLU
outputs get their own amax-and-cast kernel (which writes the transpose the backward reuses), and no amax history is
kept."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
N = 128  # tokens: one sequence of 128, TP 1


def _casts(tmp_path, recipe):
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, micro_batches=1, gemm_dtype="fp8", fp8_recipe=recipe),
                 tmp_path / recipe)
    nodes = read_rank_nodes(tmp_path / recipe, 0)
    return {n.attrs["label"]: n.attrs["tensor_size"] for n in nodes
            if n.name.startswith("transformer_engine::")}


def test_current_scaling_reads_each_cast_input_twice_and_casts_the_norm_outputs_apart(tmp_path):
    delayed, current = _casts(tmp_path, "delayed"), _casts(tmp_path, "current")
    # the attention output's cast: bf16 read once (delayed) or twice (current), FP8 + its transpose written
    assert delayed["fwd.l0.mb0.proj.fp8_cast"] == N * 256 * (2 + 2)
    assert current["fwd.l0.mb0.proj.fp8_cast"] == N * 256 * (2 * 2 + 2)
    # the LayerNorm outputs (QKV, FC1 inputs) and the SwiGLU output (FC2's, 512 wide): their own kernel; TE's norm
    # computed the amax as it wrote (v2.7+), so its output is read once (test_llm_fp8_norm_output.py)
    assert current["fwd.l0.mb0.qkv.fp8_cast"] == current["fwd.l0.mb0.fc1.fp8_cast"] == N * 256 * (2 + 2)
    assert current["fwd.l0.mb0.fc2.fp8_cast"] == N * 512 * (2 * 2 + 2)
    assert "fwd.l0.mb0.qkv.fp8_cast" not in delayed  # delayed: cast inside the LayerNorm
    # delayed scaling transposes those for the weight gradients; current scaling made the transposes with the cast
    assert delayed["bwd.l0.mb0.qkv.wgrad.fp8_transpose"] == 2 * N * 256
    assert not [label for label in current if label.endswith(".fp8_transpose")]
    # and keeps no amax history
    assert [label for label in delayed if label.endswith("amax_update")]
    assert not [label for label in current if label.endswith("amax_update")]


def test_current_scaling_needs_fp8_gemms():
    with pytest.raises(ConfigError, match="--fp8-recipe current needs --gemm-dtype fp8"):
        generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, fp8_recipe="current"), "/nonexistent/x")
