"""A node marked ``attention_window`` (a sliding-window layer's band) is timed as the tiles the kernel executes:
FlashAttention's block.h tile ranges counted by hand at windows 128 and 1024 for 128 x 128 and 192 x 128 tiles, a
marked node's time by hand (FA3's tiles on an H100; NVIDIA's measured cuDNN window rate on a GB200, which gives back
the measured kernel time), and unmarked nodes (and marked ones where no tiles are known) as before."""

from __future__ import annotations

import math

import pytest

from astra_gpu_model.attention import band_pairs, band_tiles, band_work, window_tiles
from astra_gpu_model.model import GpuComputeModel
from astra_sim.chakra import make_node, types as T

BF = "'Tensor(c10::BFloat16)'"
FWD, BWD = "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward"


def test_tile_counts_by_hand():
    # 4k queries, window 128 (window_size (127, 0)), 128 x 128: query tile m runs key tiles [m - 1, m + 1): tile 0
    # one, the other 31 two -> 63 tiles, 252 keys a tile's loop; 2.0x the band's 128 x 129 / 2 + 3968 x 128 pairs
    assert band_pairs(4096, 128) == 516160
    assert band_tiles(4096, 128, 128, 128) == (63, 63 * 128 / 32)
    # 192 x 128 (FA3 at head dim 64): 22 query tiles; m runs [trunc((192m - 127) / 128), ceil(1.5 (m + 1))):
    # m 0: [0, 2), m 1: [0, 3), m 2-20: 3 each, m 21: [30, 32) -> 2 + 3 + 19 x 3 + 2 = 64, 3.05x the pairs
    assert band_tiles(4096, 128, 192, 128) == (64, 64 * 128 / 22)
    # window 1024, 128 x 128: m < 8 runs [0, m + 1) (1 + ... + 8 = 36), m >= 8 runs [m - 8, m + 1), 9 each (24 x 9)
    assert band_tiles(4096, 1024, 128, 128) == (36 + 24 * 9, 252 * 128 / 32)
    # window 1024, 192 x 128: n_max ceil(1.5 (m + 1)) (32 at most), n_min trunc((192m - 1023) / 128):
    # m 0-5: 2, 3, 5, 6, 8, 9 (from tile 0); m 6-20: 10 each; m 21: [23, 32) 9 -> 192 tiles, 1.29x the pairs
    assert band_tiles(4096, 1024, 192, 128) == (33 + 15 * 10 + 9, 192 * 128 / 22)
    assert 192 * 192 * 128 / band_pairs(4096, 1024) == pytest.approx(1.2855, abs=1e-4)
    # backward, 64 x 128 (FA3 / FA2 at head dim 128): key tile n runs query tiles [2n, 2n + 4) (get_m_block_min_max:
    # ceil((128 (n + 1) + 127) / 64) = 2n + 4), the last [62, 64): 31 x 4 + 2 = 126 tiles, 252 queries a loop
    assert band_tiles(4096, 128, 64, 128, backward=True) == (126, 126 * 64 / 32)
    assert band_tiles(4096, 128, 128, 128, backward=True) == (63, 252.0)  # square tiles: the forward's count
    # the tiles each kernel runs a band with (tile_size.h, the launch templates)
    assert window_tiles("fa3", False, 64) == (192, 128) and window_tiles("fa3", False, 128) == (128, 128)
    assert window_tiles("fa3", True, 64) == (128, 128) and window_tiles("fa3", True, 128) == (64, 128)
    assert window_tiles("fa2", False, 64) == (128, 128) and window_tiles("fa2", False, 128) == (128, 64)
    assert window_tiles("fa2", True, 128) == (64, 128) and window_tiles("fa2", False, 512) == (64, 64)


def _node(b, h, s, w, d, kernel, window=None, backward=False):
    """The generator's window node: ``s`` queries against ``w`` keys, no causal mask; ``window``: the mark."""
    attrs = {"is_cpu_op": False, "attention_kernel": kernel}
    if kernel is None:
        del attrs["attention_kernel"]
    if window is not None:
        attrs["attention_window"] = window
    q, kv = f"[{b}, {h}, {s}, {d}]", f"[{b}, {h}, {w}, {d}]"
    if backward:
        attrs.update(inputs_shapes=f"[{q}, {q}, {kv}, {kv}]", inputs_types=f"[{BF}, {BF}, {BF}, {BF}]",
                     inputs_values="[[], [], [], [], [], [], None, None, 0, 0, 0.0, False, None, None]")
        return make_node(0, BWD, T.COMP_NODE, attrs=attrs)
    attrs.update(inputs_shapes=f"[{q}, {kv}, {kv}]", inputs_types=f"[{BF}, {BF}, {BF}]",
                 inputs_values="[[], [], [], 0.0, False, False]")
    return make_node(0, FWD, T.COMP_NODE, attrs=attrs)


def _ns(model, flops, tflops_at_paper, ctas):
    """The model's time of ``flops`` at a Hopper kernel's measured TFLOP/s (the paper's 0.970 utilisation divided
    out, the node's own applied: ``ctas`` blocks on the SMs)."""
    gpu = model.gpu
    util = ctas / (-(-ctas // gpu.sm_count) * gpu.sm_count)
    eff = tflops_at_paper / 989.4 / (2048 / (16 * 132))
    return math.ceil((gpu.gemm.launch_us * 1e-6 + flops / (eff * gpu.peak_flops("bf16") * util)) * 1e9)


def test_a_marked_node_is_timed_by_hand():
    h100 = GpuComputeModel(None, "H100")
    # FA3, 8 heads of 64, 4k, window 128: 64 tiles of 192 x 128 a head, executed FLOPs 8 x 64 x 24576 x 2 x 128;
    # loop 372 keys -> the 512-key bar (clamped) of Fig. 5(a) at head dim 64: 333 TFLOP/s; 8 x 32 = 256 blocks
    executed = 8 * 64 * 192 * 128 * 2 * 128
    marked = h100.compute_time_ns(_node(1, 8, 4096, 128, 64, "fa3", 128), 0)
    assert marked == _ns(h100, executed, 333, 256)
    # unmarked: the q x w block (4096 x 128 pairs) at the same 512-key bar, as before
    block = 8 * 4096 * 128 * 2 * 128
    assert h100.compute_time_ns(_node(1, 8, 4096, 128, 64, "fa3"), 0) == _ns(h100, block, 333, 256)
    assert marked > 2.9 * (_ns(h100, block, 333, 256) - 4335)  # ~3x the block's compute time
    # backward, FA3 at head dim 64: 128 x 128 tiles, 63 a head, loop 252 -> Fig. 6(a)'s 512 bar, 272; x 2.5 FLOPs
    executed = 8 * 63 * 128 * 128 * 2 * 128 * 2.5
    assert h100.compute_time_ns(_node(1, 8, 4096, 128, 64, "fa3", 128, True), 0) == _ns(h100, executed, 272, 256)
    # cuDNN on the H100 at window 128 (no Hopper measurement): FlashAttention-3's tiles at cuDNN's 512 bar, 335
    executed = 8 * 64 * 192 * 128 * 2 * 128
    assert h100.compute_time_ns(_node(1, 8, 4096, 128, 64, "cudnn", 128), 0) == _ns(h100, executed, 335, 256)
    assert band_work(h100.gpu, "cudnn", False, 4096, 128, 64)[0] == "tiles"


def test_cudnn_where_nvidia_measured_the_window_gives_back_the_measured_time():
    # GB200, window 128, the benchmark's own shape (batch 2, 128 heads of 64, 4k): 161 TFLOP/s over the band's useful
    # FLOPs 2 x 128 x 516160 x 2 x 128 -> 210 us, NVIDIA's 0.210 ms (gpt_oss_20260424_100011.csv)
    gb200 = GpuComputeModel(None, "GB200")
    useful = 2 * 128 * 516160 * 2 * 128
    expected = math.ceil((gb200.gpu.gemm.launch_us * 1e-6 + useful / 161e12) * 1e9)
    assert gb200.compute_time_ns(_node(2, 128, 4096, 128, 64, "cudnn", 128), 0) == pytest.approx(expected, abs=1)
    assert useful / 161e12 == pytest.approx(0.210e-3, rel=0.002)
    # no kernel named on Blackwell is cuDNN's too; the backward at 182 TFLOP/s (x 2.5)
    assert gb200.compute_time_ns(_node(2, 128, 4096, 128, 64, None, 128), 0) == pytest.approx(expected, abs=1)
    expected = math.ceil((gb200.gpu.gemm.launch_us * 1e-6 + 2.5 * useful / 182e12) * 1e9)
    assert gb200.compute_time_ns(_node(2, 128, 4096, 128, 64, "cudnn", 128, True), 0) == pytest.approx(expected, abs=1)
    # H100 at window 1024: the H200's rows (8 heads x 32 = 256 blocks on 132 SMs; the benchmark's 2 x 64 x 32 = 4096)
    h100 = GpuComputeModel(None, "H100")
    how, pairs, eff = band_work(h100.gpu, "cudnn", False, 4096, 1024, 64)
    assert how == "measured" and pairs == 1024 * 1025 // 2 + 3072 * 1024
    assert eff == pytest.approx(336e12 / 989.4e12 / (4096 / (32 * 132)))


def test_unmarked_and_untiled_nodes_keep_their_time():
    # an A100 (the preset's attention_efficiency) and an FA2 node on Blackwell: no tiles known, the block as before
    for gpu, kernel in (("A100", "fa2"), ("GB200", "fa2")):
        model = GpuComputeModel(None, gpu)
        assert (model.compute_time_ns(_node(1, 8, 4096, 128, 64, kernel, 128), 0)
                == model.compute_time_ns(_node(1, 8, 4096, 128, 64, kernel), 0))
    # a malformed mark is warned about once and ignored
    warnings = []
    model = GpuComputeModel(None, "H100")
    model._warn = warnings.append
    plain = model.compute_time_ns(_node(1, 8, 4096, 128, 64, "fa3"), 0)
    assert model.compute_time_ns(_node(1, 8, 4096, 128, 64, "fa3", "128"), 0) == plain
    assert model.compute_time_ns(_node(1, 8, 4096, 128, 64, "fa3", 0), 0) == plain
    assert len(warnings) == 1 and "attention_window" in warnings[0]
