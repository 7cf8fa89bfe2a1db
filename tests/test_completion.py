"""`astra completion bash|zsh|fish` and the answers the shell gets (argcomplete behind it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _astra(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "astra_sim.cli", *argv], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_script_for_each_shell(shell):
    out = _astra("completion", shell)
    assert out.returncode == 0, out.stderr
    assert "astra" in out.stdout and "_ARGCOMPLETE" in out.stdout


def test_an_unknown_shell_is_refused():
    out = _astra("completion", "tcsh")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def _complete(tmp_path, line):
    answer = tmp_path / "answer"
    out = _astra(env={"_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
                      "_ARGCOMPLETE_STDOUT_FILENAME": str(answer), "_ARGCOMPLETE_IFS": "\n"})
    assert out.returncode == 0, out.stderr
    return answer.read_text().split("\n")


def test_commands_flags_and_platforms_complete(tmp_path):
    assert "run" in [w.strip() for w in _complete(tmp_path, "astra ru")]
    assert "--platform" in [w.strip() for w in _complete(tmp_path, "astra run --platf")]
    names = [w.strip() for w in _complete(tmp_path, "astra run --platform hgx-")]
    assert "hgx-h100" in names and all(n.startswith("hgx-") for n in names)
