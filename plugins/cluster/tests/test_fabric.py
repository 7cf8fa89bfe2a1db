"""Jobs on a platform contend where they share links: with ``fabric:`` the scale-out network is leaves under a
spine, and two identical jobs whose traffic crosses the same uplinks slow each other by the flow model's factor;
placed apart (each inside its own leaves) they do not."""

import pytest

from astra_sim.errors import ConfigError

from astra_cluster import run_cluster
from astra_cluster.spec import load_cluster_spec

#: 4 HGX H100 nodes, 2 per leaf: leaf 0 holds nodes 0 and 1, leaf 1 nodes 2 and 3. Collectives as messages (the
#: kernel's ring, not the NCCL model's formulas), each split over its equal-cost paths (deterministic).
SPEC = """
platform: hgx-h100
nodes: 4
network_backend: {backend}
run: {{host_launch_us: 0, platform_collective: ring, flow_ecmp: split}}
placement: fixed
fabric: {{nodes_per_leaf: 2, oversubscription: {ratio}}}
jobs:
  - {{name: a, gpus: 16, place: {a}, workload: {{micro: {{collective: all_reduce, size: 64MiB}}}}}}
  - {{name: b, gpus: 16, place: {b}, workload: {{micro: {{collective: all_reduce, size: 64MiB}}}}}}
"""
NODES = lambda *nodes: [gpu for node in nodes for gpu in range(8 * node, 8 * node + 8)]  # noqa: E731
CROSS = (NODES(0, 2), NODES(1, 3))  # both jobs span the two leaves: every rail's uplinks carry both
APART = (NODES(0, 1), NODES(2, 3))  # each job inside one leaf: no uplink


@pytest.fixture
def corun_of(tmp_path, write_spec):
    def corun(backend, placement, ratio=2, alone_only=False):
        a, b = placement
        text = SPEC.format(backend=backend, ratio=ratio, a=a, b=b)
        if alone_only:
            text = text.split("  - {name: b")[0]
        return run_cluster(write_spec(tmp_path, text))["corun"]

    return corun


def test_flow_two_jobs_on_shared_uplinks_run_as_on_half_the_uplink(corun_of):
    """At 2:1 an uplink holds one job's rail traffic at full rate; two jobs' share it max-min: each job runs exactly
    as it runs alone at 4:1 (half the uplink), to the ns."""
    out = corun_of("flow", CROSS)
    a, b = out["jobs"]
    assert a["together_step_ns"] == b["together_step_ns"] and a["alone_step_ns"] == b["alone_step_ns"]
    predicted = corun_of("flow", CROSS, ratio=4, alone_only=True)["jobs"][0]["alone_step_ns"]
    assert a["together_step_ns"] == predicted
    assert 1.9 < a["slowdown"] < 2.0
    assert out["shared_links"] and all("spine" in link["src"] + link["dst"] for link in out["shared_links"])
    apart = corun_of("flow", APART)
    assert [job["slowdown"] for job in apart["jobs"]] == [1.0, 1.0] and not apart["shared_links"]
    assert apart["jobs"][0]["alone_step_ns"] == a["alone_step_ns"]  # alone, a job does not fill its uplink at 2:1


def test_congestion_within_five_percent_of_the_flow_factor(corun_of):
    flow = corun_of("flow", CROSS)["jobs"][0]["slowdown"]
    out = corun_of("congestion", CROSS)
    assert all(abs(job["slowdown"] / flow - 1) < 0.05 for job in out["jobs"])
    assert out["shared_links"]
    assert [job["slowdown"] for job in corun_of("congestion", APART)["jobs"]] == [1.0, 1.0]


@pytest.mark.parametrize("fabric, backend, expected", [
    ("{nodes_per_leaf: 0}", "flow", "key 'fabric.nodes_per_leaf' must be an integer >= 1"),
    ("{nodes_per_leaf: 2, oversubscription: 0.5}", "flow", "key 'fabric.oversubscription' must be a finite number"),
    ("{leaves: 2}", "flow", "unknown key 'fabric.leaves'"),
    ("[2, 2]", "flow", "key 'fabric' must be a mapping"),
    ("{nodes_per_leaf: 2}", "analytical", "key 'fabric': leaves and a spine are built by the flow and congestion"),
])
def test_bad_fabric(tmp_path, write_spec, fabric, backend, expected):
    text = SPEC.format(backend=backend, ratio=2, a=CROSS[0], b=CROSS[1]).replace(
        "fabric: {nodes_per_leaf: 2, oversubscription: 2}", f"fabric: {fabric}")
    with pytest.raises(ConfigError, match=expected):
        load_cluster_spec(write_spec(tmp_path, text))


def test_the_nccl_collective_model_is_named_in_a_warning(tmp_path, write_spec):
    text = SPEC.format(backend="flow", ratio=2, a=CROSS[0], b=CROSS[1]).replace(", platform_collective: ring", "")
    report = run_cluster(write_spec(tmp_path, text.split("  - {name: b")[0]))
    assert any("NCCL model" in message for message in report["warnings"])
