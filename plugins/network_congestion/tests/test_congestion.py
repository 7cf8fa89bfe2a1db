"""The ``congestion`` backend: hand-computed link/queue timings, routing, stats, errors, parity.

Numbers used throughout: 50 GB/s = 50 * 2^30 / 1e9 = 53.6870912 B/ns, latency 500 ns, so a 1 MiB
message serializes in 1048576 / 53.6870912 = 19531.25 ns: a link is busy trunc(19531.25) = 19531 ns
and the hop takes trunc(500 + 19531.25) = 20031 ns.
"""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError, SimulationError
from astra_sim.plugins import build_registry, make_plugin_manager
from astra_sim.simulation import simulate
from astra_sim_testing import (
    arrival_times as deliver, handwritten_infragraph, write_network_config, write_system_config,
)

from astra_network_analytical import parse_network_config
from astra_network_congestion.builders import from_analytical, shortest_path_router
from astra_network_congestion.congestion import CongestionNetwork
from astra_network_congestion.graph import NPU, SWITCH, NetworkGraph

MIB = 1 << 20
HOP = 20031  # trunc(500 + 2^20 / 53.6870912)
SER = 19531  # trunc(2^20 / 53.6870912)


def network(tmp_path, topology=("Ring",), npus=(8,), bandwidth=(50.0,), latency=(500.0,)):
    """A CongestionNetwork from an analytical YAML, on a fresh engine."""
    path = write_network_config(tmp_path / "net.yml", topology, npus, bandwidth, latency)
    engine = EventEngine()
    return CongestionNetwork.from_context(SimpleNamespace(network_config_path=path, engine=engine)), engine


def route_names(net, src, dst):
    links = net.graph.links
    return [(links[i].src, links[i].dst) for i in net.route(src, dst)]


def one_collective_case(tmp_path, topology, npus, comm_type=T.ALL_REDUCE, size=MIB, algorithm="ring", **system):
    total = 1
    for n in npus:
        total *= n
    prefix = tmp_path / "trace" / "t"
    prefix.parent.mkdir(exist_ok=True)
    node = make_node(0, "coll", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": comm_type, "comm_size": size})
    for rank in range(total):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [node])
    sys_path = write_system_config(tmp_path / "sys.json", dims=len(npus), algorithm=algorithm, **system)
    net_path = write_network_config(tmp_path / "net.yml", topology, npus)
    return str(prefix), sys_path, net_path


# ---------------------------------------------------------------------- single messages
def test_backend_is_registered():
    registry = build_registry(make_plugin_manager())
    assert "congestion" in registry.names("network_backend")


def test_no_delay_ns_so_the_matcher_calls_send(tmp_path):
    net, _ = network(tmp_path)
    assert not hasattr(net, "delay_ns")
    assert net.npus_per_dim == [8]


def test_one_message_over_ring_is_store_and_forward(tmp_path):
    net, engine = network(tmp_path)
    # 0 -> 3: three hops, each trunc(L + m/B).
    assert deliver(net, engine, [(0, 3, MIB)]) == [3 * HOP]
    assert route_names(net, 0, 3) == [("npu0", "npu1"), ("npu1", "npu2"), ("npu2", "npu3")]


def test_ring_routes_shorter_direction_clockwise_on_ties(tmp_path):
    net, _ = network(tmp_path)
    assert route_names(net, 0, 5) == [("npu0", "npu7"), ("npu7", "npu6"), ("npu6", "npu5")]
    assert route_names(net, 0, 4) == [("npu0", "npu1"), ("npu1", "npu2"), ("npu2", "npu3"), ("npu3", "npu4")]
    assert route_names(net, 6, 1) == [("npu6", "npu7"), ("npu7", "npu0"), ("npu0", "npu1")]


def test_truncation_per_hop_not_of_the_sum(tmp_path):
    # 100 B at 53.687 B/ns with L = 0.5 ns: a hop is trunc(0.5 + 1.8626) = 2 ns, so 3 hops = 6 ns
    # (the sum truncated once would be 7 ns).
    net, engine = network(tmp_path, latency=(0.5,))
    assert deliver(net, engine, [(0, 3, 100)]) == [6]


def test_one_message_over_switch_costs_two_full_hops(tmp_path):
    net, engine = network(tmp_path, topology=("Switch",))
    assert deliver(net, engine, [(0, 3, MIB)]) == [2 * HOP]  # unaware: trunc(2L + m/B) = 20531
    assert route_names(net, 0, 3) == [("npu0", "d0.g0.switch"), ("d0.g0.switch", "npu3")]


def test_fully_connected_is_one_hop(tmp_path):
    net, engine = network(tmp_path, topology=("FullyConnected",))
    assert deliver(net, engine, [(2, 6, MIB)]) == [HOP]
    assert net.describe()["links"] == 8 * 7


def test_two_messages_share_a_link_fifo(tmp_path):
    net, engine = network(tmp_path)
    # The second waits for the link (busy trunc(m/B)), then takes a full hop.
    assert deliver(net, engine, [(0, 1, MIB), (0, 1, MIB)]) == [HOP, SER + HOP]


def test_queueing_at_an_intermediate_link(tmp_path):
    net, engine = network(tmp_path)
    # B (1 -> 2) takes link 1->2 at t=0, busy until SER; A (0 -> 2) reaches npu1 at HOP > SER,
    # finds the link free and arrives at 2 * HOP.
    assert deliver(net, engine, [(0, 2, MIB), (1, 2, MIB)]) == [2 * HOP, HOP]
    # With zero latency A reaches npu1 exactly when the link frees (arrival event first): it queues
    # and starts at once in the link-free event of the same instant.
    net, engine = network(tmp_path, latency=(0.0,))
    assert deliver(net, engine, [(0, 2, MIB), (1, 2, MIB)]) == [2 * SER, SER]
    # Two messages into the same switch port: the switch -> npu3 link serializes them.
    net, engine = network(tmp_path, topology=("Switch",))
    assert deliver(net, engine, [(0, 3, MIB), (1, 3, MIB)]) == [2 * HOP, 2 * HOP + SER]


def test_different_sizes_keep_fifo_order(tmp_path):
    net, engine = network(tmp_path)
    small = int(500 + 1024 / (50 * (1 << 30) / 1e9))
    assert deliver(net, engine, [(0, 1, MIB), (0, 1, 1024)]) == [HOP, SER + small]


def test_a_sender_whose_receivers_change_counts_on_the_same_routes(tmp_path):
    """Halving-doubling's partners change at every step: links.LinkQueues finds the hops of a (sender, receiver,
    size) seen before by one int (its last-message slot holds another receiver), and counts on the same lists."""
    net, engine = network(tmp_path, topology=("Switch",))
    # npu0 -> switch serializes all four (SER apart); each switch -> npu link is free when its message gets there.
    assert deliver(net, engine, [(0, 1, MIB), (0, 2, MIB), (0, 1, MIB), (0, 2, MIB)]) == [
        2 * HOP, SER + 2 * HOP, 2 * SER + 2 * HOP, 3 * SER + 2 * HOP]
    rows = {(r["src"], r["dst"]): r["messages"] for r in net.stats()["links"]}
    sw = "d0.g0.switch"
    assert rows == {("npu0", sw): 4, (sw, "npu1"): 2, (sw, "npu2"): 2}


def test_ring_of_two_has_one_link_per_direction(tmp_path):
    net, engine = network(tmp_path, npus=(2,))
    assert net.describe()["links"] == 2
    assert deliver(net, engine, [(0, 1, MIB), (1, 0, MIB), (0, 1, MIB)]) == [HOP, HOP, SER + HOP]


# ---------------------------------------------------------------------- multi-dimensional
def test_multi_dim_routes_dimension_ordered(tmp_path):
    net, engine = network(tmp_path, topology=("Ring", "Switch", "FullyConnected"), npus=(4, 2, 3),
                          bandwidth=(50.0, 50.0, 50.0), latency=(500.0, 500.0, 500.0))
    # rank = x + 4 y + 8 z. 1 = (1, 0, 0) -> 22 = (2, 1, 2): ring x 1 -> 2, then the switch of
    # group (x=2, z=0), then the fully-connected link z 0 -> 2 at (2, 1).
    assert route_names(net, 1, 22) == [
        ("npu1", "npu2"),
        ("npu2", "d1.g2.switch"), ("d1.g2.switch", "npu6"),
        ("npu6", "npu22"),
    ]
    # Dimensions where the coordinates agree are skipped; ring wraps anticlockwise when shorter.
    assert route_names(net, 8, 11) == [("npu8", "npu11")]
    assert route_names(net, 8, 19) == [("npu8", "npu11"), ("npu11", "npu19")]
    assert deliver(net, engine, [(1, 22, MIB)]) == [4 * HOP]
    graph = net.graph
    # One switch per dim-1 group: 4 x-positions x 3 z-positions.
    assert sorted(n for n, kind in graph.nodes.items() if kind == SWITCH)[:3] == [
        "d1.g0.switch", "d1.g1.switch", "d1.g10.switch"]
    assert sum(kind == SWITCH for kind in graph.nodes.values()) == 12


def test_multi_dim_switch_groups_numbered_like_the_reference(tmp_path):
    config = parse_network_config(write_network_config(
        tmp_path / "n.yml", ("Switch", "Switch"), (2, 3), (50.0, 50.0), (500.0, 500.0)))
    graph, route = from_analytical(config)
    # Dim 0 groups: ranks {0,1}, {2,3}, {4,5}; dim 1 groups: {0,2,4}, {1,3,5}.
    switches = [n for n, kind in graph.nodes.items() if kind == SWITCH]
    assert switches == ["d0.g0.switch", "d0.g1.switch", "d0.g2.switch", "d1.g0.switch", "d1.g1.switch"]
    links = graph.links
    assert [(links[i].src, links[i].dst) for i in route(5, 0)] == [
        ("npu5", "d0.g2.switch"), ("d0.g2.switch", "npu4"), ("npu4", "d1.g0.switch"), ("d1.g0.switch", "npu0")]


# ---------------------------------------------------------------------- through the simulator
@pytest.mark.parametrize("topology,npus,unaware,aware", [
    (("Switch",), (8,), 92440, 126600),
    (("Ring",), (8,), 64440, 64440),
    (("FullyConnected",), (8,), 64440, 64440),
    (("Ring",), (2,), 24620, 24620),
])
def test_all_reduce_against_unaware(tmp_path, topology, npus, unaware, aware):
    """Ring all-reduce of 1 MiB (4 chunks, 2(n-1) steps of 32 KiB each): Ring/FC neighbour
    messages cost the same in both models; each Switch message costs 2 trunc(L + m/B) = 2220
    instead of trunc(2L + m/B) = 1610, so Switch-8 is 4 x 14 x 610 = 34160 ns slower.
    Ring-2 (the official aware binary aborts on it) equals the unaware golden 24620 ns."""
    args = one_collective_case(tmp_path, topology, npus)
    assert simulate(*args, network_backend="analytical").max_finish_ns == unaware
    report = simulate(*args, network_backend="congestion")
    assert report.max_finish_ns == report.min_finish_ns == aware
    assert aware - unaware == (4 * 14 * 610 if topology == ("Switch",) else 0)


def test_report_carries_description_and_link_stats(tmp_path):
    args = one_collective_case(tmp_path, ("Switch",), (8,))
    report = simulate(*args, network_backend="congestion")
    described = report.settings["network"]
    assert described["backend"] == "congestion"
    assert described["topology"] == ["Switch"] and described["switches"] == 1
    assert described["links"] == 16
    stats = report.network_stats
    assert stats["links_used"] == 16 and stats["links_total"] == 16
    # Ring all-reduce: every NPU sends 4 chunks x 14 steps of 32 KiB through its switch port.
    for row in stats["links"]:
        assert row["messages"] == 56
        assert row["bytes"] == 56 * 32768
        assert row["busy_ns"] == 56 * 610
        assert 0 < row["utilization"] < 1
    assert len(stats["bottleneck"]) == 5
    assert stats["bottleneck"][0]["busy_ns"] == 56 * 610
    assert stats["bytes_on_links"] == 16 * 56 * 32768


@pytest.mark.parametrize("latency", [500.0, 0.0])
def test_a_queue_counts_what_waits_after_the_nanoseconds_frees(tmp_path, latency):
    """Two messages reach link npu0 -> npu1 in the nanosecond its first message frees it (their event runs before the
    free): one of them waits after it, so max_queue is 1, not 2. With no latency the first message (0 -> 2) also
    starts its next hop in that nanosecond, just before the free (links.LinkQueues keeps the link's free time on the
    chunk it serves; that hop overwrites it only then, unread)."""
    net, engine = network(tmp_path, latency=(latency,))
    hop = SER if latency == 0.0 else HOP
    arrived = {}

    def send(messages):
        for name, src, dst in messages:
            net.send(src, dst, MIB, lambda n: arrived.__setitem__(n, engine.now), name)

    engine.schedule(SER, send, [("m2", 0, 1), ("m3", 0, 1)])  # (booked before m1's free: it runs first)
    send([("m1", 0, 1 if latency else 2)])
    engine.run()
    first = hop if latency else 2 * SER  # (0 -> 2: two hops of trunc(m/B) each)
    assert arrived == {"m1": first, "m2": SER + hop, "m3": 2 * SER + hop}
    rows = {(r["src"], r["dst"]): r for r in net.stats()["links"]}
    assert rows[("npu0", "npu1")]["max_queue"] == 1 and rows[("npu0", "npu1")]["messages"] == 3


def test_stats_count_messages_bytes_busy_time_and_queues(tmp_path):
    net, engine = network(tmp_path)
    deliver(net, engine, [(0, 2, MIB), (0, 1, MIB), (0, 1, 1000)])
    stats = net.stats()
    rows = {(r["src"], r["dst"]): r for r in stats["links"]}
    assert set(rows) == {("npu0", "npu1"), ("npu1", "npu2")}
    first = rows[("npu0", "npu1")]
    assert first["messages"] == 3 and first["bytes"] == 2 * MIB + 1000
    assert first["busy_ns"] == 2 * SER + int(1000 / (50 * (1 << 30) / 1e9))
    assert first["max_queue"] == 2
    assert rows[("npu1", "npu2")]["messages"] == 1 and rows[("npu1", "npu2")]["max_queue"] == 0
    assert stats["bottleneck"][0]["src"] == "npu0" and stats["bottleneck"][0]["dst"] == "npu1"
    assert stats["links_used"] == 2 and stats["links_total"] == 16


# ---------------------------------------------------------------------- generic graphs
def test_generic_graph_with_router_and_switch_latency():
    graph = NetworkGraph(source="hand-made")
    for name in ("a", "b", "c"):
        graph.add_node(name, NPU)
    graph.add_node("sw", SWITCH, switch_latency_ns=100)
    for name in ("a", "b", "c"):
        graph.add_link(name, "sw", 50.0, 500.0)
    graph.set_ranks(["c", "a", "b"])  # rank 0 on c, 1 on a, 2 on b
    engine = EventEngine()
    net = CongestionNetwork(graph, engine, shortest_path_router(graph))
    assert net.npus_per_dim == [3]
    assert [(graph.links[i].src, graph.links[i].dst) for i in net.route(1, 0)] == [("a", "sw"), ("sw", "c")]
    # The switch's latency is added to the link into it: trunc(600 + m/B) + trunc(500 + m/B).
    assert deliver(net, engine, [(1, 0, MIB)]) == [int(600 + 19531.25) + HOP]


def test_route_function_errors_are_clear():
    graph = NetworkGraph(source="g")
    for name in ("a", "b", "c"):
        graph.add_node(name, NPU)
    graph.add_link("a", "b", 50.0, 500.0)
    graph.add_link("b", "c", 50.0, 500.0)
    graph.set_ranks(["a", "b", "c"])
    engine = EventEngine()
    with pytest.raises(ConfigError, match="not a path"):
        CongestionNetwork(graph, engine, lambda s, d: [2]).route(0, 2)  # link 2 is b -> c
    with pytest.raises(ConfigError, match="ends at 'b'"):
        CongestionNetwork(graph, engine, lambda s, d: [0]).route(0, 2)
    with pytest.raises(ConfigError, match="empty"):
        CongestionNetwork(graph, engine, lambda s, d: []).route(0, 2)
    net = CongestionNetwork(graph, engine, shortest_path_router(graph))
    with pytest.raises(SimulationError, match="to itself"):
        net.send(1, 1, 10, print, None)
    with pytest.raises(SimulationError, match="not in the network"):
        net.send(0, 7, 10, print, None)
    with pytest.raises(ConfigError, match="npus_per_dim"):
        CongestionNetwork(graph, engine, shortest_path_router(graph), npus_per_dim=[2, 2])


def test_config_errors_name_the_file(tmp_path):
    args = list(one_collective_case(tmp_path, ("Ring",), (4,)))
    bad = tmp_path / "bad.yml"
    bad.write_text("topology: [ Ring, Torus ]\nnpus_count: [ 4, 4 ]\nbandwidth: [ 50, 50 ]\nlatency: [ 1, 1 ]\n")
    with pytest.raises(ConfigError, match="Torus"):
        simulate(args[0], args[1], str(bad), network_backend="congestion")
    bad.write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 0 ]\nlatency: [ 1 ]\n")
    with pytest.raises(ConfigError, match="bandwidth"):
        simulate(args[0], args[1], str(bad), network_backend="congestion")
    with pytest.raises(ConfigError, match="does not exist"):
        simulate(args[0], args[1], str(tmp_path / "missing.yml"), network_backend="congestion")


# ---------------------------------------------------------------------- reference goldens
def test_parity_rows_multi_dim_and_switch(parity_dir):
    """A few congestion rows of the parity corpus (all of them run in tests/test_parity.py)."""
    with open(parity_dir / "cases.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["backend"] == "congestion"]
    wanted = [r for r in rows if r["network"] in ("Ring_Switch_4x4", "Switch_8") and not r["extra"]][:6]
    assert wanted
    for row in wanted:
        configs = parity_dir / "configs"
        report = simulate(str(parity_dir / row["trace"]), str(configs / f"{row['system']}.json"),
                          str(configs / f"{row['network']}.yml"), str(configs / f"{row['memory']}.json"),
                          network_backend="congestion")
        assert (report.max_finish_ns, report.min_finish_ns) == (int(row["max_ns"]), int(row["min_ns"])), row["id"]



def _complete_handwritten_infragraph(shared_dir, tmp_path):
    """The handwritten InfraGraph sample with bandwidth and latency on every link, written to a file."""
    import yaml

    infra = handwritten_infragraph(shared_dir)
    if infra is None:
        pytest.skip("InfraGraph samples not found")
    path = tmp_path / "infra.yaml"
    path.write_text(yaml.safe_dump(infra, sort_keys=False))
    return str(path)


def test_infragraph_network_through_the_congestion_backend(shared_dir, tmp_path):
    pytest.importorskip("astra_network_congestion.infragraph")
    infra = _complete_handwritten_infragraph(shared_dir, tmp_path)
    prefix, sys_path, _ = one_collective_case(tmp_path, ("Ring",), (8,))
    report = simulate(prefix, sys_path, infra, network_backend="congestion")
    assert report.max_finish_ns > 0
    used = {(row["src"], row["dst"]) for row in report.network_stats["links"]}
    assert ("host.0.xpu.0", "host.0.sw.0") in used  # ring neighbours in a host: the host switch
    assert any("tor.0" in src for src, _ in used)  # host 0 -> host 1 through the ToR
    # One message between XPUs of a host: XPU -> switch -> XPU, 2 x trunc(100 + 2^20 / 100).
    engine = EventEngine()
    net = CongestionNetwork.from_context(SimpleNamespace(
        network_config_path=infra, engine=engine,
        system_config=SimpleNamespace(path=sys_path, raw={}), warn=lambda message: None))
    assert deliver(net, engine, [(0, 1, MIB)]) == [2 * int(100 + MIB / 100)]
