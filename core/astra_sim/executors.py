"""Where independent simulations run (sweep points, search candidates, validation cases): executors, one registered
role with a small interface, so another scheduler (Ray, Slurm) is one class. ``share(payload)``: the handle tasks get
(Dask scatters a workload once); ``run(fn, tasks, timeout)`` yields ``(task, result)`` as each finishes (``fn`` never
raises for a task's own failure; a lost task yields an :class:`ExecutorFailure`); ``broadcast(fn, *args)`` runs on
every worker machine; ``close()``. ``local`` (``--jobs N``) is built in, ``dask`` is plugins/executor_dask's.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_module
import signal
import threading
import time
from dataclasses import dataclass, field

from astra_sim.errors import ConfigError, PluginError

#: how much longer than the task timeout a local worker may stay silent before it is killed
KILL_GRACE_S = 10.0
#: the signals that stop a command running workers (Ctrl-C, kill, a closed terminal)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal while a command's workers run; the command exits ``128 + signal number`` (130, 143, 129)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum


class _StopState:
    raised = False
    deferred = False  # set by the block once its work is done: a first signal then waits in ``pending``
    pending = None


@contextlib.contextmanager
def stop_on_signals(signals=STOP_SIGNALS, once=True):
    """Inside the block ``signals`` raise :class:`Stopped` in the main thread, so every ``finally`` runs (no worker
    outlives the command); with ``once`` a second signal meanwhile is ignored. Once the block sets the yielded state's
    ``deferred``, a first signal waits in ``pending`` instead (``astra run`` finishes writing its report)."""
    state = _StopState()
    if threading.current_thread() is not threading.main_thread():
        yield state  # signal handlers belong to the main thread; leave them alone
        return

    def handler(signum, _frame):
        if state.deferred and state.pending is None:
            state.pending = Stopped(signum)
        elif not (once and state.raised):
            state.raised = True
            raise Stopped(signum)

    previous = {}
    try:
        for signum in signals:
            previous[signum] = signal.signal(signum, handler)
        yield state
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


class ExecutorFailure:
    """What an executor yields for a task it lost (the task itself never ran to its own result)."""

    def __init__(self, message):
        self.message = message

    def __repr__(self):
        return f"ExecutorFailure({self.message!r})"


class Executor:
    """The interface (see the module docstring); subclasses implement ``run``."""

    name = "executor"
    workers = 1

    def __enter__(self):
        """``with make_executor(...) as ex:``: a stop signal raises :class:`Stopped`; the workers stop at exit."""
        self._signals = stop_on_signals()
        self._signals.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            self._signals.__exit__(None, None, None)

    def share(self, payload):
        return payload

    def run(self, fn, tasks, timeout=None):  # pragma: no cover - interface
        raise NotImplementedError

    def broadcast(self, fn, *args):
        fn(*args)

    def close(self):
        pass


def _worker_main(inbox, outbox):
    """A local pool process: run tasks until told to stop (None). It ignores Ctrl-C, which reaches the whole process
    group: the parent stops it (no traceback from each worker)."""
    import importlib

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            item = inbox.get()
        except (EOFError, OSError):  # the parent is gone (killed): nothing more will come
            return
        if item is None:
            return
        index, fn_path, task, payload = item
        module, _, name = fn_path.rpartition(".")
        fn = getattr(importlib.import_module(module), name)
        outbox.put((index, fn(task, payload)))


class LocalPool(Executor):
    """``jobs`` worker processes, kept between tasks (a worker parses a shared workload once). One that dies, or stays
    silent ``KILL_GRACE_S`` past the timeout, is replaced and its task yielded as an :class:`ExecutorFailure`."""

    name = "local"

    def __init__(self, jobs=None):
        import multiprocessing  # (here: only --jobs runs need it, about 1.5 % of a small run's start-up)
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
        """Stop idle workers; kill busy ones at once (their results will never be read)."""
        for worker in self._procs:
            if worker["task"] is None:
                with contextlib.suppress(OSError, ValueError):
                    worker["inbox"].put(None)
        for worker in self._procs:
            proc = worker["proc"]
            if worker["task"] is None:
                proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            for q in (worker["inbox"], worker["outbox"]):
                q.cancel_join_thread()  # what a killed worker never read must not hold up the exit
                q.close()
        self._procs = []


# ------------------------------------------------------------------------------------------------ registry
@dataclass
class ExecutorRegistry:
    """Executors by name: the kernel's and every plugin's ``astra_register_executors``."""

    entries: dict = field(default_factory=dict)
    current_plugin: str = "?"

    def executor(self, name, factory, description=""):
        """``factory(arg)`` -> an :class:`Executor`; ``arg`` is what follows ``NAME:`` in ``--executor``."""
        if not isinstance(name, str) or not name or ":" in name:
            raise PluginError(f"plugin {self.current_plugin!r} registered an executor named {name!r} "
                              "(expected a non-empty name without ':')")
        if not callable(factory):
            raise PluginError(f"plugin {self.current_plugin!r} registered executor {name!r} with {factory!r}; "
                              "expected a callable factory(arg)")
        from astra_sim.plugins import Registration, register

        register(self.entries, Registration("executor", name, factory, self.current_plugin, description))

    def names(self):
        return sorted(self.entries)


def _local(arg):
    if arg is None or arg == "":
        return LocalPool()
    try:
        jobs = int(arg)
    except (TypeError, ValueError):
        jobs = 0
    if jobs < 1:
        raise ConfigError(f"--executor local:{arg}: expected local:N with N >= 1 worker processes")
    return LocalPool(jobs)


def register_builtin_executors(registry):
    """The kernel's own executors (called directly by :func:`executor_registry`, before the plugins')."""
    registry.executor("local", _local, "worker processes on this machine (local[:N], --jobs N)")


def executor_registry(pm=None) -> ExecutorRegistry:
    """Every executor of ``pm`` (default: every installed plugin), built once per plugin manager."""
    from astra_sim.plugins import BUILTIN, call_registration_hook, registry_once

    def make(pm):
        registry = ExecutorRegistry()
        registry.current_plugin = BUILTIN
        register_builtin_executors(registry)
        return call_registration_hook(pm, "astra_register_executors", registry)

    return registry_once(pm, "_astra_executors", make)


def executors(pm=None) -> dict:
    """``{name: description}`` of every registered executor."""
    return {name: reg.description for name, reg in sorted(executor_registry(pm).entries.items())}


def make_executor(jobs=None, dask=None, executor=None, pm=None) -> Executor:
    """The executor of ``--executor NAME[:ARG]``, else ``--dask ADDRESS``, else a pool of ``--jobs`` (one per core)."""
    if executor and dask:
        raise ConfigError("give --dask or --executor, not both")
    if not executor and not dask:
        return LocalPool(jobs)
    name, colon, arg = str(executor).partition(":") if executor else ("dask", ":", str(dask))
    registry = executor_registry(pm)
    if name == "dask" and name not in registry.entries:
        flag = f"--executor {executor}" if executor else f"--dask {dask}"
        raise ConfigError(f"{flag}: the dask executor is the astra-executor-dask plugin's, which is not loaded "
                          "(pip install -e plugins/executor_dask; -p no:executor_dask blocks it)")
    if name not in registry.entries:
        from astra_sim.cliutil import did_you_mean

        hint = did_you_mean(name, registry.names())
        raise ConfigError(f"--executor {name!r}: unknown{hint}; registered: {', '.join(registry.names())} "
                          "(plugins add executors with the hook astra_register_executors)")
    if name == "local" and not colon and jobs:
        arg, colon = str(jobs), ":"
    made = registry.entries[name].factory(arg if colon else None)
    if not all(callable(getattr(made, method, None)) for method in ("run", "share", "broadcast", "close")):
        raise PluginError(f"executor {name!r} (plugin {registry.entries[name].plugin!r}) made {made!r}; "
                          "expected an astra_sim.executors.Executor (run, share, broadcast, close)")
    return made
