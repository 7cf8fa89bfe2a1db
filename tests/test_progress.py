"""The progress lines of long commands (astra_sim.progress) and their place in `astra run`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astra_sim import progress

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "data_parallel"


@pytest.fixture
def shown(monkeypatch):
    monkeypatch.setenv("ASTRA_PROGRESS", "1")
    monkeypatch.delenv("ASTRA_PROGRESS_DELAY_S", raising=False)
    monkeypatch.delenv("ASTRA_PROGRESS_INTERVAL_S", raising=False)


def _wait_for(stream, text, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in stream.getvalue():
            return True
        time.sleep(0.01)
    return False


def test_a_long_block_prints_its_phase_and_figure_periodically(shown):
    stream = io.StringIO()
    with progress.activity("astra demo", stream=stream, delay_s=0, interval_s=0.02):
        progress.phase("simulating", lambda: "3 of 8 ranks done")
        assert _wait_for(stream, "3 of 8 ranks done")
        progress.phase("writing the report")
        assert _wait_for(stream, "writing the report")
    lines = stream.getvalue().splitlines()
    assert any(line.startswith("astra demo: simulating (3 of 8 ranks done), ") for line in lines)
    assert all(line.startswith("astra demo: ") and line.endswith(" elapsed") for line in lines)


def test_a_quick_block_prints_nothing(shown):
    stream = io.StringIO()
    with progress.activity("astra quick", stream=stream, delay_s=5):
        progress.phase("simulating")
    assert stream.getvalue() == ""


def test_switched_off_by_the_environment_and_by_the_caller(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setenv("ASTRA_PROGRESS", "0")
    with progress.activity("astra off", stream=stream, delay_s=0, interval_s=0.01) as current:
        assert current is None
        time.sleep(0.05)
    monkeypatch.setenv("ASTRA_PROGRESS", "1")
    with progress.activity("astra off", enabled=False, stream=stream, delay_s=0, interval_s=0.01) as current:
        assert current is None
        time.sleep(0.05)
    assert stream.getvalue() == ""


def test_phase_without_an_activity_is_free():
    assert progress._current is None
    progress.phase("nothing listens")  # no error, nothing kept
    assert progress._current is None


def test_hold_keeps_it_quiet_and_a_failing_figure_never_stops_the_work(shown):
    stream = io.StringIO()
    with progress.activity("astra held", stream=stream, delay_s=0, interval_s=0.01):
        with progress.hold():
            progress.phase("own bar")
            time.sleep(0.1)
        assert "own bar" not in stream.getvalue()
        progress.phase("figure fails", lambda: 1 / 0)
        assert _wait_for(stream, "figure fails, ")


def test_astra_run_says_what_it_does_on_stderr_and_keeps_stdout_clean(tmp_path):
    env = {**os.environ, "ASTRA_PROGRESS": "1", "ASTRA_PROGRESS_DELAY_S": "0", "ASTRA_PROGRESS_INTERVAL_S": "0.05"}
    out = subprocess.run(
        [sys.executable, "-m", "astra_sim.cli", "run", "--workload-configuration", str(EXAMPLE / "trace" / "dp"),
         "--system-configuration", str(EXAMPLE / "system.json"),
         "--network-configuration", str(EXAMPLE / "network.yml"),
         "--remote-memory-configuration", str(EXAMPLE / "memory.json"), "--json"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.lstrip().startswith("{")  # the progress never goes to stdout
    assert "astra run: " in out.stderr and " elapsed" in out.stderr
    quiet = subprocess.run(
        [sys.executable, "-m", "astra_sim.cli", "run", "-q", "--workload-configuration", str(EXAMPLE / "trace" / "dp"),
         "--system-configuration", str(EXAMPLE / "system.json"),
         "--network-configuration", str(EXAMPLE / "network.yml"),
         "--remote-memory-configuration", str(EXAMPLE / "memory.json")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert quiet.returncode == 0 and "elapsed" not in quiet.stderr


def test_a_leading_phase_is_not_replaced_by_the_runs_it_makes(shown):
    """astra serve times batch shapes with astra run's engine: the line keeps serve's phase, not the inner run's."""
    stream = io.StringIO()
    with progress.activity("astra serve", stream=stream, delay_s=0, interval_s=0.01):
        progress.phase("serving 10 requests", lambda: "3 batch shapes", lead=True)
        progress.phase("simulating")  # an inner run
        progress.phase("serving elsewhere", lead=True)  # a second lead does not take the line either
        assert _wait_for(stream, "serving 10 requests (3 batch shapes)")
        time.sleep(0.05)
    assert "simulating" not in stream.getvalue() and "elsewhere" not in stream.getvalue()


def test_command_names_include_the_subcommand_only():
    from astra_sim.cli import _command_name, build_parser
    from astra_sim.plugins import make_plugin_manager

    parser = build_parser(make_plugin_manager())
    assert _command_name(parser, ["workload", "llm", "--preset", "gpt3-13b"], "workload") == "astra workload llm"
    assert _command_name(parser, ["sweep", "spec.yaml", "-o", "r.csv"], "sweep") == "astra sweep"
    assert _command_name(parser, ["run", "--platform", "hgx-h100"], "run") == "astra run"


def test_the_silent_start_counts_from_when_the_command_began(shown):
    """Time spent before the block (loading plugins) counts: a command that began 2.9 s ago with a 3 s delay
    speaks at once, not 3 s later, and its elapsed time counts from its start."""
    stream = io.StringIO()
    entered = time.monotonic()
    with progress.activity("astra late", stream=stream, delay_s=3.0, interval_s=0.02, since=entered - 2.9):
        progress.phase("working hard")
        assert _wait_for(stream, "working hard", timeout_s=2.0)
        assert time.monotonic() - entered < 2.0
    first = stream.getvalue().splitlines()[0]
    assert first.endswith((" 2 s elapsed", " 3 s elapsed", " 4 s elapsed")), first
