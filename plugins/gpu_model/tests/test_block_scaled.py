"""Block-scaled GEMMs (NVFP4, MXFP8, MXFP4) in the gpu model: the formats read from an ``aten::_scaled_mm``'s types,
their dense rates on Blackwell and MI355X, their time (hand-computed from the GEMM formula), and the refusal on a GPU
without them. The datasheet numbers below are typed from the sources independently of the preset files."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.errors import ConfigError

from astra_gpu_model.gemm import gemm_time_s
from astra_gpu_model.gpu import BLOCK_SCALED, DTYPE_BYTES, load_gpu, load_gpu_file
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import classify
from astra_gpu_model.platforms import PLATFORMS
from astra_gpu_model.power_clock import sustained_gemm_factor

FP4, E4M3, E8M0 = "Tensor(c10::Float4_e2m1fn_x2)", "Tensor(c10::Float8_e4m3fn)", "Tensor(c10::Float8_e8m0fnu)"


def _scaled_mm(m, k, n, elem, scale, packed, block):
    kp, ks = k // packed, k // block
    return classify("aten::_scaled_mm", f"[[{m}, {kp}], [{kp}, {n}], [{m}, {ks}], [{ks}, {n}]]",
                    repr([elem, elem, scale, scale]), None)


def test_formats_from_types():
    nv = _scaled_mm(4096, 8192, 2048, FP4, E4M3, 2, 16)
    assert (nv.kind, nv.dtype, nv.m, nv.k, nv.n, nv.out_bytes) == ("gemm", "nvfp4", 4096, 8192, 2048, 2)
    assert _scaled_mm(4096, 8192, 2048, FP4, E8M0, 2, 32).dtype == "mxfp4"
    mx8 = _scaled_mm(4096, 8192, 2048, E4M3, E8M0, 1, 32)
    assert (mx8.dtype, mx8.k) == ("mxfp8", 8192)
    # per-tensor FP8 (Transformer Engine's, fp32 scalar scales) is unchanged
    fp8 = classify("aten::_scaled_mm", "[[64, 128], [128, 32], [], []]",
                   repr([E4M3, "Tensor(c10::Float8_e5m2)", "Tensor(float)", "Tensor(float)"]), None)
    assert (fp8.dtype, fp8.k) == ("fp8", 128)


def test_bytes_per_element():
    # an element and its share of a 1-byte scale: NVFP4 16 elements per scale, MX 32
    assert DTYPE_BYTES["nvfp4"] == 0.5 + 1 / 16 and DTYPE_BYTES["mxfp4"] == 0.5 + 1 / 32
    assert DTYPE_BYTES["mxfp8"] == 1 + 1 / 32


def test_dense_rates():
    # HGX B200 datasheet, 8 GPUs sparse: FP4 144 PF, FP8 72 PF -> 9,000 / 4,500 dense per GPU
    b200 = load_gpu("b200")
    assert [b200.dtype_tflops(d) for d in ("nvfp4", "mxfp8", "mxfp4")] == [9000, 4500, 9000]
    # B300: dense FP4 13,125, FP8 4,500; GB200's GPU: FP4 10,000, FP8 5,000
    assert [load_gpu("b300").dtype_tflops(d) for d in ("nvfp4", "mxfp8", "mxfp4")] == [13125, 4500, 13125]
    assert [load_gpu("gb200").dtype_tflops(d) for d in ("nvfp4", "mxfp8", "mxfp4")] == [10000, 5000, 10000]
    # MI355X: 256 CUs x 8,192 FP8 FLOP/clock x 2.4 GHz; MXFP4 twice that; no NVFP4
    mi355x = load_gpu("mi355x")
    assert mi355x.dtype_tflops("mxfp8") == pytest.approx(256 * 8192 * 2.4e9 / 1e12, abs=0.05)
    assert mi355x.dtype_tflops("mxfp4") == pytest.approx(2 * 256 * 8192 * 2.4e9 / 1e12, abs=0.1)
    assert mi355x.dtype_tflops("nvfp4") is None
    for name in ("h100", "h200", "mi300x", "mi325x"):
        assert all(load_gpu(name).dtype_tflops(d) is None for d in BLOCK_SCALED), name


def test_gemm_time_by_hand():
    """An NVFP4 GEMM on a B200: the GEMM formula at 9,000 TFLOP/s, 9/16 byte per operand element and the FP4 GEMMs'
    efficiency (compute_efficiency x fp4_gemm_scale, fitted to pytorch/ao#2427's B200 NVFP4 matmuls); compute bound,
    so about 0.62 of the same GEMM in per-tensor FP8 (twice the rate at 0.788 / 0.9835 of its efficiency)."""
    b200 = load_gpu("b200")
    model = GpuComputeModel(gpu="b200")
    m, k, n = 8192, 8192, 8192
    nv = _scaled_mm(m, k, n, FP4, E4M3, 2, 16)
    assert b200.fp4_gemm_scale == 0.788
    params = replace(b200.gemm, compute_efficiency=b200.gemm.compute_efficiency * b200.fp4_gemm_scale)
    # at the sustained rate of a long GEMM phase on the 1,000 W board (power_clock: 0.801597 of the burst-fitted peak)
    peak = 9000e12 * sustained_gemm_factor(b200, "nvfp4", 1000.0)
    expected = gemm_time_s(m, n, k, 1, peak_flops=peak, sm_count=148, hbm_bytes_per_s=8000e9,
                           in_bytes=0.5625, out_bytes=2, params=params, tiles=b200.gemm_tiles)
    assert model.op_seconds(nv) == pytest.approx(expected, rel=1e-12)
    fp8 = classify("aten::_scaled_mm", f"[[{m}, {k}], [{k}, {n}], [], []]",
                   repr([E4M3, E4M3, "Tensor(float)", "Tensor(float)"]), None)
    ratio = model.op_seconds(nv) / model.op_seconds(fp8)
    assert 0.60 <= ratio < 0.70
    # the flops alone at 0.7216 x 0.788 x 1.0747 (the 2-SM 256 x 256 tile's e_tile) of 9,000 TFLOP/s: a lower bound
    assert model.op_seconds(nv) >= 2 * m * n * k / (0.7216 * 0.788 * 1.0747 * 9000e12)
    # MXFP8 runs at the FP8 rate, at its own efficiency (0.7216 x 0.8945, fitted to flashinfer#2464's B200 MXFP8
    # GEMMs) against per-tensor FP8's 0.7216 x 0.9835: compute bound, so 0.9835 / 0.8945 = 1.10 times as long
    assert b200.mxfp8_gemm_scale == 0.8945
    ratio = model.op_seconds(_scaled_mm(m, k, n, E4M3, E8M0, 1, 32)) / model.op_seconds(fp8)
    assert ratio == pytest.approx(0.9835 / 0.8945, rel=0.03)


@pytest.mark.parametrize("gpu, fmt", [("h100", "nvfp4"), ("h100", "mxfp8"), ("mi300x", "mxfp4"),
                                      ("mi325x", "mxfp8"), ("mi355x", "nvfp4")])
def test_refused_where_the_gpu_lacks_it(gpu, fmt):
    elem, scale, packed, block = {"nvfp4": (FP4, E4M3, 2, 16), "mxfp8": (E4M3, E8M0, 1, 32),
                                  "mxfp4": (FP4, E8M0, 2, 32)}[fmt]
    model = GpuComputeModel(gpu=gpu)
    with pytest.raises(ConfigError) as info:
        model.op_seconds(_scaled_mm(256, 256, 256, elem, scale, packed, block))
    message = str(info.value)
    assert "\n" not in message and f"GPU {model.gpu.name} has no {fmt} GEMMs" in message


def test_mi355x_runs_mx():
    model = GpuComputeModel(gpu="mi355x")
    assert model.op_seconds(_scaled_mm(4096, 4096, 4096, FP4, E8M0, 2, 32)) > 0


def test_platform_peak_and_assumption():
    b200 = PLATFORMS["hgx-b200"]
    assert b200.device_peak_tflops("nvfp4", {}) == 9000 and b200.device_peak_tflops("mxfp8", {}) == 4500
    assert PLATFORMS["hgx-h100"].device_peak_tflops("nvfp4", {}) is None
    # the efficiency assumption is listed among the machine's assumptions (astra platforms --json)
    assert "gpu.efficiency.block_scaled_gemm" in b200.numbers()["assumptions"]
    assert "gpu.efficiency.block_scaled_gemm" in PLATFORMS["mi355x"].numbers()["assumptions"]
    assert "gpu.efficiency.block_scaled_gemm" not in PLATFORMS["hgx-h100"].numbers()["assumptions"]


def _yaml(tmp_path, block_scaled):
    path = tmp_path / "gpu.yaml"
    path.write_text("name: X\nbase: B200\nblock_scaled: " + block_scaled + "\n")
    return path


def test_yaml_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"block_scaled\[1\]' must be one of nvfp4, mxfp8, mxfp6, mxfp4"):
        load_gpu_file(_yaml(tmp_path, "[nvfp4, fp4]"))
    path = tmp_path / "nofp4.yaml"
    path.write_text("name: Y\nbase: H100\nblock_scaled: [mxfp4]\n")
    with pytest.raises(ConfigError, match="lists mxfp4, which runs at tensor_tflops.fp4"):
        load_gpu_file(path)
    assert load_gpu_file(_yaml(tmp_path, "[mxfp8]")).block_scaled == ("mxfp8",)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(sorted(BLOCK_SCALED)), st.text(max_size=6), st.integers()), max_size=4))
def test_yaml_block_scaled_fuzz(tmp_path_factory, formats):
    """Any list under block_scaled loads or fails with a ConfigError naming the key."""
    path = tmp_path_factory.mktemp("y") / "gpu.yaml"
    path.write_text("name: X\nbase: B200\n", encoding="utf-8")
    import yaml

    path.write_text(yaml.safe_dump({"name": "X", "base": "B200", "block_scaled": formats}), encoding="utf-8")
    try:
        gpu = load_gpu_file(path)
    except ConfigError as exc:
        assert "block_scaled" in str(exc)
    else:
        assert set(gpu.block_scaled) <= set(BLOCK_SCALED)


def test_fp4_gemm_scale_from_a_yaml_and_its_fallback(tmp_path):
    """``efficiency.fp4_gemm_scale`` times FP4 GEMMs only; without it and ``mxfp8_gemm_scale`` (a user's GPU) the
    block-scaled formats run at the FP8 efficiency."""
    m = k = n = 8192
    nv, fp8 = _scaled_mm(m, k, n, FP4, E4M3, 2, 16), _scaled_mm(m, k, n, E4M3, E8M0, 1, 32)
    yaml = tmp_path / "b200-fp4.yaml"
    yaml.write_text("base: B200\nname: B200-fp4\nefficiency:\n  fp4_gemm_scale: 0.5\n")
    half, b200 = GpuComputeModel(gpu=str(yaml)), GpuComputeModel(gpu="b200")
    assert half.gpu.fp4_gemm_scale == 0.5 and half.gpu.describe()["fp4_gemm_scale"] == 0.5
    assert half.op_seconds(nv) > 1.4 * b200.op_seconds(nv)  # 0.5 against 0.7544 of the FP4 peak
    assert half.op_seconds(fp8) == b200.op_seconds(fp8)  # MXFP8 keeps its own efficiency
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: plain\nsm_count: 148\ncalibration: h100\nhbm_bandwidth_gbps: 8000\n"
                     "tensor_tflops: {fp32: 75, bf16: 2250, fp8: 4500, fp4: 9000}\nblock_scaled: [nvfp4]\n")
    gpu = GpuComputeModel(gpu=str(plain)).gpu
    assert gpu.fp4_gemm_scale is None and "fp4_gemm_scale" not in gpu.describe()
    assert gpu.gemm_params("fp4") == gpu.gemm_params("fp8") == gpu.gemm_params("mxfp8") == gpu.gemm_params("nvfp4")
