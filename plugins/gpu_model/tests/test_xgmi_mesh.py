"""AMD's 8-GPU Infinity Fabric (xGMI) full mesh (issue 40): the platforms' scale-up dimension is FullyConnected at
one link's bandwidth per pair of GPUs, so a send between two GPUs gets one link; collectives keep RCCL's model over
all 7 links, unchanged; ``--fabric`` keeps the equivalent switch its builder takes."""

import pytest
import yaml

from astra_sim.chakra import make_metadata, make_node, write_et
from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_sim.report import read_report

from astra_gpu_model.platforms import NVLINK_HOP_LATENCY_NS, PLATFORMS, generate, network_yaml

GIB = 1 << 30
#: decimal GB/s per direction of one xGMI link (AMD ROCm blog, the mi300x entry's scaleup_mesh source) and its
#: MI355X figure (the MI355X preset's scaleup source)
LINK_GBPS = {"mi300x": 64.0, "mi325x": 64.0, "mi355x": 76.8}


@pytest.mark.parametrize("name", sorted(LINK_GBPS))
def test_the_scale_up_dimension_is_a_mesh_of_single_links(name):
    platform = PLATFORMS[name]
    net = yaml.safe_load(network_yaml(platform, 2))
    assert net["topology"] == ["FullyConnected", "Switch"]
    assert net["bandwidth"][0] == pytest.approx(LINK_GBPS[name] * 1e9 / GIB)
    assert net["latency"][0] == 2 * NVLINK_HOP_LATENCY_NS  # one hop, the switch's two hops' latency
    numbers = platform.numbers()
    assert numbers["scaleup_link_gb_per_s_per_direction"] == LINK_GBPS[name]
    assert numbers["scaleup_gb_per_s_per_direction"] == pytest.approx(7 * LINK_GBPS[name])  # what RCCL's model uses
    assert numbers["sources"]["scaleup_mesh"]
    switch = yaml.safe_load(network_yaml(platform, 2, mesh=False))  # what --fabric's builder takes
    assert switch["topology"] == ["Switch", "Switch"]
    assert switch["bandwidth"][0] == pytest.approx(7 * LINK_GBPS[name] * 1e9 / GIB)


def test_other_platforms_keep_their_switch():
    for name, platform in PLATFORMS.items():
        if name not in LINK_GBPS:
            assert not platform.scaleup_mesh
            assert yaml.safe_load(network_yaml(platform, 1))["topology"] == ["Switch"]


def test_fabric_takes_the_equivalent_switch():
    setup = PLATFORMS["mi300x"].resolve(2, {"fabric": "rail"})
    assert yaml.safe_load(setup.network_configuration.text)["topology"] == ["Switch", "Switch"]
    assert "equivalent switch" in setup.defaults["fabric"]
    assert yaml.safe_load(PLATFORMS["mi300x"].resolve(2, {}).network_configuration.text)["topology"][0] == \
        "FullyConnected"


def _finish(tmp_path, name, *extra):
    report = tmp_path / f"{name}.json"
    prefix = str(tmp_path / "t")
    assert main(["run", "--platform", "mi300x", "--workload-configuration", prefix, "-q", "--report-json",
                 str(report), *extra]) == 0
    return max(r["finish_ns"] for r in read_report(report)["ranks"])


def _switch_network(tmp_path):
    path = tmp_path / "switch.yml"
    path.write_text(generate("mi300x", 1, mesh=False)["network_configuration"].text)
    return str(path)


def test_a_send_between_two_gpus_gets_one_link(tmp_path):
    size = 64 << 20
    for rank in range(8):
        nodes = []
        if rank == 0:
            nodes = [make_node(1, "send", T.COMM_SEND_NODE, attrs={
                "is_cpu_op": False, "comm_dst": 1, "comm_size": size, "comm_tag": 3})]
        elif rank == 1:
            nodes = [make_node(1, "recv", T.COMM_RECV_NODE, attrs={
                "is_cpu_op": False, "comm_src": 0, "comm_size": size, "comm_tag": 3})]
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    mesh = _finish(tmp_path, "mesh")
    switch = _finish(tmp_path, "switch", "--network-configuration", _switch_network(tmp_path))
    # the same latency (one 500 ns hop against two of 250 ns); the bytes over one 64 GB/s link, not 7 of them
    link, all_links = 64e9 / GIB * GIB / 1e9, 7 * 64e9 / GIB * GIB / 1e9  # B/ns as the backend converts them
    assert mesh - switch == pytest.approx(size / link - size / all_links, abs=2)


def test_collectives_keep_rccls_model(tmp_path):
    """An all-reduce is priced by NCCL's (RCCL's) model on the GPU preset's 7 links: the mesh changes nothing."""
    for rank in range(8):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), [make_node(1, "ar", T.COMM_COLL_NODE, attrs={
            "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 256 << 20})])
    mesh = _finish(tmp_path, "mesh")
    assert mesh == _finish(tmp_path, "switch", "--network-configuration", _switch_network(tmp_path))
    assert mesh > (256 << 20) / (7 * 64e9) * 1e9  # over all links at most: a real collective time
