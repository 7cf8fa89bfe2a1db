"""Loading the glue says, before it starts, what it waits for (issue 38: no silent wait): cppyy's import and
compile once per process, or the compiler's one-time build of the cached library (issue 37)."""

from __future__ import annotations

import sys

import pytest

from astra_network_ns3 import glue
from astra_sim.errors import ConfigError


@pytest.fixture
def said(monkeypatch):
    lines = []
    import astra_sim.progress as progress

    monkeypatch.setattr(progress, "phase", lambda text, *a, **k: lines.append(text))
    monkeypatch.setattr(glue, "_GLUE", None)
    monkeypatch.setitem(sys.modules, "cppyy", None)  # cppyy's import then fails at once: we see what came before it
    return lines


def test_the_cppyy_import_names_its_one_time_compile_before_it_starts(said, monkeypatch):
    monkeypatch.setenv("ASTRA_NS3_GLUE", "cppyy")
    with pytest.raises(ConfigError, match="needs cppyy"):
        glue.load_glue()
    assert said and "once per process" in said[0] and "ns-3" in said[0]


def test_the_compiled_glue_names_its_build_and_its_cache_before_it_starts(said, monkeypatch, tmp_path):
    """A compiler that fails at once (/bin/false): the build's phase line came first, naming the cache folder."""
    monkeypatch.delenv("ASTRA_NS3_GLUE", raising=False)
    monkeypatch.setenv("ASTRA_NS3_CACHE", str(tmp_path))
    monkeypatch.setattr(glue, "find_compiler", lambda: ["/bin/false"])
    monkeypatch.setattr(glue, "_ns3_install", lambda: ("/p", "/p/lib64", "ns3.44", "3.44.post0"))
    with pytest.raises(ConfigError, match="needs cppyy"):
        glue.load_glue()
    assert "compiling the ns-3 glue with false" in said[1] and str(tmp_path) in said[1]
    assert "with cppyy" in said[-1]


def test_an_unknown_glue_choice_is_one_line_naming_the_variable(said, monkeypatch):
    monkeypatch.setenv("ASTRA_NS3_GLUE", "jit")
    with pytest.raises(ConfigError, match="ASTRA_NS3_GLUE: expected 'compiled' or 'cppyy', got 'jit'"):
        glue.load_glue()


def test_a_cxx_that_is_not_a_command_says_so_and_uses_cppyy(said, monkeypatch, capsys):
    monkeypatch.delenv("ASTRA_NS3_GLUE", raising=False)
    monkeypatch.setenv("CXX", "no-such-compiler-37 --flag")
    assert glue.find_compiler() is None
    with pytest.raises(ConfigError, match="needs cppyy"):
        glue.load_glue()
    assert "CXX='no-such-compiler-37 --flag' is not a command on the PATH" in capsys.readouterr().err


def test_cxx_is_split_as_a_shell_would(monkeypatch):
    monkeypatch.setenv("CXX", "env CCACHE_DISABLE=1 c++")
    found = glue.find_compiler()
    assert found[0].endswith("/env") and found[1:] == ["CCACHE_DISABLE=1", "c++"]
    assert glue.compile_command(found, ("/p", "/p/lib64", "ns3.44", "3.44"))[:3] == found
