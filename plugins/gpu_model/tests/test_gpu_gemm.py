"""The GEMM model: monotonic in size, wave quantisation, memory-bound small GEMMs, scalar == numpy."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from astra_gpu_model.gemm import gemm_time_s, gemm_time_s_np, tile_config, tile_slots
from astra_gpu_model.gpu import load_gpu

GPUS = ["A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM", "B200", "MI300X"]


def gemm(gpu, m, n, k, batch=1, dtype="bf16", detail=False):
    size = gpu.dtype_bytes(dtype)
    return gemm_time_s(m, n, k, batch, peak_flops=gpu.peak_flops(dtype), sm_count=gpu.sm_count,
                       hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=size, out_bytes=size, params=gpu.gemm,
                       tiles=gpu.gemm_tiles, detail=detail)


@pytest.mark.parametrize("name", GPUS)
def test_time_is_monotonic_in_every_dimension(name):
    gpu = load_gpu(name)
    sizes = [1, 2, 8, 16, 33, 64, 100, 128, 200, 256, 384, 512, 777, 1024, 1536, 2048, 3000, 4096, 6144,
             8192, 12288, 16384, 32768]
    for fixed in ([4096, 4096], [1024, 8192], [8192, 1280], [64, 4096]):
        for axis in range(3):
            times = []
            for s in sizes:
                dims = list(fixed)
                dims.insert(axis, s)
                times.append(gemm(gpu, *dims))
            assert all(b >= a for a, b in zip(times, times[1:])), (name, fixed, axis, times)
    # and in the batch count
    times = [gemm(gpu, 128, 128, 64, batch=b) for b in (1, 2, 4, 16, 64, 256, 1024)]
    assert times == sorted(times)


@pytest.mark.parametrize("name", GPUS)
def test_one_tile_past_a_full_wave_costs_a_noticeably_longer_time(name):
    gpu = load_gpu(name)
    tm, tn, occ, sms = tile_config(gpu.gemm_tiles[0])  # the set's largest tile (128 x 256 on Hopper)
    slots = tile_slots(gpu.sm_count, occ, sms)
    a = max(d for d in range(1, int(slots ** 0.5) + 1) if slots % d == 0)  # a x b = one wave of tiles
    m, n, k = tm * a, tn * (slots // a), 8192
    full, info = gemm(gpu, m, n, k, detail=True)
    assert info["waves"] == 1 and info["tile"] == (tm, tn)
    more = gemm(gpu, m, n + tn, k)  # one more column of tiles: a more tiles than one wave holds
    flops_ratio = (n + tn) / n
    # the work grows by 3-8 %; the time by at least twice as much (a partial extra wave)
    assert more / full - 1 > 2 * (flops_ratio - 1), (name, more / full, flops_ratio)


def test_wave_quantisation_staircase_in_m():
    gpu = load_gpu("H100-SXM5-80GB")
    # N = 256 * 132 columns: every 128 rows of M is one more full wave of 128x256 tiles
    n, k = 256 * 132, 4096
    t256, t257, t384 = gemm(gpu, 256, n, k), gemm(gpu, 257, n, k), gemm(gpu, 384, n, k)
    assert t257 / t256 > 1.2  # one extra row (+0.4 % work) costs a third wave
    assert t384 / t257 < 1.05  # ... which the next 127 rows (+49 % work) then fill almost for free


def test_small_m_is_memory_bound_and_large_is_compute_bound():
    gpu = load_gpu("H100-SXM5-80GB")
    weights = 8192 * 8192 * 2
    t = gemm(gpu, 1, 8192, 8192)
    achievable = gpu.gemm.hbm_efficiency * gpu.hbm_bytes_per_s
    assert t == pytest.approx(weights / achievable + gpu.gemm.launch_us * 1e-6, rel=0.05)
    # decode-sized M costs about the same as M = 1 (weights dominate)
    assert gemm(gpu, 32, 8192, 8192) / t < 1.1
    big = gemm(gpu, 16384, 16384, 16384)
    tflops = 2 * 16384 ** 3 / big / 1e12
    assert 0.65 * 989.4 < tflops < 0.8 * 989.4


def test_dtypes_and_gpus_order_as_expected():
    h100, a100, b200, h200 = (load_gpu(n) for n in ("H100-SXM5-80GB", "A100-SXM4-80GB", "B200", "H200-SXM"))
    shape = (8192, 8192, 8192)
    assert gemm(h100, *shape, dtype="fp8") < gemm(h100, *shape, dtype="bf16") < gemm(h100, *shape, dtype="tf32")
    assert gemm(h100, *shape, dtype="tf32") < gemm(h100, *shape, dtype="fp32")
    assert gemm(b200, *shape) < gemm(h100, *shape) < gemm(a100, *shape)
    # H200 = H100 with faster HBM: same for compute-bound, faster for memory-bound GEMMs
    assert gemm(h200, *shape) == pytest.approx(gemm(h100, *shape), rel=0.005)
    assert gemm(h200, 1, 8192, 8192) < 0.8 * gemm(h100, 1, 8192, 8192)


def test_scalar_and_numpy_versions_agree():
    rng = random.Random(5)
    gpu = load_gpu("A100-SXM4-80GB")
    dims = [rng.choice([1, 3, 17, 64, 100, 128, 255, 512, 1000, 2048, 4096, 5120, 11008]) for _ in range(3 * 300)]
    m, n, k = dims[0::3], dims[1::3], dims[2::3]
    batch = [rng.choice([1, 1, 2, 8]) for _ in m]
    vec = gemm_time_s_np(m, n, k, batch, peak_flops=312e12, sm_count=108, hbm_bytes_per_s=2.039e12,
                         in_bytes=2, out_bytes=2, params=gpu.gemm, tiles=gpu.gemm_tiles)
    for i, (a, b, c, d) in enumerate(zip(m, n, k, batch)):
        s = gemm_time_s(a, b, c, d, peak_flops=312e12, sm_count=108, hbm_bytes_per_s=2.039e12, in_bytes=2,
                        out_bytes=2, params=gpu.gemm, tiles=gpu.gemm_tiles)
        assert s == pytest.approx(vec[i], rel=1e-12), (a, b, c, d)


def test_degenerate_shapes_cost_a_launch():
    gpu = load_gpu("H100-SXM5-80GB")
    for dims in itertools.product([0, 4], repeat=3):
        if 0 in dims:
            assert gemm(gpu, *dims) == pytest.approx(gpu.gemm.launch_us * 1e-6)
    assert np.isfinite(gemm(gpu, 1, 1, 1))
