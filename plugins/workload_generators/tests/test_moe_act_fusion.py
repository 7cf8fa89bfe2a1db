"""``--bias-activation-fusion``: the routed experts' activation as Megatron-Core's ``TEGroupedMLP`` runs it with
``bias_activation_fusion`` (issue 36; NVIDIA/Megatron-LM 2a75ac12 ``megatron/core/transformer/moe/experts.py``,
``megatron/core/fusions/fused_bias_swiglu.py`` and ``fused_bias_geglu.py``): one compiled kernel each way with the
routing probabilities in it (``weighted_bias_swiglu_impl``), and for GPT-OSS's clamped quick-GeGLU
(``weighted_bias_quick_geglu_impl`` with ``activation_func_clamp_value``) the two clamps and their cat before it,
and their backward. Checked on a small hand-computed case."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.hf import load_hf_config

# 8 experts over EP 2 (4 local), top-2, 128 tokens: 256 token copies per rank; expert FFN 512 (fc1 writes 2 x 512)
MOE = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128, experts=8, top_k=2, moe_ffn=512, gated=True)
ROWS, COLS = 256, 512
U = ROWS * COLS * 2  # one [256, 512] bf16 half: 262,144 B
PROBS = ROWS * 2     # the [256, 1] bf16 probabilities: 512 B
FUSED = dict(dp=2, ep=2, bias_activation_fusion=True)


def _act(items):
    return [(name, n) for name, n in items if ".act" in name]


def test_the_default_keeps_silu_and_product(tmp_path, layer_nodes):
    generate_llm(model_dims(**MOE), LlmConfig(dp=2, ep=2), tmp_path / "w")
    fwd = [name for name, _ in layer_nodes(tmp_path / "w", "fwd")]
    assert "experts.fc1.silu" in fwd and "experts.fc1.mul" in fwd
    assert not any(".act" in name for name in fwd + [name for name, _ in layer_nodes(tmp_path / "w", "bwd")])


def test_swiglu_is_one_kernel_each_way(tmp_path, layer_nodes, gpu_bytes):
    """Qwen3's case (no clamp): forward reads both [256, 512] halves and the probabilities, writes [256, 512]:
    3 x 262,144 + 512 = 786,944 B, between fc1 and fc2; backward (weighted_swiglu_back) reads the [256, 512]
    gradient, the [256, 1,024] input and the probabilities and writes the [256, 1,024] input gradient:
    5 x 262,144 + 512 = 1,311,232 B, between fc2's weight gradient and fc1's data gradient."""
    generate_llm(model_dims(**MOE), LlmConfig(**FUSED), tmp_path / "w")
    fwd, bwd = layer_nodes(tmp_path / "w", "fwd"), layer_nodes(tmp_path / "w", "bwd")
    names = [name for name, _ in fwd]
    assert "experts.fc1.silu" not in names and "experts.fc1.mul" not in names
    act = _act(fwd)
    assert [name for name, _ in act] == ["experts.fc1.act.fused"]
    assert names.index("experts.fc1") < names.index("experts.fc1.act.fused") < names.index("experts.fc2")
    node = act[0][1]
    assert node.attrs["tensor_size"] == gpu_bytes(node) == 3 * U + PROBS == 786_944
    back = _act(bwd)
    assert [name for name, _ in back] == ["experts.fc1.act.fused.bwd"]
    bnames = [name for name, _ in bwd]
    assert bnames.index("experts.fc2.wgrad") < bnames.index("experts.fc1.act.fused.bwd") \
        < bnames.index("experts.fc1.dgrad")
    assert not any(name.startswith("experts.fc1.") and name.split(".")[2] in ("silu", "mul") for name in bnames)
    node = back[0][1]
    assert node.attrs["tensor_size"] == gpu_bytes(node) == 5 * U + PROBS == 1_311_232


def test_clamped_quick_geglu_forward_and_backward_by_hand(tmp_path, layer_nodes, gpu_bytes):
    """GPT-OSS (glu_clamp): forward x_glu.clamp and x_linear.clamp (read and write one half: 2 x 262,144 B
    each), their cat (read and write both: 4 x 262,144 B), then the fused kernel (786,944 B). Backward: the fused
    kernel (1,311,232 B); the gate half's clamp backward, where(x <= 7, grad, 0): the comparison (counted as
    read + write of one half, 524,288 B) and where on the bool mask and the gradient (65,536 + 262,144 read,
    counted written at the mask's 131,072: 524,288 B); the linear half's: two comparisons (524,288 B each),
    logical_and_ of the two masks in place (3 x 131,072 = 393,216 B) and where (524,288 B); chunk's backward, the
    cat of the halves' gradients (1,048,576 B)."""
    generate_llm(model_dims(**MOE, glu_clamp=True), LlmConfig(**FUSED), tmp_path / "w")
    act = _act(layer_nodes(tmp_path / "w", "fwd"))
    assert [(name, n.name) for name, n in act] == [
        ("experts.fc1.act.clamp.glu", "aten::clamp"), ("experts.fc1.act.clamp.linear", "aten::clamp"),
        ("experts.fc1.act.cat", "aten::cat"), ("experts.fc1.act.fused", "aten::mul")]
    assert [n.attrs["tensor_size"] for _, n in act] == [gpu_bytes(n) for _, n in act] == [
        2 * U, 2 * U, 4 * U, 3 * U + PROBS]
    back = _act(layer_nodes(tmp_path / "w", "bwd"))
    assert [(name, n.name) for name, n in back] == [
        ("experts.fc1.act.fused.bwd", "aten::mul"),
        ("experts.fc1.act.clamp.glu.mask", "aten::le"), ("experts.fc1.act.clamp.glu.bwd", "aten::where"),
        ("experts.fc1.act.clamp.linear.mask_lo", "aten::ge"), ("experts.fc1.act.clamp.linear.mask_hi", "aten::le"),
        ("experts.fc1.act.clamp.linear.mask", "aten::logical_and_"),
        ("experts.fc1.act.clamp.linear.bwd", "aten::where"), ("experts.fc1.act.chunk.bwd", "aten::cat")]
    assert [n.attrs["tensor_size"] for _, n in back] == [gpu_bytes(n) for _, n in back] == [
        5 * U + PROBS, 2 * U, 2 * U, 2 * U, 2 * U, 3 * U // 2, 2 * U, 4 * U]


def test_moe_act_recompute_reruns_the_fused_forward(tmp_path, layer_nodes):
    """--recompute-modules moe_act: the four forward kernels again before fc2's data gradient, not SiLU x up."""
    generate_llm(model_dims(**MOE, glu_clamp=True), LlmConfig(**FUSED, recompute_modules=("moe_act",)),
                 tmp_path / "w")
    bwd = layer_nodes(tmp_path / "w", "bwd")
    names = [name for name, _ in bwd]
    rec = [name for name in names if ".recompute" in name and name.startswith("experts.")]
    assert rec == ["experts.fc1.recompute.act.clamp.glu", "experts.fc1.recompute.act.clamp.linear",
                   "experts.fc1.recompute.act.cat", "experts.fc1.recompute.act.fused"]
    assert names.index(rec[-1]) < names.index("experts.fc2.dgrad")
    node = dict(bwd)["experts.fc1.recompute.act.fused"]
    assert node.attrs["tensor_size"] == 3 * U + PROBS


def test_fp32_router_probabilities_in_the_fused_kernel(tmp_path, layer_nodes, gpu_bytes):
    """With --moe-router-dtype fp32 the probabilities are [256, 1] fp32: 1,024 B in the fused kernels."""
    generate_llm(model_dims(**MOE), LlmConfig(**FUSED, moe_router_dtype="fp32"), tmp_path / "w")
    node = dict(layer_nodes(tmp_path / "w", "fwd"))["experts.fc1.act.fused"]
    assert node.attrs["tensor_size"] == gpu_bytes(node) == 3 * U + ROWS * 4


def test_gpt_oss_config_clamps_and_qwen3_does_not():
    assert load_hf_config("gpt-oss-120b")[0]["glu_clamp"] is True
    assert "glu_clamp" not in load_hf_config("qwen3-30b-a3b")[0]


def test_fusion_needs_gated_experts():
    dense = {k: v for k, v in MOE.items() if k not in ("experts", "top_k", "moe_ffn")}
    with pytest.raises(ConfigError, match="bias-activation-fusion"):
        generate_llm(model_dims(**dense), LlmConfig(bias_activation_fusion=True), "unused")
    with pytest.raises(ConfigError, match="bias-activation-fusion"):
        generate_llm(model_dims(**{**MOE, "gated": False}), LlmConfig(**FUSED), "unused")


def test_the_flag_reaches_the_config():
    from astra_workload_generators.llm import LlmSpec

    spec = LlmSpec.from_mapping({"preset": None, **MOE, "dp": 2, "ep": 2, "bias_activation_fusion": True})
    assert spec.resolve()[1].bias_activation_fusion is True
    assert LlmSpec.from_mapping({"preset": None, **MOE}).resolve()[1].bias_activation_fusion is False
