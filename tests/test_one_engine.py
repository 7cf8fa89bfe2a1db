"""One engine behind every door: for every registered platform (TPUs included) the same step gets the same ns through
``astra workload llm`` + ``astra run``, the Python API, a sweep row, a search row, a serving step time and a
validation case."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main
from astra_sim.platforms import get_platform, platforms
from astra_sim.runner import run_spec
from astra_sim.spec import RunSpec

#: a small dense model: every door simulates it in well under a second
MODEL = {"layers": 2, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256}


def layout(platform):
    """TP within a node (at most 8), DP over the rest of one node."""
    gpus = platform.gpus_per_node
    tp = max(t for t in (1, 2, 4, 8) if gpus % t == 0)
    return {"tp": tp, "dp": gpus // tp}


def training_step(platform):
    return {**MODEL, **layout(platform), "micro_batches": 2}


def argv_of(mapping):
    words = []
    for key, value in mapping.items():
        words += [f"--{key.replace('_', '-')}", str(value)]
    return words


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """{platform: step ns} through the Python API: generate_llm_workload + run_spec."""
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    out = {}
    for name, platform in platforms().items():
        prefix = str(tmp_path_factory.mktemp(name) / "w")
        generate_llm_workload(LlmSpec.from_mapping(training_step(platform)), prefix)
        report = run_spec(RunSpec.from_mapping({"workload": prefix, "platform": name, "nodes": 1}))
        out[name] = report.max_finish_ns
    return out


@pytest.mark.parametrize("name", sorted(platforms()))
def test_the_command_line_gives_the_apis_step(tmp_path, reference, name):
    prefix, report = str(tmp_path / "w"), tmp_path / "r.json"
    assert main(["workload", "llm", *argv_of(training_step(get_platform(name))), "-o", prefix]) == 0
    assert main(["run", "--workload-configuration", prefix, "--platform", name, "-o", str(report), "-q"]) == 0
    assert json.loads(report.read_text())["summary"]["max_finish_ns"] == reference[name] > 0


@pytest.mark.parametrize("name", sorted(platforms()))
def test_a_sweep_row_gives_the_same_step(tmp_path, reference, name):
    from astra_sweep import Executor, run_sweep
    from astra_sweep.results import Results

    class InProcess(Executor):
        def run(self, fn, tasks, timeout=None):
            for task, payload in tasks:
                yield task, fn(task, payload)

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"workload": {"llm": training_step(get_platform(name))}, "run": {"platform": name}}))
    out = tmp_path / "rows.csv"
    run_sweep(str(spec), str(out), progress=False, executor_object=InProcess())
    (row,) = Results(str(out), [], {})._read_results()
    assert row["status"] == "ok" and row["step_ns"] == reference[name]


@pytest.mark.parametrize("name", sorted(platforms()))
def test_a_validation_case_gives_the_same_step(reference, name):
    from astra_validation.registry import Case
    from astra_validation.runner import run_case

    case = Case(name=f"one-engine-{name}", kind="llm_step", source="this test", hardware=name, platform=name,
                nodes=1, measured={"step_s": 1.0}, workload=tuple(argv_of(training_step(get_platform(name)))))
    result = run_case(case)
    assert result["simulated_ns"] == reference[name]
