"""``astra search`` stopped by a signal: exit 128 + the signal, one line saying what was kept (the layouts simulated
so far, in --points; nothing without it), no traceback; the same command then resumes them."""

from __future__ import annotations

import os
import signal

import astra_sweep.results as results
from astra_sim.cli import main

SEARCH = ["search", "--preset", "gpt3-13b", "--platform", "hgx-h100", "--gpus", "8", "--global-batch", "8",
          "--tp", "2,4", "--pp", "1", "--mbs", "1", "--zero", "1", "--recompute", "none", "--exhaustive",
          "--no-progress"]


def _sigterm_after_the_first_row(monkeypatch):
    real = results.Results.add

    def add_then_stop(self, row):
        real(self, row)
        os.kill(os.getpid(), signal.SIGTERM)  # raised in the main thread once the first layout is kept

    monkeypatch.setattr(results.Results, "add", add_then_stop)


def test_sigterm_keeps_the_simulated_layouts_and_a_rerun_resumes(tmp_path, capsys, monkeypatch):
    points = tmp_path / "points.csv"
    with monkeypatch.context() as patched:
        _sigterm_after_the_first_row(patched)
        assert main([*SEARCH, "--points", str(points)]) == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("kept") == 1, err
    assert f"astra search: SIGTERM: 1 simulated layout kept in {points}; rerun the same command to resume" in err
    assert main([*SEARCH, "--points", str(points)]) == 0
    with open(points, encoding="utf-8") as handle:
        assert len(handle.read().strip().splitlines()) == 1 + 2  # a header and one row per layout


def test_without_points_the_line_says_nothing_was_kept(capsys, monkeypatch):
    _sigterm_after_the_first_row(monkeypatch)
    assert main(SEARCH) == 143
    err = capsys.readouterr().err
    assert "astra search: SIGTERM: nothing kept (the simulated layouts were in a temporary folder)" in err
