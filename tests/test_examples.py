"""The shipped example regenerates byte for byte and runs end to end through the CLI."""

import importlib.util
import json
from pathlib import Path

from astra_sim.cli import main

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
    report = json.loads(report_path.read_text())
    ranks = report["ranks"]
    assert [r["rank"] for r in ranks] == list(range(16))
    compute_ns = sum(f + b for _, f, b, _ in _generator().LAYERS) * 1000
    for r in ranks:
        assert r["compute_ns"] == compute_ns
        # Communication is partly hidden behind the backward pass but not entirely.
        assert compute_ns < r["finish_ns"] < compute_ns + r["comm_ns"]
        assert r["exposed_comm_ns"] == r["finish_ns"] - compute_ns
    out = capsys.readouterr().out
    assert "sys[0] finished," in out
