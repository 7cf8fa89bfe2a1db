"""Sweep rows keep the 90 % prediction intervals the reports carry: a training step's (stats.step_interval_90_ns)
and a serving point's (interval_90), as low and high columns typed by their names (ns stay integers)."""

from __future__ import annotations

from astra_sweep.point import SERVE_INTERVALS, fill_row, fill_serve_row
from astra_sweep.results import Results, result_kind


def _report(stats):
    return {"ranks": [{"rank": 0, "finish_ns": 100, "compute_ns": 60, "exposed_comm_ns": 40}], "stats": stats,
            "settings": {}}


def test_a_training_steps_interval_is_two_columns():
    row = {}
    fill_row(row, _report({"step_interval_90_ns": [96, 114], "step_interval_90_cases": 14}))
    assert (row["step_ns"], row["step_interval_90_low_ns"], row["step_interval_90_high_ns"]) == (100, 96, 114)
    row = {}
    fill_row(row, _report({}))  # not a training step on a platform, or no validation plugin: no columns
    assert "step_interval_90_low_ns" not in row and "step_interval_90_high_ns" not in row


def test_a_serving_points_intervals_are_columns_and_none_is_no_column():
    report = {"ttft_ns": {"p50": 10}, "tpot_ns": {"p50": 2}, "e2e_ns": {}, "queueing_delay_ns": {},
              "interval_90": {"ttft_p50_ns": [8, 15], "tpot_p50_ns": None, "throughput_tokens_per_s": [90.5, 100.0],
                              "cases": {"ttft": 5, "tpot": 2, "throughput": 4}}}
    row = {}
    fill_serve_row(row, report)
    assert (row["ttft_p50_interval_90_low_ns"], row["ttft_p50_interval_90_high_ns"]) == (8, 15)
    assert (row["throughput_interval_90_low_tokens_per_s"], row["throughput_interval_90_high_tokens_per_s"]) == (
        90.5, 100.0)
    assert "tpot_p50_interval_90_low_ns" not in row


def test_the_columns_are_typed_by_name_and_survive_parquet(tmp_path):
    assert result_kind("step_interval_90_low_ns") == "int" and result_kind("step_interval_90_high_ns") == "int"
    for low, high in SERVE_INTERVALS.values():
        assert result_kind(low) == result_kind(high) == ("int" if low.endswith("_ns") else "float")
    results = Results(tmp_path / "r.parquet", ["point", "status"], {})
    results.add({"point": "p0", "step_interval_90_low_ns": 96, "step_interval_90_high_ns": 114,
                 "throughput_interval_90_low_tokens_per_s": 90.5, "status": "ok"})
    results.finish(["p0"])
    (row,) = Results(tmp_path / "r.parquet", [], {})._read_results()
    assert row["step_interval_90_low_ns"] == 96 and isinstance(row["step_interval_90_high_ns"], int)
    assert row["throughput_interval_90_low_tokens_per_s"] == 90.5
