"""Reading ops from PyTorch-converter IOInfo strings: GEMMs, attention, memory-bound and no-work ops."""

from __future__ import annotations

import pytest

from astra_gpu_model.ops import OpError, classify

BF = "'Tensor(c10::BFloat16)'"
HALF = "'Tensor(c10::Half)'"
FP32 = "'Tensor(float)'"
T = "[1, 2, 0, 8, 2, 'cuda:0']"  # a tensor in inputs.values


def op(name, shapes, types="", values=""):
    return classify(name, shapes, types, values)


@pytest.mark.parametrize("name, shapes, types, expect", [
    ("aten::mm", "[[4096, 8192], [8192, 1024]]", f"[{BF}, {BF}]", (4096, 1024, 8192, 1, "bf16")),
    ("aten::mm.default", "[[64, 32], [32, 16]]", f"[{HALF}, {HALF}]", (64, 16, 32, 1, "fp16")),
    ("aten::addmm", "[[1024], [4096, 8192], [8192, 1024], [], []]", f"[{BF}, {BF}, {BF}, 'Int', 'Int']",
     (4096, 1024, 8192, 1, "bf16")),
    ("aten::bmm", "[[32, 128, 64], [32, 64, 256]]", f"[{FP32}, {FP32}]", (128, 256, 64, 32, "fp32")),
    ("aten::baddbmm", "[[32, 128, 256], [32, 128, 64], [32, 64, 256], [], []]", f"[{BF}, {BF}, {BF}, 'Int', 'Int']",
     (128, 256, 64, 32, "bf16")),
    ("aten::matmul", "[[8, 16, 128, 64], [8, 16, 64, 128]]", f"[{BF}, {BF}]", (128, 128, 64, 128, "bf16")),
    ("aten::matmul", "[[8, 512, 4096], [4096, 4096]]", f"[{BF}, {BF}]", (512, 4096, 4096, 8, "bf16")),
    ("aten::linear", "[[8, 512, 4096], [11008, 4096], [11008]]", f"[{BF}, {BF}, {BF}]", (4096, 11008, 4096, 1, "bf16")),
    ("aten::linear", "[[4096, 4096], [1024, 4096], []]", f"[{BF}, {BF}, 'None']", (4096, 1024, 4096, 1, "bf16")),
    ("aten::mv", "[[4096, 8192], [8192]]", f"[{BF}, {BF}]", (4096, 1, 8192, 1, "bf16")),
    ("aten::_scaled_mm", "[[4096, 8192], [8192, 4096], [], []]",
     "['Tensor(c10::Float8_e4m3fn)', 'Tensor(c10::Float8_e4m3fn)', 'Tensor(float)', 'Tensor(float)']",
     (4096, 4096, 8192, 1, "fp8")),
    # no types at all (e.g. hand-written traces): non-empty int lists are tensors of the default dtype
    ("aten::mm", "[[256, 512], [512, 128]]", "", (256, 128, 512, 1, "bf16")),
])
def test_gemm_shapes(name, shapes, types, expect):
    o = op(name, shapes, types)
    assert o.kind == "gemm"
    assert (o.m, o.n, o.k, o.batch, o.dtype) == expect


E4M3, E5M2 = "'Tensor(c10::Float8_e4m3fn)'", "'Tensor(c10::Float8_e5m2)'"


@pytest.mark.parametrize("name, shapes, types, out_bytes", [
    # a weight gradient accumulated into an fp32 main_grad (cuBLAS beta = 1): C read and D written, 4 + 4 B
    ("aten::addmm", "[[1024, 4096], [1024, 8192], [8192, 4096]]", f"[{FP32}, {BF}, {BF}]", 8),
    ("aten::_scaled_mm", "[[1024, 8192], [8192, 4096], [], [], [1024, 4096]]",
     f"[{E4M3}, {E5M2}, {FP32}, {FP32}, {FP32}]", 8),
    # the first micro-batch writes main_grad without reading it: D listed last, 4 B
    ("aten::mm", "[[1024, 8192], [8192, 4096], [1024, 4096]]", f"[{BF}, {BF}, {FP32}]", 4),
    ("aten::_scaled_mm", "[[1024, 8192], [8192, 4096], [], [], [], [1024, 4096]]",
     f"[{E4M3}, {E5M2}, {FP32}, {FP32}, 'None', {FP32}]", 4),
    # as before: a bias vector, no buffer, FP8's bf16 output
    ("aten::addmm", "[[4096], [1024, 8192], [8192, 4096]]", f"[{BF}, {BF}, {BF}]", 2),
    ("aten::mm", "[[1024, 8192], [8192, 4096]]", f"[{BF}, {BF}]", 2),
    ("aten::_scaled_mm", "[[1024, 8192], [8192, 4096], [], []]", f"[{E4M3}, {E5M2}, {FP32}, {FP32}]", 2),
])
def test_gemm_output_buffer_bytes(name, shapes, types, out_bytes):
    o = op(name, shapes, types)
    assert (o.kind, o.m, o.n, o.k, o.out_bytes) == ("gemm", 1024, 4096, 8192, out_bytes)


def test_convolution_is_an_implicit_gemm():
    o = op("aten::convolution", "[[32, 64, 56, 56], [128, 64, 3, 3], [128], [[], []], [[], []], [[], []], [], "
           "[[], []], []]", f"[{HALF}, {HALF}, {HALF}, 'GenericList[Int,Int]', 'GenericList[Int,Int]', "
           "'GenericList[Int,Int]', 'Bool', 'GenericList[Int,Int]', 'Int']",
           f"[{T}, {T}, {T}, [1, 1], [1, 1], [1, 1], False, [0, 0], 1]")
    assert (o.kind, o.m, o.n, o.k, o.batch) == ("gemm", 32 * 56 * 56, 128, 64 * 9, 1)


def test_flash_attention_flops_and_causality():
    shapes = "[[4, 32, 2048, 128], [4, 32, 2048, 128], [4, 32, 2048, 128], [], [], [], []]"
    types = f"[{BF}, {BF}, {BF}, 'Double', 'Bool', 'Bool', 'None']"
    full = op("aten::_scaled_dot_product_flash_attention", shapes, types, f"[{T}, {T}, {T}, 0.0, False, False, '<None>']")
    causal = op("aten::_scaled_dot_product_flash_attention", shapes, types, f"[{T}, {T}, {T}, 0.0, True, False, '<None>']")
    assert full.kind == "attention" and full.dtype == "bf16"
    assert full.flops == 4 * 4 * 32 * 2048 * 2048 * 128
    assert causal.flops == pytest.approx(full.flops / 2, rel=1e-3)
    assert full.nbytes == 4 * (4 * 32 * 2048 * 128) * 2  # q, k, v, out
    assert full.ctas == 4 * 32 * 16
    # grouped-query attention: fewer key/value heads
    gqa = op("aten::_scaled_dot_product_flash_attention",
             "[[1, 32, 1024, 128], [1, 8, 1024, 128], [1, 8, 1024, 128], [], [], [], []]", types)
    assert gqa.flops == 4 * 32 * 1024 * 1024 * 128
    back = op("aten::_scaled_dot_product_flash_attention_backward",
              "[[4, 32, 2048, 128], [4, 32, 2048, 128], [4, 32, 2048, 128], [4, 32, 2048, 128], "
              "[4, 32, 2048, 128], [4, 32, 2048]]", f"[{BF}, {BF}, {BF}, {BF}, {BF}, {FP32}]")
    assert back.flops == pytest.approx(2.5 * full.flops)
    bshd = op("aten::_flash_attention_forward", "[[4, 2048, 32, 128], [4, 2048, 32, 128], [4, 2048, 32, 128]]",
              f"[{BF}, {BF}, {BF}]")
    assert bshd.flops == full.flops


@pytest.mark.parametrize("name, shapes, types, nbytes", [
    ("aten::add", "[[4096, 1024], [4096, 1024], []]", f"[{BF}, {BF}, 'Int']", 3 * 4096 * 1024 * 2),
    ("aten::add", "[[4096, 1024], [1024], []]", f"[{BF}, {BF}, 'Int']", (2 * 4096 * 1024 + 1024) * 2),
    ("aten::add_", "[[4096, 1024], [4096, 1024], []]", f"[{BF}, {BF}, 'Int']", 3 * 4096 * 1024 * 2),
    ("aten::mul", "[[4096, 1024], []]", f"[{FP32}, 'Double']", 2 * 4096 * 1024 * 4),
    ("aten::gelu", "[[8, 512, 4096], []]", f"[{BF}, 'String']", 2 * 8 * 512 * 4096 * 2),
    ("aten::native_layer_norm", "[[8, 512, 4096], [[]], [4096], [4096], []]",
     f"[{BF}, 'GenericList[Int]', {BF}, {BF}, 'Double']", (2 * 8 * 512 * 4096 + 2 * 4096) * 2),
    # Transformer Engine's norm with an FP8 output (the last tensor, the input's shape): read x, w, b, write 1 B
    ("aten::native_layer_norm", "[[8192, 4096], [4096], [4096], [8192, 4096]]",
     f"[{BF}, {BF}, {BF}, 'Tensor(c10::Float8_e4m3fn)']", 8192 * 4096 * 2 + 2 * 4096 * 2 + 8192 * 4096 * 1),
    ("aten::_fused_rms_norm", "[[8192, 4096], [4096], [8192, 4096]]",
     f"[{BF}, {BF}, 'Tensor(c10::Float8_e4m3fn)']", 8192 * 4096 * 2 + 4096 * 2 + 8192 * 4096),
    ("aten::_fused_rms_norm", "[[8192, 4096], [4096]]", f"[{BF}, {BF}]", 2 * 8192 * 4096 * 2 + 4096 * 2),
    ("aten::sum", "[[4096, 1024], [[]], [], []]", f"[{FP32}, 'GenericList[Int]', 'Bool', 'None']", 4096 * 1024 * 4),
    ("aten::copy_", "[[1024, 1024], [1024, 1024], []]", f"[{BF}, {FP32}, 'Bool']", 1024 * 1024 * (2 + 4)),
    ("aten::fill_", "[[1024, 1024], []]", f"[{BF}, 'Double']", 1024 * 1024 * 2),
    ("aten::cat", "[[[64, 128], [64, 128]], []]", "['GenericList[Tensor(c10::BFloat16),Tensor(c10::BFloat16)]', 'Int']",
     4 * 64 * 128 * 2),
    ("aten::embedding", "[[32000, 4096], [8, 512]]", f"[{BF}, 'Tensor(long int)']",
     8 * 512 * 8 + 2 * 8 * 512 * 4096 * 2),
])
def test_memory_bound_bytes(name, shapes, types, nbytes):
    o = op(name, shapes, types)
    assert o.kind == "memory"
    assert o.nbytes == nbytes


def test_views_do_no_gpu_work_unless_a_kernel_ran_under_them():
    assert op("aten::view", "[[4096, 1024], [[], []]]", f"[{BF}, 'GenericList[Int,Int]']").kind == "none"
    assert op("aten::empty", "", "").kind == "none"
    launched = classify("aten::to", "[[1024, 1024], [], [], [], []]", f"[{FP32}, 'Int', 'Bool', 'Bool', 'None']",
                        "", launched_kernel=True)
    assert launched.kind == "memory" and launched.nbytes == 2 * 1024 * 1024 * 4


@pytest.mark.parametrize("name, shapes, types, message", [
    ("aten::mm", "", "", "no input shapes"),
    ("aten::mm", "[[4, 8]", "", "not a Python literal"),
    ("aten::mm", "[[4, 8], [9, 2]]", "", "inner dimensions differ"),
    ("aten::mm", "[[4, 8]]", "", "needs two tensor operands"),
    ("aten::_scaled_dot_product_flash_attention", "[[4, 8, 16], [4, 8, 16], [4, 8, 16]]", "", "must be 4-D"),
    ("aten::add", "[[], []]", "['Int', 'Int']", "no tensor arguments"),
    ("sm90_xmma_gemm_bf16", "[[1, 2]]", "", "not an ATen op"),
])
def test_unusable_shapes_raise(name, shapes, types, message):
    with pytest.raises(OpError, match=message):
        op(name, shapes, types)
