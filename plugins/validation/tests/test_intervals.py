"""Empirical prediction intervals from cross-validated errors: the function, the residuals file, astra run's stats."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_validation import intervals
from astra_validation.intervals import interval_ns, load_residuals, quantile, residuals_document, step_interval


def test_quantile_interpolates_between_the_sorted_values():
    assert quantile([3, 1, 2], 0.5) == 2
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([0, 10], 0.05) == pytest.approx(0.5)
    assert quantile([7], 0.95) == 7
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_the_interval_scales_the_simulated_time_by_measured_over_simulated():
    # errors +25 % and -20 %: measured / simulated 0.8 and 1.25; a 90 % interval of two is almost their range
    low, high = interval_ns(1_000_000_000, [0.25, -0.2])
    assert low == round(1e9 * (0.8 + 0.45 * 0.05)) and high == round(1e9 * (0.8 + 0.45 * 0.95))
    # a model that is always 10 % slow: the measured time is the simulated / 1.1, exactly
    assert interval_ns(1_100, [0.1, 0.1, 0.1]) == (1000, 1000)


@given(st.lists(st.floats(-0.9, 5, allow_nan=False), min_size=1, max_size=30), st.integers(1, 10**12))
def test_the_interval_lies_within_the_residuals_extremes_and_is_ordered(errors, simulated):
    low, high = interval_ns(simulated, errors)
    ratios = [1 / (1 + e) for e in errors]
    assert low <= high
    assert round(simulated * min(ratios)) - 1 <= low and high <= round(simulated * max(ratios)) + 1


def _cv_summary():
    return {"predictions": [
        {"name": "a", "kind": "llm_step", "source_id": "p", "error": 0.05},
        {"name": "b", "kind": "llm_step", "source_id": "p", "error": -0.02},
        {"name": "c", "kind": "llm_step", "source_id": "q", "error": 0.10},
        {"name": "n", "kind": "collective", "source_id": "r", "error": 0.3},
        {"name": "m", "kind": "memory", "source_id": "s", "error": 0.5}],
        "not_predicted": [{"name": "v", "source_id": "t", "why": "x"}]}


def test_the_residuals_file_keeps_each_regimes_errors_and_is_read_back(tmp_path):
    doc = residuals_document(_cv_summary(), "astra validate --cv --all")
    assert doc["regimes"]["llm_step"]["errors"] == [0.05, -0.02, 0.10]
    assert doc["regimes"]["llm_step"]["sources"] == ["p", "q"] and "memory" not in doc["regimes"]
    assert doc["not_predicted"] == ["v"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert load_residuals(path) == doc
    found = step_interval(2_000_000_000, "llm_step", path)
    assert found["cases"] == 3 and found["interval_ns"] == list(interval_ns(2_000_000_000, [0.05, -0.02, 0.10]))
    assert step_interval(1000, "collective", path) is None  # one case: no interval
    assert step_interval(1000, "llm_step", tmp_path / "absent.json") is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                    max_leaves=12))
def test_any_json_either_loads_as_residuals_or_is_a_config_error(tmp_path, document):
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(document))
    try:
        load_residuals(path)
    except ConfigError as exc:
        assert str(path) in str(exc)


def test_save_residuals_writes_the_cv_errors_and_needs_cv(tmp_path, capsys):
    out = tmp_path / "res.json"
    names = "nccl-allreduce-h100-8gpu-nvls,nccl-allreduce-h100-4node-ndr,nccl-allreduce-a100-4node-hdr"
    assert main(["validate", "--only", names, "--save-residuals", str(out)]) != 0
    assert "--save-residuals needs --cv" in capsys.readouterr().err
    assert main(["validate", "--only", names, "--cv", "--save-residuals", str(out), "-o", str(tmp_path / "v.json")]) == 0
    saved = json.loads(out.read_text())
    cv = json.loads((tmp_path / "v.json").read_text())["summary"]["cv"]["predictions"]
    assert saved["regimes"]["collective"]["errors"] == [row["error"] for row in cv]
    assert saved["generated_by"].startswith("astra validate --cv --only nccl-allreduce-h100-8gpu-nvls")


def test_astra_run_of_a_training_step_on_a_platform_reports_its_interval(tmp_path, monkeypatch, capsys):
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    residuals = tmp_path / "res.json"
    residuals.write_text(json.dumps(residuals_document(_cv_summary(), "test")))
    monkeypatch.setattr(intervals, "RESIDUALS", residuals)
    prefix = str(tmp_path / "w")
    generate_llm_workload(LlmSpec.from_argv(["--layers", "2", "--hidden", "512", "--heads", "8", "--vocab", "1000",
                                             "--seq-len", "128", "--dp", "8", "--micro-batch-size", "1"]),
                          prefix, on_warning=lambda line: None)
    report_path = tmp_path / "r.json"
    assert main(["run", "--platform", "dgx-a100", "--workload-configuration", prefix,
                 "--report-json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    step = report["summary"]["max_finish_ns"]
    assert report["stats"]["step_interval_90_ns"] == list(interval_ns(step, [0.05, -0.02, 0.10]))
    assert report["stats"]["step_interval_90_cases"] == 3
    assert "(90 %: " in capsys.readouterr().out
    # not a training step (a bare collective trace): no interval
    from astra_sim.chakra import make_metadata, make_node, types as T, write_et

    node = make_node(1, "ar", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                       "comm_size": 1 << 20})
    for rank in range(8):
        write_et(str(tmp_path / f"c.{rank}.et"), make_metadata(), [node])
    assert main(["run", "--platform", "dgx-a100", "--workload-configuration", str(tmp_path / "c"), "-q",
                 "--report-json", str(report_path)]) == 0
    assert "step_interval_90_ns" not in json.loads(report_path.read_text())["stats"]


def test_the_shipped_residuals_are_the_registrys_cross_validated_cases():
    from astra_validation.registry import load_cases

    data = load_residuals()
    assert data is not None and data["generated_by"].startswith("astra validate --cv")
    cases = {c.name: c for c in load_cases()}
    for kind, regime in data["regimes"].items():
        assert len(regime["errors"]) == len(regime["cases"]) > 0
        assert all(cases[name].kind == kind for name in regime["cases"])
        assert set(regime["sources"]) == {cases[name].source_id for name in regime["cases"]}
    assert len(data["regimes"]["llm_step"]["errors"]) >= intervals.MIN_CASES
    low, high = step_interval(10**9)["interval_ns"]
    assert low < 10**9 * 1.001 and high > 10**9 * 0.999 and low < high
