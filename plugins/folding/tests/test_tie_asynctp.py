"""A folded run's tie between a send's completion that issues the next send on its slot and a receive's completion
that changes nothing (AsyncTP's ring: ``astra workload llm --tp-comm-overlap`` with fsdp2's sequence parallelism):
the order does not matter, and the fold stays (:func:`astra_folding.ties._second_inert`). A receive that frees a
node of that slot makes the order matter: the fold is still abandoned."""

from __future__ import annotations

import json

from astra_folding import ties
from astra_folding.ties import completions_commute
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.simulation import simulate
from astra_sim.workload.workload import NO_SLOT


def _ring(tmp_path, nodes_of, npus=4):
    (tmp_path / "net.yml").write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50 ]\n"
                                      "latency: [ 5 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"preferred-dataset-splits": 1, "local-mem-bw": 50}))
    for rank in range(npus):
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), nodes_of(rank, (rank + 1) % npus, (rank - 1) % npus))
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml")


def _send(node_id, dst, tag, size, deps=()):
    return make_node(node_id, f"send{tag}", T.COMM_SEND_NODE, data_deps=list(deps),
                     attrs={"is_cpu_op": False, "comm_dst": dst, "comm_size": size, "comm_tag": tag})


def _recv(node_id, src, tag, size):
    return make_node(node_id, f"recv{tag}", T.COMM_RECV_NODE,
                     attrs={"is_cpu_op": False, "comm_src": src, "comm_size": size, "comm_tag": tag})


def _ring_steps(rank, right, left):
    """Two ring steps: the second send waits for the first's slot; the kernel needs both receives (all posted at
    the start, as the generator's). Send and first receive complete at one nanosecond: rank 0 learns of its send
    first (and issues the next send), every other rank of its receive first."""
    return [_send(0, right, 1, 4096), _recv(1, left, 1, 4096), _send(2, right, 2, 8192), _recv(3, left, 2, 8192),
            make_node(4, "sum", T.COMP_NODE, data_deps=[1, 3], duration_micros=3, attrs={"is_cpu_op": False})]


def _race(rank, right, left):
    """As above, but the receive frees a send (id 2) that waits for the slot the first send frees, and a send of a
    higher id (3) waits for it too: the rank whose send completes first sends 3 first, the others 2 (and the
    kernel after 2 starts later there)."""
    return [_send(0, right, 1, 4096), _recv(1, left, 1, 4096), _send(2, right, 2, 65536, deps=[1]),
            _send(3, right, 3, 65536), _recv(4, left, 2, 65536), _recv(5, left, 3, 65536),
            make_node(6, "after", T.COMP_NODE, data_deps=[2], duration_micros=50, attrs={"is_cpu_op": False})]


def _finishes(report):
    return [(r.finish_ns, r.compute_ns, r.comm_ns, r.exposed_comm_ns) for r in report.ranks]


def test_a_send_issuing_the_next_send_beside_an_inert_receive_keeps_the_fold(tmp_path, monkeypatch):
    args = _ring(tmp_path, _ring_steps)
    folded = simulate(*args)
    unfolded = simulate(*args, fold=False)
    assert folded.settings["fold"]["simulated_ranks"] == 1
    assert _finishes(folded) == _finishes(unfolded)
    # Without the rule the same run abandons the fold at that tie.
    monkeypatch.setattr(ties, "_second_inert", lambda *a: False)
    assert simulate(*args).settings["fold"]["reason"].startswith("folding abandoned: rank 0:")


def test_a_receive_freeing_a_node_of_the_sends_slot_still_abandons_the_fold(tmp_path):
    args = _ring(tmp_path, _race)
    unfolded = simulate(*args, fold=False)
    assert len({r.finish_ns for r in unfolded.ranks}) > 1  # a real order difference: rank 0 ends otherwise
    folded = simulate(*args)
    assert folded.settings["fold"]["reason"].startswith("folding abandoned: rank 0:")
    assert _finishes(folded) == _finishes(unfolded)


class _Workload:
    """The queries the tie rule reads, on a hand-made state: the first node (a send, slot 2) has completed and
    issued node 5 on its slot; node 1 (a receive) runs, its child 3 waiting for another parent."""

    def __init__(self):
        self.nodes = dict.fromkeys(range(8))
        self.children = {0: [], 1: [3], 5: []}
        self.parents_left = {3: 2, 4: 1, 6: 0}
        self.node_start_ns = {1: 0, 5: 0}
        self.slot_busy = [0, 0, 1, 0]
        self.slots = {0: 2, 1: NO_SLOT, 3: 2, 5: 2, 6: 2}
        self.ready = {6}
        self.host_waits = set()

    def slot_of(self, node_id):
        return self.slots[node_id]

    def could_issue(self, node_id, busy):
        slot = self.slots[node_id]
        return slot is None or slot == NO_SLOT or not busy[slot]

    def waiting(self):
        return set(self.ready)

    def moves_host_clock(self, node_id):
        return node_id in self.host_waits


def _commute(workload, issued=1, adjacent=True):
    return completions_commute(workload, 0, 1, issued, adjacent)


def test_the_rule_holds_only_where_the_receive_changes_nothing_in_either_order():
    assert _commute(_Workload())
    assert not _commute(_Workload(), adjacent=False)  # another callback of the rank ran between the two
    assert not _commute(_Workload(), issued=2)  # a second node issued: on some other slot, perhaps ready before
    other_slot = _Workload()
    other_slot.slot_busy = [0, 1, 0, 0]  # the issued node went onto another slot: it may have been ready before
    other_slot.slots[5] = 1
    assert not _commute(other_slot)
    frees = _Workload()
    frees.parents_left[3] = 1  # the receive frees its child
    assert not _commute(frees)
    holds = _Workload()
    holds.slots[1] = 1  # the second completion releases a slot
    holds.slot_busy[1] = 1
    assert not _commute(holds)
    issues = _Workload()
    issues.ready.add(7)  # a ready node whose slot is free: the receive's pass would issue it
    issues.slots[7] = 0
    assert not _commute(issues)
    waits = _Workload()
    waits.host_waits.add(1)  # the receive moves the host clock
    assert not _commute(waits)


def test_asynctp_step_folds_to_one_rank_to_the_ns(tmp_path):
    """The registry's AsyncTP case's flags (fsdp2, TP 8 with sequence parallelism and --tp-comm-overlap, FP8)
    on one node, one layer: its ring steps tie, and the run folds to one rank with every rank's numbers."""
    assert main(["workload", "llm", "--model", "llama3.1-70b", "--layers", "1", "--seq-len", "8192", "--tp", "8",
                 "--zero", "3", "--framework", "fsdp2", "--micro-batch-size", "1", "--micro-batches", "1",
                 "--recompute", "full", "--no-dropout", "--gemm-dtype", "fp8", "--sequence-parallel",
                 "--tp-comm-overlap", "-o", str(tmp_path / "w")]) == 0
    reports = {}
    for fold in ("", "--no-fold"):
        out = tmp_path / f"r{fold}.json"
        assert main(["run", "--platform", "grand-teton-h100", "--nodes", "1", "--workload-configuration",
                     str(tmp_path / "w"), "-o", str(out)] + ([fold] if fold else [])) == 0
        reports[fold] = json.loads(out.read_text())
    assert reports[""]["settings"]["fold"]["simulated_ranks"] == 1
    for key in ("summary", "rank_classes", "breakdown"):
        assert reports[""][key] == reports["--no-fold"][key]
