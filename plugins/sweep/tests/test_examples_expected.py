"""The collective x topology example gives exactly the results shipped beside it (examples/sweeps/expected)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from astra_sim.cli import main

ROOT = Path(__file__).resolve().parents[3]


def _rows(path):
    with open(path, newline="") as handle:
        return {row["point"]: {k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(handle)}


def test_the_collectives_example_matches_its_expected_results(tmp_path, monkeypatch):
    spec = ROOT / "examples" / "sweeps" / "collectives_topology.yaml"
    if not spec.exists():
        pytest.skip("examples/ not in this checkout")
    monkeypatch.chdir(ROOT)  # the spec names its configurations relative to the repository root
    out = tmp_path / "r.csv"
    assert main(["sweep", str(spec), "-o", str(out), "--jobs", "1"]) == 0
    assert _rows(out) == _rows(ROOT / "examples" / "sweeps" / "expected" / "collectives_topology.csv")
