"""``--torch-compile``: torchtitan's ``training.compile`` (pytorch/torchtitan 9dec370 ``parallelize_llama.py``
``apply_compile``: each TransformerBlock compiled with ``fullgraph=True``). Inductor fuses each chain of point-wise
ops between two extern kernels (GEMM, SDPA) into one kernel, so SwiGLU (``F.silu(w1(x)) * w3(x)``) is one kernel each
way; RoPE (``apply_rotary_emb``) keeps its three kernels per tensor, its complex product falling back to ATen. Bytes
by hand on a one-layer Llama (the gpu model's count: every tensor read or written once)."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
N, FF, D = 128, 512, 32  # tokens (one sequence), FFN hidden, head dim


def _sizes(tmp_path, name, **kw):
    cfg = LlmConfig(dp=2, zero=3, framework="fsdp2", micro_batches=1, **kw)
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return {n.attrs["label"]: n.attrs["tensor_size"] for n in read_rank_nodes(tmp_path / name, 0)
            if "tensor_size" in n.attrs and "label" in n.attrs}


def test_compiled_swiglu_is_one_kernel_each_way(tmp_path):
    eager, compiled = _sizes(tmp_path, "e"), _sizes(tmp_path, "c", torch_compile=True)
    # eager: silu (read, write) + mul (read 2, write 1) = 5 x N x FF x 2 B = 655,360 forward
    assert eager["fwd.l0.mb0.fc1.silu"] + eager["fwd.l0.mb0.fc1.mul"] == 5 * N * FF * 2 == 655_360
    # eager backward: mul (dup), mul (dgate), silu_backward, each read 2 write 1: 9 x N x FF x 2 = 1,179,648
    assert sum(eager[f"bwd.l0.mb0.fc1.{k}"] for k in ("mul.dup", "mul.dgate", "silu")) == 9 * N * FF * 2
    # compiled forward: read w1's and w3's outputs, write the product: 3 x 128 x 512 x 2 = 393,216
    assert compiled["fwd.l0.mb0.fc1.swiglu"] == 3 * N * FF * 2 == 393_216
    # compiled backward: read the gradient and both outputs, write both gradients: 5 x 128 x 512 x 2 = 655,360
    assert compiled["bwd.l0.mb0.fc1.swiglu.bwd"] == 5 * N * FF * 2 == 655_360
    assert not [k for k in compiled if k.endswith((".fc1.silu", ".fc1.mul", ".fc1.mul.dup"))]


def test_compiled_op_sac_recomputes_the_fused_swiglu(tmp_path):
    compiled = _sizes(tmp_path, "s", torch_compile=True, recompute_selective=True)
    assert compiled["recompute.l0.mb0.fc1.swiglu"] == 393_216  # (as the forward's, by hand above)
    assert "recompute.l0.mb0.fc1.silu" not in compiled


def test_compiled_rope_stays_three_kernels_per_tensor(tmp_path):
    # Inductor generates no code for complex ops (pytorch/torchtitan#15: "Torchinductor does not support code
    # generation for complex operators"): the complex product falls back to ATen, and the casts around it stay apart
    eager, compiled = _sizes(tmp_path, "e"), _sizes(tmp_path, "c", torch_compile=True)
    freqs = N * D * 4  # fp32 (1, s, 1, d): 128 x 32 x 4 = 16,384
    # queries (8 heads): q.float() 2 + 4 B, the complex product 4 + 4 B (+ freqs), .type_as 4 + 2 B an element
    q = N * 8 * D  # 32,768 elements
    for sizes in (eager, compiled):
        assert (sizes["fwd.l0.mb0.rope.q.float"], sizes["fwd.l0.mb0.rope.q.rotate"],
                sizes["fwd.l0.mb0.rope.q.type_as"]) == (6 * q, 8 * q + freqs, 6 * q) == (196_608, 278_528, 196_608)
        assert sizes["bwd.l0.mb0.rope.q.rotate.bwd"] == 278_528


def test_torch_compile_is_torchtitans_and_compiles_the_norm():
    with pytest.raises(ConfigError, match="--torch-compile"):
        generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=1, torch_compile=True), "unused")
    with pytest.raises(ConfigError, match="--norm-kernel composite"):
        generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=3, framework="fsdp2", torch_compile=True,
                                                    norm_kernel="composite"), "unused")
