"""Cluster points: `astra sweep` searches a cluster spec's checkpoint interval against Young's and Daly's optimum
(issue 42). Each row is exactly what `astra cluster` gives for the spec with the point's keys set."""

from __future__ import annotations

import csv

import pytest

from astra_sim.errors import ConfigError
from astra_sim.executors import Executor
from astra_sweep.sweep import run_sweep

pytest.importorskip("astra_cluster")

RING = "topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
SYSTEM = ('{"all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"], '
          '"reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["direct"], '
          '"preferred-dataset-splits": 4, "local-mem-bw": 1600}')
#: one 8-GPU job of 100 us steps on a node with a 10 s MTBF; a checkpoint takes 0.5 s to write and to read back
CLUSTER = """system: sys.json
network: net.yml
gpus_per_node: 8
corun: false
horizon_h: 2
seed: 3
checkpoint: {interval_steps: young-daly, write_gb_per_s: 10, read_gb_per_s: 10, restart_s: 1}
failures: {node_mtbf_h: 0.0027777777777777779}
jobs:
  - {name: a, gpus: 8, steps: 1000000000000, workload: {micro: {compute: 100}}, checkpoint_bytes: 5e9}
"""


class InProcess(Executor):
    name = "in-process"

    def run(self, fn, tasks, timeout=None):
        for task, payload in tasks:
            yield task, fn(task, payload)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "net.yml").write_text(RING)
    (tmp_path / "sys.json").write_text(SYSTEM)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    return tmp_path


def _sweep(folder, body):
    spec = folder / "sweep.yaml"
    spec.write_text(body)
    out = folder / "r.csv"
    run_sweep(str(spec), str(out), progress=False, executor_object=InProcess())
    with open(out, newline="", encoding="utf-8") as handle:
        return {row["point"]: row for row in csv.DictReader(handle)}


def test_a_sweep_over_the_checkpoint_interval_finds_young_s(folder):
    from astra_cluster import run_cluster, young_interval_ns

    # Young's interval: sqrt(2 x 0.5 s x 10 s) = 3.16 s, 31,623 steps of 100 us; a decade each side of it
    rows = _sweep(folder, "workload:\n  cluster: {spec: cluster.yaml}\naxes:\n  grid:\n"
                          "    workload.cluster.checkpoint.interval_steps: [3162, 31623, 316228]\n")
    assert len(rows) == 3 and all(row["status"] == "ok" for row in rows.values())
    by_interval = {int(row["workload.cluster.checkpoint.interval_steps"]): row for row in rows.values()}
    assert round(young_interval_ns(0.5e9, 10e9) / 100_000) == 31623
    assert max(by_interval, key=lambda k: float(by_interval[k]["goodput"])) == 31623
    row = by_interval[31623]
    assert int(row["young_interval_ns"]) == int(young_interval_ns(0.5e9, 10e9))
    # the row is astra cluster's answer for the spec with that key set, to the last digit
    (folder / "direct.yaml").write_text(CLUSTER.replace("young-daly", "31623"))
    direct = run_cluster(str(folder / "direct.yaml"))
    job = direct["timeline"]["jobs"][0]
    assert float(row["goodput"]) == pytest.approx(job["goodput"], rel=1e-12)
    assert int(row["failures"]) == job["failures"] and float(row["daly_goodput"]) == pytest.approx(job["daly_goodput"])


def test_cluster_points_are_checked_before_any_runs(folder):
    with pytest.raises(ConfigError, match="workload.cluster.spec"):
        _sweep(folder, "workload:\n  cluster: {spec: missing.yaml}\n")
    with pytest.raises(ConfigError, match="run: a cluster spec"):
        _sweep(folder, "workload:\n  cluster: {spec: cluster.yaml}\nrun: {platform: hgx-h100}\n")
    with pytest.raises(ConfigError, match="interval_steps"):
        _sweep(folder, "workload:\n  cluster: {spec: cluster.yaml}\naxes:\n  grid:\n"
                       "    workload.cluster.checkpoint.interval_steps: [0, 10]\n")
