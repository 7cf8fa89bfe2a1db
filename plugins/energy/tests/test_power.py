"""The power model: class powers, the clock-power curve, limits, the data file's sources and the alpha fit."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.errors import ConfigError

from astra_energy.fit import check, fit_alpha, main as fit_main
from astra_energy.power import CLASSES, gpu_power, known_gpus, power_data
from astra_energy.system import default_pue, system_power


#: the H200 SXM's measured boost powers by hand (power.json measured_class_power H200-SXM-2026-11-30, idle 81.9 W,
#: alpha 1.32): P = 81.9 + (P_settled - 81.9) / (f / 1980) ** 1.32
H200_GEMM_W = 81.9 + (691.5 - 81.9) / (1460.7 / 1980) ** 1.32  # 992.7 W
H200_ATTENTION_W = 81.9 + (677.9 - 81.9) / (1957.6 / 1980) ** 1.32  # 686.9 W (FlashAttention-2)


def test_gh100_sxm_class_powers_are_the_h200_measurement_moved_to_the_boost_clock():
    assert H200_GEMM_W == pytest.approx(992.7, abs=0.05) and H200_ATTENTION_W == pytest.approx(686.9, abs=0.05)
    for name in ("H200-SXM", "H100-SXM5-80GB", "H100-SXM-96GB-HBM2e", "H800-SXM5-80GB"):
        gpu = gpu_power(name)
        assert (gpu.tdp_w, gpu.idle_w, gpu.max_clock_mhz, gpu.alpha) == (700, 81.9, 1980, 1.32)
        # memory: the HBM copy ran uncapped at 1980 MHz, so its 572 W is its boost power; fp32 and comm: fractions
        assert gpu.class_w == {"gemm": pytest.approx(H200_GEMM_W), "attention": pytest.approx(H200_ATTENTION_W),
                               "memory": pytest.approx(572.0), "gemm_fp32": 525, "comm": 210}, name
    h100 = gpu_power("H100-SXM5-80GB")
    assert h100.watts("idle") == 81.9
    # at the 700 W TDP the GEMM class is capped: 1980 x (618.1 / 910.8) ** (1 / 1.32) = 1476 MHz, drawing 700 W
    r = h100.settled_clock_ratio("gemm")
    assert 1980 * r == pytest.approx(1980 * (618.1 / (H200_GEMM_W - 81.9)) ** (1 / 1.32)) == pytest.approx(1476.1, abs=0.1)
    assert h100.watts("gemm", r) == pytest.approx(700)
    # the law reproduces the measured settled point
    assert h100.watts("gemm", 1460.7 / 1980) == pytest.approx(691.5)
    assert h100.watts("attention", 1957.6 / 1980) == pytest.approx(677.9)
    assert gpu_power("no-such-gpu") is None
    # the other GPUs keep the fractions of their TDP
    a100 = gpu_power("A100-SXM4-80GB")
    assert a100.class_w == {"gemm": 400, "gemm_fp32": 300, "attention": 360, "memory": pytest.approx(172), "comm": 120}
    assert a100.watts("gemm", 0.5) == pytest.approx(60 + 340 * 0.5 ** 1.32)


def test_boost_power_is_the_clock_power_law_solved_for_it():
    from astra_energy.power import boost_power_w, measured_class_w

    assert boost_power_w(572.0, 1980, 1980, 81.9, 1.32) == 572.0  # at the maximum clock: itself
    assert boost_power_w(380, 990, 1980, 80, 1.32) == pytest.approx(80 + 300 * 2 ** 1.32)
    assert measured_class_w("H200-SXM-2026-11-30") == {"gemm": pytest.approx(H200_GEMM_W),
                                                        "attention": pytest.approx(H200_ATTENTION_W),
                                                        "memory": pytest.approx(572.0)}
    with pytest.raises(ValueError):
        boost_power_w(700, 2000, 1980, 80, 1.32)
    with pytest.raises(ValueError):
        boost_power_w(70, 1000, 1980, 80, 1.32)


def test_a_cap_settles_the_clock_where_the_class_draws_the_limit():
    h100 = gpu_power("H100-SXM5-80GB")
    r = h100.settled_clock_ratio("gemm", 450)
    assert r == pytest.approx((368.1 / (H200_GEMM_W - 81.9)) ** (1 / 1.32))
    assert h100.watts("gemm", r) == pytest.approx(450)
    # a class under the limit keeps the maximum clock (memory 572 W < 600 W, comm 210 W < 450 W)
    assert h100.settled_clock_ratio("memory", 600) == 1.0 == h100.settled_clock_ratio("comm", 450)
    assert h100.settled_clock_ratio("memory", 450) == pytest.approx((368.1 / 490.1) ** (1 / 1.32))
    # at the TDP the capped GEMM's time ratio is 1: the rates were calibrated there
    assert h100.settled_clock_ratio("gemm") < 1.0 == h100.time_clock_ratio("gemm")
    # a clock lock caps every class; the limit still applies below it
    assert h100.settled_clock_ratio("comm", None, 990) == 0.5
    assert h100.settled_clock_ratio("gemm", 300, 1900) == pytest.approx((218.1 / (H200_GEMM_W - 81.9)) ** (1 / 1.32))
    assert h100.settled_clock_ratio("idle", 300, 990) == 0.5


def test_grand_tetons_500_w_default_limit_slows_gemm_attention_and_memory_without_a_flag():
    # torchtitan: "We used the default 500W power limit, although tuning it up to 700W TDP can ..."; the rates the
    # gpu model times it with are the H100 SXM5's at 700 W, so the time ratio is the clock at 500 W over 700 W's
    gt = gpu_power("H100-SXM-96GB-HBM2e")
    assert (gt.tdp_w, gt.default_limit, gt.idle_w, gt.max_clock_mhz) == (700, 500, 81.9, 1980)
    # GEMMs are capped at both limits (992.7 W at full clock): (418.1 / 618.1) ** (1 / 1.32) = 0.74367, P_gemm cancels
    assert gt.time_clock_ratio("gemm") == pytest.approx((418.1 / 618.1) ** (1 / 1.32))
    assert gt.time_clock_ratio("gemm") == pytest.approx(0.74367, abs=1e-5)
    # FlashAttention-2 draws 686.9 W < 700 W at full clock: (418.1 / 605.0) ** (1 / 1.32) = 0.7558
    assert gt.time_clock_ratio("attention") == pytest.approx((418.1 / (H200_ATTENTION_W - 81.9)) ** (1 / 1.32))
    assert gt.time_clock_ratio("attention") == pytest.approx(0.7558, abs=1e-4)
    # a saturated memory-bound kernel draws 572 W > 500 W: (418.1 / 490.1) ** (1 / 1.32) = 0.8866
    assert gt.time_clock_ratio("memory") == pytest.approx((418.1 / 490.1) ** (1 / 1.32))
    # --power-limit-w 700 (the TDP) gives the rates back; the flag still accepts up to the TDP only
    assert gt.time_clock_ratio("gemm", 700) == 1.0
    with pytest.raises(ConfigError, match="--power-limit-w"):
        gt.check_limits(701)
    # every other GPU's default limit is its TDP: no change without a flag
    assert gpu_power("H100-SXM5-80GB").default_limit == 700
    assert gpu_power("H100-SXM5-80GB").time_clock_ratio("gemm") == 1.0


@settings(max_examples=200, deadline=None)
@given(limit=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
       clock=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
def test_any_limit_is_accepted_or_a_config_error_naming_its_flag(limit, clock):
    h100 = gpu_power("H100-SXM5-80GB")
    try:
        h100.check_limits(limit, clock)
    except ConfigError as exc:
        assert "--power-limit-w" in str(exc) or "--gpu-clock-mhz" in str(exc)
        return
    for cls in CLASSES:
        ratio = h100.settled_clock_ratio(cls, limit, clock)
        assert 0 < ratio <= 1
        assert h100.watts(cls, ratio) <= (limit if limit is not None else 700) + 1e-9


def test_every_gpu_and_system_number_names_its_source():
    data = power_data()
    for name, entry in data["gpus"].items():
        numbers = {"tdp_w", "idle_w", "max_clock_mhz"} | ({"default_power_limit_w", "class_power"} & set(entry))
        assert set(entry["sources"]) == numbers, name
        if "class_power" in entry:  # names a measurement whose every point names its file and phase
            measured = data["measured_class_power"][entry["class_power"]]
            assert measured["source"] and set(measured["class_sources"]) == set(measured["classes"])
            assert all(p["file"] and p["phase"] for p in measured["points"].values())
        assert 0 < entry["idle_w"] < entry.get("default_power_limit_w", entry["tdp_w"]) <= entry["tdp_w"]
    for cls in ("gemm", "gemm_fp32", "attention", "memory", "comm"):
        assert data["class_fraction_of_tdp"]["sources"][cls]
    for name, entry in data["systems"].items():
        keys = {k for k in entry if k != "sources"}
        assert set(entry["sources"]) == keys, name
    assert data["pue"]["source"] and default_pue() == 1.58
    assert set(known_gpus()) >= {"H100-SXM5-80GB", "A100-SXM4-80GB", "H200-SXM", "B200", "MI300X"}


def test_gpu_names_match_the_gpu_model_presets_and_their_clocks():
    from astra_gpu_model.gpu import load_gpu, preset_names

    assert set(known_gpus()) <= set(preset_names())
    for name in known_gpus():
        spec = load_gpu(name)
        if spec.boost_clock_mhz:
            assert gpu_power(name).max_clock_mhz == spec.boost_clock_mhz, name
        if spec.tdp_w:
            assert gpu_power(name).tdp_w == spec.tdp_w, name


def test_a_gpu_yaml_with_tdp_and_clock_gets_power(tmp_path):
    from astra_gpu_model.gpu import load_gpu

    from astra_energy.power import gpu_power_of

    path = tmp_path / "x.yaml"
    path.write_text("name: X1\nbase: H100\ntdp_w: 500\nboost_clock_mhz: 1500\n")
    x1 = gpu_power_of(load_gpu(str(path)))
    assert (x1.name, x1.tdp_w, x1.idle_w, x1.max_clock_mhz) == ("X1", 500, pytest.approx(70), 1500)
    assert x1.class_w["gemm"] == 500
    path.write_text("name: X2\nbase: H100\n")  # inherits the H100 preset's tdp_w and clock
    x2 = gpu_power_of(load_gpu(str(path)))
    assert (x2.tdp_w, x2.max_clock_mhz) == (load_gpu("H100").tdp_w, load_gpu("H100").boost_clock_mhz)
    assert gpu_power_of(load_gpu("A100")).idle_w == 60  # a preset: its own numbers


def test_system_entries_by_platform():
    assert system_power("hgx-h100").name == "default"
    assert system_power("dgx-a100").name == "dgx-a100"
    a = system_power("mi300x")
    assert a.nvswitch_w_per_gpu == 0 and a.gpus_per_node == 8
    assert system_power(None, 4).gpus_per_node == 4
    assert system_power(None).components_w(1)["network_switches"] == 0
    assert system_power(None).components_w(2)["network_switches"] == 40


def test_alpha_is_the_fit_of_its_published_points():
    points = power_data()["clock_power"]["fit_points"]
    alpha = fit_alpha(points)
    assert round(alpha, 2) == power_data()["clock_power"]["alpha"]
    # by hand for the one point: the H100's GEMM (992.7 W) is capped at its 700 W TDP too, so
    # ln((600 - 81.9) / (700 - 81.9)) / ln(0.875)
    assert alpha == pytest.approx(math.log(518.1 / 618.1) / math.log(0.875))
    with pytest.raises(ValueError):
        fit_alpha([{"gpu": "H100-SXM5-80GB", "power_limit_w": 800, "relative_throughput": 0.9}])


def test_check_points_are_the_model_against_measurements_they_were_not_fitted_on():
    """The check points never enter the fit; each error is the model's clock ratio over the measured one."""
    clock_power = power_data()["clock_power"]
    fit_names = {p.get("name") for p in clock_power["fit_points"]}
    rows = {r["name"]: r for r in check(clock_power["check_points"])}
    assert len(rows) >= 3 and not fit_names & set(rows)
    fp8 = rows["h100-600w-fp8-pretraining"]  # by hand: (518.1 / 618.1) ** (1 / 1.32) against 0.825
    assert fp8["predicted"] == pytest.approx((518.1 / 618.1) ** (1 / 1.32))
    assert fp8["error"] == pytest.approx((518.1 / 618.1) ** (1 / 1.32) / 0.825 - 1)
    assert rows["h100-600w-memory-bound-inference"]["predicted"] == 1.0  # the memory class (572 W) stays under 600 W
    assert rows["a100-hpl-at-its-400w-limit"]["predicted"] == 1.0  # the model's GEMM class just reaches the TDP
    # a different alpha moves the compute-bound check, not the saturated ones
    other = {r["name"]: r for r in check(clock_power["check_points"], alpha=2.0)}
    assert other["h100-600w-fp8-pretraining"]["predicted"] == pytest.approx((518.1 / 618.1) ** 0.5)
    assert other["h100-600w-memory-bound-inference"]["predicted"] == 1.0
    for point in clock_power["check_points"]:
        assert point["source"] and point["quantity"] in ("relative_throughput", "clock_ratio")
    with pytest.raises(ValueError, match="quantity"):
        check([{**clock_power["check_points"][0], "quantity": "watts"}])


def test_fit_script_prints_alpha_and_the_check_errors(capsys):
    assert fit_main() == 0
    out = capsys.readouterr().out
    assert "alpha = 1.3217 from 1 fit point(s)" in out
    assert "check a100-hpl-at-its-400w-limit" in out and "error  +8.0%" in out


def test_the_gpu_models_dvfs_exponent_is_this_plugins_fit():
    """power_clock (gpu model) slows burst-fitted GEMMs by the same law with its own constant: it must be the alpha
    astra_energy.fit gives (data/power.json), or the two would disagree on one GPU's clock."""
    import json
    from pathlib import Path

    import astra_energy
    from astra_gpu_model.power_clock import ALPHA

    data = json.loads((Path(astra_energy.__file__).parent / "data" / "power.json").read_text())
    assert data["clock_power"]["alpha"] == ALPHA


def test_the_measured_points_are_the_calibration_files_settled_windows():
    """power.json's H200 points are the CSVs' settled windows (fit/check_h200_sustained.py re-derives them), and the
    check script's mix numbers hold: each kernel at its own settled rate sums to 136.5 ms against 140.4 measured."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "fit" / "check_h200_sustained.py"
    spec = importlib.util.spec_from_file_location("check_h200_sustained", script)
    check_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_script)
    phases = check_script.settled()
    points = power_data()["measured_class_power"]["H200-SXM-2026-11-30"]["points"]
    for name, point in points.items():
        assert phases[name]["power_w"] == pytest.approx(point["settled_w"], abs=0.05), name
        assert phases[name]["sm_mhz"] == pytest.approx(point["settled_clock_mhz"], abs=0.05), name
    gemm_ms = 2 * 8192 ** 3 / (phases["gemm_bf16"]["rate"] * 1e12) * 1e3
    fa2_ms = 3.5 * check_script.RING_FWD_FLOPS / (phases["attn_ring_flash"]["rate"] * 1e12) * 1e3
    assert 24 * gemm_ms + fa2_ms == pytest.approx(136.5, abs=0.05)
    assert 1e3 / phases["mix_gemm_attn"]["rate"] == pytest.approx(140.4, abs=0.05)
    # joules per unit of work are J per TFLOP (the energy counter's watts over TFLOP/s), not per PFLOP
    assert phases["gemm_bf16"]["joules_per_unit"] == pytest.approx(1.046, abs=0.001)
