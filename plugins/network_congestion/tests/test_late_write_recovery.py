"""astra infragraph --to-analytical -o (and --summary -o) write after the graph is read and converted: a late failure
(the final rename into the output folder fails, as a full disk or a folder turned read-only does) keeps the file
whole in a recovered file, and the one error line says where; the output folder keeps no part of it (issue 39)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from astra_sim.cli import main
from astra_sim_testing import fail_renames_into

TORUS = Path(__file__).resolve().parents[3] / "examples" / "infragraph" / "torus_4x4x4" / "network.yaml"


@pytest.mark.parametrize("mode,name,code", [("--to-analytical", "a.yaml", errno.ENOSPC),
                                            ("--summary", "s.json", errno.EROFS)])
def test_a_late_infragraph_write_failure_keeps_it(mode, name, code, tmp_path, capsys, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    argv = ["infragraph", str(TORUS), mode, "-o"]
    reference = tmp_path / name
    assert main([*argv, str(reference)]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, code)
    assert main([*argv, str(out / name)]) == 2
    err = capsys.readouterr().err
    [recovered] = kept.iterdir()
    assert err.strip().splitlines() == [
        f"astra: error: astra infragraph: could not write --output {out / name} ({os.strerror(code)}); "
        f"kept it as {recovered}"], err
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-infragraph-output-\w+-{re.escape(name)}", recovered.name), recovered.name
    assert recovered.read_bytes() == reference.read_bytes()
    assert list(out.iterdir()) == []
