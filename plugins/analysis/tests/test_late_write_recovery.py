"""astra run --timeline is written after the run: a late failure (the final rename into the output folder fails, as
a full disk or a folder turned read-only does) keeps the timeline whole in a recovered file, or the Kineto traces
in a recovered folder, and the one error line says where; the output folder keeps no part of it (issue 39)."""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from astra_sim.cli import main
from astra_sim_testing import fail_renames_into


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("w") / "ar"
    assert main(["workload", "micro", "--collective", "all_reduce", "--size", "1MiB", "--npus", "4",
                 "-o", str(prefix)]) == 0
    return prefix


def run(workload, *argv):
    return main(["run", "--workload-configuration", str(workload), "--platform", "hgx-h100", "-q", *argv])


def error_line(capsys):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_a_late_timeline_write_failure_keeps_it(name, workload, tmp_path, capsys, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    reference = tmp_path / name
    assert run(workload, "--timeline", str(reference)) == 0
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, errno.ENOSPC)
    assert run(workload, "--timeline", str(out / name)) == 2
    line = error_line(capsys)
    [recovered] = kept.iterdir()
    assert line == (f"astra: error: astra run: could not write --timeline {out / name} (No space left on device); "
                    f"kept it as {recovered}")
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-run-timeline-\w+-{re.escape(name)}", recovered.name), recovered.name
    unpack = gzip.decompress if name.endswith(".gz") else bytes
    assert unpack(recovered.read_bytes()) == unpack(reference.read_bytes())  # whole, event for event
    assert list(out.iterdir()) == []


def test_a_late_kineto_write_failure_keeps_every_rank(workload, tmp_path, capsys, monkeypatch):
    """The second rank's file fails (EROFS): the first one is removed again (no partial set) and every rank's
    trace is in the recovered folder."""
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    reference = tmp_path / "ref"
    assert run(workload, "--timeline", str(reference), "--timeline-format", "kineto") == 0
    out = tmp_path / "out"
    fail_renames_into(monkeypatch, out, errno.EROFS, after=1)  # the first rank's file is in place
    assert run(workload, "--timeline", str(out), "--timeline-format", "kineto") == 2
    line = error_line(capsys)
    [folder] = kept.iterdir()
    assert line == (f"astra: error: astra run: could not write --timeline {out} (Read-only file system); "
                    f"kept it in {folder}")
    assert re.fullmatch(r"\d{8}-\d{6}-run-timeline-\w+-out", folder.name), folder.name
    names = sorted(p.name for p in reference.iterdir())
    assert names == [f"rank{r}.pt.trace.json" for r in range(4)]
    assert sorted(p.name for p in folder.iterdir()) == names
    for n in names:
        assert (folder / n).read_bytes() == (reference / n).read_bytes()
    assert list(out.iterdir()) == []


_REAL_FULL_DISK = """
import contextlib, io, json, os, subprocess, sys
from astra_sim.cli import main

small = {small!r}
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", small], check=True)
with open(os.path.join(small, "filler"), "wb") as handle:  # one 4 KiB page left: the check before the run passes
    handle.write(b"x" * 4096)
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(["run", "--workload-configuration", {workload!r}, "--platform", "hgx-h100", "-q",
                 "--timeline", os.path.join(small, "t.json")])
print(json.dumps({{"code": code, "err": err.getvalue(), "left": sorted(os.listdir(small))}}))
"""


@pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("mount"), reason="needs unshare and mount")
def test_a_real_full_disk_during_the_timeline_write_keeps_it(tmp_path):
    """No monkeypatching: an 8 KiB tmpfs (mounted in a user namespace) with one page free passes the check before
    the run, then fills up while the 14 KB timeline is written; the timeline is kept whole elsewhere."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespaces here")
    workload = tmp_path / "ar"
    assert main(["workload", "micro", "--collective", "all_reduce", "--size", "1MiB", "--npus", "16",
                 "-o", str(workload)]) == 0
    reference = tmp_path / "t.json"
    assert run(workload, "--timeline", str(reference)) == 0
    assert reference.stat().st_size > 8192
    small, kept = tmp_path / "small", tmp_path / "kept"
    small.mkdir()
    script = _REAL_FULL_DISK.format(small=str(small), workload=str(workload))
    done = subprocess.run(["unshare", "-rm", sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "ASTRA_RECOVERED_DIR": str(kept)})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    [recovered] = kept.iterdir()
    assert got["code"] == 2
    assert got["err"].strip() == (f"astra: error: astra run: could not write --timeline {small / 't.json'} "
                                  f"(No space left on device); kept it as {recovered}"), got["err"]
    assert recovered.read_bytes() == reference.read_bytes()
    assert got["left"] == ["filler"]  # no part of the timeline on the full disk
