"""The glue's compiled form, cached between runs (issue 37): the key, the C layer against glue.cc, the cache's
hits, invalidation, rebuilds of a corrupt file and concurrent writers (fast: a tiny library, no ns-3), then the
real glue across processes (slow: ns-3 and a C++ compiler)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from astra_network_ns3 import glue

CXX = glue.find_compiler()
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler ($CXX, c++, g++, clang++)")
GLUE_CC = Path(glue.__file__).with_name("glue.cc")


# ---------------------------------------------------------------------------------------------- fast: no compiler
def test_the_key_follows_the_source_the_command_and_the_ns3_version():
    unit, command = glue.compile_unit(), ["c++", "-O2", "-o"]
    key = glue.cache_key(unit, command, "3.44.post0")
    assert key == glue.cache_key(unit, command, "3.44.post0") and re.fullmatch("[0-9a-f]{64}", key)
    assert key != glue.cache_key(unit + "// changed\n", command, "3.44.post0")
    assert key != glue.cache_key(unit, ["c++", "-O3", "-o"], "3.44.post0")
    assert key != glue.cache_key(unit, command, "3.45")


def test_the_unit_holds_both_glue_files_and_the_c_layer():
    unit = glue.compile_unit()
    for name in glue.SOURCES:
        assert (Path(glue.__file__).with_name(name)).read_text(encoding="utf-8") in unit
    assert unit.index("// ---- routing.cc") < unit.index("// ---- glue.cc") < unit.index('extern "C"')


def test_every_api_entry_matches_its_method_in_glue_cc():
    """The table that makes the C layer and the ctypes signatures says what ``Net``'s methods take and return."""
    text = GLUE_CC.read_text(encoding="utf-8")
    for name, ret, args in glue.API:
        found = re.search(rf"\n    ([\w:]+) {name}\(([^)]*)\)", text)
        assert found, f"{name} is not a method of Net in glue.cc"
        params = [p.strip() for p in found.group(2).replace("\n", " ").split(",") if p.strip()]
        assert (found.group(1), tuple(p.rsplit(" ", 1)[0] for p in params)) == (ret, args), name
        assert f"astra_ns3_{name}(void* net" in glue.c_layer()


def test_the_cache_folder_follows_the_environment(tmp_path):
    assert glue.cache_folder({"ASTRA_NS3_CACHE": str(tmp_path)}) == str(tmp_path)
    assert glue.cache_folder({"XDG_CACHE_HOME": "/x"}) == os.path.join("/x", "astra-sim", "ns3")
    assert glue.cache_folder({}).endswith(os.path.join(".cache", "astra-sim", "ns3"))


# ---------------------------------------------------------------------------------------------- fast: a tiny library
TINY = 'extern "C" __attribute__((visibility("default"))) int astra_ns3_answer() { return %d; }\n'


def tiny_builder(value, calls):
    def build(path):
        calls.append(path)
        subprocess.run([*CXX, "-shared", "-fPIC", "-x", "c++", "-", "-o", path], input=TINY % value, text=True,
                       check=True)
    return build


@needs_cxx
def test_a_second_load_hits_the_cache_and_a_new_key_builds(tmp_path):
    calls = []
    lib, built = glue.cached_library(str(tmp_path), "a" * 64, tiny_builder(1, calls))
    assert built and lib.astra_ns3_answer() == 1 and len(calls) == 1
    lib, built = glue.cached_library(str(tmp_path), "a" * 64, tiny_builder(1, calls))
    assert not built and lib.astra_ns3_answer() == 1 and len(calls) == 1
    lib, built = glue.cached_library(str(tmp_path), "b" * 64, tiny_builder(2, calls))  # a changed glue: a new key
    assert built and lib.astra_ns3_answer() == 2 and len(calls) == 2
    assert sorted(os.listdir(tmp_path)) == [f"glue-{'a' * 64}.so", f"glue-{'b' * 64}.so"]  # no temporary left


@needs_cxx
@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "flipped"])
def test_a_corrupt_cached_library_is_built_again(tmp_path, damage):
    key = damage.ljust(64, "0")
    path = tmp_path / f"glue-{key}.so"
    tiny_builder(7, [])(str(path))  # a good cached library, never loaded by this process (it would stay mapped)
    glue.seal(str(path))
    assert glue._intact(str(path))
    data = path.read_bytes()
    path.write_bytes({"garbage": b"not a library" * 100, "truncated": data[: len(data) // 2], "empty": b"",
                     "flipped": data[:100] + bytes([data[100] ^ 1]) + data[101:]}[damage])
    calls = []
    lib, built = glue.cached_library(str(tmp_path), key, tiny_builder(7, calls))
    assert built and len(calls) == 1 and lib.astra_ns3_answer() == 7


@needs_cxx
def test_a_whole_cached_library_is_loaded_without_building(tmp_path):
    path = tmp_path / f"glue-{'e' * 64}.so"
    tiny_builder(5, [])(str(path))
    glue.seal(str(path))
    calls = []
    lib, built = glue.cached_library(str(tmp_path), "e" * 64, tiny_builder(5, calls))
    assert not built and not calls and lib.astra_ns3_answer() == 5


@needs_cxx
def test_concurrent_first_loads_all_succeed_and_leave_one_library(tmp_path):
    results, errors = [], []

    def load():
        try:
            lib, built = glue.cached_library(str(tmp_path), "c" * 64, tiny_builder(3, []))
            results.append(lib.astra_ns3_answer())
        except Exception as exc:  # noqa: BLE001 (reported by the assertion below)
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and results == [3] * 4
    assert os.listdir(tmp_path) == [f"glue-{'c' * 64}.so"]


@needs_cxx
def test_a_killed_builds_old_temporary_file_goes_and_a_fresh_one_stays(tmp_path):
    old, fresh = tmp_path / ".glue-old.so.tmp", tmp_path / ".glue-fresh.so.tmp"
    old.write_bytes(b"half a library")
    fresh.write_bytes(b"a build under way")
    os.utime(old, (1000, 1000))
    glue.cached_library(str(tmp_path), "h" * 64, tiny_builder(1, []))
    assert not old.exists() and fresh.exists()


@needs_cxx
def test_the_folder_keeps_the_newest_libraries(tmp_path, monkeypatch):
    monkeypatch.setattr(glue, "KEEP", 2)
    for number, letter in enumerate("def"):
        glue.cached_library(str(tmp_path), letter * 64, tiny_builder(number, []))
        os.utime(tmp_path / f"glue-{letter * 64}.so", (1000 + number, 1000 + number))
    glue.cached_library(str(tmp_path), "g" * 64, tiny_builder(9, []))
    assert sorted(os.listdir(tmp_path)) == [f"glue-{'f' * 64}.so", f"glue-{'g' * 64}.so"]


def test_a_failing_compiler_says_so_and_falls_back_to_cppyy(tmp_path, monkeypatch, capsys):
    """A compiler that fails: one line naming it and the fallback; then cppyy's path (cppyy blocked here, so its
    error ends the attempt at once)."""
    if importlib.util.find_spec("ns3") is None:
        pytest.skip("the ns3 package is not installed")
    monkeypatch.setattr(glue, "_GLUE", None)
    monkeypatch.setenv("ASTRA_NS3_CACHE", str(tmp_path))
    monkeypatch.setattr(glue, "find_compiler", lambda: ["/bin/false"])
    monkeypatch.setitem(sys.modules, "cppyy", None)
    with pytest.raises(glue.ConfigError, match="needs cppyy"):
        glue.load_glue()
    err = capsys.readouterr().err
    assert "compiling the glue with /bin/false failed" in err and "cppyy" in err
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".so")]


# ---------------------------------------------------------------------------------------------- slow: the real glue
CHILD = r"""
import json, sys, time
start = time.perf_counter()
from astra_network_ns3.glue import load_glue
g = load_glue()
loaded = time.perf_counter() - start
from astra_sim.simulation import simulate
report = simulate(*sys.argv[1:4], network_backend="ns3", ns3_fct_file=sys.argv[4])
print(json.dumps({"built": getattr(g, "built", None), "library": getattr(g, "library", None), "load_s": loaded,
                  "finish_ns": [r.finish_ns for r in report.ranks]}))
"""


def run_child(tmp_path, env, name):
    from astra_sim.chakra import make_metadata, make_node, types as T, write_et
    from astra_sim_testing import write_system_config

    (tmp_path / "topo.txt").write_text("5 1 4\n4\n" + "".join(f"4 {h} 100Gbps 1us 0\n" for h in range(4)))
    cfg = tmp_path / "cfg.txt"
    cfg.write_text("TOPOLOGY_FILE topo.txt\nPACKET_PAYLOAD_SIZE 1000\nCC_MODE 8\nENABLE_QCN 1\nBUFFER_SIZE 32\n"
                   "KMIN_MAP 1 100000000000 400\nKMAX_MAP 1 100000000000 1600\nPMAX_MAP 1 100000000000 0.2\n")
    node = make_node(1, "ar", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                       "comm_size": 1 << 18})
    for rank in range(4):
        write_et(tmp_path / f"ar.{rank}.et", make_metadata(), [node])
    system = write_system_config(tmp_path / "sys.json")
    fct = tmp_path / f"{name}.fct.txt"
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "ar"), system, str(cfg), str(fct)],
                          env={**os.environ, "ASTRA_PROGRESS": "0", **env}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), fct.read_text()


needs_ns3 = pytest.mark.skipif(importlib.util.find_spec("ns3") is None, reason="the ns3 package is not installed")


@pytest.mark.slow
@needs_ns3
@needs_cxx
def test_the_real_glue_compiles_once_loads_from_the_cache_recompiles_when_changed_and_equals_cppyy(tmp_path):
    """One test (each child imports ns-3 and a build compiles the real glue: the fewest of both for the four
    checks). A second process loads the library the first built; a glue.cc with one comment added is another key,
    compiled again, the same run; cppyy's JIT of the same glue gives the same run and flow completion times."""
    cache = tmp_path / "cache"
    env = {"ASTRA_NS3_CACHE": str(cache)}
    first, fct_first = run_child(tmp_path, env, "first")
    second, fct_second = run_child(tmp_path, env, "second")
    assert first["built"] is True and second["built"] is False and first["library"] == second["library"]
    assert first["finish_ns"] == second["finish_ns"] and fct_first == fct_second
    assert second["load_s"] < 3, second  # a library load, no compiler: well under a second on a quiet machine

    # the same package with one comment added to glue.cc: another key, compiled again, the same run
    package = tmp_path / "pkg" / "astra_network_ns3"
    package.mkdir(parents=True)
    for path in Path(glue.__file__).parent.iterdir():
        if path.is_file():
            package.joinpath(path.name).write_bytes(path.read_bytes())
    with package.joinpath("glue.cc").open("a", encoding="utf-8") as handle:
        handle.write("// a changed glue\n")
    changed_env = {**env, "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), os.environ.get("PYTHONPATH", "")])}
    changed, _ = run_child(tmp_path, changed_env, "changed")
    assert changed["built"] is True and changed["library"] != first["library"]
    assert changed["finish_ns"] == first["finish_ns"]
    assert len(list(cache.glob("glue-*.so"))) == 2

    jit, fct_jit = run_child(tmp_path, {"ASTRA_NS3_GLUE": "cppyy"}, "cppyy")
    assert jit["built"] is None and first["finish_ns"] == jit["finish_ns"] and fct_first == fct_jit


def test_the_ctypes_signatures_cover_every_type_of_the_api():
    assert {t for _n, ret, args in glue.API for t in (ret, *args)} <= set(glue._CTYPES)
    assert glue._CTYPES["uint64_t"] is ctypes.c_uint64
