"""FA2 and cuDNN attention past 8k keys on Hopper at the H200's own long-sequence measurement
(``data/measured_attention_hopper_long.csv``, from ``calibration/nvidia-h200-2026-11-30/attention_long.csv``), by
hand."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from astra_gpu_model.attention import (LONG_ATTENTION, kernel_efficiency, kernel_tflops, long_factor, long_rows,
                                      measured_utilisation)
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import Op

PLUGIN = Path(__file__).resolve().parents[1]
PAPER_UTIL = 2048 / 2112  # the FlashAttention-3 paper's 16 waves of 132 SMs


def _check_script():
    spec = importlib.util.spec_from_file_location("check_attention_long", PLUGIN / "fit" / "check_attention_long.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_table_is_the_rule_applied_to_the_measurement(tmp_path):
    check = _check_script()
    out = tmp_path / "table.csv"
    check.write_table(check.measured_rows(), out)
    shipped = (PLUGIN / "src" / "astra_gpu_model" / "data" / LONG_ATTENTION).read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == shipped
    # e.g. FA2's causal backward at 32k keys: four shapes, 320.575 320.304 320.643 318.073 TFLOP/s measured; in full
    # waves (32 heads x 256 blocks = 8,192 in 63 waves: 0.98508; 64 heads: 16,384 in 125 waves: 0.99297) the median
    # of 325.43, 325.16, 325.50, 320.32 is (325.16 + 325.43) / 2
    lengths, tflops = long_rows()[("fa2", True, True, 128)]
    assert lengths == (16384, 32768, 65536, 131072)
    assert tflops[1] == pytest.approx(325.3, abs=0.05)


def test_past_16k_the_model_runs_at_the_measured_rate_in_full_waves():
    """Head dim 128: the efficiency is the table's full-wave TFLOP/s over the H100/H200's 989.4 peak."""
    assert kernel_efficiency("fa2", True, True, 32768) == pytest.approx(325.3 / 989.4)
    assert kernel_efficiency("cudnn", False, True, 131072) == pytest.approx(556.7 / 989.4)
    # log2-interpolated between measured lengths: 45,000 keys between 32k (346.9) and 64k (346.3), FA2 causal forward
    t = math.log2(45000 / 32768)
    assert kernel_efficiency("fa2", False, True, 45000) == pytest.approx((346.9 + t * (346.3 - 346.9)) / 989.4)
    # clamped past the last measured length: without the mask 32k (FA2 forward 354.3), causal 128k
    assert kernel_efficiency("fa2", False, False, 262144) == pytest.approx(354.3 / 989.4)
    assert kernel_efficiency("fa2", True, True, 1 << 20) == pytest.approx(324.4 / 989.4)


def test_the_factor_replaces_the_papers_16k_clamp_and_the_causal_backward_assumption():
    # the paper's FA2 causal backward at 32k: clamped to 16k and assumed (322 x 335 / 370 = 291.5 TFLOP/s)
    assumed = 322 * 335 / 370
    assert kernel_tflops("fa2", True, True, 32768) == pytest.approx(assumed)  # (the paper's rows stay as they were)
    assert long_factor("fa2", True, True, 32768) == pytest.approx(325.3 * PAPER_UTIL / assumed)
    assert measured_utilisation() == pytest.approx(PAPER_UTIL)


def test_up_to_8k_nothing_changes_and_8k_to_16k_is_log_linear():
    for kernel in ("fa2", "cudnn"):
        for backward in (False, True):
            for causal in (False, True):
                for s in (512, 2048, 8192):
                    assert long_factor(kernel, backward, causal, s) == 1.0
    assert kernel_efficiency("fa2", False, True, 8192) == pytest.approx(333 / 989.4 / PAPER_UTIL)
    # halfway in log2 between 8k (the paper's 333) and 16k (the measured 313.6 in full waves, x the paper's waves)
    mid = round(8192 * math.sqrt(2))
    t = math.log2(mid / 8192)
    want = 333 + t * (313.6 * PAPER_UTIL - 333)
    assert kernel_efficiency("fa2", False, True, mid) == pytest.approx(want / 989.4 / PAPER_UTIL, rel=1e-4)


def test_fa3_and_other_head_dims():
    # FA3 was not measured: the paper's rows, as before (16k bar clamped)
    assert long_factor("fa3", True, False, 65536) == 1.0
    assert kernel_efficiency("fa3", False, True, 65536) == pytest.approx(616 / 989.4 / PAPER_UTIL)
    # head dim 64, causal (measured): the measured rate, FA2's forward at 64k 313.3 TFLOP/s in full waves
    assert kernel_efficiency("fa2", False, True, 65536, 64) == pytest.approx(313.3 / 989.4)
    # head dim 96: the paper's rows interpolated halfway (as before) times the mean of the 64 and 128 factors
    f64 = 313.3 * PAPER_UTIL / 299  # (the paper's FA2 causal forward at 64, clamped 16k bar: 299)
    f128 = 346.3 * PAPER_UTIL / 335
    assert long_factor("fa2", False, True, 65536, 96) == pytest.approx((f64 + f128) / 2)
    # without the mask only 128 was measured: every head dimension takes its factor (FA2 forward at 32k: 354.3)
    assert long_factor("fa2", False, False, 32768, 64) == long_factor("fa2", False, False, 32768, 128)
    assert long_factor("fa2", False, False, 32768, 256) == pytest.approx(354.3 * PAPER_UTIL / 370)


def test_a_ring_block_on_the_h100_and_h200_and_untouched_elsewhere():
    """torchtitan's CP step block: 32 heads of 32k queries x 16k keys, no mask, FA2 forward, on the H100 SXM5 and the
    H200 (the same compute): 8,192 blocks in 63 waves; the measured 360.1 / 347.6 TFLOP/s shapes' full-wave median."""
    flops = 4 * 32 * 32768 * 16384 * 128
    op = Op("attention", "sdpa", "bf16", flops=flops, nbytes=1.0, ctas=32 * 256, seq_k=16384, seq_q=32768,
            causal=False, backward=False, head_dim=128, heads=32)
    rate = 365.5e12 * 8192 / (63 * 132)
    for gpu in ("H100-SXM5-80GB", "H200-SXM"):
        model = GpuComputeModel(None, gpu)
        assert model.op_seconds(op, kernel="fa2") == pytest.approx(model.gpu.gemm.launch_us * 1e-6 + flops / rate)
    # Blackwell keeps its own rows (cuDNN) or the preset's efficiency (fa2): no Hopper factor
    b200 = GpuComputeModel(None, "B200")
    util = 8192 / (-(-8192 // b200.gpu.sm_count) * b200.gpu.sm_count)
    peak = b200.gpu.peak_flops("bf16")
    assert b200.op_seconds(op, kernel="fa2") == pytest.approx(b200.gpu.gemm.launch_us * 1e-6
                                                              + flops / (0.45 * peak * util))
