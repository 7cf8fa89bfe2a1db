"""The ``chakra_custom`` format: ASTRA-sim 2.x's custom collectives (one Chakra ET per rank).

Expected times were recorded from the reference binaries (AstraSim_Analytical_Congestion_Unaware /
_Aware at astra-sim 518bd51). When a reference wrapper script is available (``$ASTRA_REFERENCE``, or
/work/refbuild/run_reference.sh), the ``test_reference_*`` tests also run it live.
"""

import json
import os
import random
import subprocess

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import ConfigError, SimulationError, WorkloadError
from astra_sim.simulation import simulate
from astra_sim_testing import find_shared_dir, golden_trace, reference_script

from astra_collectives_msccl.chakra_custom import (
    ChakraCustomFormat,
    CustomGraph,
    StdUnorderedSet,
)

SHARED = find_shared_dir()
GOLDEN = golden_trace(SHARED, "custom_ring_allreduce_8npus_1MB", "custom_allreduce")
MEMORY = None if SHARED is None else SHARED / "parity" / "configs" / "mem_NO_MEMORY_EXPANSION.json"

REFERENCE = reference_script() if MEMORY is not None else None
needs_reference = pytest.mark.skipif(REFERENCE is None, reason="no reference simulator ($ASTRA_REFERENCE)")
needs_golden = pytest.mark.skipif(GOLDEN is None, reason="shared/samples/chakra/astra-sim-golden not found")

MIB = 1 << 20
_COLL = {T.ALL_REDUCE: "all-reduce", T.ALL_GATHER: "all-gather", T.ALL_TO_ALL: "all-to-all",
         T.REDUCE_SCATTER: "reduce-scatter"}


def setup_run(folder, prefix, npus, topology="Ring", groups=None, comm_type=T.ALL_REDUCE, size=MIB,
              members=None, system_extra=None):
    """Workload (one collective per rank; ``groups``: {id: [npus]} and the ranks' pg_name), system
    config naming ``prefix`` (the reference's custom_collective.json), network; returns the paths."""
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    group_of = {}
    if groups:
        for gid, ranks in groups.items():
            for rank in ranks:
                group_of[rank] = gid
    for rank in range(npus):
        attrs = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size}
        if groups and rank not in group_of:
            nodes = [make_node(0, "idle", T.COMP_NODE, duration_micros=1)]
        else:
            if groups:
                attrs["pg_name"] = str(group_of[rank])
            nodes = [make_node(0, "coll", T.COMM_COLL_NODE, attrs=attrs)]
        write_et(f"{folder}/w.{rank}.et", make_metadata(), nodes)
    system = {"scheduling-policy": "FIFO", "preferred-dataset-splits": 1,
              f"{_COLL[comm_type]}-implementation-custom": [str(prefix)], "local-mem-bw": 50}
    system.update(system_extra or {})
    with open(f"{folder}/sys.json", "w") as handle:
        json.dump(system, handle)
    with open(f"{folder}/net.yml", "w") as handle:
        handle.write(f"topology: [ {topology} ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    group_path = None
    if groups:
        group_path = f"{folder}/groups.json"
        with open(group_path, "w") as handle:
            json.dump({str(k): v for k, v in groups.items()}, handle)
    return f"{folder}/w", f"{folder}/sys.json", f"{folder}/net.yml", group_path


def ours(paths, **kwargs):
    workload, system, network, groups = paths
    report = simulate(workload, system, network, None, groups, **kwargs)
    return {r.rank: r.finish_ns for r in report.ranks}


def reference(paths, mode="unaware", extra=()):
    workload, system, network, groups = paths
    args = [REFERENCE, mode, f"--workload-configuration={workload}", f"--system-configuration={system}",
            f"--network-configuration={network}", f"--remote-memory-configuration={MEMORY}"]
    if groups:
        args.append(f"--comm-group-configuration={groups}")
    out = subprocess.run(args + list(extra), capture_output=True, text=True, timeout=300)
    result = {}
    for line in out.stdout.splitlines():  # sys[3] finished, 90174 cycles, exposed ...
        rank = int(line.split("[", 1)[1].split("]", 1)[0])
        result[rank] = int(line.split(", ")[1].split()[0])
    return result


def one_message_ns(size, latency=500, gbps=50):
    """The analytical network's one-hop delay (GB/s = 2^30 B/s)."""
    return int(latency + size / (gbps * (1 << 30) / 1e9))


def write_rank(prefix, rank, nodes):
    write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)


def send(node_id, size, dst, tag=0, deps=()):
    return make_node(node_id, f"send{node_id}", T.COMM_SEND_NODE, data_deps=list(deps),
                     attrs={"comm_type": T.COMM_SEND_NODE, "comm_size": size, "comm_dst": dst, "comm_tag": tag})


def recv(node_id, size, src, tag=0, deps=()):
    return make_node(node_id, f"recv{node_id}", T.COMM_RECV_NODE, data_deps=list(deps),
                     attrs={"comm_type": T.COMM_RECV_NODE, "comm_size": size, "comm_src": src, "comm_tag": tag})


def comp(node_id, micros, deps=()):
    return make_node(node_id, f"comp{node_id}", T.COMP_NODE, data_deps=list(deps), duration_micros=micros)


# --------------------------------------------------------------------------- the reference's example


@needs_golden
def test_reference_example_ring_allreduce_is_90174_ns_on_every_rank(tmp_path):
    """examples/system/custom_collectives: 8-NPU Ring, 50 GB/s, 500 ns, 1 MiB all-reduce; per rank 14
    sends + 14 receives of 128 KiB and 7 COMP nodes of 7 us in one chain."""
    paths = setup_run(tmp_path, GOLDEN, 8)
    assert ours(paths) == {rank: 90174 for rank in range(8)}
    assert 90174 == 14 * one_message_ns(131072) + 7 * 7000


@needs_golden
def test_custom_prefix_is_relative_to_the_system_config(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    relative = os.path.relpath(str(GOLDEN), str(conf))
    paths = setup_run(conf, relative, 8)
    assert set(ours(paths).values()) == {90174}


@needs_golden
def test_the_node_comm_size_overrides_the_workload_size(tmp_path):
    paths = setup_run(tmp_path, GOLDEN, 8, size=64 * MIB)
    assert set(ours(paths).values()) == {90174}


@needs_golden
def test_congestion_aware_backend_gives_the_same_time(tmp_path):
    # One chain per rank, one message per link at a time: no congestion (reference: 90174 as well).
    paths = setup_run(tmp_path, GOLDEN, 8)
    assert set(ours(paths, network_backend="congestion").values()) == {90174}


def test_matches_prefixes_with_a_rank_zero_file(tmp_path):
    fmt = ChakraCustomFormat()
    write_rank(tmp_path / "algo", 0, [comp(0, 1)])
    assert fmt.matches(str(tmp_path / "algo"))
    assert not fmt.matches(str(tmp_path / "other"))
    assert not fmt.matches(str(tmp_path / "algo.0.et"))


# --------------------------------------------------------------------------- semantics


def test_comp_nodes_take_duration_micros_and_zero_is_one_ns(tmp_path):
    prefix = tmp_path / "algo"
    size = 1000
    # rank 0: 3 us COMP, send, recv the reply, a free COMP (1 ns); rank 1: recv, 0 us COMP, send back.
    write_rank(prefix, 0, [comp(10, 3), send(11, size, 1, deps=[10]), recv(12, size, 1, deps=[11]), comp(13, 0, deps=[12])])
    write_rank(prefix, 1, [recv(0, size, 0), comp(1, 0, deps=[0]), send(2, size, 0, deps=[1])])
    result = ours(setup_run(tmp_path, prefix, 2, "FullyConnected"))
    hop = one_message_ns(size)
    assert result == {0: 3000 + hop + 1 + hop + 1, 1: 3000 + hop + 1 + hop}


def test_send_finishes_when_the_message_has_arrived(tmp_path):
    prefix = tmp_path / "algo"
    write_rank(prefix, 0, [send(0, MIB, 1), comp(1, 2, deps=[0])])
    write_rank(prefix, 1, [comp(0, 50), recv(1, MIB, 0, deps=[0])])
    result = ours(setup_run(tmp_path, prefix, 2, "FullyConnected"))
    # The send does not wait for the receive to be posted (no rendezvous): done at arrival.
    assert result == {0: one_message_ns(MIB) + 2000, 1: max(50000, one_message_ns(MIB))}


def test_control_dependencies_count_like_data_dependencies(tmp_path):
    prefix = tmp_path / "algo"
    write_rank(prefix, 0, [comp(0, 5), make_node(1, "c", T.COMP_NODE, ctrl_deps=[0], duration_micros=2)])
    write_rank(prefix, 1, [comp(0, 1)])
    assert ours(setup_run(tmp_path, prefix, 2, "FullyConnected")) == {0: 7000, 1: 1000}


def test_tags_keep_messages_apart(tmp_path):
    prefix = tmp_path / "algo"
    # Same size and peers; tag 1 is received first, so the tag-1 message (sent later) gates rank 1.
    write_rank(prefix, 0, [send(0, 4096, 1, tag=0), comp(1, 10, deps=[0]), send(2, 4096, 1, tag=1, deps=[1])])
    write_rank(prefix, 1, [recv(0, 4096, 0, tag=1), recv(1, 4096, 0, tag=0, deps=[0])])
    hop = one_message_ns(4096)
    assert ours(setup_run(tmp_path, prefix, 2, "FullyConnected")) == {0: hop + 10000 + hop, 1: hop + 10000 + hop}


def test_sub_group_translates_algorithm_ranks(tmp_path):
    """Two 4-rank rings on 8 NPUs: algorithm rank k is the group's k-th NPU; each rank runs the file
    of its position in the group (one exchange with the ring neighbours, then 1 us)."""
    result = ours(_ring4_on_8(tmp_path, "FullyConnected"))
    assert result == {rank: one_message_ns(MIB) + 1000 for rank in range(8)}
    # On the Ring-8 the group neighbours are two hops apart (2 x 500 ns + 19531 ns, then 1 us).
    assert ours(_ring4_on_8(tmp_path / "ring", "Ring")) == {rank: 21531 for rank in range(8)}


def _ring4_on_8(folder, topology):
    os.makedirs(folder, exist_ok=True)
    prefix = f"{folder}/ring4"
    for pos in range(4):
        write_rank(prefix, pos, [send(0, MIB, (pos + 1) % 4), recv(1, MIB, (pos - 1) % 4), comp(2, 1, deps=[1])])
    return setup_run(folder, prefix, 8, topology, groups={1: [0, 2, 4, 6], 2: [1, 3, 5, 7]})


def test_sub_group_uses_only_the_files_of_its_positions(tmp_path):
    """A 2-NPU group on a 4-NPU network needs only <prefix>.0.et and .1.et; ranks outside idle."""
    prefix = tmp_path / "pair"
    write_rank(prefix, 0, [send(0, MIB, 1)])
    write_rank(prefix, 1, [recv(0, MIB, 0)])
    result = ours(setup_run(tmp_path, prefix, 4, "Ring", groups={1: [1, 3]}))
    # 1 -> 3 is two hops on the Ring-4 (latency per hop, bandwidth once).
    assert result == {0: 1000, 2: 1000, 1: one_message_ns(MIB, latency=1000), 3: one_message_ns(MIB, latency=1000)}


def test_unsorted_group_is_run_like_the_reference(tmp_path):
    """The reference runs the file of the rank's position among the SORTED NPUs but translates algorithm
    ranks in the LISTED order; with [2, 0] rank 0 runs .0.et whose peer 1 is NPU 0 itself."""
    prefix = tmp_path / "pair"
    write_rank(prefix, 0, [send(0, MIB, 1)])
    write_rank(prefix, 1, [recv(0, MIB, 0)])
    with pytest.raises((ConfigError, SimulationError), match="to itself"):
        ours(setup_run(tmp_path, prefix, 4, "FullyConnected", groups={1: [2, 0]}))
    # Listing the NPUs so that both orders agree gives a warning-free run.
    write_rank(prefix, 0, [send(0, MIB, 1)])
    paths = setup_run(tmp_path / "ok", prefix, 4, "FullyConnected", groups={1: [0, 2]})
    report = simulate(paths[0], paths[1], paths[2], None, paths[3])
    assert not [w for w in report.warnings if "not sorted" in w]


def test_unsorted_group_warns(tmp_path):
    prefix = tmp_path / "pair"
    write_rank(prefix, 0, [comp(0, 1)])
    write_rank(prefix, 1, [comp(0, 1)])
    paths = setup_run(tmp_path, prefix, 4, "FullyConnected", groups={1: [3, 1]})
    report = simulate(paths[0], paths[1], paths[2], None, paths[3])
    assert any("[3, 1] is not sorted" in w for w in report.warnings)


def test_every_custom_collective_type(tmp_path):
    prefix = tmp_path / "algo"
    write_rank(prefix, 0, [send(0, 4096, 1)])
    write_rank(prefix, 1, [recv(0, 4096, 0)])
    for comm_type in (T.ALL_GATHER, T.REDUCE_SCATTER, T.ALL_TO_ALL):
        paths = setup_run(tmp_path / str(comm_type), prefix, 2, "FullyConnected", comm_type=comm_type)
        assert set(ours(paths).values()) == {one_message_ns(4096)}


# --------------------------------------------------------------------------- issue order


# Recorded from a C++ program that applies the same operations to std::unordered_set<uint64_t>
# (libstdc++ 12, the reference's build) and prints the iteration order.
@pytest.mark.parametrize("inserted, erased, expected", [
    (list(range(8)), [], [7, 6, 5, 4, 3, 2, 1, 0]),
    (list(range(14)), [], [13, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
    ([3, 40, 17, 29, 5, 100], [], [100, 5, 17, 40, 29, 3]),
    (list(range(30)), [0, 7, 29], [12, 11, 10, 9, 8, 6, 5, 4, 3, 2, 1, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
                                   24, 25, 26, 27, 28]),
    ([1000, 1001, 5, 2000, 13, 26], [1001], [2000, 5, 26, 13, 1000]),
])
def test_std_unordered_set_iteration_order(inserted, erased, expected):
    s = StdUnorderedSet()
    for key in inserted:
        s.add(key)
    for key in erased:
        s.discard(key)
    assert list(s) == expected
    assert len(s) == len(expected)
    assert list(s.copy()) == expected


def test_std_unordered_set_is_a_set():
    rng = random.Random(3)
    s, model = StdUnorderedSet(), set()
    for _ in range(3000):
        key = rng.randrange(500)
        if rng.random() < 0.6:
            assert s.add(key) == (key not in model)
            model.add(key)
        else:
            assert s.discard(key) == (key in model)
            model.discard(key)
        assert len(s) == len(model)
    assert sorted(s) == sorted(model)


def _free_order(nodes, tmp_path):
    write_et(str(tmp_path / "g.0.et"), make_metadata(), nodes)
    return list(CustomGraph(str(tmp_path / "g.0.et")).free)


def test_roots_are_issued_in_the_reference_hash_order(tmp_path):
    # Three roots 0, 1, 2 (below 13 buckets): ascending; 20 roots: libstdc++'s scrambled order.
    assert _free_order([comp(i, 1) for i in range(3)], tmp_path) == [0, 1, 2]
    order = _free_order([comp(i, 1) for i in range(20)], tmp_path)
    assert order == [12, 11, 10, 9, 8, 7, 6, 19, 18, 5, 17, 4, 16, 3, 15, 2, 14, 1, 13, 0]


def _order_case(folder, ids):
    """Rank 0 issues len(ids) sends to rank 1 at once (distinct sizes; each followed by its own COMP);
    on a congestion-aware link they serialise in issue order, so the finish time depends on it."""
    prefix = f"{folder}/algo"
    senders, receivers = [], []
    for k, node_id in enumerate(ids):
        size = 4096 * (k + 1)
        senders.append(send(node_id, size, 1))
        senders.append(comp(1000 + k, (k * 7) % 11 + 1, deps=[node_id]))
        receivers.append(recv(node_id, size, 0))
    write_rank(prefix, 0, senders)
    write_rank(prefix, 1, receivers)
    for rank in (2, 3):
        write_rank(prefix, rank, [comp(0, 1)])
    return setup_run(folder, prefix, 4, "Ring")


# (ids of rank 0's root sends, per-rank finish ns of the reference's congestion-aware binary)
ORDER_CASES = [
    (list(range(20)), {0: 27435, 1: 16511, 2: 1000, 3: 1000}),
    (list(range(8)), {0: 13177, 1: 3243, 2: 1000, 3: 1000}),
    ([3, 40, 17, 29, 5, 100], {0: 11881, 1: 2099, 2: 1000, 3: 1000}),
]


@pytest.mark.parametrize("ids, expected", ORDER_CASES, ids=["20-dense", "8-dense", "6-sparse"])
def test_same_tick_sends_keep_the_reference_issue_order(tmp_path, ids, expected):
    assert ours(_order_case(tmp_path, ids), network_backend="congestion") == expected


# --------------------------------------------------------------------------- errors


def test_missing_file_for_a_position(tmp_path):
    prefix = tmp_path / "ring4"
    for pos in range(4):
        write_rank(prefix, pos, [comp(0, 1)])
    with pytest.raises(ConfigError) as info:
        ours(setup_run(tmp_path, prefix, 8, "FullyConnected"))
    message = str(info.value)
    assert "ring4.4.et" in message and "does not exist" in message and "ring4.3.et" in message


@pytest.mark.parametrize("nodes, pattern", [
    ([comp(0, 1), comp(1, 1, deps=[7])], r"node 1 \('comp1'\) depends on node 7, which is not in the file"),
    ([comp(0, 1), comp(1, 1, deps=[0, 2]), comp(2, 1, deps=[1])], r"cycle; these nodes can never run: 1 .*2 "),
    ([comp(0, 1, deps=[1]), comp(1, 1, deps=[0])], r"every node .* waits for another"),
    ([make_node(0, "ar", T.COMM_COLL_NODE, attrs={"comm_size": 8})], r"not COMM_COLL_NODE"),
    ([make_node(0, "s", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_tag": 0})], r"comm_size"),
    ([make_node(0, "r", T.COMM_RECV_NODE, attrs={"comm_size": 8, "comm_tag": 0})], r"comm_src"),
    ([make_node(0, "s", T.COMM_SEND_NODE, attrs={"comm_size": 8, "comm_dst": 1})], r"comm_tag"),
    ([send(0, 0, 1)], r"comm_size is 0"),
    ([send(0, 8, -1)], r"comm_dst is -1"),
    ([], r"no nodes"),
])
def test_bad_graphs_are_clear_errors(tmp_path, nodes, pattern):
    prefix = tmp_path / "bad"
    write_rank(prefix, 0, nodes)
    write_rank(prefix, 1, [comp(0, 1)])
    with pytest.raises(WorkloadError, match=pattern) as info:
        ours(setup_run(tmp_path, prefix, 2, "FullyConnected"))
    assert "bad.0.et" in str(info.value)


def test_peer_outside_the_communicator(tmp_path):
    prefix = tmp_path / "algo"
    write_rank(prefix, 0, [send(0, 8, 5)])
    write_rank(prefix, 1, [comp(0, 1)])
    with pytest.raises(WorkloadError, match=r"algo.0.et: node 0 \('send0'\) names algorithm rank 5, but the network has 2 NPUs"):
        ours(setup_run(tmp_path, prefix, 2, "FullyConnected"))
    with pytest.raises(WorkloadError, match=r"communicator group \[0, 2\] has 2 NPUs"):
        ours(setup_run(tmp_path / "g", prefix, 4, "FullyConnected", groups={1: [0, 2]}))


def test_corrupt_file(tmp_path):
    prefix = tmp_path / "algo"
    (tmp_path / "algo.0.et").write_bytes(b"\x05abc")
    write_rank(prefix, 1, [comp(0, 1)])
    with pytest.raises(WorkloadError, match="algo.0.et"):
        ours(setup_run(tmp_path, prefix, 2, "FullyConnected"))


def test_unmatched_messages_deadlock_clearly(tmp_path):
    prefix = tmp_path / "algo"
    write_rank(prefix, 0, [recv(0, 8, 1)])
    write_rank(prefix, 1, [comp(0, 1)])
    with pytest.raises(SimulationError, match="deadlock"):
        ours(setup_run(tmp_path, prefix, 2, "FullyConnected"))


# --------------------------------------------------------------------------- live reference


@needs_reference
@needs_golden
def test_reference_live_golden(tmp_path):
    paths = setup_run(tmp_path, GOLDEN, 8)
    assert reference(paths) == ours(paths) == {rank: 90174 for rank in range(8)}


@needs_reference
@pytest.mark.parametrize("ids, expected", ORDER_CASES, ids=["20-dense", "8-dense", "6-sparse"])
def test_reference_live_issue_order(tmp_path, ids, expected):
    paths = _order_case(tmp_path, ids)
    assert reference(paths, "aware") == expected


@needs_reference
def test_reference_live_sub_groups(tmp_path):
    for topology in ("Ring", "FullyConnected", "Switch"):
        paths = _ring4_on_8(tmp_path / topology, topology)
        assert reference(paths) == ours(paths)
    prefix = tmp_path / "pair"
    write_rank(prefix, 0, [send(0, MIB, 1)])
    write_rank(prefix, 1, [recv(0, MIB, 0)])
    paths = setup_run(tmp_path / "pair_run", prefix, 4, "Ring", groups={1: [1, 3]})
    assert reference(paths) == ours(paths)


@needs_reference
def test_reference_live_random_graphs(tmp_path):
    """Random per-rank DAGs (random ids, file order, fan-out, COMP durations, tags) exchanging
    messages: per-rank finish times equal the reference's, on both analytical backends."""
    rng = random.Random(11)
    for case in range(6):
        folder = tmp_path / f"c{case}"
        folder.mkdir()
        npus = 4
        prefix = f"{folder}/algo"
        per_rank = {r: [] for r in range(npus)}
        ids = {r: rng.sample(range(5000), 200) for r in range(npus)}
        used = {r: 0 for r in range(npus)}

        def new_id(r):
            used[r] += 1
            return ids[r][used[r] - 1]

        for k in range(rng.randint(5, 25)):
            src, dst = rng.sample(range(npus), 2)
            size = rng.choice([1024, 4096, 65536]) * 64 + k  # unique: messages match one to one
            tag = rng.randrange(3)
            for r, make in ((src, lambda i, d: send(i, size, dst, tag, d)), (dst, lambda i, d: recv(i, size, src, tag, d))):
                deps = [n.id for n in rng.sample(per_rank[r], min(len(per_rank[r]), rng.choice([0, 0, 1, 2])))]
                node = make(new_id(r), deps)
                per_rank[r].append(node)
                if rng.random() < 0.5:
                    per_rank[r].append(comp(new_id(r), rng.randrange(4), deps=[node.id]))
        for r in range(npus):
            nodes = per_rank[r] or [comp(new_id(r), 1)]
            rng.shuffle(nodes)
            write_rank(prefix, r, nodes)
        paths = setup_run(folder, prefix, npus, rng.choice(["Ring", "FullyConnected", "Switch"]))
        expected = reference(paths)
        assert expected and ours(paths) == expected, case
        expected = reference(paths, "aware")
        assert expected and ours(paths, network_backend="congestion") == expected, case
