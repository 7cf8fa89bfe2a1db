"""Long runs are safe to interrupt and leave nothing behind.

* ``astra run --platform`` keeps its generated configurations in a private temporary folder that exists
  only while the run reads them: after 100 runs (and after errors and signals) the temporary directory
  holds nothing new, and the report carries the configuration inline.
* Ctrl-C (SIGINT) and SIGTERM stop a long run within a second; no report is written unless
  ``--partial-report`` asks for one (``"complete": false``).
* Every output is written under a temporary name and renamed: SIGKILL or SIGTERM while a report is
  being written leaves no file or a complete one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.report import read_report

ASTRA = Path(sys.executable).parent / "astra"


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch):
    monkeypatch.delenv("ASTRA_PLUGINS", raising=False)


def all_reduces(tmp_path, count, npus=8, name="ar"):
    """``count`` chained 1 MiB all-reduces on every rank (3000 take several seconds unfolded)."""
    nodes = [make_node(i + 1, f"ar{i}", T.COMM_COLL_NODE, data_deps=[i] if i else [],
                       attrs={"comm_type": T.ALL_REDUCE, "comm_size": 1 << 20}) for i in range(count)]
    prefix = tmp_path / name
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    return str(prefix)


def test_hundred_platform_runs_leave_the_temp_dir_as_it_was(tmp_path, monkeypatch, capsys):
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    prefix = all_reduces(tmp_path, 2)
    report = tmp_path / "report.json"
    for i in range(100):
        extra = ["--report-json", str(report)] if i == 99 else []
        assert main(["run", "--platform", "hgx-h100", "--workload-configuration", prefix, "-q", *extra]) == 0
    assert sorted(os.listdir(private)) == []
    settings = json.loads(report.read_text())["settings"]
    # the generated configurations themselves, not paths that no longer exist
    system, network = settings["system_configuration"], settings["network_configuration"]
    assert system["generated_by"].startswith("--platform hgx-h100 --nodes 1")
    assert system["file"] == "system.json" and system["content"]["comm-streams"] == "per-communicator"
    assert network["file"] == "network.yml" and "npus_count: [ 8 ]" in network["content"]
    # errors leave nothing either
    assert main(["run", "--platform", "hgx-h100", "--workload-configuration", str(tmp_path / "none"), "-q"]) == 2
    assert main(["run", "--platform", "hgx-h100", "--workload-configuration", prefix, "--network-backend",
                 "nope", "-q"]) == 2
    assert sorted(os.listdir(private)) == []
    # so do the TPU platforms (compute_systolic), whose SCALE-sim config is generated too
    pytest.importorskip("astra_compute_systolic")
    tpu = all_reduces(tmp_path, 2, npus=16, name="tpu")
    for _ in range(3):
        assert main(["run", "--platform", "tpu-v3", "--workload-configuration", tpu, "-q",
                     "--report-json", str(report)]) == 0
    assert sorted(os.listdir(private)) == []
    systolic = json.loads(report.read_text())["settings"]["systolic_model"]["config"]
    assert systolic["file"] == "tpu-v3.cfg" and "ArrayHeight" in systolic["content"]


def _start(tmp_path, *extra, quiet=True):
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), ASTRA_PROGRESS="1", ASTRA_PROGRESS_DELAY_S="0",
               ASTRA_PROGRESS_INTERVAL_S="0.2")
    env.pop("ASTRA_PLUGINS", None)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    prefix = all_reduces(tmp_path, 3000, name="long")
    return subprocess.Popen([str(ASTRA), "run", "--platform", "hgx-h100", "--platform-collective", "ring",
                             "--workload-configuration", prefix,
                             "--no-fold", *(["-q"] if quiet else []), *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_until_simulating(proc):
    """Read the run's progress lines until its event loop runs (a loaded machine may still be starting up after
    seconds, when an interrupt writes no partial report: there is no run yet)."""
    for line in proc.stderr:
        if "simulating" in line:
            return
    raise AssertionError("the run ended before it was simulating; make it longer")


def _stop(proc, signum, after_s=2.5):
    time.sleep(after_s)
    assert proc.poll() is None, "the run ended before it was interrupted; make it longer"
    sent = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, time.monotonic() - sent, err


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_a_long_run_within_a_second_without_a_report(tmp_path, signum, code):
    report = tmp_path / "report.json"
    proc = _start(tmp_path, "--report-json", str(report))
    rc, took, err = _stop(proc, signum)
    assert rc == code, err
    assert took < 1.0, f"took {took:.2f} s to stop"
    assert f"interrupted by {signal.Signals(signum).name}; no report written" in err and "Traceback" not in err
    assert not report.exists()
    assert os.listdir(tmp_path / "tmp") == []  # the generated configurations are gone too
    assert [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")] == []


def test_partial_report_only_when_asked_and_marked_incomplete(tmp_path):
    report = tmp_path / "report.json"
    proc = _start(tmp_path, "--report-json", str(report), "--partial-report", quiet=False)
    _wait_until_simulating(proc)
    rc, took, err = _stop(proc, signal.SIGTERM, after_s=0.5)
    assert rc == 143 and took < 1.0, (rc, took, err)
    assert "partial report (complete: false) written" in err
    data = read_report(report)
    assert data["complete"] is False
    assert data["stats"]["interrupted"] == "interrupted by SIGTERM"
    if data["stats"]["stage"] == "simulating":
        assert len(data["ranks"]) == 8 and data["stats"]["simulated_ns"] > 0
        assert all(r["finish_ns"] is None for r in data["ranks"])  # nobody finished 3000 all-reduces yet
    assert data["settings"]["system_configuration"]["file"] == "system.json"
    assert os.listdir(tmp_path / "tmp") == []


WRITER = """
import json, sys
from astra_sim.safeio import write_text_atomic
path, n = sys.argv[1], int(sys.argv[2])
i = 0
while True:
    i += 1
    write_text_atomic(path, json.dumps({"i": i, "rows": [[i] * 50] * n, "complete": True}))
"""


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_killing_a_writer_leaves_no_file_or_a_complete_one(tmp_path, signum):
    """A process rewriting a ~10 MB report in a loop is killed at random moments: the report is always
    absent or whole JSON (a SIGKILL may leave a hidden .tmp-* file beside it, never a truncated report)."""
    import random

    rng = random.Random(signum)
    path = tmp_path / "out" / "report.json"
    seen = set()
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "40000"])
        time.sleep(0.3 + rng.random() * 0.5)
        proc.send_signal(signum)
        proc.wait(timeout=30)
        if path.exists():
            data = json.loads(path.read_text())  # never truncated
            assert data["complete"] is True and len(data["rows"]) == 40000
            seen.add("whole")
        else:
            seen.add("absent")
    assert seen


def test_atomic_write_removes_its_temporary_file_on_error(tmp_path, monkeypatch):
    from astra_sim.safeio import write_text_atomic

    def interrupted_rename(src, dst):
        assert Path(src).read_text() == "new"  # written whole under its temporary name
        raise KeyboardInterrupt

    target = tmp_path / "r.json"
    target.write_text("old")
    monkeypatch.setattr(os, "replace", interrupted_rename)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["r.json"]
