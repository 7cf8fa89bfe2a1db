"""A failed link reroutes: the step slows as the capacity left predicts, and an unknown link is a clear error."""

import pytest

from astra_sim.errors import ConfigError

from astra_cluster import run_cluster

RING4 = """topology: [ Ring ]
npus_count: [ 4 ]
bandwidth: [ {bw} ]
latency: [ 500.0 ]
"""
#: one job on GPUs 0 and 2 of a 4-GPU ring: two equal paths between them (0-1-2 and 0-3-2), each message split
#: over both (flow_ecmp: split)
SPEC = """
system: sys.json
network: {net}
gpus_per_node: 1
network_backend: flow
run: {{flow_ecmp: split}}
placement: fixed
{failed}
jobs:
  - {{name: a, gpus: 2, place: [0, 2], workload: {{micro: {{collective: all_reduce, size: 64MiB}}}}}}
"""


@pytest.fixture
def step_of(ring, write_spec):
    (ring / "ring4.yml").write_text(RING4.format(bw=50.0))
    (ring / "ring4_half.yml").write_text(RING4.format(bw=25.0))

    def step(net="ring4.yml", failed=""):
        report = run_cluster(write_spec(ring, SPEC.format(net=net, failed=failed)))
        return report["corun"]["jobs"][0]["alone_step_ns"], report

    return step


def test_one_of_two_paths_down_is_half_the_capacity(step_of):
    """With the cable npu0-npu1 down, 0 and 2 talk over 0-3-2 only: the same hops, half the capacity, so the step is
    exactly the step on the intact ring with links of half the bandwidth."""
    intact, _ = step_of()
    failed, report = step_of(failed="failed_links: [[npu0, npu1]]")
    half, _ = step_of(net="ring4_half.yml")
    assert failed == half
    assert 1.9 < failed / intact < 2.0  # the transfer doubles; latency and compute do not
    assert report["cluster"]["failed_links"] == [["npu0", "npu1"]]
    # the other way round (npu3-npu2) is the same by symmetry
    assert step_of(failed="failed_links: [[npu3, npu2]]")[0] == half


def test_both_paths_down_is_an_error_not_a_hang(step_of):
    with pytest.raises(ConfigError, match="no path from 'npu0' to 'npu2'"):  # 0-1 and 2-3 down: 0 and 2 are cut off
        step_of(failed="failed_links: [[npu0, npu1], [npu2, npu3]]")


def test_unknown_link_is_one_line_naming_the_key(step_of):
    with pytest.raises(ConfigError) as info:
        step_of(failed="failed_links: [[npu0, npu2]]")
    message = str(info.value)
    assert "cluster.yaml: key 'failed_links': no link joins 'npu0' and 'npu2'" in message and "\n" not in message


@pytest.mark.parametrize("value, expected", [
    ("[npu0, npu1]", "a list of cables"), ("[[npu0]]", "a list of cables"), ("[[npu0, true]]", "a list of cables"),
    ("{a: b}", "a list of cables")])
def test_bad_failed_links_values(ring, write_spec, value, expected):
    from astra_cluster.spec import load_cluster_spec

    with pytest.raises(ConfigError, match=expected):
        load_cluster_spec(write_spec(ring, SPEC.format(net="net.yml", failed=f"failed_links: {value}")))


def test_failed_links_need_a_rerouting_backend(ring, write_spec):
    from astra_cluster.spec import load_cluster_spec

    text = SPEC.format(net="net.yml", failed="failed_links: [[npu0, npu1]]").replace("network_backend: flow",
                                                                                     "network_backend: congestion")
    with pytest.raises(ConfigError, match="key 'failed_links': links reroute on the flow and ns3 backends only"):
        load_cluster_spec(write_spec(ring, text))
