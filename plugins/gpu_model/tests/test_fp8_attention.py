"""FP8 attention (Float8 Q, K, V on a flash attention node: ``astra workload llm --attention-dtype fp8``): the
FlashAttention-3 paper's FP8 forward rates (arXiv:2407.08608 v2, Fig. 7) on Hopper, NVIDIA's published cuDNN
rates on Blackwell, and one-line refusals where nothing times it, by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.errors import ConfigError

from astra_gpu_model.attention import (FP8_MEASURED_TFLOPS, fp8_backward_kernel_efficiency, fp8_kernel_efficiency,
                                      fp8_kernel_tflops, kernel_tflops, measured_utilisation)
from astra_gpu_model.model import GpuComputeModel
from astra_sim_testing import flash_attention_node

FP8 = "'Tensor(c10::Float8_e4m3fn)'"


def fp8_node(b=2, h=32, s=8192, d=128, causal=False, kernel="fa3", backward=False, element=FP8):
    """A flash attention node with FP8 E4M3 query, key and value (or ``element``), as the LLM generator writes it."""
    return flash_attention_node(b, h, s, d, causal, kernel, backward, element)


def test_the_table_is_the_figures_bars_by_head_dimension():
    assert fp8_kernel_tflops("fa3", False, 16384, 128) == 1008  # Fig. 7, head dim 128, no mask, 16k
    assert fp8_kernel_tflops("fa3", False, 16384, 256) == 1171  # the paper's "close to 1.2 PFLOPS"
    assert fp8_kernel_tflops("cudnn", True, 512, 256) == 304
    assert fp8_kernel_tflops("fa3", False, 8192, 64) == 974  # below 128: the 128 row
    assert fp8_kernel_tflops("fa3", False, 8192, 192) == pytest.approx((974 + 1151) / 2)  # halfway 128..256
    # no causal head-dim-128 panel: 128 without the mask x (256 causal / 256 without)
    assert fp8_kernel_tflops("fa3", True, 8192, 128) == pytest.approx(974 * 960 / 1151)
    # against the H100's dense FP8 peak (1,978.9 TFLOP/s), over the paper's wave utilisation
    assert fp8_kernel_efficiency("fa3", False, 8192, 128) == pytest.approx(974 / 1978.9 / (2048 / 2112))
    assert measured_utilisation() == pytest.approx(2048 / 2112)


def test_a_hopper_without_cudnn_measurements_times_fp8_attention_at_the_figures_rate():
    """b 2, 32 heads of 128, 8k queries and keys, no mask: 2 x 32 x 64 = 4096 blocks, 32 waves of 132 SMs, the
    paper's 97 % utilisation, so FA3 runs at exactly Fig. 7's 974 TFLOP/s and cuDNN at 971; bf16 FA3 at 646. (The
    H800 SXM5 has no rows in published_attention_hopper.csv; the H100 SXM5 and H200 do: see below.)"""
    model = GpuComputeModel(None, "H800-SXM5-80GB")
    flops = 2 * 2 * 32 * 8192 * 8192 * 256
    launch = model.gpu.gemm.launch_us * 1e-6
    assert model.compute_time_ns(fp8_node(), 0) == math.ceil((launch + flops / 974e12) * 1e9)
    assert model.compute_time_ns(fp8_node(kernel="cudnn"), 0) == math.ceil((launch + flops / 971e12) * 1e9)
    # no kernel named: FlashAttention-3's figures
    assert model.compute_time_ns(fp8_node(kernel=None), 0) == model.compute_time_ns(fp8_node(), 0)
    bf16 = model.compute_time_ns(fp8_node(element="'Tensor(c10::BFloat16)'"), 0)  # Fig. 5(c): FA3 at 646
    assert bf16 == math.ceil((launch + flops / 646e12) * 1e9)


def test_blackwell_runs_fp8_attention_at_nvidias_published_cudnn_rate():
    """B200: cuDNN's FP8 forward at 8k as NVIDIA measured it (NVIDIA/cudnn-frontend sdpa_benchmark_training, B200:
    1,502.114 TFLOP/s), over that benchmark's wave utilisation (8,192 blocks on 148 SMs), whatever kernel the node
    names (FP8 attention on Blackwell is cuDNN's); the node has no mask, so times GB200's measured no-mask over
    causal ratio at 8k (2,241 / 2,047: test_blackwell_attention.py)."""
    model = GpuComputeModel(None, "B200")
    gpu = model.gpu
    ctas = 2 * 32 * 64
    utilisation = ctas / (-(-ctas // gpu.sm_count) * gpu.sm_count)
    bench = 8192 / (-(-8192 // 148) * 148)
    flops = 2 * 2 * 32 * 8192 * 8192 * 256
    rate = 1502.114e12 / bench * (2241 / 2047) * utilisation
    assert model.compute_time_ns(fp8_node(), 0) == math.ceil((gpu.gemm.launch_us * 1e-6 + flops / rate) * 1e9)


def test_another_fp8_gpu_keeps_its_presets_efficiency_at_the_fp8_peak():
    model = GpuComputeModel(None, "MI300X")
    gpu = model.gpu
    ctas = 2 * 32 * 64
    utilisation = ctas / (-(-ctas // gpu.sm_count) * gpu.sm_count)
    flops = 2 * 2 * 32 * 8192 * 8192 * 256
    rate = gpu.attention_efficiency * gpu.tensor_tflops["fp8"] * 1e12 * utilisation
    assert model.compute_time_ns(fp8_node(), 0) == math.ceil((gpu.gemm.launch_us * 1e-6 + flops / rate) * 1e9)


def test_fp8_attention_is_refused_where_nothing_times_it():
    with pytest.raises(ConfigError, match=r"A100.* has no FP8 tensor cores"):
        GpuComputeModel(None, "A100").compute_time_ns(fp8_node(), 0)
    h100 = GpuComputeModel(None, "H100")
    with pytest.raises(ConfigError, match="FlashAttention-2 has no FP8 kernel"):
        h100.compute_time_ns(fp8_node(kernel="fa2"), 0)
    with pytest.raises(ConfigError, match="FlashAttention-3 has an FP8 forward only"):
        h100.compute_time_ns(fp8_node(backward=True), 0)
    with pytest.raises(ConfigError, match="has no FP8 tensor cores"):
        GpuComputeModel(None, "A100").compute_time_ns(fp8_node(kernel="cudnn", backward=True), 0)


def test_the_fp8_backward_is_cudnns_losing_what_bf16_loses():
    """b 2, 32 heads of 128, 8k, no mask, backward (2.5 x the forward's FLOPs), at the paper's 97 % utilisation: the
    FP8 backward runs at cuDNN's FP8 forward (Fig. 7: 971 TFLOP/s) x its BF16 backward over forward (Fig. 6(b) 518 /
    Fig. 5(c) 600) = 838.3 TFLOP/s, 1.62x cuDNN's BF16 backward (518). (The H800: no measured Hopper rows.)"""
    model = GpuComputeModel(None, "H800-SXM5-80GB")
    flops = 2.5 * 2 * 2 * 32 * 8192 * 8192 * 256
    launch = model.gpu.gemm.launch_us * 1e-6
    fp8 = model.compute_time_ns(fp8_node(kernel="cudnn", backward=True), 0)
    assert fp8 == math.ceil((launch + flops / (971e12 * 518 / 600)) * 1e9)
    assert model.compute_time_ns(fp8_node(kernel=None, backward=True), 0) == fp8  # no kernel named: cuDNN's
    bf16 = model.compute_time_ns(fp8_node(kernel="cudnn", backward=True, element="'Tensor(c10::BFloat16)'"), 0)
    assert bf16 == math.ceil((launch + flops / 518e12) * 1e9)
    # causal: the forward's causal FP8 row x the BF16 backward's (causal, assumed) over the causal forward
    causal = fp8_backward_kernel_efficiency(True, 8192, 128)
    keeps = kernel_tflops("cudnn", True, True, 8192) / kernel_tflops("cudnn", False, True, 8192)
    assert causal == pytest.approx(fp8_kernel_efficiency("cudnn", True, 8192, 128) * keeps)
    # Blackwell: cuDNN's FP8 backward as NVIDIA measured it on a B200 (1,254.687 TFLOP/s at 8k, causal), without the
    # mask times GB200's measured ratio (1,772 / 1,454)
    b200 = GpuComputeModel(None, "B200")
    ctas = 2 * 32 * 64
    utilisation = ctas / (-(-ctas // b200.gpu.sm_count) * b200.gpu.sm_count)
    rate = 1254.687e12 / (8192 / (-(-8192 // 148) * 148)) * (1772 / 1454) * utilisation
    assert b200.compute_time_ns(fp8_node(kernel="cudnn", backward=True), 0) == math.ceil(
        (b200.gpu.gemm.launch_us * 1e-6 + flops / rate) * 1e9)


@settings(max_examples=60, deadline=None)
@given(kernel=st.sampled_from(("fa3", "cudnn")), causal=st.booleans(), seq_len=st.integers(1, 1 << 22),
       head_dim=st.integers(1, 1024))
def test_any_shape_lies_within_the_measured_bars(kernel, causal, seq_len, head_dim):
    rows = [v for (k, c, _), v in FP8_MEASURED_TFLOPS.items() if k == kernel and c == causal]
    share = min(a / b for a, b in zip(FP8_MEASURED_TFLOPS[(kernel, True, 256)],
                                      FP8_MEASURED_TFLOPS[(kernel, False, 256)]))
    low = min(min(r) for r in FP8_MEASURED_TFLOPS.values() if r) * (share if causal else 1.0)
    value = fp8_kernel_tflops(kernel, causal, seq_len, head_dim)
    assert low * 0.999 <= value <= max(max(r) for r in rows) * 1.001


def test_h200_and_h100_time_fp8_attention_at_nvidias_measured_h200_cudnn_rates():
    """NVIDIA/cudnn-frontend's H200 rows (cuDNN 9.19, 64/8 heads of 128, batch 1): FP8 at 8k, causal, forward
    964 and backward 430 TFLOP/s; without the mask 1,023 / 636. Benchmark: 64 x 64 = 4096 blocks, 32 waves of 132
    SMs (97.0 %). The node: b 2, 32 heads, 8k = 4096 blocks, the same utilisation, so it runs at the measured rate.
    The old assumption put the causal backward at ~800 TFLOP/s; measured it is 430."""
    flops = 2 * 2 * 32 * 8192 * 8192 * 256
    for preset in ("H200", "H100"):
        model = GpuComputeModel(None, preset)
        launch = model.gpu.gemm.launch_us * 1e-6
        for causal, backward, tflops in ((True, False, 964), (True, True, 430), (False, False, 1023),
                                         (False, True, 636)):
            pairs = 8192 * 8193 / 2 if causal else 8192 * 8192  # (the model counts the diagonal)
            work = 2 * 2 * 32 * pairs * 256 * (2.5 if backward else 1)
            node = fp8_node(kernel="cudnn", causal=causal, backward=backward)
            assert model.compute_time_ns(node, 0) == math.ceil((launch + work / (tflops * 1e12)) * 1e9)
        # no kernel named (Megatron / TE): cuDNN's; a forward naming FA3 keeps Fig. 7 (974 without the mask)
        assert model.compute_time_ns(fp8_node(kernel=None), 0) == model.compute_time_ns(fp8_node(kernel="cudnn"), 0)
        assert model.compute_time_ns(fp8_node(), 0) == math.ceil((launch + flops / 974e12) * 1e9)


def test_the_measured_hopper_rows_interpolate_in_log_length_and_clamp():
    """Between 4k (causal backward 471) and 8k (430): 5.8k is halfway in log2, 450.5 TFLOP/s before utilisation;
    below 2k the 2k row, above 32k the 32k row (from 16k keys at the 700 W cap: attention.hopper_fp8_cap_factor);
    above head dim 128 the figures' path (None)."""
    from astra_gpu_model.attention import hopper_fp8_efficiency
    from astra_gpu_model.gpu import load_gpu

    gpu = load_gpu("H200")
    mid = round(2 ** 12.5)
    ctas = 64 * -(-mid // 128)
    utilisation = ctas / (-(-ctas // 132) * 132)
    expected = (471 + (430 - 471) * (math.log2(mid) - 12)) / 1978.9 / utilisation
    assert hopper_fp8_efficiency(gpu, "cudnn", True, True, mid, 128) == pytest.approx(expected)
    low = hopper_fp8_efficiency(gpu, None, True, True, 512, 128)
    assert low == pytest.approx(393 / 1978.9 / (1024 / (8 * 132)))  # the 2k row (393), its 1,024 blocks
    assert hopper_fp8_efficiency(gpu, None, False, False, 1 << 20, 128) == pytest.approx(
        1062 / 1.179704 / 1978.9 / (16384 / (125 * 132)))  # the 32k row (1,062), its forward at the cap
    assert hopper_fp8_efficiency(gpu, None, True, True, 8192, 192) is None
    assert hopper_fp8_efficiency(load_gpu("H800-SXM5-80GB"), None, True, True, 8192, 128) is None
