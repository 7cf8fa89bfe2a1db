"""The symmetry search's cost (issue 37): it digests only the nodes where traces hold different node objects,
until they differ, with the same decisions as digesting every trace whole (which ranks fold, the same classes,
the same reasons)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import random

import pytest

from astra_folding import signature
from astra_folding.signature import trace_signature
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import AstraError
from astra_sim.simulation import Simulation
from astra_sim_testing import parity_cases, parity_kwargs

_spec = importlib.util.spec_from_file_location("folding_test_fold", pathlib.Path(__file__).with_name("test_fold.py"))
test_fold = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(test_fold)


def _fold_info(args, kwargs):
    """The fold decision of a run (``settings.fold``), without simulating it."""
    sim = Simulation(*args, fold=True, **kwargs)
    try:
        sim.build()
    except AstraError as exc:
        return ("error", type(exc).__name__, str(exc))
    return sim.folding.info


def _both_ways(monkeypatch, args, kwargs):
    """(the decision with lazy signatures, the decision with every trace digested whole)."""
    lazy = _fold_info(args, kwargs)
    with monkeypatch.context() as patched:
        patched.setattr(signature, "LazySignature", lambda nodes, digests: trace_signature(nodes))
        whole = _fold_info(args, kwargs)
    return lazy, whole


@pytest.mark.parametrize("asymmetric", [False, True])
def test_random_cases_get_the_same_decision_as_whole_signatures(tmp_path, monkeypatch, fold_whenever_possible,
                                                                asymmetric):
    rng = random.Random(37 + asymmetric)
    folded = 0
    for case in range(80):
        folder = tmp_path / f"c{case}"
        folder.mkdir()
        args, kwargs = test_fold.symmetric_case(rng, folder, asymmetric=asymmetric)
        lazy, whole = _both_ways(monkeypatch, args, kwargs)
        assert lazy == whole, f"case {case}"
        folded += isinstance(lazy, dict) and lazy.get("ranks_per_class", 1) > 1
    assert folded >= 16 or asymmetric, folded  # the last rank's extra node breaks every shift that moves it


def test_every_parity_case_gets_the_same_decision_as_whole_signatures(monkeypatch, shared_dir):
    shared = shared_dir  # the fixture skips without ../shared (a clean clone, as CI runs)
    parity = shared / "parity"
    configs = parity / "configs"
    cases = [c for c in parity_cases(shared) if c["finishes"] == "1"]
    assert cases
    for case in cases:
        args = (str(parity / case["trace"]), str(configs / f"{case['system']}.json"),
                str(configs / f"{case['network']}.yml"), str(configs / f"{case['memory']}.json"))
        kwargs = dict(network_backend=case["backend"], **parity_kwargs(case["extra"]))
        lazy, whole = _both_ways(monkeypatch, args, kwargs)
        assert lazy == whole, case["id"]


def _pipeline(folder, ranks, kernels, distinct):
    """A ring of ``ranks`` ranks, each ``kernels`` compute nodes then a send on and a receive back; with
    ``distinct``, each rank's first kernel is named after its stage (no two traces alike)."""
    (folder / "net.yml").write_text(f"topology: [ Switch ]\nnpus_count: [ {ranks} ]\nbandwidth: [ 50 ]\n"
                                    "latency: [ 500 ]\n")
    (folder / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"], "local-mem-bw": 50}))
    for rank in range(ranks):
        nodes = [make_node(0, f"stage {rank}" if distinct else "stage", T.COMP_NODE, duration_micros=5,
                           attrs={"is_cpu_op": False})]
        for i in range(1, kernels):
            nodes.append(make_node(i, "kernel", T.COMP_NODE, data_deps=[i - 1], duration_micros=5,
                                   attrs={"is_cpu_op": False}))
        nodes.append(make_node(kernels, "send", T.COMM_SEND_NODE, data_deps=[kernels - 1], attrs={
            "is_cpu_op": False, "comm_src": rank, "comm_dst": (rank + 1) % ranks, "comm_size": 4096,
            "comm_tag": 1}))
        nodes.append(make_node(kernels + 1, "recv", T.COMM_RECV_NODE, data_deps=[kernels - 1], attrs={
            "is_cpu_op": False, "comm_src": (rank - 1) % ranks, "comm_dst": rank, "comm_size": 4096,
            "comm_tag": 1}))
        write_et(f"{folder}/t.{rank}.et", make_metadata(), nodes)
    return (str(folder / "t"), str(folder / "sys.json"), str(folder / "net.yml")), {}


@pytest.fixture
def digested(monkeypatch):
    """The nodes whose structure the search digests (one call per node object digested)."""
    calls = []
    digest = signature._structure_digest
    monkeypatch.setattr(signature, "_structure_digest", lambda node: calls.append(node) or digest(node))
    return calls


def test_a_run_whose_ranks_all_differ_digests_a_node_per_rank(tmp_path, monkeypatch, digested):
    ranks, kernels = 8, 400
    args, kwargs = _pipeline(tmp_path, ranks, kernels, distinct=True)
    info = _fold_info(args, kwargs)
    assert info["simulated_ranks"] == ranks and "rank 0's trace and rank 1's differ" in info["reason"]
    # Each rank's first node differs: the search digests those and stops (ranks 0 and 1 first).
    assert 2 <= len(digested) <= ranks
    digested.clear()
    with monkeypatch.context() as patched:
        patched.setattr(signature, "LazySignature", lambda nodes, digests: trace_signature(nodes))
        assert _fold_info(args, kwargs) == info
    assert len(digested) == ranks * (kernels + 2)  # digested whole: every node of every rank


def test_a_run_whose_ranks_are_alike_digests_them_whole_and_folds(tmp_path, monkeypatch, digested):
    ranks, kernels = 8, 200
    args, kwargs = _pipeline(tmp_path, ranks, kernels, distinct=False)
    info = _fold_info(args, kwargs)
    assert info["simulated_ranks"] == 1 and info["ranks_per_class"] == ranks
    # the kernels are the same node objects in every rank (parse_et shares them): only the sends and receives,
    # each node object once
    assert len(digested) == len({id(node) for node in digested}) <= 2 * ranks
    lazy, whole = _both_ways(monkeypatch, args, kwargs)
    assert lazy == whole == info
