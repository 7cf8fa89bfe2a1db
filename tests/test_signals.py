"""A command running workers (``astra sweep`` on the kernel's executors) stopped by SIGINT, SIGTERM or SIGHUP at a
random moment: its workers go with it (nothing left in its process group), no traceback, the rows finished so far
are kept (``N of M points kept; rerun the same command to resume``), it exits 128 + the signal number, and the same
command then runs only the missing points: one row per point."""

from __future__ import annotations

import csv
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from astra_sim.executors import STOP_SIGNALS, LocalPool, Stopped, stop_on_signals

SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 4, hidden: 512, heads: 8, kv-heads: 8, ffn-hidden: 2048, seq-len: 256, tp: 2, pp: 2, dp: 2, micro-batches: 2}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {run.platform-collective: [ring, nccl], workload.llm.tp: [2, 4], workload.llm.micro-batches: [2, 4, 8, 16]}
"""
POINTS = 16
ASTRA = os.path.join(os.path.dirname(sys.executable), "astra")


def _journal_rows(path):
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.endswith("\n"))


def _live_members(group):
    """Processes of the process group ``group`` that are still running (zombies waiting for init are gone)."""
    out = subprocess.run(["ps", "-o", "stat=", "-g", str(group)], capture_output=True, text=True).stdout
    return [s for s in out.split() if not s.startswith("Z")]


@pytest.mark.slow
def test_each_stop_signal_at_a_random_moment_keeps_rows_leaves_no_process_and_resumes(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "r.csv"
    journal = str(out) + ".journal"
    cmd = [ASTRA, "sweep", str(spec), "-o", str(out), "--jobs", "2", "--no-progress"]
    rng = random.Random(os.environ.get("ASTRA_SIGNAL_SEED", 39))
    kept = 0
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                start_new_session=True)
        new_rows = rng.randint(1, 2)
        deadline = time.monotonic() + 180
        while _journal_rows(journal) < new_rows and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.3))  # somewhere inside a point, or between two
        assert proc.poll() is None, proc.communicate()
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # Ctrl-C reaches the whole foreground process group
        else:
            os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signum, err
        assert "Traceback" not in err and "leaked" not in err, err
        found = re.search(rf"(\d+) of {POINTS} points kept; rerun the same command to resume", err)
        assert found, err
        assert int(found.group(1)) >= kept + new_rows
        kept = int(found.group(1))
        deadline = time.monotonic() + 15
        while _live_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _live_members(proc.pid) == [], f"{signal.Signals(signum).name} left processes behind"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"ran {POINTS - kept} ({kept} already in" in done.stdout
    with open(out, newline="", encoding="utf-8") as handle:
        points = [row["point"] for row in csv.DictReader(handle)]
    assert len(points) == POINTS and len(set(points)) == POINTS


def test_stop_on_signals_raises_once_then_restores_the_handlers():
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    with pytest.raises(Stopped) as stop:
        with stop_on_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
            finally:
                os.kill(os.getpid(), signal.SIGHUP)  # a second signal during the clean-up is ignored
                time.sleep(0.05)
    assert stop.value.exit_code == 143 and stop.value.signal_name == "SIGTERM"
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def _sleep_task(seconds, _payload):
    time.sleep(seconds)
    return seconds


def test_a_stop_signal_inside_with_make_executor_stops_its_workers():
    """validate and the searches run their executors in ``with``: a signal stops the workers there too."""
    import multiprocessing
    import threading

    timer = threading.Timer(3, os.kill, (os.getpid(), signal.SIGTERM))
    with pytest.raises(Stopped) as stop:
        with LocalPool(2) as pool:
            timer.start()
            list(pool.run(_sleep_task, [(60, None), (60, None), (60, None)]))
    assert stop.value.exit_code == 143
    assert multiprocessing.active_children() == []
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
