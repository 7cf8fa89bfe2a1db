"""--fabric: rail-optimised and multi-plane fat trees built from a few parameters (fabrics.py), hand-computed on the
flow and congestion backends, and the spec reader's one-line errors."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from astra_sim.cli import main
from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import all_reduce_trace, arrival_times as arrivals, write_network_config

from astra_network_analytical import parse_network_config
from astra_network_congestion.congestion import CongestionNetwork
from astra_network_congestion.fabrics import FabricSpec, build_fabric, describe_spec, parse_fabric
from astra_network_congestion.flow import FlowNetwork

GIB = 1 << 30
BW = 1e9 / GIB  # GB/s (GB = 2^30 bytes) of exactly 1 byte/ns
SIZE = 100_000


def yaml_path(tmp_path, gpus=2, nodes=4):
    """``nodes`` nodes of ``gpus`` GPUs (one dimension when ``gpus`` is 1): every link 1 byte/ns; scale-up hops
    10 ns, fabric hops 100 ns."""
    if gpus == 1:
        return write_network_config(tmp_path / "net.yml", ("Switch",), (nodes,), (BW,), (100.0,))
    return write_network_config(tmp_path / "net.yml", ("Switch", "Switch"), (gpus, nodes), (BW, BW), (10.0, 100.0))


def network(cls, tmp_path, fabric, gpus=2, nodes=4, **options):
    engine = EventEngine()
    context = SimpleNamespace(network_config_path=yaml_path(tmp_path, gpus, nodes), engine=engine,
                              options={"fabric": fabric, **options}, warn=print)
    return cls.from_context(context), engine


def link_bytes(net, word):
    return sum(row["bytes"] for row in net.stats()["links"] if word in row["src"] or word in row["dst"])


# ---------------------------------------------------------------- the graph and its routes


def test_rail_graph_leaves_spines_and_routes(tmp_path):
    """2 GPUs x 4 nodes, 2 nodes per leaf, 2:1: per rail two leaves; one spine (ceil(2 / 2)) shared by the rails;
    each leaf's uplink is 2 ports x 1 byte/ns / 2 = 1 byte/ns."""
    fabric = build_fabric(parse_network_config(yaml_path(tmp_path)), parse_fabric("rail:nodes_per_leaf=2:over=2"))
    graph, route = fabric.graph, fabric.route_fn
    assert {n for n, kind in graph.nodes.items() if kind == "switch"} == {
        "node0.scaleup", "node1.scaleup", "node2.scaleup", "node3.scaleup", "plane0.spine0",
        "plane0.rail0.leaf0", "plane0.rail0.leaf1", "plane0.rail1.leaf0", "plane0.rail1.leaf1"}
    up = [link for link in graph.links if link.src == "plane0.rail1.leaf0" and link.dst == "plane0.spine0"]
    assert len(up) == 1 and up[0].bandwidth_bytes_per_ns == pytest.approx(1.0) and up[0].latency_ns == 0.0
    hops = lambda s, d: [graph.links[i].dst for i in route(s, d)]  # noqa: E731
    assert hops(0, 1) == ["node0.scaleup", "npu1"]  # one node: NVSwitch
    assert hops(0, 2) == ["plane0.rail0.leaf0", "npu2"]  # rail 0 of nodes 0 and 1: its leaf only
    assert hops(1, 7) == ["plane0.rail1.leaf0", "plane0.spine0", "plane0.rail1.leaf1", "npu7"]
    assert hops(0, 7) == ["plane0.rail0.leaf0", "plane0.spine0", "plane0.rail1.leaf1", "npu7"]  # across rails
    assert fabric.description["spines_per_plane"] == 1 and fabric.description["leaves_per_rail_per_plane"] == 2


def test_planes_graph_has_independent_planes_at_a_share_of_the_nic(tmp_path):
    fabric = build_fabric(parse_network_config(yaml_path(tmp_path, gpus=1)),
                          parse_fabric("planes:planes=2:nodes_per_leaf=2"))
    graph = fabric.graph
    ports = [link for link in graph.links if link.src == "npu0"]
    assert sorted(link.dst for link in ports) == ["plane0.rail0.leaf0", "plane1.rail0.leaf0"]
    assert all(link.bandwidth_bytes_per_ns == pytest.approx(0.5) for link in ports)
    # no link joins the planes
    assert not [link for link in graph.links if link.src.startswith("plane0") and link.dst.startswith("plane1")]
    assert fabric.description["port_gbit_per_s"] == pytest.approx(fabric.description["nic_gbit_per_s"] / 2)


def test_nic_gbps_replaces_the_yaml_bandwidth(tmp_path):
    fabric = build_fabric(parse_network_config(yaml_path(tmp_path)), parse_fabric("rail:nic_gbps=800"))
    port = next(link for link in fabric.graph.links if link.src == "npu0" and "leaf" in link.dst)
    assert port.bandwidth_bytes_per_ns == pytest.approx(100.0)  # 800 Gb/s = 100 bytes/ns
    assert fabric.description["nic_gbit_per_s"] == 800.0


def test_fabric_needs_switch_dimensions(tmp_path):
    path = write_network_config(tmp_path / "ring.yml", ("Ring", "Switch"), (2, 4), (BW, BW), (10.0, 100.0))
    with pytest.raises(ConfigError, match="--fabric needs a network of Switch dimensions"):
        build_fabric(parse_network_config(path), FabricSpec())


# ---------------------------------------------------------------- hand-computed timings


def test_flow_oversubscription_two_doubles_a_cross_leaf_all_to_all(tmp_path):
    """Rail 0: ranks 0 and 2 on leaf 0, ranks 4 and 6 on leaf 1; each sends SIZE to each rank of the other leaf
    (8 messages). At 1:1 (two spines, uplinks of 1 byte/ns each, sprayed): each NIC carries two messages at
    1 byte/ns: 2 x SIZE + 2 x 100 ns. At 2:1 (one spine, one uplink of 1 byte/ns per leaf): four messages share
    each uplink: 4 x SIZE + 200 ns, twice as long (predicted by hand, not by the model)."""
    pairs = [(a, b, SIZE) for a in (0, 2) for b in (4, 6)] + [(b, a, SIZE) for a in (0, 2) for b in (4, 6)]
    flat, engine = network(FlowNetwork, tmp_path, "rail:nodes_per_leaf=2:over=1", flow_ecmp="split")
    assert arrivals(flat, engine, pairs) == [2 * SIZE + 200] * 8
    over, engine = network(FlowNetwork, tmp_path, "rail:nodes_per_leaf=2:over=2")
    assert arrivals(over, engine, pairs) == [4 * SIZE + 200] * 8
    assert link_bytes(over, "spine") == 2 * 8 * SIZE  # every message crosses a spine: up and down
    # a lone message is not slowed by the oversubscription (its uplink holds it)
    over, engine = network(FlowNetwork, tmp_path, "rail:nodes_per_leaf=2:over=2")
    assert arrivals(over, engine, [(0, 4, SIZE)]) == [SIZE + 200]


def test_rail_traffic_on_one_leaf_never_reaches_a_spine(tmp_path):
    """Ranks 0 -> 2 and 4 -> 6 are each on one rail-0 leaf; 1 -> 3 on rail 1's: no spine bytes."""
    net, engine = network(FlowNetwork, tmp_path, "rail:nodes_per_leaf=2:over=4")
    assert arrivals(net, engine, [(0, 2, SIZE), (4, 6, SIZE), (1, 3, SIZE)]) == [SIZE + 200] * 3
    assert link_bytes(net, "spine") == 0 and link_bytes(net, "leaf") == 2 * 3 * SIZE


def test_two_planes_halve_the_traffic_of_each_plane(tmp_path):
    """One GPU per node, 4 nodes, two planes (ports of 0.5 byte/ns). Sprayed (the default for planes), every message
    puts half its bytes on each plane and takes what it takes on one plane of the whole NIC; by hash
    (--flow-ecmp hash) each message rides one plane, at half the NIC."""
    pairs = [(a, b, SIZE) for a in range(4) for b in range(4) if a != b]
    rail, engine = network(FlowNetwork, tmp_path, "rail:nodes_per_leaf=2", gpus=1, flow_ecmp="split")
    alone = arrivals(rail, engine, pairs)
    total = link_bytes(rail, "plane0")
    planes, engine = network(FlowNetwork, tmp_path, "planes:planes=2:nodes_per_leaf=2", gpus=1)
    assert arrivals(planes, engine, pairs) == alone
    assert link_bytes(planes, "plane0") == link_bytes(planes, "plane1") == total / 2
    one, engine = network(FlowNetwork, tmp_path, "planes:planes=2:nodes_per_leaf=2", gpus=1, flow_ecmp="hash")
    assert arrivals(one, engine, [(0, 3, SIZE)]) == [2 * SIZE + 200]


def test_congestion_backend_routes_over_the_fabric(tmp_path):
    """Store and forward on the route_fn's path: inside a leaf two hops of 1 byte/ns; across leaves four (the
    uplinks of 1 byte/ns at 2:1), two with the fabric latency."""
    net, engine = network(CongestionNetwork, tmp_path, "rail:nodes_per_leaf=2:over=2")
    assert arrivals(net, engine, [(0, 2, SIZE)]) == [2 * SIZE + 200]
    net, engine = network(CongestionNetwork, tmp_path, "rail:nodes_per_leaf=2:over=2")
    assert arrivals(net, engine, [(0, 4, SIZE)]) == [4 * SIZE + 200]
    assert net.describe()["fabric"]["kind"] == "rail"


def test_fabric_and_astra_clusters_tiers_do_not_mix(tmp_path):
    with pytest.raises(ConfigError, match="not both"):
        network(FlowNetwork, tmp_path, "rail", fabric_nodes_per_leaf=2)


# ---------------------------------------------------------------- whole runs


def test_a_two_node_rail_all_reduce_stays_on_the_leaves(tmp_path):
    """hgx-h100 x 2 nodes, ring collectives over the links: every byte between the nodes goes GPU i -> rail i's
    leaf -> GPU i; no spine carries any."""
    report = simulate(workload=all_reduce_trace(tmp_path, 16, 1 << 24), platform="hgx-h100", nodes=2,
                      network_backend="flow", platform_collective="ring", fabric="rail")
    links = report.network_stats["links"]
    assert sum(row["bytes"] for row in links if "leaf" in row["dst"]) > 0
    assert sum(row["bytes"] for row in links if "spine" in row["src"] or "spine" in row["dst"]) == 0
    assert report.settings["network"]["fabric"]["nodes_per_leaf"] == 2  # the platform's 32, capped at 2 nodes


def test_cli_fabric_flag_end_to_end(tmp_path, capsys):
    prefix = all_reduce_trace(tmp_path, 16, 1 << 20)
    out = tmp_path / "r.json"
    rc = main(["run", "--platform", "hgx-h100", "--nodes", "2", "--network-backend", "congestion",
               "--platform-collective", "ring", "--fabric", "rail:nodes_per_leaf=1:over=2",
               "--workload-configuration", prefix, "-o", str(out), "-q"])
    assert rc == 0
    settings = json.loads(out.read_text())["settings"]
    assert settings["network"]["fabric"]["spec"] == "rail:nodes_per_leaf=1:over=2"
    assert settings["network"]["fabric"]["spines_per_plane"] == 1 and "fabric" in settings["platform_defaults"]
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--platform", "hgx-h100", "--nodes", "2", "--fabric", "rail:over=0.5",
              "--workload-configuration", prefix])
    assert exit_.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--fabric: over expects a number >= 1 (a leaf's downlink over its uplink capacity), "
                            "got '0.5'")


# ---------------------------------------------------------------- the spec reader


@pytest.mark.parametrize("text,expected", [
    ("rail", FabricSpec()),
    ("rail:nodes_per_leaf=16:over=2", FabricSpec(nodes_per_leaf=16, oversubscription=2.0)),
    ("planes:nic_gbps=800", FabricSpec(kind="planes", nic_gbit_per_s=800.0, planes=2)),
    ("rail:over=1.2345678:nic_gbps=399.99999", FabricSpec(oversubscription=1.2345678, nic_gbit_per_s=399.99999)),
    ("planes:planes=4:spines=8:oversubscription=1.5", FabricSpec(kind="planes", planes=4, spines=8,
                                                                 oversubscription=1.5)),
])
def test_spec_examples(text, expected):
    assert parse_fabric(text) == expected
    assert parse_fabric(describe_spec(expected)) == expected


@pytest.mark.parametrize("text,message", [
    ("", "expected KIND"), ("torus", "unknown fabric kind 'torus'"), ("rail:npl=2", "'npl=2' is not key=value"),
    ("rail:over", "'over' is not key=value"), ("rail:over=0.5", "over expects a number >= 1"),
    ("rail:over=inf", "over expects a number >= 1"), ("rail:nodes_per_leaf=0", "nodes_per_leaf expects an integer"),
    ("rail:nodes_per_leaf=2.5", "nodes_per_leaf expects an integer"), ("rail:nic_gbps=0", "nic_gbps expects a number"),
    ("rail:planes=2", "planes= is for kind planes"), ("planes:planes=1", "kind planes needs planes >= 2"),
    ("rail:over=2:over=3", "key 'over' is given twice"),
])
def test_spec_errors(text, message):
    with pytest.raises(ConfigError, match="^--fabric: .*" + message.replace("(", r"\(")):
        parse_fabric(text)


def test_any_text_is_a_fabric_or_one_line_error():
    from hypothesis import given, settings, strategies as st

    keys = st.sampled_from(["nodes_per_leaf", "over", "oversubscription", "nic_gbps", "planes", "spines", "x", ""])
    values = st.one_of(st.integers(-3, 300).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                       st.text(max_size=6))
    pair = st.one_of(st.tuples(keys, values).map(lambda kv: f"{kv[0]}={kv[1]}"), st.text(max_size=8))
    specs = st.tuples(st.sampled_from(["rail", "planes", "fat", "", " rail"]), st.lists(pair, max_size=4)).map(
        lambda kp: ":".join([kp[0], *kp[1]]))

    @settings(max_examples=400, deadline=None)
    @given(st.one_of(specs, st.text(max_size=30)))
    def check(text):
        try:
            spec = parse_fabric(text)
        except ConfigError as exc:
            message = str(exc)
            assert message.startswith("--fabric: ") and "\n" not in message
            return
        assert spec.kind in ("rail", "planes") and spec.oversubscription >= 1 and spec.planes >= 1
        assert parse_fabric(describe_spec(spec)) == spec

    check()


# ---------------------------------------------------------------- the InfraGraph file and astra fabric


def test_the_infragraph_file_runs_as_the_built_fabric(tmp_path):
    """The same cross-leaf all-to-all on the InfraGraph file that fabric_infragraph writes: the same times as on the
    graph built directly (4 x SIZE + 200 ns at 2:1), and the same counts of nodes and links."""
    import yaml

    from astra_network_congestion.fabrics import fabric_infragraph

    config = parse_network_config(yaml_path(tmp_path))
    spec = parse_fabric("rail:nodes_per_leaf=2:over=2")
    path = tmp_path / "fabric.yaml"
    path.write_text(yaml.safe_dump(fabric_infragraph(config, spec)))
    engine = EventEngine()
    net = FlowNetwork.from_context(SimpleNamespace(network_config_path=str(path), engine=engine, options={},
                                                   warn=print))
    pairs = [(a, b, SIZE) for a in (0, 2) for b in (4, 6)] + [(b, a, SIZE) for a in (0, 2) for b in (4, 6)]
    assert arrivals(net, engine, pairs) == [4 * SIZE + 200] * 8
    built = build_fabric(config, spec).graph.describe()
    assert {k: net.graph.describe()[k] for k in ("npus", "switches", "links", "npus_per_dim")} == {
        k: built[k] for k in ("npus", "switches", "links", "npus_per_dim")}
    with pytest.raises(ConfigError, match="not from the InfraGraph file"):
        FlowNetwork.from_context(SimpleNamespace(network_config_path=str(path), engine=EventEngine(),
                                                 options={"fabric": "rail"}, warn=print))


def test_cli_astra_fabric(tmp_path, capsys):
    out = tmp_path / "f.yaml"
    assert main(["fabric", "rail:over=2", "--platform", "hgx-h100", "--nodes", "64", "--json", "-o", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    # the platform's leaves of 32 nodes; ceil(32 / 2) = 16 spines; uplinks at the 400 Gb/s port speed
    assert (info["nodes_per_leaf"], info["leaves_per_rail_per_plane"], info["spines_per_plane"]) == (32, 2, 16)
    assert info["leaf_uplink_gbit_per_s_per_spine"] == pytest.approx(400.0)
    assert info["switches"] == 64 + 8 * 2 + 16
    assert main(["infragraph", str(out), "--summary", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["npus"] == 512 and summary["switches"] == info["switches"] and summary["logical_dims"] == [8, 64]
    assert main(["fabric", "rail:spines=0", "--platform", "hgx-h100"]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("SPEC: spines expects an integer >= 1, got '0'")
