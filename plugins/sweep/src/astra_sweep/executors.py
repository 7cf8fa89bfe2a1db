"""Where points run. An executor is a small interface, so another scheduler (Ray, Slurm, ...) is one class:

* ``share(payload)`` -> a handle the tasks receive instead of the payload (a workload's files, once per
  workload: Dask scatters it to the workers; the local pool passes it as it is);
* ``run(fn, tasks)`` -> yields ``(task, result)`` as each finishes, in any order; ``fn(task, payload)`` is an
  importable function that never raises for a point's own failure (the point's row says it). When the
  executor itself loses a task (a worker died, a task outlived ``timeout`` and was killed) it yields
  ``(task, ExecutorFailure(message))`` and goes on;
* ``broadcast(fn, *args)`` runs ``fn`` once on every worker machine (clean-up); ``close()``.

Built in: :class:`LocalPool` (``--jobs N`` processes on this machine) and :class:`DaskExecutor` (``--dask
tcp://HOST:8786`` or ``--dask local:N``). Third parties register a class in the entry-point group
``astra_sim.sweep_executors`` and select it with ``--executor NAME[:ARG]`` (the class gets ARG).
"""

from __future__ import annotations

import importlib.metadata
import multiprocessing
import os
import queue as queue_module
import time

from astra_sim.errors import ConfigError

GROUP = "astra_sim.sweep_executors"
#: how much longer than --point-timeout a local worker may stay silent before it is killed
KILL_GRACE_S = 10.0


class ExecutorFailure:
    def __init__(self, message):
        self.message = message

    def __repr__(self):
        return f"ExecutorFailure({self.message!r})"


class Executor:
    """The interface (see the module docstring); subclasses implement ``run``."""

    name = "executor"
    workers = 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def share(self, payload):
        return payload

    def run(self, fn, tasks, timeout=None):  # pragma: no cover - interface
        raise NotImplementedError

    def broadcast(self, fn, *args):
        fn(*args)

    def close(self):
        pass


def _worker_main(inbox, outbox):
    """A local pool process: run tasks until told to stop (None)."""
    import importlib

    while True:
        item = inbox.get()
        if item is None:
            return
        index, fn_path, task, payload = item
        module, _, name = fn_path.rpartition(".")
        fn = getattr(importlib.import_module(module), name)
        outbox.put((index, fn(task, payload)))


class LocalPool(Executor):
    """``jobs`` worker processes on this machine, each running one point at a time and kept between points
    (a worker parses a shared workload once). A worker that dies, or stays silent ``KILL_GRACE_S`` past the
    point's timeout, is replaced and its point recorded as an error."""

    name = "local"

    def __init__(self, jobs=None):
        self.workers = jobs or os.cpu_count() or 1
        self._ctx = multiprocessing.get_context("spawn")
        self._procs = []

    def _spawn(self):
        inbox = self._ctx.Queue()
        outbox = self._ctx.Queue()
        proc = self._ctx.Process(target=_worker_main, args=(inbox, outbox), daemon=True)
        proc.start()
        return {"proc": proc, "inbox": inbox, "outbox": outbox, "task": None, "since": None}

    def run(self, fn, tasks, timeout=None):
        fn_path = f"{fn.__module__}.{fn.__qualname__}"
        pending = list(enumerate(tasks))[::-1]
        if not self._procs:
            self._procs = [self._spawn() for _ in range(min(self.workers, max(1, len(pending))))]
        busy = 0
        while pending or busy:
            for worker in self._procs:
                if worker["task"] is None and pending:
                    index, (task, payload) = pending.pop()
                    worker["task"], worker["since"] = (index, task), time.monotonic()
                    worker["inbox"].put((index, fn_path, task, payload))
                    busy += 1
            progressed = False
            for i, worker in enumerate(self._procs):
                if worker["task"] is None:
                    continue
                index, task = worker["task"]
                try:
                    _, result = worker["outbox"].get_nowait()
                except queue_module.Empty:
                    result = None
                    alive = worker["proc"].is_alive()
                    late = timeout and time.monotonic() - worker["since"] > timeout + KILL_GRACE_S
                    if alive and not late:
                        continue
                    code = worker["proc"].exitcode
                    worker["proc"].kill()
                    worker["proc"].join()
                    result = ExecutorFailure(f"killed after {timeout + KILL_GRACE_S:g} s without an answer" if late
                                             else f"worker process died (exit code {code})")
                    self._procs[i] = self._spawn()
                else:
                    worker["task"] = None
                busy -= 1
                progressed = True
                yield task, result
            if not progressed:
                time.sleep(0.02)

    def close(self):
        for worker in self._procs:
            try:
                worker["inbox"].put(None)
            except (OSError, ValueError):
                pass
        for worker in self._procs:
            worker["proc"].join(timeout=5)
            if worker["proc"].is_alive():
                worker["proc"].kill()
                worker["proc"].join()
        self._procs = []


class DaskExecutor(Executor):
    """Points as tasks of a Dask distributed cluster: ``tcp://HOST:8786`` (``dask scheduler`` and ``dask
    worker`` processes anywhere; workers need only the installed packages) or ``local:N`` (a LocalCluster of N
    single-threaded worker processes here). Workloads travel as bytes (scattered once) or as generator
    arguments, never as paths."""

    name = "dask"

    def __init__(self, address):
        from distributed import Client, LocalCluster

        self._cluster = None
        if str(address).startswith("local"):
            _, _, count = str(address).partition(":")
            try:
                n = int(count) if count else (os.cpu_count() or 1)
            except ValueError:
                raise ConfigError(f"--dask {address}: expected local:N (N workers) or tcp://HOST:PORT") from None
            self._cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
            self.client = Client(self._cluster)
        else:
            try:
                self.client = Client(address, timeout="20s")
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"--dask {address}: cannot reach the scheduler: {exc}") from None
        self.workers = max(1, sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values()))

    def share(self, payload):
        if payload is None:
            return None
        return self.client.scatter(payload, broadcast=False, hash=True)

    def run(self, fn, tasks, timeout=None):
        from distributed import as_completed

        futures = {}
        for task, payload in tasks:
            future = self.client.submit(fn, task, payload, pure=False)
            futures[future] = task
        for future in as_completed(futures):
            task = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # the worker died or the task was lost
                result = ExecutorFailure(f"Dask task failed: {type(exc).__name__}: {exc}")
            yield task, result

    def broadcast(self, fn, *args):
        self.client.run(fn, *args)
        fn(*args)  # the client's machine too (the base case was made here)

    def close(self):
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_executor(jobs=None, dask=None, executor=None):
    """The executor the command line asks for."""
    if executor:
        name, _, arg = executor.partition(":")
        builtin = {"local": lambda a: LocalPool(int(a) if a else jobs), "dask": lambda a: DaskExecutor(a)}
        if name in builtin:
            return builtin[name](arg)
        found = {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUP)}
        if name not in found:
            raise ConfigError(f"--executor {name!r}: unknown; built in: local, dask; installed: "
                              f"{', '.join(sorted(found)) or 'none'} (entry-point group {GROUP})")
        cls = found[name].load()
        return cls(arg) if arg else cls()
    if dask:
        return DaskExecutor(dask)
    return LocalPool(jobs)
