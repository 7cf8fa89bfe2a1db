"""Sustained clocks under the power limit (astra_gpu_model.power_clock): each number computed by hand in its comment."""

from types import SimpleNamespace

import pytest
from astra_sim.errors import ConfigError
from astra_sim.platforms import get_platform

from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import Op
from astra_gpu_model.power_clock import (SUSTAINED_GEMM, board_power_w, gemm_boost_power_w, settled_clock_ratio,
                                         sustained_gemm_factor, sustained_rate_ratio)

B200_BF16 = SUSTAINED_GEMM[("B200", "bf16")]
B200_FP8 = SUSTAINED_GEMM[("B200", "fp8")]


def test_measured_ratio_at_the_measured_board():
    # 1456.3 / 1770.9 = 0.822350; idle 0.14 x 1000 = 140 W; (1000 - 140) / (994 - 140) = 860 / 854 = 1.0070258,
    # ln = 0.0070012, / 1.32 = 0.0053040, exp = 1.0053181: 0.822350 x 1.0053181 = 0.826723
    assert B200_BF16.rate_ratio == pytest.approx(0.822350, rel=1e-5)
    assert sustained_rate_ratio(B200_BF16, 1000.0) == pytest.approx(0.826723, rel=1e-5)


def test_a_higher_board_limit_raises_the_sustained_rate_up_to_the_burst():
    # GB200's 1,200 W: 1060 / 854 = 1.2412178, ln = 0.2160937, / 1.32 = 0.1637074, exp = 1.1778694;
    # 0.822350 x 1.1778694 = 0.968621
    assert sustained_rate_ratio(B200_BF16, 1200.0) == pytest.approx(0.968621, rel=1e-5)
    # GB300's 1,400 W: (1260 / 854) ** (1 / 1.32) = 1.3424 -> 0.822350 x 1.3424 = 1.104 > 1: the burst rate
    assert sustained_rate_ratio(B200_BF16, 1400.0) == 1.0
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


def test_the_factor_applies_only_to_burst_fitted_presets(tmp_path):
    b200 = load_gpu("B200")
    assert sustained_gemm_factor(b200, "bf16", 1000.0) == pytest.approx(0.826723, rel=1e-5)
    # FP8 (and the block-scaled formats): 2795.7 / 3435.2 = 0.813839; 860 / 850 = 1.0117647, ln = 0.0116960,
    # / 1.32 = 0.0088606, exp = 1.0089000 -> 0.821082
    for dtype in ("fp8", "nvfp4", "mxfp8"):
        assert sustained_gemm_factor(b200, dtype, 1000.0) == pytest.approx(0.821082, rel=1e-5)
    assert sustained_gemm_factor(load_gpu("B300"), "bf16", 1200.0) == pytest.approx(0.968621, rel=1e-5)  # B200's
    # fitted on per-layer timings already at the sustained rate, or no sustained measurement: untouched
    for name in ("H100-SXM5-80GB", "H200-SXM", "A100-SXM4-80GB", "MI300X", "MI355X", "L40S"):
        assert load_gpu(name).sustained_gemm is None
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
    # compute-bound: the time follows 1 / factor, 0.968621 / 0.826723 = 1.171639 (the memory part is 0.1 %)
    assert hgx.op_seconds(gemm) / rack.op_seconds(gemm) == pytest.approx(1.171639, rel=2e-3)
    assert hgx.describe()["sustained_gemm"] == {"board_power_w": 1000.0,
                                                "factor": {"bf16": pytest.approx(0.826723, rel=1e-5),
                                                           "fp8": pytest.approx(0.821082, rel=1e-5)}}
    # under --power-limit-w the energy plugin scales from the TDP, so the factor is the TDP's
    assert _model("B200", platform="gb200-nvl72", gpu_board_power_w=rack_w, power_limit_w=900.0).board_power_w == 1000.0
    h100 = _model("H100")
    assert "sustained_gemm" not in h100.describe() and h100.board_power_w == 700.0
