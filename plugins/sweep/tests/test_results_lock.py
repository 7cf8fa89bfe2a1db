"""The results file of a sweep is locked (``RESULTS.lock``, fcntl.flock) against a second writer: a second sweep
with the same -o refuses with a one-line message naming the first one's pid; the first goes on undisturbed."""

from __future__ import annotations

import csv
import os
import subprocess
import time

import pytest

from astra_sim.errors import ConfigError
from astra_sweep.results import locked


def test_a_second_holder_is_refused_and_the_lock_file_goes_with_the_first(tmp_path):
    out = tmp_path / "sub" / "r.csv"
    with locked(out):
        assert (tmp_path / "sub" / "r.csv.lock").read_text() == str(os.getpid())
        with pytest.raises(ConfigError, match=rf"-o {out}: another astra sweep \(pid {os.getpid()}\) is writing"):
            with locked(out):
                pass
    assert not (tmp_path / "sub" / "r.csv.lock").exists()
    with locked(out):  # free again
        pass


def test_two_sweeps_at_once_on_the_same_results(tmp_path, small_spec, astra_exe):
    out = str(tmp_path / "r.csv")
    cmd = [astra_exe, "sweep", small_spec, "-o", out, "--jobs", "1", "--no-progress"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(out + ".journal") and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.poll() is None, first.communicate()
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and "Traceback" not in second.stderr
    errors = second.stderr.strip().splitlines()
    assert len(errors) == 1 and f"another astra sweep (pid {first.pid}) is writing these results" in errors[0]
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    with open(out, newline="", encoding="utf-8") as handle:
        points = [row["point"] for row in csv.DictReader(handle)]
    assert len(points) == 12 and len(set(points)) == 12
    assert not os.path.exists(out + ".lock")
