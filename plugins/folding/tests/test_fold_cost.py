"""The fold decision by expected cost (issue 37): a fold by ``k`` simulates ``1/k`` of the ranks, each of its events
costing about ``FOLDED_EVENT_COST`` times an unfolded one, so a symmetry folds only when its order exceeds that
factor (with ``FOLD_COST_MARGIN``); otherwise every rank is simulated and the report says why. Either way the
results are the same, to the ns."""

from __future__ import annotations

import json
import math

import pytest

from astra_sim import hookimpl, simulate
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_folding import plan
from astra_folding.plan import FOLD_COST_MARGIN, FOLDED_EVENT_COST, FoldPlanner, folded_event_cost


class _AlwaysFold:
    """The fold planner with the cost rule off: folds whenever a symmetry is found."""

    @staticmethod
    @hookimpl
    def astra_fold_planner(setup, catalogue, requested, refused):
        return FoldPlanner(setup, catalogue, requested, refused, event_cost=0)


def _threshold(backend="analytical"):
    return folded_event_cost(backend) * FOLD_COST_MARGIN


def _partial_case(tmp_path, order, rows=3):
    """``order`` x ``rows`` ranks on two switches; kernels grow with the second coordinate, so only the first
    dimension is symmetric: a fold by ``order``."""
    (tmp_path / "net.yml").write_text(f"topology: [ Switch, Switch ]\nnpus_count: [ {order}, {rows} ]\n"
                                      "bandwidth: [ 50, 25 ]\nlatency: [ 100, 1000 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring", "ring"],
                                                   "preferred-dataset-splits": 2, "local-mem-bw": 50}))
    for rank in range(order * rows):
        nodes = [make_node(0, "c", T.COMP_NODE, duration_micros=10 * (1 + rank // order), attrs={"is_cpu_op": False}),
                 make_node(1, "ar", T.COMM_COLL_NODE, data_deps=[0],
                           attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20})]
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), nodes)
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml")


def _numbers(report):
    return [(r.rank, r.finish_ns, r.compute_ns, r.exposed_comm_ns, r.comm_ns, r.nodes) for r in report.ranks]


def test_the_measured_factors_are_named_and_above_one():
    assert set(FOLDED_EVENT_COST) == {"analytical", "congestion"}
    assert all(1 < cost < 10 for cost in FOLDED_EVENT_COST.values())
    assert FOLD_COST_MARGIN >= 1
    # A backend not measured (none folds today) takes the largest measured factor.
    assert folded_event_cost("no-such-backend") == max(FOLDED_EVENT_COST.values())


def test_a_fold_below_the_factor_simulates_every_rank_and_says_why(tmp_path):
    order = math.floor(_threshold())
    assert order >= 2, "the rule must decline at least a fold by 2 (the benchmark measured more than 2x per event)"
    args = _partial_case(tmp_path, order)
    report = simulate(*args)
    info = report.settings["fold"]
    assert info["simulated_ranks"] == report.stats["simulated_ranks"] == 3 * order
    assert info["requested"] is True and "ranks_per_class" not in info
    assert info["reason"].startswith(f"a fold by {order} would be slower than simulating every rank: the folded "
                                     f"engine costs about {folded_event_cost('analytical'):g}x per event")
    forced = simulate(*args, block=("folding",), extra_plugins=(_AlwaysFold,))
    assert forced.settings["fold"]["ranks_per_class"] == order
    assert _numbers(report) == _numbers(forced) == _numbers(simulate(*args, fold=False))


def test_a_fold_above_the_factor_folds(tmp_path):
    order = math.floor(_threshold()) + 1
    args = _partial_case(tmp_path, order, rows=2)
    report = simulate(*args)
    info = report.settings["fold"]
    assert info["ranks_per_class"] == order and info["simulated_ranks"] == 2
    assert "reason" not in info
    assert _numbers(report) == _numbers(simulate(*args, fold=False))


def test_the_factor_is_the_run_backends(tmp_path, monkeypatch):
    """The congestion backend has its own factor: a fold by 2 folds there when its factor is below 2."""
    args = _partial_case(tmp_path, 2)
    monkeypatch.setitem(plan.FOLDED_EVENT_COST, "congestion", 1.2)
    folded = simulate(*args, network_backend="congestion")
    assert folded.settings["fold"]["ranks_per_class"] == 2
    unfolded = simulate(*args)  # analytical keeps its measured factor
    assert "a fold by 2 would be slower" in unfolded.settings["fold"]["reason"]
    assert _numbers(folded) == _numbers(simulate(*args, network_backend="congestion", fold=False))


@pytest.mark.parametrize("event_cost,folds", [(0, True), (1.9 / FOLD_COST_MARGIN, True), (2 / FOLD_COST_MARGIN, False),
                                              (3, False)])
def test_the_planner_compares_the_order_with_the_given_cost(tmp_path, event_cost, folds):
    class _Planner:
        @staticmethod
        @hookimpl
        def astra_fold_planner(setup, catalogue, requested, refused):
            return FoldPlanner(setup, catalogue, requested, refused, event_cost=event_cost)

    report = simulate(*_partial_case(tmp_path, 2), block=("folding",), extra_plugins=(_Planner,))
    assert (report.stats["simulated_ranks"] == 3) is folds


def test_astra_run_prints_why_a_fold_was_declined(tmp_path, capsys):
    order = math.floor(_threshold())
    workload, system, network = _partial_case(tmp_path, order)
    code = main(["run", "--workload-configuration", workload, "--system-configuration", system,
                 "--network-configuration", network, "--no-breakdown"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert f"all {3 * order} ranks simulated: a fold by {order} would be slower than simulating every rank" in out
