"""A folded run's tie check proves a commute from the workload's state for two completions swapped in that state
(:func:`astra_folding.ties.completions_commute`); a third completion of the same group that may move too reaches
orders whose states that proof never saw. A second such swap in one group abandons the fold unless the whole group
is shown to reach one state in every order (``engine._group_inert``). The hand case below (foldtie's seed 63, case
145) is caught by the pairwise check since its second pair shares a child (``ties._issues_alike``), and by the
group rule too without that guard."""

from __future__ import annotations

import json

from astra_folding import engine, ties
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate


def _four_completions(tmp_path, npus=6):
    """Two sends and two receives of 1 KiB complete at 4 ns on every rank; a kernel needs all four, another the
    second send and receive. Whichever pair completes last decides which kernel is issued first: rank 0 (its
    completions ordered otherwise than the others') finishes at 4,004 ns, the others at 4,309 ns."""
    (tmp_path / "net.yml").write_text(f"topology: [ FullyConnected ]\nnpus_count: [ {npus} ]\nbandwidth: [ 200 ]\n"
                                      "latency: [ 0 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"preferred-dataset-splits": 1, "local-mem-bw": 50,
                                                   "comm-streams": "per-communicator"}))
    for rank in range(npus):
        right, left = (rank + 1) % npus, (rank - 1) % npus

        def comm(node_id, kind, peer, tag, size=1024, deps=()):
            key = "comm_dst" if kind == T.COMM_SEND_NODE else "comm_src"
            return make_node(node_id, f"c{node_id}", kind, data_deps=list(deps),
                             attrs={"is_cpu_op": False, key: peer, "comm_size": size, "comm_tag": tag})
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), [
            comm(0, T.COMM_SEND_NODE, left, 102), comm(1, T.COMM_RECV_NODE, right, 102),
            comm(2, T.COMM_SEND_NODE, right, 103), comm(3, T.COMM_RECV_NODE, left, 103),
            make_node(4, "k4", T.COMP_NODE, data_deps=[0, 1, 2, 3], duration_micros=3, attrs={"is_cpu_op": False}),
            comm(5, T.COMM_SEND_NODE, right, 105, 65536, deps=[4]), comm(6, T.COMM_RECV_NODE, left, 105, 65536),
            make_node(7, "k7", T.COMP_NODE, data_deps=[2, 3], duration_micros=1, attrs={"is_cpu_op": False})])
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml")


def test_a_second_state_proven_swap_in_one_group_abandons_the_fold(tmp_path, monkeypatch):
    args = _four_completions(tmp_path)
    unfolded = [r.finish_ns for r in simulate(*args, fold=False).ranks]
    assert unfolded == [4004] + [4309] * 5
    folded = simulate(*args)
    assert folded.settings["fold"]["reason"].endswith("(the second, coming first, would issue nodes that the first's "
                                                      "completion changes)")
    assert [r.finish_ns for r in folded.ranks] == unfolded
    # Without the shared-child guard the pairs commute: the group rule abandons (a pass issues a kernel early).
    monkeypatch.setattr(ties, "_shared_children", lambda *a: set())
    folded = simulate(*args)
    assert folded.settings["fold"]["reason"].startswith("folding abandoned: rank 0: three or more node completions")
    assert folded.settings["fold"]["reason"].endswith("(a pass before the last of them would issue a node in some "
                                                      "order)")
    assert [r.finish_ns for r in folded.ranks] == unfolded
    # Pairwise commutes alone, or the group rule without its check of the states (ties.group_commutes), keep the
    # fold and give every rank the representative's 4,004 ns: wrong.
    for mutation in (lambda *a: None, lambda entry, same, record, owner: None if owner.issued == same[0][2] else "x"):
        monkeypatch.setattr(engine, "_group_inert", mutation)
        folded = simulate(*args)
        assert folded.settings["fold"]["simulated_ranks"] == 1
        assert [r.finish_ns for r in folded.ranks] != unfolded
