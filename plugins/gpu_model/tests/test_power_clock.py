"""Sustained clocks under the power limit (astra_gpu_model.power_clock): each number computed by hand in its comment."""

from types import SimpleNamespace

import pytest
from astra_sim.errors import ConfigError
from astra_sim.platforms import get_platform

from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import Op
from astra_gpu_model.power_clock import (FULL_BOARD, SUSTAINED_GEMM, SustainedGemm, board_power_w, full_board_ratio,
                                         gemm_boost_power_w, model_tflops_at_shape, settled_clock_ratio,
                                         sustained_gemm_factor, sustained_rate_ratio)

B200_BF16 = SUSTAINED_GEMM[("B200", "bf16")]
B200_FP8 = SUSTAINED_GEMM[("B200", "fp8")]


def test_the_rate_curve_passes_through_both_measured_points():
    # 1 / rate = a / clock + b: a = (1 / 1456.3 - 1 / 1770.9) / (1 / 1339 - 1 / 1965)
    #   = (6.866717e-4 - 5.646846e-4) / (7.468260e-4 - 5.089059e-4) = 1.219871e-4 / 2.379201e-4 = 0.5127231;
    # b = 1 / 1770.9 - 0.5127231 / 1965 = 5.646846e-4 - 2.609278e-4 = 3.037568e-4
    slope, fixed = B200_BF16.clock_curve()
    assert (slope, fixed) == (pytest.approx(0.5127231, rel=1e-6), pytest.approx(3.037568e-4, rel=1e-5))
    assert B200_BF16.tflops_at_clock(1965.0) == pytest.approx(1770.9, rel=1e-9)
    assert B200_BF16.tflops_at_clock(1339.0) == pytest.approx(1456.3, rel=1e-9)
    assert B200_BF16.clock_at_tflops(1456.3) == pytest.approx(1339.0, rel=1e-9)
    # FP8: a = (1 / 2795.7 - 1 / 3435.2) / (1 / 1331 - 1 / 1965) = 6.65883e-5 / 2.424089e-4 = 0.2746939,
    # b = 1 / 3435.2 - 0.2746939 / 1965 = 2.911039e-4 - 1.397933e-4 = 1.513106e-4
    assert B200_FP8.clock_curve() == (pytest.approx(0.2746939, rel=1e-5), pytest.approx(1.513106e-4, rel=1e-5))
    # not proportional: half the time at the boost clock is the clock-independent part, 3.037568e-4 x 1770.9 = 0.538
    assert fixed * 1770.9 == pytest.approx(0.538, abs=1e-3)
    # a point the curve was not built on: GB200's maximum clock, 2,062 MHz (the same silicon; stas00/ml-engineering
    # 744d01e clock table) gives 1 / (0.5127231 / 2062 + 3.037568e-4) = 1 / 5.524085e-4 = 1810.3 TFLOP/s, against
    # GB200's MAMF row 1,822 (another torch); the proportional rule gave 1770.9 x 2062 / 1965 = 1858.3
    assert B200_BF16.tflops_at_clock(2062.0) == pytest.approx(1810.3, abs=0.1)
    # a rate falling faster than its clock would need a negative clock-independent part: (1 / 500 - 1 / 1000) /
    # (1 / 1500 - 1 / 2000) = 6, 1 / 1000 - 6 / 2000 = -0.002
    with pytest.raises(ValueError, match="fall less than in proportion"):
        SustainedGemm(1000.0, 500.0, 900.0, 1500.0, 2000.0, 1000.0, "made up").clock_curve()


def test_measured_ratio_at_the_measured_board():
    # 1456.3 / 1770.9 = 0.822350 at the measured 994 W; idle 0.14 x 1000 = 140 W; at 1000 W the clock moves by
    # (1000 - 140) / (994 - 140) = 860 / 854 = 1.0070258, ln = 0.0070012, / 1.32 = 0.0053040, exp = 1.0053181:
    # 1339 x 1.0053181 = 1346.121 MHz, 1 / (0.5127231 / 1346.121 + 3.037568e-4) = 1 / 6.846461e-4 = 1460.609,
    # / 1770.9 = 0.824783 (the proportional rule gave 0.822350 x 1.0053181 = 0.826723)
    assert B200_BF16.rate_ratio == pytest.approx(0.822350, rel=1e-5)
    assert sustained_rate_ratio(B200_BF16, 994.0) == pytest.approx(B200_BF16.rate_ratio, rel=1e-12)
    assert sustained_rate_ratio(B200_BF16, 1000.0) == pytest.approx(0.824783, rel=1e-5)


def test_a_higher_board_limit_raises_the_sustained_rate_up_to_the_burst():
    # GB200's 1,200 W: 1060 / 854 = 1.2412178, ln = 0.2160937, / 1.32 = 0.1637074, exp = 1.1778694: 1339 x 1.1778694 =
    # 1577.167 MHz, 1 / (0.5127231 / 1577.167 + 3.037568e-4) = 1 / 6.288478e-4 = 1590.210, / 1770.9 = 0.897967 (the
    # proportional rule: 0.822350 x 1.1778694 = 0.968621)
    assert sustained_rate_ratio(B200_BF16, 1200.0) == pytest.approx(0.897967, rel=1e-5)
    # GB300's 1,400 W: (1260 / 854) ** (1 / 1.32) = 1.342652, 1797.811 MHz, 1 / (2.851917e-4 + 3.037568e-4) = 1697.94,
    # / 1770.9 = 0.958800: below the burst (the proportional rule reached it, 1.104 > 1)
    assert sustained_rate_ratio(B200_BF16, 1400.0) == pytest.approx(0.958800, rel=1e-5)
    # the boost clock holds from the GEMM's boost power on (1556.9 W, below): the burst rate
    assert sustained_rate_ratio(B200_BF16, 1557.0) == 1.0
    with pytest.raises(ValueError, match="above the idle power"):
        sustained_rate_ratio(B200_BF16, 100.0)


def test_boost_power_and_the_settled_clock_invert_each_other():
    # clock 1339 / 1965 = 0.6814249, ln = -0.383569, x 1.32 = -0.506311, exp = 0.6027149;
    # P_boost = 140 + (994 - 140) / 0.6027149 = 140 + 1416.922 = 1556.922 W
    boost = gemm_boost_power_w(B200_BF16)
    assert boost == pytest.approx(1556.922, rel=1e-5)
    assert settled_clock_ratio(boost, 140.0, 994.0) == pytest.approx(1339.0 / 1965.0, rel=1e-9)
    assert settled_clock_ratio(900.0, 140.0, 1000.0) == 1.0  # a phase under the limit keeps the boost clock
    # H200 BF16 at 700 W: 1465 / 1980 = 0.739899, ** 1.32 = 0.671963 -> 98 + 595 / 0.671963 = 983.5 W
    assert gemm_boost_power_w(SUSTAINED_GEMM[("H200-SXM", "bf16")]) == pytest.approx(983.5, abs=0.1)


def test_a_full_board_settles_below_one_gpu_alone():
    # MSMF's benchmarks README (082816f), BF16: B200 1426.4 (all 8 busy, n = 40) / 1455.7 (GPU0 alone) = 0.979872;
    # the H200's -0.6 % is inside its alone run-to-run range and not applied to the Hopper cap: 1, as a silicon with no
    # such measurement
    assert FULL_BOARD["B200"].ratio == pytest.approx(0.979872, rel=1e-5)
    assert full_board_ratio("H200-SXM") == full_board_ratio("MI300X") == full_board_ratio(None) == 1.0
    # B200 BF16 at 1,000 W: 1456.3 x 0.979872 = 1426.987 TFLOP/s, on the curve at 0.5127231 / (1 / 1426.987 -
    # 3.037568e-4) = 0.5127231 / 3.970205e-4 = 1291.427 MHz; x the DVFS gain 1.0053181 = 1298.295 MHz,
    # 1 / (3.949200e-4 + 3.037568e-4) = 1431.277, / 1770.9 = 0.808220 (alone: 0.824783)
    assert sustained_rate_ratio(B200_BF16, 1000.0, full_board=0.979872) == pytest.approx(0.808220, rel=1e-5)
    # GB300's 1,400 W: 1291.427 x 1.342652 = 1733.944 MHz, 1 / (2.956974e-4 + 3.037568e-4) = 1668.18, 0.941997
    assert sustained_rate_ratio(B200_BF16, 1400.0, full_board=0.979872) == pytest.approx(0.941997, rel=1e-5)
    # where the boost clock holds, busy siblings do not slow the burst: at 1,700 W (1560 / 854) ** (1 / 1.32) = 1.57851,
    # 1291.427 x 1.57851 = 2038.5 MHz > 1965
    assert sustained_rate_ratio(B200_BF16, 1700.0, full_board=0.979872) == 1.0


def test_the_factor_applies_only_to_burst_fitted_presets(tmp_path):
    b200 = load_gpu("B200")
    # the full board's (test_a_full_board_settles_below_one_gpu_alone): 0.808220
    assert sustained_gemm_factor(b200, "bf16", 1000.0) == pytest.approx(0.808220, rel=1e-5)
    # FP8 (and the block-scaled formats): 2795.7 x 0.979872 (BF16's full board: ASSUMPTION) = 2739.428 TFLOP/s at
    # 0.2746939 / (3.650397e-4 - 1.513106e-4) = 1285.243 MHz; 860 / 850 = 1.0117647, ln = 0.0116960, / 1.32 =
    # 0.0088606, exp = 1.0089000 -> 1296.682 MHz, 1 / (2.118441e-4 + 1.513106e-4) = 2753.645, / 3435.2 = 0.801597
    for dtype in ("fp8", "nvfp4", "mxfp8"):
        assert sustained_gemm_factor(b200, dtype, 1000.0) == pytest.approx(0.801597, rel=1e-5)
    # B300 at 1,200 W, B200's pair and board: 1291.427 x 1.1778694 = 1521.132 MHz, 1 / (3.370674e-4 + 3.037568e-4)
    # = 1560.488, / 1770.9 = 0.881183
    assert sustained_gemm_factor(load_gpu("B300"), "bf16", 1200.0) == pytest.approx(0.881183, rel=1e-5)
    # no sustained measurement of the GPU or its die: untouched (the Hopper SXM parts are capped, below)
    for name in ("A100-SXM4-80GB", "MI300X", "MI355X", "L40S", "H100-PCIe-80GB", "H100-NVL-94GB", "H20"):
        assert load_gpu(name).sustained_gemm is None and load_gpu(name).sustained_gemm_cap is None
        assert sustained_gemm_factor(load_gpu(name), "bf16", 700.0) == 1.0
    assert sustained_gemm_factor(b200, "fp32", 1000.0) == 1.0  # CUDA-core GEMMs: no measured pair
    assert sustained_gemm_factor(b200, "bf16", None) == 1.0
    # a user's YAML inherits its base's pair, may turn it off, and may name only a measured GPU
    (tmp_path / "mine.yaml").write_text("base: B200\nname: my-b200\n")
    (tmp_path / "off.yaml").write_text("base: B200\nname: my-b200\nsustained_gemm: null\n")
    (tmp_path / "bad.yaml").write_text("base: B200\nname: my-b200\nsustained_gemm: H100\n")
    assert load_gpu(str(tmp_path / "mine.yaml")).sustained_gemm == "B200"
    assert load_gpu(str(tmp_path / "off.yaml")).sustained_gemm is None
    with pytest.raises(ConfigError, match=r"bad.yaml: key 'sustained_gemm' must name a GPU with a published "
                                          r"sustained GEMM rate \(B200, H200-SXM\) or be null, got 'H100'"):
        load_gpu(str(tmp_path / "bad.yaml"))


def test_board_power_comes_from_the_platform_else_the_preset():
    b200 = load_gpu("B200")
    assert board_power_w(b200) == 1000.0
    assert board_power_w(b200, "hgx-b200") == 1000.0
    assert board_power_w(b200, "gb200-nvl72") == 1200.0
    assert board_power_w(b200, get_platform("gb200-nvl72-64")) == 1200.0  # a Platform object
    assert board_power_w(load_gpu("B300"), "gb300-nvl72") == 1400.0


def _model(gpu, **options):
    return GpuComputeModel(SimpleNamespace(options={"gpu": gpu, **options}))


def test_the_model_slows_a_compute_bound_gemm_by_the_factor():
    gemm = Op("gemm", "aten::mm", dtype="bf16", m=16384, n=16384, k=16384)
    # the options each platform implies (resolve_gpu_platform: a rack tray's gpu_board_power_w)
    rack_w = get_platform("gb200-nvl72").board_power_w
    hgx, rack = _model("B200", platform="hgx-b200"), _model("B200", platform="gb200-nvl72", gpu_board_power_w=rack_w)
    # compute-bound: the time follows 1 / factor, 0.881183 / 0.808220 = 1.090277 (memory 0.1 %)
    assert hgx.op_seconds(gemm) / rack.op_seconds(gemm) == pytest.approx(1.090277, rel=2e-3)
    assert hgx.describe()["sustained_gemm"] == {"board_power_w": 1000.0,
                                                "factor": {"bf16": pytest.approx(0.808220, rel=1e-5),
                                                           "fp8": pytest.approx(0.801597, rel=1e-5)}}
    # under --power-limit-w the energy plugin scales from the TDP, so the factor is the TDP's
    assert _model("B200", platform="gb200-nvl72", gpu_board_power_w=rack_w, power_limit_w=900.0).board_power_w == 1000.0
    a100 = _model("A100")
    assert "sustained_gemm" not in a100.describe() and a100.board_power_w == 400.0


H200_BF16 = SUSTAINED_GEMM[("H200-SXM", "bf16")]
H200_FP8 = SUSTAINED_GEMM[("H200-SXM", "fp8")]


def test_the_model_rate_at_msmf_shape_by_hand():
    # H200 BF16 at MSMF's 8192 x 8448 x 20480: 2 x 8192 x 8448 x 20480 = 2.834678e12 FLOP; tiles 128 x 256:
    # 64 x 33 = 2,112 = 16 waves of 132 SMs, whole (tile efficiency 1 at the reference tile). Compute time
    # 2.834678e12 / (0.762556 x 989.4e12) x (20480 + 0.023747) / 20480 = 3.757152 ms; memory (8192 x 20480 + 20480 x
    # 8448 + 8192 x 8448) x 2 B = 819,986,432 B at 0.93495 x 4.8 TB/s = 0.182720 ms, (0.18272 / 3.757152) ** 3.3 =
    # 4.64e-5, so x 1.0000141 (p-norm, p 3.3): 3.757205 ms; + launch 4.334782 us = 3.761540 ms -> 753.59 TFLOP/s
    assert model_tflops_at_shape(load_gpu("H200-SXM"), "bf16", H200_BF16.shape) == pytest.approx(753.59, rel=2e-4)
    # FP8 at 8448 x 8192 x 16384: 0.762556 x 0.8383 (fp8_gemm_scale) x 1978.9 = 1,265.0 bound, 16 whole waves again:
    # 1,261.9 after K overhead, memory and launch
    assert model_tflops_at_shape(load_gpu("H200-SXM"), "fp8", H200_FP8.shape) == pytest.approx(1261.9, rel=2e-4)


def test_a_per_layer_fit_is_capped_at_the_sustained_rate():
    h200 = load_gpu("H200-SXM")
    assert h200.sustained_gemm is None and h200.sustained_gemm_cap == "H200-SXM"
    # the sustained rate at 700 W: idle 0.14 x 700 = 98 W; (700 - 98) / (693 - 98) = 602 / 595 = 1.0117647, ln =
    # 0.0116960, / 1.32 = 0.0088606, exp = 1.0089000: 708.5 x 1.0089 = 714.806 TFLOP/s (at most the 841.9 burst)
    assert H200_BF16.sustained_tflops_at(700.0) == pytest.approx(714.806, rel=1e-5)
    # MSMF's shape alone: 714.806 / 753.59 (the model there, above) = 0.94853; the cap is the median over every
    # measured shape (test_the_cap_is_the_median_over_the_measured_shapes): 0.91529, at 8192^3 (no full-board term on
    # the cap: test_a_full_board_settles_below_one_gpu_alone)
    assert sustained_gemm_factor(h200, "bf16", 700.0) == pytest.approx(0.91529, rel=2e-4)
    for dtype in ("fp16", "tf32"):  # the BF16 class's factor (ASSUMPTION for TF32: no measurement of its own)
        assert sustained_gemm_factor(h200, dtype, 700.0) == sustained_gemm_factor(h200, "bf16", 700.0)
    # FP8: MSMF's 1288.7 x 1.0089 = 1300.17 over the model's 1,261.9 = 1.0303 > 1, but the median over the four
    # measured shapes is (0.97993 + 0.99288) / 2 = 0.98641
    assert H200_FP8.sustained_tflops_at(700.0) == pytest.approx(1300.17, rel=1e-5)
    assert sustained_gemm_factor(h200, "fp8", 700.0) == pytest.approx(0.98641, rel=2e-4)
    # a lower limit moves every shape by its own power: MSMF's (600 - 98) / 595 = 0.8436975, ln = -0.1699755, / 1.32 =
    # -0.1287693, exp = 0.8791765: 708.5 x 0.8791765 = 622.897 / 753.59 = 0.82658; the median shape (8192^3 at
    # 691.5 W): (502 / 593.5) ** (1 / 1.32): ln 0.845830 = -0.167437, x 0.757576 = -0.126846, exp = 0.880869,
    # 662.6 x 0.880869 = 583.664 / 731.766 = 0.79761
    assert sustained_gemm_factor(h200, "bf16", 600.0) == pytest.approx(0.79761, rel=2e-4)
    # a limit high enough for the boost clock: capped at the burst, 841.9 / 753.59 > 1 -> 1
    assert sustained_gemm_factor(h200, "bf16", 1000.0) == 1.0
    # the H100 SXM5, H800 and Grand Teton's H100 take H200's measurement (ASSUMPTION: the same GH100 at 700 W)
    for name in ("H100-SXM5-80GB", "H800-SXM5-80GB", "H100-SXM-96GB-HBM2e"):
        assert load_gpu(name).sustained_gemm_cap == "H200-SXM"
        assert sustained_gemm_factor(load_gpu(name), "bf16", 700.0) == pytest.approx(0.918, abs=1e-3)


def test_the_cap_slows_compute_bound_gemms_and_not_memory_bound_ones(tmp_path):
    (tmp_path / "uncapped.yaml").write_text("base: H100-SXM5-80GB\nname: h100-uncapped\nsustained_gemm_cap: null\n")
    capped, uncapped = _model("H100"), _model(str(tmp_path / "uncapped.yaml"))
    big = Op("gemm", "aten::mm", dtype="bf16", m=16384, n=16384, k=16384)
    # compute-bound: time / 0.91821 -> x 1.08908 (the memory part is under 0.1 %)
    assert capped.op_seconds(big) / uncapped.op_seconds(big) == pytest.approx(1 / 0.91821, rel=2e-3)
    fp8 = Op("gemm", "aten::_scaled_mm", dtype="fp8", m=16384, n=16384, k=16384)
    assert capped.op_seconds(fp8) / uncapped.op_seconds(fp8) == pytest.approx(1 / 0.98815, rel=2e-3)
    # a decode GEMM (8 tokens x 8192 x 8192 bf16, 64 x 128 tiles split 4 ways in K, one wave): memory 43.61 us
    # (weights), compute 14.19 us (the padded tiles) -> 14.96 us capped. p-norm (p 3.3): (14.19 / 43.61) ** 3.3 =
    # 0.02460, 43.61 x 1.02460 ** (1 / 3.3) = 43.932 us; capped 14.19 / 0.91821 = 15.455 us, (15.455 / 43.61) ** 3.3
    # = 0.03263, 43.61 x 1.03263 ** (1 / 3.3) = 44.036 us; + launch 4.335 us: 48.267 -> 48.371 us, +0.22 %: the
    # memory hides almost all of it
    decode = Op("gemm", "aten::mm", dtype="bf16", m=8, n=8192, k=8192)
    assert capped.op_seconds(decode) / uncapped.op_seconds(decode) == pytest.approx(1.00215, abs=2e-4)
    assert capped.describe()["sustained_gemm"] == {"board_power_w": 700.0,
                                                   "factor": {"bf16": pytest.approx(0.91821, abs=2e-4),
                                                              "fp8": pytest.approx(0.98815, abs=2e-4)}}


def test_the_cap_is_the_median_over_the_measured_shapes():
    h200 = load_gpu("H200-SXM")
    points = H200_BF16.shape_points()
    assert len(points) == 7 and points[0].shape == H200_BF16.shape  # MSMF's, then the 2026-11-30 H200 runs'
    assert len(h200.sustained_cap_tflops["bf16"]) == 7
    # 8192^3 at 691.5 W (run 1): (602 / 593.5) ** (1 / 1.32): ln 1.014322 = 0.014221, x 0.757576 = 0.010773,
    # exp = 1.010832 -> 662.6 x 1.010832 = 669.777 TFLOP/s at 700 W; the model there 731.766: 0.91529
    p = points[1]
    assert p.shape == (8192, 8192, 8192) and p.tflops_at(H200_BF16, 700.0) == pytest.approx(669.777, rel=1e-5)
    ratios = sorted(q.tflops_at(H200_BF16, 700.0) / m for q, m in zip(points, h200.sustained_cap_tflops["bf16"]))
    # seven ratios 0.8925 (32768 x 14336 x 4096) .. 0.9485 (MSMF's best shape): the fourth is 8192^3's
    assert ratios[0] == pytest.approx(0.89252, rel=3e-4) and ratios[-1] == pytest.approx(0.94853, rel=3e-4)
    assert sustained_gemm_factor(h200, "bf16", 700.0) == ratios[3] == pytest.approx(0.91529, rel=2e-4)
    # a shape's rate moved up stops at the burst: MSMF's sustained over burst 0.84155 bounds the gain at 1.18828
    assert p.tflops_at(H200_BF16, 5000.0) == pytest.approx(662.6 / 0.8415489, rel=1e-6)


def test_the_burst_and_cap_keys_exclude_each_other(tmp_path):
    (tmp_path / "both.yaml").write_text("base: H100-SXM5-80GB\nname: both\nsustained_gemm: B200\n")
    with pytest.raises(ConfigError, match="exclude each other"):
        load_gpu(str(tmp_path / "both.yaml"))
    (tmp_path / "bad.yaml").write_text("base: H100-SXM5-80GB\nname: bad\nsustained_gemm_cap: H100\n")
    with pytest.raises(ConfigError, match="key 'sustained_gemm_cap' must name a GPU with a published sustained"):
        load_gpu(str(tmp_path / "bad.yaml"))


def test_the_cap_is_the_whole_boards_under_contention():
    from astra_gpu_model.contention import contended_gpu

    h100 = load_gpu("H100")
    # 32 SMs taken by NCCL: the copy has 100 SMs and 100 / 132 of the peaks, but its cap stays the board's
    # (the reference rates are computed once as the preset loads): 0.91821 either way
    slowed = contended_gpu(h100, 32, 0.2)
    assert slowed.sm_count == 100 and slowed.sustained_cap_tflops == h100.sustained_cap_tflops
    assert sustained_gemm_factor(slowed, "bf16", 700.0) == sustained_gemm_factor(h100, "bf16", 700.0)
    assert sustained_gemm_factor(h100, "bf16", 700.0) == pytest.approx(0.91821, abs=2e-4)


def test_the_check_script_lists_each_rule():
    from astra_sim_testing import load_script
    from pathlib import Path

    module = load_script(Path(__file__).resolve().parents[1] / "fit" / "check_sustained_gemm.py")
    rows = {(r[0], r[2]): r for r in module.rows()}
    # H200 BF16: model 753.59 at MSMF's shape, sustained 714.806 at 700 W (both by hand above); the factor is the
    # median over every measured shape, 0.91529
    name, rule, _, model, sustained, burst, limit, factor = rows[("H200-SXM", "bf16")]
    assert rule == "cap, median of measured shapes" and limit == 700 and burst == 841.9
    assert (model, sustained, factor) == (pytest.approx(753.59, rel=2e-4), pytest.approx(714.806, rel=1e-5),
                                          pytest.approx(0.91529, rel=2e-4))
    assert rows[("B200", "bf16")][1] == "burst x MSMF/MAMF" and rows[("B200", "bf16")][7] == pytest.approx(0.808220,
                                                                                                          rel=1e-5)
    assert {r[0] for r in rows.values()} == {"B200", "B300", "GB200", "H100-SXM-96GB-HBM2e", "H100-SXM5-80GB",
                                            "H200-SXM", "H800-SXM5-80GB"}
