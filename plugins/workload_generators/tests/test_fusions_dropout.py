"""Megatron's fused bias-dropout-add (``bias_dropout_fusion``, on by default; issue 36): NVIDIA/Megatron-LM
core_r0.14.0 (32ad5c89) ``megatron/training/arguments.py`` (``--no-bias-dropout-fusion`` is ``store_false``) and
``megatron/core/fusions/fused_bias_dropout.py`` (``bias_dropout_add_fused_train``: ``x + bias``, dropout and the
residual add in one ``jit_fuser`` function). Checked on a small hand-computed case."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes
from astra_gpu_model.ops import classify

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# a GPT-like model (GeLU FFN, biases): 128 tokens a micro-batch, hidden 256
GPT = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128)
X = 128 * 256 * 2  # one [128, 256] bf16 tensor: 65,536 B


def _fwd(tmp_path, **cfg):
    generate_llm(model_dims(**GPT), LlmConfig(**cfg), tmp_path / "w")
    out = {}
    for n in read_rank_nodes(tmp_path / "w", 0):
        label = n.attrs.get("label") or n.name
        if label.startswith("fwd.l0.mb0.attn_out.") or label.startswith("fwd.l0.mb0.mlp_out."):
            out[label.removeprefix("fwd.l0.mb0.")] = n
    return out


def _gpu_bytes(node):
    return classify(node.name, node.inputs_shapes, node.inputs_types, node.inputs_values).nbytes


def test_megatron_fuses_bias_dropout_and_residual_add(tmp_path):
    """One kernel per residual add: reads the branch output and the residual (2 x 65,536 B), the [256] bias (512 B)
    and writes the sum (65,536 B) and the bool mask (128 x 256 = 32,768 B): 229,888 B. Unfused (native_dropout,
    then add_) it moved 2 x 65,536 + 3 x 65,536 + 512 = 328,192 B in two kernels."""
    fwd = _fwd(tmp_path, dp=1)
    for branch in ("attn_out", "mlp_out"):
        assert f"{branch}.dropout" not in fwd
        node = fwd[f"{branch}.residual"]
        assert node.name == "aten::add_"
        assert _gpu_bytes(node) == 3 * X + 512 + 128 * 256 == 229_888


def test_no_bias_dropout_fusion_is_two_kernels(tmp_path):
    """--no-bias-dropout-fusion: native_dropout (reads and writes 65,536 B) then add_ (3 x 65,536 + 512 B)."""
    fwd = _fwd(tmp_path, dp=1, bias_dropout_fusion=False)
    assert _gpu_bytes(fwd["mlp_out.dropout"]) == 2 * X
    assert _gpu_bytes(fwd["mlp_out.residual"]) == 3 * X + 512
    with pytest.raises(ConfigError, match="no-bias-dropout-fusion"):
        _fwd(tmp_path, dp=2, zero=3, framework="fsdp2", bias_dropout_fusion=False)


def test_without_dropout_or_outside_megatron_unchanged(tmp_path):
    fwd = _fwd(tmp_path, dp=1, dropout=False)
    assert "attn_out.dropout" not in fwd and _gpu_bytes(fwd["attn_out.residual"]) == 3 * X + 512
    fwd = _fwd(tmp_path, dp=2, zero=3, framework="fsdp2")  # (torchtitan / eager: native_dropout, then add_)
    assert _gpu_bytes(fwd["attn_out.dropout"]) == 2 * X
    assert _gpu_bytes(fwd["attn_out.residual"]) == 3 * X + 512
