"""The ``flow`` backend against hand-computed cases.

Most graphs here use bandwidths of whole bytes per ns (``gbps(x)`` is the GB/s figure, GB = 2^30
bytes, that the graph turns into exactly ``x`` bytes/ns), so arrival times can be worked out on
paper: a flow of ``m`` bytes at ``r`` bytes/ns takes ``m / r`` ns, then the path latency.
"""

from __future__ import annotations

import sys
import types

import pytest

from astra_sim.api import RunContext
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError, SimulationError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_network_analytical import AnalyticalNetwork, parse_network_config
from astra_network_congestion.flow import FlowNetwork, ecmp_index
from astra_network_congestion.graph import NPU, SWITCH, NetworkGraph


def gbps(bytes_per_ns):
    """The GB/s (GB = 2^30 bytes) for which NetworkGraph stores exactly ``bytes_per_ns``."""
    return bytes_per_ns * 1e9 / (1 << 30)


# ---------------------------------------------------------------- graphs


def pair(bw=1.0, lat=0.0):
    """Two NPUs and one cable."""
    g = NetworkGraph(source="pair")
    g.add_node("a", NPU)
    g.add_node("b", NPU)
    g.add_link("a", "b", gbps(bw), lat)
    g.set_ranks(["a", "b"])
    return g


def star(n, bw=1.0, lat=0.0, switch_lat=0.0):
    """``n`` NPUs around one switch."""
    g = NetworkGraph(source="star")
    g.add_node("sw", SWITCH, switch_lat)
    for i in range(n):
        g.add_node(f"n{i}", NPU)
        g.add_link(f"n{i}", "sw", gbps(bw), lat)
    g.set_ranks([f"n{i}" for i in range(n)])
    return g


def fat_tree(pods=2, hosts=4, spines=2, host_bw=1.0, uplink_bw=2.0, lat=0.0, nic_bw=None):
    """Two-tier fat tree: one leaf per pod, ``hosts`` NPUs per leaf, every leaf to every spine.
    With ``nic_bw`` every NPU reaches its leaf through a NIC node (NPU -host_bw- NIC -nic_bw- leaf)."""
    g = NetworkGraph(source="fat tree")
    for s in range(spines):
        g.add_node(f"spine{s}", SWITCH)
    ranks = []
    for p in range(pods):
        g.add_node(f"leaf{p}", SWITCH)
        for s in range(spines):
            g.add_link(f"leaf{p}", f"spine{s}", gbps(uplink_bw), lat)
        for h in range(hosts):
            name = f"p{p}h{h}"
            g.add_node(name, NPU)
            if nic_bw is None:
                g.add_link(name, f"leaf{p}", gbps(host_bw), lat)
            else:
                g.add_node(f"{name}.nic", SWITCH)
                g.add_link(name, f"{name}.nic", gbps(host_bw), lat)
                g.add_link(f"{name}.nic", f"leaf{p}", gbps(nic_bw), lat)
            ranks.append(name)
    g.set_ranks(ranks)
    return g


def run(graph, sends, **options):
    """Drive a FlowNetwork: ``sends`` = [(time_ns, src, dst, size)]; returns (arrivals, network),
    arrivals[i] = the time message i arrived."""
    engine = EventEngine()
    net = FlowNetwork(graph, engine, **options)
    arrivals = {}

    def arrived(i):
        assert i not in arrivals
        arrivals[i] = engine.now

    def start(i):
        _, src, dst, size = sends[i]
        net.send(src, dst, size, arrived, i)

    for i, (t, *_rest) in enumerate(sends):
        engine.schedule(t, start, i)
    engine.run()
    assert len(arrivals) == len(sends)
    return [arrivals[i] for i in range(len(sends))], net


def all_to_all(n, size):
    return [(0, s, d, size) for s in range(n) for d in range(n) if s != d]


def link_names(net, rows):
    return {(row["src"], row["dst"]) for row in rows}


# ---------------------------------------------------------------- reduces to the analytical model


@pytest.mark.parametrize("bw,lat", [(50.0, 500.0), (25.0, 700.0), (123.4, 0.0), (400.0, 1.5)])
@pytest.mark.parametrize("size", [1, 1000, 4096, 1_234_567, 64 << 20])
def test_single_uncontended_link_equals_analytical(tmp_path, bw, lat, size):
    path = write_network_config(tmp_path / "net.yml", ("FullyConnected",), (2,), (bw,), (lat,))
    analytical = AnalyticalNetwork(parse_network_config(path), EventEngine())
    expected = analytical.delay_ns(0, 1, size)
    g = NetworkGraph(source="one link")
    g.add_node("a", NPU)
    g.add_node("b", NPU)
    g.add_link("a", "b", bw, lat)
    g.set_ranks(["a", "b"])
    arrivals, _ = run(g, [(0, 0, 1, size), (7, 1, 0, size)])
    assert arrivals == [expected, 7 + expected]
    # The same through from_context on the analytical YAML.
    engine = EventEngine()
    net = FlowNetwork.from_context(RunContext(engine=engine, system_config=None, network_config_path=path))
    got = []
    net.send(0, 1, size, lambda _: got.append(engine.now), None)
    engine.run()
    assert got == [expected]


@pytest.mark.parametrize("topology,npus,pairs", [
    ("Switch", 4, [(0, 1), (3, 2)]),
    ("Ring", 8, [(0, 1), (0, 3), (0, 4), (6, 1)]),
    ("FullyConnected", 5, [(0, 4), (2, 1)]),
])
def test_analytical_topologies_uncontended(tmp_path, topology, npus, pairs):
    path = write_network_config(tmp_path / "net.yml", (topology,), (npus,), (50.0,), (500.0,))
    analytical = AnalyticalNetwork(parse_network_config(path), EventEngine())
    for src, dst in pairs:
        for size in (1, 100_000, 3 << 20):
            engine = EventEngine()
            net = FlowNetwork.from_context(RunContext(engine=engine, system_config=None, network_config_path=path))
            assert net.npus_per_dim == [npus]
            got = []
            net.send(src, dst, size, lambda _: got.append(engine.now), None)
            engine.run()
            assert got == [analytical.delay_ns(src, dst, size)], (src, dst, size)


def coll_trace(tmp_path, name, npus, comm_type, size):
    prefix = tmp_path / name
    node = make_node(1, "c", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": comm_type, "comm_size": size})
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [node])
    return str(prefix)


@pytest.mark.parametrize("topology,npus", [("FullyConnected", 2), ("FullyConnected", 4), ("Switch", 4)])
def test_whole_run_matches_analytical_without_contention(tmp_path, topology, npus):
    """A ring all-reduce never has two messages on one link at once: same times as analytical."""
    net = write_network_config(tmp_path / "net.yml", (topology,), (npus,), (50.0,), (500.0,))
    system = write_system_config(tmp_path / "sys.json")
    prefix = coll_trace(tmp_path, "ar", npus, T.ALL_REDUCE, 1 << 20)
    analytical = simulate(prefix, system, net)
    flow = simulate(prefix, system, net, network_backend="flow")
    assert [r.finish_ns for r in flow.ranks] == [r.finish_ns for r in analytical.ranks]
    assert flow.settings["network"]["backend"] == "flow"
    stats = flow.network_stats
    assert stats["backend"] == "flow" and stats["messages"] == analytical.stats["messages"]
    assert stats["bottleneck"] and all(row["bytes"] > 0 for row in stats["links"])


# ---------------------------------------------------------------- sharing


def test_two_flows_sharing_a_link_each_get_half():
    # One link, 2 bytes/ns, 100 ns latency: alone 1000 bytes take 500 ns; together 1000 ns.
    arrivals, net = run(pair(bw=2.0, lat=100.0), [(0, 0, 1, 1000), (0, 0, 1, 1000)])
    assert arrivals == [1100, 1100]
    alone, _ = run(pair(bw=2.0, lat=100.0), [(0, 0, 1, 1000)])
    assert alone == [600]
    # The reverse direction is another link: not shared.
    arrivals, _ = run(pair(bw=2.0, lat=100.0), [(0, 0, 1, 1000), (0, 1, 0, 1000)])
    assert arrivals == [600, 600]
    # Two senders into one receiver share only the switch -> receiver link.
    arrivals, net = run(star(3, bw=1.0), [(0, 0, 2, 3000), (0, 1, 2, 3000)])
    assert arrivals == [6000, 6000]
    rows = {(r["src"], r["dst"]): r for r in net.stats()["links"]}
    assert rows[("sw", "n2")]["max_concurrent_flows"] == 2
    assert rows[("sw", "n2")]["bytes"] == 6000
    assert rows[("n0", "sw")]["max_concurrent_flows"] == 1


def test_incast():
    # 4 -> 1 through a switch: 10 ns per link, 5 ns in the switch; the receiver's link is shared by 4.
    n, size = 5, 10_000
    sends = [(0, src, 4, size) for src in range(4)]
    arrivals, net = run(star(n, bw=1.0, lat=10.0, switch_lat=5.0), sends)
    assert arrivals == [4 * size + 25] * 4
    stats = net.stats()
    assert [(r["src"], r["dst"]) for r in stats["bottleneck"][:1]] == [("sw", "n4")]
    assert stats["bottleneck"][0]["saturated_ns"] == 4 * size
    # Unequal sizes: rates go 1/4, 1/3, 1/2, 1 as the flows finish.
    sends = [(0, src, 4, (src + 1) * 1000) for src in range(4)]
    arrivals, net = run(star(n, bw=1.0, lat=10.0, switch_lat=5.0), sends)
    assert arrivals == [4000 + 25, 7000 + 25, 9000 + 25, 10000 + 25]
    assert net.recomputations == 5  # at the start, then after each end


def test_short_and_long_flow_rates_recomputed_when_one_ends():
    lat = 50
    # Together: 0.5 byte/ns each; the short one ends at 2000, the long one has 2000 bytes left at 1.
    arrivals, net = run(pair(bw=1.0, lat=lat), [(0, 0, 1, 1000), (0, 0, 1, 3000)])
    assert arrivals == [2000 + lat, 4000 + lat]
    row = [r for r in net.stats()["links"] if r["src"] == "a"][0]
    assert (row["bytes"], row["busy_ns"], row["saturated_ns"], row["max_concurrent_flows"]) == (4000, 4000, 4000, 2)
    assert row["utilization"] == 1.0
    # Staggered: the long one alone until 1000, then both at 0.5 until the short one ends at 3000.
    arrivals, _ = run(pair(bw=1.0, lat=lat), [(0, 0, 1, 3000), (1000, 0, 1, 1000)])
    assert arrivals == [4000 + lat, 3000 + lat]
    # A gap: the link is busy 2 x 1000 ns of 3000.
    arrivals, net = run(pair(bw=1.0), [(0, 0, 1, 1000), (2000, 0, 1, 1000)])
    assert arrivals == [1000, 3000]
    row = [r for r in net.stats()["links"] if r["src"] == "a"][0]
    assert (row["busy_ns"], row["saturated_ns"]) == (2000, 2000)


def test_max_min_fairness_is_not_an_equal_split():
    """Parking lot: X and Y share s1 -> s2 (1 byte/ns); X and Z share s2 -> n3 (2 bytes/ns).
    Max-min: X = Y = 0.5, Z = 1.5 (the rest of s2 -> n3), not 1.0."""
    g = NetworkGraph(source="parking lot")
    for name in ("s1", "s2"):
        g.add_node(name, SWITCH)
    for name in ("n0", "n1", "n2", "n3", "n4"):
        g.add_node(name, NPU)
    g.add_link("n0", "s1", gbps(10.0), 0.0)
    g.add_link("n1", "s1", gbps(10.0), 0.0)
    g.add_link("s1", "s2", gbps(1.0), 0.0)
    g.add_link("s2", "n2", gbps(10.0), 0.0)
    g.add_link("s2", "n3", gbps(2.0), 0.0)
    g.add_link("n4", "s2", gbps(10.0), 0.0)
    g.set_ranks(["n0", "n1", "n2", "n3", "n4"])
    # X: 0 -> 3, Y: 1 -> 2, Z: 4 -> 3; 3000 bytes each.
    arrivals, net = run(g, [(0, 0, 3, 3000), (0, 1, 2, 3000), (0, 4, 3, 3000)])
    assert arrivals == [6000, 6000, 2000]
    # When Y starts late, X first gets 1.0 (s1 -> s2 alone) and Z 1.0 (s2 -> n3 shared by 2).
    # At 1000: X 2000 left, Z 2000 left; then X = Y = 0.5, Z = 1.5 -> Z ends at 1000 + 1333.33;
    # X and Y stay at 0.5 (s1 -> s2 is their bottleneck): X ends at 1000 + 4000 = 5000, when Y
    # has 1000 bytes left, which it sends alone at 1.0: 6000.
    arrivals, _ = run(g, [(0, 0, 3, 3000), (1000, 1, 2, 3000), (0, 4, 3, 3000)])
    assert arrivals == [5000, 6000, 2333]


def test_same_nanosecond_changes_are_one_recomputation():
    arrivals, net = run(star(9, bw=1.0), [(0, src, 8, 100) for src in range(8)])
    assert arrivals == [800] * 8
    assert net.recomputations == 2  # all start at 0; all end at 800
    assert net.stats()["flows"] == 8


# ---------------------------------------------------------------- latency and pipelining


def test_multi_hop_latency_and_segment_pipelining():
    # n0 -> s1 -> s2 -> n1: bandwidths 1, 2, 1 bytes/ns, latencies 10, 20, 30, switches 5 and 7.
    g = NetworkGraph(source="chain")
    g.add_node("n0", NPU)
    g.add_node("n1", NPU)
    g.add_node("s1", SWITCH, 5.0)
    g.add_node("s2", SWITCH, 7.0)
    g.add_link("n0", "s1", gbps(1.0), 10.0)
    g.add_link("s1", "s2", gbps(2.0), 20.0)
    g.add_link("s2", "n1", gbps(1.0), 30.0)
    g.set_ranks(["n0", "n1"])
    latency = 10 + 20 + 30 + 5 + 7
    # Cut-through: one serialisation at the slowest link.
    arrivals, _ = run(g, [(0, 0, 1, 10_000)])
    assert arrivals == [latency + 10_000]
    # segment_bytes: the first segment is stored and forwarded at each hop; fill =
    # s * (1/1 + 1/2 + 1/1 - 1/1) = 1.5 s.
    arrivals, _ = run(g, [(0, 0, 1, 10_000)], segment_bytes=1000)
    assert arrivals == [latency + 10_000 + 1500]
    # A message smaller than a segment is one segment.
    arrivals, _ = run(g, [(0, 0, 1, 400)], segment_bytes=1000)
    assert arrivals == [latency + 400 + 600]
    # Latency comes after the transfer: a second flow sent when the first's bytes are all on the
    # wire does not share bandwidth with it.
    arrivals, _ = run(g, [(0, 0, 1, 1000), (1000, 0, 1, 1000)])
    assert arrivals == [latency + 1000, latency + 2000]


def test_rounding_truncates_like_the_analytical_model():
    # 1000 bytes at 3 bytes/ns = 333.33 ns (+ 0.5 ns latency): arrival trunc(333.83) = 333.
    arrivals, _ = run(pair(bw=3.0, lat=0.5), [(0, 0, 1, 1000)])
    assert arrivals == [333]
    # Sharing: 1000 bytes each at 1.5 bytes/ns = 666.67 ns.
    arrivals, _ = run(pair(bw=3.0, lat=0.5), [(0, 0, 1, 1000), (0, 0, 1, 1000)])
    assert arrivals == [667, 667]


# ---------------------------------------------------------------- fat tree, ECMP


def test_fat_tree_oversubscription_hand_computed():
    """All-to-all of S bytes between 8 hosts in 2 pods of 4, flows split over both spines.

    1:1 (uplinks 2 bytes/ns): host links carry 3 intra-pod flows + 8 half-flows at 1/11 each;
    the half-flows end at 5.5 S, then the intra-pod flows finish their 0.5 S at 1/3: 7 S.
    2:1 (uplinks 1 byte/ns): 16 half-flows per uplink at 1/16; intra-pod flows get 1/6 and end at
    6 S; the half-flows end at 8 S. The uplinks are the bottleneck for the whole 8 S.
    """
    size = 100_000
    one, net_one = run(fat_tree(uplink_bw=2.0), all_to_all(8, size), ecmp="split")
    two, net_two = run(fat_tree(uplink_bw=1.0), all_to_all(8, size), ecmp="split")
    assert max(one) == pytest.approx(7 * size, abs=2)
    assert max(two) == pytest.approx(8 * size, abs=2)
    intra = [t for (_, s, d, _), t in zip(all_to_all(8, size), two) if s // 4 == d // 4]
    assert max(intra) == pytest.approx(6 * size, abs=2)
    uplinks = {(f"leaf{p}", f"spine{s}") for p in range(2) for s in range(2)}
    uplinks |= {(b, a) for a, b in uplinks}
    stats = net_two.stats(top=8)
    assert link_names(net_two, stats["bottleneck"]) == uplinks
    assert stats["bottleneck"][0]["saturated_ns"] == pytest.approx(8 * size, abs=2)
    hosts = {(f"p{p}h{h}", f"leaf{p}") for p in range(2) for h in range(4)}
    hosts |= {(b, a) for a, b in hosts}
    stats = net_one.stats(top=16)
    assert link_names(net_one, stats["bottleneck"]) == hosts
    assert all(row["saturated_ns"] == 0 for row in stats["links"] if (row["src"], row["dst"]) in uplinks)


def test_fat_tree_oversubscription_with_ecmp_hashing():
    size = 100_000
    one, _ = run(fat_tree(uplink_bw=2.0), all_to_all(8, size))
    two, net = run(fat_tree(uplink_bw=1.0), all_to_all(8, size))
    assert max(two) > 1.1 * max(one)
    top = net.stats()["bottleneck"][0]
    assert "spine" in top["src"] + top["dst"]


def test_ecmp_hash_spreads_across_spines_deterministically():
    g = fat_tree(spines=4, uplink_bw=1.0)
    sends = [(i * 10, 0, 4, 1000) for i in range(64)]
    arrivals, net = run(g, sends)
    paths = net.paths(0, 4)
    assert len(paths) == 4  # via each spine
    by_spine = {}
    for row in net.stats()["links"]:
        if row["src"] == "leaf0":
            by_spine[row["dst"]] = row["bytes"] // 1000
    assert sorted(by_spine) == ["spine0", "spine1", "spine2", "spine3"]
    assert sum(by_spine.values()) == 64 and min(by_spine.values()) >= 8
    # The k-th message of a pair takes path ecmp_index(src, dst, k, n): a stable hash, not
    # Python's salted hash(), so every run (and every PYTHONHASHSEED) routes the same way.
    assert [ecmp_index(0, 4, k, 4) for k in range(8)] == [ecmp_index(0, 4, k, 4) for k in range(8)]
    assert [ecmp_index(0, 4, k, 4) for k in range(8)] == EXPECTED_ECMP
    again, net2 = run(fat_tree(spines=4, uplink_bw=1.0), sends)
    assert again == arrivals
    assert net2.stats()["links"] == net.stats()["links"]
    counts = {}
    for k in range(64):
        spine = g.links[paths[ecmp_index(0, 4, k, 4)][1]].dst
        counts[spine] = counts.get(spine, 0) + 1
    assert counts == by_spine


EXPECTED_ECMP = [3, 0, 1, 2, 0, 3, 2, 3]  # regression values of the splitmix64-based hash


def test_ecmp_split_sends_part_of_each_message_on_every_path():
    arrivals, net = run(fat_tree(spines=4, uplink_bw=1.0), [(0, 0, 4, 4000)], ecmp="split")
    # 1000 bytes per spine at 1 byte/ns each, but the host links carry all four: 4000 ns.
    assert arrivals == [4000]
    rows = [r for r in net.stats()["links"] if r["src"] == "leaf0"]
    assert sorted(r["bytes"] for r in rows) == [1000] * 4
    assert net.stats()["flows"] == 4 and net.stats()["messages"] == 1


def test_widest_paths_prefer_the_host_switch():
    """Two GPUs of one host: GPU -> NVSwitch -> GPU (450 GB/s) and GPU -> leaf -> GPU (50 GB/s)
    are both two hops; the default keeps only the widest."""
    g = NetworkGraph(source="host")
    g.add_node("nvsw", SWITCH)
    g.add_node("leaf", SWITCH)
    for i in range(2):
        g.add_node(f"gpu{i}", NPU)
        g.add_link(f"gpu{i}", "nvsw", 450.0, 100.0)
        g.add_link(f"gpu{i}", "leaf", 50.0, 500.0)
    g.set_ranks(["gpu0", "gpu1"])
    engine = EventEngine()
    net = FlowNetwork(g, engine)
    assert [[g.links[i].dst for i in p] for p in net.paths(0, 1)] == [["nvsw", "gpu1"]]
    both = FlowNetwork(g, engine, path_selection="all")
    assert len(both.paths(0, 1)) == 2


def test_routes_never_cross_another_npu():
    # n0 - n1 - n2 in a line and a longer way round through a switch: n0 -> n2 must use the switch.
    g = NetworkGraph(source="line")
    for name in ("n0", "n1", "n2"):
        g.add_node(name, NPU)
    g.add_node("sw", SWITCH)
    g.add_link("n0", "n1", gbps(1.0), 0.0)
    g.add_link("n1", "n2", gbps(1.0), 0.0)
    g.add_link("n0", "sw", gbps(1.0), 0.0)
    g.add_link("sw", "n2", gbps(1.0), 0.0)
    g.set_ranks(["n0", "n1", "n2"])
    net = FlowNetwork(g, EventEngine())
    assert [[g.links[i].dst for i in p] for p in net.paths(0, 2)] == [["sw", "n2"]]


def test_links_in_series_are_one_constraint():
    """n0 -4- r0 -1- sw -2- n2 and n1 -2- r1 -2- sw: the relays r0 and r1 (two neighbours each)
    chain their links; only the slowest link of a chain takes part in the max-min computation and
    the others report what it reports when they are as fast."""
    g = NetworkGraph(source="relays")
    for name in ("n0", "n1", "n2"):
        g.add_node(name, NPU)
    for name in ("r0", "r1", "sw"):
        g.add_node(name, SWITCH)
    g.add_link("n0", "r0", gbps(4.0), 0.0)
    g.add_link("r0", "sw", gbps(1.0), 0.0)
    g.add_link("n1", "r1", gbps(2.0), 0.0)
    g.add_link("r1", "sw", gbps(2.0), 0.0)
    g.add_link("sw", "n2", gbps(2.0), 0.0)
    g.set_ranks(["n0", "n1", "n2"])
    # n0's flow is held to 1 by r0 -> sw; n1's gets the other 1 of sw -> n2, then 2 alone.
    arrivals, net = run(g, [(0, 0, 2, 2000), (0, 1, 2, 4000)])
    assert arrivals == [2000, 3000]
    (route,) = net.routes(0, 2)
    assert [(g.links[i].src, g.links[i].dst) for i in route.fill] == [("r0", "sw"), ("sw", "n2")]
    rows = {(r["src"], r["dst"]): r for r in net.stats()["links"]}
    assert rows[("n0", "r0")]["saturated_ns"] == 0 and rows[("r0", "sw")]["saturated_ns"] == 2000
    assert rows[("n1", "r1")]["saturated_ns"] == rows[("r1", "sw")]["saturated_ns"] == 1000
    assert rows[("sw", "n2")]["saturated_ns"] == 3000
    assert rows[("n0", "r0")]["bytes"] == rows[("r0", "sw")]["bytes"] == 2000
    assert rows[("n0", "r0")]["busy_ns"] == 2000 and rows[("n1", "r1")]["busy_ns"] == 3000


# ---------------------------------------------------------------- whole runs on a graph


def _fake_infragraph(monkeypatch, graph):
    module = types.ModuleType("astra_network_congestion.infragraph")
    module.load_network_graph = lambda path, context: graph
    monkeypatch.setitem(sys.modules, "astra_network_congestion.infragraph", module)


def test_whole_run_on_an_oversubscribed_fat_tree(tmp_path, monkeypatch):
    """from_context hands a non-analytical file to the InfraGraph loader; an all-to-all across
    pods is slower at 2:1 and the report's network_stats names the uplinks."""
    system = write_system_config(tmp_path / "sys.json", algorithm="direct")
    infra = tmp_path / "infra.yaml"
    infra.write_text("description: not an analytical network\ndevices: []\n")
    prefix = coll_trace(tmp_path, "a2a", 8, T.ALL_TO_ALL, 1 << 20)
    finish = {}
    stats = {}
    for ratio, uplink in (("1:1", 2.0), ("2:1", 1.0)):
        _fake_infragraph(monkeypatch, fat_tree(uplink_bw=uplink, lat=100.0))
        report = simulate(prefix, system, str(infra), network_backend="flow")
        finish[ratio] = report.max_finish_ns
        stats[ratio] = report.network_stats
    assert finish["2:1"] > 1.05 * finish["1:1"]
    top = stats["2:1"]["bottleneck"][0]
    assert {top["src"], top["dst"]} & {"spine0", "spine1"}
    top = stats["1:1"]["bottleneck"][0]
    assert "spine" not in top["src"] + top["dst"]


# ---------------------------------------------------------------- errors and report


def test_errors():
    g = pair()
    with pytest.raises(ConfigError, match="ecmp"):
        FlowNetwork(g, EventEngine(), ecmp="random")
    with pytest.raises(ConfigError, match="segment_bytes"):
        FlowNetwork(g, EventEngine(), segment_bytes=0)
    with pytest.raises(ConfigError, match="npus_per_dim"):
        FlowNetwork(g, EventEngine(), npus_per_dim=[4])
    net = FlowNetwork(g, EventEngine())
    with pytest.raises(SimulationError, match="itself"):
        net.send(1, 1, 10, print, None)
    with pytest.raises(SimulationError, match="not in the network"):
        net.send(0, 2, 10, print, None)
    g = NetworkGraph(source="islands")
    g.add_node("a", NPU)
    g.add_node("b", NPU)
    g.set_ranks(["a", "b"])
    with pytest.raises(ConfigError, match="no path"):
        FlowNetwork(g, EventEngine()).send(0, 1, 10, print, None)


def test_describe_and_stats_shape():
    arrivals, net = run(star(3, lat=5.0), [(0, 0, 1, 100), (0, 2, 1, 100)])
    d = net.describe()
    assert d["backend"] == "flow" and d["ecmp"] == "hash" and d["graph"]["npus"] == 3
    s = net.stats()
    assert {"links", "bottleneck", "messages", "flows", "recomputations"} <= set(s)
    for row in s["links"]:
        assert {"src", "dst", "bytes", "busy_ns", "saturated_ns", "max_concurrent_flows"} <= set(row)
    assert len(s["links"]) == 3  # n0 -> sw, n2 -> sw, sw -> n1


# ---------------------------------------------------------------- incremental refill = full refill


def reference_rates(flows, bw):
    """Max-min fair rates by textbook progressive filling over every flow (slow, obvious)."""
    users = {}
    for i, links in enumerate(flows):
        for link in links:
            users.setdefault(link, []).append(i)
    cap = {link: bw[link] for link in users}
    rate = {}
    while len(rate) < len(flows):
        best = None
        for link, on in users.items():
            n = sum(1 for i in on if i not in rate)
            if n and (best is None or cap[link] / n < best[0]):
                best = (cap[link] / n, link)
        share, link = best
        for i in users[link]:
            if i not in rate:
                rate[i] = share
                for other in flows[i]:
                    cap[other] -= share
    return [rate[i] for i in range(len(flows))]


@pytest.mark.parametrize("seed", range(6))
def test_incremental_refill_matches_full_max_min(seed):
    """After every recomputation the rates equal a from-scratch max-min allocation."""
    import random

    rng = random.Random(seed)
    g = fat_tree(pods=3, hosts=3, spines=3, uplink_bw=rng.choice([0.5, 1.0, 2.0]), lat=rng.choice([0.0, 30.0]),
                 nic_bw=[None, 0.75, 1.0][seed % 3])
    n = len(g.rank_node)
    sends = []
    for _ in range(150):
        src = rng.randrange(n)
        dst = rng.choice([d for d in range(n) if d != src])
        sends.append((rng.randrange(0, 30_000, rng.choice([1, 500])), src, dst, rng.randrange(100, 20_000)))
    engine = EventEngine()
    net = FlowNetwork(g, engine, ecmp=rng.choice(["hash", "split"]))
    bw = [link.bandwidth_bytes_per_ns for link in g.links]
    checked = []
    recompute = net._recompute

    def checked_recompute(arg=None):
        recompute(arg)
        flows = net.flow_rates()
        if flows:
            want = reference_rates([links for links, _ in flows], bw)
            assert [rate for _, rate in flows] == pytest.approx(want, rel=1e-9)
            checked.append(len(flows))

    net._recompute = checked_recompute
    arrivals = []
    for t, src, dst, size in sends:
        engine.schedule(t, lambda a: net.send(a[0], a[1], a[2], arrivals.append, a), (src, dst, size))
    engine.run()
    assert len(arrivals) == len(sends)
    assert len(checked) > 50 and max(checked) > 10


# ---------------------------------------------------------------- failed links


def two_paths(bw=1.0, lat=0.0):
    """``a`` and ``b`` joined through two switches in parallel: a -- s1 -- b and a -- s2 -- b."""
    g = NetworkGraph(source="two paths")
    for name in ("a", "b"):
        g.add_node(name, NPU)
    for s in ("s1", "s2"):
        g.add_node(s, SWITCH)
        g.add_link("a", s, gbps(bw), lat)
        g.add_link(s, "b", gbps(bw), lat)
    g.set_ranks(["a", "b"])
    return g


def test_a_failed_path_halves_the_capacity():
    """Split over two parallel paths of 1 byte/ns each, 4000 bytes take 2000 ns; with the cable s2-b down, every
    byte goes through s1 at 1 byte/ns: 4000 ns, the time of the remaining capacity."""
    arrivals, _ = run(two_paths(lat=10.0), [(0, 0, 1, 4000)], ecmp="split")
    assert arrivals == [2000 + 20]
    graph = two_paths(lat=10.0).without_links([["s2", "b"]])
    assert len(graph.links) == 6 and not any({link.src, link.dst} == {"s2", "b"} for link in graph.links)
    arrivals, net = run(graph, [(0, 0, 1, 4000)], ecmp="split")
    assert arrivals == [4000 + 20]
    assert [[graph.links[i].dst for i in p] for p in net.paths(0, 1)] == [["s1", "b"]]
    # Two messages at once (hash ECMP): on two paths each has a path alone; on one they share it.
    arrivals, _ = run(two_paths().without_links([["b", "s2"]]), [(0, 0, 1, 1000), (0, 0, 1, 1000)])
    assert arrivals == [2000, 2000]


def test_failed_ring_link_reroutes_the_long_way(tmp_path):
    """On a 4-NPU ring (from the analytical YAML, through from_context) the cable npu0-npu1 down sends 0 -> 1 the
    other way round: three hops of latency instead of one, the same bandwidth."""
    path = write_network_config(tmp_path / "ring.yml", ("Ring",), (4,), (gbps(1.0),), (100.0,))

    def arrival(options):
        engine = EventEngine()
        net = FlowNetwork.from_context(RunContext(engine=engine, system_config=None, network_config_path=path,
                                                  options=options))
        got = []
        net.send(0, 1, 5000, lambda _: got.append(engine.now), None)
        engine.run()
        return got[0], net

    assert arrival({})[0] == 5000 + 100
    took, net = arrival({"failed_links": [["npu1", "npu0"]]})
    assert took == 5000 + 300
    assert net.describe()["failed_links"] == [["npu1", "npu0"]]
    assert [net.graph.links[i].dst for i in net.paths(0, 1)[0]] == ["npu3", "npu2", "npu1"]


def test_failed_links_errors():
    with pytest.raises(ConfigError, match=r"option failed_links: no link joins 'a' and 'zz' in two paths"):
        two_paths().without_links([["a", "zz"]], "option failed_links")
    with pytest.raises(ConfigError, match="pair of node names"):
        two_paths().without_links(["a"])
    with pytest.raises(ConfigError, match="no path"):  # both paths down: no route is left
        run(two_paths().without_links([["a", "s1"], ["a", "s2"]]), [(0, 0, 1, 10)])
