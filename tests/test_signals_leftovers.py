"""What a killed run leaves (its ``astra-run-*`` / ``astra-point-*`` temporary folder, a half-written ``.tmp-*``
file) carries its process id and is reclaimed by the next process to make one, once that process is gone; what
belongs to a process still running is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import astra_sim.generated as generated
from astra_sim.generated import _HOST, GeneratedFile, materialized, owned, reclaim_leftovers
from astra_sim.safeio import write_text_atomic


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(generated, "_RECLAIMED", set())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_dead_runs_folder_is_reclaimed_and_a_live_ones_kept(tmp_path):
    tmp = tmp_path / "tmp"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = tmp / f"astra-run-{dead_pid()}.{_HOST}-abc"
        (dead / "inner").mkdir(parents=True)
        (dead / "inner" / "system.json").write_text("{}")
        gone = dead_pid()
        kept = [tmp / f"astra-run-{live.pid}.{_HOST}-x", tmp / f"{owned('astra-run-')}y", tmp / "astra-run-notapid",
                tmp / f"astra-run-0.{_HOST}-z", tmp / f"astra-point-{gone}.{_HOST}-q",
                tmp / f"astra-run-{gone}.000000-w",  # another machine's (a shared folder): its pid means nothing here
                tmp / f"astra-run-{gone}-v"]
        for folder in kept:
            folder.mkdir()
        with materialized({"system_configuration": GeneratedFile("system.json", "{}")}) as paths:
            made = os.path.dirname(paths["system_configuration"])
            assert os.path.basename(made).startswith(owned("astra-run-"))
        assert not dead.exists() and not os.path.exists(made)
        assert all(folder.exists() for folder in kept)  # other prefixes wait for their own kind
        assert reclaim_leftovers(str(tmp), "astra-run-") == 0  # once per process and folder
    finally:
        live.kill()
        live.wait()


def test_a_killed_writers_part_file_goes_at_the_next_write_into_its_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    part = out / f".tmp-{dead_pid()}.{_HOST}-k2j3report.json"
    part.write_bytes(b"x" * 1000)
    mine = out / f"{owned('.tmp-')}abcdreport.json"
    mine.write_bytes(b"y")
    write_text_atomic(out / "other.json", "{}")
    assert not part.exists() and mine.exists() and (out / "other.json").read_text() == "{}"
    assert [p.name for p in out.iterdir() if p.name.startswith(".tmp-")] == [mine.name]


SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 4, hidden: 512, heads: 8, kv-heads: 8, ffn-hidden: 2048, seq-len: 256, tp: 2, pp: 2, dp: 2, micro-batches: 2}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {run.platform-collective: [ring, nccl], workload.llm.tp: [2, 4], workload.llm.micro-batches: [2, 4, 8]}
"""


@pytest.mark.slow
def test_a_sigkilled_sweeps_point_folders_are_reclaimed_by_the_next(tmp_path):
    tmp = tmp_path / "tmp"
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    cmd = [os.path.join(os.path.dirname(sys.executable), "astra"), "sweep", str(spec), "-o", str(tmp_path / "r.csv"),
           "--jobs", "2", "--no-progress"]
    env = {**os.environ, "TMPDIR": str(tmp)}

    def points_in_progress():
        return [p for p in tmp.iterdir() if p.name.startswith("astra-point-")]

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not points_in_progress() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers: nobody cleans up
    proc.wait()
    time.sleep(0.5)
    left = points_in_progress()
    assert left, "the sweep was killed with no point running"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in left)
    assert [p.name for p in tmp.iterdir() if p.name.startswith(("astra-point-", "astra-base-", "astra-run-"))] == []


def test_any_command_reclaims_every_kind_of_leftover(tmp_path):
    """The first command after a SIGKILLed one removes what it left, whatever its kind; live and foreign ones stay."""
    tmp = tmp_path / "tmp"
    gone = dead_pid()
    dead = [tmp / f"astra-serve-{gone}.{_HOST}-a", tmp / f"astra-sweep-{gone}.{_HOST}-b", tmp / f".tmp-{gone}.{_HOST}-c"]
    kept = [tmp / f"astra-serve-{os.getpid()}.{_HOST}-d", tmp / f"astra-sweep-{gone}.000000-e", tmp / "tmpabc123"]
    for path in dead + kept:
        path.mkdir()
    assert generated.reclaim_all_leftovers(str(tmp)) == len(dead)
    assert not any(path.exists() for path in dead) and all(path.exists() for path in kept)
    assert generated.reclaim_all_leftovers(str(tmp / "missing")) == 0


def test_a_full_disk_is_refused_before_any_work(tmp_path, monkeypatch):
    from astra_sim.errors import ConfigError
    from astra_sim.outputs import check_writable_folder

    class Full:
        f_bavail = 0

    monkeypatch.setattr(os, "statvfs", lambda path: Full())
    with pytest.raises(ConfigError, match="full disk"):
        check_writable_folder(tmp_path / "out", "-o out/r.json")
