"""Folded runs on the ``congestion`` backend (issue 37): one queue per link orbit gives exactly the unfolded run's
finish times, breakdown and per-link statistics, or the run is simulated unfolded and says why."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_sim_testing import write_network_config, write_system_config
from astra_sim import simulate
from astra_sim.engine import EventEngine
from astra_sim.errors import FoldAbandoned
from astra_folding.symmetry import BlockShift, RankSymmetry
from astra_sim.cli import main
from astra_network_analytical import parse_network_config
from astra_network_congestion.builders import from_analytical
from astra_network_congestion.congestion import CongestionNetwork
from astra_network_congestion.congestion_fold import FoldLinkTie, link_orbits

COMPARED = ("summary", "network_stats", "ranks", "rank_classes", "breakdown")


def assert_same(folded, unfolded):
    """The reports agree on every finish time, breakdown and per-link statistic."""
    compared = [key for key in COMPARED if key in unfolded]
    assert len(compared) == 4
    for key in compared:
        assert folded[key] == unfolded[key], key


def run_cli(argv, capsys=None):
    assert main(argv) == 0, argv
    return capsys.readouterr().out if capsys is not None else ""


def _network_yaml(path, topology, counts):
    return write_network_config(path, topology, counts, [50.0] * len(counts), [500.0] * len(counts))


def _system_json(path, dims, all_to_all="direct"):
    return write_system_config(path, dims, all_to_all_implementation=[all_to_all] * dims)


def _folded_and_unfolded(tmp_path, topology, counts, collective, size):
    total = 1
    for count in counts:
        total *= count
    prefix = str(tmp_path / "w")
    run_cli(["workload", "micro", "--collective", collective, "--npus", str(total), "--size", size,
             "-o", prefix])
    kwargs = dict(workload=prefix, system=_system_json(tmp_path / "sys.json", len(counts)),
                  network=_network_yaml(tmp_path / "net.yml", topology, counts), network_backend="congestion")
    folded = simulate(**kwargs).to_dict()
    unfolded = simulate(**kwargs, fold=False).to_dict()
    return folded, unfolded, total


@pytest.mark.parametrize("topology, counts, collective", [
    (["Ring"], [8], "all_reduce"),
    (["Switch"], [16], "all_reduce"),
    (["Ring", "Switch"], [4, 4], "all_reduce"),
    (["Switch", "Switch"], [8, 4], "reduce_scatter"),
    (["FullyConnected", "Ring"], [4, 4], "all_gather"),
    (["Switch"], [8], "all_to_all"),
    (["Ring"], [8], "all_to_all"),  # multi-hop routes: forwarded messages share the orbit's queue
])
def test_a_symmetric_collective_folds_to_one_rank_and_gives_the_unfolded_answer(tmp_path, topology, counts,
                                                                                 collective):
    folded, unfolded, total = _folded_and_unfolded(tmp_path, topology, counts, collective, "1MiB")
    assert folded["settings"]["fold"]["simulated_ranks"] == 1 < total
    assert_same(folded, unfolded)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dims=st.lists(st.tuples(st.sampled_from(["Ring", "Switch", "FullyConnected"]), st.integers(2, 4)),
                     min_size=1, max_size=2),
       collective=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]),
       size=st.sampled_from(["4KiB", "96KiB", "1MiB"]))
def test_random_networks_and_collectives_fold_exactly_or_not_at_all(tmp_path_factory, dims, collective, size):
    tmp_path = tmp_path_factory.mktemp("case")
    folded, unfolded, _ = _folded_and_unfolded(tmp_path, [d[0] for d in dims], [d[1] for d in dims],
                                               collective, size)
    assert_same(folded, unfolded)


def _ring_network(tmp_path, count):
    config = parse_network_config(_network_yaml(tmp_path / "ring.yml", ["Ring"], [count]))
    graph, route_fn = from_analytical(config)
    return graph, route_fn


def test_every_link_maps_to_the_link_its_npu_end_takes_to_the_representative(tmp_path):
    graph, _ = _ring_network(tmp_path, 4)
    canonical = link_orbits(graph, [(1, 4, "Ring")], RankSymmetry([BlockShift(1, 4, 4)]))
    named = {(graph.links[i].src, graph.links[i].dst): (graph.links[c].src, graph.links[c].dst)
             for i, c in enumerate(canonical)}
    assert named[("npu2", "npu3")] == ("npu0", "npu1")  # clockwise links: one orbit
    assert named[("npu3", "npu2")] == ("npu0", "npu3")  # counter-clockwise: the other
    assert named[("npu1", "npu0")] == ("npu0", "npu3")
    assert len(set(canonical)) == 2


def test_a_ring_rotated_in_blocks_or_a_shift_across_dimensions_is_refused(tmp_path):
    graph, _ = _ring_network(tmp_path, 4)
    with pytest.raises(FoldAbandoned, match="ring"):
        link_orbits(graph, [(1, 4, "Ring")], RankSymmetry([BlockShift(1, 4, 2)]))
    with pytest.raises(FoldAbandoned, match="ring"):
        link_orbits(graph, [(1, 4, "Ring")], RankSymmetry([BlockShift(2, 2, 2)]))
    with pytest.raises(FoldAbandoned, match="no single network dimension"):
        link_orbits(graph, [(1, 2, "Switch"), (2, 2, "Switch")], RankSymmetry([BlockShift(1, 4, 4)]))


def test_a_digit_inside_a_switch_dimension_permutes_its_members(tmp_path):
    config = parse_network_config(_network_yaml(tmp_path / "sw.yml", ["Switch", "Switch"], [4, 2]))
    graph, _ = from_analytical(config)
    # rotate the upper digit of dimension 0 (ranks 0,2 <-> 1,3 stay; 0 <-> 2, 1 <-> 3 swap), and dimension 1
    canonical = link_orbits(graph, [(1, 4, "Switch"), (4, 2, "Switch")],
                            RankSymmetry([BlockShift(2, 2, 2), BlockShift(4, 2, 2)]))
    named = {(graph.links[i].src, graph.links[i].dst): (graph.links[c].src, graph.links[c].dst)
             for i, c in enumerate(canonical)}
    assert named[("npu2", "d0.g0.switch")] == ("npu0", "d0.g0.switch")
    assert named[("npu7", "d1.g3.switch")] == ("npu1", "d1.g1.switch")
    assert named[("d0.g1.switch", "npu7")] == ("d0.g0.switch", "npu1")


def test_two_messages_entering_one_orbit_at_once_through_different_links_abandon_the_fold(tmp_path):
    """Rank 0's message to 2 reaches link 1 -> 2 at the nanosecond rank 0 sends again on 0 -> 1: in the unfolded
    run link 1 -> 2 then takes rank 1's new message and rank 0's forwarded one at once, in an order the fold does
    not know."""
    graph, route_fn = _ring_network(tmp_path, 4)
    engine = EventEngine()
    network = CongestionNetwork(graph, engine, route_fn, [4])
    network.fold_layout = [(1, 4, "Ring")]
    network.fold_links(RankSymmetry([BlockShift(1, 4, 4)]))
    size = 50 * 1000  # 50 KB: trunc(L + m/B) = 500 + 931 ns on a 50 GiB/s link
    first_hop = int(500 + size / graph.links[0].bandwidth_bytes_per_ns)
    network.send(0, 2, size, lambda _: None, None)
    engine.schedule(first_hop, lambda _: network.send(0, 1, size, lambda _: None, None), None)
    with pytest.raises(FoldLinkTie, match="same nanosecond|at .* ns"):
        engine.run()


def test_a_data_parallel_step_on_a_platform_folds_on_congestion_and_says_so(tmp_path, capsys):
    prefix = str(tmp_path / "dp")
    run_cli(["workload", "llm", "--preset", "llama3-8b", "--dp", "32", "--layers", "2", "--seq-len", "512", "-o", prefix])
    common = ["run", "--platform", "hgx-h100", "--nodes", "4", "--workload-configuration", prefix,
              "--network-backend", "congestion"]
    capsys.readouterr()
    out = run_cli(common + ["-o", str(tmp_path / "f.json")], capsys)
    assert "simulated 1 of 32 ranks" in out
    run_cli(common + ["--no-fold", "-o", str(tmp_path / "u.json")])
    folded, unfolded = (json.loads((tmp_path / name).read_text()) for name in ("f.json", "u.json"))
    assert_same(folded, unfolded)
