"""A folded run's tie between a send's completion that issues the next send on its slot and a receive's completion
that frees a kernel (:func:`astra_folding.ties._issues_apart`): both issue, on slots of their own, and the order of
the two issues matters only where the host has not launched them yet. The fold stays when every launch is at or
before now, and is abandoned when one is still ahead (its event's place would follow the order of the two)."""

from __future__ import annotations

import json

from astra_folding import ties
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate


def _ring(tmp_path, size, npus=4):
    (tmp_path / "net.yml").write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50 ]\n"
                                      "latency: [ 5 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"preferred-dataset-splits": 1, "local-mem-bw": 50}))
    for rank in range(npus):
        right, left = (rank + 1) % npus, (rank - 1) % npus
        comm = {"is_cpu_op": False, "comm_size": size}
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), [  # receives first: posted before their messages
            make_node(0, "recv1", T.COMM_RECV_NODE, attrs={**comm, "comm_src": left, "comm_tag": 1}),
            make_node(1, "recv2", T.COMM_RECV_NODE, attrs={**comm, "comm_src": left, "comm_tag": 2}),
            make_node(2, "send1", T.COMM_SEND_NODE, attrs={**comm, "comm_dst": right, "comm_tag": 1}),
            make_node(3, "send2", T.COMM_SEND_NODE, attrs={**comm, "comm_dst": right, "comm_tag": 2}),
            make_node(4, "k", T.COMP_NODE, data_deps=[0], duration_micros=3, attrs={"is_cpu_op": False}),
            make_node(5, "sum", T.COMP_NODE, data_deps=[1, 4], duration_micros=2, attrs={"is_cpu_op": False})])
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml")


def _finishes(report):
    return [(r.finish_ns, r.compute_ns, r.comm_ns, r.exposed_comm_ns) for r in report.ranks]


def test_a_send_issuing_its_next_send_beside_a_receive_freeing_a_kernel_keeps_the_fold(tmp_path, monkeypatch):
    args = _ring(tmp_path, 4096)
    folded = simulate(*args)
    assert folded.settings["fold"]["simulated_ranks"] == 1
    assert _finishes(folded) == _finishes(simulate(*args, fold=False))
    monkeypatch.setattr(ties, "_issues_apart", lambda *a: False)
    assert simulate(*args).settings["fold"]["reason"].startswith("folding abandoned: rank 0:")


def test_the_host_keeps_the_fold_only_when_every_launch_is_due(tmp_path):
    """The host launches one op a us in trace order (the receives at 1 and 2 us, the first send at 3, the second at
    4, the kernel at 5): with 1 MiB messages (about 21 us) every launch is due at the tie and the fold stays; with
    4 KiB ones the tie comes at 3.1 us, before the launches of the next send (4 us) and of the kernel (5 us): their
    launch events would take their places among their nanoseconds' in the order the completions ran, and the fold
    is abandoned (conservatively: launches in trace order are the same in either order, and here the ranks finish
    alike unfolded; a host in issue order gave the two issues its launches in the order they came)."""
    host = {"options": {"host_launch_us": 1}}
    for size, keeps in ((1 << 20, True), (4096, False)):
        folder = tmp_path / str(size)
        folder.mkdir()
        args = _ring(folder, size)
        folded = simulate(*args, **host)
        unfolded = simulate(*args, fold=False, **host)
        assert _finishes(folded) == _finishes(unfolded)
        assert ("reason" not in folded.settings["fold"]) == keeps, folded.settings["fold"]
        if not keeps:
            assert "the host may not have launched by now" in folded.settings["fold"]["reason"]
