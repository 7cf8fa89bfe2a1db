"""Which published cuDNN rows time attention on the NVL72 rack platforms (issue 36), and that the rack tray's power
limit reaches attention through no factor (so the rows, measured at whatever clock the benchmark GPU held, are not
scaled a second time).

gb200-nvl72 and gb200-nvl72-64 time with the B200 preset, hence the B200 rows (cuDNN 9.13.1, NGC 25.09); the GB200
rows NVIDIA published are of cuDNN 9.17.0 (NGC 25.11), and on one GPU (GB300) the same benchmark gains
1,899 / 1,716 = 1.107 (BF16 forward, 8k) from 9.13.1 to 9.17.0 alone (NVIDIA/cudnn-frontend
benchmark/sdpa_benchmark_training/artifacts/sdpa_fp8_benchmark_results_NVIDIA_GB300.csv at 0b1577c8 and at
d48a60eb): most of GB200's 1,583 / 1,384 = 1.144 lead is software. See attention.py, "GB200 trays"."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from astra_gpu_model.attention import blackwell_efficiency
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.platforms import get_platform
from astra_sim_testing import flash_attention_node

BF16 = "'Tensor(c10::BFloat16)'"


def _platform_model(name):
    """The gpu model as ``astra run --platform NAME`` builds it: the options the platform implies."""
    return GpuComputeModel(SimpleNamespace(options=dict(get_platform(name).resolve(1, {}).options)))


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb200-nvl72-64", "hgx-b200"])
def test_gb200_trays_and_hgx_b200_time_attention_at_the_b200_rows(name):
    model = _platform_model(name)
    assert model.gpu.name == "B200"
    # B200, cuDNN 9.13.1, BF16 causal forward at 8k: 1,384.231 TFLOP/s. The benchmark's 128 heads x 8192/128 = 8192
    # blocks on 148 SMs: ceil(8192 / 148) = 56 waves, 8192 / (56 x 148 = 8288) = 0.988417 busy.
    # 1384.231 / 2250 / 0.988417 = 0.6224233 of the BF16 peak
    assert blackwell_efficiency(model.gpu, None, "bf16", False, 8192) == pytest.approx(0.6224233, rel=1e-6)


def test_gb300_trays_time_attention_at_the_gb300_rows():
    model = _platform_model("gb300-nvl72")
    assert model.gpu.name == "B300"
    # GB300, cuDNN 9.13.1, BF16 causal forward at 8k: 1,716.056 TFLOP/s; 8192 blocks on 160 SMs: ceil(8192 / 160)
    # = 52 waves, 8192 / (52 x 160 = 8320) = 0.984615 busy. 1716.056 / 2250 / 0.984615 = 0.7746086
    assert blackwell_efficiency(model.gpu, None, "bf16", False, 8192) == pytest.approx(0.7746086, rel=1e-6)


def test_the_rack_power_limit_moves_gemms_not_attention():
    """A GB200 tray's 1,200 W limit (the platform's gpu_board_power_w) slows no attention node: the measured rows
    stand as they are; GEMMs alone take power_clock's sustained factor (test_power_clock covers it)."""
    hgx, rack = _platform_model("hgx-b200"), _platform_model("gb200-nvl72")
    assert (hgx.board_power_w, rack.board_power_w) == (1000.0, 1200.0)
    for backward in (False, True):
        node = flash_attention_node(2, 32, 8192, 128, True, None, backward, BF16)
        assert hgx.compute_time_ns(node, 0) == rack.compute_time_ns(node, 0), backward
    # and that time is the B200 row's, by hand: b 2, 32 heads, 8k causal forward. FLOPs 2 x 2 x 32 x
    # (8192^2 - 8192 x 8191 / 2) x 256; the node's 2 x 32 x 64 = 4096 blocks on 148 SMs: 28 waves, 4096 / 4144 busy
    node = flash_attention_node(2, 32, 8192, 128, True, None, False, BF16)
    flops = 2.0 * 2 * 32 * (8192 * 8192 - 8192 * 8191 / 2) * 256
    rate = 0.6224233 * 2250e12 * (4096 / 4144)
    expected = (rack.gpu.gemm.launch_us * 1e-6 + flops / rate) * 1e9
    assert rack.compute_time_ns(node, 0) == pytest.approx(math.ceil(expected), rel=1e-5)
