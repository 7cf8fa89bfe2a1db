"""A Switch dimension built as leaves under a spine (run options fabric_nodes_per_leaf, fabric_oversubscription):
traffic of different NPUs shares the uplinks, on the flow and congestion backends."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError
from astra_sim_testing import arrival_times as arrivals, write_network_config

from astra_network_analytical import parse_network_config
from astra_network_congestion.builders import from_analytical
from astra_network_congestion.congestion import CongestionNetwork
from astra_network_congestion.flow import FlowNetwork

GIB = 1 << 30
BW = 1e9 / GIB  # GB/s (GB = 2^30 bytes) of exactly 1 byte/ns


def config(tmp_path, topology=("Switch", "Switch"), npus=(2, 4), latency=(10.0, 100.0)):
    return parse_network_config(write_network_config(tmp_path / "net.yml", topology, npus, (BW,) * len(npus),
                                                     latency))


def network(cls, tmp_path, **options):
    path = write_network_config(tmp_path / "net.yml", ("Switch", "Switch"), (2, 4), (BW, BW), (10.0, 100.0))
    engine = EventEngine()
    context = SimpleNamespace(network_config_path=path, engine=engine, options=options, warn=print)
    return cls.from_context(context), engine


def test_the_last_switch_dimension_becomes_leaves_under_a_spine(tmp_path):
    """2 x 4 NPUs, 2 members per leaf, 2:1: per group (rail) two leaves and a spine; uplinks of 2 x 1 / 2 bytes/ns."""
    graph, route = from_analytical(config(tmp_path), nodes_per_leaf=2, oversubscription=2)
    names = set(graph.nodes)
    assert {"d1.g0.spine", "d1.g0.leaf0", "d1.g0.leaf1", "d1.g1.spine", "d1.g1.leaf1"} <= names
    assert "d1.g0.switch" not in names and "d0.g0.switch" in names
    up = [link for link in graph.links if link.src == "d1.g0.leaf0" and link.dst == "d1.g0.spine"]
    assert len(up) == 1 and up[0].bandwidth_bytes_per_ns == pytest.approx(1.0) and up[0].latency_ns == 0.0
    hops = lambda s, d: [graph.links[i].dst for i in route(s, d)]  # noqa: E731
    assert hops(0, 2) == ["d1.g0.leaf0", "npu2"]  # rank 2 = node 1, GPU 0: the same leaf
    assert hops(0, 4) == ["d1.g0.leaf0", "d1.g0.spine", "d1.g0.leaf1", "npu4"]
    # dimension order: first to GPU 0 of its node over dimension 0, then over the tiers of rail 0
    assert hops(1, 6) == ["d0.g0.switch", "npu0", "d1.g0.leaf0", "d1.g0.spine", "d1.g0.leaf1", "npu6"]


def test_fabric_errors(tmp_path):
    with pytest.raises(ConfigError, match="fabric_nodes_per_leaf: expected an integer >= 1"):
        from_analytical(config(tmp_path), nodes_per_leaf=0)
    with pytest.raises(ConfigError, match="fabric_oversubscription: expected a number >= 1"):
        from_analytical(config(tmp_path), nodes_per_leaf=2, oversubscription=0.5)
    with pytest.raises(ConfigError, match="needs a Switch as the last dimension"):
        from_analytical(config(tmp_path, ("Switch", "Ring")), nodes_per_leaf=2)


def test_flow_one_to_one_is_the_single_switch_and_two_to_one_halves_shared_uplinks(tmp_path):
    """Ranks 0 -> 4 and 2 -> 6 both cross from leaf 0 to leaf 1 of rail 0. Alone each runs at its own 1 byte/ns, as
    on the single switch; together at 1:1 too (the uplink holds both); at 2:1 the uplink of 1 byte/ns is shared:
    each takes twice as long. Inside a leaf (0 -> 2) nothing changes."""
    size = 100_000
    flat, engine = network(FlowNetwork, tmp_path)
    alone = arrivals(flat, engine, [(0, 4, size)])[0]
    assert alone == size + 200
    one, engine = network(FlowNetwork, tmp_path, fabric_nodes_per_leaf=2, fabric_oversubscription=1)
    assert arrivals(one, engine, [(0, 4, size), (2, 6, size)]) == [alone, alone]
    assert one.describe()["fabric"] == {"nodes_per_leaf": 2, "oversubscription": 1}
    two, engine = network(FlowNetwork, tmp_path, fabric_nodes_per_leaf=2, fabric_oversubscription=2)
    assert arrivals(two, engine, [(0, 4, size)]) == [alone]
    two, engine = network(FlowNetwork, tmp_path, fabric_nodes_per_leaf=2, fabric_oversubscription=2)
    assert arrivals(two, engine, [(0, 4, size), (2, 6, size)]) == [2 * size + 200] * 2
    two, engine = network(FlowNetwork, tmp_path, fabric_nodes_per_leaf=2, fabric_oversubscription=2)
    assert arrivals(two, engine, [(0, 2, size), (4, 6, size)]) == [alone, alone]  # each inside its leaf


def test_congestion_shares_the_uplink_first_in_first_out(tmp_path):
    """Store and forward: at 2:1 (uplinks of 2 x 1 / 2 = 1 byte/ns) 0 -> 4 crosses four links of 1 byte/ns; two
    messages on one uplink queue behind each other there."""
    size = 100_000
    two, engine = network(CongestionNetwork, tmp_path, fabric_nodes_per_leaf=2, fabric_oversubscription=2)
    alone = arrivals(two, engine, [(0, 4, size)])[0]
    assert alone == 4 * size + 2 * 100  # four hops of 1 byte/ns, two of them with the dimension's latency
    two, engine = network(CongestionNetwork, tmp_path, fabric_nodes_per_leaf=2, fabric_oversubscription=2)
    first, second = sorted(arrivals(two, engine, [(0, 4, size), (2, 6, size)]))
    assert first == alone and second == alone + size  # the second waits one serialisation on the shared uplink
    two, engine = network(CongestionNetwork, tmp_path, fabric_nodes_per_leaf=2, fabric_oversubscription=2)
    assert arrivals(two, engine, [(0, 2, size), (4, 6, size)]) == [2 * size + 200] * 2  # inside a leaf: no uplink
