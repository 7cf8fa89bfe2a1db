"""The ns-3 import says, before it starts, that it compiles once per process (issue 38: no silent wait)."""

from __future__ import annotations

import sys

import pytest

import astra_network_ns3.backend as backend
from astra_sim.errors import ConfigError


def test_the_import_names_its_one_time_compile_before_it_starts(monkeypatch):
    said = []
    import astra_sim.progress as progress

    monkeypatch.setattr(progress, "phase", lambda text, *a, **k: said.append(text))
    monkeypatch.setattr(backend, "_GLUE", None)
    monkeypatch.setitem(sys.modules, "ns", None)  # the import then fails at once: we see what came before it
    with pytest.raises(ConfigError, match="needs the ns3 package"):
        backend.load_glue()
    assert said and "once per process" in said[0] and "ns-3" in said[0]
