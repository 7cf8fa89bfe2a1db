"""A sweep point holds its LLM workload in memory (issue 37): every row is the row of the workload written to the
sweep's cache and parsed back, to the ns, in one process and across worker processes (each holds its own)."""

from __future__ import annotations

from astra_sweep import Executor, point, run_sweep
from astra_sweep.results import Results

SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 2, hidden: 512, heads: 8, kv-heads: 8, ffn-hidden: 2048, seq-len: 256, tp: 2, pp: 2, dp: 2, micro-batches: 2}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {workload.llm.tp: [2, 4], run.platform-collective: [ring, nccl]}
"""


class InProcess(Executor):
    """Every point in this process (the base case's held workload is the points' own)."""

    name = "in-process"

    def run(self, fn, tasks, timeout=None):
        for task, payload in tasks:
            yield task, fn(task, payload)


def _rows(tmp_path, name, **how):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / f"{name}.csv"
    summary = run_sweep(str(spec), str(out), progress=False, **how)
    rows = Results(str(out), [], {})._read_results()
    assert summary["ok"] == len(rows) == 4, [r["status"] for r in rows]
    return sorted(({k: v for k, v in row.items() if k != "wall_s"} for row in rows), key=lambda r: r["point"])


def test_held_rows_are_the_written_rows_in_process_and_in_workers(tmp_path, monkeypatch):
    held = []
    make = point._held
    monkeypatch.setattr(point, "_held", lambda ref, sweep_id: held.append(ref.digest) or make(ref, sweep_id))
    in_memory = _rows(tmp_path, "held", executor_object=InProcess())
    # the base case's workload and the other layout's, each generated once in this process and reused
    assert len(held) == 5 and len(set(held)) == 2
    assert not point._HELD_WORKLOADS  # forgotten with the sweep's cache
    workers = _rows(tmp_path, "workers", jobs=2)  # the base held here, every point's in its worker's own memory
    monkeypatch.setattr(point, "HOLD_LLM_WORKLOADS", False)
    written = _rows(tmp_path, "written", executor_object=InProcess())
    assert in_memory == written == workers
    assert all(row["step_ns"] > 0 for row in written)
    assert len({row["step_ns"] for row in written}) > 1


def test_held_workloads_beyond_the_budget_are_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(point, "HELD_NODES", 1)  # keep only the most recent workload
    rows = _rows(tmp_path, "small-budget", executor_object=InProcess())
    monkeypatch.setattr(point, "HOLD_LLM_WORKLOADS", False)
    assert rows == _rows(tmp_path, "written", executor_object=InProcess())
