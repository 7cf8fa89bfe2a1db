"""The machines people buy now: B200/B300, MI325X/MI355X and L40S presets, their platforms, the 64-of-72 GB200 rack,
the published peak-GEMM calibration and the warning a run on a partly or not calibrated GPU carries.

The datasheet numbers below are typed from the sources independently of the preset files."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.chakra import make_metadata, make_node, write_et
from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.platforms import fit_workload
from astra_sim.report import read_report

from astra_gpu_model.calibration import fit_peak_efficiency, load_published_peak_gemm, predict_gemm_s
from astra_gpu_model.gpu import load_gpu, load_gpu_file
from astra_gpu_model.platforms import PLATFORMS


def test_blackwell_datasheet_values():
    b200, b300 = load_gpu("b200"), load_gpu("b300")
    # HGX B200 datasheet, 8 GPUs with sparsity: FP4 144 PF, FP8/FP6 72 PF -> per GPU dense 9000 / 4500
    assert (b200.tensor_tflops["fp4"], b200.tensor_tflops["fp6"], b200.tensor_tflops["fp8"]) == (9000, 4500, 4500)
    assert (b200.hbm_capacity_gb, b200.hbm_bandwidth_gbps, b200.tdp_w, b200.scaleup_bandwidth_gbps) == (180, 8000, 1000,
                                                                                                      900)
    # HGX B300: dense FP4 13125, FP8/FP6 4500, BF16 2250, FP64 1.25; 288 GB at 8 TB/s; NVLink 5 1.8 TB/s
    assert [b300.tensor_tflops[k] for k in ("fp4", "fp6", "fp8", "bf16", "tf32", "fp32", "fp64")] == [
        13125, 4500, 4500, 2250, 1125, 75, 1.25]
    assert "int8" not in b300.tensor_tflops  # the sources disagree: left out, not guessed
    assert (b300.hbm_capacity_gb, b300.hbm_bandwidth_gbps, b300.scaleup_bandwidth_gbps) == (288, 8000, 900)
    # GB200's GPU (NVIDIA's per-GPU column, sparse halved): FP4 10000, FP8/FP6 5000, BF16 2500; 186 GB, 1200 W
    gb200 = load_gpu("gb200")
    assert [gb200.tensor_tflops[k] for k in ("fp4", "fp6", "fp8", "bf16", "tf32", "fp32", "fp64")] == [
        10000, 5000, 5000, 2500, 1250, 80, 40]
    assert (gb200.hbm_capacity_gb, gb200.hbm_bandwidth_gbps, gb200.tdp_w) == (186, 8000, 1200)


def test_amd_datasheet_values():
    mi325x, mi355x = load_gpu("mi325x"), load_gpu("mi355x")
    assert (mi325x.sm_count, mi325x.tensor_tflops["bf16"], mi325x.tensor_tflops["fp8"]) == (304, 1307.4, 2614.9)
    assert (mi325x.hbm_capacity_gb, mi325x.hbm_bandwidth_gbps, mi325x.tdp_w, mi325x.vendor) == (256, 6000, 1000, "amd")
    assert mi325x.scaleup_bandwidth_gbps == 7 * 64
    # CDNA 4: 256 CUs x 8192 FP8 FLOP/clock x 2.4 GHz; BF16 half, FP6/FP4 twice
    fp8 = 256 * 8192 * 2.4e9 / 1e12
    assert mi355x.tensor_tflops["fp8"] == pytest.approx(fp8, abs=0.05)
    assert mi355x.tensor_tflops["bf16"] == pytest.approx(fp8 / 2, abs=0.05)
    assert mi355x.tensor_tflops["fp4"] == mi355x.tensor_tflops["fp6"] == pytest.approx(fp8 * 2, abs=0.1)
    assert (mi355x.sm_count, mi355x.tensor_tflops["fp64"], mi355x.hbm_capacity_gb, mi355x.hbm_bandwidth_gbps,
            mi355x.tdp_w) == (256, 78.6, 288, 8000, 1400)
    assert mi355x.scaleup_bandwidth_gbps == pytest.approx(7 * 153.6 / 2)
    assert "tf32" not in mi355x.tensor_tflops and mi355x.rate_dtype("tf32") == "fp32"


def test_l40s_datasheet_values():
    l40s = load_gpu("l40s")
    assert [l40s.tensor_tflops[k] for k in ("fp32", "tf32", "bf16", "fp8")] == [91.6, 183, 362.05, 733]
    assert (l40s.sm_count, l40s.hbm_capacity_gb, l40s.hbm_bandwidth_gbps, l40s.tdp_w) == (142, 48, 864, 350)
    assert l40s.scaleup_bandwidth_gbps == 32  # PCIe Gen4 x16: 64 GB/s both directions, no NVLink
    assert l40s.calibration_status == "not-calibrated"


@pytest.mark.parametrize("name", ["B200", "B300", "GB200", "MI300X", "MI325X", "MI355X"])
def test_presets_hold_the_fit_of_the_published_gemms(name):
    gpu, fit = load_gpu(name), fit_peak_efficiency(name)
    assert gpu.gemm.compute_efficiency == fit["compute_efficiency"]
    if fit["fp8_gemm_scale"] is not None:
        assert gpu.fp8_gemm_scale == fit["fp8_gemm_scale"]
    if fit.get("fp4_gemm_scale") is not None:  # B200's NVFP4 rows (pytorch/ao#2427)
        assert gpu.fp4_gemm_scale == fit["fp4_gemm_scale"]
    if fit.get("mxfp8_gemm_scale") is not None:  # B200's MXFP8 rows (flashinfer#2464)
        assert gpu.mxfp8_gemm_scale == fit["mxfp8_gemm_scale"]
    # every published GEMM comes back at most its dtype's published maximum (no modelled shape runs faster:
    # tests/test_gemm_tiles.py) and within 13 % below it (GB200's BF16 point, whose 608 tiles fill 8.2 waves)
    points = [p for p in load_published_peak_gemm() if p["gpu"] == name]
    for point in points:
        seconds = predict_gemm_s(gpu, [point["m"]], point["n"], point["k"], dtype=point["dtype"])[0]
        achieved = 2.0 * point["m"] * point["n"] * point["k"] / seconds / 1e12
        top = max(p["tflops"] for p in points if p["dtype"] == point["dtype"])
        assert 0.87 * point["tflops"] <= achieved <= top, point


def test_the_fit_follows_the_published_numbers():
    points = [dict(p, tflops=p["tflops"] * 0.5) for p in load_published_peak_gemm() if p["gpu"] == "B200"]
    assert fit_peak_efficiency("B200", points)["compute_efficiency"] < 0.55 * load_gpu("B200").gemm.compute_efficiency
    with pytest.raises(ValueError, match="no published bf16"):
        fit_peak_efficiency("L40S")


def test_calibration_warnings():
    assert "not calibrated" in load_gpu("L40S").calibration_warning()
    assert "assumed from a100" in load_gpu("L40S").calibration_warning()
    for name in ("B200", "B300", "GB200", "MI300X", "MI325X", "MI355X"):
        assert "partly calibrated" in load_gpu(name).calibration_warning()
    for name in ("H100-SXM5-80GB", "A100-SXM4-80GB", "H200-SXM", "H800-SXM5-80GB"):
        assert load_gpu(name).calibration_status == "fitted" and load_gpu(name).calibration_warning() is None


def _yaml(tmp_path, status):
    path = tmp_path / "g.yaml"
    path.write_text("name: G\nsm_count: 100\ntensor_tflops: {fp32: 50, bf16: 500}\nhbm_bandwidth_gbps: 3000\n"
                    f"calibration: h100\n{'' if status is None else 'calibration_status: ' + json.dumps(status)}\n")
    return path


def test_a_user_gpu_says_its_own_calibration(tmp_path):
    assert load_gpu_file(_yaml(tmp_path, None)).calibration_warning() is None  # unstated: no warning
    assert "not calibrated" in load_gpu_file(_yaml(tmp_path, "not-calibrated")).calibration_warning()
    with pytest.raises(ConfigError, match="'calibration_status' must be one of fitted, partial, not-calibrated"):
        load_gpu_file(_yaml(tmp_path, "maybe"))
    base = tmp_path / "b.yaml"
    base.write_text("base: B200\nname: B200-tuned\n")
    assert load_gpu_file(base).calibration_status == "partial"  # inherited from its base


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none()))
def test_any_calibration_status_loads_or_is_a_clear_error(tmp_path_factory, status):
    path = _yaml(tmp_path_factory.mktemp("g"), status)
    try:
        gpu = load_gpu_file(path)
    except ConfigError as exc:
        assert "calibration_status" in str(exc)
    else:
        assert gpu.calibration_status in ("fitted", "partial", "not-calibrated", "unstated")


def test_new_platforms_numbers():
    expect = {"hgx-b200": ("B200", 8, 400), "hgx-b300": ("B300", 8, 800), "mi325x": ("MI325X", 8, 400),
              "mi355x": ("MI355X", 8, 400), "gb200-nvl72-64": ("B200", 64, 400), "gb200-nvl72": ("B200", 72, 400)}
    for name, (gpu, per_node, nic) in expect.items():
        numbers = PLATFORMS[name].numbers(2)
        assert (numbers["gpu"], numbers["gpus_per_node"], numbers["total_gpus"], numbers["nic_gbit_per_s_per_gpu"]) == (
            gpu, per_node, 2 * per_node, nic), name
        assert numbers["calibration"] == "partial"
    assert PLATFORMS["hgx-h100"].numbers()["calibration"] == "fitted"


def test_a_rack_of_64_of_72():
    rack64 = PLATFORMS["gb200-nvl72-64"]
    platform, nodes = fit_workload(rack64, None, 128, {})
    assert (nodes, platform.gpus_per_node) == (2, 64)
    with pytest.raises(ConfigError, match="not whole gb200-nvl72 nodes of 72"):
        fit_workload(PLATFORMS["gb200-nvl72"], None, 128, {})
    # the full rack's variant of 64 is the same machine as the registered one
    assert PLATFORMS["gb200-nvl72"].variant(gpus_per_node=64).numbers(3)["total_gpus"] == rack64.numbers(3)["total_gpus"]


def _trace(tmp_path, ranks):
    nodes = [make_node(1, "ar", T.COMM_COLL_NODE,
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20})]
    for rank in range(ranks):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    return str(tmp_path / "t")


def _run(tmp_path, ranks, *extra):
    report = tmp_path / "r.json"
    assert main(["run", "--workload-configuration", _trace(tmp_path, ranks), "-q", "--report-json", str(report),
                 *extra]) == 0
    return read_report(report)


def test_run_on_128_gpus_of_two_64_gpu_racks(tmp_path):
    report = _run(tmp_path, 128, "--platform", "gb200-nvl72-64")
    assert report["settings"]["platform"] == {"name": "gb200-nvl72-64", "nodes": 2, "devices_per_node": 64}
    assert len(report["ranks"]) == 128


def test_the_warning_is_in_the_report_and_on_the_terminal(tmp_path, capsys):
    report = tmp_path / "r.json"
    trace = _trace(tmp_path, 8)
    assert main(["run", "--workload-configuration", trace, "--report-json", str(report), "--platform", "mi355x"]) == 0
    warning = "MI355X: GEMM efficiencies are partly calibrated"
    assert warning in capsys.readouterr().err
    assert any(w.startswith(warning) for w in read_report(report)["warnings"])
    l40s = _run(tmp_path, 8, "--platform", "hgx-h100", "--gpu", "L40S")
    assert any("L40S: GEMM efficiencies are assumed from a100 (not calibrated)" in w for w in l40s["warnings"])
    calibrated = _run(tmp_path, 8, "--platform", "hgx-h100")
    assert not [w for w in calibrated["warnings"] if "GEMM efficiencies" in w]


def test_platforms_lists_the_calibration(capsys, monkeypatch):
    assert main(["platforms", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["hgx-b200"]["calibration"] == "partial" and rows["dgx-a100"]["calibration"] == "fitted"
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["platforms"]) == 0
    out = capsys.readouterr().out
    assert "calib." in out and "partial" in out and "fitted" in out
