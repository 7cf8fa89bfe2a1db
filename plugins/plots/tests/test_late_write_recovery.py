"""astra plot writes its figures after drawing them: a late failure (the final rename into -o fails, as a full disk
does) draws the figure again into a recovered file, and the one error line says where (issue 39)."""

from __future__ import annotations

import re

import pytest

from astra_sim.cli import main
from astra_sim_testing import fail_renames_into

pytest.importorskip("matplotlib")


def test_a_late_figure_write_failure_keeps_the_figure(tmp_path, capsys, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    assert main(["workload", "micro", "--collective", "all_reduce", "--size", "1MiB", "--npus", "4",
                 "-o", str(tmp_path / "ar")]) == 0
    report = tmp_path / "run.json"
    assert main(["run", "--workload-configuration", str(tmp_path / "ar"), "--platform", "hgx-h100", "-q",
                 "-o", str(report)]) == 0
    reference = tmp_path / "ref"
    assert main(["plot", str(report), "-o", str(reference)]) == 0
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out)
    capsys.readouterr()
    assert main(["plot", str(report), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    [recovered] = kept.iterdir()
    name = re.fullmatch(r"\d{8}-\d{6}-plot-o-[a-z0-9_]+-(.+)", recovered.name).group(1)  # the first figure drawn
    assert lines == [f"astra: error: astra plot: could not write -o {out / name} (No space left on device); "
                     f"kept it as {recovered}"], err
    assert recovered.read_bytes() == (reference / name).read_bytes()  # the same picture, drawn again
    assert list(out.iterdir()) == []
