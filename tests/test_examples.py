"""The shipped example regenerates byte for byte and runs end to end through the CLI."""

import importlib.util
import json
from pathlib import Path

from astra_sim.cli import main
from astra_sim.report import read_report

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "data_parallel"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_examples", ROOT / "examples" / "generate_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_traces_match_their_generator():
    from astra_sim.chakra import encode_et, make_metadata

    expected = encode_et(make_metadata(), _generator().data_parallel_nodes())
    for rank in range(16):
        assert (EXAMPLE / "trace" / f"dp.{rank}.et").read_bytes() == expected


def test_demo_runs_and_reports(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    rc = main([
        "run",
        f"--workload-configuration={EXAMPLE / 'trace' / 'dp'}",
        "--system-configuration", str(EXAMPLE / "system.json"),
        "--network-configuration", str(EXAMPLE / "network.yml"),
        "--remote-memory-configuration", str(EXAMPLE / "memory.json"),
        "--report-json", str(report_path),
        "--astra-sim-log",
    ])
    assert rc == 0
    ranks = read_report(report_path)["ranks"]
    assert [r["rank"] for r in ranks] == list(range(16))
    compute_ns = sum(f + b for _, f, b, _ in _generator().LAYERS) * 1000
    for r in ranks:
        assert r["compute_ns"] == compute_ns
        # Communication is partly hidden behind the backward pass but not entirely.
        assert compute_ns < r["finish_ns"] < compute_ns + r["comm_ns"]
        assert r["exposed_comm_ns"] == r["finish_ns"] - compute_ns
    out = capsys.readouterr().out
    assert "sys[0] finished," in out


# ---------------------------------------------------------------- examples/msccl


def _msccl_generator():
    spec = importlib.util.spec_from_file_location("msccl_example", ROOT / "examples" / "msccl" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_msccl_example_regenerates_byte_for_byte():
    for name, text in _msccl_generator().files().items():
        assert (ROOT / "examples" / "msccl" / name).read_text() == text, name


def test_msccl_example_runs_and_converts_to_the_references_time(tmp_path, capsys):
    """The XML run directly, and converted to per-GPU ETs the way ASTRA-sim's converter writes them
    (--local-mem-bw 50): the converted ring gives the reference's golden 90174 ns for its example."""
    example = ROOT / "examples" / "msccl"
    prefix = tmp_path / "ar"
    assert main(["workload", "micro", "--collective", "all_reduce", "--size", "1MiB", "--npus", "8",
                 "-o", str(prefix)]) == 0
    report = tmp_path / "direct.json"
    assert main(["run", "--workload-configuration", str(prefix), "--system-configuration", str(example / "system.json"),
                 "--network-configuration", str(example / "network.yml"), "-q", "--report-json", str(report)]) == 0
    assert json.loads(report.read_text())["summary"]["max_finish_ns"] == 96215
    assert main(["msccl", "to-chakra", str(example / "allreduce_ring_8gpu.xml"), "-o", str(tmp_path / "ets" / "ring"),
                 "--size", "1048576", "--local-mem-bw", "50", "-q"]) == 0
    system = tmp_path / "custom.json"
    system.write_text(json.dumps({**json.loads((example / "system.json").read_text()),
                                  "all-reduce-implementation-custom": [str(tmp_path / "ets" / "ring")]}))
    report = tmp_path / "converted.json"
    assert main(["run", "--workload-configuration", str(prefix), "--system-configuration", str(system),
                 "--network-configuration", str(example / "network.yml"), "-q", "--report-json", str(report)]) == 0
    assert json.loads(report.read_text())["summary"]["max_finish_ns"] == 90174
