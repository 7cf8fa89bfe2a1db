"""Running one point, on whatever worker an executor picked: materialise its workload (generated once per
content hash in the machine's cache; an LLM workload once per process, held in its memory) and its machine (platform, GPU, network and system with the point's
overrides, in a private folder removed afterwards), simulate it, and return its row.

A point never raises: what went wrong is its row's ``status`` (``infeasible: ...`` when the configuration
cannot exist or does not fit, ``error: ...`` otherwise, ``error: timed out ...`` after ``timeout`` seconds).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import fcntl
import gc
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

from astra_sim.errors import AstraError, ConfigError, InfeasibleError

from .memory_columns import report_memory_columns

#: rows' result columns, after ``point`` and the axes
#: the energy plugin's numbers a row keeps (``stats.energy``; see docs/energy.md)
ENERGY_COLUMNS = ("gpu_energy_mj", "it_energy_mj", "facility_energy_mj", "mean_power_w_per_gpu", "peak_power_w_per_gpu",
                  "gpu_energy_per_token_mj", "it_energy_per_token_mj")
RESULT_COLUMNS = ("step_ns", "compute_ns", "exposed_comm_ns", "peak_mem_bytes", "status", "wall_s")


class PointTimeout(BaseException):
    """Raised inside a point's thread when it runs past ``--point-timeout``."""


@dataclass
class WorkloadRef:
    """What a worker needs to make a workload: a generator's options, or a trace's files as bytes."""

    kind: str                 # llm | micro | trace | serve | cluster
    options: dict             # the generator's (llm, micro) or astra serve's options, as the spec gives them
    digest: str               # content hash: the cache key
    files: dict | None = None  # trace: {file name: bytes}
    prefix_name: str = "w"    # trace: the prefix's base name


def workload_digest(kind, options, files=None):
    """The cache key of a workload: its kind and options (an LLM's model config file by its contents, so that
    editing it is a new workload), a trace's bytes, and the generator's version."""
    h = hashlib.sha256(json.dumps([kind, options], sort_keys=True, default=str).encode())
    model = options.get("model") if kind == "llm" and isinstance(options, dict) else None
    if isinstance(model, str) and model:
        from astra_workload_generators.llm.hf import resolve_model_path

        try:
            path = resolve_model_path(model)
        except AstraError:  # an unknown config: the generator says so when it runs
            path = None
        if path is not None and path.is_file():
            h.update(hashlib.sha256(path.read_bytes()).digest())
    if files:
        for name in sorted(files):
            h.update(name.encode())
            h.update(hashlib.sha256(files[name]).digest())
    try:
        from importlib.metadata import version

        h.update(version("astra-workload-generators").encode())
    except Exception:  # pragma: no cover - not installed as a distribution
        pass
    return h.hexdigest()[:20]


def cache_base():
    """Where sweeps keep their generated workloads: $ASTRA_SWEEP_CACHE, else the temp dir."""
    return os.environ.get("ASTRA_SWEEP_CACHE") or tempfile.gettempdir()


def cache_root(sweep_id):
    return os.path.join(cache_base(), sweep_id)


@contextlib.contextmanager
def sweep_cache(output):
    """This run's own workload cache (its id): named by this process, so a SIGKILLed sweep's is reclaimed by the
    next sweep, and removed here however the sweep ends (two sweeps never share one)."""
    from astra_sim.generated import owned, reclaim_leftovers

    reclaim_leftovers(cache_base(), "astra-sweep-")
    sweep_id = owned("astra-sweep-") + hashlib.sha256(os.path.abspath(str(output)).encode()).hexdigest()[:12]
    try:
        yield sweep_id
    finally:
        remove_cache(sweep_id)


def remove_cache(sweep_id):
    """Remove this sweep's generated workloads from this machine (executors call it on every worker), and forget
    the ones this process holds in memory (their nodes are freed when the next workload is held)."""
    root = cache_root(sweep_id)
    shutil.rmtree(root, ignore_errors=True)
    for prefix in [p for p in _HELD_WORKLOADS if p.startswith(root + os.sep)]:
        del _HELD_WORKLOADS[prefix]
    return True


#: whether a point's LLM workload is held in its process's memory (issue 37); False: written to the shared cache
#: and parsed back by every worker (the same rows, to the ns; for the tests)
HOLD_LLM_WORKLOADS = True
#: nodes of held LLM workloads one process keeps; beyond, the least recently used are dropped (as the parsed
#: traces of :data:`astra_workload_compact.plugin.PARSED_TRACES`, which the files' path keeps)
HELD_NODES = 1_000_000
_HELD_WORKLOADS = collections.OrderedDict()  # prefix -> nodes held, least recently used first


def materialise(ref: WorkloadRef, sweep_id):
    """The workload's prefix in this machine's cache, generated or written once (a file lock keeps concurrent
    workers from doing it twice); an LLM workload is generated in memory for this process (:func:`_held`)."""
    if ref.kind == "llm" and HOLD_LLM_WORKLOADS:
        return _held(ref, sweep_id)
    folder = os.path.join(cache_root(sweep_id), ref.digest)
    prefix = os.path.join(folder, ref.prefix_name)
    done = os.path.join(folder, ".complete")
    if os.path.exists(done):
        return prefix
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not os.path.exists(done):
                _make(ref, prefix)
                with open(done, "w"):
                    pass
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return prefix


def _held(ref, sweep_id):
    """An LLM workload generated in memory (issue 37): its class traces are held as the nodes a run reads, not
    encoded and parsed back. Only the process that holds them can run them, so each process generates it once
    in a folder of its own (a worker generates what it would otherwise have parsed from another's files, about
    the same CPU; the process that generated it no longer also encodes and parses it) and keeps it while it is
    among the :data:`HELD_NODES` most recently used nodes; a dropped one's folder is removed (its nodes are freed
    when the next workload is held)."""
    from astra_workload_compact import read_compact_workload, trace_nodes
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    folder = os.path.join(cache_root(sweep_id), ref.digest, f"held-{os.getpid()}")
    prefix = os.path.join(folder, ref.prefix_name)
    if prefix in _HELD_WORKLOADS:
        _HELD_WORKLOADS.move_to_end(prefix)
        return prefix
    shutil.rmtree(folder, ignore_errors=True)  # an earlier process's of the same id, or one stopped half-way
    os.makedirs(folder)
    # (the model config's warnings were shown once, when the sweep was planned)
    generate_llm_workload(LlmSpec.from_mapping(ref.options, "workload.llm"), prefix, on_warning=_quiet,
                          in_memory=True)
    nodes = {id(node) for path in read_compact_workload(prefix).traces.values() for node in trace_nodes(path)}
    _HELD_WORKLOADS[prefix] = len(nodes)
    while len(_HELD_WORKLOADS) > 1 and sum(_HELD_WORKLOADS.values()) > HELD_NODES:
        old, _ = _HELD_WORKLOADS.popitem(last=False)
        shutil.rmtree(os.path.dirname(old), ignore_errors=True)
    return prefix


def _make(ref, prefix):
    """Write the workload at ``prefix`` through the generators' public calls (what ``astra workload llm|micro``
    writes for the same options)."""
    if ref.kind == "trace":
        from astra_sim.safeio import write_bytes_atomic

        folder = os.path.dirname(prefix)
        for name, data in ref.files.items():
            write_bytes_atomic(os.path.join(folder, name), data)
    elif ref.kind == "llm":
        from astra_workload_generators.llm import LlmSpec, generate_llm_workload

        # (the model config's warnings were shown once, when the sweep was planned)
        generate_llm_workload(LlmSpec.from_mapping(ref.options, "workload.llm"), prefix, on_warning=_quiet)
    else:
        from astra_workload_generators.micro import generate_micro

        generate_micro(prefix, **ref.options)


def _quiet(_line):
    pass


def trace_npus(prefix):
    """The workload's ranks (the kernel's count; 0 when there is none)."""
    from astra_sim.spec import workload_ranks

    return workload_ranks(prefix) or 0


# ------------------------------------------------------------------------------------------------ machine
def _write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _set(data, key, value, where):
    """``key`` ``a`` or ``a.<index>`` (one entry of a per-dimension list) of a config mapping."""
    name, _, index = key.partition(".")
    if not index:
        data[name] = value
        return
    items = data.get(name)
    if not isinstance(items, list) or not index.isdigit() or int(index) >= len(items):
        raise ConfigError(f"{where}: {key}: {name} has no entry {index} ({items!r})")
    items[int(index)] = value


def set_dotted(data, dotted, value, where):
    """Set the dotted key ``a.b.c`` of a nested mapping to ``value``, making the mappings on the way (over a
    missing or null entry); a ConfigError naming ``where`` when a part on the way is something else."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"{where}: {part!r} is not a mapping")
        node = child
    node[parts[-1]] = value


def _gpu_yaml(base, overrides, folder):
    """A GPU YAML with ``overrides`` (dotted keys) on the preset or YAML ``base``; its path."""
    import yaml

    from astra_gpu_model.gpu import load_gpu

    spec = load_gpu(base)
    data = {"base": spec.name} if spec.path is None else dict(spec.raw)
    data["name"] = f"{spec.name}+" + hashlib.sha256(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:6]
    for key, value in overrides.items():
        set_dotted(data, key, value, f"gpu.{key}")
    return _write(folder, "gpu.yaml", yaml.safe_dump(data))


def _config_data(explicit, generated, kind, key):
    """The configuration a ``system.*`` / ``network.*`` axis changes, as a mapping: the run's own file
    (``explicit``, a path), else the platform's (a GeneratedFile or a path)."""
    from astra_sim.generated import GeneratedFile
    from astra_sim.safeio import load_json, load_yaml

    source = explicit if explicit is not None else generated
    if source is None:
        raise ConfigError(f"{kind}.{key}: no {kind} configuration to change (give run.platform or "
                          f"run.{kind}-configuration)")
    if isinstance(source, GeneratedFile):
        import yaml

        return json.loads(source.text) if kind == "system" else yaml.safe_load(source.text)
    if kind == "system":
        return load_json(source, "system configuration")
    return load_yaml(source, "network configuration")


def point_spec(point, prefix, npus, folder, pm=None):
    """The point as the :class:`astra_sim.spec.RunSpec` that ``astra run`` would build from the same options
    (``RunSpec.from_mapping`` of its ``run:``, the workload at ``prefix``), with the sweep's extensions applied
    through the kernel's own pieces: ``platform.*`` and ``gpu.*`` as the platform's ``variant`` (the changed
    GPU YAML, written in ``folder``, also as ``--gpu``), ``system.*`` / ``network.*`` as files in ``folder``
    made from the run's files or the platform's (explicit files win, as in ``astra run``; the platform still
    implies its options and compute model). The platform is fitted to the workload's ``npus`` ranks as ``astra run``
    fits it (:func:`astra_sim.platforms.fit_workload`: whole nodes, or one partial node; InfeasibleError when
    neither fits)."""
    import yaml

    from astra_sim.platforms import get_platform
    from astra_sim.spec import RunSpec

    run = dict(point.run)
    for name, value in list(run.items()):
        if isinstance(value, dict) and "text" in value:  # a configuration file that travelled with the point
            run[name] = _write(folder, f"user-{value['file']}", value["text"])
    platform = get_platform(run["platform"], pm) if run.get("platform") else None
    if point.gpu:
        from astra_gpu_model.gpu import DEFAULT_GPU

        run["gpu"] = _gpu_yaml(run.get("gpu") or getattr(platform, "gpu", None) or DEFAULT_GPU, point.gpu, folder)
    spec = RunSpec.from_mapping({**run, "workload": prefix}, pm, where="run")
    if platform is not None:
        changes = {key: point.platform[key] for key in ("gpus_per_node", "nic_gbps") if key in point.platform}
        if point.gpu:
            changes["gpu"] = run["gpu"]
        if changes:
            platform = platform.variant(**changes)
        from astra_sim.platforms import fit_workload

        try:  # whole nodes, or one partial node for a smaller job: as astra run fits a platform to a workload
            fitted, nodes = fit_workload(platform, spec.nodes, npus, spec.options)
        except ConfigError as exc:
            raise InfeasibleError(str(exc)) from None
        spec = spec.replace(platform=fitted if (changes or fitted is not platform) else spec.platform, nodes=nodes)
        platform = fitted
    if point.system or point.network:
        setup = None
        if platform is not None and (spec.system is None or spec.network is None):
            setup = platform.resolve(spec.nodes, {**spec.options, "compute_model": spec.compute_model})
        if point.system:
            system = _config_data(spec.system, setup and setup.system_configuration, "system",
                                  next(iter(point.system)))
            for key, value in point.system.items():
                _set(system, key, value, "system")
            spec = spec.replace(system=_write(folder, "system.json", json.dumps(system, indent=1)))
        if point.network:
            network = _config_data(spec.network, setup and setup.network_configuration, "network",
                                   next(iter(point.network)))
            for key, value in point.network.items():
                _set(network, key, value, "network")
            spec = spec.replace(network=_write(folder, "network.yml", yaml.safe_dump(network)))
    return spec


# ------------------------------------------------------------------------------------------------ running
_STATE = {}


def worker_state():
    """This process's plugin manager (every installed plugin, the kernel's shared one) and the parsers a spec's
    options are checked against (made once: a worker runs many points)."""
    if not _STATE:
        from astra_sim.plugins import default_plugin_manager

        from astra_sweep.commands import command_parsers

        _STATE.update(command_parsers(default_plugin_manager()))
    return _STATE


def _watchdog(timeout):
    """Raise :class:`PointTimeout` in the calling thread after ``timeout`` seconds (pure-Python simulation
    loops see it at their next bytecode); returns ``stop()``, which disarms it."""
    if not timeout:
        return lambda: None
    target = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False}

    def fire():
        with lock:
            if not state["done"]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), ctypes.py_object(PointTimeout))

    timer = threading.Timer(timeout, fire)
    timer.daemon = True
    timer.start()

    def stop():
        with lock:
            state["done"] = True
        timer.cancel()
    return stop


#: the cyclic garbage collector's first threshold while a point runs (Python's default: 700)
POINT_GC_THRESHOLD = 100_000


@contextlib.contextmanager
def few_collections():
    """Run a point with the cyclic garbage collector's first threshold raised (:data:`POINT_GC_THRESHOLD`), then
    collect once: a simulation allocates millions of long-lived objects (nodes, events), which the default
    thresholds scan again and again (about 1.2 s of a GPT-3 175B point's 10 s of simulation, issue 37); the cycles a
    point leaves are freed by the one collection after it (0.2-0.4 s). The results do not depend on it."""
    old = gc.get_threshold()
    gc.set_threshold(POINT_GC_THRESHOLD, max(old[1], 50), max(old[2], 100))
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.collect()


def run_point(task, ref=None):
    """``task``: {"point": Point, "sweep": id, "timeout": s}; ``ref``: its :class:`WorkloadRef`. The row."""
    point = task["point"]
    started = time.perf_counter()
    row = {"point": point.id, **point.values}
    row.update({k: None for k in RESULT_COLUMNS})
    stop = _watchdog(task.get("timeout"))
    try:
        try:
            with few_collections():
                _simulate(point, ref, task["sweep"], row)
            row["status"] = "ok"
        finally:
            stop()
    except PointTimeout:
        row["status"] = f"error: timed out after {task.get('timeout'):g} s (--point-timeout)"
    except InfeasibleError as exc:
        row["status"] = f"infeasible: {exc}"
    except AstraError as exc:
        row["status"] = f"error: {exc}"
    except Exception as exc:  # a bug must not stop the sweep; the row says what happened
        row["status"] = f"error: {type(exc).__name__}: {exc}"
    row["wall_s"] = round(time.perf_counter() - started, 3)
    return row


def _simulate(point, ref, sweep_id, row):
    from astra_sim.generated import private_folder
    from astra_sim.runner import run_spec

    state = worker_state()
    if ref.kind == "serve":
        from astra_serving import serve

        report, _requests = serve(serve_spec(ref.options, state["pm"]))
        fill_serve_row(row, report)
        return
    if ref.kind == "cluster":
        from astra_cluster import run_cluster

        from .cluster_points import cluster_spec, fill_cluster_row

        fill_cluster_row(row, run_cluster(cluster_spec(ref.options), state["pm"]))
        return
    prefix = materialise(ref, sweep_id)
    row["peak_mem_bytes"] = _estimate(prefix)
    with private_folder("astra-point-") as folder:  # a killed worker's is reclaimed by the next point
        spec = point_spec(point, prefix, trace_npus(prefix), folder, state["pm"])
        report = run_spec(spec, state["pm"])
    fill_row(row, report.to_dict())


def serve_spec(options, pm=None):
    """A serving point's :class:`astra_serving.ServeSpec` (``astra serve``'s options, its own checks), its
    platform checked against the registry; a ConfigError naming ``workload.serve`` and the key."""
    from astra_serving import ServeSpec
    from astra_sim.platforms import get_platform

    spec = ServeSpec.from_mapping(options, where="workload.serve").check()
    get_platform(spec.platform, pm)
    return spec


#: serving rows: the report's latency distributions (integer ns) as <name>_<stat>_ns columns
SERVE_LATENCIES = (("ttft", "ttft_ns"), ("tpot", "tpot_ns"), ("e2e", "e2e_ns"), ("queueing", "queueing_delay_ns"))


#: serving rows: the report's 90 % intervals (``interval_90``) as low and high columns, ns kept integer
SERVE_INTERVALS = {
    "ttft_p50_ns": ("ttft_p50_interval_90_low_ns", "ttft_p50_interval_90_high_ns"),
    "tpot_p50_ns": ("tpot_p50_interval_90_low_ns", "tpot_p50_interval_90_high_ns"),
    "throughput_tokens_per_s": ("throughput_interval_90_low_tokens_per_s", "throughput_interval_90_high_tokens_per_s")}


def fill_serve_row(row, report):
    """A serving point's row: TTFT, TPOT, end-to-end and queueing p50/p90/p99 (integer ns, as the report keeps
    them), output and request throughput, the makespan (ns), the GPUs of the deployment, the 90 % intervals of the
    median TTFT and TPOT and of the throughput when the report has them and, with an SLO, goodput (requests/s
    meeting it)."""
    for name, key in SERVE_LATENCIES:
        dist = report.get(key) or {}
        for stat in ("p50", "p90", "p99"):
            row[f"{name}_{stat}_ns"] = dist.get(stat)
    for key in ("throughput_tokens_per_s", "throughput_requests_per_s", "requests", "output_tokens",
                "preemptions", "duration_ns"):
        row[key] = report.get(key)
    row["gpus"] = (report.get("deployment") or {}).get("gpus")
    for key, (low, high) in SERVE_INTERVALS.items():  # the report's interval_90 (astra-validation's residuals)
        found = (report.get("interval_90") or {}).get(key)
        if found is not None:
            row[low], row[high] = found
    goodput = report.get("goodput")
    if isinstance(goodput, dict):
        row["goodput_requests_per_s"] = goodput.get("requests_per_s")
        row["slo_fraction"] = goodput.get("fraction")


def _estimate(prefix):
    """The workload's largest per-rank memory estimate (its traces' GlobalMetadata), or None."""
    from astra_sim.chakra import ChakraError, read_metadata
    from astra_workload_compact import is_compact, read_compact_workload

    paths = (read_compact_workload(prefix).traces.values() if is_compact(prefix)
             else [f"{prefix}.{r}.et" for r in range(trace_npus(prefix))])
    peaks = []
    for path in paths:
        try:
            peak = read_metadata(path).get("memory_peak_bytes")
        except ChakraError:
            return None
        if isinstance(peak, int):
            peaks.append(peak)
    return max(peaks) if peaks else None


def fill_row(row, report):
    """The step (max finish), compute and exposed communication of the rank that sets it, and, when the report
    has a breakdown (astra run's default), the slowest rank's parts as ``part_<name>_ns`` columns
    (``part_compute_gemm_ns``, ``part_exposed_tp_ns``, ``part_recv_wait_pp_ns``, ...) with its communication
    busy and overlapped time; a training step on a platform, its empirical 90 % interval
    (``step_interval_90_low_ns``, ``step_interval_90_high_ns``)."""
    ranks = report["ranks"]
    critical = max(ranks, key=lambda r: (r["finish_ns"], -r["rank"]))
    row["step_ns"] = critical["finish_ns"]
    row["compute_ns"] = critical["compute_ns"]
    row["exposed_comm_ns"] = critical["exposed_comm_ns"]
    breakdown = report.get("breakdown")
    if isinstance(breakdown, dict):
        for name, value in sorted((breakdown.get("parts") or {}).items()):
            if isinstance(value, int) and not isinstance(value, bool):
                row["part_" + re.sub(r"[^A-Za-z0-9]+", "_", str(name)).strip("_") + "_ns"] = value
        for key in ("comm_busy_ns", "comm_overlapped_ns"):
            if isinstance(breakdown.get(key), int):
                row[key] = breakdown[key]
    throughput = report.get("stats", {}).get("throughput")
    if isinstance(throughput, dict):  # an LLM step's (astra workload llm's traces carry its FLOPs and tokens)
        for key in ("mfu", "hfu", "model_flop_per_s_per_gpu", "tokens_per_s", "tokens_per_s_per_gpu"):
            if isinstance(throughput.get(key), (int, float)):
                row[key] = throughput[key]
    interval = report.get("stats", {}).get("step_interval_90_ns")
    if isinstance(interval, list) and len(interval) == 2:  # the validation plugin's, for a training step on a platform
        row["step_interval_90_low_ns"], row["step_interval_90_high_ns"] = interval
    energy = report.get("stats", {}).get("energy")
    if isinstance(energy, dict):  # the energy plugin's joules (integer mJ) and watts
        for key in ENERGY_COLUMNS:
            if isinstance(energy.get(key), (int, float)) and not isinstance(energy.get(key), bool):
                row[key] = energy[key]
    row.update(report_memory_columns(report.get("settings", {}).get("memory")))  # peak, parts, capacity, margin
    gpu_model = report.get("settings", {}).get("gpu_model")
    if isinstance(gpu_model, dict) and isinstance(gpu_model.get("calibration_status"), str):
        # whether the GPU's GEMM times rest on its own measurements (fitted) or partly or wholly on another's
        row["gpu_calibration"] = gpu_model["calibration_status"]
