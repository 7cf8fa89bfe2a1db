"""The dask executor (astra_executor_dask): registered through ``astra_register_executors``, ``--dask ADDRESS``
resolves to it, a lost task is submitted again a bounded number of times, and a LocalCluster runs tasks, shared
payloads and broadcasts."""

from __future__ import annotations

import os

import pytest

from astra_sim.errors import ConfigError
from astra_sim.executors import ExecutorFailure, executor_registry, make_executor
from astra_sim.plugins import make_plugin_manager

import astra_executor_dask.executor as dask_executor
from astra_executor_dask.executor import DASK_RETRIES, DaskExecutor


def test_the_plugin_registers_dask_and_the_kernel_only_local():
    entries = executor_registry(make_plugin_manager()).entries
    assert entries["dask"].plugin == "executor_dask" and entries["local"].plugin == "builtin"
    blocked = executor_registry(make_plugin_manager(block=["executor_dask"])).entries
    assert "dask" not in blocked and "local" in blocked


def test_dask_without_the_plugin_is_a_one_line_error():
    pm = make_plugin_manager(block=["executor_dask"])
    with pytest.raises(ConfigError, match=r"^--dask tcp://127.0.0.1:1: .*astra-executor-dask"):
        make_executor(dask="tcp://127.0.0.1:1", pm=pm)
    with pytest.raises(ConfigError, match=r"^--executor dask:local:1: .*astra-executor-dask"):
        make_executor(executor="dask:local:1", pm=pm)
    with pytest.raises(ConfigError, match="give the scheduler"):
        make_executor(executor="dask")


def test_a_bad_local_cluster_size_is_a_config_error():
    pytest.importorskip("distributed")
    with pytest.raises(ConfigError, match="--dask local:many: expected local:N"):
        make_executor(dask="local:many")


def test_an_unreachable_scheduler_is_a_config_error(monkeypatch):
    """(the client's connection timeout, 20 s, shortened here to 1 s)"""
    pytest.importorskip("distributed")
    from astra_executor_dask import executor

    monkeypatch.setattr(executor, "CONNECT_TIMEOUT_S", 1)
    with pytest.raises(ConfigError, match="--dask tcp://127.0.0.1:1: cannot reach the scheduler"):
        make_executor(dask="tcp://127.0.0.1:1")


def _shout(task, payload):
    return f"{task}{payload or ''}".upper()


def _pid(_task, _payload):
    return os.getpid()


def test_a_local_cluster_runs_tasks_with_shared_payloads(tmp_path):
    pytest.importorskip("distributed")
    with make_executor(dask="local:2") as executor:
        assert isinstance(executor, DaskExecutor) and executor.workers == 2
        handle = executor.share("-x")
        results = dict(executor.run(_shout, [("a", handle), ("b", None), ("c", handle)]))
        assert results == {"a": "A-X", "b": "B", "c": "C-X"}
        assert os.getpid() not in {pid for _, pid in executor.run(_pid, [(i, None) for i in range(4)])}
        marks = tmp_path / "marks"
        marks.mkdir()
        executor.broadcast(_mark, str(marks))
    # every worker process and this one (the workers share this machine's folder)
    assert len(list(marks.iterdir())) == 3


def _mark(folder):
    open(os.path.join(folder, str(os.getpid())), "w").close()


def test_a_lost_task_is_submitted_again_a_bounded_number_of_times(monkeypatch):
    class Future:
        def __init__(self, outcome):
            self.outcome = outcome

        def result(self):
            if isinstance(self.outcome, Exception):
                raise self.outcome
            return self.outcome

    class Client:
        def __init__(self, failures):
            self.failures = failures  # task -> how many submissions are lost
            self.submitted = []

        def submit(self, fn, task, payload, pure):
            self.submitted.append(task)
            lost = self.failures.get(task, 0) > 0
            self.failures[task] = self.failures.get(task, 0) - 1
            return Future(OSError("worker lost") if lost else fn(task, payload))

    class AsCompleted:
        def __init__(self, futures):
            self.queue = list(futures)

        def add(self, future):
            self.queue.append(future)

        def __iter__(self):
            while self.queue:
                yield self.queue.pop(0)

    class Distributed:
        as_completed = AsCompleted

    monkeypatch.setattr(dask_executor, "_distributed", lambda: Distributed)
    pool = DaskExecutor.__new__(DaskExecutor)
    pool.client = Client({"a": 1, "b": DASK_RETRIES + 1})
    pool._shared, pool._renewed = {}, {}  # nothing scattered: payloads travel as they are
    results = dict(pool.run(lambda task, payload: task.upper(), [("a", None), ("b", None), ("c", None)]))
    assert results["a"] == "A" and results["c"] == "C"
    assert isinstance(results["b"], ExecutorFailure) and "3 times" in results["b"].message
    assert pool.client.submitted.count("b") == DASK_RETRIES + 1
