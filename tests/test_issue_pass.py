"""A pass over a rank's ready nodes (``RankWorkload._issue_dep_free_nodes``) looks only at the slots its fresh ids
went to when nothing else waited (issue 37: ten slots looked at per completion before); the same issue order
and times as looking at every slot: random workloads (compute with CPU ops, collectives on communicators,
sends and receives, zero-time nodes) with one communication stream or one per communicator, folded and not,
against the pass that looks at every slot (kept here as the reference)."""

from __future__ import annotations

import json
from heapq import heappop, heappush

from hypothesis import given, strategies as st

from astra_sim.chakra import types as T
from astra_sim.errors import DeadlockError
from astra_sim.simulation import simulate
from astra_sim.workload import workload as W
from astra_sim_testing import write_system_config
from astra_sim_testing.fuzzing import fuzz_settings



def _fuzz_module():
    """tests/test_fuzz_workloads.py's generators (the suite runs with --import-mode=importlib: no sibling imports)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_fuzz_workloads", Path(__file__).with_name("test_fuzz_workloads.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_FUZZ = _fuzz_module()
build_nodes, networks, workloads, write_case = _FUZZ.build_nodes, _FUZZ.networks, _FUZZ.workloads, _FUZZ.write_case


def _every_slot_pass(self):
    """The pass as it was: every slot looked at for every id issued."""
    ready = self.ready
    nodes = self.nodes
    fresh = self.fresh
    if fresh:
        self.fresh = []
        for node_id in fresh:
            heappush(ready[self._slot(nodes[node_id])], node_id)
    self.passes += 1
    busy = self.slot_busy
    passed = -1
    set_aside = None
    while True:
        best = best_slot = None
        for slot in range(len(ready)):
            heap = ready[slot]
            if not heap or (slot != W._NONE and busy[slot]):
                continue
            if heap[0] < passed:
                if set_aside is None:
                    set_aside = []
                while heap and heap[0] < passed:
                    set_aside.append(heappop(heap))
                if not heap:
                    continue
            if best is None or heap[0] < best:
                best = heap[0]
                best_slot = slot
        if best is None:
            break
        heappop(ready[best_slot])
        self.ready_count -= 1
        passed = best
        self._issue(nodes[best], best_slot)
    if set_aside:
        self.fresh.extend(set_aside)


@st.composite
def _grouped(draw, npus):
    """The fuzz workloads with their collectives spread over two communicators (group ids 1 and 2, both every
    rank) and some compute nodes made CPU ops or zero-time (INVALID) nodes."""
    per_rank = draw(workloads(npus))
    pg_of = {}
    out = []
    for entries in per_rank:
        rank_entries = []
        for node_id, kind, attrs, deps, ctrl in entries:
            attrs = dict(attrs)
            if kind == T.COMM_COLL_NODE:
                # the n-th collective of every rank on the same group (they must match across ranks)
                index = sum(1 for e in rank_entries if e[1] == T.COMM_COLL_NODE)
                attrs["pg_name"] = pg_of.setdefault(index, draw(st.sampled_from(["1", "2", ""])))
            elif kind == T.COMP_NODE:
                change = draw(st.sampled_from(["gpu", "gpu", "cpu", "invalid"]))
                if change == "cpu":
                    attrs["is_cpu_op"] = True
                elif change == "invalid":
                    kind = T.INVALID_NODE
                    attrs = {}
            rank_entries.append((node_id, kind, attrs, deps, ctrl))
        out.append(rank_entries)
    return out


def _run(prefix, system, net, groups, fold):
    try:
        report = simulate(prefix, system, net, fold=fold, comm_groups=groups)
    except DeadlockError as exc:
        return ("deadlock", str(exc))
    return ("finished", [(r.rank, r.finish_ns, r.exposed_comm_ns, r.breakdown) for r in report.ranks])


@fuzz_settings(40)
@given(data=st.data())
def test_looking_only_at_the_fresh_slots_issues_alike(tmp_path_factory, data, monkeypatch):
    topology, npus = data.draw(networks())
    total = 1
    for n in npus:
        total *= n
    per_rank = data.draw(_grouped(total))
    streams = data.draw(st.sampled_from(["single", "per-communicator"]))
    tmp_path = tmp_path_factory.mktemp("w")
    prefix, _system, net = write_case(tmp_path, topology, npus, lambda r: build_nodes(per_rank[r]))
    system = write_system_config(tmp_path / "streams.json", dims=len(npus), **{"comm-streams": streams})
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": list(range(total)), "2": list(range(total))}))
    fold = data.draw(st.booleans())
    fast = _run(prefix, system, net, str(groups), fold)
    with monkeypatch.context() as patch:
        patch.setattr(W.RankWorkload, "_issue_dep_free_nodes", _every_slot_pass)
        reference = _run(prefix, system, net, str(groups), fold)
    assert fast == reference
