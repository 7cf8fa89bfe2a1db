"""A folded run's tie between a message's arrival before its receive is posted and another callback of its rank
(:func:`astra_folding.ties.arrival_commutes`): the order does not matter unless that callback posts the receive
paired with the message, and then the fold is abandoned. Hand-made rings and random programs whose kernels take
as long as their messages (so that ties are common), each compared with ``--no-fold`` to the ns."""

from __future__ import annotations

import json
import os
import random
import sys

from astra_folding.engine import FoldedEvents
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (pytest imports test modules by path here)
from test_fold import _outcome  # noqa: E402  (every rank's numbers and breakdown, and the critical path)

#: bytes that a 1 GiB/s link carries in just over 1 us: a message of k times this takes k us on one hop
US_BYTES = 1074


def _write(tmp_path, program, npus=4, topology="Ring", system=None):
    (tmp_path / "net.yml").write_text(f"topology: [ {topology} ]\nnpus_count: [ {npus} ]\nbandwidth: [ 1 ]\n"
                                      "latency: [ 0 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"preferred-dataset-splits": 1, "local-mem-bw": 50,
                                                   **(system or {})}))
    for rank in range(npus):
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), program(rank, npus))
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml")


def _send(node_id, dst, tag, us, deps=()):
    return make_node(node_id, f"send{tag}", T.COMM_SEND_NODE, data_deps=list(deps),
                     attrs={"is_cpu_op": False, "comm_dst": dst, "comm_size": us * US_BYTES, "comm_tag": tag})


def _recv(node_id, src, tag, us, deps=()):
    return make_node(node_id, f"recv{tag}", T.COMM_RECV_NODE, data_deps=list(deps),
                     attrs={"is_cpu_op": False, "comm_src": src, "comm_size": us * US_BYTES, "comm_tag": tag})


def _kernel(node_id, us, deps=()):
    return make_node(node_id, f"k{node_id}", T.COMP_NODE, data_deps=list(deps), duration_micros=us,
                     attrs={"is_cpu_op": False})


def _late_receive(rank, npus):
    """The receive is posted after a kernel that outlasts the message: the message arrives unpaired at the
    nanosecond the rank's own send completes (rank 0 learns of its send first, the others of the arrival)."""
    return [_send(0, (rank + 1) % npus, 1, 2), _kernel(1, 5), _recv(2, (rank - 1) % npus, 1, 2, deps=[1]),
            _kernel(3, 1, deps=[0, 2])]


def _pairs_after_a_tied_arrival(rank, npus):
    """The send to the right and a kernel start together and take as long: the message from the left arrives at
    the nanosecond the kernel ends, and the kernel's completion posts its receive. At that nanosecond a message
    sent later (after a CPU op) arrives too and frees a kernel (7) that competes with the receive's (6) for the
    compute slot. The representative sees the arrival first: the receive completes by an event of its own, after
    the later message, and kernel 7 runs first. Rank 0 sees the kernel end first (rank 3's message comes last):
    the receive completes within its arrival, before the later message, and kernel 6 runs first."""
    return [_send(0, (rank + 1) % npus, 1, 3), _kernel(1, 3), _cpu(2, 1), _send(3, (rank + 2) % npus, 3, 2, deps=[2]),
            _recv(4, (rank - 1) % npus, 1, 3, deps=[1]), _recv(5, (rank - 2) % npus, 3, 2),
            _kernel(6, 5, deps=[4]), _kernel(7, 1, deps=[5]), _send(8, (rank + 1) % npus, 5, 4, deps=[7]),
            _recv(9, (rank - 1) % npus, 5, 4)]


def _cpu(node_id, us, deps=()):
    return make_node(node_id, f"cpu{node_id}", T.COMP_NODE, data_deps=list(deps), duration_micros=us,
                     attrs={"is_cpu_op": True})


def _finishes(report):
    return [(r.finish_ns, r.compute_ns, r.comm_ns, r.exposed_comm_ns) for r in report.ranks]


def test_an_unpaired_arrival_beside_a_send_completion_keeps_the_fold(tmp_path):
    args = _write(tmp_path, _late_receive)
    folded = simulate(*args)
    assert folded.settings["fold"]["simulated_ranks"] == 1
    assert _finishes(folded) == _finishes(simulate(*args, fold=False))


def test_a_callback_pairing_the_receive_after_a_tied_arrival_abandons_the_fold(tmp_path, monkeypatch):
    args = _write(tmp_path, _pairs_after_a_tied_arrival, 4, "FullyConnected", {"comm-streams": "per-communicator"})
    unfolded = _finishes(simulate(*args, fold=False))
    assert unfolded[0] != unfolded[3]  # a real order difference
    folded = simulate(*args)
    assert folded.settings["fold"]["reason"].startswith("folding abandoned: rank 0: a message arrived at 3000 ns "
                                                        "before its receive was posted")
    assert _finishes(folded) == unfolded
    # Without the matcher's check the fold stays, and gives rank 0 the representative's order: wrong.
    monkeypatch.setattr(FoldedEvents, "paired", lambda self, rank, message: None)
    folded = simulate(*args)
    assert folded.settings["fold"]["simulated_ranks"] == 1 and _finishes(folded) != unfolded


def tie_program(rng, npus, one_hop):
    """A random program of ring steps (a send to ``rank + step``, a receive from ``rank - step``), lone sends
    whose receive comes later in the program (after nodes issued beside the send), kernels and all-reduces, whose
    kernels last a whole number of us and whose messages take a whole number of us: ties between completions and
    arrivals are common."""
    steps = [1] if one_hop else [1, 2, npus - 1]
    prog = []
    for i in range(rng.randint(3, 10)):
        deps = sorted(rng.sample(range(i), rng.randint(0, min(2, i))))
        prog.append((rng.choice(["step", "step", "send", "comp", "comp", "coll"]), deps, rng.choice([1, 2, 3]),
                     rng.choice(steps), rng.random() < 0.5, rng.random() < 0.3))

    def program(rank, npus):
        nodes, ids, lone = [], [], []

        def recv(tag, step, us, deps):
            nodes.append(_recv(len(nodes), (rank - step) % npus, tag, us, deps=deps))
            return nodes[-1].id

        for k, (kind, deps, us, step, recv_waits, only_recv) in enumerate(prog):
            dep_ids = [node_id for d in deps for node_id in ids[d]]
            if kind == "send" and lone and recv_waits:  # the receive of an earlier lone send, after its deps
                ids.append([recv(*lone.pop(0), dep_ids)])
            elif kind == "send":
                nodes.append(_send(len(nodes), (rank + step) % npus, 10 + k, us))
                lone.append((10 + k, step, us))
                ids.append([nodes[-1].id])
            elif kind == "step":
                nodes.append(_send(len(nodes), (rank + step) % npus, 10 + k, us, deps=[] if recv_waits else dep_ids))
                ids.append([recv(10 + k, step, us, dep_ids if recv_waits else [])]
                           + ([] if only_recv else [nodes[-2].id]))
            elif kind == "comp":
                nodes.append(_kernel(len(nodes), us, deps=dep_ids))
                ids.append([nodes[-1].id])
            else:
                nodes.append(make_node(len(nodes), "ar", T.COMM_COLL_NODE, data_deps=dep_ids, attrs={
                    "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": us * US_BYTES}))
                ids.append([nodes[-1].id])
        for tag, step, us in lone:
            recv(tag, step, us, [])
        return nodes
    return program


def pairing_program(rng, npus):
    """A random program where a kernel's completion posts the receive of a message arriving at that nanosecond
    (the send, issued beside the kernel, takes as long), and a message sent later arrives then too, freeing a
    kernel that competes with the receive's for the compute slot: whether the receive completes within its arrival
    or as an event of its own decides which kernel runs first (:func:`_pairs_after_a_tied_arrival` by hand)."""
    us = rng.choice([2, 3])
    cpu_us = rng.randint(1, us - 1)
    first, second, third = (rng.randrange(1, npus) for _ in range(3))
    c_us, d_us, w_us = rng.choice([1, 5]), rng.choice([1, 5]), rng.choice([1, 4])
    after = rng.choice([6, 7])

    def program(rank, npus):
        return [_send(0, (rank + first) % npus, 1, us), _kernel(1, us), _cpu(2, cpu_us),
                _send(3, (rank + second) % npus, 3, us - cpu_us, deps=[2]),
                _recv(4, (rank - first) % npus, 1, us, deps=[1]), _recv(5, (rank - second) % npus, 3, us - cpu_us),
                _kernel(6, c_us, deps=[4]), _kernel(7, d_us, deps=[5]),
                _send(8, (rank + third) % npus, 5, w_us, deps=[after]), _recv(9, (rank - third) % npus, 5, w_us)]
    return program


def tie_case(rng, folder):
    """(simulate's args, kwargs) of a random :func:`tie_program` on a Ring (one hop) or FullyConnected network, or
    (a quarter) of a :func:`pairing_program` on FullyConnected or Switch."""
    npus = rng.choice([3, 4, 6])
    streams = {"comm-streams": rng.choice(["single", "per-communicator"])}
    if rng.random() < 0.25:
        return _write(folder, pairing_program(rng, npus), npus, rng.choice(["FullyConnected", "Switch"]), streams), {}
    topology = rng.choice(["Ring", "FullyConnected"])
    system = {"all-reduce-implementation": ["ring"], **streams}
    args = _write(folder, tie_program(rng, npus, topology == "Ring"), npus, topology, system)
    kwargs = {}
    if rng.random() < 0.3:
        kwargs["options"] = {"host_launch_us": rng.choice([1, 2]), "host_sync_us": rng.choice([0, 1])}
    return args, kwargs


def test_random_tie_programs_fold_to_the_ns(tmp_path, fold_whenever_possible):
    rng = random.Random(47)
    folded = 0
    for case in range(30):
        folder = tmp_path / f"c{case}"
        folder.mkdir()
        args, kwargs = tie_case(rng, folder)
        result, report = _outcome(args, kwargs, fold=True)
        assert result == _outcome(args, kwargs, fold=False)[0], f"case {case}"
        folded += report is not None and report.settings["fold"].get("simulated_ranks", 0) < len(report.ranks)
    assert folded >= 6
