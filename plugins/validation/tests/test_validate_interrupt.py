"""``astra validate`` stopped by a signal between two cases: exit 128 + the signal, one line saying how many case runs
finished and where they were kept (-o, marked ``complete: false``), no traceback."""

from __future__ import annotations

import json
import os
import signal

import astra_validation.plugin as plugin
from astra_sim.cli import main

CASES = "nccl-allreduce-h100-8gpu-nvls,nccl-allreduce-h100-4node-ndr"


def _stop_after_first_case(monkeypatch):
    real = plugin.run_named_case
    calls = []

    def sigterm_at_the_second(task, payload=None):
        calls.append(task)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # raised here, in the main thread, as the second case starts
        return real(task, payload)

    monkeypatch.setattr(plugin, "run_named_case", sigterm_at_the_second)


def test_sigterm_keeps_the_finished_cases_in_the_output(tmp_path, capsys, monkeypatch):
    out = tmp_path / "v.json"
    _stop_after_first_case(monkeypatch)
    assert main(["validate", "--only", CASES, "-o", str(out)]) == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"astra validate: SIGTERM: 1 of 2 case runs finished, kept in {out} (complete: false)" in err
    document = json.loads(out.read_text())
    assert document["complete"] is False and document["interrupted_by"] == "SIGTERM"
    assert [r["name"] for r in document["cases"] + document["failed"]] == [CASES.split(",")[0]]


def test_without_an_output_the_line_says_nothing_was_kept(capsys, monkeypatch):
    _stop_after_first_case(monkeypatch)
    assert main(["validate", "--only", CASES]) == 143
    err = capsys.readouterr().err
    assert "astra validate: SIGTERM: 1 of 2 case runs finished; nothing kept (-o FILE keeps them)" in err
