"""Serving points in astra sweep (workload.serve): a QPS sweep's rows are astra serve's reports, its spec errors
name the key, and astra plot draws the rows as throughput-latency curves."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("astra_serving")

from astra_sim.cli import main  # noqa: E402
from astra_sim.errors import ConfigError  # noqa: E402

from astra_sweep.commands import command_parsers  # noqa: E402
from astra_sweep.results import Results  # noqa: E402
from astra_sweep.spec import load_spec, parse_spec  # noqa: E402

SERVE = {"model": "llama3-8b", "platform": "hgx-h100", "tp": 8, "requests": 24, "prompt-len": 128,
         "output-len": 8, "seed": 3}


@pytest.fixture(scope="module")
def parsers():
    return command_parsers()["parsers"]


def test_a_qps_sweep_gives_astra_serves_numbers_and_plots_as_curves(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("workload:\n  serve: " + json.dumps({**SERVE, "slo-ttft": 100}) + "\n"
                    "axes:\n  grid: {workload.serve.qps: [1, 50]}\n")
    out = str(tmp_path / "r.csv")
    assert main(["sweep", str(spec), "-o", out, "--jobs", "1", "--no-progress"]) == 0
    rows = sorted(Results(out, [], {})._read_results(), key=lambda r: r["workload.serve.qps"])
    assert [r["status"] for r in rows] == ["ok", "ok"]
    report = tmp_path / "direct.json"
    argv = [f"--{k}={v}" for k, v in SERVE.items()]
    assert main(["serve", *argv, "--qps", "50", "--slo-ttft", "100", "-o", str(report), "-q"]) == 0
    direct = json.loads(report.read_text())
    fast = rows[1]
    for key, name in (("ttft", "ttft_ns"), ("tpot", "tpot_ns"), ("e2e", "e2e_ns"), ("queueing", "queueing_delay_ns")):
        for stat in ("p50", "p90", "p99"):
            assert fast[f"{key}_{stat}_ns"] == direct[name][stat]  # integer ns, to the ns
            assert isinstance(fast[f"{key}_{stat}_ns"], int)
    assert fast["duration_ns"] == direct["duration_ns"]
    assert fast["throughput_tokens_per_s"] == pytest.approx(direct["throughput_tokens_per_s"])
    assert fast["goodput_requests_per_s"] == pytest.approx(direct["goodput"]["requests_per_s"])
    assert fast["gpus"] == 8 and fast["step_ns"] in (None, "")
    assert rows[1]["ttft_p50_ns"] > rows[0]["ttft_p50_ns"]  # queueing at 50 QPS
    assert main(["plot", out, "-o", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "throughput_latency.png").stat().st_size > 10_000


@pytest.mark.parametrize("data,message", [
    ({"workload": {"serve": SERVE}, "run": {"platform": "hgx-h100"}},
     "run: a serving spec (workload.serve) takes astra serve's options"),
    ({"workload": {"serve": {**SERVE, "report-json": "x.json"}}}, "report-json is set by the sweep itself"),
    ({"workload": {"serve": {**SERVE, "output": "x.json"}}}, "output is set by the sweep itself"),
    ({"workload": {"serve": {**SERVE, "qpss": 1}}}, "unknown astra serve option 'qpss' (did you mean 'qps'?)"),
    ({"workload": {"serve": SERVE}, "axes": {"grid": {"run.nodes": [1, 2]}}},
     "axis run.nodes: a serving spec varies astra serve's options"),
    ({"workload": {"serve": SERVE}, "axes": {"grid": {"workload.serve.router": ["random"]}}},
     "is not one of round-robin, least-loaded, kv-aware"),
])
def test_serving_spec_errors_name_the_key(parsers, data, message):
    with pytest.raises(ConfigError, match=None) as info:
        parse_spec(data, "spec.yaml", parsers)
    assert message in str(info.value)


def test_a_base_case_astra_serve_refuses_runs_no_point(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("workload:\n  serve: {model: llama3-8b, platform: no-such-machine, qps: 1}\n")
    assert main(["sweep", str(spec), "-o", str(tmp_path / "r.csv"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "the base case" in err and "no-such-machine" in err
    assert not (tmp_path / "r.csv").exists()


def test_the_shipped_qps_sweep_example_is_a_valid_spec(parsers):
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "examples" / "serving" / "qps_sweep.yaml"
    spec = load_spec(str(example), parsers)
    assert spec.axes == ["workload.serve.tp", "workload.serve.qps"] and len(spec.points) == 8
