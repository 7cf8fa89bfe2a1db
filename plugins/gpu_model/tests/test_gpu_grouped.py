"""The grouped-GEMM model (MoE experts): a case by hand, against the dense GEMM of all rows, weight-bandwidth bound
for few tokens per expert, its fit on the measured H200 grouped GEMMs, and the compute model reading the
generator's grouped_gemm_* attributes."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.chakra import make_node, types as T
from astra_gpu_model.gemm import GemmParams, gemm_time_s
from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.grouped import (
    FIT_FILE, FUSED_MOE, KERNELS, TORCH_GROUPED_MM, group_shapes, grouped_gemm_time_s, grouped_params,
)
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.power_clock import sustained_gemm_factor

GPUS = ["A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM", "B200", "MI300X"]
#: expert GEMMs (N = gated 2 x expert FFN, K = hidden): Qwen3-30B-A3B (768, 2048), DeepSeek-V3 (2048, 7168)
EXPERT_SHAPES = [(2 * 768, 2048), (2 * 2048, 7168)]
BF16_PAIR = "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"


def _kw(gpu):
    return dict(peak_flops=gpu.peak_flops("bf16"), sm_count=gpu.sm_count, hbm_bytes_per_s=gpu.hbm_bytes_per_s,
                in_bytes=2, out_bytes=2, params=gpu.gemm, tiles=gpu.gemm_tiles)


def grouped(gpu, shapes, detail=False, kernel=FUSED_MOE):
    fit = grouped_params()
    return grouped_gemm_time_s(shapes, stream_bytes_per_s=fit.stream_rate(gpu.sm_count, gpu.boost_clock_mhz, kernel),
                               group_us=fit.group_us, detail=detail, **_kw(gpu))


def dense(gpu, m, n, k):
    return gemm_time_s(m, n, k, 1, **_kw(gpu))


def test_a_case_by_hand():
    """4 SMs of 1 TFLOP/s, one 128 x 128 tile, eta 0.5, no tile penalty or K overhead, t = t_c + t_m (p = 1),
    2 us launch, HBM 1 TB/s but a 0.5 TB/s stream rate, 1 us per group. Four experts of 100 tokens, one with
    none, N = 256, K = 512:
    - tiles: ceil(100/128) * ceil(256/128) = 2 per expert (100 rows padded to 128), 8 in all: 2 waves of 4;
    - one tile: 2 * 128 * 128 * 512 FLOP / (0.5 * 1e12) = 33.554432 us; two waves: 67.108864 us;
    - bytes: 4 * ((100*512 + 512*256) * 2 + 100*256*2) = 1,662,976 at 0.5 TB/s = 3.325952 us;
    - total 67.108864 + 3.325952 + 2 + 4 * 1 = 76.434816 us (the empty expert costs nothing)."""
    params = GemmParams(compute_efficiency=0.5, tile_penalty=0.0, k_overhead=0.0, hbm_efficiency=1.0,
                        launch_us=2.0, overlap_exponent=1.0)
    kw = dict(peak_flops=4e12, sm_count=4, hbm_bytes_per_s=1e12, in_bytes=2, out_bytes=2, params=params,
              tiles=((128, 128, 1),), stream_bytes_per_s=0.5e12, group_us=1.0)
    t, info = grouped_gemm_time_s([(100, 256, 512)] * 4 + [(0, 256, 512)], detail=True, **kw)
    assert info["waves"] == 2 and info["groups"] == 4 and info["bytes"] == 1_662_976
    assert t == pytest.approx(76.434816e-6, rel=1e-12)
    # K split over two experts (a weight gradient): 64 and 192 tokens, one 128 x 128 output tile each, one wave;
    # the wave lasts as long as the longer tile: 2 * 128 * 128 * 192 / 0.5e12 = 12.582912 us
    t, info = grouped_gemm_time_s(group_shapes(128, 128, 256, "k", [64, 192]), detail=True, **kw)
    nbytes = (128 * 256 + 256 * 128) * 2 + 2 * 128 * 128 * 2
    assert info["waves"] == 1 and info["compute_s"] == pytest.approx(12.582912e-6, rel=1e-12)
    assert t == pytest.approx(12.582912e-6 + nbytes / 0.5e12 + 2e-6 + 2e-6, rel=1e-12)
    # with the stream rate above HBM's, HBM bounds it
    assert grouped_gemm_time_s([(100, 256, 512)] * 4, **dict(kw, stream_bytes_per_s=5e12)) == pytest.approx(
        (67.108864 + 1_662_976 / 1e12 * 1e6 + 2 + 4) * 1e-6, rel=1e-12)


@pytest.mark.parametrize("name", GPUS)
def test_at_least_the_dense_gemm_of_all_rows_and_close_to_it_for_many_tokens(name):
    gpu = load_gpu(name)
    for n, k in EXPERT_SHAPES:
        for experts in (8, 32, 128):
            ratios = []
            for m in (1, 3, 4, 16, 64, 100, 256, 1024, 4096, 16384):
                g, d = grouped(gpu, [(m, n, k)] * experts), dense(gpu, experts * m, n, k)
                assert g >= d, (name, n, k, experts, m)
                ratios.append(g / d)
            assert ratios[-1] < 1.1, (name, n, k, experts, ratios)
            # 1 token per expert: E weights, not 1 (beyond the launch both pay)
            launch = gpu.gemm.launch_us * 1e-6
            one = (grouped(gpu, [(1, n, k)] * experts) - launch) / (dense(gpu, experts, n, k) - launch)
            assert one > 3, (name, n, k, experts, one, ratios)
            if name.startswith("H100"):
                assert ratios[-1] < 1.02, (n, k, experts, ratios)


@pytest.mark.parametrize("name", ["H100-SXM5-80GB", "H200-SXM"])
def test_few_tokens_per_expert_are_bound_by_reading_every_experts_weights(name):
    """torch._grouped_mm at its measured stream rate (the fused-MoE kernels: the decode test below)."""
    gpu = load_gpu(name)
    fit = grouped_params()
    kernel = TORCH_GROUPED_MM
    rate = min(gpu.gemm.hbm_efficiency * gpu.hbm_bytes_per_s, fit.stream_rate(gpu.sm_count, gpu.boost_clock_mhz, kernel))
    for n, k in EXPERT_SHAPES:
        for experts in (8, 32, 128):
            for m in (1, 4):
                t, info = grouped(gpu, [(m, n, k)] * experts, detail=True, kernel=kernel)
                weights = experts * n * k * 2 / rate
                fixed = gpu.gemm.launch_us * 1e-6 + experts * fit.group_us * 1e-6
                assert info["memory_s"] > info["compute_s"]
                assert weights <= t - fixed <= 1.1 * weights, (name, n, k, experts, m, t, weights)
                # 1 and 4 tokens per expert cost about the same: the weights, not the tokens, set the time
                assert grouped(gpu, [(4, n, k)] * experts, kernel=kernel) / \
                    grouped(gpu, [(1, n, k)] * experts, kernel=kernel) < 1.05


#: decode-like grouped GEMMs within this factor of the time to stream the touched experts' weights at
#: hbm_efficiency x HBM (the compute of their few tokens overlaps the stream; launch and per-group set-up added)
DECODE_TOLERANCE = 1.06


@pytest.mark.parametrize("name", ["H100-SXM5-80GB", "H200-SXM", "B200"])
def test_decode_grouped_gemms_stream_the_touched_weights_near_the_hbm_floor(name):
    """Issue 36: a serving decode step's grouped GEMMs took 1.55-1.6x (H200) to 2.3x (B200) the time to stream the
    weights they touch (torch._grouped_mm's measured stream rate); the fused-MoE kernels stream at the dense
    GEMM's hbm_efficiency x HBM (vLLM PR #44152's H20 measurement, see grouped.py)."""
    gpu = load_gpu(name)
    fit = grouped_params()
    floor_rate = gpu.gemm.hbm_efficiency * gpu.hbm_bytes_per_s
    for n, k in EXPERT_SHAPES + [(2 * 14336, 4096)]:  # + Mixtral 8x7B's w1
        for experts, m in ((8, 1), (8, 4), (32, 2), (64, 1), (128, 8)):
            t, info = grouped(gpu, [(m, n, k)] * experts, detail=True)
            if n * k * experts < 50e6:
                # (not modelled: 8 small experts, Qwen3-30B-A3B's 50 MB: a wave of padded 64-row tiles takes about
                # as long as the 11 us stream on H200 and adds to it; decode kernels use 16-row tiles there, as
                # vLLM's fused_moe default config does for M <= E)
                floor = n * k * experts * 2 / floor_rate + gpu.gemm.launch_us * 1e-6 + experts * fit.group_us * 1e-6
                assert floor <= t <= 1.25 * floor
                continue
            weights = experts * n * k * 2  # bytes of the touched experts' weights
            floor = weights / floor_rate + gpu.gemm.launch_us * 1e-6 + experts * fit.group_us * 1e-6
            assert floor <= t <= DECODE_TOLERANCE * floor, (name, n, k, experts, m, t / floor)
            before = grouped(gpu, [(m, n, k)] * experts, kernel=TORCH_GROUPED_MM)
            assert before >= t
    # by hand, H200, Mixtral 8x7B's w1 (N = 2 x 14336, K = 4096), 8 experts of 4 tokens:
    # weights 8 * 28672 * 4096 * 2 = 1,879,048,192 B and activations 8 * (4 * 4096 + 4 * 28672) * 2 = 2,097,152 B
    # at 0.93495 x 4.8 TB/s = 4.48776 TB/s: 419.17 us; + 4.334782 us launch + 8 x 0.005 us
    if name == "H200-SXM":
        t = grouped(gpu, [(4, 2 * 14336, 4096)] * 8)
        assert (gpu.gemm.hbm_efficiency, gpu.hbm_bytes_per_s, gpu.gemm.launch_us) == (0.93495, 4.8e12, 4.334782)
        hand = (1_879_048_192 + 2_097_152) / 4.48776e12 + 4.334782e-6 + 8 * 0.005e-6
        assert hand == pytest.approx(423.545e-6, rel=1e-4)
        assert hand <= t <= DECODE_TOLERANCE * hand  # (+2.5 %: the padded tiles' compute, overlapping)


@pytest.mark.parametrize("name", ["H100-SXM5-80GB", "H200-SXM"])
def test_many_tokens_per_expert_stay_compute_bound_whatever_the_kernel(name):
    gpu = load_gpu(name)
    for n, k in EXPERT_SHAPES:
        for experts, m in ((8, 4096), (32, 2048)):
            fused, info = grouped(gpu, [(m, n, k)] * experts, detail=True)
            assert info["compute_s"] > 2 * info["memory_s"]
            torch = grouped(gpu, [(m, n, k)] * experts, kernel=TORCH_GROUPED_MM)
            assert fused <= torch <= 1.02 * fused


def test_the_measured_stream_rate_is_torch_grouped_mm_s_not_the_gpu_s():
    """vLLM PR #44152 (H20, bf16, tuned fused_moe_kernel, Mixtral 8x7B's w1 E=8, N=14336, K=4096, top-2): 32 tokens
    read all 8 experts' weights in 0.279 ms. torch._grouped_mm's stream rate scaled to the H20's 78 SMs would take
    twice that; the fused-MoE kernel has no such cap."""
    h20 = load_gpu("H20")
    fit = grouped_params()
    measured = 8 * 14336 * 4096 * 2 / 279e-6
    assert measured / h20.hbm_bytes_per_s == pytest.approx(0.84, abs=0.005)
    assert fit.stream_rate(h20.sm_count, h20.boost_clock_mhz, TORCH_GROUPED_MM) < 0.55 * measured
    assert fit.stream_rate(h20.sm_count, h20.boost_clock_mhz) is None
    assert h20.gemm.hbm_efficiency * h20.hbm_bytes_per_s >= measured
    with pytest.raises(ValueError, match=r"grouped GEMM kernel must be one of fused-moe, torch._grouped_mm, got 'x'"):
        fit.stream_rate(132, 1980, "x")


def test_tile_quantisation_per_expert_and_idle_experts():
    gpu = load_gpu("H100-SXM5-80GB")
    n, k = EXPERT_SHAPES[1]
    # 8 experts of 129 tokens pay a further row tile each: 0.8 % more rows, over 10 % more time
    assert grouped(gpu, [(129, n, k)] * 8) > 1.1 * grouped(gpu, [(128, n, k)] * 8)
    # an expert that got no token reads no weights: 8 active of 128 cost what 8 experts cost
    assert grouped(gpu, [(4, n, k)] * 8 + [(0, n, k)] * 120) == grouped(gpu, [(4, n, k)] * 8)
    # the same token copies skewed over the experts take longer than spread evenly (the hot one's tiles)
    even, skewed = [(512, n, k)] * 8, [(2052, n, k)] + [(292, n, k)] * 7
    assert sum(s[0] for s in skewed) == sum(s[0] for s in even) == 4096
    assert grouped(gpu, skewed) >= grouped(gpu, even)


def test_the_fit_reproduces_its_file_and_beats_the_dense_timing():
    """The stored parameters are what fit/fit_grouped_gemm.py finds on the measured H200 grouped GEMMs, its
    predictions are the model's, and the grouped model's mean error is a fraction of the dense timing's."""
    from astra_sim_testing import load_script
    from pathlib import Path

    fit_mod = load_script(Path(__file__).resolve().parents[1] / "fit" / "fit_grouped_gemm.py")
    data = json.loads(FIT_FILE.read_text())
    gpu = load_gpu(data["gpu_preset"])
    rows = fit_mod.read_rows(fit_mod.DEFAULT_DATA)
    assert len(rows) == len(data["rows"]) == 12
    stream, group_us, loss = fit_mod.fit(gpu, rows)
    assert (round(stream), round(group_us, 4)) == (data["params"]["stream_bytes_per_s"], data["params"]["group_us"])
    params = grouped_params()
    for (e, m, n, k, t), row in zip(rows, data["rows"]):
        p = fit_mod.predict(gpu, e, m, n, k, params.stream_bytes_per_s, params.group_us)
        assert round(p * 1e6, 2) == row["predicted_us"] and round(t * 1e6, 2) == row["measured_us"]
    assert data["error"]["mean_abs"] < 0.08 and data["error"]["max_abs"] < 0.2
    assert data["error_dense_gemm_of_all_rows"]["mean_abs"] > 0.3


def _node(attrs, m=64, k=2048, n=1536):
    base = {"is_cpu_op": False, "inputs_shapes": f"[[{m}, {k}], [{k}, {n}]]", "inputs_types": BF16_PAIR}
    return make_node(1, "aten::mm", T.COMP_NODE, duration_micros=3, attrs=dict(base, **attrs))


class _Context:
    def __init__(self, gpu="H100"):
        self.options = {"gpu": gpu}
        self.warnings = []
        self.warn = self.warnings.append


def test_the_compute_model_times_nodes_marked_grouped():
    ctx = _Context()
    model = GpuComputeModel(ctx)
    # the H100's BF16 GEMMs run at the sustained cap (power_clock.sustained_gemm_factor, 0.91821 at its 700 W):
    # the helpers below time them at that fraction of the peak
    factor = sustained_gemm_factor(model.gpu, "bf16", model.board_power_w)
    peaks = model.gpu.tensor_tflops
    gpu = replace(model.gpu, tensor_tflops={**peaks, "bf16": peaks["bf16"] * factor})
    plain = model.compute_time_ns(_node({}), 0)
    fwd = model.compute_time_ns(_node({"grouped_gemm_dim": "m", "grouped_gemm_sizes": [8] * 8}), 0)
    assert fwd == math.ceil(grouped(gpu, [(8, 1536, 2048)] * 8) * 1e9) and fwd > 2.5 * plain
    wgrad = model.compute_time_ns(_node({"grouped_gemm_dim": "k", "grouped_gemm_sizes": [1024, 1024]},
                                        m=2048, k=2048, n=768), 0)
    assert wgrad == math.ceil(grouped(gpu, [(2048, 768, 1024)] * 2) * 1e9)
    assert not ctx.warnings
    # sizes that do not add up to the split dimension: warned, timed as one GEMM
    assert model.compute_time_ns(_node({"grouped_gemm_dim": "m", "grouped_gemm_sizes": [8, 8]}), 0) == plain
    assert any("add up to 16, not to the GEMM's m (64)" in w for w in ctx.warnings)


@settings(max_examples=60, deadline=None)
@given(dim=st.one_of(st.none(), st.sampled_from(["m", "k", "n", "", "M"]), st.integers(-5, 5)),
       sizes=st.one_of(st.none(), st.integers(-5, 10**6), st.text(max_size=3),
                       st.lists(st.integers(-3, 70), min_size=1, max_size=5),
                       st.lists(st.booleans(), min_size=1, max_size=3),
                       st.lists(st.floats(allow_nan=True), min_size=1, max_size=3)))
def test_any_grouped_attributes_give_a_time_or_a_warning(dim, sizes):
    """Whatever a trace carries in grouped_gemm_dim / grouped_gemm_sizes, the node gets a positive time; the
    grouped model is used only for a well-formed pair that adds up to the split dimension."""
    ctx = _Context()
    model = GpuComputeModel(ctx)
    attrs = {key: value for key, value in (("grouped_gemm_dim", dim), ("grouped_gemm_sizes", sizes))
             if value is not None}
    ns = model.compute_time_ns(_node(attrs), 0)
    assert isinstance(ns, int) and ns > 0
    ok = (dim in ("m", "k") and isinstance(sizes, list) and sizes
          and all(type(v) is int and v >= 0 for v in sizes) and sum(sizes) == (64 if dim == "m" else 2048))
    plain = model.compute_time_ns(_node({}), 0)
    assert (ns != plain) == bool(ok) or (ok and ns == plain)
    assert bool(ctx.warnings) == bool(attrs and not ok)


def test_contention_counts_every_experts_weights():
    """--gpu-contention's HBM share of a grouped GEMM reads each active expert's weights (3 of 4 here)."""
    from astra_gpu_model.contention import Contention

    model = GpuComputeModel(_Context())
    shapes = "[[64, 2048], [2048, 1536]]"
    one = Contention._op_bytes(model, ("aten::mm", shapes, BF16_PAIR, "", False, None))
    grouped_bytes = Contention._op_bytes(model, ("aten::mm", shapes, BF16_PAIR, "", False, ("m", (32, 16, 16, 0))))
    assert one == (64 * 2048 + 2048 * 1536 + 64 * 1536) * 2
    assert grouped_bytes == (64 * 2048 + 3 * 2048 * 1536 + 64 * 1536) * 2
