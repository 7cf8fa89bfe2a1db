"""astra systolic -o and astra workload systolic -o write after the work: a late failure (the final rename into
the output folder fails, as a full disk or a folder turned read-only does) keeps the result whole in a recovered
file or folder, and the one error line says where (issue 39)."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from astra_sim.cli import main
from astra_sim_testing import fail_renames_into

CONFIG = Path(__file__).resolve().parents[3] / "examples" / "systolic" / "ws_32x32.cfg"


@pytest.fixture
def topology(tmp_path):
    path = tmp_path / "topo.csv"
    path.write_text("name,M,N,K,\ng,64,32,128,\nh,128,64,32,\n")
    return path


CASES = {
    "systolic": (lambda t: ["systolic", str(t), "--gemm", "--config", str(CONFIG)], "c.csv", "astra systolic"),
    "workload systolic": (lambda t: ["workload", "systolic", str(t), "--config", str(CONFIG), "--npus", "4",
                                     "--parallel", "DATA"], "w.txt", "astra workload systolic"),
    "workload systolic --chakra": (lambda t: ["workload", "systolic", str(t), "--config", str(CONFIG), "--npus", "4",
                                              "--parallel", "DATA", "--chakra"], "w", "astra workload systolic"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_late_systolic_write_failure_keeps_the_result(case, topology, tmp_path, capsys, monkeypatch):
    argv, name, command = CASES[case]
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    reference = tmp_path / "ref"
    reference.mkdir()
    assert main([*argv(topology), "-o", str(reference / name)]) == 0
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, errno.EROFS)
    assert main([*argv(topology), "-o", str(out / name)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    [recovered] = kept.iterdir()
    verb = "as" if case == "systolic" else "in"  # one report file; the workload commands keep a folder
    assert lines == [f"astra: error: {command}: could not write --output {out / name} (Read-only file system); "
                     f"kept it {verb} {recovered}"], err
    slug = command.split(" ", 1)[1].replace(" ", "-")
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{slug}-output-\w+-{re.escape(name)}", recovered.name), recovered.name
    if recovered.is_dir():
        files = {p.name: p.read_bytes() for p in recovered.iterdir()}
    else:
        files = {name: recovered.read_bytes()}
    assert files == {p.name: p.read_bytes() for p in reference.iterdir()}  # every file, whole
    assert list(out.iterdir()) == []
