"""astra validate --cv on serving cases: reported apart from training steps, per metric family and per source left
out; the serving cases of several sources in the shipped registry."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import yaml

from astra_sim.cli import main
from astra_validation.registry import load_cases
from astra_validation.summary import cv_lines, serving_loso


def _row(name, source, error, kind="serving"):
    return {"name": name, "kind": kind, "source_id": source, "role": "check", "how": "plain", "refitted": [],
            "error": error}


def test_serving_loso_groups_by_family_and_source_and_gives_throughput_the_sign_of_a_time():
    results = [{"name": "a-ttft", "kind": "serving", "source_id": "A", "metric": "ttft"},
               {"name": "a-tput", "kind": "serving", "source_id": "A", "metric": "throughput"},
               {"name": "b-tpot", "kind": "serving", "source_id": "B", "metric": "tpot"},
               {"name": "b-tput", "kind": "serving", "source_id": "B", "metric": "throughput"},
               {"name": "c-ttft", "kind": "serving", "source_id": "C", "metric": "ttft"},
               {"name": "step", "kind": "llm_step", "source_id": "D"}]
    predictions = [_row("a-ttft", "A", -0.20), _row("a-tput", "A", 0.10), _row("b-tpot", "B", -0.04),
                   _row("b-tput", "B", -0.06), _row("step", "D", 0.5, kind="llm_step")]
    got = serving_loso(predictions, results)
    # over all serving cases: the training step is not among them; a throughput 10 % high is 10 % "fast"
    assert got["cases"] == 4 and got["max_abs_error"] == pytest.approx(0.20) and got["worst"] == "a-ttft"
    assert got["median_abs_error"] == pytest.approx((0.06 + 0.10) / 2)
    assert (got["sign_balance"]["positive"], got["sign_balance"]["negative"]) == (1, 3)  # b-tput low = slow
    # per family, the same time-signed errors
    fam = got["families"]
    assert (fam["ttft"]["cases"], fam["tpot"]["cases"], fam["throughput"]["cases"]) == (1, 1, 2)
    assert (fam["throughput"]["sign_balance"]["positive"], fam["throughput"]["sign_balance"]["negative"]) == (1, 1)
    assert fam["ttft"]["sign_balance"]["negative"] == 1
    # per source left out; c-ttft had no out-of-source prediction: listed, not counted
    assert list(got["sources"]) == ["A", "B"]
    assert got["sources"]["A"]["max_abs_error"] == pytest.approx(0.20)
    assert got["sources"]["B"]["median_abs_error"] == pytest.approx(0.05)
    assert got["not_predicted"] == [{"name": "c-ttft", "source_id": "C"}]
    lines = "\n".join(cv_lines({"groups": {}, "serving": got}))
    assert "serving, source out: median |error| 8.0 %, max 20.0 % (a-ttft), 4 cases" in lines
    assert "TTFT: median |error| 20.0 %" in lines and "1 long, 1 short" not in lines
    assert "throughput: median |error| 8.0 %, max 10.0 % (a-tput), 2 cases; signs: 1 low, 1 high" in lines
    assert "A left out:" in lines and "B left out:" in lines and "1, from C" in lines


def _serving_case(name, source, measured, **over):
    case = dict(name=name, kind="serving", source=f"{source}: a row", source_id=source, hardware="1 H100",
                platform="hgx-h100", nodes=1, measured=measured,
                serve=["--model", "gpt2", "--tp", "1", "--qps", "0.01", "--requests", "2", "--prompt-len", "64",
                       "--output-len", "4", "--host-us-per-seq", "0", "--seed", "1"])
    case.update(over)
    return case


def test_astra_validate_cv_leaves_each_serving_source_out(tmp_path, monkeypatch, capsys):
    """Three serving sources: nothing fitted on A and C (their prediction is the plain run), a constant fitted on
    B that --cv refits without B alone while B's cases run; the JSON and the terminal give serving apart."""
    from astra_validation import crossval

    excluded = []

    @contextmanager
    def refit(sources):
        excluded.append(set(sources))
        yield

    monkeypatch.setitem(crossval.TUNED, "test.serving_constant", crossval.TunedConstant(
        "test.serving_constant", "source B's rows", "none (a test)", refit, kinds=("serving",)))
    registry = tmp_path / "cases.yaml"
    registry.write_text(yaml.safe_dump({"cases": [
        _serving_case("a-ttft", "A", {"ttft_p50_ms": 3.0}),
        _serving_case("b-ttft", "B", {"ttft_p50_ms": 3.0}, role="fit", fitted=["test.serving_constant"]),
        _serving_case("b-tpot", "B", {"tpot_p50_ms": 1.0}, role="fit", fitted=["test.serving_constant"]),
        _serving_case("c-tput", "C", {"output_tokens_per_s": 100.0},
                      serve=["--model", "gpt2", "--tp", "1", "--qps", "1000000", "--requests", "2",
                             "--max-num-seqs", "1", "--prompt-len", "64", "--output-len", "4", "--seed", "1"])]}))
    out = tmp_path / "cv.json"
    assert main(["validate", "--cases", str(registry), "--cv", "-o", str(out)]) == 0
    assert excluded == [{"B"}, {"B"}]  # each of B's cases, with B and only B left out
    data = json.loads(out.read_text())
    plain = {r["name"]: r for r in data["cases"]}
    assert {r["name"]: r["metric"] for r in data["cases"]} == {"a-ttft": "ttft", "b-ttft": "ttft", "b-tpot": "tpot",
                                                               "c-tput": "throughput"}
    cv = data["summary"]["cv"]
    how = {r["name"]: r["how"] for r in cv["predictions"]}
    assert how == {"a-ttft": "plain", "b-ttft": "refit", "b-tpot": "refit", "c-tput": "plain"}
    serving = cv["serving"]
    assert serving["cases"] == 4 and set(serving["sources"]) == {"A", "B", "C"}
    assert serving["sources"]["B"]["cases"] == 2 and serving["not_predicted"] == []
    assert serving["families"]["throughput"]["cases"] == 1
    # a throughput's error is on the metric; its sign is counted as a time's (below the measured one: slow), in
    # the serving figures and in the headline over every time kind
    assert serving["families"]["throughput"]["sign_balance"]["positive"] == (plain["c-tput"]["error"] < 0)
    assert serving["sources"]["C"]["sign_balance"]["positive"] == (plain["c-tput"]["error"] < 0)
    slow = {r["name"] for r in data["cases"] if (r["error"] < 0 if r["metric"] == "throughput" else r["error"] > 0)}
    assert cv["sign_balance"]["positive"] == len(slow)  # left one source out, fit and check cases alike
    assert data["summary"]["sign_balance"]["positive"] == len(slow & {"a-ttft", "c-tput"})  # the check cases
    text = capsys.readouterr().out
    assert "serving, source out:" in text and "TTFT:" in text and "TPOT:" in text and "throughput:" in text
    assert "B left out:" in text and "training steps, source out" not in text


def test_the_shipped_registry_has_serving_cases_from_several_sources_each_of_one_family():
    serving = [c for c in load_cases() if c.kind == "serving"]
    sources = {c.source_id for c in serving}
    assert {"sglang-benchmark-vllm060", "lmdeploy-a100-fp16", "trtllm-performance-md",
            "nemo-framework-llama2-inference"} <= sources
    checked = {c.source_id for c in serving if c.role == "check"}
    assert len(checked) >= 3  # sources nothing was fitted on: --cv predicts them
    for case in serving:
        assert case.serving_family in ("ttft", "tpot", "throughput"), case.name
    families = {c.serving_family for c in serving if c.role == "check"}
    assert families == {"ttft", "tpot", "throughput"}


def test_a_case_file_beside_the_registry_is_loaded_and_its_names_must_be_new(tmp_path, monkeypatch):
    import shutil

    from astra_sim.errors import ConfigError
    from astra_validation import registry

    shutil.copy(registry.CASES_DIR / "cases.yaml", tmp_path / "cases.yaml")
    monkeypatch.setattr(registry, "CASES_DIR", tmp_path)
    without = load_cases()
    (tmp_path / "serving_sources.yaml").write_text(yaml.safe_dump({"cases": [
        _serving_case("extra-ttft", "X", {"ttft_p50_ms": 3.0})]}))
    cases = load_cases()
    assert [c.name for c in cases if c.source_id == "X"] == ["extra-ttft"] and len(cases) == len(without) + 1
    (tmp_path / "serving_sources.yaml").write_text(yaml.safe_dump({"cases": [
        _serving_case(without[0].name, "X", {"ttft_p50_ms": 3.0})]}))
    with pytest.raises(ConfigError, match="also in"):
        load_cases()


def test_the_documented_serving_findings_still_hold():
    """docs/validation.md ("Serving, left one source out"): an isolated prefill of 2048 tokens is within 10 % of
    TensorRT-LLM's first-token latency, one of 128 tokens is short by a fixed cost the model lacks (over 20 %), and a
    batch-1 decode step is within 10 % of LMDeploy's; asserted so that the page is revisited when the model moves."""
    from astra_validation.runner import run_case

    by_name = {c.name: c for c in load_cases()}
    error = {name: run_case(by_name[name])["error"] for name in (
        "trtllm-v05-llama2-7b-a100-b1-in2048-ttft", "trtllm-v05-llama2-7b-a100-b1-in128-ttft",
        "lmdeploy-llama2-7b-a100-b1-in2048-out2048-tpot")}
    assert abs(error["trtllm-v05-llama2-7b-a100-b1-in2048-ttft"]) < 0.10
    assert error["trtllm-v05-llama2-7b-a100-b1-in128-ttft"] < -0.20
    assert abs(error["lmdeploy-llama2-7b-a100-b1-in2048-out2048-tpot"]) < 0.10


def test_fit_output_mean_finds_the_lognormal_mean_that_pruning_leaves_at_the_target():
    from astra_validation.crossval import fit_output_mean

    # nothing pruned: the mean is the target (rounding to whole tokens moves it by less than half a token)
    assert abs(fit_output_mean(100, 0.5, "10", (1, 10**6, 10**7)) - 100) < 0.5
    # benchmark_serving's rule drops long requests, so the mean before pruning is above the mean after it; the
    # page's 194 tokens after pruning at CV 1.4 give back the lognormal mean cases.yaml was written with (207)
    assert abs(fit_output_mean(194, 1.4, "lognormal:228:1.0", (4, 1024, 2048)) - 207) / 207 < 0.01


def test_without_the_sglang_page_the_sharegpt_outputs_come_from_another_published_sample():
    from astra_validation.crossval import SHAREGPT_PAGE, TUNED, fit_output_mean, plan

    cases = load_cases()
    case = next(c for c in cases if c.name == "vllm060-llama31-70b-tp4-rps4-tpot")
    assert plan(case, cases) == ("refit", ["serving.sharegpt_output_lengths"])
    refit = TUNED["serving.sharegpt_output_lengths"].refit
    with refit({"some-other-source"}) as adjust:
        assert adjust is None
    with refit({SHAREGPT_PAGE}) as adjust:
        changed = adjust(case)
    mean = fit_output_mean(198343 / 1000, 1.0, "lognormal:228:1.0", (4, 1024, 2048))
    i = case.serve.index("--output-len")
    assert changed.serve[i + 1] == f"lognormal:{mean:g}:1" and case.serve[i + 1] == "lognormal:207:1.4"
    assert changed.serve[:i + 1] == case.serve[:i + 1] and changed.serve[i + 2:] == case.serve[i + 2:]
    assert 198.343 < mean < 207
