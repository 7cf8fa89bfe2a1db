"""A sweep point that simulates a training step on a platform carries its empirical 90 % interval: the validation
plugin's astra_run_finish runs in the sweep's worker processes, and a residuals file of known errors gives the
hand-computed columns."""

from __future__ import annotations

from astra_sim.executors import Executor
from astra_sweep import run_sweep
from astra_sweep.results import Results
from astra_validation import intervals
from astra_validation.intervals import step_interval

SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 2, hidden: 512, heads: 8, kv-heads: 8, ffn-hidden: 2048, seq-len: 128, tp: 2, pp: 1, dp: 4, micro-batches: 1}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {workload.llm.tp: [2, 4]}
"""


class InProcess(Executor):
    """Runs each point here (so that a monkeypatched residuals file is the one the hook reads)."""

    def run(self, fn, tasks, timeout=None):
        for task, payload in tasks:
            yield task, fn(task, payload)


def _rows(tmp_path, **kwargs):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "r.parquet"
    run_sweep(str(spec), str(out), **kwargs)
    return Results(out, [], {})._read_results()


def test_known_errors_give_the_hand_computed_columns(tmp_path, monkeypatch):
    # measured / simulated 1/1.25 = 0.8, 1.0, 1/0.8 = 1.25: the 5th percentile 0.8 + 0.1 x 0.2 = 0.82, the 95th
    # 1.0 + 0.9 x 0.25 = 1.225
    residuals = tmp_path / "residuals.json"
    residuals.write_text('{"regimes": {"llm_step": {"errors": [0.25, 0.0, -0.2], "cases": ["a", "b", "c"]}}}')
    monkeypatch.setattr(intervals, "RESIDUALS", residuals)
    rows = _rows(tmp_path, executor_object=InProcess())
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "ok"
        assert row["step_interval_90_low_ns"] == round(row["step_ns"] * 0.82)
        assert row["step_interval_90_high_ns"] == round(row["step_ns"] * 1.225)


def test_the_hook_runs_in_the_sweeps_worker_processes(tmp_path):
    """--jobs 2: spawned workers load every installed plugin; their columns are the shipped residuals' interval."""
    rows = _rows(tmp_path, jobs=2)
    for row in rows:
        assert row["status"] == "ok"
        expected = step_interval(row["step_ns"], "llm_step")["interval_ns"]
        assert [row["step_interval_90_low_ns"], row["step_interval_90_high_ns"]] == expected
