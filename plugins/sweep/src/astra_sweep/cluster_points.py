"""Cluster points (``workload: {cluster: {spec: FILE, <key>: value}}``): each point runs ``astra cluster`` on the
spec named, with dotted keys set (``checkpoint.interval_steps: 40``), so that a sweep searches the checkpoint
interval, the placement or the failure rate. The row holds the cluster's goodput and each job's against Young's and
Daly's optimum (issue 42)."""

from __future__ import annotations

import copy
import os

from astra_sim.errors import AstraError, ConfigError

#: row columns of a cluster point, from the first job's row of the report (a spec's main job comes first)
JOB_COLUMNS = ("goodput", "goodput_steps_per_h", "useful_steps", "failures", "interval_steps", "lost_ns",
               "checkpoint_ns", "restart_ns", "young_interval_ns", "daly_interval_ns", "daly_goodput",
               "completion_ns")


def parse_options(options, spec_path, where):
    """The point's options with ``spec`` read once (a mapping, and the folder its relative files are in): workers
    on other machines get the spec itself, not a path."""
    from astra_sim.safeio import load_yaml

    options = dict(options)
    name = options.get("spec")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.spec: the cluster spec file (YAML), relative to the sweep spec; got {name!r}")
    path = name if os.path.isabs(name) else os.path.join(os.path.dirname(os.path.abspath(spec_path)), name)
    try:
        data = load_yaml(path, "cluster spec")
    except AstraError as exc:
        raise ConfigError(f"{where}.spec: {exc}") from None
    options["spec"] = {"path": path, "data": data}
    return options


def cluster_spec(options, where="workload.cluster"):
    """The :class:`astra_cluster.spec.ClusterSpec` of a point: the spec file's mapping with the point's dotted keys
    set; a ConfigError naming ``where`` and the key for a key the spec does not have a place for."""
    try:
        from astra_cluster.spec import parse_cluster_spec
    except ImportError:
        raise ConfigError(f"{where}: cluster points need astra cluster (the astra-cluster plugin)") from None
    from .point import set_dotted

    spec = options.get("spec")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}.spec: the cluster spec file (YAML), relative to the sweep spec")
    data = copy.deepcopy(spec["data"])
    for key, value in options.items():
        if key != "spec":
            set_dotted(data, str(key), value, f"{where}.{key} (in the cluster spec)")
    return parse_cluster_spec(data, spec["path"])


def fill_cluster_row(row, report):
    """A cluster point's row: the cluster's goodput and mean completion, and its first job's figures (from the
    report's ``timeline``)."""
    report = report.get("timeline", report)
    row["cluster_goodput"] = report.get("cluster_goodput")
    row["mean_completion_ns"] = report.get("mean_completion_ns")
    row["end_ns"] = report.get("end_ns")
    jobs = report.get("jobs") or []
    if jobs:
        row["job"] = jobs[0].get("job")
        for key in JOB_COLUMNS:
            row[key] = jobs[0].get(key)
