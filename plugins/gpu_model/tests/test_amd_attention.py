"""BF16 attention on AMD's MI300X, MI325X and MI355X at AMD's published aiter FMHA rates (ROCm/aiter
op_tests/cpp/mha/README.md: forward and the FP32-atomic backward, batch 1, 64/8 heads of 128), by hand."""

from __future__ import annotations

import math

import pytest

from astra_gpu_model.attention import AMD_ATTENTION, amd_efficiency, published_attention
from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GpuComputeModel
from astra_sim_testing import flash_attention_node

BF16 = "'Tensor(c10::BFloat16)'"


def test_the_table_holds_the_readmes_mi300x_and_mi355x_rows():
    table = published_attention(AMD_ATTENTION)  # aiter measured BF16: no precision column
    lengths, fwd = table["MI300X"][("bf16", True, "fwd")]
    assert lengths == (1024, 2048, 4096, 8192, 10240, 16384)
    assert fwd[3] == 518.29  # b 1, h 64/8, 8192, causal: FWD MI300X
    assert table["MI300X"][("bf16", True, "bwd")][1][3] == 433.285  # BWD-a32 MI300X
    assert table["MI355X"][("bf16", False, "bwd")][1][3] == 822.75  # no mask, BWD-a32 MI355X
    assert table["MI325X"] == table["MI300X"]  # ASSUMPTION: the MI300X's rows


def test_an_mi300x_times_llama_70b_attention_at_the_measured_rate():
    """b 1, 64 heads of 128, 8k, causal: 64 x 64 = 4096 blocks, 14 waves of 304 CUs (96.2 %), the table's own shape,
    so the forward runs at 518.29 TFLOP/s and the backward at 433.285 (FP32 atomics), not at 0.35 x 1,307.4 = 457.6;
    the causal FLOPs count the diagonal (8192 x 8193 / 2 pairs)."""
    model = GpuComputeModel(None, "MI300X")
    launch = model.gpu.gemm.launch_us * 1e-6
    pairs = 8192 * 8193 / 2
    for backward, tflops in ((False, 518.29), (True, 433.285)):
        node = flash_attention_node(1, 64, 8192, 128, True, None, backward, BF16)
        work = 2 * 64 * pairs * 256 * (2.5 if backward else 1)
        assert model.compute_time_ns(node, 0) == math.ceil((launch + work / (tflops * 1e12)) * 1e9)


def test_lengths_between_rows_interpolate_in_log2_and_clamp():
    """MI355X (256 CUs, BF16 peak 2,516.6), no mask, forward: 2.9k is halfway (in log2) between 2k (1,018.07) and 4k
    (1,305.83); below 1k the 1k row; an MI355X benchmark block count of 64 x 23 = 1472 fills 6 waves of 256 (95.8 %)."""
    gpu = load_gpu("MI355X")
    mid = round(2 ** 11.5)
    ctas = 64 * -(-mid // 128)
    utilisation = ctas / (-(-ctas // 256) * 256)
    expected = (1018.07 + (1305.83 - 1018.07) * (math.log2(mid) - 11)) / 2516.6 / utilisation
    assert amd_efficiency(gpu, False, False, mid) == pytest.approx(expected)
    assert amd_efficiency(gpu, False, False, 256) == pytest.approx(1003.73 / 2516.6 / (512 / (2 * 256)))
    assert amd_efficiency(load_gpu("H100"), True, True, 8192) is None  # no AMD rows: Hopper's own path


def test_fp8_attention_on_amd_keeps_the_presets_efficiency():
    """The rows are BF16: an FP8 node on an MI300X stays at the preset's attention_efficiency x the FP8 peak."""
    model = GpuComputeModel(None, "MI300X")
    gpu = model.gpu
    node = flash_attention_node(2, 32, 8192, 128, False, None, False, "'Tensor(c10::Float8_e4m3fn)'")
    ctas = 2 * 32 * 64
    utilisation = ctas / (-(-ctas // gpu.sm_count) * gpu.sm_count)
    rate = gpu.attention_efficiency * gpu.tensor_tflops["fp8"] * 1e12 * utilisation
    flops = 2 * 2 * 32 * 8192 * 8192 * 256
    assert model.compute_time_ns(node, 0) == math.ceil((gpu.gemm.launch_us * 1e-6 + flops / rate) * 1e9)
