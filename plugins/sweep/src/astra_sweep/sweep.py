"""``astra sweep SPEC.yaml -o RESULTS``: expand the spec, check its base case, run the points that have no row
yet on an executor, and append each row as it comes (see :mod:`.results`)."""

from __future__ import annotations

import glob
import os
import sys
import time

from astra_sim.cliutil import warning
from astra_sim.errors import AstraError, ConfigError
from astra_sim.executors import ExecutorFailure, Stopped, make_executor, stop_on_signals

from .derived import pricer
from .point import RESULT_COLUMNS, WorkloadRef, remove_cache, run_point, workload_digest
from .results import Results, column_type, locked, results_format
from .spec import load_spec, read_file_options


def _trace_files(prefix):
    names = sorted(glob.glob(glob.escape(prefix) + ".*"))
    names = [n for n in names if n.endswith((".et", ".json", ".et.gz"))]
    if not names:
        raise ConfigError(f"workload.trace {prefix!r}: no trace files ({prefix}.0.et ... or {prefix}.workload.json)")
    files = {}
    for name in names:
        with open(name, "rb") as handle:
            files[os.path.basename(name)] = handle.read()
    return files


class Plan:
    """The points of a spec with their workloads (made once per content hash)."""

    def __init__(self, spec, parsers):
        self.spec = spec
        self.refs = {}       # point id -> WorkloadRef
        self.early = {}      # point id -> status decided without running (the generator refuses the layout)
        self.npus = {}
        trace_cache = {}
        warned = set()
        for point in [spec.base] + spec.points:
            read_file_options(point)
            if point.workload_kind == "trace":
                prefix = point.workload["trace"]
                if prefix not in trace_cache:
                    files = _trace_files(prefix)
                    trace_cache[prefix] = WorkloadRef("trace", {}, workload_digest("trace", {}, files), files,
                                                      os.path.basename(prefix))
                self.refs[point.id] = trace_cache[prefix]
                continue
            options = dict(point.workload)
            if point.workload_kind == "llm" and "platform" not in options and point.run.get("platform"):
                # generated for the machine it runs on (its GPU's kernels: Transformer Engine's FP8 transposes),
                # as `astra validate` generates a case for its platform
                options["platform"] = point.run["platform"]
                from astra_workload_generators.llm.fp8 import run_gpu

                # and for the GPU the run computes on, where its --gpu (a name or path) replaces the platform's
                gpu = point.run.get("gpu")
                gpu = run_gpu(point.run["platform"], {"gpu": gpu}) if isinstance(gpu, str) else None
                if gpu is not None:
                    options["gpu"] = gpu
            if point.workload_kind == "serve":
                from .point import serve_spec

                try:
                    serve_spec(options)
                except AstraError as exc:
                    self.early[point.id] = f"error: {exc}"
            if point.workload_kind == "llm":
                from astra_workload_generators.llm import LlmSpec

                def once(line):
                    if line not in warned:
                        warned.add(line)
                        warning(line)

                try:
                    _, cfg = LlmSpec.from_mapping(options, "workload.llm").resolve(on_warning=once)
                    self.npus[point.id] = cfg.npus
                except AstraError as exc:
                    self.early[point.id] = f"infeasible: {exc}"
            self.refs[point.id] = WorkloadRef(point.workload_kind, options,
                                              workload_digest(point.workload_kind, options))


def check_base(plan, sweep_id, state):
    """Make the base case's workload and machine and resolve its run (configurations, options, backends)
    without simulating it: a spec whose base case fails runs no point."""
    from astra_sim.generated import private_folder
    from astra_sim.plugins import registry_of

    from .point import materialise, point_spec, trace_npus

    spec = plan.spec
    base = spec.base
    where = f"{spec.path}: the base case (the spec without its axes)"
    if base.id in plan.early:
        raise ConfigError(f"{where} fails: {plan.early[base.id].partition(': ')[2]}")
    if base.workload_kind in ("serve", "cluster"):  # checked when parsed; each point runs astra serve / cluster
        return
    pm = state["pm"]
    try:
        prefix = materialise(plan.refs[base.id], sweep_id)
        with private_folder("astra-base-") as folder:
            run = point_spec(base, prefix, trace_npus(prefix), folder, pm)
            resolved = run.resolve(pm)
            registry = registry_of(pm)
            registry.get("network_backend", run.network_backend)
            for role, name in (("memory_backend", run.memory_backend), ("compute_model", resolved.compute_model)):
                if name is not None:
                    registry.get(role, name)
    except AstraError as exc:
        raise ConfigError(f"{where} fails: {exc}") from None


def run_sweep(spec_path, output, *, jobs=None, dask=None, executor=None, point_timeout=None, retry_errors=False,
              progress=None, state=None, executor_object=None):
    """Run the sweep; returns a summary dict (counts, ``ran``, ``wall_s``, ``points_per_minute``). SIGINT, SIGTERM
    or SIGHUP stop the workers, keep the finished rows and raise :class:`~astra_sim.executors.Stopped`."""
    from .point import sweep_cache

    results_format(output)
    with stop_on_signals(), locked(output), sweep_cache(output) as sweep_id:
        return _run_sweep(spec_path, output, jobs, dask, executor, point_timeout, retry_errors, progress, state,
                          executor_object, sweep_id)


def _run_sweep(spec_path, output, jobs, dask, executor, point_timeout, retry_errors, progress, state,
               executor_object, sweep_id):
    from .point import worker_state

    if dask and executor:
        raise ConfigError("give --dask or --executor, not both")
    state = state or worker_state()
    spec = load_spec(spec_path, state["parsers"])
    plan = Plan(spec, state["parsers"])
    check_base(plan, sweep_id, state)
    types = {axis: column_type([p.values[axis] for p in spec.points]) for axis in spec.axes}
    columns = ["point", *spec.axes, *RESULT_COLUMNS]
    priced = pricer(spec, columns, types, warning)  # the cost columns, when the spec names a price table
    results = Results(output, columns, types)
    ids = [p.id for p in spec.points]
    earlier = results.load(set(ids))
    if retry_errors:
        earlier = {k: v for k, v in earlier.items() if not str(v.get("status", "")).startswith("error")}
        results.rows = dict(earlier)
    for row in earlier.values():  # today's prices, also for the rows of an earlier run
        priced(row)
    todo = [p for p in spec.points if p.id not in earlier]
    started = time.perf_counter()
    counts = {"ok": 0, "infeasible": 0, "error": 0}
    for row in earlier.values():
        counts[str(row.get("status", "error")).split(":")[0]] = counts.get(str(row.get("status")).split(":")[0], 0) + 1
    show = progress if progress is not None else sys.stderr.isatty()
    bar = _Progress(len(ids), len(earlier), show)
    ran = 0
    stopped = None
    try:
        for point in [p for p in todo if p.id in plan.early]:
            row = {"point": point.id, **point.values, **{k: None for k in RESULT_COLUMNS}}
            row.update(status=plan.early[point.id], wall_s=0.0)
            results.add(priced(row))
            counts["infeasible"] += 1
            ran += 1
            bar.advance(row)
        runnable = [p for p in todo if p.id not in plan.early]
        if runnable:
            own = executor_object is None
            ex = executor_object or make_executor(jobs, dask, executor, state["pm"])
            try:
                shared = {}
                tasks = []
                for point in runnable:
                    ref = plan.refs[point.id]
                    if ref.digest not in shared:
                        shared[ref.digest] = ex.share(ref)
                    tasks.append(({"point": point, "sweep": sweep_id, "timeout": point_timeout}, shared[ref.digest]))
                for task, result in ex.run(run_point, tasks, timeout=point_timeout):
                    if isinstance(result, ExecutorFailure):
                        point = task["point"]
                        result = {"point": point.id, **point.values, **{k: None for k in RESULT_COLUMNS},
                                  "status": f"error: {result.message}", "wall_s": None}
                    results.add(priced(result))
                    counts[result["status"].split(":")[0]] += 1
                    ran += 1
                    bar.advance(result)
                ex.broadcast(remove_cache, sweep_id)
            finally:
                if own:
                    ex.close()
        else:
            remove_cache(sweep_id)
    except Stopped as stop:
        stopped = stop
        raise
    finally:
        bar.close()
        results.finish(ids)
        if stopped is not None:  # what the command says it kept (astra sweep's, astra search's line)
            stopped.kept = (len(results.rows), len(ids))
    wall = time.perf_counter() - started
    return {"points": len(ids), "earlier": len(earlier), "ran": ran, "wall_s": wall,
            "points_per_minute": ran / wall * 60 if wall > 0 and ran else None, **counts, "output": str(output)}


class _Progress:
    """A rich progress bar on stderr: done / total, failures, elapsed and ETA."""

    def __init__(self, total, done, show):
        from astra_sim import progress

        self.failed = 0
        self.done = done
        self.bar = None
        self._held = None
        # Without the bar (no terminal: logs, nohup, notebooks), the command's progress line counts the points.
        progress.phase("running the points", lambda: f"{self.done:,} of {total:,} done, {self.failed:,} failed",
                       lead=True)
        if not show:
            return
        self._held = progress.hold()  # the bar replaces the command's status line
        self._held.__enter__()
        from rich.progress import (
            BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
        )

        self.bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("[red]{task.fields[failed]} failed"), TextColumn("elapsed"),
                            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), transient=False)
        self.bar.start()
        self.task = self.bar.add_task("sweep", total=total, completed=done, failed=0)

    def advance(self, row):
        self.done += 1
        if not str(row.get("status")).startswith("ok"):
            self.failed += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1, failed=self.failed)

    def close(self):
        if self.bar is not None:
            self.bar.stop()
        if self._held is not None:
            self._held.__exit__(None, None, None)
            self._held = None
