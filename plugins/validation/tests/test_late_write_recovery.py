"""astra validate --save-residuals written after every case ran: a late failure (the final rename into the folder
fails with ENOSPC, as a full disk does) keeps the residuals whole in a recovered file, and the one error line says
where (issue 39)."""

from __future__ import annotations

import json
import re

from astra_sim.cli import main
from astra_sim_testing import fail_renames_into

CASE = ["validate", "--only", "nccl-allreduce-h100-8gpu-nvls", "--cv"]


def test_a_late_residuals_write_failure_keeps_them(tmp_path, capsys, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    reference = tmp_path / "ref.json"
    assert main([*CASE, "--save-residuals", str(reference)]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out)
    assert main([*CASE, "--json", "--save-residuals", str(out / "res.json")]) == 2
    captured = capsys.readouterr()
    [recovered] = kept.iterdir()
    lines = [line for line in captured.err.splitlines() if line.startswith("astra: error:")]
    assert lines == [f"astra: error: astra validate: could not write --save-residuals {out / 'res.json'} "
                     f"(No space left on device); kept it as {recovered}"], captured.err
    assert re.fullmatch(r"\d{8}-\d{6}-validate-save-residuals-\w+-res\.json", recovered.name), recovered.name
    assert json.loads(recovered.read_text()) == json.loads(reference.read_text())
    assert json.loads(captured.out)["cases"]  # --json's report came out before the residuals failed
    assert list(out.iterdir()) == []
