"""``run_cluster(spec)``: the whole question a cluster spec asks, as one JSON-ready dict (times in ns).

* ``placement``: where each job goes when all are placed at once (in arrival order; those that do not fit wait);
* ``corun`` (unless ``corun: false``): those jobs simulated together against each alone, and the shared links;
* ``stragglers`` (with ``stragglers:``): each placed job's step-time distribution over seeded draws;
* ``timeline`` (with ``horizon_h``): the cluster over time, with failures, checkpoints and the scheduler;
* ``distinct_steps_simulated``: how many distinct (job, placement, condition) steps were simulated for the
  stragglers and the timeline (the co-run's simulations are counted in ``corun_simulations``)."""

from __future__ import annotations

import os
import random
import tempfile
import time

from astra_sim.errors import ConfigError

from .corun import corun
from .machine import Machine
from .placement import nodes_used, place
from .spec import CHECKPOINT_BYTES_PER_PARAMETER, load_cluster_spec
from .steps import StepTimes
from .stragglers import straggler_study
from .timeline import Timeline
from .workloads import materialize, workload_key


def run_cluster(spec, pm=None, work_dir=None) -> dict:
    """Answer the cluster spec ``spec`` (a :class:`~astra_cluster.spec.ClusterSpec` or a path); ``work_dir``
    keeps the generated traces (default: a temporary folder, removed)."""
    if not hasattr(spec, "jobs"):
        spec = load_cluster_spec(spec)
    if work_dir is not None:
        os.makedirs(work_dir, exist_ok=True)
        return _run(spec, pm, str(work_dir), hold=False)  # (the jobs' traces written: kept as files)
    with tempfile.TemporaryDirectory(prefix="astra-cluster-") as folder:
        return _run(spec, pm, folder)


def _run(spec, pm, folder, hold=None):
    started = time.perf_counter()
    machine = Machine(spec, pm)
    _check_fits(spec, machine)
    machine.check_failed_links(folder)
    # one seeded stream per question: the same seed gives the same failures whatever the placement policy draws
    placement_rng, straggler_rng = random.Random(f"placement-{spec.seed}"), random.Random(f"stragglers-{spec.seed}")
    workloads, by_key = {}, {}
    for job in spec.jobs:  # jobs with the same workload share its traces (and its simulated steps)
        key = workload_key(job)
        if key not in by_key:
            by_key[key] = materialize(job, folder, spec.base_dir, spec.platform, spec.run, hold)
        workloads[job.name] = by_key[key]
    steps = StepTimes(machine, workloads, folder)
    out = {"units": {"time": "ns", "size": "bytes"}, "spec": spec.path, "cluster": {
        "platform": spec.platform, "nodes": machine.nodes, "gpus_per_node": machine.gpus_per_node,
        "gpus": machine.total_gpus, "network_backend": spec.network_backend, "placement": spec.placement,
        "scheduler": spec.scheduler, "seed": spec.seed, "failed_links": spec.failed_links}}
    free = set(range(machine.total_gpus))
    placed, rows = [], []
    for job in sorted(spec.jobs, key=lambda j: j.arrival_ns):
        gpus = place(spec.placement, job, free, machine.gpus_per_node, placement_rng)
        rows.append({"job": job.name, "gpus": job.gpus, "placed": gpus is not None,
                     "nodes": None if gpus is None else nodes_used(gpus, machine.gpus_per_node), "placement": gpus})
        if gpus is not None:
            free.difference_update(gpus)
            placed.append((job, workloads[job.name], gpus))
    out["placement"] = rows
    if spec.corun and placed:
        out["corun"] = corun(machine, placed, folder)
        out["corun_simulations"] = len(placed) + (len(placed) > 1)
    if spec.stragglers is not None:
        out["stragglers"] = [straggler_study(steps, job, gpus, spec.stragglers, straggler_rng)
                             for job, _w, gpus in placed]
    if spec.horizon_ns is not None:
        ckpt = {job.name: _checkpoint_bytes(job, workloads[job.name]) for job in spec.jobs}
        out["timeline"] = Timeline(spec, machine, steps, ckpt).run()
    out["distinct_steps_simulated"] = steps.simulated
    out["warnings"] = machine.warnings[:50]
    out["wall_s"] = round(time.perf_counter() - started, 3)
    return out


def _check_fits(spec, machine):
    total = machine.total_gpus
    for job in spec.jobs:
        if job.gpus > total:
            raise ConfigError(f"{spec.path}: job {job.name!r} needs {job.gpus} GPUs; the cluster has {total}")
        if job.place is not None and max(job.place) >= total:
            raise ConfigError(f"{spec.path}: job {job.name!r}: place names GPU {max(job.place)}; the cluster has "
                              f"GPUs 0..{total - 1}")
    if spec.stragglers is not None:
        for gpu in spec.stragglers.slow_gpus:
            if gpu >= total:
                raise ConfigError(f"{spec.path}: key 'stragglers.slow_gpus': GPU {gpu} is not in the cluster "
                                  f"(GPUs 0..{total - 1})")
    if spec.failures is not None:
        nodes_per_switch = spec.failures.nodes_per_switch
        limits = {"gpu": total, "link": total, "node": machine.nodes,
                  "switch": -(-machine.nodes // nodes_per_switch) if nodes_per_switch else 0}
        for _at, kind, index in spec.failures.events:
            limit = limits[kind]
            if index >= limit:
                raise ConfigError(f"{spec.path}: key 'failures.events': {kind} {index} is not in the cluster "
                                  f"({kind}s 0..{limit - 1})")


def _checkpoint_bytes(job, workload):
    if job.checkpoint_bytes is not None:
        return job.checkpoint_bytes
    summary = workload.summary or {}
    if job.workload_kind == "llm" and summary.get("parameters"):
        return int(summary["parameters"]) * CHECKPOINT_BYTES_PER_PARAMETER
    return 0
