"""The host model (run options host_launch_us / host_sync_us): kernels start no earlier than their launch."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim.workload.workload import RankWorkload


def _chain(tmp_path, us, count=20, npus=2, p2p=False, cpu=False, graphs=None):
    (tmp_path / "net.yml").write_text(f"topology: [ Switch ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50 ]\n"
                                      "latency: [ 500 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"],
                                                   "preferred-dataset-splits": 1}))
    for rank in range(npus):
        nodes = [make_node(i, f"k{i}", T.COMP_NODE, data_deps=[i - 1] if i else [], duration_micros=us,
                           attrs={"is_cpu_op": cpu and i == 0,
                                  **({"cuda_graph": graphs[i]} if graphs and graphs[i] else {})})
                 for i in range(count)]
        if p2p:
            peer = 1 - rank
            nodes.append(make_node(count, "send", T.COMM_SEND_NODE, data_deps=[count - 1], attrs={
                "is_cpu_op": False, "comm_dst": peer, "comm_size": 1 << 20, "comm_tag": 1, "host_waits": True}))
            nodes.append(make_node(count + 1, "recv", T.COMM_RECV_NODE, data_deps=[count - 1], attrs={
                "is_cpu_op": False, "comm_src": peer, "comm_size": 1 << 20, "comm_tag": 1, "host_waits": True}))
            nodes.append(make_node(count + 2, "after", T.COMP_NODE, data_deps=[count, count + 1],
                                   duration_micros=us, attrs={"is_cpu_op": False}))
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), nodes)
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml")


def test_short_kernels_wait_for_the_host(tmp_path):
    args = _chain(tmp_path, us=1)
    assert simulate(*args).max_finish_ns == 20 * 1000  # no host model: the GPU's own time
    # the host launches one kernel per 10 us: the 20th starts at 200 us, its 1 us follows
    assert simulate(*args, options={"host_launch_us": 10}).max_finish_ns == 200_000 + 1000


def test_long_kernels_hide_the_host(tmp_path):
    args = _chain(tmp_path, us=100)
    report = simulate(*args, options={"host_launch_us": 10})
    assert report.max_finish_ns == 10_000 + 20 * 100_000  # only the first launch shows
    assert report.settings["host"] == {"launch_ns": 10_000, "sync_after_p2p_ns": 0}


def test_a_cuda_graph_is_launched_once_for_its_kernels(tmp_path):
    """20 kernels of 1 us: the first 10 in graph 1, then 5 alone, then 5 in graph 2 (``astra workload llm
    --cuda-graphs`` numbers each layer pass's graph): the host launches 1 + 5 + 1 times, 10 us each."""
    graphs = [1] * 10 + [None] * 5 + [2] * 5
    args = _chain(tmp_path, us=1, graphs=graphs)
    # graph 1 at 10 us runs its 10 kernels (10 us); the 5 lone kernels are launched at 20 .. 60 us, each running
    # 1 us after its launch; graph 2 is launched at 70 us and its 5 kernels follow: 75 us
    assert simulate(*args, options={"host_launch_us": 10}).max_finish_ns == 70_000 + 5 * 1000
    assert simulate(*args).max_finish_ns == 20 * 1000  # no host model: the graphs change nothing


def test_the_host_waits_for_transfers_that_say_so(tmp_path):
    args = _chain(tmp_path, us=100, count=3, p2p=True)
    base = simulate(*args, options={"host_launch_us": 1})
    synced = simulate(*args, options={"host_launch_us": 1, "host_sync_us": 50})
    # the host walks the trace in order and waits after each op marked host_waits: it launches the send, waits for
    # it and 50 us more, launches the receive, waits for it and 50 us more, then launches the last kernel (1 us).
    # (A batch that the host waits for once, Megatron's batch_isend_irecv then its waits, marks only its last op.)
    assert synced.max_finish_ns == base.max_finish_ns + 2 * 50_000
    assert [r.finish_ns for r in simulate(*args, options={"host_launch_us": 1, "host_sync_us": 50},
                                          fold=False).ranks] == [r.finish_ns for r in synced.ranks]


def test_traces_with_cpu_ops_time_their_host_themselves(tmp_path):
    args = _chain(tmp_path, us=1, cpu=True)
    assert simulate(*args, options={"host_launch_us": 10}).max_finish_ns == simulate(*args).max_finish_ns


@pytest.mark.parametrize("value", [-1, "fast", True, 1e9])
def test_bad_host_values_are_errors(tmp_path, value):
    args = _chain(tmp_path, us=1)
    with pytest.raises(ConfigError, match="host_launch_us"):
        simulate(*args, options={"host_launch_us": value})


def test_the_host_waits_for_a_collective_or_kernel_that_says_so(tmp_path):
    """host_waits on a collective (the MoE dispatcher's count all-gather) or a kernel: when it ends the host waits
    host_sync_us more before launching the next kernel, as after a transfer. Two ranks, kernel 100 us, an
    all-gather (or a 5 us kernel), kernel 100 us: the synced run is the plain one + 50 us."""
    for kind in ("coll", "comp"):
        (tmp_path / kind).mkdir()
        base = tmp_path / kind
        (base / "net.yml").write_text("topology: [ Switch ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
        (base / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"],
                                                   "all-gather-implementation": ["ring"],
                                                   "preferred-dataset-splits": 1}))
        for rank in range(2):
            middle = (make_node(1, "ag", T.COMM_COLL_NODE, data_deps=[0], attrs={
                "is_cpu_op": False, "comm_type": T.ALL_GATHER, "comm_size": 1 << 10, "host_waits": True})
                if kind == "coll" else
                make_node(1, "count", T.COMP_NODE, data_deps=[0], duration_micros=5,
                          attrs={"is_cpu_op": False, "host_waits": True}))
            nodes = [make_node(0, "k0", T.COMP_NODE, duration_micros=100, attrs={"is_cpu_op": False}), middle,
                     make_node(2, "k2", T.COMP_NODE, data_deps=[1], duration_micros=100, attrs={"is_cpu_op": False})]
            write_et(f"{base}/t.{rank}.et", make_metadata(), nodes)
        args = (str(base / "t"), str(base / "sys.json"), str(base / "net.yml"))
        plain = simulate(*args, options={"host_launch_us": 1})
        synced = simulate(*args, options={"host_launch_us": 1, "host_sync_us": 50})
        # the middle node ends at the same time; the host then waits 50 us before launching k2 (its 1 us launch
        # after a node's end is in the plain run too)
        assert synced.max_finish_ns == plain.max_finish_ns + 50_000, kind
        assert simulate(*args, options={"host_launch_us": 1, "host_sync_us": 50}, fold=False).max_finish_ns == \
            synced.max_finish_ns


def _two_ranks(tmp_path, rank0, rank1):
    (tmp_path / "net.yml").write_text("topology: [ Switch ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"],
                                                   "preferred-dataset-splits": 1}))
    write_et(f"{tmp_path}/t.0.et", make_metadata(), rank0)
    write_et(f"{tmp_path}/t.1.et", make_metadata(), rank1)
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml")


_GPU = {"is_cpu_op": False}
_P2P = {"is_cpu_op": False, "comm_size": 1024}


def _kernels(count, us, first=0, after=None, **extra):
    return [make_node(first + i, f"k{first + i}", T.COMP_NODE, duration_micros=us, attrs={**_GPU, **extra},
                      data_deps=[first + i - 1] if i else ([] if after is None else [after])) for i in range(count)]


def test_the_host_launches_in_trace_order(tmp_path):
    """Rank 1's trace: 5 chained kernels of 100 us, then 20 receives without parents (the LLM generator's pipeline
    receives: all ready at 0). The host (10 us a launch) walks the trace in id order, as Megatron posts a receive at
    its place in the schedule: kernels at 10 .. 50 us, which run back to back from 10 us, to 510 us (the receives,
    launched at 60 .. 250 us, find their 1 KiB messages sent by rank 0's host at 10 .. 200 us). A host in issue order
    launched k0 at 10 us, then the 20 receives at 20 .. 210 us, and k1 only at 220 us: 620 us."""
    sends = [make_node(i, f"send{i}", T.COMM_SEND_NODE, attrs={**_P2P, "comm_dst": 1, "comm_tag": 5 + i})
             for i in range(20)]
    receives = [make_node(i, f"recv{i}", T.COMM_RECV_NODE, attrs={**_P2P, "comm_src": 0, "comm_tag": i})
                for i in range(5, 25)]
    args = _two_ranks(tmp_path, sends, _kernels(5, 100) + receives)
    report = simulate(*args, options={"host_launch_us": 10})
    assert report.ranks[1].finish_ns == 10_000 + 5 * 100_000
    assert [r.finish_ns for r in simulate(*args, options={"host_launch_us": 10}, fold=False).ranks] == \
        [r.finish_ns for r in report.ranks]


def test_a_held_receive_and_an_issue_at_one_nanosecond_launch_in_id_order(tmp_path):
    """Rank 1: kernel k0 (20 us), then receive r1 (no parents: held from the start), then kernel k2 after k0. The
    host (10 us a launch) launches k0 at 10, r1 at 20 and k2 at 30 us; k0 ends at 30 us, when k2 is issued: the wake
    of r1 came at 20 us, and k2 starts at 30 us, so the rank ends at 30 + 5 us. Rank 0's send (launched at 10 us)
    gets there first; the receive completes on arrival. A root whose launch falls on the nanosecond of an issue
    (host 15 us: k0 at 15 us ends at 35 us, r1 at 30 us, k2 at 45 us) is launched first too."""
    send = [make_node(0, "send", T.COMM_SEND_NODE, attrs={**_P2P, "comm_dst": 1, "comm_tag": 1})]
    rank1 = [make_node(0, "k0", T.COMP_NODE, duration_micros=20, attrs=_GPU),
             make_node(1, "r1", T.COMM_RECV_NODE, attrs={**_P2P, "comm_src": 0, "comm_tag": 1}),
             make_node(2, "k2", T.COMP_NODE, data_deps=[0], duration_micros=5, attrs=_GPU)]
    args = _two_ranks(tmp_path, send, rank1)
    assert simulate(*args, options={"host_launch_us": 10}).ranks[1].finish_ns == 35_000
    assert simulate(*args, options={"host_launch_us": 15}).ranks[1].finish_ns == 50_000
    # a kernel issued at the very nanosecond of a held receive's launch: k0 of 10 us at 10 us ends at 20 us, when r1
    # is launched (its wake) and k2 issued (launched at 30 us): r1 first (id order), k2 at 30 us, the rank at 35 us
    rank1[0] = make_node(0, "k0", T.COMP_NODE, duration_micros=10, attrs=_GPU)
    args = _two_ranks(tmp_path, send, rank1)
    for fold in (True, False):
        assert simulate(*args, options={"host_launch_us": 10}, fold=fold).ranks[1].finish_ns == 35_000


def test_a_host_that_waits_launches_no_held_op_beyond_the_wait(tmp_path):
    """Rank 1: kernel k0 (100 us, host_waits), then receive r1 without parents, then kernel k2 after k0 and r1. The
    host (1 us a launch, 50 us of sync) launches k0 at 1 us and waits for it: k0 ends at 101 us, the host launches
    r1 at 151 + 1 us (the message, sent at 1 us, waits), k2 at 153 us: the rank ends at 153 + 10 us. Without the
    wait, r1 is launched at 2 us and k2 at 101 us: 111 us."""
    send = [make_node(0, "send", T.COMM_SEND_NODE, attrs={**_P2P, "comm_dst": 1, "comm_tag": 1})]

    def rank1(waits):
        return [make_node(0, "k0", T.COMP_NODE, duration_micros=100, attrs={**_GPU, "host_waits": waits}),
                make_node(1, "r1", T.COMM_RECV_NODE, attrs={**_P2P, "comm_src": 0, "comm_tag": 1}),
                make_node(2, "k2", T.COMP_NODE, data_deps=[0, 1], duration_micros=10, attrs=_GPU)]
    options = {"host_launch_us": 1, "host_sync_us": 50}
    args = _two_ranks(tmp_path, send, rank1(True))
    assert simulate(*args, options=options).ranks[1].finish_ns == 163_000
    assert simulate(*args, options=options, fold=False).ranks[1].finish_ns == 163_000
    args = _two_ranks(tmp_path, send, rank1(False))
    assert simulate(*args, options=options).ranks[1].finish_ns == 111_000


def test_a_held_op_due_at_the_nanosecond_of_a_later_ops_issue_is_launched_first(tmp_path, monkeypatch):
    """The host launches in id order also within a nanosecond. Rank 1 (host: launches free, 20 us of sync): a
    replayed broadcast b0 (30 us), kernel k1 (10 us, host_waits), receive r2 (no parents), kernel k3 after b0. b0
    and k1 are launched at 0; the host waits for k1 (10 us) and 20 us more: r2 and k3 are launched at 30 us. b0's
    completion at 30 us (an event older than r2's wake-up) issues k3, due at once: r2, due too and before it in the
    trace, is dispatched first."""
    send = [make_node(0, "send", T.COMM_SEND_NODE, attrs={**_P2P, "comm_dst": 1, "comm_tag": 1})]
    rank1 = [make_node(0, "b0", T.COMM_COLL_NODE, duration_micros=30, attrs={**_GPU, "comm_type": T.BROADCAST,
                                                                             "comm_size": 1024}),
             make_node(1, "k1", T.COMP_NODE, duration_micros=10, attrs={**_GPU, "host_waits": True}),
             make_node(2, "r2", T.COMM_RECV_NODE, attrs={**_P2P, "comm_src": 0, "comm_tag": 1}),
             make_node(3, "k3", T.COMP_NODE, data_deps=[0], duration_micros=5, attrs=_GPU)]
    args = _two_ranks(tmp_path, send, rank1)
    launched = []
    plain = RankWorkload._launch

    def spy(self, item):
        if self.rank == 1:
            launched.append((self.shared.engine.now, item[0].id))
        return plain(self, item)
    monkeypatch.setattr(RankWorkload, "_launch", spy)
    options = {"host_launch_us": 0, "host_sync_us": 20}
    assert simulate(*args, options=options).ranks[1].finish_ns == 35_000
    assert launched == [(0, 0), (0, 1), (30_000, 2), (30_000, 3)]
