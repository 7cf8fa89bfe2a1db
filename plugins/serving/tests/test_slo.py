"""Serving SLOs as percentiles: --slo-ttft-pNN / --slo-tpot-pNN in astra serve and the serving search, the
deprecated --slo-ttft/--slo-tpot/--slo-fraction, the percentile shown, the small-sample warning."""

import argparse
import json

import pytest
from hypothesis import given, strategies as st

from astra_serving.cli import small_sample_warning, small_sample_warnings
from astra_serving.metrics import describe, parse_slo_key, slo_key, slo_results
from astra_serving.search import search_slos
from astra_serving.spec import ServeSpec
from astra_sim.cli import main
from astra_sim.errors import ConfigError

MS = 1_000_000
SERVE = ["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--tp", "8", "--qps", "2", "--requests", "30",
         "--prompt-len", "128", "--output-len", "8"]


def test_slo_keys_name_a_latency_and_a_percentile():
    assert parse_slo_key("slo_ttft_p99") == ("ttft", 99) and parse_slo_key("slo-tpot-p99.9") == ("tpot", 99.9)
    assert slo_key("ttft", 99) == "slo_ttft_p99" and slo_key("tpot", 99.9) == "slo_tpot_p99.9"
    for bad in ("slo_ttft", "slo_ttft_p100", "slo_ttft_p0", "slo_e2e_p99", "slo_ttft_p99.5", "slo_ttft_pxx"):
        assert parse_slo_key(bad) is None


@given(st.text(max_size=30))
def test_any_option_name_is_an_slo_or_none(name):
    found = parse_slo_key(name)
    assert found is None or (found[0] in ("ttft", "tpot") and slo_key(*found) == name.replace("-", "_"))


def test_an_slo_is_met_when_its_percentile_is_within_the_target():
    ttft = [i * MS for i in range(1, 101)]  # 1 .. 100 ms
    met, missed = slo_results([("ttft", 50, 60.0), ("ttft", 99, 60.0)], ttft, [])
    assert met["met"] and met["value_ns"] == 50_500_000 and met["target_ns"] == 60 * MS
    assert not missed["met"] and missed["value_ns"] == 99_010_000 and missed["fraction_within"] == 0.6
    assert missed["requests_beyond"] == 1 and missed["requests"] == 100
    (none,) = slo_results([("tpot", 90, 5.0)], ttft, [])  # no request with a TPOT: not met, no value
    assert none["value_ns"] is None and not none["met"]


def _report(**extra):
    dist = {"p50": 1 * MS, "p90": 2 * MS, "p99": 3 * MS}
    return {"requests": 50, "duration_ns": 10**9, "throughput_requests_per_s": 1.0, "throughput_tokens_per_s": 1.0,
            "throughput_input_tokens_per_s": 1.0, "preemptions": 0,
            **{k: dict(dist) for k in ("ttft_ns", "tpot_ns", "e2e_ns", "queueing_delay_ns")}, **extra}


def test_the_percentile_asked_for_is_shown():
    slo = [{"metric": "tpot", "percentile": 95, "target_ns": 50 * MS, "value_ns": 2_500_000, "met": True,
            "requests": 50, "requests_beyond": 2, "fraction_within": 1.0}]
    text = describe(_report(slo=slo, goodput={"requests_per_s": 1.0, "fraction": 1.0, "slo_ttft_ns": None,
                                              "slo_tpot_ns": 50 * MS}))
    assert "TPOT: p50 1.0 ms, p90 2.0 ms, p95 2.5 ms, p99 3.0 ms" in text
    assert "SLO TPOT p95 <= 50 ms: met (TPOT p95 is 2.5 ms)" in text
    assert "p95" not in text.split("TTFT:")[1].split("\n")[0]  # TTFT has no SLO: its usual percentiles
    assert "None" not in text and "TTFT <=" not in text


def test_fewer_than_100_requests_beyond_the_asked_percentile_is_said():
    assert "slowest 5 of 500 requests" in small_sample_warning(500, 99, 100, "TTFT")
    assert "--requests 10000 or more" in small_sample_warning(500, 99, 100, "TTFT")
    assert small_sample_warning(10_000, 99, 100, "TTFT") is None
    assert small_sample_warning(1000, 90, 100, "TPOT") is None and small_sample_warning(999, 90, 100, "TPOT")
    slo = [{"metric": "ttft", "percentile": 90, "requests": 1000, "requests_beyond": 100}]
    assert small_sample_warnings({"requests": 1000, "slo": slo}) == []


def test_serve_with_percentile_slos(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main([*SERVE, "--slo-ttft-p99", "500", "--slo-tpot-p95", "0.001", "-o", str(out)]) == 0
    printed = capsys.readouterr()
    report = json.loads(out.read_text())
    ttft, tpot = sorted(report["slo"], key=lambda s: s["metric"], reverse=True)
    assert (ttft["metric"], ttft["percentile"], ttft["target_ns"], ttft["met"]) == ("ttft", 99, 500 * MS, True)
    assert (tpot["metric"], tpot["percentile"], tpot["target_ns"], tpot["met"]) == ("tpot", 95, 1000, False)
    assert ttft["value_ns"] == report["ttft_ns"]["p99"] and isinstance(tpot["value_ns"], int)
    assert "SLO TTFT p99 <= 500 ms: met" in printed.out and "SLO TPOT p95 <= 0.001 ms: MISSED" in printed.out
    assert "TPOT: p50" in printed.out and ", p95 " in printed.out and "None" not in printed.out
    assert "the TTFT p99 SLO rests on the slowest 1 of 30 requests" in printed.err


def test_the_old_flags_still_work_and_say_the_new_spelling(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main([*SERVE, "--slo-ttft", "200", "-o", str(out), "-q"]) == 0
    err = capsys.readouterr().err
    assert "--slo-ttft 200 is deprecated: write --slo-ttft-p90 200" in err
    report = json.loads(out.read_text())
    assert report["goodput"]["slo_ttft_ns"] == 200 * MS and report["goodput"]["slo_tpot_ns"] is None
    assert [(s["metric"], s["percentile"]) for s in report["slo"]] == [("ttft", 90)]


def test_a_mapping_names_slos_as_the_flags_do():
    spec = ServeSpec.from_mapping({"model": "llama3-8b", "platform": "hgx-h100", "qps": 1, "slo_ttft_p99": 500,
                                   "slo-tpot-p99.9": 20})
    assert spec.slos == (("tpot", 99.9, 20.0), ("ttft", 99, 500.0))
    again = ServeSpec.from_mapping({k: v for k, v in spec.to_mapping().items() if k != "run"})
    assert again.slos == spec.slos
    with pytest.raises(ConfigError, match="slo_ttft_p100"):
        ServeSpec.from_mapping({"model": "llama3-8b", "platform": "hgx-h100", "slo_ttft_p100": 1})


def _search_args(**given):
    values = {"slo_ttft": None, "slo_tpot": None, "slo_fraction": None, **given}
    return argparse.Namespace(**values)


def test_search_slos_read_the_percentile_flags_and_the_deprecated_ones(capsys):
    assert search_slos(_search_args(**{"slo_ttft_p99": 500.0})) == (("ttft", 99, 500.0),)
    assert search_slos(_search_args(slo_ttft=80.0)) == (("ttft", 90, 80.0),)
    assert "--slo-ttft 80 is deprecated: write --slo-ttft-p90 80" in capsys.readouterr().err
    assert search_slos(_search_args(slo_ttft=80.0, slo_tpot=30.0, slo_fraction=0.99)) == (
        ("ttft", 99, 80.0), ("tpot", 99, 30.0))
    assert ("--slo-ttft 80 --slo-tpot 30 --slo-fraction 0.99 is deprecated: write --slo-ttft-p99 80 "
            "--slo-tpot-p99 30") in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--slo-ttft-p99 500"):
        search_slos(_search_args())
    with pytest.raises(ConfigError, match="--slo-fraction 0.9 goes with the deprecated"):
        search_slos(_search_args(slo_fraction=0.9, **{"slo_ttft_p90": 80.0}))
    with pytest.raises(ConfigError, match="--slo-fraction must be"):
        search_slos(_search_args(slo_ttft=80.0, slo_fraction=0.995))


def test_the_search_warns_when_a_percentile_rests_on_a_few_requests(capsys):
    from astra_serving.search import search_deployments

    args = _search_args(qps=1.0, platform="no-such-platform", **{"slo_ttft_p99": 80.0, "slo_tpot_p50": 30.0})
    with pytest.raises(ConfigError, match="no-such-platform"):  # (stops before any candidate runs)
        search_deployments(args)
    err = capsys.readouterr().err
    assert "the TTFT p99 SLO rests on the slowest 5 of 500 requests" in err and "TPOT p50" not in err
