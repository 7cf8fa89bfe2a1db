"""astra workload's commands write a set of files after the work: a late failure (the final rename into the output
folder fails after the first file, as a full disk does) removes the files of the set already written, writes the
whole set again into a recovered folder, and the one error line says where (issue 39)."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest

from astra_sim.cli import main
from astra_sim_testing import fail_renames_into

LLM = ["--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "8", "--ffn-hidden", "512", "--vocab", "1000",
       "--seq-len", "128", "--tp", "2", "--micro-batches", "1"]


def recovered_after_failure(tmp_path, capsys, monkeypatch, argv, command, whole_files=1):
    """Run ``argv + [-o out/g]`` with the disk full after ``whole_files`` files; the recovered folder and the files
    it holds (names relative to it)."""
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, after=whole_files)
    assert main([*argv, "-o", str(out / "g")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    [folder] = kept.iterdir()
    assert lines == [f"astra: error: {command}: could not write --output {out / 'g'} (No space left on device); "
                     f"kept it in {folder}"], err
    assert "Traceback" not in err
    assert list(out.iterdir()) == []  # no partial set where it was meant to go
    slug = command.split(" ", 1)[1].replace(" ", "-")
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{slug}-output-\w+-g", folder.name), folder.name
    monkeypatch.undo()
    return folder, sorted(p.name for p in folder.iterdir())


def step_ns(tmp_path, prefix):
    report = tmp_path / f"{os.path.basename(os.path.dirname(prefix))}.json"
    assert main(["run", "--workload-configuration", str(prefix), "--platform", "hgx-h100", "-q",
                 "-o", str(report)]) == 0
    return json.loads(report.read_text())["summary"]["max_finish_ns"]


def test_workload_llm_keeps_a_set_that_runs(tmp_path, capsys, monkeypatch):
    reference = tmp_path / "ref" / "g"
    assert main(["workload", "llm", *LLM, "-o", str(reference)]) == 0
    folder, names = recovered_after_failure(tmp_path, capsys, monkeypatch, ["workload", "llm", *LLM],
                                            "astra workload llm")
    assert names == sorted(p.name for p in reference.parent.iterdir())
    for name in names:  # the manifest names its files relative to itself: every byte is the same
        assert (folder / name).read_bytes() == (reference.parent / name).read_bytes()
    assert step_ns(tmp_path, folder / "g") == step_ns(tmp_path, reference)  # the kept set is the same workload


HOST_TRACE = Path(__file__).parent / "data" / "pytorch_public" / "hta_simple_add_et.json.gz"


@pytest.mark.parametrize("argv", [["workload", "micro", "--collective", "all_reduce", "--size", "1KiB", "--npus", "4"],
                                  ["workload", "convert-text", "model.txt", "--npus", "2"],
                                  ["workload", "scale", "ar", "--to-npus", "8"],
                                  ["workload", "convert-pytorch", str(HOST_TRACE), "--rank", "0"]],
                         ids=["micro", "convert-text", "scale", "convert-pytorch"])
def test_the_rank_files_are_kept_whole(argv, tmp_path, capsys, monkeypatch):
    """The Chakra writer's error (whose context is the OSError) is recognised as a failed write too."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.txt").write_text("DATA\n1\nfc1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 1\n")
    assert main(["workload", "micro", "--collective", "all_gather", "--size", "1KiB", "--npus", "4", "-o", "ar"]) == 0
    reference = tmp_path / "ref" / "g"
    assert main([*argv, "-o", str(reference)]) == 0
    capsys.readouterr()
    whole = 0 if "--rank" in argv else 1  # convert-pytorch --rank writes one file
    folder, names = recovered_after_failure(tmp_path, capsys, monkeypatch, argv, f"astra workload {argv[1]}", whole)
    assert names == sorted(p.name for p in reference.parent.iterdir()) and names
    for name in names:
        assert (folder / name).read_bytes() == (reference.parent / name).read_bytes()


def test_a_recovery_place_that_fails_too_gives_way_to_the_next(tmp_path, capsys, monkeypatch):
    """The cache is full as well (its rank files fail through the Chakra writer): its part is removed and the set
    goes to the temp dir; when that fails too, the error says the output is lost."""
    import astra_sim.safeio as safeio

    kept, temp, out = tmp_path / "kept", tmp_path / "temp", tmp_path / "out"
    for folder in (kept, temp, out):
        folder.mkdir()
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    monkeypatch.setattr(safeio.tempfile, "gettempdir", lambda: str(temp))
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if not os.path.abspath(dst).startswith(str(temp) + os.sep):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    argv = ["workload", "micro", "--collective", "all_reduce", "--size", "1KiB", "--npus", "4", "-o", str(out / "g")]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    [folder] = temp.iterdir()
    assert line.endswith(f"(No space left on device); kept it in {folder}"), line
    assert sorted(p.name for p in folder.iterdir()) == [f"g.{r}.et" for r in range(4)]
    assert list(kept.iterdir()) == [] and list(out.iterdir()) == []

    monkeypatch.setattr(safeio.tempfile, "gettempdir", lambda: str(out))  # every place full now
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"astra: error: astra workload micro: could not write --output {out / 'g'} (No space "
                           f"left on device); could not keep it anywhere either ({kept}: No space left on device; "
                           f"{out}: "), line
    assert line.endswith("), so it is lost"), line
    assert list(kept.iterdir()) == [] and list(out.iterdir()) == []
