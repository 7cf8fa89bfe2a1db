"""Each vendor's GEMM tile set (docs/hardware.md, GEMM section) and the published ceiling the fit holds it to.

Hand-computed: a 2-SM tile's slots and wave time, the model's best rate (``peak_fraction_bound``), AMD's
max-achievable shapes as one tile per CU, and the fitted efficiencies of the presets whose ceiling binds.
Property: no modelled GEMM (dense or grouped), of any shape, runs faster than its GPU's published maximum
achievable rate for its dtype (``data/published_peak_gemm.csv``)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.errors import ConfigError

from astra_gpu_model.calibration import fit_peak_efficiency, load_published_peak_gemm, predict_gemm_s
from astra_gpu_model.gemm import (DEFAULT_TILES, GemmParams, gemm_time_s, peak_fraction_bound, tile_config,
                                  tile_slots)
from astra_gpu_model.gpu import load_gpu, load_gpu_file
from astra_gpu_model.grouped import grouped_gemm_time_s

#: e_tile = 1 and no fixed costs: a GEMM's time is its waves times its tiles' FLOPs at eta x peak
PLAIN = GemmParams(compute_efficiency=0.5, tile_penalty=0.0, k_overhead=0.0, hbm_efficiency=1.0, launch_us=0.0,
                   overlap_exponent=50.0)
POINTS = load_published_peak_gemm()
#: (gpu, dtype) -> the published maximum achievable TFLOP/s (the largest row of that GPU and dtype)
CEILINGS = {}
for _p in POINTS:
    CEILINGS[(_p["gpu"], _p["dtype"])] = max(CEILINGS.get((_p["gpu"], _p["dtype"]), 0.0), _p["tflops"])


def test_a_tile_config_and_its_slots():
    assert tile_config((128, 256, 1)) == (128, 256, 1, 1)
    assert tile_config((256, 256, 1, 2)) == (256, 256, 1, 2)
    assert tile_slots(148, 1, 2) == 74  # B200: 74 SM pairs
    assert tile_slots(132, 4, 1) == 528
    assert tile_slots(1, 1, 2) == 1  # never no slot


def test_a_2sm_tile_by_hand():
    """B200-sized: 148 SMs at 10 TFLOP/s each; 74 tiles of 256 x 256 (each on 2 SMs) are one wave:
    2 * 512 * 9472 * 8192 FLOPs at 0.5 x 1,480 TFLOP/s = 107.3 us; one column more (76 tiles) is two waves
    without split-K, and 17 waves of K / 16 (1.0625 x) with it."""
    kw = dict(peak_flops=1480e12, sm_count=148, hbm_bytes_per_s=1e18, in_bytes=2, out_bytes=2, params=PLAIN,
              tiles=((256, 256, 1, 2),), splits=(1,))
    t, info = gemm_time_s(512, 9472, 8192, 1, detail=True, **kw)
    assert (info["waves"], info["sms_per_tile"], info["tile"]) == (1, 2, (256, 256))
    assert t == pytest.approx(2 * 512 * 9472 * 8192 / (0.5 * 1480e12), rel=1e-6)
    assert t == pytest.approx(107.3e-6, rel=1e-3)
    two = gemm_time_s(512, 9472 + 256, 8192, 1, **kw)
    assert two == pytest.approx(2 * t, rel=1e-6)
    split = gemm_time_s(512, 9472 + 256, 8192, 1, **dict(kw, splits=(1, 2, 4, 8, 16)))
    assert split == pytest.approx(1.0625 * t, rel=1e-6)
    # the same tile on one SM (74 of 148 slots used): the same one wave takes twice as long
    one_sm = gemm_time_s(512, 9472, 8192, 1, **dict(kw, tiles=((256, 256, 1),)))
    assert one_sm == pytest.approx(2 * t, rel=1e-6)


def test_a_three_element_tile_is_a_one_sm_tile():
    """Ampere/Hopper's set, written with or without the fourth element: the same ns (A100/H100 unchanged)."""
    h100 = load_gpu("H100-SXM5-80GB")
    assert h100.gemm_tiles == DEFAULT_TILES and load_gpu("A100-SXM4-80GB").gemm_tiles == DEFAULT_TILES
    four = tuple(t + (1,) for t in DEFAULT_TILES)
    for m, n, k in ((1, 8192, 8192), (4096, 4096, 4096), (3000, 777, 12288), (8192, 28672, 8192)):
        kw = dict(peak_flops=989.4e12, sm_count=132, hbm_bytes_per_s=3.35e12, in_bytes=2, out_bytes=2,
                  params=h100.gemm)
        assert gemm_time_s(m, n, k, 1, tiles=four, **kw) == gemm_time_s(m, n, k, 1, tiles=DEFAULT_TILES, **kw)


def test_peak_fraction_bound_by_hand():
    """e_tile(256, 256) at c = 22.488888 (the h100 family's): (1 + c/128 + c/256) / (1 + 2c/256) = 1.074719."""
    params = GemmParams(0.8, 22.488888, 0.0, 0.9, 0.0, 3.0)
    assert peak_fraction_bound(params, DEFAULT_TILES) == pytest.approx(0.8, rel=1e-12)  # 128 x 256 is the reference
    c = 22.488888
    e256 = (1 + c / 128 + c / 256) / (1 + 2 * c / 256)
    assert e256 == pytest.approx(1.074719, abs=1e-6)
    assert peak_fraction_bound(params, ((128, 64, 2), (256, 256, 1, 2))) == pytest.approx(0.8 * e256, rel=1e-12)


def test_amd_max_achievable_shapes_are_one_tile_per_cu():
    """AMD's MAF shapes (the blog's Table 1): 4096 x 4864 is 16 x 19 = 304 tiles of 256 x 256, and 4096 x 3648
    16 x 19 of 256 x 192, one per CU of the MI325X's 304, in one wave without split-K."""
    gpu = load_gpu("MI325X")
    for dtype, n, tile in (("bf16", 4864, (256, 256)), ("fp8", 3648, (256, 192))):
        size = gpu.dtype_bytes(dtype)
        _, info = gemm_time_s(4096, n, 32896, 1, peak_flops=gpu.peak_flops(dtype), sm_count=gpu.sm_count,
                              hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=size, out_bytes=size,
                              params=gpu.gemm_params(dtype), tiles=gpu.gemm_tiles, detail=True)
        assert (info["tile"], info["waves"], info["split_k"]) == (tile, 1, 1), dtype
    # Hopper's set sees 4864 / 256 = 19 but 3648 / 256 = 14.25 tiles: that quantisation loss made the old fit
    # charge 8 % and raise the ceiling to compensate
    assert 3648 % 256 and not 3648 % 192


def test_vendor_tile_sets():
    for name in ("B200", "B300", "GB200"):
        tiles = load_gpu(name).gemm_tiles
        assert (256, 256, 1, 2) in tiles and all(tile_config(t)[3] in (1, 2) for t in tiles), name
    for name in ("MI300X", "MI325X", "MI355X"):
        tiles = load_gpu(name).gemm_tiles
        assert {(256, 256, 1), (256, 192, 1), (256, 224, 1)} <= set(tiles), name
    for name in ("H100-SXM5-80GB", "H200-SXM", "A100-SXM4-80GB", "H800-SXM5-80GB"):
        assert load_gpu(name).gemm_tiles == DEFAULT_TILES, name


def test_the_fit_holds_the_ceiling_by_hand():
    """GB200 BF16: 1,822 TFLOP/s published (MAMF), 2,500 dense peak, best tile 256 x 256 (e = 1.074719):
    eta <= 1822 / (2500 x 1.074719) = 0.678118 -> 0.6781 (rounded down); its one shape (4096 x 9728 x 2048,
    608 tiles in 8.2 waves of 74) alone would want more. MI325X FP8: 1527.7 / (2614.9 x 1.074719 x 0.5724)."""
    fit = fit_peak_efficiency("GB200")
    assert fit["compute_efficiency"] == math.floor(1822 / (2500 * 1.074719) * 1e4) / 1e4 == 0.6781
    assert fit["ceiling_tflops"]["bf16"] <= 1822.0
    mi325x = fit_peak_efficiency("MI325X")
    assert mi325x["compute_efficiency"] == 0.5724  # not held: its fit (the MAMF row) is below the ceiling
    assert mi325x["fp8_gemm_scale"] == math.floor(1527.7 / (2614.9 * 1.074719 * 0.5724) * 1e4) / 1e4
    assert mi325x["ceiling_tflops"]["fp8"] <= 1527.7


def test_the_ceiling_follows_the_published_maximum():
    """Halve the published B200 FP8 maximum: the FP8 scale follows it down, the BF16 efficiency stays."""
    base = fit_peak_efficiency("B200")
    points = [dict(p, tflops=p["tflops"] * (0.5 if p["dtype"] == "fp8" else 1.0)) for p in POINTS]
    half = fit_peak_efficiency("B200", points)
    assert half["compute_efficiency"] == base["compute_efficiency"]
    assert half["ceiling_tflops"]["fp8"] <= 3432.5 / 2 < base["ceiling_tflops"]["fp8"]


@pytest.mark.parametrize("gpu_dtype", sorted(CEILINGS))
def test_each_presets_best_rate_is_at_most_the_published_maximum(gpu_dtype):
    name, dtype = gpu_dtype
    gpu = load_gpu(name)
    params = gpu.gemm_params(dtype)
    best = peak_fraction_bound(params, gpu.gemm_tiles) * gpu.peak_flops(dtype) / 1e12
    assert best <= CEILINGS[gpu_dtype] and best >= 0.9 * CEILINGS[gpu_dtype], (best, CEILINGS[gpu_dtype])


_dims = st.integers(min_value=1, max_value=65536)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CEILINGS)), _dims, _dims, _dims, st.integers(min_value=1, max_value=8))
def test_no_modelled_gemm_exceeds_the_published_maximum(gpu_dtype, m, n, k, batch):
    name, dtype = gpu_dtype
    gpu = load_gpu(name)
    seconds = float(predict_gemm_s(gpu, [m], n, k, dtype=dtype, batch=[batch])[0])
    assert 2.0 * m * n * k * batch / seconds / 1e12 <= CEILINGS[gpu_dtype]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(CEILINGS)), st.lists(st.integers(min_value=0, max_value=16384), min_size=1,
                                                   max_size=16), _dims, _dims)
def test_no_modelled_grouped_gemm_exceeds_the_published_maximum(gpu_dtype, sizes, n, k):
    name, dtype = gpu_dtype
    gpu = load_gpu(name)
    if not any(sizes):
        return
    seconds = grouped_gemm_time_s([(s, n, k) for s in sizes], peak_flops=gpu.peak_flops(dtype),
                                  sm_count=gpu.sm_count, hbm_bytes_per_s=gpu.hbm_bytes_per_s,
                                  in_bytes=gpu.dtype_bytes(dtype), out_bytes=2, params=gpu.gemm_params(dtype),
                                  stream_bytes_per_s=None, group_us=0.0, tiles=gpu.gemm_tiles)
    assert 2.0 * sum(sizes) * n * k / seconds / 1e12 <= CEILINGS[gpu_dtype]


def _yaml(tmp_path, tiles):
    path = tmp_path / "g.yaml"
    path.write_text("name: G\nsm_count: 100\ntensor_tflops: {fp32: 50, bf16: 500}\nhbm_bandwidth_gbps: 3000\n"
                    f"calibration: h100\ngemm_tiles: {tiles}\n")
    return path


def test_a_yaml_tile_with_its_sms(tmp_path):
    gpu = load_gpu_file(_yaml(tmp_path, "[[256, 256, 1, 2], [128, 128]]"))
    assert gpu.gemm_tiles == ((256, 256, 1, 2), (128, 128, 1))
    with pytest.raises(ConfigError, match=r"'gemm_tiles\[0\]' must be .*sms_per_tile\] of positive integers"):
        load_gpu_file(_yaml(tmp_path, "[[256, 256, 1, 2, 1]]"))
    with pytest.raises(ConfigError, match=r"'gemm_tiles\[0\]'"):
        load_gpu_file(_yaml(tmp_path, "[[256, 256, 1, 0]]"))
