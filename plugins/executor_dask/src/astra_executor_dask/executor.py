"""Tasks of a Dask distributed cluster (:class:`DaskExecutor`): the kernel's executor interface
(:class:`astra_sim.executors.Executor`) over ``distributed``'s client. A task the cluster loses (its worker died, or
the connection to it did) is submitted again, at most :data:`DASK_RETRIES` times, with the workload it needs shared
afresh (the copy a dead worker held died with it)."""

from __future__ import annotations

import os

from astra_sim.errors import ConfigError
from astra_sim.executors import Executor, ExecutorFailure

#: how many more times a task a Dask worker lost (it died, or its connection did) is submitted again
DASK_RETRIES = 2


def _distributed():
    """The ``distributed`` package, imported only when a Dask executor is made."""
    try:
        import distributed
    except ImportError:
        raise ConfigError("a Dask executor needs dask[distributed] (pip install 'dask[distributed]')") from None
    return distributed


#: how long a client waits to reach a --dask scheduler before the run stops with a clear error
CONNECT_TIMEOUT_S = 20

class DaskExecutor(Executor):
    """Tasks of a Dask distributed cluster: ``tcp://HOST:8786`` (``dask scheduler`` and ``dask worker``
    processes anywhere; workers need only the installed packages) or ``local:N`` (a LocalCluster of N
    single-threaded worker processes here). Workloads travel as bytes (scattered once) or as generator
    arguments, never as paths."""

    name = "dask"

    def __init__(self, address):
        distributed = _distributed()
        self._cluster = None
        self._shared = {}  # scattered key -> the payload (to scatter again when the worker holding it dies)
        self._renewed = {}  # lost key -> its payload scattered again
        if str(address).startswith("local"):
            _, _, count = str(address).partition(":")
            try:
                n = int(count) if count else (os.cpu_count() or 1)
            except ValueError:
                raise ConfigError(f"--dask {address}: expected local:N (N workers) or tcp://HOST:PORT") from None
            self._cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                     dashboard_address=None)
            self.client = distributed.Client(self._cluster)
        else:
            try:
                self.client = distributed.Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"--dask {address}: cannot reach the scheduler: {exc}") from None
        self.workers = max(1, sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values()))

    def share(self, payload):
        if payload is None:
            return None
        future = self.client.scatter(payload, broadcast=False, hash=True)
        self._shared[future.key] = payload
        return future

    def _share_again(self, handle):
        """A shared payload scattered anew (once per lost one): the copy a dead worker held died with it."""
        key = getattr(handle, "key", None)
        if key not in self._shared:
            return handle
        if key not in self._renewed:
            again = self.client.scatter(self._shared[key], broadcast=False, hash=False)
            self._shared[again.key] = self._shared[key]
            self._renewed[key] = again
        return self._renewed[key]

    def run(self, fn, tasks, timeout=None):
        """A task whose worker was lost is submitted again, at most :data:`DASK_RETRIES` times (``fn`` never raises
        for the task's own failure, so an exception here is the cluster's)."""
        distributed = _distributed()
        futures = {}
        for task, payload in tasks:
            futures[self.client.submit(fn, task, payload, pure=False)] = (task, payload, 0)
        pending = distributed.as_completed(list(futures))
        for future in pending:
            task, payload, retried = futures.pop(future)
            try:
                result = future.result()
            except Exception as exc:  # the worker died or the task was lost
                if retried < DASK_RETRIES:
                    payload = self._share_again(payload)
                    again = self.client.submit(fn, task, payload, pure=False)
                    futures[again] = (task, payload, retried + 1)
                    pending.add(again)
                    continue
                result = ExecutorFailure(f"Dask task failed {retried + 1} times: {type(exc).__name__}: {exc}")
            yield task, result

    def broadcast(self, fn, *args):
        self.client.run(fn, *args)
        fn(*args)  # the client's machine too (the base case was made here)

    def close(self):
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


__all__ = ["DaskExecutor", "DASK_RETRIES"]
