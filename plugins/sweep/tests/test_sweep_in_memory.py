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
  grid: {run.platform-collective: [ring, nccl], workload.llm.tp: [2, 4]}
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


def test_held_rows_are_the_written_rows_in_process_and_in_workers_and_beyond_the_budget(tmp_path, monkeypatch):
    """Held in this process, in workers, and with a budget of one workload (a dropped layout generated again): the
    rows of the sweep whose workloads are written. (One test, CI margin: the written sweep, the reference of both
    checks, runs once.)"""
    import astra_workload_generators.llm as llm

    made = []
    generate = llm.generate_llm_workload
    monkeypatch.setattr(llm, "generate_llm_workload",
                        lambda *a, **k: made.append(k.get("in_memory")) or generate(*a, **k))
    in_memory = _rows(tmp_path, "held", executor_object=InProcess())
    # the base case's layout (also two points') and the other layout, each generated once in this process, held
    assert made == [True, True]
    monkeypatch.setattr(llm, "generate_llm_workload", generate)
    assert not point._HELD_WORKLOADS  # forgotten with the sweep's cache
    workers = _rows(tmp_path, "workers", jobs=2)  # the base held here, every point's in its worker's own memory
    with monkeypatch.context() as budget:
        budget.setattr(point, "HELD_NODES", 1)  # keep only the most recent workload
        made.clear()
        budget.setattr(llm, "generate_llm_workload", lambda *a, **k: made.append(1) or generate(*a, **k))
        small_budget = _rows(tmp_path, "small-budget", executor_object=InProcess())
        assert len(made) == 4  # base 2, (2), 4, 2 again, 4 again: a dropped layout is generated again
    monkeypatch.setattr(point, "HOLD_LLM_WORKLOADS", False)
    written = _rows(tmp_path, "written", executor_object=InProcess())
    assert in_memory == written == workers
    assert small_budget == written
    assert all(row["step_ns"] > 0 for row in written)
    assert len({row["step_ns"] for row in written}) > 1
