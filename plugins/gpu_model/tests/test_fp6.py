"""MXFP6 GEMMs in the gpu model: the format read from an ``aten::_scaled_mm`` whose operands are FP6 packed four in
three bytes (``float6_e2m3fn_x4``) with E8M0 block scales, its dense rate (the datasheets' FP6 figure: FP8's on
Blackwell, FP4's on MI355X), its time by hand, and the refusal elsewhere. Rates typed from the sources, not the
preset files."""

from __future__ import annotations

from dataclasses import replace

import pytest

from astra_sim.errors import ConfigError

from astra_gpu_model.gemm import gemm_time_s
from astra_gpu_model.gpu import DTYPE_BYTES, load_gpu
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import OpError, classify
from astra_gpu_model.platforms import PLATFORMS
from astra_gpu_model.power_clock import sustained_gemm_factor

FP6, E4M3, E8M0 = "Tensor(float6_e2m3fn_x4)", "Tensor(c10::Float8_e4m3fn)", "Tensor(c10::Float8_e8m0fnu)"


def _mm(m, k, n, elem=FP6, scale=E8M0, packed=4):
    kp, ks = k // packed, k // 32
    return classify("aten::_scaled_mm", f"[[{m}, {kp}], [{kp}, {n}], [{m}, {ks}], [{ks}, {n}]]",
                    repr([elem, elem, scale, scale]), None)


def test_format_and_k_from_the_packed_operands():
    op = _mm(4096, 8192, 2048)
    assert (op.kind, op.dtype, op.m, op.k, op.n, op.out_bytes) == ("gemm", "mxfp6", 4096, 8192, 2048, 2)
    # 6 bits an element and a 1-byte scale per 32: 0.75 + 1/32
    assert DTYPE_BYTES["mxfp6"] == 0.75 + 1 / 32


def test_fp6_without_block_scales_is_refused():
    with pytest.raises(OpError, match="FP6 operands need E8M0 block scales"):
        classify("aten::_scaled_mm", "[[64, 32], [32, 64], [], []]", repr([FP6, FP6, "Tensor(float)",
                                                                         "Tensor(float)"]), None)


def test_dense_rates():
    # HGX B200 datasheet: "FP8/FP6 72 PF" sparse for 8 GPUs -> 4,500 dense per GPU, the FP8 rate
    assert load_gpu("b200").dtype_tflops("mxfp6") == 4500
    # HGX B300 (NVIDIA's figures via glennklockwood.com): FP8/FP6 4,500 dense; GB200's GPU: FP8/FP6 10 PF sparse
    assert load_gpu("b300").dtype_tflops("mxfp6") == 4500
    assert load_gpu("gb200").dtype_tflops("mxfp6") == 5000
    # MI355X: MXFP6 at the MXFP4 rate, twice FP8's 256 CUs x 8,192 FLOP/clock x 2.4 GHz
    assert load_gpu("mi355x").dtype_tflops("mxfp6") == pytest.approx(2 * 256 * 8192 * 2.4e9 / 1e12, abs=0.1)
    for name in ("h100", "h200", "a100", "mi300x", "mi325x", "l40s"):
        assert load_gpu(name).dtype_tflops("mxfp6") is None, name


def test_gemm_time_by_hand_on_b200():
    """At the FP6 (= FP8) rate, MXFP8's fitted efficiency (an ASSUMPTION for FP6), 0.78125 byte per element."""
    b200 = load_gpu("b200")
    model = GpuComputeModel(gpu="b200")
    m = k = n = 8192
    params = replace(b200.gemm, compute_efficiency=b200.gemm.compute_efficiency * 0.8945)
    peak = 4500e12 * sustained_gemm_factor(b200, "mxfp6", 1000.0)
    assert sustained_gemm_factor(b200, "mxfp6", 1000.0) == sustained_gemm_factor(b200, "mxfp8", 1000.0)
    expected = gemm_time_s(m, n, k, 1, peak_flops=peak, sm_count=148, hbm_bytes_per_s=8000e9,
                           in_bytes=0.78125, out_bytes=2, params=params, tiles=b200.gemm_tiles)
    fp6 = model.op_seconds(_mm(m, k, n))
    assert fp6 == pytest.approx(expected, rel=1e-12)
    # compute bound: as long as the MXFP8 GEMM (same rate, same efficiency)
    mx8 = model.op_seconds(_mm(m, k, n, E4M3, E8M0, 1))
    assert fp6 == pytest.approx(mx8, rel=0.01)


def test_mi355x_runs_fp6_at_twice_mxfp8():
    model = GpuComputeModel(gpu="mi355x")
    m = k = n = 16384
    ratio = model.op_seconds(_mm(m, k, n)) / model.op_seconds(_mm(m, k, n, E4M3, E8M0, 1))
    assert ratio == pytest.approx(0.5, abs=0.03)


@pytest.mark.parametrize("gpu", ["h100", "h200", "mi300x"])
def test_refused_where_the_gpu_lacks_it(gpu):
    model = GpuComputeModel(gpu=gpu)
    with pytest.raises(ConfigError) as info:
        model.op_seconds(_mm(256, 256, 256))
    message = str(info.value)
    assert "\n" not in message and f"GPU {model.gpu.name} has no mxfp6 GEMMs" in message
    assert "--gemm-dtype mxfp6" in message


def test_platform_peak_and_assumption():
    assert PLATFORMS["hgx-b200"].device_peak_tflops("mxfp6", {}) == 4500
    assert PLATFORMS["hgx-h100"].device_peak_tflops("mxfp6", {}) is None
    for name, gpu in (("hgx-b200", "b200"), ("mi355x", "mi355x")):
        assert "gpu.efficiency.block_scaled_gemm" in PLATFORMS[name].numbers()["assumptions"]
        stated = load_gpu(gpu).raw["sources"]["efficiency.block_scaled_gemm"]
        assert "MXFP6" in stated and "ASSUMPTION" in stated
