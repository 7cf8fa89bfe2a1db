"""The attention kernel a node names (``attention_kernel``): FlashAttention-2 / -3 and cuDNN on Hopper at the
FlashAttention-3 paper's measured rates (arXiv:2407.08608 v2, Fig. 5 and 6), by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from astra_gpu_model.attention import (KERNELS, MEASURED_TFLOPS, kernel_efficiency, kernel_tflops,
                                      measured_utilisation)
from astra_gpu_model.model import GpuComputeModel
from astra_sim_testing import flash_attention_node

BF = "'Tensor(c10::BFloat16)'"


def attention_node(b=2, h=32, s=8192, d=128, causal=True, kernel=None, backward=False):
    """A bf16 SDPA flash node as the LLM generator writes it."""
    return flash_attention_node(b, h, s, d, causal, kernel, backward, element=BF)


def test_the_table_is_the_papers_bars_and_interpolates_in_log_length():
    assert kernel_tflops("fa2", False, True, 8192) == 333  # Fig. 5(d), FlashAttention-2 at 8k
    assert kernel_tflops("fa2", False, False, 16384) == 370  # Fig. 5(c)
    assert kernel_tflops("fa2", True, False, 4096) == 310  # Fig. 6(b)
    assert kernel_tflops("fa3", False, True, 16384) == 616
    assert kernel_tflops("cudnn", True, False, 512) == 305
    # 3000 keys: log2 3000 = 11.551, between 2k (298) and 4k (319): 298 + 0.551 x 21
    assert kernel_tflops("fa2", False, True, 3000) == pytest.approx(298 + (math.log2(3000) - 11) * 21)
    # outside the measured 512..16k: the nearest bar
    assert kernel_tflops("fa2", False, True, 128) == 191
    assert kernel_tflops("fa2", False, True, 131072) == 335
    # no causal backward in the paper: the backward x (causal forward / forward) at the same length
    assert kernel_tflops("fa2", True, True, 8192) == pytest.approx(318 * 333 / 370)
    with pytest.raises(ValueError, match="fa2, fa3, cudnn"):
        kernel_tflops("fa4", False, True, 8192)


def test_efficiency_undoes_the_papers_wave_utilisation():
    assert measured_utilisation() == pytest.approx(2048 / (16 * 132))  # 16 waves of 132 SMs, 2048 blocks
    assert kernel_efficiency("fa2", False, True, 8192) == pytest.approx(333 / 989.4 / (2048 / 2112))


def test_an_h100_times_fa2_at_the_papers_rate_and_without_a_kernel_as_before():
    """Llama 3.1 8B's attention (b 2, 32 heads, 8k keys, causal) on an H100 SXM5: 2 x 32 x 64 = 4096 blocks in 32
    waves, 4096 / 4224 = 0.9697 utilisation, the same as the paper's shape, so FA2 runs at exactly 333 TFLOP/s."""
    model = GpuComputeModel(None, "H100")
    pairs = 8192 * 8193 // 2  # the causal triangle
    flops = 2 * 2 * 32 * pairs * 256
    launch = model.gpu.gemm.launch_us * 1e-6
    ns = model.compute_time_ns(attention_node(kernel="fa2"), 0)
    assert ns == math.ceil((launch + flops / 333e12) * 1e9)
    # no attribute: the preset's attention_efficiency (0.45) at the same utilisation, as before
    plain = model.compute_time_ns(attention_node(), 0)
    assert plain == math.ceil((launch + flops / (0.45 * 989.4e12 * 4096 / 4224)) * 1e9)
    assert ns / plain == pytest.approx((launch + flops / 333e12) / (launch + flops / (0.45 * 989.4e12 * 4096 / 4224)))
    # FA3 and cuDNN are faster than FA2; the backward (2.5x the FLOPs) at 318 x 333 / 370 TFLOP/s
    assert model.compute_time_ns(attention_node(kernel="fa3"), 0) < model.compute_time_ns(
        attention_node(kernel="cudnn"), 0) < ns
    back = model.compute_time_ns(attention_node(kernel="fa2", backward=True), 0)
    assert back == math.ceil((launch + 2.5 * flops / (318e12 * 333 / 370)) * 1e9)


def test_other_gpus_and_bad_kernels_keep_the_presets_efficiency():
    a100 = GpuComputeModel(None, "A100")
    assert a100.compute_time_ns(attention_node(kernel="fa2"), 0) == a100.compute_time_ns(attention_node(), 0)
    warnings = []

    class Context:
        options = {"gpu": "H100"}
        warn = staticmethod(warnings.append)

    h100 = GpuComputeModel(Context())
    assert h100.compute_time_ns(attention_node(kernel="flash9"), 0) == h100.compute_time_ns(attention_node(), 0)
    h100.compute_time_ns(attention_node(kernel="flash9", s=4096), 0)
    assert len(warnings) == 1 and "attention_kernel must be one of fa2, fa3, cudnn, got 'flash9'" in warnings[0]


@settings(max_examples=60, deadline=None)
@given(kernel=st.sampled_from(KERNELS), backward=st.booleans(), causal=st.booleans(),
       seq_len=st.integers(min_value=1, max_value=1 << 22))
def test_any_length_lies_within_the_measured_bars(kernel, backward, causal, seq_len):
    value = kernel_tflops(kernel, backward, causal, seq_len)
    if backward and causal:  # the backward's bars scaled by the forward's causal share, at most 1
        bars = MEASURED_TFLOPS[(kernel, True, False)]
        share = [a / b for a, b in zip(MEASURED_TFLOPS[(kernel, False, True)], MEASURED_TFLOPS[(kernel, False, False)])]
        assert min(bars) * min(share) * 0.999 <= value <= max(bars)
    else:
        bars = MEASURED_TFLOPS[(kernel, backward, causal)]
        assert min(bars) <= value <= max(bars)


@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.text(max_size=8), st.integers(), st.none(), st.sampled_from(KERNELS)))
def test_any_attention_kernel_attribute_is_timed_or_warned_about(value):
    warnings = []

    class Context:
        options = {"gpu": "H100"}
        warn = staticmethod(warnings.append)

    model = GpuComputeModel(Context())
    node = attention_node(s=1024)
    if value is not None:
        node.attrs["attention_kernel"] = value
    ns = model.compute_time_ns(node, 0)
    assert ns > 0
    assert bool(warnings) == (value is not None and value not in KERNELS)
