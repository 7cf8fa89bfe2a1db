"""The first day's install: `make install` says what it installs before each step (docs/first-day.md, issue 38).

The first day's commands themselves run in tests/test_docs_run.py (in a terminal, each held to its stated time and
to at most 5 s of silence); `make install` is not run there (the suite runs inside the .venv it makes), so this reads
the recipe make would run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def install_recipe():
    """The lines ``make install`` runs from scratch (``-B``: as if nothing were installed), without running them."""
    # under `make test` the outer make's flags would reach this one (and it would print "Entering directory")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    out = subprocess.run(["make", "--no-print-directory", "-n", "-B", "install"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_names_each_step_before_it_runs():
    lines = install_recipe()
    steps = [i for i, line in enumerate(lines) if re.match(r'echo "make install \[\d+/\d+\]: ', line)]
    assert steps, lines
    total = int(re.search(r"\[\d+/(\d+)\]", lines[steps[0]]).group(1))
    assert [int(re.search(r"\[(\d+)/", lines[i]).group(1)) for i in steps] == list(range(1, total + 1))
    for i, line in enumerate(lines):
        if re.search(r"\bpip install\b|-m venv\b", line):
            announced = [s for s in steps if s < i]
            assert announced, f"{line!r} runs before make install says what it installs"
            says = " ".join(lines[announced[-1]:i])
            assert "echo" in says and len(says.split(":", 1)[1].split()) >= 3, f"{line!r}: announced as {says!r}"
    assert lines[-1].startswith('echo "make install: done') and ".venv/bin/astra" in lines[-1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_names_the_heavy_packages_it_installs():
    """Every bundled plugin is installed (docs/first-day.md says so), and the long step names how many and what
    makes it long (ns-3)."""
    text = "\n".join(install_recipe())
    plugins = sorted(p.parent.name for p in (ROOT / "plugins").glob("*/pyproject.toml"))
    installed = re.findall(r"-e plugins/(\w+)", text)
    assert sorted(installed) == plugins
    assert f"its {len(installed)} plugins" in text
    assert "ns-3" in text


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_long_install_step_is_not_silent():
    """The step that takes minutes lets pip name each package as it goes (no -q), and states the size it reaches."""
    lines = install_recipe()
    long_step = next(line for line in lines if "-e plugins/" in line)
    assert " -q" not in long_step, long_step
    assert re.search(r"about \d+(\.\d+)? GB installed", "\n".join(lines))
