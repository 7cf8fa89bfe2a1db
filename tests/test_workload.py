"""Workload layer (core/astra_sim/workload/): issue order, hardware slots, graph checks (§3)."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.simulation import Simulation, simulate
from astra_sim.workload.graph import build_graph
from astra_sim_testing import system_config, reduction_ns

GIB = 1 << 30
MIB = 1 << 20

SYSTEM = system_config()
BW, LAT = 100.0, 200.0


def t_msg(m, hops=1):
    return int(hops * LAT + m / (BW * GIB / 1e9))


def r_red(m):
    return reduction_ns(m)


def ring_ar_ns(size, n, splits=4, e=10):
    chunk = size // splits
    m = chunk // n
    return splits * (2 * (n - 1) * t_msg(m) + (2 * n - 1) * e + (n - 1) * r_red(m))


@pytest.fixture
def env(tmp_path):
    class Env:
        def __init__(self):
            self.dir = tmp_path
            self.system = tmp_path / "sys.json"
            self.system.write_text(json.dumps(SYSTEM))

        def network(self, npus):
            path = self.dir / f"ring{npus}.yml"
            path.write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ {BW} ]\nlatency: [ {LAT} ]\n")
            return str(path)

        def trace(self, name, nodes_for_rank, npus):
            prefix = self.dir / name
            for rank in range(npus):
                write_et(f"{prefix}.{rank}.et", make_metadata(), nodes_for_rank(rank))
            return str(prefix)

        def run(self, name, nodes_for_rank, npus=2, **kwargs):
            """Simulate and also return per-node (start, end) times keyed by (rank, node id)."""
            sim = Simulation(self.trace(name, nodes_for_rank, npus), str(self.system), self.network(npus), **kwargs)
            times = {}

            def record(rank, node, start_ns, end_ns):
                times[(rank, node.id)] = (start_ns, end_ns)

            sim.record_node = record
            return sim.run(), times

    return Env()


def comp(node_id, micros, deps=(), cpu=False, name=None):
    return make_node(node_id, name or f"comp{node_id}", T.COMP_NODE, data_deps=list(deps),
                     duration_micros=micros, attrs={"is_cpu_op": cpu})


def allreduce(node_id, size, deps=()):
    return make_node(node_id, f"ar{node_id}", T.COMM_COLL_NODE, data_deps=list(deps),
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})


def send(node_id, dst, size, tag, deps=()):
    return make_node(node_id, f"send{node_id}", T.COMM_SEND_NODE, data_deps=list(deps),
                     attrs={"comm_dst": dst, "comm_size": size, "comm_tag": tag})


def recv(node_id, src, size, tag, deps=()):
    return make_node(node_id, f"recv{node_id}", T.COMM_RECV_NODE, data_deps=list(deps),
                     attrs={"comm_src": src, "comm_size": size, "comm_tag": tag})


# ---------------------------------------------------------------- issue order and slots


def test_ready_nodes_issue_in_ascending_id_order_not_file_order(env):
    # File order 9, 5, 3: all GPU compute, one slot: 3 runs first, then 5, then 9.
    report, times = env.run("order", lambda r: [comp(9, 1), comp(5, 2), comp(3, 4)])
    assert times[(0, 3)] == (0, 4000)
    assert times[(0, 5)] == (4000, 6000)
    assert times[(0, 9)] == (6000, 7000)
    assert report.ranks[0].finish_ns == 7000


def test_lower_id_collective_goes_first(env):
    small, big = 4096, MIB
    report, times = env.run("colls", lambda r: [allreduce(9, small), allreduce(4, big)])
    big_ns, small_ns = ring_ar_ns(big, 2), ring_ar_ns(small, 2)
    assert times[(0, 4)] == (0, big_ns)
    assert times[(0, 9)] == (big_ns, big_ns + small_ns)


def test_send_waits_for_running_collective_but_recv_does_not(env):
    ar = ring_ar_ns(MIB, 2)
    t = t_msg(1024)

    def nodes(rank):
        if rank == 0:
            return [allreduce(1, MIB), send(2, 1, 1024, 5)]
        return [allreduce(1, MIB), recv(2, 0, 1024, 5)]

    report, times = env.run("slot", nodes)
    assert times[(0, 2)] == (ar, ar + t)  # the send needed the comm slot
    assert times[(1, 2)] == (0, ar + t)  # the recv was posted at t=0 beside the all-reduce
    assert [r.finish_ns for r in report.ranks] == [ar + t, ar + t]


def test_recvs_take_no_slot_many_at_once(env):
    t = t_msg(2048)

    def nodes(rank):
        if rank == 0:
            return [send(i, 1, 2048, i) for i in range(1, 4)]
        return [recv(i, 0, 2048, i) for i in range(1, 4)]

    report, times = env.run("recvs", nodes)
    for i in range(1, 4):
        assert times[(1, i)][0] == 0  # all three receives posted at once
        assert times[(0, i)] == ((i - 1) * t, i * t)  # sends one at a time
        assert times[(1, i)][1] == i * t


def test_cpu_op_runs_beside_gpu_compute(env):
    report, times = env.run("cpu", lambda r: [comp(1, 5, cpu=True), comp(2, 3)])
    assert times[(0, 1)] == (0, 5000)
    assert times[(0, 2)] == (0, 3000)
    r0 = report.ranks[0]
    assert r0.finish_ns == 5000
    assert r0.compute_ns == 3000
    assert r0.cpu_ns == 5000
    # Exposed communication = finish - GPU compute: CPU time is NOT subtracted (issue #302).
    assert r0.exposed_comm_ns == 2000


def test_two_cpu_ops_share_one_slot(env):
    report, times = env.run("cpu2", lambda r: [comp(1, 5, cpu=True), comp(2, 3, cpu=True)])
    assert times[(0, 2)] == (5000, 8000)
    assert report.ranks[0].cpu_ns == 8000
    assert report.ranks[0].compute_ns == 0
    assert report.ranks[0].exposed_comm_ns == 8000


def test_cpu_gpu_and_comm_slots_all_overlap(env):
    ar = ring_ar_ns(MIB, 2)
    report, times = env.run("three", lambda r: [allreduce(1, MIB), comp(2, 3), comp(3, 4, cpu=True)])
    assert times[(0, 1)][0] == times[(0, 2)][0] == times[(0, 3)][0] == 0
    r0 = report.ranks[0]
    assert r0.finish_ns == max(ar, 4000)
    assert r0.exposed_comm_ns == max(ar, 4000) - 3000
    assert r0.comm_ns == ar


def test_exposed_communication_definition(env):
    ar = ring_ar_ns(MIB, 2)
    report, _ = env.run("exp", lambda r: [comp(1, 2), allreduce(2, MIB, deps=[1]), comp(3, 1, deps=[2])])
    r0 = report.ranks[0]
    assert r0.finish_ns == 3000 + ar
    assert r0.compute_ns == 3000
    assert r0.exposed_comm_ns == r0.finish_ns - r0.compute_ns == ar


def test_ctrl_and_data_deps_are_equivalent(env):
    def nodes(rank):
        return [
            comp(1, 2),
            make_node(2, "c2", T.COMP_NODE, ctrl_deps=[1], duration_micros=3, attrs={"is_cpu_op": True}),
        ]

    report, times = env.run("ctrl", nodes)
    assert times[(0, 2)] == (2000, 5000)  # CPU slot was free, but it waited for its ctrl parent


def test_ranks_finish_independently(env):
    report, _ = env.run("indep", lambda r: [comp(1, 1 + r)], npus=4)
    assert [r.finish_ns for r in report.ranks] == [1000, 2000, 3000, 4000]
    assert report.finish_order == [0, 1, 2, 3]


def test_many_ready_sends_queue_behind_the_comm_slot_in_id_order(env):
    # 300 ready sends (file order reversed) share rank 0's one comm slot: they
    # run back to back in ascending id order, whatever the order of the file.
    n, size = 300, 4096
    t = t_msg(size)

    def nodes(rank):
        if rank == 0:
            return [send(i, 1, size, i) for i in reversed(range(n))]
        return [recv(i, 0, size, i) for i in range(n)]

    report, times = env.run("queue", nodes)
    assert [times[(0, i)] for i in range(n)] == [(i * t, (i + 1) * t) for i in range(n)]
    assert report.ranks[1].finish_ns == n * t


def test_slot_freed_at_issue_serves_the_next_ready_node_in_the_same_pass(env):
    # INVALID node 1 takes the comm slot and finishes at issue time, so the
    # all-reduce 2 behind it starts at 0 too, in the same pass.
    report, times = env.run("free_at_issue", lambda r: [make_node(1, "inv", T.INVALID_NODE), allreduce(2, MIB)])
    assert times[(0, 1)] == (0, 0)
    assert times[(0, 2)] == (0, ring_ar_ns(MIB, 2))


def test_nodes_freed_during_a_pass_wait_for_the_next_pass(env):
    # The reference examines a copy of the ready set: compute 9, freed when the
    # INVALID node 5 finishes at issue time, is not looked at in that pass, and
    # with the CPU op 1 still running the next pass comes only when 1 finishes.
    def nodes(rank):
        return [comp(1, 10, cpu=True), make_node(5, "inv", T.INVALID_NODE), comp(9, 2, deps=[5])]

    report, times = env.run("snapshot", nodes)
    assert times[(0, 5)] == (0, 0)
    assert times[(0, 9)] == (10_000, 12_000)
    assert report.ranks[0].finish_ns == 12_000


# ---------------------------------------------------------------- INVALID / METADATA nodes


def test_invalid_node_then_dependents_does_not_hang(env):
    def nodes(rank):
        return [
            make_node(0, "invalid", T.INVALID_NODE),
            make_node(1, "invalid2", T.INVALID_NODE, data_deps=[0]),
            comp(2, 3, deps=[1]),
        ]

    report, times = env.run("inv", nodes)
    assert [r.finish_ns for r in report.ranks] == [3000, 3000]
    assert times[(0, 0)] == (0, 0)
    assert times[(0, 2)] == (0, 3000)


def test_metadata_node_then_dependents_does_not_hang(env):
    def nodes(rank):
        return [
            make_node(0, "meta", T.METADATA_NODE),
            allreduce(1, MIB, deps=[0]),
            make_node(2, "meta2", T.METADATA_NODE, data_deps=[1]),
            comp(3, 2, deps=[2]),
        ]

    report, _ = env.run("meta", nodes)
    assert [r.finish_ns for r in report.ranks] == [ring_ar_ns(MIB, 2) + 2000] * 2


def test_only_zero_time_nodes_finish_at_zero(env):
    def nodes(rank):
        return [make_node(i, "inv", T.INVALID_NODE, data_deps=[i - 1] if i else []) for i in range(5)]

    report, _ = env.run("zeros", nodes)
    assert [r.finish_ns for r in report.ranks] == [0, 0]


# ---------------------------------------------------------------- build_graph


def test_build_graph_basic_structure():
    nodes = [comp(2, 1, deps=[1]), comp(1, 1), make_node(3, "c3", T.COMP_NODE, data_deps=[1], ctrl_deps=[2])]
    by_id, children, parents_left, roots = build_graph("x.et", nodes)
    assert sorted(by_id) == [1, 2, 3]
    assert roots == [1]
    assert sorted(children[1]) == [2, 3]
    assert children[2] == [3]
    assert parents_left == {1: 0, 2: 1, 3: 2}


def test_build_graph_same_parent_in_data_and_ctrl_counts_once():
    nodes = [comp(1, 1), make_node(2, "c2", T.COMP_NODE, data_deps=[1], ctrl_deps=[1])]
    _, children, parents_left, _ = build_graph("x.et", nodes)
    assert parents_left[2] == 1
    assert children[1] == [2]


def test_build_graph_missing_dependency():
    nodes = [comp(1, 1), comp(2, 1, deps=[99])]
    with pytest.raises(WorkloadError, match=r"my\.et: node 2 \('comp2'\) depends on node 99"):
        build_graph("my.et", nodes)


def test_build_graph_missing_ctrl_dependency():
    nodes = [comp(1, 1), make_node(2, "c2", T.COMP_NODE, ctrl_deps=[42])]
    with pytest.raises(WorkloadError, match=r"node 2 .*depends on node 42"):
        build_graph("my.et", nodes)


PT_THREAD = "[pytorch|profiler|execution_trace|thread]"


def test_build_graph_ignores_a_thread_roots_dependency_on_the_dropped_process_root():
    # what chakra_converter PyTorch writes: the process root (id 1) is dropped as dangling, the thread root keeps
    # its ctrl dependency on it
    nodes = [make_node(2, PT_THREAD, T.COMP_NODE, ctrl_deps=[1]), comp(3, 1, deps=[2])]
    warnings = []
    by_id, children, parents_left, roots = build_graph("pt.et", nodes, warn=warnings.append)
    assert roots == [2] and parents_left == {2: 0, 3: 1} and children[2] == [3]
    assert len(warnings) == 1
    assert "pt.et" in warnings[0] and "node 2" in warnings[0] and "node 1" in warnings[0]
    assert "Chakra" in warnings[0]


def test_build_graph_other_missing_dependencies_stay_errors():
    warnings = []
    # a thread root's *data* dependency on a missing node
    with pytest.raises(WorkloadError, match=r"node 2 .*depends on node 1, which is not in the file"):
        build_graph("a.et", [make_node(2, PT_THREAD, T.COMP_NODE, data_deps=[1])], warn=warnings.append)
    # a thread root that also has data dependencies (not a root of the graph)
    with pytest.raises(WorkloadError, match=r"node 3 .*depends on node 1"):
        build_graph("b.et", [comp(2, 1), make_node(3, PT_THREAD, T.COMP_NODE, data_deps=[2], ctrl_deps=[1])],
                    warn=warnings.append)
    # any other node's ctrl dependency on a missing node
    with pytest.raises(WorkloadError, match=r"node 3 .*depends on node 1"):
        build_graph("c.et", [make_node(3, "aten::mm", T.COMP_NODE, ctrl_deps=[1])], warn=warnings.append)
    assert warnings == []


def test_chakra_pytorch_trace_with_dropped_root_runs_with_a_warning(env):
    def nodes(rank):
        return [make_node(5, PT_THREAD, T.COMP_NODE, ctrl_deps=[4], attrs={"is_cpu_op": True}),
                make_node(6, "aten::mm", T.COMP_NODE, data_deps=[5], ctrl_deps=[5], duration_micros=3,
                          attrs={"is_cpu_op": True})]

    report, times = env.run("dropped_root", nodes)
    assert report.ranks[0].finish_ns == 1 + 3000
    # both ranks read identical files, whose graph is built once: one warning
    (warning,) = report.warnings
    assert "dropped_root.0.et" in warning and "node 5" in warning and "node 4" in warning and "process root" in warning


def test_build_graph_cycle_names_the_stuck_nodes():
    nodes = [comp(1, 1), comp(2, 1, deps=[4]), comp(3, 1, deps=[2]), comp(4, 1, deps=[3]), comp(5, 1, deps=[4])]
    with pytest.raises(WorkloadError, match=r"cyc\.et: the dependency graph has a cycle") as info:
        build_graph("cyc.et", nodes)
    message = str(info.value)
    for node_id in (2, 3, 4, 5):
        assert f"{node_id} ('comp{node_id}')" in message
    assert "1 ('comp1')" not in message


def test_build_graph_self_dependency_is_a_cycle():
    with pytest.raises(WorkloadError, match="cycle"):
        build_graph("self.et", [comp(1, 1, deps=[1])])


def test_build_graph_duplicate_id_later_wins_and_deps_merge():
    first = comp(1, 5, deps=[0])
    second = comp(1, 7, deps=[2])
    nodes = [comp(0, 1), first, comp(2, 1), second]
    by_id, children, parents_left, roots = build_graph("dup.et", nodes)
    assert by_id[1] is second
    assert by_id[1].duration_micros == 7
    assert parents_left[1] == 2
    assert 1 in children[0] and 1 in children[2]
    assert sorted(roots) == [0, 2]


def test_duplicate_id_simulates_later_content_with_merged_deps(env):
    def nodes(rank):
        return [comp(0, 1), comp(1, 5, deps=[0]), comp(2, 2), comp(1, 7, deps=[2])]

    report, times = env.run("dup", nodes)
    # 0 (1us) then 2 (2us) then the merged node 1 (7us, the later content).
    assert times[(0, 1)] == (3000, 10000)
    assert report.ranks[0].finish_ns == 10000


def test_empty_node_list():
    by_id, children, parents_left, roots = build_graph("e.et", [])
    assert by_id == {} and roots == []


def test_zero_byte_collective_runs_like_the_reference(tmp_path):
    """comm_size 0 is inflated to the smallest collective (splits x NPUs bytes), as the reference
    does: on Ring-8 (50 GB/s, 500 ns) that all-reduce takes 28600 ns, checked against its binary."""
    from astra_sim_testing import write_network_config

    network = write_network_config(tmp_path / "ring8.yml", ("Ring",), (8,), (50.0,), (500.0,))
    system = tmp_path / "system.json"
    system.write_text(__import__("json").dumps(system_config()))
    for kind, expected in ((T.ALL_REDUCE, 28600), (T.ALL_GATHER, None)):
        prefix = tmp_path / f"zero{kind}"
        node = make_node(0, "c0", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": kind, "comm_size": 0})
        for rank in range(8):
            write_et(f"{prefix}.{rank}.et", make_metadata(), [node])
        if expected is None:
            with pytest.raises(WorkloadError, match="comm_size must be > 0"):
                simulate(str(prefix), str(system), network)
        else:
            assert simulate(str(prefix), str(system), network).max_finish_ns == expected


# ---------------------------------------------------------------- identical traces are parsed once


def test_identical_trace_files_share_one_parse_and_give_the_same_times(env):
    # Ranks 0, 1 and 3 have byte-identical files; rank 2's differs (a longer compute).
    def nodes(rank):
        return [comp(0, 7 if rank == 2 else 3), allreduce(1, MIB, deps=[0]), comp(2, 2, deps=[1])]

    prefix = env.trace("shared", nodes, 4)
    sim = Simulation(prefix, str(env.system), env.network(4))
    report = sim.run()
    w = sim.workloads
    assert sim.traces_parsed == 2 and report.stats["traces_parsed"] == 2
    assert w[0].nodes is w[1].nodes is w[3].nodes and w[2].nodes is not w[0].nodes
    assert w[0].parents_left is not w[1].parents_left  # the only per-rank part of the graph
    assert [x.path for x in w] == [f"{prefix}.{r}.et" for r in range(4)]
    # the same answer as with every rank parsed on its own
    sim_unshared = Simulation(prefix, str(env.system), env.network(4))
    sim_unshared.workload_format = type("NoDigest", (), {"load_rank": staticmethod(sim.workload_format.load_rank)})()
    unshared = sim_unshared.run()
    assert sim_unshared.traces_parsed == 4
    assert [(r.finish_ns, r.compute_ns) for r in report.ranks] == [(r.finish_ns, r.compute_ns) for r in unshared.ranks]
    assert report.ranks[2].finish_ns > report.ranks[0].finish_ns


# ---------------------------------------------------------------- comm-streams: per-communicator


def _grouped_allreduce(node_id, size, pg_name):
    return make_node(node_id, f"ar{node_id}", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size, "pg_name": pg_name})


def _streams_run(env, name, nodes_for_rank, streams, npus=2, groups=None):
    env.system.write_text(json.dumps(dict(SYSTEM, **({"comm-streams": streams} if streams else {}))))
    path = env.dir / f"{name}.groups.json"
    path.write_text(json.dumps(groups or {"1": list(range(npus)), "2": list(range(npus))}))
    return env.run(name, nodes_for_rank, npus=npus, comm_groups=str(path))


def test_collectives_of_different_communicators_overlap_with_per_communicator_streams(env):
    # Groups 1 and 2 have the same two NPUs; "" is the default all-NPU group.
    alone = {}
    for pg in ("1", "2", ""):
        _, t = _streams_run(env, f"alone{pg or 0}", lambda r, pg=pg: [_grouped_allreduce(1, MIB, pg)], None)
        alone[pg] = t[(0, 1)][1]
    def three(rank):
        return [_grouped_allreduce(1, MIB, "1"), _grouped_allreduce(2, MIB, "2"), _grouped_allreduce(3, MIB, "")]

    _, single = _streams_run(env, "single", three, "single")
    assert single[(0, 1)] == (0, alone["1"])
    assert single[(0, 2)] == (alone["1"], alone["1"] + alone["2"])
    assert single[(0, 3)][1] == alone["1"] + alone["2"] + alone[""]
    _, streams = _streams_run(env, "streams", three, "per-communicator")
    assert streams[(0, 1)] == (0, alone["1"])
    assert streams[(0, 2)] == (0, alone["2"])
    assert streams[(0, 3)] == (0, alone[""])


def test_collectives_of_one_communicator_still_run_one_at_a_time(env):
    _, alone = _streams_run(env, "one", lambda r: [_grouped_allreduce(1, MIB, "1")], "per-communicator")
    t = alone[(0, 1)][1]
    report, times = _streams_run(env, "two", lambda r: [_grouped_allreduce(1, MIB, "1"),
                                                        _grouped_allreduce(2, MIB, "1")], "per-communicator")
    assert times[(0, 1)] == (0, t)
    assert times[(0, 2)] == (t, 2 * t)
    assert report.ranks[0].finish_ns == 2 * t


def test_sends_overlap_per_destination_with_per_communicator_streams(env):
    # Rank 0 sends twice to rank 1 and once to rank 2: the two sends to rank 1 share a stream.
    t = t_msg(4096)

    def nodes(rank):
        if rank == 0:
            return [send(1, 1, 4096, 1), send(2, 1, 4096, 2), send(3, 2, 4096, 3)]
        if rank == 1:
            return [recv(1, 0, 4096, 1), recv(2, 0, 4096, 2)]
        return [recv(3, 0, 4096, 3)]

    _, single = _streams_run(env, "p2p1", nodes, None, npus=3, groups={"1": [0, 1, 2]})
    assert [single[(0, i)] for i in (1, 2, 3)] == [(0, t), (t, 2 * t), (2 * t, 3 * t)]
    _, streams = _streams_run(env, "p2p2", nodes, "per-communicator", npus=3, groups={"1": [0, 1, 2]})
    assert [streams[(0, i)] for i in (1, 2, 3)] == [(0, t), (t, 2 * t), (0, t)]


def test_bad_comm_streams_value_names_the_file_and_choices(env):
    with pytest.raises(ConfigError) as err:
        _streams_run(env, "bad", lambda r: [_grouped_allreduce(1, MIB, "1")], "many")
    message = str(err.value)
    assert "sys.json" in message and "'comm-streams'" in message
    assert "single or per-communicator" in message and "'many'" in message
