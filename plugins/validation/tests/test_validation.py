"""astra validate: the registry's checks, the measured-time conversion, and real runs of the short cases."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_validation.registry import load_cases
from astra_validation.runner import run_case


def _registry(tmp_path, cases):
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}))
    return path


def _collective(**over):
    case = dict(name="c", kind="collective", source="s", hardware="h", platform="hgx-h100", nodes=1,
                collective="all_reduce", size_bytes=1 << 26, measured={"bus_bandwidth_gbps": 400})
    case.update(over)
    return case


def test_the_shipped_registry_loads_and_every_case_names_its_source():
    cases = load_cases()
    assert len(cases) >= 8
    assert len({c.name for c in cases}) == len(cases)
    for case in cases:
        assert case.source and case.hardware and case.platform and case.source_id
        assert case.role in ("fit", "check") and (case.role == "check") == (not case.fitted)
        if case.kind not in ("memory", "energy", "kv_cache"):  # (a KV cache case measured tokens)
            assert case.measured_s(case.nodes * 8) > 0
    assert {"memory", "energy"} <= {c.kind for c in cases}  # the memory peaks and the energy plugin's cases


def test_measured_time_of_a_collective_is_its_size_over_bus_bandwidth():
    from astra_validation.registry import Case

    c = Case(name="x", kind="collective", source="s", hardware="h", platform="p", nodes=1,
             measured={"bus_bandwidth_gbps": 100}, collective="all_reduce", size_bytes=8 * 10**9)
    # all-reduce busbw = algbw x 2(n-1)/n: 8 GB on 8 GPUs at 100 GB/s busbw takes 8e9 x 1.75 / 1e11 s.
    assert c.measured_s(8) == pytest.approx(0.14)
    g = Case(name="y", kind="collective", source="s", hardware="h", platform="p", nodes=1,
             measured={"bus_bandwidth_gbps": 100}, collective="all_gather", size_bytes=8 * 10**9)
    assert g.measured_s(8) == pytest.approx(0.07)


@pytest.mark.parametrize("change, message", [
    ({"kind": "step"}, "'kind' must be one of"),
    ({"nodes": 0}, "'nodes' must be a positive integer"),
    ({"nodes": True}, "'nodes' must be a positive integer"),
    ({"measured": {"bus_bandwidth_gbps": -1}}, "measured.bus_bandwidth_gbps"),
    ({"measured": {"step_s": 1.0}}, "measured.bus_bandwidth_gbps"),
    ({"collective": "broadcast"}, "'collective' must be one of"),
    ({"size_bytes": "1GB"}, "'size_bytes' must be a positive integer"),
    ({"source": ""}, "'source' must be a non-empty string"),
    ({"run": "--gpu H100"}, "'run' must be a list"),
])
def test_a_bad_case_is_named_with_the_key_and_what_was_expected(tmp_path, change, message):
    path = _registry(tmp_path, [_collective(**change)])
    with pytest.raises(ConfigError, match=message) as info:
        load_cases(path)
    assert str(path) in str(info.value) and "'c'" in str(info.value)


def test_duplicate_names_and_a_missing_workload_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="new non-empty string"):
        load_cases(_registry(tmp_path, [_collective(), _collective()]))
    step = dict(name="s", kind="llm_step", source="s", hardware="h", platform="dgx-a100", nodes=1,
                measured={"step_s": 1.0})
    with pytest.raises(ConfigError, match="needs 'workload'"):
        load_cases(_registry(tmp_path, [step]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                    max_leaves=12))
def test_any_yaml_document_either_loads_or_is_a_config_error(tmp_path, document):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump({"cases": [document]} if not isinstance(document, dict) else document))
    try:
        load_cases(path)
    except ConfigError:
        pass


def test_a_collective_case_is_simulated_with_the_platforms_nccl_model():
    # 64 MiB all-reduce on one HGX H100: NCCL's own model with the measured-time calibration.
    from astra_validation.registry import Case

    case = Case(
        name="t", kind="collective", source="s", hardware="h", platform="hgx-h100", nodes=1,
        measured={"bus_bandwidth_gbps": 300}, collective="all_reduce", size_bytes=64 << 20)
    result = run_case(case)
    from astra_gpu_model.nccl import ALL_REDUCE, collective_time_us, config_for_gpu

    expected_us = collective_time_us(ALL_REDUCE, 64 << 20, 8, config_for_gpu("H100-SXM5-80GB"))[0]
    assert result["simulated_ns"] == pytest.approx(expected_us * 1e3, rel=1e-6, abs=2)
    assert isinstance(result["simulated_ns"], int) and isinstance(result["measured_ns"], int)
    assert result["error"] == pytest.approx((result["simulated_ns"] - result["measured_ns"]) / result["measured_ns"])
    assert "nccl" in result["platform_defaults"]["collective"]


def test_astra_validate_runs_the_named_cases_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    names = "nccl-allreduce-h100-4node-ndr,nccl-allreduce-a100-4node-hdr"
    assert main(["validate", "--only", names, "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nccl-allreduce-h100-4node-ndr" in text and "median |error|" in text
    data = json.loads(out.read_text())
    assert data["units"]["time"] == "ns"
    assert [c["name"] for c in data["cases"]] == names.split(",")
    for c in data["cases"]:
        assert c["simulated_ns"] > 0 and c["measured_ns"] > 0
    assert data["summary"]["max_abs_error"] == max(abs(c["error"]) for c in data["cases"])
    # --json prints the same document on stdout (the table goes to stderr)
    assert main(["validate", "--only", names, "--json"]) == 0
    printed = capsys.readouterr()
    assert [c["simulated_ns"] for c in json.loads(printed.out)["cases"]] == [c["simulated_ns"] for c in data["cases"]]
    assert "median |error|" in printed.err


def test_an_unknown_case_name_is_an_error_listing_the_known_ones(capsys):
    assert main(["validate", "--only", "no-such-case"]) != 0
    err = capsys.readouterr().err
    assert "no-such-case" in err and "megatron-sc21-gpt-1.7b" in err


def test_list_prints_every_case_without_running(capsys):
    assert main(["validate", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(c.name in out for c in load_cases())


def test_cases_run_on_astra_sweeps_local_pool_give_the_same_numbers(tmp_path):
    names = "nccl-allreduce-h100-4node-ndr,nccl-allreduce-a100-4node-hdr"
    serial, pooled = tmp_path / "s.json", tmp_path / "p.json"
    assert main(["validate", "--only", names, "-o", str(serial)]) == 0
    assert main(["validate", "--only", names, "--jobs", "2", "-o", str(pooled)]) == 0
    a, b = json.loads(serial.read_text()), json.loads(pooled.read_text())
    assert [c["simulated_ns"] for c in a["cases"]] == [c["simulated_ns"] for c in b["cases"]]
    assert [c["name"] for c in b["cases"]] == names.split(",")


def test_a_case_that_fails_is_reported_and_the_exit_is_nonzero(tmp_path, capsys):
    bad = _collective(name="bad", platform="no-such-platform")
    good = _collective(name="good")
    path = _registry(tmp_path, [bad, good])
    out = tmp_path / "r.json"
    assert main(["validate", "--cases", str(path), "-o", str(out)]) == 1
    data = json.loads(out.read_text())
    assert [c["name"] for c in data["cases"]] == ["good"]
    assert data["failed"][0]["name"] == "bad" and "no-such-platform" in data["failed"][0]["failed"]
    assert "bad failed" in capsys.readouterr().err


def test_a_calibration_input_is_shown_but_not_counted(tmp_path, capsys):
    path = _registry(tmp_path, [_collective(name="anchor", calibration_input=True),
                                _collective(name="check", measured={"bus_bandwidth_gbps": 200})])
    out = tmp_path / "r.json"
    assert main(["validate", "--cases", str(path), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    check = next(c for c in data["cases"] if c["name"] == "check")
    assert data["summary"]["max_abs_error"] == pytest.approx(abs(check["error"]))
    assert data["summary"]["cases"] == 1 and data["summary"]["fit_cases_not_counted"] == 1
    assert next(c for c in data["cases"] if c["name"] == "anchor")["role"] == "fit"
    assert "1 fit case, shown, not counted" in capsys.readouterr().out


def test_a_serving_case_needs_its_options_and_one_metric(tmp_path):
    case = dict(name="s", kind="serving", source="s", hardware="h", platform="hgx-h100", nodes=1,
                serve=["--model", "llama3-8b", "--qps", "1"], measured={"tpot_p50_ms": 20.0})
    (loaded,) = load_cases(_registry(tmp_path, [case]))
    assert loaded.serve[:2] == ("--model", "llama3-8b") and loaded.measured_s() == pytest.approx(0.02)
    with pytest.raises(ConfigError, match="exactly one of tpot_p50_ms, ttft_p50_ms, output_tokens_per_s"):
        load_cases(_registry(tmp_path, [dict(case, measured={"step_s": 1.0})]))
    with pytest.raises(ConfigError, match="needs 'serve'"):
        load_cases(_registry(tmp_path, [dict(case, serve=[])]))


@pytest.mark.parametrize("change, message", [
    ({"role": "train"}, "'role' must be one of fit, check"),
    ({"role": "fit"}, "must name what was fitted on it"),
    ({"role": "check", "calibration_input": True}, "contradicts 'role: check'"),
    ({"source_id": ""}, "'source_id' must be a non-empty string"),
    ({"role": "fit", "fitted": "nccl.PEAK_BUSBW"}, "'fitted' must be a list"),
])
def test_a_bad_role_or_source_is_named(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        load_cases(_registry(tmp_path, [_collective(**change)]))


def test_role_and_source_id_default_to_check_and_the_case_itself(tmp_path):
    (case,) = load_cases(_registry(tmp_path, [_collective()]))
    assert (case.role, case.source_id, case.fitted, case.calibration_input) == ("check", "c", (), False)
    (fit,) = load_cases(_registry(tmp_path, [_collective(role="fit", fitted=["x"], source_id="paper")]))
    assert (fit.role, fit.source_id, fit.fitted, fit.calibration_input) == ("fit", "paper", ("x",), True)


def test_the_shipped_roles_follow_what_was_fitted_on_each_source():
    from astra_validation.crossval import TUNED, fitted_on

    cases = load_cases()
    by_name = {c.name: c for c in cases}
    assert by_name["nccl-allreduce-h100-8gpu-nvls"].role == "fit"
    assert all(by_name[n].role == "check" for n in by_name if n.startswith(("megatron-sc21", "mlperf")))
    # every constant a case names is one --cv knows; the sources group cases by paper or page, not by row
    assert all(name in TUNED for names in fitted_on(cases).values() for name in names)
    assert len({c.source_id for c in cases if c.name.startswith("megatron-sc21")}) == 1
    # a case is fit exactly when a constant that can change its kind was fitted on its source (a page whose memory
    # rows fitted a memory constant keeps its step times as check cases)
    for case in cases:
        assert (case.role == "fit") == bool(fitted_on(cases, case.kind).get(case.source_id)), case.name


def test_sign_balance_counts_each_side_and_the_larger_share():
    from astra_validation.summary import error_stats, sign_balance

    assert sign_balance([0.1, 0.2, -0.05, 0.0]) == {"positive": 2, "negative": 1, "zero": 1, "larger_share": 0.5,
                                                    "larger_side": "positive"}
    assert sign_balance([-0.1, -0.3, 0.2])["larger_side"] == "negative"
    assert sign_balance([-0.1, -0.3, 0.2])["larger_share"] == pytest.approx(2 / 3)
    assert sign_balance([])["larger_share"] is None
    stats = error_stats([{"name": "a", "error": -0.3}, {"name": "b", "error": 0.1}, {"name": "c", "error": 0.2}])
    assert stats["median_abs_error"] == pytest.approx(0.2) and stats["worst"] == "a"
    assert stats["max_abs_error"] == pytest.approx(0.3)


@given(st.lists(st.floats(-10, 10, allow_nan=False), max_size=20))
def test_sign_balance_adds_up(errors):
    from astra_validation.summary import sign_balance

    b = sign_balance(errors)
    assert b["positive"] + b["negative"] + b["zero"] == len(errors)
    if errors:
        assert 0 <= b["larger_share"] <= 1 and b["larger_share"] * len(errors) == max(b["positive"], b["negative"])


def test_cv_plans_a_refit_only_where_something_was_fitted_on_the_source():
    from astra_validation.crossval import plan

    cases = load_cases()
    by_name = {c.name: c for c in cases}
    assert plan(by_name["nccl-allreduce-h100-8gpu-nvls"], cases) == ("refit", ["nccl.PEAK_BUSBW"])
    assert plan(by_name["megatron-sc21-gpt-1.7b"], cases) == ("plain", [])
    # the ShareGPT output lengths: refitted without SGLang's page on another published sample (test_serving_cv.py)
    assert plan(by_name["vllm060-llama31-70b-tp4-rps4-tpot"], cases) == ("refit", ["serving.sharegpt_output_lengths"])


def test_the_nccl_peak_refit_is_the_fit_rerun_on_the_other_sources():
    from astra_gpu_model import nccl
    from astra_validation.crossval import TUNED

    checked_in = nccl.load_calibration()
    fitted = ("hopper", "ampere", "blackwell", "cdna3")
    assert nccl.beyond_fit_efficiency() == {a: checked_in[a].beyond_fit for a in fitted}  # the fit
    cfg = nccl.config_for_gpu("H100-SXM5-80GB")
    size = 8 << 30
    with_peak = nccl.collective_time_us(nccl.ALL_REDUCE, size, 8, cfg)[0]
    with TUNED["nccl.PEAK_BUSBW"].refit({"some other source"}):
        assert nccl.collective_time_us(nccl.ALL_REDUCE, size, 8, cfg)[0] == with_peak
    # Without #212, NVLS keeps GTC S62129's statement (the same 480 GB/s); the ring peaks had only #212.
    with TUNED["nccl.PEAK_BUSBW"].refit({"NVIDIA/nccl-tests#212"}):
        assert nccl.collective_time_us(nccl.ALL_REDUCE, size, 8, cfg)[0] == with_peak
        assert nccl.load_calibration()["hopper"].beyond_fit == {"nvswitch/nvls/Simple": 0.81223}
        assert nccl.load_calibration()["ampere"].beyond_fit == {}
    with TUNED["nccl.PEAK_BUSBW"].refit(set(nccl.PEAK_BUSBW_SOURCES)):
        without = nccl.collective_time_us(nccl.ALL_REDUCE, size, 8, cfg)[0]
        assert nccl.load_calibration()["hopper"].beyond_fit == {}
    assert without > 1.2 * with_peak  # the extrapolated 64 MB line: far below NVIDIA's stated peak
    assert nccl.collective_time_us(nccl.ALL_REDUCE, size, 8, cfg)[0] == with_peak  # restored


def test_a_memory_constant_does_not_take_its_pages_step_times_out_of_the_check_cases():
    from astra_validation.crossval import fitted_on, plan

    cases = load_cases()
    by_name = {c.name: c for c in cases}
    page = "pytorch/torchtitan docs/performance.md"
    assert fitted_on(cases)[page] == ["memory.RESERVE_FRACTION"]
    assert fitted_on(cases, "llm_step")[page] == []
    assert plan(by_name["torchtitan-a100-llama3-8b-fsdp64-sac-op"], cases) == ("plain", [])
    how, why = plan(by_name["torchtitan-llama3.1-8b-fsdp8-sac-bs2"], cases)
    assert how == "none" and "memory.RESERVE_FRACTION" in why


def test_astra_validate_cv_predicts_a_fit_case_without_its_source(tmp_path, capsys):
    out = tmp_path / "cv.json"
    names = "nccl-allreduce-h100-8gpu-nvls,nccl-allreduce-a100-4node-hdr"
    assert main(["validate", "--only", names, "--cv", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "leave one source out" in text and "NVIDIA/nccl-tests#212" in text
    data = json.loads(out.read_text())
    plain = {c["name"]: c for c in data["cases"]}
    cv = {c["name"]: c for c in data["summary"]["cv"]["predictions"]}
    assert cv["nccl-allreduce-a100-4node-hdr"]["how"] == "plain"
    assert cv["nccl-allreduce-a100-4node-hdr"]["error"] == plain["nccl-allreduce-a100-4node-hdr"]["error"]
    nvls = cv["nccl-allreduce-h100-8gpu-nvls"]
    # Without #212, NVLS's peak is GTC S62129's statement, the same 480 GB/s: the same time (it was +37 % with no
    # second statement, the 64 MB line extrapolated).
    assert nvls["how"] == "refit" and nvls["error"] == pytest.approx(plain["nccl-allreduce-h100-8gpu-nvls"]["error"])
    assert data["summary"]["cv"]["max_abs_error"] == pytest.approx(
        max(abs(nvls["error"]), abs(plain["nccl-allreduce-a100-4node-hdr"]["error"])))
    assert data["summary"]["cases"] == 1  # the plain headline: the check case only
    assert data["summary"]["sign_balance"]["negative"] == 1


def test_cv_on_the_local_pool_gives_the_same_numbers(tmp_path):
    out = tmp_path / "cv.json"
    assert main(["validate", "--only", "nccl-allreduce-h100-8gpu-nvls", "--cv", "--jobs", "2", "-o", str(out)]) == 0
    (row,) = json.loads(out.read_text())["summary"]["cv"]["predictions"]
    assert row["how"] == "refit" and row["error"] == pytest.approx(0.0038, abs=0.01)


def _memory_case(**over):
    case = dict(name="m", kind="memory", source="s", hardware="h", platform="dgx-a100", nodes=1,
                workload=["--layers", "2", "--hidden", "512", "--heads", "8", "--vocab", "1000", "--seq-len", "128",
                          "--dp", "8", "--micro-batch-size", "1"],
                measured={"peak_bytes": 1_000_000_000}, measured_what="torch.cuda.max_memory_allocated")
    case.update(over)
    return case


def test_a_memory_case_compares_the_generators_peak_estimate(tmp_path, capsys):
    from astra_workload_generators.llm import LlmSpec, peak_memory

    path = _registry(tmp_path, [_memory_case(), _collective(name="t")])
    out = tmp_path / "r.json"
    assert main(["validate", "--cases", str(path), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    row = next(c for c in data["cases"] if c["name"] == "m")
    estimate = peak_memory(*LlmSpec.from_argv(_memory_case()["workload"]).resolve())
    expected = getattr(estimate, "allocated_bytes", estimate.total)
    assert row["simulated_bytes"] == expected and row["measured_bytes"] == 1_000_000_000
    assert row["error"] == pytest.approx((expected - 1e9) / 1e9)
    # its own group, not in the headline (the collective alone)
    assert data["summary"]["cases"] == 1 and data["summary"]["groups"]["memory"]["cases"] == 1
    text = capsys.readouterr().out
    assert "peak memory" in text and " GB" in text and "memory (its own group)" in text


@pytest.mark.parametrize("change, message", [
    ({"measured_what": "rss"}, "'measured_what' must be one of"),
    ({"measured": {"peak_bytes": 0}}, "measured.peak_bytes"),
    ({"workload": []}, "needs 'workload'"),
])
def test_a_bad_memory_case_is_named(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        load_cases(_registry(tmp_path, [_memory_case(**change)]))


def test_memory_yaml_beside_the_registry_is_loaded_when_present(tmp_path, monkeypatch):
    import shutil

    from astra_validation import registry

    shutil.copy(registry.CASES_DIR / "cases.yaml", tmp_path / "cases.yaml")
    monkeypatch.setattr(registry, "CASES_DIR", tmp_path)
    without = load_cases()
    assert all(c.kind != "memory" for c in without)
    (tmp_path / "memory.yaml").write_text(yaml.safe_dump({"cases": [_memory_case(name="mem-1")]}))
    cases = load_cases()
    assert [c.name for c in cases if c.kind == "memory"] == ["mem-1"] and len(cases) == len(without) + 1
    (tmp_path / "memory.yaml").write_text(yaml.safe_dump({"cases": [_memory_case(name=without[0].name)]}))
    with pytest.raises(ConfigError, match="also in"):
        load_cases()


_ANY = st.none() | st.booleans() | st.integers() | st.text(max_size=6) | st.lists(st.text(max_size=4), max_size=2)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({}, optional={"role": _ANY | st.sampled_from(["fit", "check"]), "source_id": _ANY,
                                           "fitted": _ANY, "calibration_input": _ANY,
                                           "kind": st.sampled_from(["collective", "memory"]),
                                           "measured_what": _ANY | st.sampled_from(["nvidia-smi"])}))
def test_any_role_source_or_memory_field_loads_or_is_a_config_error(tmp_path, over):
    case = _collective(**over)
    if case["kind"] == "memory":
        case.update(workload=["--layers", "2"], measured={"peak_bytes": 10**9})
    try:
        (loaded,) = load_cases(_registry(tmp_path, [case]))
    except ConfigError:
        return
    assert loaded.role in ("fit", "check") and loaded.source_id
    assert loaded.role == "check" or loaded.fitted or case.get("calibration_input") is True


def test_an_energy_case_runs_through_astra_validate_as_the_energy_plugin_evaluates_it():
    """kind: energy comes from the energy plugin's published measurements; the row is its evaluate() result."""
    from astra_energy.cases import evaluate, load_cases as load_energy_cases

    from astra_validation.runner import run_case

    case = next(c for c in load_cases() if c.name == "mlenergy-v3-llama3.1-8b-h100-batch64-energy-per-token")
    assert case.kind == "energy" and case.role == "check"
    row = run_case(case)
    expected = evaluate(next(c for c in load_energy_cases() if c.name == case.name))
    assert row["measured_value"] == expected["measured"] and row["simulated_value"] == expected["simulated"]
    assert row["error"] == pytest.approx(expected["error"]) and row["unit"] == "mJ/token" and row["gpus"] >= 1


def test_a_memory_case_whose_measured_what_is_not_a_name_is_a_config_error(tmp_path):
    case = _collective(kind="memory", workload=["--layers", "2"], measured={"peak_bytes": 10**9},
                       measured_what=["torch.cuda.max_memory_allocated"])
    with pytest.raises(ConfigError, match="'measured_what' must be one of"):
        load_cases(_registry(tmp_path, [case]))
