"""Megatron-Core's fused SwiGLU for the dense gated FFN (``bias_swiglu_fusion``, on by default; issue 36):
NVIDIA/Megatron-LM core_r0.14.0 (32ad5c89) ``megatron/training/arguments.py`` (``--no-bias-swiglu-fusion`` is
``store_false``), ``megatron/core/transformer/mlp.py`` (``MLP.forward``: ``bias_swiglu_impl`` when
``bias_activation_fusion``, else ``glu()``: ``torch.chunk``, SiLU, product) and
``megatron/core/fusions/fused_bias_swiglu.py`` (``swiglu`` / ``swiglu_back``: one compiled kernel each way;
``SwiGLUFunction`` keeps its input in FP8 with ``fp8_input_store``). Checked on a small hand-computed case."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# a dense Llama-like model: 128 tokens a micro-batch (micro-batch 1, sequence 128), FFN 512 (fc1 writes 2 x 512)
DENSE = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128, ffn_hidden=512, gated=True)
ROWS, COLS = 128, 512
U = ROWS * COLS * 2  # one [128, 512] bf16 tensor: 131,072 B


def _act(items):
    return [(name, n) for name, n in items if name.startswith("fc1.") and not any(
        k in name for k in ("dgrad", "wgrad", "fp8_cast", "fp8_transpose"))]


@pytest.fixture
def gen(tmp_path, layer_nodes):
    """``gen(**cfg)``: DENSE generated with ``cfg`` (DP 1 unless given); (forward, backward) of layer 0."""
    def _gen(**cfg):
        cfg.setdefault("dp", 1)
        generate_llm(model_dims(**DENSE), LlmConfig(**cfg), tmp_path / "w")
        return layer_nodes(tmp_path / "w", "fwd"), layer_nodes(tmp_path / "w", "bwd")
    return _gen


def test_megatron_default_is_one_kernel_each_way(gpu_bytes, gen):
    """Forward: swiglu(y) reads the two [128, 512] halves and writes [128, 512]: 3 x 131,072 = 393,216 B (the
    unfused SiLU and product moved 5 x 131,072). Backward: swiglu_back(g, y) reads the [128, 512] gradient and the
    [128, 1,024] input and writes the [128, 1,024] gradient: 5 x 131,072 = 655,360 B (unfused: 9 x 131,072)."""
    fwd, bwd = gen()
    f, b = _act(fwd), _act(bwd)
    assert [name for name, _ in f] == ["fc1.swiglu"]
    assert [name for name, _ in b] == ["fc1.swiglu.bwd"]
    assert gpu_bytes(f[0][1]) == 3 * U == 393_216
    assert gpu_bytes(b[0][1]) == 5 * U == 655_360
    names = [name for name, _ in fwd]  # between fc1's GEMM and fc2's
    assert names.index("fc1") < names.index("fc1.swiglu") < names.index("fc2")
    names = [name for name, _ in bwd]  # between fc2's weight gradient and fc1's data gradient
    assert names.index("fc2.wgrad") < names.index("fc1.swiglu.bwd") < names.index("fc1.dgrad")


def test_no_bias_swiglu_fusion_is_megatrons_glu(gpu_bytes, gen):
    """--no-bias-swiglu-fusion: glu()'s SiLU (2 x 131,072 B) and product (3 x), and in backward the product's two
    gradients, silu_backward (3 x each) and the chunk's cat of the two halves' gradients (read 2, write 2: 4 x)."""
    fwd, bwd = gen(bias_swiglu_fusion=False)
    f, b = _act(fwd), _act(bwd)
    assert [name for name, _ in f] == ["fc1.silu", "fc1.mul"]
    assert [gpu_bytes(n) for _, n in f] == [2 * U, 3 * U]
    assert [name for name, _ in b] == ["fc1.mul.dup", "fc1.mul.dgate", "fc1.silu", "fc1.chunk.bwd"]
    assert [gpu_bytes(n) for _, n in b] == [3 * U, 3 * U, 3 * U, 4 * U]


def test_other_frameworks_keep_silu_and_product(gen):
    """torchtitan (FSDP2) runs F.silu(w1(x)) * w3(x): two kernels forward, three backward, no cat (two GEMMs)."""
    fwd, bwd = gen(framework="fsdp2", zero=3, dp=2)
    assert [name for name, _ in _act(fwd)] == ["fc1.silu", "fc1.mul"]
    assert [name for name, _ in _act(bwd)] == ["fc1.mul.dup", "fc1.mul.dgate", "fc1.silu"]


def test_full_recompute_reruns_the_fused_kernel(tmp_path, layer_nodes):
    generate_llm(model_dims(**DENSE), LlmConfig(dp=1, recompute=True), tmp_path / "w")
    rec = [name for name, _ in layer_nodes(tmp_path / "w", "recompute")]
    assert "fc1.swiglu" in rec and "fc1.silu" not in rec


def test_fp8_input_store_casts_around_the_fused_kernel(gpu_bytes, gen):
    """--fp8-activation-input (activation_func_fp8_input_store): SwiGLUFunction.forward keeps
    input.to(float8_e4m3fn), [128, 1,024] read in bf16 and written in FP8: 128 x 1,024 x 3 = 393,216 B, before the
    fused kernel; its backward casts it back (the same bytes) before swiglu_back."""
    fwd, bwd = gen(gemm_dtype="fp8", fp8_activation_input=True)
    f, b = _act(fwd), _act(bwd)
    assert [name for name, _ in f] == ["fc1.swiglu.fp8_store", "fc1.swiglu"]
    assert [name for name, _ in b] == ["fc1.swiglu.fp8_load", "fc1.swiglu.bwd"]
    assert gpu_bytes(f[0][1]) == gpu_bytes(b[0][1]) == ROWS * 2 * COLS * 3 == 393_216
    assert gpu_bytes(f[1][1]) == 3 * U and gpu_bytes(b[1][1]) == 5 * U


def test_the_flag_is_megatrons(tmp_path):
    with pytest.raises(ConfigError, match="no-bias-swiglu-fusion"):
        generate_llm(model_dims(**DENSE), LlmConfig(framework="fsdp2", zero=3, dp=2, bias_swiglu_fusion=False),
                     tmp_path / "a")
    with pytest.raises(ConfigError, match="fp8-activation-input"):
        generate_llm(model_dims(**DENSE), LlmConfig(dp=1, gemm_dtype="fp8", fp8_activation_input=True,
                                                    bias_swiglu_fusion=False), tmp_path / "b")
