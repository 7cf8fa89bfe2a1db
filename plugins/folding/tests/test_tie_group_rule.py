"""Groups of three or more tied completions of one rank (same nanosecond, same history digest) keep the fold when
every order of the whole group reaches one state (``engine._group_inert``, :func:`astra_folding.ties.group_commutes`):
only completions of the rank between the members, none issuing a node, and in every order no pass before the last
has anything to issue. The registry's megatron-bridge-gb200-llama3-70b-mxfp8 meets such a group (a pipeline send, a
TP ring send and the TP peer's receive of one rank, none freeing a node). Also the shared-child guard of
``ties._issues_alike``: the second completion frees a node that waits for the first too."""

from __future__ import annotations

import os
import random
import sys

import pytest

from astra_folding import engine, ties
from astra_sim.chakra import make_node, types as T
from astra_sim.simulation import simulate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (pytest imports test modules by path here)
from test_fold import _outcome  # noqa: E402  (every rank's numbers and breakdown, and the critical path)
from test_tie_arrival import US_BYTES, _kernel, _recv, _send, _write  # noqa: E402


def _inert_group(rank, npus):
    """Two sends (to rank + 1, rank + 2) and two receives (from rank - 1, rank - 2) of 1 us each complete at 1 us,
    on streams of their own; the kernel they free waits for a 5 us kernel too. The receives come from relabelled
    ranks: three swaps in one group, none of which issues anything."""
    a, b, pa, pb = (rank + 1) % npus, (rank + 2) % npus, (rank - 1) % npus, (rank - 2) % npus
    return [_kernel(0, 5), _send(1, a, 1, 1), _send(2, b, 2, 1), _recv(3, pa, 1, 1), _recv(4, pb, 2, 1),
            _kernel(5, 2, deps=[0, 1, 2, 3, 4]), _send(6, a, 3, 1, deps=[5]), _recv(7, pa, 3, 1),
            _kernel(8, 1, deps=[7])]


def test_a_group_of_completions_that_issue_nothing_keeps_the_fold(tmp_path, fold_whenever_possible, monkeypatch):
    args = _write(tmp_path, _inert_group, 4, "FullyConnected", {"comm-streams": "per-communicator"})
    result, report = _outcome(args, {}, fold=True)
    assert report.settings["fold"]["simulated_ranks"] == 1
    assert result == _outcome(args, {}, fold=False)[0]
    # foldtie2's rule (at most one state-proven swap per group) abandoned it.
    monkeypatch.setattr(engine, "_group_inert", lambda *a: "one swap only")
    assert "three or more node completions at 1000 ns" in simulate(*args).settings["fold"]["reason"]


def _shared_child(rank, npus):
    """A send and a receive complete at 1 us; kernel 2 needs both, kernel 3 the receive, and a send after kernel 3
    feeds the next rank. The send first: the receive frees both, kernel 2 (the lower id) runs first. The receive
    first: kernel 3 runs at once, kernel 2 after it. The real ranks finish at 7, 8, 6 and 6 us. The representative
    sees the send first: ``ties._issues_alike``'s case (the send issues nothing)."""
    right, left = (rank + 1) % npus, (rank - 1) % npus
    return [_send(0, right, 1, 1), _recv(1, left, 1, 1), _kernel(2, 3, deps=[0, 1]), _kernel(3, 1, deps=[1]),
            _send(4, right, 2, 2, deps=[3]), _recv(5, left, 2, 2), _kernel(6, 1, deps=[5])]


def _shared_child_beside_the_next_send(rank, npus):
    """The same, with a second ring step whose send waits for the first's stream: the send's completion issues it
    (``ties._issues_apart``'s case, a send first then a receive that frees kernels)."""
    right, left = (rank + 1) % npus, (rank - 1) % npus
    return [_send(0, right, 1, 1), _recv(1, left, 1, 1), _send(2, right, 2, 1), _recv(3, left, 2, 1),
            _kernel(4, 3, deps=[0, 1]), _kernel(5, 1, deps=[1]),
            _send(6, right, 3, 2, deps=[5]), _recv(7, left, 3, 2), _kernel(8, 1, deps=[7])]


@pytest.mark.parametrize("program", [_shared_child, _shared_child_beside_the_next_send])
def test_a_child_of_both_completions_abandons_the_fold(tmp_path, monkeypatch, program):
    args = _write(tmp_path, program, 4, "Ring")
    unfolded = [r.finish_ns for r in simulate(*args, fold=False).ranks]
    assert unfolded == [7000, 8000, 6000, 6000]
    folded = simulate(*args)
    assert folded.settings["fold"]["reason"].startswith("folding abandoned: rank 0: two events at 1000 ns")
    assert [r.finish_ns for r in folded.ranks] == unfolded
    # Without ties._shared_children the fold stays and gives every rank the representative's order: wrong.
    monkeypatch.setattr(ties, "_shared_children", lambda *a: set())
    folded = simulate(*args)
    assert folded.settings["fold"]["simulated_ranks"] == 1 and [r.finish_ns for r in folded.ranks] == [8000] * 4


def _kernel_left_to_the_send(rank, npus):
    """As above, but the receive frees only the kernel that needs the send too: whichever completes last issues it,
    beside nothing that could take its slot, and the fold stays (``ties._issues_apart``)."""
    right, left = (rank + 1) % npus, (rank - 1) % npus
    return [_send(0, right, 1, 1), _recv(1, left, 1, 1), _send(2, right, 2, 1), _recv(3, left, 2, 1),
            _kernel(4, 3, deps=[0, 1]), _kernel(5, 1, deps=[3]),
            _send(6, right, 3, 2, deps=[5]), _recv(7, left, 3, 2), _kernel(8, 1, deps=[7])]


def test_a_kernel_that_needs_both_alone_keeps_the_fold(tmp_path, fold_whenever_possible):
    args = _write(tmp_path, _kernel_left_to_the_send, 4, "Ring", {"comm-streams": "per-communicator"})
    result, report = _outcome(args, {}, fold=True)
    assert report.settings["fold"]["simulated_ranks"] == 1
    assert result == _outcome(args, {}, fold=False)[0]


def group_program(rng, npus):
    """Phases in which every rank sends to k peers (rank + d, some twice: the second waits for the first's stream)
    and receives from k (rank - d) at once, messages of
    1 or 2 us, so that many completions of a rank meet at one nanosecond; kernels on some of them, a long kernel
    beside some phases (the kernels freed then wait), later phases after earlier nodes."""
    phases = []
    for p in range(rng.randint(2, 5)):
        k = rng.randint(2, min(4, npus - 1))
        peers = rng.sample(range(1, npus), k) if rng.random() < 0.6 else [rng.randrange(1, npus) for _ in range(k)]
        kernels = [(rng.choice([1, 2]), rng.sample(range(2 * k), rng.randint(1, min(4, 2 * k))), rng.random() < 0.2)
                   for _ in range(rng.randint(0, 3))]
        phases.append((peers, [rng.choice([1, 1, 2]) for _ in range(k)], p > 0 and rng.random() < 0.7,
                       rng.choice([0, 0, 1, 2, 3, 5]), kernels, rng.random() < 0.3, rng.random() < 0.15))

    def program(rank, npus):
        nodes, prev = [], []
        for p, (peers, us, after, busy, kernels, late_recv, coll) in enumerate(phases):
            deps = prev[-2:] if after else []
            if busy:
                nodes.append(_kernel(len(nodes), busy, deps=deps))
            mine = []
            for j, d in enumerate(peers):
                nodes.append(_send(len(nodes), (rank + d) % npus, 100 * p + j, us[j], deps=deps))
                nodes.append(_recv(len(nodes), (rank - d) % npus, 100 * p + j, us[j], deps=deps if late_recv else ()))
                mine += [nodes[-2].id, nodes[-1].id]
            outs = []
            for us_k, picks, cpu in kernels:
                deps_k = sorted({mine[i % len(mine)] for i in picks})
                nodes.append(make_node(len(nodes), f"k{len(nodes)}", T.COMP_NODE, duration_micros=us_k,
                                       data_deps=deps_k, attrs={"is_cpu_op": cpu}))
                outs.append(nodes[-1].id)
            if coll:
                nodes.append(make_node(len(nodes), "ar", T.COMM_COLL_NODE, data_deps=mine[:2], attrs={
                    "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": us[0] * US_BYTES}))
                outs.append(nodes[-1].id)
            prev += outs or mine
        return nodes
    return program


def group_case(rng, folder):
    """(simulate's args, kwargs) of a random :func:`group_program` on FullyConnected or Switch, per-communicator
    streams in two thirds, the host launch model in 30 %."""
    npus = rng.choice([3, 4, 5, 6, 8])
    topology = rng.choice(["FullyConnected", "FullyConnected", "Switch"])
    system = {"all-reduce-implementation": ["direct"],
              "comm-streams": rng.choice(["per-communicator", "per-communicator", "single"])}
    args = _write(folder, group_program(rng, npus), npus, topology, system)
    kwargs = {}
    if rng.random() < 0.3:
        kwargs["options"] = {"host_launch_us": rng.choice([1, 2]), "host_sync_us": rng.choice([0, 1])}
    return args, kwargs


def test_random_group_programs_fold_to_the_ns(tmp_path, fold_whenever_possible, monkeypatch):
    verdicts = []  # the group rule's: None (kept) or why not
    rule = engine._group_inert
    monkeypatch.setattr(engine, "_group_inert", lambda *a: verdicts.append(rule(*a)) or verdicts[-1])
    rng = random.Random(1)
    kept_by_the_rule = 0
    for case in range(15):
        folder = tmp_path / f"c{case}"
        folder.mkdir()
        args, kwargs = group_case(rng, folder)
        before = verdicts.count(None)
        result, report = _outcome(args, kwargs, fold=True)
        assert result == _outcome(args, kwargs, fold=False)[0], f"case {case}"
        kept_by_the_rule += (verdicts.count(None) > before
                             and report.settings["fold"].get("simulated_ranks", 0) < len(report.ranks))
    assert verdicts.count(None) >= 8 and len(set(verdicts)) > 1 and kept_by_the_rule >= 1
