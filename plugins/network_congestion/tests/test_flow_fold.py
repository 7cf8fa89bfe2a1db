"""Folded runs on the ``flow`` backend (issue 37): each simulated flow stands for its images under the rank
symmetry, each link for its orbit, and the reports equal ``--no-fold``'s; or the run is simulated unfolded and says
why (:mod:`astra_network_congestion.flow_fold`)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_sim_testing import write_network_config, write_system_config
from astra_sim import simulate
from astra_sim.cli import main
from astra_sim.engine import EventEngine
from astra_sim.errors import FoldAbandoned
from astra_folding.symmetry import BlockShift, RankSymmetry
from astra_network_analytical import parse_network_config
from astra_network_congestion.builders import from_analytical
from astra_network_congestion.flow import FlowNetwork
from astra_network_congestion.flow_fold import NotAutomorphism, extend, link_orbits, symmetry_kinds

COMPARED = ("summary", "network_stats", "ranks", "rank_classes", "breakdown")


def assert_same(folded, unfolded):
    compared = [key for key in COMPARED if key in unfolded]
    assert len(compared) >= 4
    for key in compared:
        assert folded[key] == unfolded[key], key


def _network_yaml(path, topology, counts, bandwidth=None):
    return write_network_config(path, topology, counts, bandwidth or [50.0] * len(counts), [500.0] * len(counts))


def _system_json(path, dims, all_to_all="direct"):
    return write_system_config(path, dims, all_to_all_implementation=[all_to_all] * dims)


def _workload(tmp_path, collective, total, size):
    prefix = str(tmp_path / "w")
    assert main(["workload", "micro", "--collective", collective, "--npus", str(total), "--size", size,
                 "-o", prefix]) == 0
    return prefix


def _folded_and_unfolded(tmp_path, topology, counts, collective, size, ecmp="split", extra=None):
    total = 1
    for count in counts:
        total *= count
    options = {"flow_ecmp": ecmp}
    options.update(extra or {})
    kwargs = dict(workload=_workload(tmp_path, collective, total, size),
                  system=_system_json(tmp_path / "sys.json", len(counts)),
                  network=_network_yaml(tmp_path / "net.yml", topology, counts), network_backend="flow",
                  options=options)
    folded = simulate(**kwargs).to_dict()
    unfolded = simulate(**kwargs, fold=False).to_dict()
    return folded, unfolded, total


@pytest.mark.parametrize("topology, counts, collective", [
    (["Switch"], [8], "all_reduce"),
    (["Ring"], [8], "all_reduce"),  # even ring: two shortest paths to the opposite NPU, split over both
    (["Ring", "Switch"], [4, 4], "all_reduce"),
    (["FullyConnected", "Switch"], [4, 4], "all_gather"),
    (["Ring"], [8], "all_to_all"),  # forwarded flows cross two links of one orbit
])
def test_a_symmetric_collective_folds_to_one_rank_and_gives_the_unfolded_answer(tmp_path, topology, counts,
                                                                                 collective):
    folded, unfolded, total = _folded_and_unfolded(tmp_path, topology, counts, collective, "1MiB")
    assert folded["settings"]["fold"]["simulated_ranks"] == 1 < total
    assert folded["settings"]["network"]["folded_links"] < len(folded["network_stats"]["links"])
    assert_same(folded, unfolded)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dims=st.lists(st.tuples(st.sampled_from(["Ring", "Switch", "FullyConnected"]), st.integers(2, 4)),
                     min_size=1, max_size=2),
       collective=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]),
       size=st.sampled_from(["4KiB", "96KiB", "1MiB"]), ecmp=st.sampled_from(["split", "hash"]))
def test_random_networks_and_collectives_fold_exactly_or_not_at_all(tmp_path_factory, dims, collective, size, ecmp):
    tmp_path = tmp_path_factory.mktemp("case")
    folded, unfolded, _ = _folded_and_unfolded(tmp_path, [d[0] for d in dims], [d[1] for d in dims],
                                               collective, size, ecmp)
    assert_same(folded, unfolded)


def test_a_rail_fat_tree_folds_the_gpus_of_a_host_and_says_why_not_its_hosts(tmp_path):
    """2-tier rail fabric, 4 hosts x 4 GPUs, 2 hosts per leaf: permuting the GPUs of every host (the rails) is an
    automorphism; rotating the hosts moves host 1 under the other leaf, which is not."""
    folded, unfolded, total = _folded_and_unfolded(tmp_path, ["Switch", "Switch"], [4, 4], "all_reduce", "1MiB",
                                                   extra={"fabric": "rail:nodes_per_leaf=2"})
    assert folded["settings"]["fold"]["simulated_ranks"] == 4
    assert any("dimension 1: rotating its coordinates is not an automorphism" in note
               for note in folded["settings"]["network"]["fold_notes"])
    assert_same(folded, unfolded)


def test_hash_ecmp_over_several_paths_is_refused_with_its_reason(tmp_path):
    folded, unfolded, total = _folded_and_unfolded(tmp_path, ["Switch", "Switch"], [4, 2], "all_reduce", "1MiB",
                                                   ecmp="hash")
    assert folded["settings"]["fold"]["simulated_ranks"] == total
    assert "ECMP hash" in folded["settings"]["fold"]["reason"]
    assert_same(folded, unfolded)


# ------------------------------------------------------------ the network alone: images sent vs representatives


def _tree(tmp_path, counts, nodes_per_leaf, bandwidth=None):
    config = parse_network_config(_network_yaml(tmp_path / "tree.yml", ["Switch"] * len(counts), counts, bandwidth))
    graph, _route = from_analytical(config, nodes_per_leaf=nodes_per_leaf)
    return graph


def _images(symmetry):
    return list(itertools.product(*[range(shift.block) for shift in symmetry.shifts]))


def _run(graph, sends, symmetry=None, ecmp="split"):
    """``sends``: ``(time, src, dst, size)``. With ``symmetry`` the network is folded and only these are sent;
    without, they are the unfolded run's messages. Returns the arrival of every message and the stats."""
    engine = EventEngine()
    network = FlowNetwork(graph, engine, ecmp=ecmp)
    if symmetry is not None:
        network.fold_links(symmetry)
    arrivals = {}

    def send(item):
        key, src, dst, size = item
        network.send(src, dst, size, lambda k: arrivals.__setitem__(k, engine.now), key)

    for key, (time, src, dst, size) in enumerate(sends):
        engine.schedule(time, send, ((time, src, dst, size), src, dst, size))
    engine.run()
    return arrivals, network.stats(top=1000)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), nodes_per_leaf=st.sampled_from([1, 2, 4]), gpus=st.sampled_from([1, 2]),
       uplink=st.sampled_from([None, [30.0, 10.0]]))
def test_folded_flows_get_the_rates_their_images_get_unfolded(tmp_path_factory, data, nodes_per_leaf, gpus, uplink):
    """A 2-tier tree (``gpus`` per host on a host switch, 4 hosts, leaves of ``nodes_per_leaf``): the group rotates
    the GPUs of every host and the hosts inside each leaf, so the leaf uplinks are fixed by it (weights > 1).
    Random messages from the representatives, sent with all their images unfolded and alone folded, arrive at
    the same nanoseconds and leave the same per-link statistics."""
    graph = _tree(tmp_path_factory.mktemp("tree"), [gpus, 4], nodes_per_leaf, uplink)
    shifts = []
    if gpus > 1:
        shifts.append(BlockShift(1, gpus, gpus))
    if nodes_per_leaf > 1:
        shifts.append(BlockShift(gpus, 4, nodes_per_leaf))
    if not shifts:
        shifts.append(BlockShift(gpus, 4, 4))  # one host per leaf: the leaves rotate
    symmetry = RankSymmetry(shifts)
    total = len(graph.rank_node)
    reps = symmetry.representatives(total)
    sends = []
    for _ in range(data.draw(st.integers(1, 12))):
        src = data.draw(st.sampled_from(reps))
        dst = data.draw(st.sampled_from([r for r in range(total) if r != src]))
        sends.append((data.draw(st.sampled_from([0, 0, 300, 1000, 2500])), src, dst,
                      data.draw(st.sampled_from([4096, 65536, 100_000, 1 << 20]))))
    images = []
    for offsets in _images(symmetry):
        for time, src, dst, size in sends:
            images.append((time, symmetry.moved(src, offsets), symmetry.moved(dst, offsets), size))
    unfolded_arrivals, unfolded_stats = _run(graph, images)
    folded_arrivals, folded_stats = _run(graph, sends, symmetry)
    assert folded_arrivals == {key: unfolded_arrivals[key] for key in folded_arrivals}
    assert len(folded_arrivals) == len(set(sends))
    assert folded_stats == unfolded_stats


def test_the_send_order_within_a_nanosecond_does_not_change_any_rate(tmp_path):
    """Rates are recomputed once at the end of a nanosecond, numbering-independently: the same messages sent in
    reverse order arrive at the same times."""
    graph = _tree(tmp_path, [2, 4], 2, [30.0, 7.0])
    sends = [(0, s, (s + 5) % 8, 100_000 + 1000 * s) for s in range(8)] + [(0, 1, 2, 3000), (700, 6, 0, 50_000)]
    forward, stats = _run(graph, sends)
    backward, stats_back = _run(graph, list(reversed(sends)))
    assert forward == backward
    assert stats["links"] == stats_back["links"]


def test_an_uplink_fixed_by_the_group_counts_every_image_flow(tmp_path):
    graph = _tree(tmp_path, [4], 2)  # 4 NPUs, leaves of 2 under one spine
    symmetry = RankSymmetry([BlockShift(1, 4, 2)])  # swap the members of each leaf
    canonical, weight = link_orbits(graph, symmetry)
    by_name = {(link.src, link.dst): link.index for link in graph.links}
    uplink = by_name[("d0.g0.leaf0", "d0.g0.spine")]
    assert canonical[uplink] == uplink and weight[uplink] == 2  # fixed: each flow up it stands for 2
    first, second = by_name[("npu0", "d0.g0.leaf0")], by_name[("npu1", "d0.g0.leaf0")]
    assert canonical[second] == first and weight[first] == 1


def test_kinds_and_refusals_say_which_relabellings_the_graph_keeps(tmp_path):
    graph = _tree(tmp_path, [2, 4], 2)
    kinds, notes = symmetry_kinds(graph, [2, 4])
    assert kinds == ["any", "none"] and "dimension 1" in notes[0]
    with pytest.raises(NotAutomorphism, match="no image"):
        extend(graph, [(r + 2) % 8 for r in range(8)])  # hosts rotated across the leaves
    with pytest.raises(FoldAbandoned, match="not an automorphism"):
        link_orbits(graph, RankSymmetry([BlockShift(2, 4, 4)]))
    ring = parse_network_config(_network_yaml(tmp_path / "ring.yml", ["Ring"], [5]))
    ring_graph, _ = from_analytical(ring)
    assert symmetry_kinds(ring_graph, [5])[0] == ["rotation"]


def test_an_asymmetric_placement_does_not_fold(tmp_path):
    """One slower NIC link: no relabelling that moves its NPU keeps the graph."""
    graph = _tree(tmp_path, [4], 4)
    slow = next(link for link in graph.links if link.src == "npu3")
    slow.bandwidth_bytes_per_ns /= 2
    kinds, notes = symmetry_kinds(graph, [4])
    assert kinds == ["none"] and "not an automorphism" in notes[0]


def test_hash_ecmp_and_fixed_routes_refuse(tmp_path):
    graph = _tree(tmp_path, [2, 2], None)  # two Switch dimensions: two equal paths between diagonal NPUs
    symmetry = RankSymmetry([BlockShift(1, 2, 2)])
    with pytest.raises(FoldAbandoned, match="ECMP hash"):
        FlowNetwork(graph, EventEngine(), ecmp="hash").fold_links(symmetry)
    FlowNetwork(graph, EventEngine(), ecmp="split").fold_links(symmetry)
    fixed = FlowNetwork(graph, EventEngine(), route_fn=lambda s, d: [])
    assert fixed.symmetry_dims() is None


@pytest.mark.parametrize("failure", [{"failed_links": [["npu0", "d0.g0.switch"]]},
                                     {"link_failures": [{"link": ["npu0", "d1.g0.switch"], "at_ns": 2000}]}])
def test_failed_links_do_not_fold_and_say_why(tmp_path, failure):
    folded, unfolded, total = _folded_and_unfolded(tmp_path, ["Switch", "Switch"], [4, 2], "all_reduce", "1MiB",
                                                   extra=failure)
    assert folded["settings"]["fold"]["simulated_ranks"] == total
    notes = " ".join(folded["settings"]["network"]["fold_notes"])
    assert ("not an automorphism" in notes) if "failed_links" in failure else ("link_failures" in notes)
    assert_same(folded, unfolded)
