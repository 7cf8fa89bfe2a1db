"""Serving metrics' empirical 90 % intervals from the serving regime's cross-validated errors, per metric family:
hand-computed from a residuals file with known errors, in the function and in astra serve's report and terminal."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_validation import intervals
from astra_validation.intervals import (load_residuals, residuals_document, serving_family_errors,
                                        serving_intervals)

#: ttft: measured / simulated 0.8, 1.0, 1.25 -> 5th percentile 0.8 + 0.1 x 0.2 = 0.82, 95th 1.0 + 0.9 x 0.25 = 1.225;
#: tpot: two cases, no interval; throughput: always 10 % high -> measured = simulated / 1.1
ERRORS = {"ttft": [0.25, -0.2, 0.0], "tpot": [0.1, 0.3], "throughput": [0.1, 0.1, 0.1, 0.1]}


def _residuals(tmp_path):
    metrics = [f for f, errors in ERRORS.items() for _ in errors]
    errors = [e for f in ERRORS for e in ERRORS[f]]
    path = tmp_path / "residuals.json"
    path.write_text(json.dumps({"generated_by": "test", "regimes": {"serving": {
        "errors": errors, "metrics": metrics, "cases": [f"c{i}" for i in range(len(errors))], "sources": ["s"]}}}))
    return path


def test_each_family_gets_its_own_errors_interval(tmp_path):
    found = serving_intervals({"ttft": 100_000_000, "tpot": 20_000_000, "throughput": 1100.0}, _residuals(tmp_path))
    assert found["ttft"]["cases"] == 3 and found["ttft"]["interval"] == pytest.approx([82_000_000, 122_500_000])
    assert found["tpot"] == {"interval": None, "cases": 2}
    assert found["throughput"]["interval"] == pytest.approx([1000.0, 1000.0])
    # a metric the report does not have (no request of two tokens: no TPOT) has no interval
    assert serving_intervals({"ttft": None}, _residuals(tmp_path)) == {"ttft": {"interval": None, "cases": 3}}
    assert serving_intervals({"ttft": 1}, tmp_path / "absent.json") is None


def test_the_residuals_file_keeps_each_serving_cases_family_and_checks_it(tmp_path):
    doc = residuals_document({"predictions": [
        {"name": "a", "kind": "serving", "source_id": "p", "error": 0.1, "metric": "ttft"},
        {"name": "b", "kind": "serving", "source_id": "p", "error": -0.1, "metric": "throughput"},
        {"name": "c", "kind": "llm_step", "source_id": "q", "error": 0.0}], "not_predicted": []}, "test")
    assert doc["regimes"]["serving"]["metrics"] == ["ttft", "throughput"]
    assert "metrics" not in doc["regimes"]["llm_step"]
    assert serving_family_errors(doc) == {"ttft": [0.1], "tpot": [], "throughput": [-0.1]}
    path = tmp_path / "bad.json"
    doc["regimes"]["serving"]["metrics"] = ["ttft", "e2e"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="metrics must list one of ttft, tpot, throughput per error"):
        load_residuals(path)


def test_the_shipped_file_takes_its_families_from_the_registry():
    from astra_validation.registry import load_cases

    data = load_residuals()
    cases = {c.name: c for c in load_cases()}
    regime = data["regimes"]["serving"]
    by_family = serving_family_errors(data)
    for family, errors in by_family.items():
        assert errors == [e for name, e in zip(regime["cases"], regime["errors"])
                          if cases[name].serving_family == family]
    assert sum(map(len, by_family.values())) == len(regime["errors"])


def test_astra_serve_prints_and_writes_the_intervals(tmp_path, monkeypatch, capsys):
    """End to end: the report's interval_90 is the hand-computed one of its own medians (integer ns), the terminal
    shows it, and a family of two cases says none."""
    monkeypatch.setattr(intervals, "RESIDUALS", _residuals(tmp_path))
    out = tmp_path / "r.json"
    assert main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "5", "--requests", "6",
                 "--prompt-len", "64", "--output-len", "4", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    ttft, throughput = report["ttft_ns"]["p50"], report["throughput_tokens_per_s"]
    found = report["interval_90"]
    assert found["ttft_p50_ns"] == [round(ttft * 0.82), round(ttft * 1.225)]
    assert all(isinstance(v, int) for v in found["ttft_p50_ns"])
    assert found["tpot_p50_ns"] is None and found["cases"] == {"ttft": 3, "tpot": 2, "throughput": 4}
    assert found["throughput_tokens_per_s"] == pytest.approx([throughput / 1.1, throughput / 1.1])
    low, high = (f"{ns / 1e6:.1f} ms" for ns in found["ttft_p50_ns"])
    assert f"(90 %: {low}-{high}, empirical over 3 validated cases)" in text
    assert "(90 %: none, 2 validated cases)" in text
    assert f"(90 %: {throughput / 1.1:.0f} tok/s-{throughput / 1.1:.0f} tok/s, empirical over 4" in text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.floats(-0.9, 3, allow_nan=False), max_size=6),
       st.none() | st.text(max_size=5) | st.lists(st.sampled_from(["ttft", "tpot", "throughput", "e2e", "", 3]),
                                                  max_size=7))
def test_a_serving_regimes_metrics_either_load_and_give_ordered_intervals_or_are_a_config_error(tmp_path, errors,
                                                                                                metrics):
    path = tmp_path / "fuzz.json"
    regime = {"errors": errors, "cases": [f"c{i}" for i in range(len(errors))]}
    if metrics is not None:
        regime["metrics"] = metrics
    path.write_text(json.dumps({"regimes": {"serving": regime}}))
    try:
        found = serving_intervals({"ttft": 10**8, "tpot": 10**7, "throughput": 500.0}, path)
    except ConfigError as exc:
        assert str(path) in str(exc) and metrics is not None
        return
    for family, entry in found.items():
        assert entry["cases"] <= len(errors)
        if entry["interval"] is not None:
            assert entry["cases"] >= intervals.MIN_CASES and entry["interval"][0] <= entry["interval"][1]
