"""Jobs together on one fabric: sharing every link costs what the flow model predicts, apart costs nothing, and a
lone job is exactly ``astra run``."""

import json
from pathlib import Path

import astra_sim
import pytest
from astra_workload_generators import generate_micro

from astra_cluster import run_cluster
from astra_cluster.spec import parse_cluster_spec

TWO_JOBS = """
system: sys.json
network: {net}
gpus_per_node: 2
network_backend: {backend}
placement: fixed
jobs:
  - {{name: a, gpus: 4, place: {a}, workload: {{micro: {{collective: all_reduce, size: 64MiB}}}}}}
  - {{name: b, gpus: 4, place: {b}, workload: {{micro: {{collective: all_reduce, size: 64MiB}}}}}}
"""
INTERLEAVED = ([0, 2, 4, 6], [1, 3, 5, 7])  # every ring link carries one message of each job
APART = ([0, 1, 2, 3], [4, 5, 6, 7])        # each job on its own arc


@pytest.fixture
def corun_of(ring, write_spec):
    def corun(backend, placement, net="net.yml"):
        a, b = placement
        spec = write_spec(ring, TWO_JOBS.format(net=net, backend=backend, a=a, b=b))
        return run_cluster(spec)["corun"]

    return corun


@pytest.fixture
def alone_ns(ring, write_spec):
    def alone(net, backend, gpus):
        """Job a alone (one job, the other GPUs idle) on ``net``."""
        text = TWO_JOBS.format(net=net, backend=backend, a=gpus, b=[1]).split("  - {name: b")[0]
        return run_cluster(write_spec(ring, text, "alone.yaml"))["corun"]["jobs"][0]["alone_step_ns"]

    return alone


def test_sharing_every_link_on_flow_is_half_the_bandwidth(corun_of, alone_ns):
    out = corun_of("flow", INTERLEAVED)
    a, b = out["jobs"]
    assert a["together_step_ns"] == b["together_step_ns"]
    # the flow model's prediction: two equal flows on every link each get half of it, so each job runs as it
    # would alone on links of half the bandwidth
    predicted = alone_ns("net_half.yml", "flow", INTERLEAVED[0])
    assert a["together_step_ns"] == predicted
    assert 1.9 < a["slowdown"] < 2.0
    assert len(out["shared_links"]) == 8  # the clockwise ring: every link, by both jobs
    assert all(link["jobs"] == ["a", "b"] for link in out["shared_links"])


def test_sharing_every_link_on_congestion_matches_the_flow_factor(corun_of):
    flow = corun_of("flow", INTERLEAVED)["jobs"][0]["slowdown"]
    out = corun_of("congestion", INTERLEAVED)
    slowdown = out["jobs"][0]["slowdown"]
    assert slowdown > 1.5
    assert slowdown == pytest.approx(flow, rel=0.05)  # store-and-forward, chunked: close to the fluid share
    assert out["shared_links"]


@pytest.mark.parametrize("backend", ["flow", "congestion"])
def test_jobs_placed_apart_do_not_slow_each_other(corun_of, backend):
    out = corun_of(backend, APART)
    assert [row["slowdown"] for row in out["jobs"]] == [1.0, 1.0]
    assert out["shared_links"] == []


def test_analytical_has_no_contention(corun_of):
    out = corun_of("analytical", INTERLEAVED)
    assert [row["slowdown"] for row in out["jobs"]] == [1.0, 1.0]


ONE_LLM = """
platform: hgx-h100
nodes: 2
jobs:
  - name: llm
    gpus: 16
    workload: {llm: {preset: llama3-8b, layers: 2, tp: 8, dp: 2}}
"""


def test_one_job_is_astra_run_to_the_ns(tmp_path, write_spec, capsys):
    """``astra cluster`` and ``astra run`` through the command's main in this process (CI margin: the answers are
    main's; two ``astra`` processes spent about a second importing)."""
    from astra_sim.cli import main

    spec = write_spec(tmp_path, ONE_LLM)
    out = tmp_path / "cluster.json"
    assert main(["cluster", spec, "-o", str(out)]) == 0
    cluster = json.loads(out.read_text())["corun"]["jobs"][0]
    from astra_workload_generators import generate_llm_workload

    generate_llm_workload({"preset": "llama3-8b", "layers": 2, "tp": 8, "dp": 2}, str(tmp_path / "j"))
    run = tmp_path / "run.json"
    assert main(["run", "--platform", "hgx-h100", "--workload-configuration", str(tmp_path / "j"), "-o", str(run),
                 "-q"]) == 0
    expected = json.loads(run.read_text())["summary"]["max_finish_ns"]
    assert cluster["alone_step_ns"] == cluster["together_step_ns"] == expected


def test_one_job_on_files_is_simulate_to_the_ns(ring):
    generate_micro(ring / "ar", npus=8, collective="all_reduce", size="1MiB")
    spec = parse_cluster_spec({"system": "sys.json", "network": "net.yml", "network_backend": "congestion",
                               "jobs": [{"name": "a", "gpus": 8, "workload": {"chakra": "ar"}}]},
                              str(ring / "c.yaml"))
    cluster = run_cluster(spec)["corun"]["jobs"][0]["alone_step_ns"]
    report = astra_sim.simulate(workload=str(ring / "ar"), system=str(ring / "sys.json"),
                                network=str(ring / "net.yml"), network_backend="congestion")
    assert cluster == report.max_finish_ns


NS3_DATA = Path(__file__).resolve().parents[2] / "network_ns3" / "tests" / "data"


@pytest.mark.slow
def test_jobs_on_ns3(ring, write_spec):
    """ns-3's star of 8 hosts: each host has its own link, so jobs on disjoint hosts share none."""
    pytest.importorskip("ns3")
    if not NS3_DATA.is_dir():
        pytest.skip("plugins/network_ns3's test data is not in this checkout")
    spec = write_spec(ring, f"""
system: sys.json
network: {NS3_DATA}/scratch/config/network_cfg.txt
gpus: 8
network_backend: ns3
run: {{logical_topology_configuration: {NS3_DATA}/logical_topology.json}}
placement: fixed
jobs:
  - {{name: a, gpus: 4, place: [0, 2, 4, 6], workload: {{micro: {{collective: all_reduce, size: 1MiB}}}}}}
  - {{name: b, gpus: 4, place: [1, 3, 5, 7], workload: {{micro: {{collective: all_reduce, size: 1MiB}}}}}}
""")
    out = run_cluster(spec)["corun"]
    assert [row["slowdown"] for row in out["jobs"]] == [1.0, 1.0] and out["shared_links"] == []
    assert all(row["alone_step_ns"] > 0 for row in out["jobs"])


def test_folding_still_applies_inside_the_combined_workload(tmp_path):
    """Two identical 16-GPU jobs on 4 HGX nodes: the kernel folds the combined workload to one rank."""
    from astra_workload_generators import generate_llm_workload

    from astra_cluster.workloads import JobWorkload, write_combined

    summary = generate_llm_workload({"preset": "llama3-8b", "layers": 1, "tp": 8, "dp": 2}, str(tmp_path / "j"))
    job = JobWorkload(str(tmp_path / "j"), 16, str(tmp_path / "j.groups.json"), summary)
    out = write_combined(str(tmp_path / "c" / "t"), 32, [(job, list(range(16))), (job, list(range(16, 32)))])
    report = astra_sim.simulate(workload=str(tmp_path / "c" / "t"), platform="hgx-h100", nodes=4,
                                comm_groups=out["comm_groups"])
    assert report.settings["fold"]["simulated_ranks"] == 1
    alone = astra_sim.simulate(workload=str(tmp_path / "j"), platform="hgx-h100")
    assert report.max_finish_ns == alone.max_finish_ns  # a non-blocking fabric: no contention
