"""The TPU presets feed the array from VMEM (the scaling book's ratio to HBM), and HBM is a floor under a GEMM.

Every expected number here is worked out by hand from the sources next to it in ``platforms.py``."""

from __future__ import annotations

from fractions import Fraction

import pytest

from astra_sim.chakra import make_node
from astra_sim.chakra import types as T

from astra_compute_systolic.cycles import compute_cycles
from astra_compute_systolic.geometry import Layer
from astra_compute_systolic.model import SystolicArray, SystolicComputeModel
from astra_compute_systolic.platforms import PRESETS, VMEM_OVER_HBM, generate, get_preset

BF16 = "Tensor(c10::BFloat16)"


def _mm(m, k, n):
    return make_node(1, "aten::mm", T.COMP_NODE, attrs={"is_cpu_op": False},
                     inputs_shapes=str([[m, k], [k, n]]), inputs_types=str([BF16, BF16]), inputs_values="")


def _v6e_model(hbm_gbps=1638.0):
    v6e = get_preset("tpu-v6e")
    return SystolicComputeModel(array=SystolicArray(v6e.config(), v6e.ghz), hbm_gbps=hbm_gbps)


@pytest.mark.parametrize("name, words", [
    # 22 x HBM GB/s / clock GHz = bytes a cycle, one third per interface, rounded down
    ("tpu-v6e", 3432),    # 22 x 1638 = 36,036 GB/s; / 3.5 GHz = 10,296 B a cycle; / 3 = 3,432
    ("tpu-v5p", 11586),   # 22 x 2765 = 60,830 GB/s; / 1.75 GHz = 34,760; / 3 = 11,586.7
    ("tpu-v4", 8380),     # 22 x 1200 = 26,400 GB/s; / 1.05 GHz = 25,142.9; / 3 = 8,380.95
    ("tpu-v3", 7021),     # 22 x 900 = 19,800 GB/s; / 0.94 GHz = 21,063.8; / 3 = 7,021.3
])
def test_the_feed_is_vmems_bandwidth_split_in_three(name, words):
    preset = get_preset(name)
    cfg = preset.config()
    assert VMEM_OVER_HBM == 22
    assert (cfg.ifmap_read_bw, cfg.filter_read_bw, cfg.ofmap_write_bw) == (words, words, words)
    n = preset.numbers()
    assert n["vmem_to_mxu_gbps"] == 22 * preset.hbm_gbps and n["sram_words_per_cycle"] == words
    # the ratio and the VMEM capacity name their sources; the equal split stays listed as an assumption
    assert "scaling-book" in n["sources"]["sram_bandwidth"] and "22x" in n["sources"]["sram_bandwidth"]
    assert "tpu_info.py" in n["sources"]["vmem"] and "vmem" not in n["assumptions"]
    assert "sram_bandwidth" in n["assumptions"]


def test_a_large_gemm_runs_unstalled_on_v6e_and_stalled_at_hbms_rate():
    """GPT-3 175B's MLP GEMM of the v6e case (M = 3 x 2048 tokens, K = 12288, N = 49152)."""
    v6e = get_preset("tpu-v6e")
    cfg = v6e.config()
    layer = Layer.gemm(6144, 49152, 12288)
    r = compute_cycles(layer, cfg)
    # weight stationary on 256 x 512: ceil(12288/256) x ceil(49152/512) = 48 x 96 folds of
    # 2R + T + C - 2 = 512 + 6144 + 512 - 2 = 7166 cycles
    assert r.folds == 48 * 96 and r.compute_cycles == 4608 * 7166 == 33_020_928
    assert r.stall_cycles == 0
    ideal = 6144 * 49152 * 12288 // (256 * 512)             # 28,311,552 cycles at the array's peak
    # plus the first fill, at most one 43,690 KiB scratchpad at 3,432 B a cycle: 44,738,560 / 3,432 = 13,036 cycles
    assert r.compute_cycles <= r.total_cycles_with_prefetch < r.compute_cycles + 13_036
    assert ideal / r.total_cycles_with_prefetch == pytest.approx(6144 / 7166, abs=0.001)   # 85.7 %
    # the old feed, HBM's 1638 GB/s / 3.5 GHz / 3 = 156 bytes a cycle: the stalls were 5.6 x the compute with
    # tpu-v4's 32/32/8 MiB scratchpads, 2.3 x with VMEM's thirds (77,106,596 cycles)
    hbm = int(Fraction(1638) / v6e.ghz / 3)
    assert hbm == 156
    old = compute_cycles(layer, cfg.with_(bandwidth=(hbm,), ifmap_bandwidth=hbm, filter_bandwidth=hbm))
    assert old.stall_cycles > 2 * old.compute_cycles
    v4_pads = cfg.with_(bandwidth=(hbm,), ifmap_bandwidth=hbm, filter_bandwidth=hbm, ifmap_sram_kb=32768,
                        filter_sram_kb=32768, ofmap_sram_kb=8192)
    assert compute_cycles(layer, v4_pads).stall_cycles > 5 * old.compute_cycles
    # half the sourced ratio (11 x HBM) stalls no more: the result does not hang on "around 22x" (only the
    # initial fill before the first array cycle takes longer)
    half = int(Fraction(11 * 1638) / v6e.ghz / 3)
    slower = compute_cycles(layer, cfg.with_(bandwidth=(half,), ifmap_bandwidth=half, filter_bandwidth=half))
    assert slower.stall_cycles == 0 and slower.total_cycles == r.total_cycles


def test_hbm_is_a_floor_under_a_thin_gemm():
    """65536 x 256 @ 256 x 512 in bf16 on v6e: one fold of the array, but 101 MB through HBM."""
    model = _v6e_model()
    node = _mm(65536, 256, 512)
    # array: one fold of 512 + 65536 + 512 - 2 = 66,558 cycles at 3.5 GHz (19.0 us), and the initial SRAM fill
    array_ns = model.array.ns(model.array.gemm_cycles(65536, 512, 256))
    assert 66_558 / 3.5 <= array_ns < 22_000
    # HBM: (65536 x 256 + 256 x 512 + 65536 x 512) x 2 B = 100,925,440 B over 1638 GB/s = 61,615.03 ns
    assert model.compute_time_ns(node, 0) == 61_616
    # without an HBM bandwidth the array's time stands
    assert _v6e_model(None).compute_time_ns(node, 0) == array_ns


def test_the_floor_leaves_a_compute_bound_gemm_alone():
    model = _v6e_model()
    # 6144 x 12288 @ 12288 x 49152: (75.5M + 604.0M + 302.0M) x 2 B = 1,962,934,272 B -> 1.20 ms through HBM,
    # under the array's 33.0M cycles / 3.5 GHz = 9.4 ms
    ns = model.compute_time_ns(_mm(6144, 12288, 49152), 0)
    assert ns == model.array.ns(model.array.gemm_cycles(6144, 49152, 12288))
    assert model.gemm_hbm_floor_ns(type("Op", (), {"batch": 1, "m": 6144, "n": 49152, "k": 12288,
                                                   "out_bytes": 2})()) == 1_198_373
    assert 9_400_000 < ns < 9_500_000


def test_every_preset_names_its_vmem():
    for preset in PRESETS.values():
        assert preset.numbers()["sources"]["vmem"].startswith("jax-ml/jax")


def test_v6e_8192_cubed_gemm_against_googles_measurement():
    """A check against the one published v6e GEMM rate, nothing fitted: AI-Hypercomputer/tpu-recipes
    ``microbenchmarks/README.md`` (at 2a33362, v6e-1, the kernel's own time from the trace): "matrix dimensions:
    (8192, 8192, 8192), time taken (median, ms): 1.328756094, TFLOPS: 827.474382048629" (90.1 % of 918)."""
    model = _v6e_model()
    r = compute_cycles(Layer.gemm(8192, 8192, 8192), get_preset("tpu-v6e").config())
    # weight stationary on 256 x 512: ceil(8192/256) x ceil(8192/512) = 32 x 16 folds of
    # 2R + T + C - 2 = 512 + 8192 + 512 - 2 = 9214 cycles: 4,717,568 cycles, no stalls
    assert r.folds == 512 and r.compute_cycles == 512 * 9214 == 4_717_568 and r.stall_cycles == 0
    ns = model.compute_time_ns(_mm(8192, 8192, 8192), 0)
    # 4,717,568 / 3.5 GHz = 1,347,876.6 ns (plus the first fill); HBM's 3 x 8192^2 x 2 B = 0.25 ms does not bind
    assert 1_347_876 <= ns < 1_360_000
    tflops = 2 * 8192 ** 3 / ns / 1e3
    assert 805 < tflops < 816                                  # 815.7 at the array's cycles
    measured_ns = 1_328_756.094
    assert abs(ns / measured_ns - 1) < 0.03                    # 1.4 % slower than Google's kernel


def test_v6e_memory_bound_ops_stream_at_googles_measured_copy_rate():
    """Memory-bound ops (and the GEMMs' HBM floor) on v6e run at Google's measured copy, not the page's 1638 GB/s:
    tpu-recipes ``microbenchmarks/README.md`` at 2a33362, a 33,554,432 B bf16 copy in 0.049359414 ms (median, the
    kernel's time from the trace), read + write counted: 2 x 33,554,432 / 49,359.414 ns = 1359.596 GB/s."""
    v6e = get_preset("tpu-v6e")
    assert 2 * 33_554_432 / 49_359.414 == pytest.approx(1359.596, abs=0.001)
    assert (v6e.hbm_gbps, v6e.stream_gbps) == (1638.0, 1359.6)
    assert generate("tpu-v6e")["options"]["systolic_hbm_gbps"] == 1359.6
    n = v6e.numbers()
    assert (n["hbm_bandwidth_gbps"], n["hbm_stream_gbps"]) == (1638.0, 1359.6)
    assert "2a33362" in n["sources"]["hbm_stream"] and "hbm_stream" not in n["assumptions"]
    # the feed keeps the scaling book's ratio to the nominal bandwidth: 22 x 1638, unchanged
    assert n["vmem_to_mxu_gbps"] == 22 * 1638.0
    # an add of two bf16 1000 x 1000 tensors: 3 x 2,000,000 B = 6,000,000 B / 1359.6 B/ns = 4413.06 -> 4414 ns
    # (at the nominal 1638 B/ns: 3663.00 -> 3664 ns)
    model = SystolicComputeModel(array=SystolicArray(v6e.config(), v6e.ghz),
                                 hbm_gbps=generate("tpu-v6e")["options"]["systolic_hbm_gbps"])
    add = make_node(6, "aten::add", T.COMP_NODE, attrs={"is_cpu_op": False},
                    inputs_shapes=str([[1000, 1000], [1000, 1000]]), inputs_types=str([BF16, BF16]))
    assert model.compute_time_ns(add, 0) == 4414
    assert _v6e_model().compute_time_ns(add, 0) == 3664
    # no other chip has a published copy measurement: they stream at their nominal bandwidth
    for name in ("tpu-v3", "tpu-v4", "tpu-v5p"):
        preset = get_preset(name)
        assert preset.stream_gbps == preset.hbm_gbps == generate(name)["options"]["systolic_hbm_gbps"]


def test_v6e_scratchpads_are_its_vmem_in_thirds():
    """v6e's SCALE-sim scratchpads are its own 128 MiB of VMEM (jax's tpu_info) in thirds, not tpu-v4's 32/32/8 MiB:
    with those, a plain 8192 x 8192 x 57344 GEMM (Llama 2 70B's MLP dgrad at 8192 tokens a chip) stalled the array
    for 28,390,376 cycles, 47.8 % of peak, where Google's own v6e GEMM (8192^3) runs at 90 %."""
    v6e = get_preset("tpu-v6e")
    cfg = v6e.config()
    assert (cfg.ifmap_sram_kb, cfg.filter_sram_kb, cfg.ofmap_sram_kb) == (43_690,) * 3     # 131,072 KiB // 3
    assert "tpu_info" in v6e.numbers()["sources"]["vmem"] and "sram" in v6e.numbers()["assumptions"]
    layer = Layer.gemm(8192, 8192, 57344)
    r = compute_cycles(layer, cfg)
    # weight stationary on 256 x 512: 57344/256 x 8192/512 = 224 x 16 = 3584 folds of 512 + 8192 + 512 - 2 = 9214
    assert r.folds == 3584 and r.compute_cycles == 3584 * 9214 == 33_022_976 and r.stall_cycles == 0
    old = compute_cycles(layer, cfg.with_(ifmap_sram_kb=32768, filter_sram_kb=32768, ofmap_sram_kb=8192))
    assert old.compute_cycles == 33_022_976 and old.stall_cycles == 28_390_376
