"""Executors are the kernel's registered role: a plugin adds one with ``astra_register_executors`` and a sweep
selects it with ``--executor NAME[:ARG]``; the kernel imports Dask only when a Dask executor is made."""

from __future__ import annotations

import subprocess
import sys

import pytest

from astra_sim import hookimpl
from astra_sim.errors import ConfigError, PluginError
from astra_sim.executors import Executor, LocalPool, executors, make_executor
from astra_sim.plugins import make_plugin_manager


class Serial(Executor):
    """Every task in this process, one after the other; ``arg`` is kept to show it arrives."""

    name = "serial"

    def __init__(self, arg=None):
        self.arg = arg
        self.ran = 0

    def run(self, fn, tasks, timeout=None):
        for task, payload in tasks:
            self.ran += 1
            yield task, fn(task, payload)


class SerialPlugin:
    made = []

    @hookimpl
    def astra_register_executors(self, registry):
        def factory(arg):
            executor = Serial(arg)
            SerialPlugin.made.append(executor)
            return executor

        registry.executor("serial", factory, "in this process")


def test_a_plugins_executor_runs_a_sweep(tmp_path):
    from astra_sweep import run_sweep
    from astra_sweep.commands import command_parsers
    from astra_sweep.results import Results

    pm = make_plugin_manager(extra_plugins=[SerialPlugin()])
    assert "serial" in executors(pm) and {"local", "dask"} <= set(executors(pm))
    spec = tmp_path / "spec.yaml"
    spec.write_text("workload: {micro: {collective: all_reduce, size: 1MiB, npus: 8}}\nrun: {platform: hgx-h100}\n"
                    "axes:\n  grid: {run.platform-collective: [ring, nccl]}\n")
    SerialPlugin.made.clear()
    summary = run_sweep(str(spec), str(tmp_path / "r.csv"), executor="serial:fast", progress=False,
                        state=command_parsers(pm))
    assert summary["ok"] == 2 and len(SerialPlugin.made) == 1
    assert SerialPlugin.made[0].arg == "fast" and SerialPlugin.made[0].ran == 2
    rows = Results(str(tmp_path / "r.csv"), [], {})._read_results()
    assert all(row["step_ns"] > 0 for row in rows)


def test_unknown_and_clashing_executors_are_errors():
    with pytest.raises(ConfigError, match="--executor 'seral': unknown .*did you mean 'serial'.*local"):
        make_executor(executor="seral", pm=make_plugin_manager(extra_plugins=[SerialPlugin()]))

    class Clash:
        @hookimpl
        def astra_register_executors(self, registry):
            registry.executor("local", lambda arg: LocalPool())

    with pytest.raises(PluginError, match="executor 'local' is registered by two plugins"):
        make_executor(executor="local", pm=make_plugin_manager(extra_plugins=[Clash()]))
    with pytest.raises(ConfigError, match="give --dask or --executor, not both"):
        make_executor(dask="local:1", executor="local")
    with pytest.raises(ConfigError, match="local:N with N >= 1"):
        make_executor(executor="local:zero")


def test_local_takes_jobs_and_its_own_count():
    assert make_executor(jobs=3).workers == 3
    assert make_executor(jobs=3, executor="local").workers == 3
    assert make_executor(jobs=3, executor="local:2").workers == 2


def test_the_kernel_does_not_import_dask():
    code = ("import sys, astra_sim, astra_sim.executors as e; from astra_sim.plugins import default_plugin_manager; "
            "e.executor_registry(default_plugin_manager()); e.make_executor(jobs=1).close(); "
            "assert 'distributed' not in sys.modules and 'dask' not in sys.modules, 'dask imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
