"""astra search writes -o (the answer) and --plot after every layout is simulated: a late failure (the final rename
into the output folder fails, as a full disk or a folder turned read-only does) keeps each of them whole in a
recovered file, --json still prints the answer, and the one error line says where each was kept (issue 39)."""

from __future__ import annotations

import errno
import json
import re

from astra_sim.cli import main
from astra_sim_testing import fail_renames_into

SEARCH = ["search", "--preset", "gpt3-13b", "--platform", "hgx-h100", "--gpus", "8", "--global-batch", "8",
          "--tp", "8", "--pp", "1", "--mbs", "1", "--zero", "1", "--recompute", "none", "--no-progress"]


def test_a_late_search_write_failure_keeps_the_answer_and_the_plot(tmp_path, capsys, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    ref = tmp_path / "ref"
    # the failing search resumes the reference search's simulated layout from its --points (CI margin: the late
    # writes, all this test is about, come after every layout is ranked, simulated or resumed)
    points = ["--points", str(tmp_path / "points.csv")]
    assert main([*SEARCH, *points, "-o", str(ref / "a.json"), "--plot", str(ref / "p.png")]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, errno.ENOSPC)
    assert main([*SEARCH, *points, "-o", str(out / "a.json"), "--plot", str(out / "p.png"), "--json"]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    answer = next(p for p in kept.iterdir() if p.name.endswith("a.json"))
    picture = next(p for p in kept.iterdir() if p.name.endswith("p.png"))
    lines = [line for line in captured.err.splitlines() if line.startswith("astra: error:")]
    assert lines == [f"astra: error: astra search: could not write --output {out / 'a.json'} (No space left on "
                     f"device); kept it as {answer}; astra search: could not write --plot {out / 'p.png'} (No space "
                     f"left on device); kept it as {picture}"], captured.err
    assert re.fullmatch(r"\d{8}-\d{6}-search-output-\w+-a\.json", answer.name), answer.name
    assert re.fullmatch(r"\d{8}-\d{6}-search-plot-\w+-p\.png", picture.name), picture.name
    assert answer.read_bytes() == (ref / "a.json").read_bytes()
    assert json.loads(captured.out) == json.loads(answer.read_text())  # --json printed it all the same
    assert picture.read_bytes() == (ref / "p.png").read_bytes()
    assert list(out.iterdir()) == []
