"""Attention on Blackwell from NVIDIA's published cuDNN measurements (NVIDIA/cudnn-frontend
benchmark/sdpa_benchmark_training: B200, GB200, GB300; BF16 and FP8, forward and backward, causal, head dim 128), not
Hopper's efficiency: the table as published, and node times by hand."""

from __future__ import annotations

import math

import pytest

from astra_gpu_model.attention import (BLACKWELL_ATTENTION, blackwell_efficiency, blackwell_mask_ratio,
                                      published_attention)
from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GpuComputeModel
from astra_sim_testing import flash_attention_node

BF16 = "'Tensor(c10::BFloat16)'"


def _bench_utilisation(seq, sms):
    """The benchmark's 128 heads x seq/128 blocks of 128 queries, on ``sms`` SMs."""
    ctas = 128 * seq // 128
    return ctas / (-(-ctas // sms) * sms)


def test_the_table_is_nvidias_published_rows():
    table = published_attention(BLACKWELL_ATTENTION)  # causal rows: no mask column
    assert set(table) == {"B200", "GB200", "B300"}
    lengths, fwd = table["B200"][("bf16", True, "fwd")]
    assert lengths == (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
    assert fwd[4] == 1384.231  # sdpa_fp8_benchmark_results_NVIDIA_B200.csv: 8192, bf16, fwd
    assert table["B200"][("fp8", True, "bwd")][1][4] == 1254.687
    assert table["GB200"][("fp8", True, "fwd")][1][4] == 1894.0
    assert table["B300"][("bf16", True, "bwd")][1][4] == 1150.498  # the GB300 rows (HGX B300: an assumption)


def test_bf16_attention_on_b200_by_hand():
    """b 2, 32 heads of 128, 8k keys, causal: cuDNN's measured B200 BF16 forward (1,384.231 TFLOP/s) and backward
    (994.850) over the benchmark's wave utilisation, times the node's own."""
    model = GpuComputeModel(None, "B200")
    gpu = model.gpu
    ctas = 2 * 32 * 64
    utilisation = ctas / (-(-ctas // gpu.sm_count) * gpu.sm_count)
    bench = _bench_utilisation(8192, 148)
    pairs = 8192 * 8192 - 8192 * 8191 / 2
    flops = 2.0 * 2 * 32 * pairs * 256
    launch = gpu.gemm.launch_us * 1e-6
    for backward, tflops in ((False, 1384.231), (True, 994.850)):
        node = flash_attention_node(2, 32, 8192, 128, True, None, backward, BF16)
        work = flops * (2.5 if backward else 1.0)
        expected = math.ceil((launch + work / (tflops * 1e12 / bench * utilisation)) * 1e9)
        assert model.compute_time_ns(node, 0) == expected, backward
    # the measured forward beats the old borrowed Hopper efficiency (0.45) by 1.38x at 8k
    assert blackwell_efficiency(gpu, None, "bf16", False, 8192) == pytest.approx(1384.231 / 2250 / bench)


def test_between_measured_lengths_and_outside_them():
    b200 = load_gpu("B200")
    fwd = published_attention(BLACKWELL_ATTENTION)["B200"][("fp8", True, "fwd")][1]
    # 2^12.5 keys: halfway (in log2) between the 4k and 8k rows
    mid = blackwell_efficiency(b200, "cudnn", "fp8", False, round(2 ** 12.5))
    low = fwd[3] / 4500 / _bench_utilisation(4096, 148)
    high = fwd[4] / 4500 / _bench_utilisation(8192, 148)
    assert min(low, high) * 0.98 < mid < max(low, high) * 1.02
    # below 512 or past 128k: the end rows
    first_bwd = published_attention(BLACKWELL_ATTENTION)["B200"][("fp8", True, "bwd")][1][0]
    assert blackwell_efficiency(b200, None, "fp8", True, 64) == pytest.approx(
        first_bwd / 4500 / _bench_utilisation(512, 148))


def test_where_the_measurements_do_not_apply():
    b200 = load_gpu("B200")
    # FlashAttention-2/3 named on Blackwell: no measurement used, the preset's attention_efficiency stays
    assert blackwell_efficiency(b200, "fa2", "bf16", False, 8192) is None
    model = GpuComputeModel(None, "B200")
    node = flash_attention_node(2, 32, 8192, 128, True, "fa2", False, BF16)
    ctas = 2 * 32 * 64
    utilisation = ctas / (-(-ctas // 148) * 148)
    flops = 2.0 * 2 * 32 * (8192 * 8192 - 8192 * 8191 / 2) * 256
    expected = math.ceil((model.gpu.gemm.launch_us * 1e-6 + flops / (0.45 * 2250e12 * utilisation)) * 1e9)
    assert model.compute_time_ns(node, 0) == expected
    # not Blackwell: none (Hopper has its own published table)
    assert blackwell_efficiency(load_gpu("H100"), None, "bf16", False, 8192) is None


def test_each_blackwell_preset_runs_its_own_rows():
    """GB200's GPU runs its GB200 rows (against its 2,500 / 5,000 TFLOP/s peaks); the B300 preset runs GB300's."""
    gb200 = load_gpu("GB200")
    assert blackwell_efficiency(gb200, None, "fp8", False, 8192) == pytest.approx(
        1894.0 / 5000 / _bench_utilisation(8192, gb200.sm_count))
    b300 = load_gpu("B300")
    assert blackwell_efficiency(b300, None, "bf16", True, 8192) == pytest.approx(
        1150.498 / 2250 / _bench_utilisation(8192, b300.sm_count))


def test_without_the_mask_cudnn_runs_at_nvidias_measured_ratio():
    """The published Blackwell rows are causal; a non-causal node runs at them times NVIDIA's cuDNN 9.22 no-mask over
    causal TFLOP/s of the same GPU (published_attention_blackwell_masks.csv): GB200 BF16 at 2k, forward 1,433 / 1,097
    and backward 1,124 / 885; B200 takes GB200's ratio, B300 GB300's (FP8 forward at 8k: 3,160 / 2,897)."""
    gb200, b200, b300 = load_gpu("GB200"), load_gpu("B200"), load_gpu("B300")
    assert blackwell_mask_ratio(gb200, "bf16", False, 2048) == pytest.approx(1433 / 1097)  # 1.306
    assert blackwell_mask_ratio(b200, "bf16", True, 2048) == pytest.approx(1124 / 885)  # 1.270
    assert blackwell_mask_ratio(b300, "fp8", False, 8192) == pytest.approx(3160 / 2897)  # 1.091
    # between lengths: each row interpolated in log2 length, then divided (2^11.5: halfway between 2k and 4k)
    assert blackwell_mask_ratio(gb200, "bf16", False, round(2 ** 11.5)) == pytest.approx(
        ((1433 + 1599) / 2) / ((1097 + 1408) / 2), rel=1e-3)
    # below 2k: the 2k ratio; a GPU without a measured counterpart: 1
    assert blackwell_mask_ratio(gb200, "bf16", False, 512) == pytest.approx(1433 / 1097)
    assert blackwell_mask_ratio(load_gpu("H100"), "bf16", False, 8192) == 1.0
    assert blackwell_efficiency(b200, None, "bf16", False, 2048, causal=False) == pytest.approx(
        blackwell_efficiency(b200, None, "bf16", False, 2048) * 1433 / 1097)


def test_a_non_causal_node_on_b200_by_hand():
    """b 1, 32 heads of 128, 4k queries against 2k keys without the mask (a Megatron CP step): the B200's causal 2k
    rows (907.547 forward, 545.088 backward TFLOP/s) over the benchmark's utilisation, times GB200's ratio at 2k
    (1,433 / 1,097 and 1,124 / 885), times the node's own utilisation (32 x 4096/128 = 1024 blocks on 148 SMs)."""
    model = GpuComputeModel(None, "B200")
    from astra_sim.chakra import make_node, types as T

    flops = 2.0 * 1 * 32 * 4096 * 2048 * 256
    ctas = 32 * 4096 // 128
    utilisation = ctas / (-(-ctas // 148) * 148)  # 1024 / 1036
    bench = _bench_utilisation(2048, 148)  # 2048 / 2072
    launch = model.gpu.gemm.launch_us * 1e-6
    for backward, tflops, ratio in ((False, 907.547, 1433 / 1097), (True, 545.088, 1124 / 885)):
        q, k = "[1, 32, 4096, 128]", "[1, 32, 2048, 128]"
        if backward:
            name, shapes = "aten::_scaled_dot_product_flash_attention_backward", f"[{q}, {q}, {k}, {k}]"
            values = "[[], [], [], [], [], [], None, None, 0, 0, 0.0, False, None, None]"
        else:
            name, shapes, values = "aten::_scaled_dot_product_flash_attention", f"[{q}, {k}, {k}]", \
                "[[], [], [], 0.0, False, False]"
        node = make_node(0, name, T.COMP_NODE, attrs={"is_cpu_op": False, "inputs_shapes": shapes,
                                                      "inputs_types": "[" + ", ".join([BF16] * 4) + "]",
                                                      "inputs_values": values})
        work = flops * (2.5 if backward else 1.0)
        expected = math.ceil((launch + work / (tflops * 1e12 / bench * ratio * utilisation)) * 1e9)
        assert model.compute_time_ns(node, 0) == expected, backward
