"""A cable that goes down in the middle of a run on the ``flow`` backend (the run option ``link_failures``), against
hand-computed times: links of whole bytes per ns, so every time is worked out on paper to the ns."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.api import RunContext
from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError, SimulationError
from astra_sim_testing import write_network_config

from astra_network_congestion.flow import FlowNetwork
from astra_network_congestion.graph import NPU, SWITCH, NetworkGraph
from astra_network_congestion.link_failures import arm, parse_link_failures


def gbps(bytes_per_ns):
    """The GB/s (GB = 2^30 bytes) for which NetworkGraph stores exactly ``bytes_per_ns``."""
    return bytes_per_ns * 1e9 / (1 << 30)


def two_paths(lat=10.0):
    """``a`` and ``b`` through two switches in parallel (a -- s1 -- b, a -- s2 -- b), 1 byte/ns per link."""
    g = NetworkGraph(source="two paths")
    for name in ("a", "b"):
        g.add_node(name, NPU)
    for s in ("s1", "s2"):
        g.add_node(s, SWITCH)
        g.add_link("a", s, gbps(1.0), lat)
        g.add_link(s, "b", gbps(1.0), lat)
    g.set_ranks(["a", "b"])
    return g


def run(graph, messages, failures=(), **kwargs):
    """``messages``: (time ns, src, dst, bytes); returns (arrival times in message order, network)."""
    engine = EventEngine()
    net = FlowNetwork(graph, engine, **kwargs)
    if failures:
        arm(net, [{"link": list(pair), "at_ns": at} for pair, at in failures])
    got = {}
    for i, (at, src, dst, size) in enumerate(messages):
        engine.schedule_at(at, lambda args: net.send(*args), (src, dst, size, lambda j: got.__setitem__(j, engine.now),
                                                             i))
    engine.run()
    return [got[i] for i in range(len(messages))], net


def test_split_message_a_path_down_mid_transfer_lies_between_intact_and_down_from_start():
    """4000 bytes split over two paths of 1 byte/ns (20 ns of latency each): intact, 2000 ns + 20. With a-s1 down
    from the start, all of it over s2: 4000 + 20. Down at T = 500: each half has sent 500 bytes; the 1500 left of
    the s1 half leave a again over s2, beside the 1500 left there: 3000 bytes at 1 byte/ns from 500, so the message
    arrives at 3500 + 20 (M/B - T + L)."""
    intact = run(two_paths(), [(0, 0, 1, 4000)], ecmp="split")[0]
    from_start = run(two_paths().without_links([["a", "s1"]]), [(0, 0, 1, 4000)], ecmp="split")[0]
    mid, net = run(two_paths(), [(0, 0, 1, 4000)], [(("a", "s1"), 500)], ecmp="split")
    assert (intact, from_start, mid) == ([2020], [4020], [3520])
    assert intact[0] < mid[0] < from_start[0]
    failure, = net.describe()["link_failures"]
    assert failure == {"link": ["a", "s1"], "at_ns": 500, "flows_rerouted": 1, "bytes_rerouted": 1500}
    by_link = {(row["src"], row["dst"]): row["bytes"] for row in net.stats()["links"]}
    assert by_link[("a", "s1")] == 500 and by_link[("a", "s2")] == 3500  # what each link really carried
    assert [[net.graph.links[i].dst for i in p] for p in net.paths(0, 1)] == [["s2", "b"]]


@pytest.mark.parametrize("at", [1, 999, 1999])
def test_the_finish_time_follows_the_failure_time(at):
    """M/B - T + L for every T before the intact transfer ends: the later the cable fails, the sooner it arrives."""
    mid, _ = run(two_paths(), [(0, 0, 1, 4000)], [(("s1", "b"), at)], ecmp="split")
    assert mid == [4000 - at + 20]


def test_a_failure_after_the_transfer_changes_nothing():
    mid, net = run(two_paths(), [(0, 0, 1, 4000)], [(("a", "s1"), 3000)], ecmp="split")
    assert mid == [2020]
    assert net.describe()["link_failures"][0]["flows_rerouted"] == 0


def test_one_flow_moves_to_the_other_path_and_shares_it_max_min():
    """Hash ECMP: two 3000-byte messages, one per path (their hashes differ). At T = 1000 the first one's path
    fails: its 2000 bytes left join the other's 2000 on the other path, 0.5 byte/ns each: both end at 1000 + 4000,
    where each alone on its path, intact, ends at 3000."""
    intact, net = run(two_paths(lat=0.0), [(0, 0, 1, 3000), (0, 0, 1, 3000)])
    assert intact == [3000, 3000]
    used = {net.graph.links[row["link"]].dst for row in net.stats()["links"] if row["src"] == "a"}
    assert used == {"s1", "s2"}
    messages = [(0, 0, 1, 3000), (0, 0, 1, 3000)]
    for switch in ("s1", "s2"):
        mid, net = run(two_paths(lat=0.0), messages, [((switch, "b"), 1000)])
        assert mid == [5000, 5000]
        assert net.describe()["link_failures"][0]["bytes_rerouted"] == 2000


def test_a_message_sent_after_the_failure_avoids_the_cable():
    mid, net = run(two_paths(lat=0.0), [(100, 0, 1, 1000), (100, 0, 1, 1000)], [(("a", "s2"), 50)])
    assert mid == [2100, 2100]  # both on s1: they share it
    assert net.describe()["link_failures"][0]["flows_rerouted"] == 0


def test_a_failure_that_cuts_the_endpoints_apart_is_an_error_naming_the_link_not_a_hang():
    g = NetworkGraph(source="pair")
    g.add_node("a", NPU)
    g.add_node("b", NPU)
    g.add_link("a", "b", gbps(1.0), 0.0)
    g.set_ranks(["a", "b"])
    with pytest.raises(SimulationError, match="link b-a went down at 300 ns and left no path from NPU 0 to NPU 1, "
                                              "with 700 bytes"):
        run(g, [(0, 0, 1, 1000)], [(("b", "a"), 300)])


def test_from_context_ring_reroutes_the_long_way_at_the_failure(tmp_path):
    """A 4-NPU ring from the analytical YAML, 0 -> 1 of 5000 bytes at 1 byte/ns, 100 ns per hop: the cable 0-1 fails
    at 2000 ns. The 3000 bytes left go round the other way: 5000 ns of transfer, then three hops of latency."""
    path = write_network_config(tmp_path / "ring.yml", ("Ring",), (4,), (gbps(1.0),), (100.0,))
    engine = EventEngine()
    net = FlowNetwork.from_context(RunContext(engine=engine, system_config=None, network_config_path=path,
                                              options={"link_failures": [{"link": ["npu1", "npu0"], "at_ns": 2000}]}))
    got = []
    net.send(0, 1, 5000, lambda _: got.append(engine.now), None)
    engine.run()
    assert got == [5000 + 300]
    assert net.describe()["link_failures"][0]["link"] == ["npu1", "npu0"]


@pytest.mark.parametrize("value, expected", [
    ({"link": ["a", "s1"], "at_ns": 5}, "expected a list"),
    ([{"link": ["a", "s1"]}], r"\[0\]: expected \{link: \[a, b\], at_ns: T\}"),
    ([{"link": ["a"], "at_ns": 5}], r"\[0\].link: expected a pair of node names"),
    ([{"link": ["a", "s1"], "at_ns": -1}], r"\[0\].at_ns: expected an integer >= 0"),
    ([{"link": ["a", "s1"], "at_ns": 1.5}], r"\[0\].at_ns: expected an integer >= 0"),
    ([{"link": ["a", "s1"], "at_ns": True}], r"\[0\].at_ns: expected an integer >= 0"),
    ([{"link": ["a", "zz"], "at_ns": 5}], "option link_failures: no link joins 'a' and 'zz' in two paths"),
])
def test_bad_link_failures_are_one_line_naming_the_option(value, expected):
    with pytest.raises(ConfigError, match=expected) as info:
        arm(FlowNetwork(two_paths(), EventEngine()), value)
    assert "\n" not in str(info.value)


def test_fixed_routes_refuse_link_failures():
    net = FlowNetwork(two_paths(), EventEngine(), route_fn=lambda s, d: [0, 1])
    with pytest.raises(ConfigError, match="fixed routes"):
        arm(net, [{"link": ["a", "s1"], "at_ns": 5}])


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
                 st.lists(st.dictionaries(st.sampled_from(["link", "at_ns", "x"]),
                                          st.one_of(st.integers(-3, 3), st.lists(st.text(max_size=3), max_size=3),
                                                    st.none()), max_size=3), max_size=3)))
def test_any_option_value_parses_or_is_a_config_error(value):
    try:
        failures = parse_link_failures(value)
    except ConfigError as exc:
        assert str(exc).startswith("option link_failures") and "\n" not in str(exc)
        return
    assert all(isinstance(a, str) and isinstance(b, str) and at >= 0 for a, b, at in failures)
