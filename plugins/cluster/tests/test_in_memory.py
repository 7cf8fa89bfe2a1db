"""An ``llm:`` job's workload is held in memory (issue 37): the combined traces are byte for byte those of the job
written and parsed back, and the whole answer is the same to the ns; the writer frames each of the job's own nodes
once, writing what ``write_et`` writes."""

from __future__ import annotations

import os

import pytest

from astra_sim.chakra import ChakraError, read_et, write_et
from astra_sim.chakra import types as T

from astra_cluster import run_cluster, workloads
from astra_cluster.spec import parse_cluster_spec

SPEC = {"platform": "hgx-h100", "nodes": 2, "seed": 3, "stragglers": {"sigma": 0.05, "draws": 2},
        "jobs": [{"name": "a", "gpus": 8, "workload": {"llm": {"preset": "llama3-8b", "layers": 1, "tp": 4, "dp": 2}}},
                 {"name": "b", "gpus": 8,
                  "workload": {"llm": {"preset": "llama3-8b", "layers": 2, "tp": 2, "pp": 2, "dp": 2,
                                       "micro-batches": 2}}}]}


def _combined(tmp_path, name, hold, monkeypatch):
    """Both jobs placed across the 16 GPUs (interleaved), written as one combined workload: {file: bytes}."""
    monkeypatch.setattr(workloads, "HOLD_LLM_WORKLOADS", hold)
    spec = parse_cluster_spec(SPEC, str(tmp_path / "c.yaml"))
    folder = tmp_path / name
    jobs = [workloads.materialize(job, str(folder), str(tmp_path), spec.platform, spec.run) for job in spec.jobs]
    placed = [(jobs[0], list(range(0, 16, 2))), (jobs[1], list(range(1, 16, 2)))]
    prefix = str(folder / "combined" / "t")
    workloads.write_combined(prefix, 16, placed)
    again = str(folder / "again" / "t")  # the second combined workload of the same jobs: the framed nodes reused
    workloads.write_combined(again, 16, placed[::-1])
    files = {}
    for base in (prefix, again):
        for name_ in sorted(os.listdir(os.path.dirname(base))):
            with open(os.path.join(os.path.dirname(base), name_), "rb") as handle:
                files[f"{os.path.basename(os.path.dirname(base))}/{name_}"] = handle.read()
    return jobs, placed, prefix, files


def test_held_jobs_write_the_written_jobs_combined_traces(tmp_path, monkeypatch):
    held_jobs, placed, prefix, held = _combined(tmp_path, "held", True, monkeypatch)
    _, _, _, written = _combined(tmp_path, "written", False, monkeypatch)
    assert held == written and len(held) == 2 * 17
    from astra_workload_compact import read_compact_workload

    with pytest.raises(ChakraError):  # the job's own class traces are held, not written
        read_et(next(iter(read_compact_workload(held_jobs[0].prefix).traces.values())))
    # ... and write_et's bytes for the moved nodes, gpu by gpu
    combined = workloads.write_combined(str(tmp_path / "ref" / "t"), 16, placed)
    for gpu in range(16):
        index, rank = gpu % 2, gpu // 2
        job, gpus = placed[index]
        metadata, nodes = job.reader.trace(rank)
        out = [workloads._moved(node, gpus, combined["groups"][index], combined["worlds"][index], T) for node in nodes]
        write_et(str(tmp_path / "ref.et"), metadata, out)
        assert (tmp_path / "ref.et").read_bytes() == held[f"combined/t.{gpu}.et"], gpu
    assert read_et(f"{prefix}.1.et").nodes  # a trace any reader parses


def test_the_answer_is_the_same_to_the_ns_and_a_combined_workload_is_written_once_for_every_condition(
        tmp_path, monkeypatch):
    """The answer with the jobs held is the answer with them written, to the ns. The straggler draws run the nominal
    step's traces: written once per placement, the same answer as written anew for every draw. (One test, CI margin:
    the held run is both checks' first run, made once.)"""
    from astra_cluster import steps

    spec = parse_cluster_spec(SPEC, str(tmp_path / "c.yaml"))
    calls = []
    real = steps.write_combined
    monkeypatch.setattr(steps, "write_combined", lambda *a: calls.append(a[0]) or real(*a))
    held = run_cluster(spec)
    assert len(calls) == 2  # one placement per job (3 steps each: nominal and 2 draws)
    assert held["distinct_steps_simulated"] == 6
    assert held["corun"]["jobs"][0]["alone_step_ns"] > 0
    with monkeypatch.context() as written_jobs:
        written_jobs.setattr(workloads, "HOLD_LLM_WORKLOADS", False)
        written = run_cluster(spec)

    def anew(self, total, jobs):
        self.written.clear()
        return written_once(self, total, jobs)

    written_once = steps.StepTimes._combined
    monkeypatch.setattr(steps.StepTimes, "_combined", anew)
    calls.clear()
    every = run_cluster(spec)
    assert len(calls) == 6
    for out in (held, written, every):
        out.pop("wall_s")
    assert held == written
    assert held == every


def test_a_kept_work_dir_keeps_the_jobs_traces_as_files(tmp_path):
    from astra_workload_compact import read_compact_workload

    spec = parse_cluster_spec({k: v for k, v in SPEC.items() if k != "stragglers"}, str(tmp_path / "c.yaml"))
    kept = run_cluster(spec, work_dir=tmp_path / "work")
    for job in ("a", "b"):
        for path in read_compact_workload(str(tmp_path / "work" / job / "trace")).traces.values():
            assert read_et(path).nodes  # parsed by any process
    held = run_cluster(spec)
    for out in (kept, held):
        out.pop("wall_s")
    assert kept == held
