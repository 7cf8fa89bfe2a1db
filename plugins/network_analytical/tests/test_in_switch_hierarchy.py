"""Hierarchical in-network reduction (issue 26): a communicator group spanning the leaf and the spine.

Network: a ring of 2 (dim 0), 4 leaves' worth of NPUs per leaf switch (dim 1), 4 leaves under a spine (dim 2);
groups span dims 1 and 2 (16 NPUs each). With ``inSwitch`` listed for both, a collective is one in-switch phase
over the group (an aggregation tree: leaf and spine each reduce once); with it listed for one tier, the group
is walked per dimension (in-switch at that tier, ring at the other); a group that is not a box runs ring with a
warning.
"""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_sim_testing import system_config

GIB = 1 << 30
BW, LAT, E = 100.0, 500.0, 10
GROUPS = {1 + i: [i + 2 * k for k in range(16)] for i in range(2)}  # NPUs sharing their dim-0 coordinate


def line_rate(gbps=BW):
    return gbps * GIB / 1e9


def run(tmp_path, impl, size=GIB, groups=GROUPS, comm=T.ALL_REDUCE, fold=False, extra="", uniform=True):
    net = tmp_path / "net.yml"
    net.write_text(f"topology: [Ring, Switch, Switch]\nnpus_count: [2, 4, 4]\nbandwidth: [{8 * BW}, {BW}, {BW}]\n"
                   f"latency: [{LAT}, {LAT}, {LAT}]\ncross_dimension_route: dimension_order\n{extra}")
    config = system_config(dims=3, local_mem_bw=1_000_000)
    for key in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all"):
        config[f"{key}-implementation"] = list(impl)
    (tmp_path / "sys.json").write_text(json.dumps(config))
    (tmp_path / "groups.json").write_text(json.dumps({str(k): v for k, v in groups.items()}))
    for rank in range(32):
        group = next((k for k, v in groups.items() if rank in v), None)
        attrs = {"is_cpu_op": False, "comm_type": comm, "comm_size": size}
        if group is not None:
            attrs["pg_name"] = str(group)
        write_et(f"{tmp_path}/w.{rank}.et", make_metadata(), [make_node(1, "c", T.COMM_COLL_NODE, attrs=attrs)])
    warnings = []
    report = simulate(f"{tmp_path}/w", str(tmp_path / "sys.json"), str(net), comm_groups=str(tmp_path / "groups.json"),
                      fold=fold, on_warning=warnings.append)
    finish = {r.finish_ns for r in report.ranks if any(r.rank in v for v in groups.values())}
    assert len(finish) == 1 or not uniform
    return max(finish), warnings


def test_leaf_and_spine_reduce_as_one_aggregation_tree(tmp_path):
    both, warnings = run(tmp_path, ["ring", "inSwitch", "inSwitch"])
    assert not warnings
    chunk = GIB // 4
    # one phase per chunk: the farthest neighbour crosses leaf and spine (2 L each), c / B, no extra latency
    assert both == 4 * (E + int(4 * LAT + chunk / line_rate()) + E)
    assert both == pytest.approx(GIB / line_rate(), rel=0.10)
    ring, _ = run(tmp_path, ["ring", "ring", "ring"])
    assert ring == pytest.approx(2 * 15 / 16 * GIB / line_rate(), rel=0.10)


def test_one_tier_reducing_composes_with_ring_on_the_other(tmp_path):
    both, _ = run(tmp_path, ["ring", "inSwitch", "inSwitch"])
    leaf, w1 = run(tmp_path, ["ring", "inSwitch", "ring"])
    spine, w2 = run(tmp_path, ["ring", "ring", "inSwitch"])
    ring, _ = run(tmp_path, ["ring", "ring", "ring"])
    assert not w1 and not w2
    assert both < leaf < ring and both < spine < ring
    # leaf only: in-switch reduce-scatter in the leaf (c / B per chunk), a ring all-reduce of c / 4 over the 4
    # leaves, in-switch multicast back (c / B); chunks pipeline over the phases, so less than their sum
    # (2 + 3/8) S / B and more than the tree's S / B
    ideal = GIB / line_rate()
    assert ideal < leaf < (2 + 3 / 8) * ideal
    # spine only: ring reduce-scatter in the leaf (3/4 c / B), in-switch all-reduce of c / 4, ring all-gather
    assert ideal < spine < (3 / 2 + 1 / 4) * ideal


def test_the_tree_adds_each_tiers_reduction_latency_and_takes_the_slowest_rate(tmp_path):
    extra = "switch_reduction_latency: [0, 300, 700]\nswitch_reduction_bandwidth: [null, null, 50]\n"
    slow, _ = run(tmp_path, ["ring", "inSwitch", "inSwitch"], extra=extra)
    chunk = GIB // 4
    message = int(4 * LAT + chunk / line_rate())
    assert slow == 4 * (E + message + 1000 + int(chunk / line_rate(50) - chunk / line_rate()) + E)


def test_reduce_scatter_and_all_gather_on_the_tree(tmp_path):
    rs, _ = run(tmp_path, ["ring", "inSwitch", "inSwitch"], comm=T.REDUCE_SCATTER)
    ag, _ = run(tmp_path, ["ring", "inSwitch", "inSwitch"], size=GIB // 16, comm=T.ALL_GATHER)
    chunk = GIB // 4
    assert rs == 4 * (E + int(4 * LAT + chunk / line_rate()) + E)
    agc = GIB // 16 // 4
    assert ag == 4 * (E + int(4 * LAT + 15 * agc / line_rate()) + E)


def test_a_group_that_is_not_a_box_runs_ring_with_a_warning(tmp_path):
    odd = {1: list(range(0, 30, 2)), 2: list(range(1, 32, 2)) + [30]}  # 15 and 17 NPUs: no boxes
    result, warnings = run(tmp_path, ["ring", "inSwitch", "inSwitch"], groups=odd, size=16 << 20, uniform=False)
    assert any("group 1 spans network dimensions [1, 2] but is not a box" in w for w in warnings)
    assert result == run(tmp_path, ["ring", "ring", "ring"], groups=odd, size=16 << 20, uniform=False)[0]


@pytest.mark.parametrize("impl", [["ring", "inSwitch", "inSwitch"], ["ring", "inSwitch", "ring"]])
def test_folded_runs_give_the_unfolded_answer(tmp_path, impl):
    unfolded, _ = run(tmp_path, impl, size=16 << 20)
    folded, _ = run(tmp_path, impl, size=16 << 20, fold=True)
    assert folded == unfolded


def test_the_tree_shows_as_in_switch_time_on_both_dimensions(tmp_path):
    from astra_sim.simulation import simulate as sim

    run(tmp_path, ["ring", "inSwitch", "inSwitch"], size=16 << 20)  # writes the inputs
    timeline = tmp_path / "t.json"
    report = sim(f"{tmp_path}/w", str(tmp_path / "sys.json"), str(tmp_path / "net.yml"),
                 comm_groups=str(tmp_path / "groups.json"), timeline=str(timeline))
    for rank in report.ranks:
        parts = rank.breakdown["parts"]
        assert sum(parts.values()) == rank.finish_ns
        assert parts["exposed_in_switch:group 1" if rank.rank % 2 == 0 else "exposed_in_switch:group 2"] > 0
    slices = [e for e in json.loads(timeline.read_text())["traceEvents"] if e.get("cat") == "in_switch"]
    assert slices and all(e["args"]["dimensions"] == [1, 2] for e in slices)
