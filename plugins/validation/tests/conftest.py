"""Shared helpers for the validation tests. Tests run with ``--import-mode=importlib`` and cannot import each
other, so a helper two test modules need is a fixture here that returns it."""

from __future__ import annotations

import pytest

from astra_validation.registry import load_cases


def _flag(case, name):
    words = list(case.workload)
    return words[words.index(name) + 1] if name in words else None


@pytest.fixture
def flag():
    """``flag(case, "--name")``: the word after ``--name`` in the case's workload, None when the flag is absent."""
    return _flag


@pytest.fixture(scope="module")
def registry_cases():
    """The registry's cases by name, loaded once per test module."""
    return {c.name: c for c in load_cases()}
