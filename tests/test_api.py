"""The public Python API (astra_sim.simulate, RunSpec, get_platform, tables): the same answers as ``astra run``."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

import astra_sim
import astra_sim.simulation as simulation
from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.gcpause import gc_paused
from astra_sim.report import read_report
from astra_sim.spec import RunSpec
from astra_folding.symmetry import BlockShift
from astra_workload_compact import write_compact_workload

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel"


def all_reduce_workload(prefix, npus, size_bytes=64 << 20):
    """``npus`` ranks, one all-reduce of ``size_bytes`` each (a compact workload: one class)."""
    node = make_node(0, "all_reduce", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size_bytes})
    write_compact_workload(str(prefix), npus, [BlockShift(1, npus, npus)],
                           [(0, encode_et(make_metadata(), [node]))], generator="test_api")
    return str(prefix)


def cli_report(tmp_path, argv):
    """``astra run``'s report file, in the per-rank layout whichever layout it was written in."""
    out = tmp_path / "cli.json"
    assert main(["run", *argv, "-o", str(out), "-q"]) == 0
    return read_report(out)


def test_simulate_with_a_platform_equals_astra_run_to_the_ns(tmp_path):
    prefix = all_reduce_workload(tmp_path / "ar", 8)
    cli = cli_report(tmp_path, ["--workload-configuration", prefix, "--platform", "hgx-h100"])
    report = astra_sim.simulate(workload=prefix, platform="hgx-h100")
    assert [r.finish_ns for r in report.ranks] == [r["finish_ns"] for r in cli["ranks"]]
    assert report.settings["platform_defaults"] == cli["settings"]["platform_defaults"]
    assert report.settings["platform"] == {"name": "hgx-h100", "nodes": 1, "devices_per_node": 8}
    # the spec door, and an option by name (an explicit --gpu wins over the platform's)
    spec = RunSpec.from_mapping({"workload": prefix, "platform": "hgx-h100", "gpu": "B200"})
    by_spec = astra_sim.simulate(spec)
    cli_b200 = cli_report(tmp_path, ["--workload-configuration", prefix, "--platform", "hgx-h100", "--gpu", "B200"])
    assert by_spec.max_finish_ns == cli_b200["summary"]["max_finish_ns"]
    assert by_spec.max_finish_ns != report.max_finish_ns


def test_simulate_with_files_equals_astra_run(tmp_path):
    args = dict(workload=str(EXAMPLE / "trace" / "dp"), system=str(EXAMPLE / "system.json"),
                network=str(EXAMPLE / "network.yml"), memory=str(EXAMPLE / "memory.json"))
    cli = cli_report(tmp_path, ["--workload-configuration", args["workload"], "--system-configuration",
                                args["system"], "--network-configuration", args["network"],
                                "--remote-memory-configuration", args["memory"]])
    positional = astra_sim.simulate(args["workload"], args["system"], args["network"], args["memory"])
    keywords = astra_sim.simulate(**args)
    assert [r.finish_ns for r in positional.ranks] == [r["finish_ns"] for r in cli["ranks"]]
    assert [r.finish_ns for r in keywords.ranks] == [r["finish_ns"] for r in cli["ranks"]]


def test_results_as_tables(tmp_path):
    prefix = all_reduce_workload(tmp_path / "ar", 8, 1 << 20)
    report = astra_sim.simulate(workload=prefix, platform="hgx-h100")
    ranks = report.ranks_frame()
    assert list(ranks["rank"]) == list(range(8))
    assert int(ranks["finish_ns"].max()) == report.max_finish_ns
    parts = report.breakdown_frame()
    assert set(parts.columns) == {"rank", "part", "time_ns"}
    # the parts of every rank add up to its finish time
    sums = parts.groupby("rank")["time_ns"].sum()
    assert [int(sums[r]) for r in range(8)] == list(ranks["finish_ns"])
    assert report.to_dict()["units"] == {"time": "ns", "size": "bytes"}


def test_bad_arguments_name_what_was_expected(tmp_path):
    prefix = all_reduce_workload(tmp_path / "ar", 8, 1 << 20)
    with pytest.raises(ConfigError, match=r"unknown --platform 'hgx-h10' \(did you mean 'hgx-h100'\?\)"):
        astra_sim.simulate(workload=prefix, platform="hgx-h10")
    with pytest.raises(ConfigError, match="gpu_tf3.*did you mean 'gpu-tf32'"):
        astra_sim.simulate(workload=prefix, platform="hgx-h100", gpu_tf3=True)
    with pytest.raises(ConfigError, match="nodes"):
        RunSpec.from_mapping({"workload": prefix, "platform": "hgx-h100", "nodes": 0})
    with pytest.raises(ConfigError, match="--system-configuration is required"):
        astra_sim.simulate(workload=prefix)


def test_get_platform_lists_every_plugins_platforms():
    from astra_sim.platforms import platforms

    names = set(platforms())
    assert {"hgx-h100", "dgx-a100", "tpu-v4"} <= names
    h100 = astra_sim.get_platform("HGX-H100")
    assert h100.gpus_per_node == 8 and h100.family == "gpu"
    assert astra_sim.get_platform("tpu-v4").family == "tpu"
    setup = h100.resolve(2, {})
    assert setup.compute_model == "gpu" and "collective" in setup.defaults


def test_astra_run_with_a_platform_needs_neither_pytest_nor_hypothesis(tmp_path):
    """An install without the test extra: block both imports and run `astra run --platform hgx-h100`."""
    prefix = all_reduce_workload(tmp_path / "ar", 8, 1 << 20)
    code = ("import sys\n"
            "for name in ('pytest', 'hypothesis', '_pytest'):\n"
            "    sys.modules[name] = None  # importing it now raises ImportError\n"
            "from astra_sim.cli import main\n"
            f"sys.exit(main(['run', '--workload-configuration', {prefix!r}, '--platform', 'hgx-h100', '--json']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["max_finish_ns"] > 0


def test_run_prints_json_with_json_and_writes_files_with_output(tmp_path, capsys):
    prefix = all_reduce_workload(tmp_path / "ar", 8, 1 << 20)
    assert main(["run", "--workload-configuration", prefix, "--platform", "hgx-h100", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    out = tmp_path / "r.json"
    assert main(["run", "--workload-configuration", prefix, "--platform", "hgx-h100", "--output", str(out),
                 "-q"]) == 0
    assert json.loads(out.read_text())["summary"] == printed["summary"]


def test_the_readmes_python_flow_runs(tmp_path, monkeypatch):
    """The README's Python block, as written, in a fresh folder holding a copy of the examples."""
    import shutil

    text = (REPO / "README.md").read_text(encoding="utf-8")
    marker = "<!-- api-test: tests/test_api.py runs this block in a fresh folder -->\n```python\n"
    assert marker in text, "the README's Python block lost its api-test marker"
    block = text.split(marker, 1)[1].split("\n```", 1)[0]
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(block, "README.md (Python block)", "exec"), namespace)
    report = namespace["report"]
    assert report.max_finish_ns > 0 and len(namespace["ranks"]) == 16
    assert json.loads((tmp_path / "report.json").read_text())["units"]["time"] == "ns"


def test_every_platform_states_its_device_memory():
    from astra_sim.platforms import platforms

    for name, platform in platforms().items():
        memory = platform.device_memory_bytes()
        assert isinstance(memory, int) and memory >= 16 << 30, name


# The cyclic garbage collector is paused while a run builds, simulates and reports (astra_sim.gcpause), and is
# left as the caller had it, error or not.
def test_gc_paused_restores_the_collector_as_it_found_it():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("inside")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_a_run_builds_and_simulates_with_the_collector_paused(tmp_path, monkeypatch):
    seen = []
    build_ranks = simulation.build_ranks

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return build_ranks(*args, **kwargs)

    monkeypatch.setattr(simulation, "build_ranks", watched)
    report = astra_sim.simulate(workload=all_reduce_workload(tmp_path / "ar", 8), platform="hgx-h100")
    assert seen == [False] and report.max_finish_ns > 0
    assert gc.isenabled()
