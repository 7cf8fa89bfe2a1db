"""astra serve's 90 % intervals come through serving's own hook (astra_serve_intervals), which a plugin that knows
the model's cross-validated errors implements: the report keeps integer ns, the terminal shows ms; no
implementation, no intervals."""

from __future__ import annotations

from astra_serving.intervals import describe_interval, report_intervals
from astra_serving.metrics import describe
from astra_sim import hookimpl
from astra_sim.plugins import make_plugin_manager


class Scaled:
    """An implementation that scales each value by fixed factors (ttft: 0.8 and 1.5 over 5 cases; tpot: too few
    cases; throughput: 0.9 and 1.0 over 4)."""

    calls = []

    @hookimpl(optionalhook=True)
    def astra_serve_intervals(self, values):
        self.calls.append(dict(values))
        return {"ttft": {"interval": [values["ttft"] * 0.8, values["ttft"] * 1.5], "cases": 5},
                "tpot": {"interval": None, "cases": 2},
                "throughput": {"interval": [values["throughput"] * 0.9, values["throughput"]], "cases": 4}}


def _report():
    return {"requests": 3, "duration_ns": 2_000_000_000, "ttft_ns": {"p50": 100_000_001, "p90": 1, "p99": 1},
            "tpot_ns": {"p50": 20_000_000, "p90": 1, "p99": 1}, "e2e_ns": {"p50": 5, "p90": 5, "p99": 5},
            "queueing_delay_ns": {"p50": 1, "p90": 1, "p99": 1}, "throughput_tokens_per_s": 1000.0,
            "throughput_requests_per_s": 1.5, "throughput_input_tokens_per_s": 10.0, "preemptions": 0}


def test_the_implementation_gets_the_median_latencies_and_the_throughput_and_ns_stay_integers():
    pm = make_plugin_manager(select=[], extra_plugins=[Scaled()])
    report = _report()
    found = report_intervals(report, pm)
    assert Scaled.calls[-1] == {"ttft": 100_000_001, "tpot": 20_000_000, "throughput": 1000.0}
    assert found == {"ttft_p50_ns": [80_000_001, 150_000_002], "tpot_p50_ns": None,
                     "throughput_tokens_per_s": [900.0, 1000.0], "cases": {"ttft": 5, "tpot": 2, "throughput": 4}}
    assert all(isinstance(v, int) for v in found["ttft_p50_ns"])
    assert report_intervals(report, pm) == found  # the spec is added once; a second report asks again


def test_the_terminal_shows_each_interval_after_its_metric_or_says_none():
    report = _report()
    report["interval_90"] = report_intervals(report, make_plugin_manager(select=[], extra_plugins=[Scaled()]))
    text = describe(report)
    assert "TTFT: p50 100.0 ms (90 %: 80.0 ms-150.0 ms, empirical over 5 validated cases), p90" in text
    assert "TPOT: p50 20.0 ms (90 %: none, 2 validated cases), p90" in text
    assert "1000 output tok/s (90 %: 900 tok/s-1000 tok/s, empirical over 4 validated cases) (10 input" in text
    assert "E2E: p50 0.0 ms, p90" in text  # E2E and queueing have no interval
    assert describe_interval(report, "e2e", str) == ""


def test_without_an_implementation_there_is_no_interval():
    pm = make_plugin_manager(select=[])
    report = _report()
    assert report_intervals(report, pm) is None
    assert "90 %" not in describe(report)
