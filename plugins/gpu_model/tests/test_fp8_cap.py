"""FP8 cuDNN attention on the H200 / H100 SXM5 at the 700 W cap from 16k keys: NVIDIA's burst rows divided by what
their BF16 rows lose to the cap against this project's (``fit/check_fp8_cap.py``), by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_gpu_model.attention import (HOPPER_BURST_OVER_CAP, fp8_efficiency, hopper_fp8_cap_factor,
                                      hopper_fp8_efficiency)
from astra_gpu_model.model import GpuComputeModel

PLUGIN = Path(__file__).resolve().parents[1]


def _check_script():
    from astra_sim_testing import load_script

    return load_script(PLUGIN / "fit" / "check_fp8_cap.py")


def test_the_ratio_is_the_rule_applied_to_both_measurements():
    check = _check_script()
    assert check.burst_over_cap() == pytest.approx(HOPPER_BURST_OVER_CAP, rel=1e-6)
    # by hand: the one shape both measured, causal 64/8 heads of 128 at 32k; ours in NVIDIA's s^2 / 2 count
    s = 32768
    assert HOPPER_BURST_OVER_CAP[False] == pytest.approx(688 / (583.215 * s / (s + 1)), rel=1e-6)
    assert HOPPER_BURST_OVER_CAP[True] == pytest.approx(581 / (536.825 * s / (s + 1)), rel=1e-6)


def test_the_factor_by_key_length():
    for backward in (False, True):
        full = 1 / HOPPER_BURST_OVER_CAP[backward]
        assert hopper_fp8_cap_factor(backward, 2048) == 1.0
        assert hopper_fp8_cap_factor(backward, 8192) == 1.0
        assert hopper_fp8_cap_factor(backward, 11585) == pytest.approx(1 + 0.5 * (full - 1), rel=1e-4)
        for keys in (16384, 32768, 131072):
            assert hopper_fp8_cap_factor(backward, keys) == pytest.approx(full)


@pytest.mark.parametrize("preset", ["H200-SXM", "H100-SXM5-80GB"])
def test_nvidia_fp8_rows_at_the_cap(preset):
    gpu = GpuComputeModel(None, preset).gpu
    peak = gpu.tensor_tflops["fp8"]
    # 64 heads x 256 blocks of 128 queries = 16,384 blocks in 125 waves of 132 SMs (NVIDIA's 32k shape)
    util32k, util8k = 16384 / (125 * 132), 4096 / (32 * 132)
    assert hopper_fp8_efficiency(gpu, "cudnn", True, False, 32768, 128) == pytest.approx(
        1042 / 1.179704 / peak / util32k, rel=1e-6)
    assert hopper_fp8_efficiency(gpu, "cudnn", False, True, 32768, 128) == pytest.approx(
        674 / 1.082322 / peak / util32k, rel=1e-6)
    # up to 8k keys NVIDIA's rows as measured
    assert hopper_fp8_efficiency(gpu, "cudnn", True, True, 8192, 128) == pytest.approx(430 / peak / util8k, rel=1e-6)
    # --cudnn-version does not move FP8 attention, capped or not; an FA3 forward keeps Figure 7 (uncapped)
    for backward in (False, True):
        default = fp8_efficiency(gpu, "cudnn", True, 32768, 128, backward)
        assert fp8_efficiency(gpu, "cudnn", True, 32768, 128, backward, "9.1.1") == default
    assert hopper_fp8_efficiency(gpu, "fa3", True, False, 32768, 128) is None
