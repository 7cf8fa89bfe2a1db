"""pytest plugin shipped with the kernel: fixtures every plugin's test suite can use.

Registered under the ``pytest11`` entry point, so the fixtures reach every
suite however pytest is invoked (no ``pytest_plugins`` in conftest files).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def find_shared_dir():
    """The reference material folder: $ASTRA_SHARED_DIR, else ``../shared`` beside the repo."""
    env = os.environ.get("ASTRA_SHARED_DIR")
    if env and Path(env).is_dir():
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared"
        if (parent / "pyproject.toml").exists() and candidate.is_dir():
            return candidate
    return None


def repo_root():
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "core").is_dir():
            return parent
    return None


@pytest.fixture(scope="session")
def shared_dir():
    """Path to ``../shared``; skips the test when the reference material is absent."""
    path = find_shared_dir()
    if path is None:
        pytest.skip("reference material (../shared or $ASTRA_SHARED_DIR) not found")
    return path


@pytest.fixture(scope="session")
def parity_dir(shared_dir):
    path = shared_dir / "parity"
    if not path.is_dir():
        pytest.skip("shared/parity not found")
    return path
