"""When the plugins' entry points are read again (astra_sim.plugins._entry_points): after an install changes a
``sys.path`` folder, but not when a script writes files into the current folder ('' on ``sys.path``)."""

import importlib.metadata
import os
import sys

import astra_sim.plugins as plugins_mod


def _counting(monkeypatch):
    calls = []
    real = importlib.metadata.entry_points

    def entry_points(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(plugins_mod, "_ENTRY_POINTS", {})
    return calls


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
