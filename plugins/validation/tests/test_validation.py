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
        assert case.source and case.hardware and case.platform
        assert case.measured_s(case.nodes * 8) > 0


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
    assert "calibration input" in capsys.readouterr().out


def test_a_serving_case_needs_its_options_and_one_metric(tmp_path):
    case = dict(name="s", kind="serving", source="s", hardware="h", platform="hgx-h100", nodes=1,
                serve=["--model", "llama3-8b", "--qps", "1"], measured={"tpot_p50_ms": 20.0})
    (loaded,) = load_cases(_registry(tmp_path, [case]))
    assert loaded.serve[:2] == ("--model", "llama3-8b") and loaded.measured_s() == pytest.approx(0.02)
    with pytest.raises(ConfigError, match="exactly one of tpot_p50_ms, ttft_p50_ms, output_tokens_per_s"):
        load_cases(_registry(tmp_path, [dict(case, measured={"step_s": 1.0})]))
    with pytest.raises(ConfigError, match="needs 'serve'"):
        load_cases(_registry(tmp_path, [dict(case, serve=[])]))
