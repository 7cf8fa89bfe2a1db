"""Symmetry folding: a folded run gives every rank the same numbers, to the ns, as the unfolded run.

Random symmetric cases (multi-dimensional networks, collectives on the default group and on communicator
groups, send/receive shifts, compute, remote memory, every scheduling option) are simulated folded and
unfolded and compared rank by rank; so is every parity case. Cases that must not fold (an asymmetric
trace, a stateful network, a shared remote memory, algorithms without symmetry) fall back and say why.
"""

from __future__ import annotations

import json
import random

import pytest

from astra_sim import hookimpl
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import AstraError
from astra_sim.simulation import Simulation, simulate
from astra_folding.symmetry import BlockShift, RankSymmetry, group_key, shift_image
from astra_sim_testing import find_shared_dir, parity_cases, parity_kwargs

COLLECTIVES = [T.ALL_REDUCE, T.ALL_GATHER, T.REDUCE_SCATTER, T.ALL_TO_ALL]


# ------------------------------------------------------------------------------------------ the group


def test_block_shift_group_acts_freely_and_inverts():
    sym = RankSymmetry([BlockShift(1, 8, 4), BlockShift(8, 6, 3)])  # 8 x 6 NPUs
    assert sym.order == 12
    reps = sym.representatives(48)
    assert len(reps) == 48 // 12
    seen = set()
    for rank in range(48):
        offsets = sym.offsets(rank)
        rep = sym.representative(rank)
        assert sym.moved(rep, offsets) == rank
        assert sym.moved(rank, offsets, -1) == rep
        assert rep in reps
        seen.add((rep, offsets))
    assert len(seen) == 48  # every rank is one representative moved by one group element


def test_shift_image_rotates_inside_blocks():
    shift = BlockShift(stride=2, radix=6, block=3)
    digits = [(shift_image(shift, r) // 2) % 6 for r in range(0, 12, 2)]
    assert digits == [1, 2, 0, 4, 5, 3]


def test_group_keys():
    assert group_key([3, 1, 2], "rotation") == (1, 2, 3)
    assert group_key([3, 1, 2], "set") == (1, 2, 3)
    assert group_key([2, 1, 3], "rotation") == (1, 3, 2)
    assert group_key([2, 1, 3], "exact") == (2, 1, 3)


# ------------------------------------------------------------------------------------------ random cases


def _prod(values):
    out = 1
    for v in values:
        out *= v
    return out


def _coords(rank, npus):
    out = []
    for count in npus:
        out.append(rank % count)
        rank //= count
    return out


def _rank(coords, npus):
    rank, stride = 0, 1
    for c, count in zip(coords, npus):
        rank += c * stride
        stride *= count
    return rank


def _moved(rank, npus, dim, step, block):
    c = _coords(rank, npus)
    start = c[dim] - c[dim] % block
    c[dim] = start + (c[dim] - start + step) % block
    return _rank(c, npus)


def symmetric_case(rng, folder, asymmetric=False):
    """A random case whose inputs are invariant under shifts of every dimension (in blocks for some)."""
    ndims = rng.choice([1, 2, 2, 3])
    kinds = [rng.choice(["Ring", "FullyConnected", "Switch", "Switch"]) for _ in range(ndims)]
    npus = [rng.choice([2, 3, 4, 4, 6, 8]) for _ in range(ndims)]
    while _prod(npus) > 48:
        npus[rng.randrange(ndims)] = 2
    total = _prod(npus)
    # Blocks: a switch dimension may be symmetric only inside blocks (ranks of different blocks differ).
    blocks = []
    for kind, count in zip(kinds, npus):
        divisors = [b for b in range(2, count) if count % b == 0]
        blocks.append(rng.choice(divisors) if kind != "Ring" and divisors and rng.random() < 0.3 else count)
    network = folder / "network.yml"
    network.write_text(
        f"topology: [ {', '.join(kinds)} ]\nnpus_count: {npus}\n"
        f"bandwidth: {[rng.choice([25.0, 50.0, 200.0]) for _ in npus]}\n"
        f"latency: {[rng.choice([0.0, 100.0, 500.0]) for _ in npus]}\n"
        + ("cross_dimension_route: dimension_order\n" if rng.random() < 0.3 else ""))
    algos = ["ring", "ring", "direct", "direct2"]
    if rng.random() < 0.15:
        algos.append(rng.choice(["halvingDoubling", "doubleBinaryTree"]))
    if ndims == 1 and rng.random() < 0.2:
        algos = ["oneRing"]
    system = {
        "scheduling-policy": rng.choice(["LIFO", "FIFO", "EXPLICIT"]),
        "endpoint-delay": rng.choice([0, 1, 10, 50]),
        "active-chunks-per-dimension": rng.choice([1, 1, 2, 4]),
        "preferred-dataset-splits": rng.choice([1, 2, 4, 8]),
        "collective-optimization": rng.choice(["baseline", "baseline", "localBWAware"]),
        "local-mem-bw": rng.choice([50, 1600]),
        "comm-streams": rng.choice(["single", "single", "per-communicator"]),
    }
    for key in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        chosen = [rng.choice(algos) for _ in range(rng.randint(1, ndims))]
        if chosen[0] == "oneRing":
            chosen = ["oneRing"]
        if key == "all-to-all":
            chosen = [a.replace("halvingDoubling", "ring") for a in chosen]
        if any(a in ("halvingDoubling", "doubleBinaryTree") for a in chosen) and any(
                npus[d] & (npus[d] - 1) for d in range(len(chosen))):
            chosen = ["ring" if a in ("halvingDoubling", "doubleBinaryTree") else a for a in chosen]
        system[f"{key}-implementation"] = chosen
    if rng.random() < 0.15:
        system.update({"roofline-enabled": 1, "peak-perf": 100})
    (folder / "system.json").write_text(json.dumps(system))
    memory = {"memory-type": rng.choice(["NO_MEMORY_EXPANSION", "PER_NPU_MEMORY_EXPANSION"]),
              "remote-mem-latency": 500, "remote-mem-bw": 50}
    (folder / "memory.json").write_text(json.dumps(memory))
    # Communicator groups: the lines of one dimension (inside its blocks), members in coordinate order.
    group_dim = rng.randrange(ndims)
    group_of = {}
    groups = {}
    if rng.random() < 0.5 and npus[group_dim] > 1:
        block = blocks[group_dim]
        for rank in range(total):
            line = tuple(sorted({_moved(rank, npus, group_dim, k, block) for k in range(block)}))
            if line not in groups.values():
                groups[len(groups) + 1] = list(line)
            group_of[rank] = next(g for g, m in groups.items() if tuple(m) == line)
        (folder / "groups.json").write_text(json.dumps({str(k): v for k, v in groups.items()}))
    # One random program, relabelled per rank: peers are shifts along a dimension (inside its blocks).
    program = []
    for i in range(rng.randint(3, 9)):
        deps = sorted(rng.sample(range(i), rng.randint(0, min(2, i)))) if i else []
        kind = rng.choice(["comp", "comp", "cpu", "coll", "coll", "gcoll", "p2p", "mem"])
        if kind == "gcoll" and not groups:
            kind = "coll"
        if kind == "mem" and memory["memory-type"] == "NO_MEMORY_EXPANSION":
            kind = "comp"
        program.append((kind, deps, rng.randrange(1 << 30)))
    prefix = folder / "t"
    for rank in range(total):
        nodes = []
        next_id = 0
        ids = []
        block_index = tuple(c // b for c, b in zip(_coords(rank, npus), blocks))
        for kind, deps, seed in program:
            r = random.Random(seed)
            dep_ids = [ids[d][-1] for d in deps]
            made = []
            if kind in ("comp", "cpu"):
                us = r.choice([0, 3, 20, 50])
                if kind == "comp" and any(block_index):  # blocks differ: breaks symmetry across blocks only
                    us += sum(block_index)
                made.append(make_node(next_id, "comp", T.COMP_NODE, data_deps=dep_ids, duration_micros=us,
                                      attrs={"is_cpu_op": kind == "cpu", "num_ops": r.choice([10**6, 10**9]),
                                             "tensor_size": r.choice([4096, 10**6])}))
            elif kind in ("coll", "gcoll"):
                attrs = {"is_cpu_op": False, "comm_type": r.choice(COLLECTIVES),
                         "comm_size": r.choice([1024, 65536, 1 << 20, 1000003]), "comm_priority": r.randrange(3)}
                if kind == "gcoll":
                    attrs["pg_name"] = str(group_of[rank])
                elif r.random() < 0.3:
                    attrs["involved_dim"] = [r.random() < 0.7 for _ in range(ndims)]
                made.append(make_node(next_id, "coll", T.COMM_COLL_NODE, data_deps=dep_ids, attrs=attrs))
            elif kind == "p2p":
                dim = r.randrange(ndims)
                block = blocks[dim]
                step = r.randrange(1, block) if block > 1 else 0
                size = r.choice([4096, 1 << 20])
                if step:
                    made.append(make_node(next_id, "send", T.COMM_SEND_NODE, data_deps=dep_ids, attrs={
                        "is_cpu_op": False, "comm_src": rank, "comm_dst": _moved(rank, npus, dim, step, block),
                        "comm_size": size, "comm_tag": 3}))
                    made.append(make_node(next_id + 1, "recv", T.COMM_RECV_NODE, data_deps=dep_ids, attrs={
                        "is_cpu_op": False, "comm_src": _moved(rank, npus, dim, -step, block), "comm_dst": rank,
                        "comm_size": size, "comm_tag": 3}))
                else:
                    made.append(make_node(next_id, "comp", T.COMP_NODE, data_deps=dep_ids, duration_micros=5,
                                          attrs={"is_cpu_op": False}))
            else:
                made.append(make_node(next_id, "load", T.MEM_LOAD_NODE, data_deps=dep_ids,
                                      attrs={"is_cpu_op": False, "tensor_size": r.choice([4096, 1 << 20])}))
            next_id += len(made)
            ids.append([n.id for n in made])
            nodes.extend(made)
        if asymmetric and rank == total - 1:
            nodes.append(make_node(next_id, "extra", T.COMP_NODE, duration_micros=7, attrs={"is_cpu_op": False}))
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    kwargs = {"num_queues_per_dim": rng.choice([1, 1, 2]), "injection_scale": rng.choice([1.0, 2.0]),
              "rendezvous": rng.random() < 0.15}
    if rng.random() < 0.2:  # the host model: kernels wait for their launch
        kwargs["options"] = {"host_launch_us": rng.choice([1, 7]), "host_sync_us": rng.choice([0, 3])}
    groups_path = str(folder / "groups.json") if groups else None
    return (str(prefix), str(folder / "system.json"), str(network), str(folder / "memory.json"), groups_path), kwargs


def _outcome(args, kwargs, fold):
    """Every rank's numbers, its breakdown (relabelled from its representative when folded) and the
    critical path."""
    try:
        report = simulate(*args, fold=fold, critical_path=True, **kwargs)
    except AstraError as exc:
        return ("error", type(exc).__name__), None
    ranks = [(r.rank, r.finish_ns, r.compute_ns, r.exposed_comm_ns, r.cpu_ns, r.comm_ns, r.nodes, r.breakdown)
             for r in report.ranks]
    for r in report.ranks:
        assert sum(r.breakdown["parts"].values()) == r.finish_ns, "the parts add up to the finish time"
    return (ranks, report.critical_path), report


RANDOM_CASES = 200


# (fold_whenever_possible, conftest.py: 13 of the random cases below fold only by 2 or 3)


def test_random_symmetric_cases_fold_exactly(tmp_path, fold_whenever_possible):
    rng = random.Random(20261126)
    folded = 0
    partial = 0
    for case in range(RANDOM_CASES):
        folder = tmp_path / f"c{case}"
        folder.mkdir()
        args, kwargs = symmetric_case(rng, folder)
        unfolded, _ = _outcome(args, kwargs, fold=False)
        result, report = _outcome(args, kwargs, fold=True)
        assert result == unfolded, f"case {case}: {args} {kwargs}"
        if report is not None:
            info = report.settings["fold"]
            if info.get("ranks_per_class", 1) > 1:
                folded += 1
                assert report.stats["simulated_ranks"] == info["simulated_ranks"] < len(report.ranks)
                if info["simulated_ranks"] > 1:
                    partial += 1
            else:
                assert info["reason"], "an unfolded run must say why"
    # Many cases fold, some only in part (blocks, algorithms). The others were refused or abandoned:
    # mostly a send and a receive of one rank completing at the same nanosecond, whose order the
    # unfolded engine takes from rank numbers (it differs between ranks of a class).
    assert folded >= RANDOM_CASES // 5, folded
    assert partial >= 5, partial


def test_random_cases_on_the_congestion_backend_fold_by_link_orbits_and_agree(tmp_path, fold_whenever_possible):
    """The congestion-aware backend's link queues fold by orbit (astra_network_congestion.congestion_fold): the
    random symmetric cases give exactly the unfolded answers, many of them folded, the others saying why not."""
    rng = random.Random(11)
    folded = 0
    for case in range(20):
        folder = tmp_path / f"g{case}"
        folder.mkdir()
        args, kwargs = symmetric_case(rng, folder)
        kwargs["network_backend"] = "congestion"
        unfolded, _ = _outcome(args, kwargs, fold=False)
        result, report = _outcome(args, kwargs, fold=True)
        assert result == unfolded, f"case {case}: {args} {kwargs}"
        if report is not None:
            info = report.settings["fold"]
            if info["simulated_ranks"] < len(report.ranks):
                folded += 1
            else:
                assert info["reason"], "an unfolded run must say why"
    assert folded >= 5, folded


def test_asymmetric_trace_is_not_folded_and_says_why(tmp_path, fold_whenever_possible):
    rng = random.Random(5)
    for case in range(20):
        folder = tmp_path / f"a{case}"
        folder.mkdir()
        args, kwargs = symmetric_case(rng, folder, asymmetric=True)
        unfolded, _ = _outcome(args, kwargs, fold=False)
        result, report = _outcome(args, kwargs, fold=True)
        assert result == unfolded
        if report is not None:
            info = report.settings["fold"]
            # The last rank alone has an extra node: no shift that moves it can be a symmetry.
            assert info["simulated_ranks"] >= 2
            last = len(report.ranks) - 1
            assert report.ranks[last].nodes == report.ranks[0].nodes + 1


# ------------------------------------------------------------------------------------------ fallbacks


def _ring_case(tmp_path, memory_type="NO_MEMORY_EXPANSION", mem_node=False, npus=8):
    (tmp_path / "net.yml").write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50 ]\n"
                                      "latency: [ 500 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"],
                                                   "preferred-dataset-splits": 4, "local-mem-bw": 50}))
    memory = {"memory-type": memory_type, "remote-mem-latency": 100, "remote-mem-bw": 10}
    if memory_type == "PER_NODE_MEMORY_EXPANSION":
        memory.update({"num-nodes": 2, "num-npus-per-node": npus // 2})
    (tmp_path / "mem.json").write_text(json.dumps(memory))
    for rank in range(npus):
        nodes = [make_node(0, "ar", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                            "comm_size": 1 << 20})]
        if mem_node:
            nodes.append(make_node(1, "load", T.MEM_LOAD_NODE, data_deps=[0],
                                   attrs={"is_cpu_op": False, "tensor_size": 4096}))
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), nodes)
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml"), str(tmp_path / "mem.json")


def test_fully_symmetric_ring_simulates_one_rank(tmp_path):
    args = _ring_case(tmp_path)
    report = simulate(*args)
    assert report.settings["fold"]["simulated_ranks"] == 1
    assert report.stats["simulated_ranks"] == 1
    assert report.stats["messages"] == simulate(*args, fold=False).stats["messages"]
    assert [r.finish_ns for r in report.ranks] == [r.finish_ns for r in simulate(*args, fold=False).ranks]


def test_no_fold_option_keeps_every_rank(tmp_path):
    args = _ring_case(tmp_path)
    report = simulate(*args, fold=False)
    assert report.stats["simulated_ranks"] == 8
    assert "disabled" in report.settings["fold"]["reason"]


@pytest.mark.parametrize("memory_type,folds", [("PER_NPU_MEMORY_EXPANSION", True),
                                               ("PER_NODE_MEMORY_EXPANSION", False), ("MEMORY_POOL", False)])
def test_shared_remote_memory_is_not_folded(tmp_path, memory_type, folds):
    args = _ring_case(tmp_path, memory_type, mem_node=True)
    report = simulate(*args)
    assert (report.stats["simulated_ranks"] == 1) is folds
    if not folds:
        assert "shared between NPUs" in report.settings["fold"]["reason"]
    assert [r.finish_ns for r in report.ranks] == [r.finish_ns for r in simulate(*args, fold=False).ranks]


def test_stateful_networks_fold_by_link_orbit(tmp_path):
    """The congestion backend's link queues and the flow backend's max-min rates fold by link orbit (they declare
    it: LinkFoldingNetwork) and give the unfolded finish times (their own tests: network_congestion)."""
    args = _ring_case(tmp_path)
    for backend in ("flow", "congestion"):
        folded = simulate(*args, network_backend=backend)
        assert folded.stats["simulated_ranks"] < 8
        assert [r.finish_ns for r in folded.ranks] == [r.finish_ns for r in simulate(*args, network_backend=backend,
                                                                                        fold=False).ranks]


def test_partial_symmetry_folds_the_symmetric_dimension(tmp_path):
    """Ranks differ along dimension 1 (compute grows with it) but not along dimension 0."""
    (tmp_path / "net.yml").write_text("topology: [ Switch, Switch ]\nnpus_count: [ 4, 3 ]\nbandwidth: [ 50, 25 ]\n"
                                      "latency: [ 100, 1000 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring", "ring"],
                                                   "preferred-dataset-splits": 2, "local-mem-bw": 50}))
    for rank in range(12):
        nodes = [make_node(0, "c", T.COMP_NODE, duration_micros=10 * (1 + rank // 4), attrs={"is_cpu_op": False}),
                 make_node(1, "ar", T.COMM_COLL_NODE, data_deps=[0],
                           attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20})]
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), nodes)
    args = (str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml"))
    report = simulate(*args)
    info = report.settings["fold"]
    assert info["simulated_ranks"] == 3 and info["ranks_per_class"] == 4
    assert any("dimension 1 not folded" in note for note in info["notes"])
    assert [(r.finish_ns, r.compute_ns) for r in report.ranks] == [
        (r.finish_ns, r.compute_ns) for r in simulate(*args, fold=False).ranks]


def test_folded_deadlock_names_the_stuck_representative(tmp_path):
    """Every rank receives from its left neighbour, nobody sends: a deadlock, folded or not."""
    (tmp_path / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"],
                                                   "preferred-dataset-splits": 1}))
    for rank in range(4):
        nodes = [make_node(0, "recv", T.COMM_RECV_NODE, attrs={
            "is_cpu_op": False, "comm_src": (rank - 1) % 4, "comm_dst": rank, "comm_size": 64, "comm_tag": 1})]
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), nodes)
    args = (str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml"))
    with pytest.raises(AstraError) as folded:
        simulate(*args)
    with pytest.raises(AstraError) as unfolded:
        simulate(*args, fold=False)
    assert type(folded.value) is type(unfolded.value)
    assert "rank 0" in str(folded.value) and "recv" in str(folded.value)


# ------------------------------------------------------------------------------------------ parity cases

SHARED = find_shared_dir()
PARITY = [c for c in parity_cases(SHARED) if c["finishes"] == "1" and c["backend"] == "analytical"]


@pytest.mark.skipif(not PARITY, reason="shared/parity/cases.csv not found")
def test_every_parity_case_folds_to_the_same_ranks():
    parity = SHARED / "parity"
    configs = parity / "configs"
    folded = 0
    for case in PARITY:
        args = (str(parity / case["trace"]), str(configs / f"{case['system']}.json"),
                str(configs / f"{case['network']}.yml"), str(configs / f"{case['memory']}.json"))
        kwargs = dict(network_backend=case["backend"], **parity_kwargs(case["extra"]))
        unfolded, _ = _outcome(args, kwargs, fold=False)
        result, report = _outcome(args, kwargs, fold=True)
        assert result == unfolded, case["id"]
        assert report.max_finish_ns == int(case["max_ns"]), case["id"]
        folded += report.settings["fold"].get("ranks_per_class", 1) > 1
    assert folded >= len(PARITY) // 2


def test_simulation_object_exposes_only_representatives(tmp_path):
    args = _ring_case(tmp_path)
    sim = Simulation(*args)
    sim.run()
    assert [w is not None for w in sim.workloads] == [True] + [False] * 7


def _shift_exchange(tmp_path, npus=4, race=False):
    """Every rank sends to its right neighbour and receives from its left one, both at time 0: the send
    and the receive complete at the same nanosecond on every rank. With ``race``, two collectives wait
    for the one communication slot: one needs the receive, the other nothing."""
    (tmp_path / "net.yml").write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50 ]\n"
                                      "latency: [ 5 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"],
                                                   "all-gather-implementation": ["ring"],
                                                   "preferred-dataset-splits": 1, "local-mem-bw": 50}))
    for rank in range(npus):
        nodes = [
            make_node(0, "send", T.COMM_SEND_NODE, attrs={"is_cpu_op": False, "comm_dst": (rank + 1) % npus,
                                                          "comm_size": 4096, "comm_tag": 1}),
            make_node(1, "recv", T.COMM_RECV_NODE, attrs={"is_cpu_op": False, "comm_src": (rank - 1) % npus,
                                                          "comm_size": 4096, "comm_tag": 1}),
        ]
        if race:
            nodes += [
                make_node(2, "ag", T.COMM_COLL_NODE, data_deps=[1], attrs={
                    "is_cpu_op": False, "comm_type": T.ALL_GATHER, "comm_size": 65536}),
                make_node(3, "ar", T.COMM_COLL_NODE, attrs={
                    "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1024}),
            ]
        else:
            nodes.append(make_node(2, "c", T.COMP_NODE, data_deps=[0, 1], duration_micros=3,
                                   attrs={"is_cpu_op": False}))
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), nodes)
    return str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml")


def test_completions_that_commute_keep_the_fold(tmp_path):
    """Rank 0 learns of its send's arrival before its receive (its left neighbour, the last rank, started
    after it); every other rank the other way round. Neither completion alone lets a rank issue anything,
    so the order does not matter and the run stays folded."""
    args = _shift_exchange(tmp_path)
    report = simulate(*args)
    assert report.settings["fold"]["simulated_ranks"] == 1
    assert [r.finish_ns for r in report.ranks] == [r.finish_ns for r in simulate(*args, fold=False).ranks]


def test_a_tie_ordered_by_rank_numbers_abandons_the_fold(tmp_path):
    """As above, but the send's completion frees the communication slot for the all-reduce while the
    all-gather waits for the receive: rank 0 (send first) starts the all-reduce, the others the all-gather.
    The unfolded engine orders them by rank numbers, the ranks of the class differ, and the fold is
    abandoned for an unfolded run (which ends as it ends unfolded)."""
    args = _shift_exchange(tmp_path, race=True)
    folded, report = _outcome(args, {}, fold=True)
    unfolded, _ = _outcome(args, {}, fold=False)
    assert folded == unfolded
    if report is not None:
        assert report.settings["fold"]["reason"].startswith("folding abandoned: rank 0:")
    else:
        assert folded[0] == "error"


def test_identical_arrivals_at_one_nanosecond_keep_the_fold(tmp_path):
    """A direct all-reduce: every rank receives from all its peers at the same nanosecond; the arrivals
    are the same call, so their order does not matter and the run stays folded."""
    (tmp_path / "net.yml").write_text("topology: [ FullyConnected ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\n"
                                      "latency: [ 500 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["direct"],
                                                   "preferred-dataset-splits": 2, "local-mem-bw": 50}))
    for rank in range(8):
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), [make_node(
            0, "ar", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20})])
    args = (str(tmp_path / "t"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml"))
    report = simulate(*args)
    assert report.settings["fold"]["simulated_ranks"] == 1
    assert [r.finish_ns for r in report.ranks] == [r.finish_ns for r in simulate(*args, fold=False).ranks]


def test_without_the_folding_plugin_every_rank_runs_with_the_same_ns(tmp_path):
    """The kernel alone simulates every rank and says why; the plugin's fold gives the same finish times."""
    args = _ring_case(tmp_path)
    folded = simulate(*args)
    plain = simulate(*args, block=("folding",))
    assert folded.settings["fold"]["simulated_ranks"] == 1
    assert plain.stats["simulated_ranks"] == 8
    assert plain.settings["fold"]["reason"] == "no fold planner is loaded (the astra-folding plugin)"
    assert [r.finish_ns for r in plain.ranks] == [r.finish_ns for r in folded.ranks]
    assert simulate(*args, block=("folding",), fold=False).settings["fold"]["reason"] == "folding disabled (--no-fold)"


class _SlowedBesideCommunication:
    """A compute model whose node time depends on the rank's communication in flight when the node starts
    (as the gpu model's contention): 3 us, plus 1 us per transfer running beside it."""

    foldable = True
    reads_comm_in_flight = True

    def __init__(self, context):
        self.in_flight = context.comm_nodes_in_flight

    def compute_time_ns(self, node, rank):
        return 3000 + 1000 * len(self.in_flight(rank))


class _ComputePlugin:
    @staticmethod
    @hookimpl
    def astra_register_compute_models(registry):
        registry.compute_model("beside_comm", _SlowedBesideCommunication, "3 us + 1 us per transfer in flight")


def _exchange_then_compute(tmp_path, npus=4):
    """Every rank sends to its right neighbour and receives from its left one (a context-parallel ring
    step); a kernel needs only the receive. Send and receive complete at one nanosecond, in an order that
    rank numbers decide (rank 0 learns of its send first, every other rank of its receive first)."""
    args = _shift_exchange(tmp_path, npus)
    for rank in range(npus):
        nodes = [
            make_node(0, "send", T.COMM_SEND_NODE, attrs={"is_cpu_op": False, "comm_dst": (rank + 1) % npus,
                                                          "comm_size": 4096, "comm_tag": 1}),
            make_node(1, "recv", T.COMM_RECV_NODE, attrs={"is_cpu_op": False, "comm_src": (rank - 1) % npus,
                                                          "comm_size": 4096, "comm_tag": 1}),
            make_node(2, "attn", T.COMP_NODE, data_deps=[1], duration_micros=3, attrs={"is_cpu_op": False}),
            make_node(3, "send2", T.COMM_SEND_NODE, data_deps=[2], attrs={
                "is_cpu_op": False, "comm_dst": (rank + 1) % npus, "comm_size": 8192, "comm_tag": 2}),
            make_node(4, "recv2", T.COMM_RECV_NODE, data_deps=[2], attrs={
                "is_cpu_op": False, "comm_src": (rank - 1) % npus, "comm_size": 8192, "comm_tag": 2}),
        ]
        write_et(f"{tmp_path}/t.{rank}.et", make_metadata(), nodes)
    return args


@pytest.mark.parametrize("compute_model", [None, "beside_comm"])
def test_a_receive_that_issues_work_beside_a_send_that_frees_nothing_keeps_the_fold(tmp_path, compute_model):
    """The receive's completion issues the kernel; the send's frees nothing and holds no slot the kernel
    needs. A model reading the communication in flight times the kernel at the end of the nanosecond, when
    the send has completed in either order: every rank gets the same time, and the run stays folded."""
    args = _exchange_then_compute(tmp_path)
    kwargs = {"compute_model": compute_model, "extra_plugins": [_ComputePlugin]} if compute_model else {}
    folded = simulate(*args, **kwargs)
    unfolded = simulate(*args, fold=False, **kwargs)
    assert folded.settings["fold"]["simulated_ranks"] == 1
    assert [r.finish_ns for r in folded.ranks] == [r.finish_ns for r in unfolded.ranks]
    assert len({(r.finish_ns, r.compute_ns) for r in unfolded.ranks}) == 1  # the unfolded ranks agree too
    if compute_model:
        assert unfolded.ranks[0].compute_ns == 3000  # the send ended at that nanosecond: nothing beside it
