"""Megatron-Core's dense MLP with Transformer Engine's modules runs its own activation between FC1 and FC2
(``MLP.forward``: ``bias_swiglu_impl`` returns a bf16 tensor), so in FP8 FC2 casts its input in forward and FC1 its
output gradient in backward, one TE cast each (TE ``_Linear.forward``: ``input_quantizer(inputmat)``;
``grad_output_preprocess``). TE's operation fuser (``--te-op-fuser``, MLPerf's USE_TE_OPS) fuses both casts into
the activation: the nodes of before."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

#: one layer, hidden 256, SwiGLU FFN 512 (FC1 writes 2 x 512), 128 tokens a micro-batch
LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
ROWS, FF, F1 = 128, 512, 1024


def _nodes(tmp_path, name, **kw):
    cfg = dict(dp=2, micro_batches=2, zero=1, gemm_dtype="fp8")
    cfg.update(kw)
    generate_llm(model_dims(**LLAMA), LlmConfig(**cfg), tmp_path / name)
    nodes = read_rank_nodes(tmp_path / name, 0)
    return nodes, {n.attrs.get("label"): n for n in nodes}


def test_hopper_delayed_fc2_casts_its_input_and_fc1_its_output_gradient(tmp_path):
    nodes, by = _nodes(tmp_path, "hopper")
    fwd, bwd = by["fwd.l0.mb1.fc2.fp8_cast"], by["bwd.l0.mb1.fc1.dgrad.fp8_cast"]
    # cast + transpose (Hopper's TN layout): read bf16 once, write FP8 and its transpose: 2 + 1 + 1 B an element
    assert fwd.name == bwd.name == "transformer_engine::cast_transpose"
    assert fwd.attrs["tensor_size"] == ROWS * FF * 4 == 262_144
    assert bwd.attrs["tensor_size"] == ROWS * F1 * 4 == 524_288
    # FC2's cast wrote the transpose its weight gradient reads: no separate transpose of the activation
    assert "bwd.l0.mb1.fc2.wgrad.fp8_transpose" not in by
    # each GEMM waits for its cast; the backward cast follows the SwiGLU's backward
    assert fwd.id in by["fwd.l0.mb1.fc2"].data_deps
    assert bwd.id in by["bwd.l0.mb1.fc1.dgrad"].data_deps
    order = [n.attrs.get("label") for n in nodes]
    assert order.index("bwd.l0.mb1.fc1.swiglu.bwd") < order.index("bwd.l0.mb1.fc1.dgrad.fp8_cast")


def test_blackwell_writes_no_transpose_and_current_scaling_reads_twice(tmp_path):
    _, by = _nodes(tmp_path, "blackwell", fp8_transpose=False)
    assert by["fwd.l0.mb0.fc2.fp8_cast"].name == "transformer_engine::quantize"
    assert by["fwd.l0.mb0.fc2.fp8_cast"].attrs["tensor_size"] == ROWS * FF * 3 == 196_608  # 2 read + 1 written
    assert by["bwd.l0.mb0.fc1.dgrad.fp8_cast"].attrs["tensor_size"] == ROWS * F1 * 3 == 393_216
    _, cur = _nodes(tmp_path, "current", fp8_recipe="current")
    # its amax first: 2 x 2 B read, 1 + 1 B written (Hopper)
    assert cur["fwd.l0.mb0.fc2.fp8_cast"].attrs["tensor_size"] == ROWS * FF * 6 == 393_216
    assert cur["bwd.l0.mb0.fc1.dgrad.fp8_cast"].attrs["tensor_size"] == ROWS * F1 * 6 == 786_432


def test_te_op_fuser_keeps_the_casts_inside_the_activation(tmp_path):
    _, by = _nodes(tmp_path, "fuser", te_op_fuser=True)
    assert "fwd.l0.mb0.fc2.fp8_cast" not in by and "bwd.l0.mb0.fc1.dgrad.fp8_cast" not in by
    # delayed scaling on Hopper: the activation's FP8 output is transposed for FC2's weight gradient (1 + 1 B)
    assert by["bwd.l0.mb0.fc2.wgrad.fp8_transpose"].attrs["tensor_size"] == ROWS * FF * 2
    _, bf16 = _nodes(tmp_path, "bf16", gemm_dtype="same")
    assert not [label for label in bf16 if label and "fp8" in label]
    with pytest.raises(ConfigError, match="te-op-fuser"):
        _nodes(tmp_path, "fsdp2", zero=3, framework="fsdp2", te_op_fuser=True)


def test_te_op_fuser_under_current_scaling_casts_once_after_the_activation(tmp_path):
    # TE's activation_helper / dactivation_helper: the activation writes bf16 with its amax fused in, then one cast
    # reads it once: 2 B read, 1 + 1 B written (Hopper), forward (FC2's input) and backward (FC1's output gradient)
    _, by = _nodes(tmp_path, "fuser_current", te_op_fuser=True, fp8_recipe="current")
    assert by["fwd.l0.mb0.fc2.fp8_cast"].attrs["tensor_size"] == ROWS * FF * 4 == 262_144
    assert by["bwd.l0.mb0.fc1.dgrad.fp8_cast"].attrs["tensor_size"] == ROWS * F1 * 4 == 524_288
