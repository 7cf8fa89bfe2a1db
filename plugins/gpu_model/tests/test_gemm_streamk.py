"""The last partial wave as the libraries schedule it (gemm.stream_k_split / stream_k_steps; docs/hardware.md, GEMM
section): CUTLASS's stream-K heuristic and hipBLASLt's stream-K kernels, by hand, and properties over shapes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.errors import ConfigError

from astra_gpu_model.gemm import (DATA_PARALLEL, SCHEDULES, STREAM_K_CUTLASS, STREAM_K_HIPBLASLT, GemmParams,
                                  gemm_time_s, gemm_time_s_np, peak_fraction_bound, stream_k_split, stream_k_steps)
from astra_gpu_model.gpu import load_gpu, load_gpu_file

#: e_tile = 1, no fixed cost, a sharp max of compute and memory
PLAIN = GemmParams(compute_efficiency=0.5, tile_penalty=0.0, k_overhead=0.0, hbm_efficiency=1.0, launch_us=0.0,
                   overlap_exponent=50.0)
TILE = ((256, 256, 1, 2),)  # one 2-SM tile: 148 SMs -> 74 slots


def _time(m, n, k, schedule, *, peak=2.0e15, hbm=1e30, params=PLAIN, detail=False):
    return gemm_time_s(m, n, k, 1, peak_flops=peak, sm_count=148, hbm_bytes_per_s=hbm, in_bytes=2, out_bytes=2,
                       params=params, tiles=TILE, splits=(1,), schedule=schedule, detail=detail)


def test_cutlass_shares_a_short_tail_and_one_full_wave():
    # GB200's MAMF BF16 shape: 16 x 38 = 608 tiles of 256 x 256 on 74 SM pairs, 8 full waves and 16 tiles left
    # (under half a wave), K = 2048: 32 steps of 64. CUTLASS keeps 7 waves data-parallel and shares 74 + 16 = 90
    # tiles' 2,880 steps over min(74, 2880 // 8) = 74 units: the longest takes ceil(2880 / 74) = 39 steps and
    # touches ceil(39 / 32) + 1 = 3 tiles.
    assert stream_k_split(STREAM_K_CUTLASS, 608, 74, 32) == (7, 90, 74)
    assert stream_k_steps(7, 90, 74, 32, 0) == 7 * 32 * 64 + 39 * 64 == 16832
    assert stream_k_steps(7, 90, 74, 32, 100.0) == 7 * (32 * 64 + 100) + 39 * 64 + 3 * 100
    # the whole GEMM: data-parallel is 9 waves of 32 steps, 18,432; stream-K 16,832 (8.7 % less)
    dp, sk = _time(4096, 9728, 2048, DATA_PARALLEL), _time(4096, 9728, 2048, STREAM_K_CUTLASS, detail=True)
    assert sk[1]["stream_k"] == (7, 90, 74) and sk[1]["waves"] == pytest.approx(7 + 90 / 74)
    assert sk[0] / dp == pytest.approx(16832 / 18432, rel=1e-9)


def test_cutlass_declines_a_tail_of_half_a_wave_or_more_whole_waves_and_short_k():
    # B300's MAMF FP8 shape: 12 x 32 = 384 tiles of 256 x 192 on 80 slots: 4 waves and 64 left (>= 40)
    assert stream_k_split(STREAM_K_CUTLASS, 384, 80, 112) is None
    assert stream_k_split(STREAM_K_CUTLASS, 2 * 74, 74, 64) is None  # whole waves
    assert stream_k_split(STREAM_K_CUTLASS, 20, 100, 8) is None  # 8 K steps: no more than min_iters_per_sk_unit_
    # under one wave: every tile is shared, over min(slots, 20 * 12 // 8 = 30) units of 8 steps
    assert stream_k_split(STREAM_K_CUTLASS, 20, 100, 12) == (0, 20, 30)
    assert stream_k_steps(0, 20, 30, 12, 0) == 8 * 64
    assert stream_k_split(DATA_PARALLEL, 608, 74, 32) is None


def test_hipblaslt_shares_any_tail_over_every_slot():
    # the B300 shape on hipBLASLt's scheme: 3 waves data-parallel, 80 + 64 = 144 tiles over 80 slots: the longest
    # share ceil(144 * 112 / 80) = 202 steps on ceil(202 / 112) + 1 = 3 tiles; data-parallel: 5 x 112 = 560 steps
    assert stream_k_split(STREAM_K_HIPBLASLT, 384, 80, 112) == (3, 144, 80)
    assert stream_k_steps(3, 144, 80, 112, 0) == (3 * 112 + 202) * 64
    assert stream_k_split(STREAM_K_HIPBLASLT, 2 * 80, 80, 112) is None
    assert stream_k_split(STREAM_K_HIPBLASLT, 20, 100, 4) == (0, 20, 100)
    with pytest.raises(ValueError, match="GEMM schedule must be one of"):
        stream_k_split("stream-k", 608, 74, 32)


def test_the_fixup_partials_cost_hbm_traffic_and_hipblaslt_keeps_the_faster():
    # compute free, HBM 1 TB/s: data-parallel reads and writes (4096 x 2048 + 2048 x 9728 + 4096 x 9728) x 2 bytes;
    # each of CUTLASS's 74 units also writes and reads back one fp32 partial tile, 8 x 256 x 256 bytes
    base = (4096 * 2048 + 2048 * 9728 + 4096 * 9728) * 2
    dp = _time(4096, 9728, 2048, DATA_PARALLEL, peak=1e30, hbm=1e12)
    assert dp == pytest.approx(base / 1e12, rel=1e-9)
    cutlass = _time(4096, 9728, 2048, STREAM_K_CUTLASS, peak=1e30, hbm=1e12)
    assert cutlass == pytest.approx((base + 74 * 8 * 256 * 256) / 1e12, rel=1e-9)  # its heuristic does not weigh it
    assert _time(4096, 9728, 2048, STREAM_K_HIPBLASLT, peak=1e30, hbm=1e12) == pytest.approx(dp, rel=1e-12)


_dim = st.integers(min_value=1, max_value=40000)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["B200", "GB200", "MI355X", "H100-SXM5-80GB"]), st.sampled_from(SCHEDULES), _dim, _dim, _dim,
       st.integers(min_value=1, max_value=4))
def test_scalar_and_numpy_agree_and_no_shape_beats_the_bound(name, schedule, m, n, k, batch):
    gpu = load_gpu(name)
    kw = dict(peak_flops=gpu.peak_flops("bf16"), sm_count=gpu.sm_count, hbm_bytes_per_s=gpu.hbm_bytes_per_s,
              in_bytes=2, out_bytes=2, params=gpu.gemm, tiles=gpu.gemm_tiles, schedule=schedule)
    scalar = gemm_time_s(m, n, k, batch, **kw)
    assert gemm_time_s_np([m], [n], [k], [batch], **kw)[0] == pytest.approx(scalar, rel=1e-12)
    bound = peak_fraction_bound(gpu.gemm, gpu.gemm_tiles) * gpu.peak_flops("bf16")
    assert 2.0 * m * n * k * batch / scalar <= bound * (1 + 1e-12)
    if schedule == STREAM_K_HIPBLASLT:  # its grid model never runs slower than data-parallel
        assert scalar <= gemm_time_s(m, n, k, batch, **{**kw, "schedule": DATA_PARALLEL}) * (1 + 1e-12)


def test_the_presets_schedules():
    # hipBLASLt runs stream-K by default on gfx950 (MI350 series) only; cuBLAS documents split-K, not stream-K
    assert load_gpu("MI355X").gemm_schedule == STREAM_K_HIPBLASLT
    for name in ("MI300X", "MI325X", "B200", "B300", "GB200", "H100-SXM5-80GB", "A100-SXM4-80GB", "H200-SXM"):
        assert load_gpu(name).gemm_schedule == DATA_PARALLEL, name


def test_a_yaml_schedule(tmp_path):
    path = tmp_path / "g.yaml"
    text = ("name: G\nsm_count: 100\ntensor_tflops: {fp32: 50, bf16: 500}\nhbm_bandwidth_gbps: 3000\n"
            "calibration: h100\ngemm_schedule: ")
    path.write_text(text + STREAM_K_CUTLASS + "\n")
    assert load_gpu_file(path).gemm_schedule == STREAM_K_CUTLASS
    path.write_text(text + "stream-k\n")
    with pytest.raises(ConfigError, match=r"key 'gemm_schedule' must be one of data-parallel, stream-k-cutlass"):
        load_gpu_file(path)



def test_cutlass_heuristic_is_not_monotonic_but_data_parallel_is():
    # the gemm module docstring's example: at N = 128, 32 tiles of 256 x 128 fill under half of the 74 slot pairs, so
    # CUTLASS shares them all and pays 74 fp32 partial tiles of fix-up traffic; at N = 200, 64 tiles, it stays
    # data-parallel. Data-parallel times only grow.
    b200 = load_gpu("B200")
    kw = dict(peak_flops=b200.peak_flops("bf16"), sm_count=b200.sm_count, hbm_bytes_per_s=b200.hbm_bytes_per_s,
              in_bytes=2, out_bytes=2, params=b200.gemm, tiles=b200.gemm_tiles)
    narrow, wide = (gemm_time_s(8192, n, 1280, 1, schedule=STREAM_K_CUTLASS, **kw) for n in (128, 200))
    assert wide < 0.92 * narrow
    assert gemm_time_s(8192, 128, 1280, 1, **kw) < gemm_time_s(8192, 200, 1280, 1, **kw)
