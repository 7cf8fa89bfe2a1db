"""When the plugins' entry points are read again (astra_sim.plugins._entry_points): after an install changes a
``sys.path`` folder, but not when a script writes files into the current folder ('' on ``sys.path``); and the copy
kept on disk for the next process (``$XDG_CACHE_HOME/astra-sim/entry-points``), under the same rule."""

import importlib.metadata
import json
import os
import sys

import pytest

import astra_sim.plugins as plugins_mod


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ASTRA_CACHE", raising=False)


def _counting(monkeypatch):
    calls = []
    real = importlib.metadata.entry_points

    def entry_points(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(plugins_mod, "_ENTRY_POINTS", {})
    return calls


def _new_process(monkeypatch):
    """What a new process starts with: nothing read in memory (the disk cache stays)."""
    monkeypatch.setattr(plugins_mod, "_ENTRY_POINTS", {})


def _cache_files(tmp_path):
    return list((tmp_path / "cache" / "astra-sim" / "entry-points").glob("*.json"))


def test_files_written_in_the_current_folder_do_not_read_the_entry_points_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    calls = _counting(monkeypatch)
    first = plugins_mod._entry_points()
    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "run-folder").mkdir()
    assert plugins_mod._entry_points() == first and len(calls) == 1


def test_a_changed_sys_path_folder_reads_them_again(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    calls = _counting(monkeypatch)
    plugins_mod._entry_points()
    plugins_mod._entry_points()
    assert len(calls) == 1
    (site / "newly_installed-1.0.dist-info").mkdir()  # what an install does to its folder
    later = site.stat().st_mtime_ns + 1_000_000_000  # past a coarse file system clock's tick
    os.utime(site, ns=(later, later))
    plugins_mod._entry_points()
    assert len(calls) == 2
    _new_process(monkeypatch)  # the disk copy was rewritten under the new stamp
    plugins_mod._entry_points()
    assert len(calls) == 2


def test_the_next_process_reads_them_from_the_disk_cache(tmp_path, monkeypatch):
    calls = _counting(monkeypatch)
    first = plugins_mod._entry_points()
    assert len(calls) == 1 and len(_cache_files(tmp_path)) == 1
    _new_process(monkeypatch)
    again = plugins_mod._entry_points()
    assert len(calls) == 1
    real = {ep.name: (ep.value, ep.dist.name, ep.dist.version) for ep in importlib.metadata.entry_points(
        group=plugins_mod.GROUP)}
    assert {ep.name: (ep.value, ep.dist.name, ep.dist.version) for ep in again} == real
    assert again == first and "folding" in real
    # a cached entry loads the same object the metadata's entry point loads
    folding = next(ep for ep in again if ep.name == "folding")
    assert folding.load() is next(ep for ep in importlib.metadata.entry_points(group=plugins_mod.GROUP)
                                  if ep.name == "folding").load()


def test_another_sys_path_is_another_stamp(tmp_path, monkeypatch):
    calls = _counting(monkeypatch)
    plugins_mod._entry_points()
    other = tmp_path / "other"
    other.mkdir()
    _new_process(monkeypatch)
    monkeypatch.setattr(sys, "path", [*sys.path, str(other)])  # e.g. a PYTHONPATH naming a third party's folder
    plugins_mod._entry_points()
    assert len(calls) == 2


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"stamp": 3}', '{"stamp": null, "points": 5}'])
def test_an_unreadable_cache_is_read_from_the_metadata_and_replaced(tmp_path, monkeypatch, text):
    calls = _counting(monkeypatch)
    plugins_mod._entry_points()
    (path,) = _cache_files(tmp_path)
    path.write_text(text)
    _new_process(monkeypatch)
    assert {ep.name for ep in plugins_mod._entry_points()} >= {"folding", "analysis"}
    assert len(calls) == 2 and json.loads(path.read_text())["points"]


def test_a_cache_whose_points_do_not_parse_is_read_again(tmp_path, monkeypatch):
    calls = _counting(monkeypatch)
    plugins_mod._entry_points()
    (path,) = _cache_files(tmp_path)
    kept = json.loads(path.read_text())
    kept["points"] = [["only-a-name"]]
    path.write_text(json.dumps(kept))
    _new_process(monkeypatch)
    assert {ep.name for ep in plugins_mod._entry_points()} >= {"folding"}
    assert len(calls) == 2


def test_astra_cache_0_reads_the_metadata_every_time_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_CACHE", "0")
    calls = _counting(monkeypatch)
    plugins_mod._entry_points()
    _new_process(monkeypatch)
    plugins_mod._entry_points()
    assert len(calls) == 2 and not _cache_files(tmp_path)


def test_a_cache_folder_that_cannot_be_written_costs_only_the_cache(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file where the folder would go")
    calls = _counting(monkeypatch)
    assert {ep.name for ep in plugins_mod._entry_points()} >= {"folding"}
    _new_process(monkeypatch)
    plugins_mod._entry_points()
    assert len(calls) == 2


def test_a_cached_entry_loads_a_module_or_its_attribute():
    dist = plugins_mod.PluginDist("x", "1")
    assert plugins_mod.PluginEntry("p", "astra_sim.plugins", dist).load() is plugins_mod
    assert plugins_mod.PluginEntry("p", "astra_sim.plugins:PluginEntry.load", dist).load() is plugins_mod.PluginEntry.load
    with pytest.raises(ModuleNotFoundError):
        plugins_mod.PluginEntry("p", "astra_no_such_module:x", dist).load()
