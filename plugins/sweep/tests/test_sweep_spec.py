"""SweepSpec: astra sweep's options as an object (from the command line or a mapping), and its rows as a DataFrame."""

from __future__ import annotations

import argparse

import pytest

from astra_sim.errors import ConfigError

from astra_sweep import Executor, SweepSpec, read_results


class InProcess(Executor):
    def run(self, fn, tasks, timeout=None):
        for task, payload in tasks:
            yield task, fn(task, payload)


def _spec_file(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("workload: {micro: {collective: all_reduce, npus: 8, size: 1MiB}}\n"
                    "run: {platform: hgx-h100}\n"
                    "axes:\n  grid: {run.platform-collective: [ring, nccl]}\n")
    return str(spec)


def test_the_command_line_and_a_mapping_give_one_spec(tmp_path):
    parser = SweepSpec.add_cli_args(argparse.ArgumentParser())
    args = parser.parse_args([_spec_file(tmp_path), "-o", "rows.csv", "--jobs", "2", "--no-progress"])
    assert SweepSpec.from_cli_args(args) == SweepSpec.from_mapping(
        {"spec": _spec_file(tmp_path), "output": "rows.csv", "jobs": 2, "progress": False})
    with pytest.raises(ConfigError, match="unknown astra sweep option 'job'.*did you mean 'jobs'"):
        SweepSpec.from_mapping({"spec": "s.yaml", "output": "r.csv", "job": 2})
    with pytest.raises(ConfigError, match="'output' is required"):
        SweepSpec.from_mapping({"spec": "s.yaml"})


def test_a_sweep_runs_from_python_and_its_rows_are_a_dataframe(tmp_path):
    spec = SweepSpec(spec=_spec_file(tmp_path), output=str(tmp_path / "rows.parquet"), progress=False)
    assert len(spec.resolve().points) == 2
    summary = spec.run(executor_object=InProcess())
    assert summary["ok"] == 2
    rows = read_results(spec.output)
    assert sorted(rows["run.platform-collective"]) == ["nccl", "ring"]
    assert (rows["step_ns"] > 0).all() and rows["step_ns"].dtype.kind == "i"
    again = spec.replace(output=str(tmp_path / "rows.csv")).run(executor_object=InProcess())
    assert again["ok"] == 2
    assert sorted(read_results(str(tmp_path / "rows.csv"))["step_ns"]) == sorted(rows["step_ns"])
