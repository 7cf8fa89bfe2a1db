"""The host model (run options host_launch_us / host_sync_us): kernels start no earlier than their launch."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate


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
    # after the transfers the host waits 50 us more, then launches the last kernel (1 us)
    assert synced.max_finish_ns == base.max_finish_ns + 50_000
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
