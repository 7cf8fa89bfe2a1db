"""BF16 attention on Hopper by head dimension: the FlashAttention-3 paper's rows at head dims 64 and 256
(arXiv:2407.08608 v2, Fig. 5(a),(b),(e),(f), Fig. 6(a); data/published_attention_hopper_head_dim.csv) reproduce its bar
labels, other head dimensions interpolate between them by hand, and the head-dim-128 path is the one it was."""

from __future__ import annotations

import math

import pytest

from astra_gpu_model.attention import (KERNELS, MEASURED_TFLOPS, SEQ_LENS, effective_head_dim, kernel_tflops,
                                      measured_by_head_dim)
from astra_gpu_model.model import GpuComputeModel
from astra_sim.chakra import make_node, types as T

BF = "'Tensor(c10::BFloat16)'"

#: a few labels typed again from the transcriptions (not from the CSV): (kernel, backward, causal, head dim, length)
LABELS = {
    ("fa2", False, False, 64, 8192): 322,  # Fig. 5(a), 55f47a10...
    ("fa3", False, False, 64, 16384): 497,
    ("cudnn", False, False, 64, 512): 335,
    ("fa2", False, True, 64, 512): 180,  # Fig. 5(b), 9b7cf01f...
    ("fa3", False, True, 64, 2048): 371,
    ("cudnn", False, True, 64, 8192): 379,
    ("fa2", False, False, 256, 8192): 324,  # Fig. 5(e), 72bb6693...
    ("fa3", False, False, 256, 1024): 639,
    ("cudnn", False, False, 256, 4096): 581,
    ("fa2", False, True, 256, 16384): 298,  # Fig. 5(f), 662fef77...
    ("fa3", False, True, 256, 4096): 612,
    ("cudnn", False, True, 256, 512): 308,
    ("fa2", True, False, 64, 4096): 279,  # Fig. 6(a), 40bf2854...
    ("fa3", True, False, 64, 8192): 472,
    ("cudnn", True, False, 64, 16384): 433,
}


def test_every_measured_bar_is_reproduced_exactly():
    table = measured_by_head_dim()
    assert len(table) == 9 and all(sorted(table[(k, False, c)]) == [64, 128, 256] for k in KERNELS for c in (0, 1))
    assert all(sorted(table[(k, True, False)]) == [64, 128] for k in KERNELS)
    for (kernel, backward, causal), rows in table.items():
        for head_dim, bars in rows.items():
            assert [kernel_tflops(kernel, backward, causal, s, head_dim) for s in SEQ_LENS] == list(bars)
    for (kernel, backward, causal, head_dim, length), label in LABELS.items():
        assert kernel_tflops(kernel, backward, causal, length, head_dim) == label
    # the 128 rows are the module's own, untouched
    assert all(table[key][128] is row for key, row in MEASURED_TFLOPS.items())


def test_between_and_beyond_the_measured_head_dims_by_hand():
    # 96 (the SC'21 GPT rows): halfway between 64 and 128
    assert kernel_tflops("fa2", False, False, 8192, 96) == pytest.approx((322 + 370) / 2)
    assert kernel_tflops("cudnn", False, True, 2048, 96) == pytest.approx((334 + 484) / 2)
    assert kernel_tflops("fa3", True, False, 1024, 96) == pytest.approx((363 + 424) / 2)
    # 192 (q/k and v both 192): halfway between 128 and 256
    assert kernel_tflops("fa3", False, False, 8192, 192) == pytest.approx((646 + 746) / 2)
    assert kernel_tflops("cudnn", False, True, 16384, 192) == pytest.approx((539 + 509) / 2)
    # MLA: 192 q/k, 128 v -> looked up at 160, a quarter of the way from 128 to 256
    assert effective_head_dim(192, 128) == 160 and effective_head_dim(64) == 64 and effective_head_dim(0) == 128
    assert kernel_tflops("fa3", False, False, 8192, 160) == pytest.approx(646 + (746 - 646) / 4)
    # the backward above 128 keeps the 128 rows (no head-dim-256 backward panel); below 64, the 64 rows
    assert kernel_tflops("fa3", True, False, 8192, 256) == 559
    assert kernel_tflops("fa3", True, False, 8192, 160) == 559
    assert kernel_tflops("fa2", False, True, 4096, 32) == 284
    assert kernel_tflops("cudnn", False, False, 4096, 512) == 581
    # between lengths and head dims both: log2 length first (3k: 0.585 of 2k->4k), then the head dim
    t = math.log2(3072) - 11
    at64, at128 = 395 + t * (408 - 395), 617 + t * (609 - 617)
    assert kernel_tflops("cudnn", False, False, 3072, 96) == pytest.approx((at64 + at128) / 2)


def test_the_causal_backward_assumption_is_kept_per_head_dim():
    # backward x causal forward / forward, each at the op's head dim: FA2 at 8k, head dim 64 -> 287 x 295 / 322
    assert kernel_tflops("fa2", True, True, 8192, 64) == pytest.approx(287 * 295 / 322)
    assert kernel_tflops("fa2", True, True, 8192, 128) == pytest.approx(318 * 333 / 370)
    assert kernel_tflops("cudnn", True, True, 8192, 96) == pytest.approx((432 * 379 / 412 + 518 * 529 / 600) / 2)
    # above 128 the backward's 128 row with 128's mask share
    assert kernel_tflops("fa3", True, True, 8192, 256) == pytest.approx(559 * 602 / 646)


def _node(b, h, s, d, dv, kernel, causal=True):
    """A bf16 SDPA flash node with values ``dv`` wide (MLA)."""
    shapes = f"[[{b}, {h}, {s}, {d}], [{b}, {h}, {s}, {d}], [{b}, {h}, {s}, {dv}]]"
    return make_node(0, "aten::_scaled_dot_product_flash_attention", T.COMP_NODE,
                     attrs={"is_cpu_op": False, "inputs_shapes": shapes, "inputs_types": f"[{BF}, {BF}, {BF}]",
                            "inputs_values": f"[[], [], [], 0.0, {causal}, False]", "attention_kernel": kernel})


def test_an_h100_times_a_node_at_its_head_dims_rate():
    """GPT-OSS's 64-wide heads under cuDNN (b 2, 64 heads, 4k causal: 2 x 64 x 32 = 4096 blocks, 0.9697 utilisation
    like the paper's) at Fig. 5(b)'s 363 TFLOP/s; MLA's 192/128 heads under FA3 at the 160 lookup."""
    model = GpuComputeModel(None, "H100")
    launch = model.gpu.gemm.launch_us * 1e-6
    pairs = 4096 * 4097 // 2
    flops = 2 * 2 * 64 * pairs * (64 + 64)
    assert model.compute_time_ns(_node(2, 64, 4096, 64, 64, "cudnn"), 0) == math.ceil((launch + flops / 363e12) * 1e9)
    flops = 2 * 2 * 64 * pairs * (192 + 128)
    rate = (579 + (612 - 579) / 4) * 1e12
    assert model.compute_time_ns(_node(2, 64, 4096, 192, 128, "fa3"), 0) == math.ceil((launch + flops / rate) * 1e9)
