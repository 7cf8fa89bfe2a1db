"""Fuzzing whole runs: random workloads on random topologies finish, or stop with a clear report, in time.

* Generated valid workloads: random DAGs of compute, collective and matched send/receive nodes on every
  rank, over random 1- and 2-dimensional networks, on the analytical, congestion and flow backends. A
  run finishes, or reports a deadlock with the stuck ranks (dependencies across ranks can wait in a
  circle), within a time bound; folded and unfolded runs agree.
* Hostile node attributes (sizes of the wrong type, unknown collective types, peers outside the
  network, dependencies on missing nodes): a clear error naming the trace and the node, never another
  exception.
"""

from __future__ import annotations

from hypothesis import example, given, strategies as st

from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
from astra_sim.errors import AstraError, DeadlockError
from astra_sim_testing.fuzzing import check_error, fuzz_settings, hostile_values, time_limit
from astra_sim.simulation import simulate
from astra_sim_testing import write_system_config
from astra_sim.unmatched import UnmatchedMessagesError

TIME_BOUND_S = 30
COLLECTIVES = (T.ALL_REDUCE, T.ALL_GATHER, T.REDUCE_SCATTER, T.ALL_TO_ALL)


def time_bound(seconds=TIME_BOUND_S):
    """Fail (instead of hanging the suite) when a run takes longer than ``seconds`` (the readers' fuzz limit)."""
    return time_limit(seconds)


@st.composite
def networks(draw):
    dims = draw(st.integers(1, 2))
    topology = [draw(st.sampled_from(["Ring", "FullyConnected", "Switch"])) for _ in range(dims)]
    npus = [draw(st.integers(2, 4)) for _ in range(dims)]
    return topology, npus


@st.composite
def workloads(draw, npus):
    """Per rank, a node list: a shared sequence of collectives (every rank runs the same ones, in the same
    order, so they can complete) interleaved with compute and matched send/receive pairs, with random
    dependencies on earlier nodes of the rank."""
    per_rank = [[] for _ in range(npus)]

    def add(rank, kind, **attrs):
        nodes = per_rank[rank]
        node_id = len(nodes) + 1
        earlier = list(range(1, node_id))
        deps = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)) if earlier else []
        ctrl = draw(st.booleans())
        nodes.append((node_id, kind, attrs, deps, ctrl))

    for _ in range(draw(st.integers(1, 8))):
        step = draw(st.sampled_from(["comp", "coll", "p2p", "p2p"]))
        if step == "comp":
            add(draw(st.integers(0, npus - 1)), T.COMP_NODE, duration=draw(st.integers(0, 5)))
        elif step == "coll":
            comm_type = draw(st.sampled_from(COLLECTIVES))
            size = draw(st.sampled_from([1024, 4096, 65536, 1 << 20]))
            for rank in range(npus):
                add(rank, T.COMM_COLL_NODE, comm_type=comm_type, comm_size=size)
        else:
            src = draw(st.integers(0, npus - 1))
            dst = draw(st.integers(0, npus - 1).filter(lambda r, s=src: r != s))
            size, tag = draw(st.sampled_from([8, 1000, 65536])), draw(st.integers(0, 3))
            add(src, T.COMM_SEND_NODE, comm_dst=dst, comm_size=size, comm_tag=tag)
            add(dst, T.COMM_RECV_NODE, comm_src=src, comm_size=size, comm_tag=tag)
    return per_rank


def build_nodes(entries):
    nodes = []
    for node_id, kind, attrs, deps, ctrl in entries:
        attrs = dict(attrs)
        duration = attrs.pop("duration", 0)
        dep_args = {"ctrl_deps": deps} if ctrl else {"data_deps": deps}
        nodes.append(make_node(node_id, f"n{node_id}", kind, duration_micros=duration, attrs=attrs, **dep_args))
    return nodes


def write_case(tmp_path, topology, npus, per_rank_nodes):
    total = 1
    for n in npus:
        total *= n
    prefix = tmp_path / "w"
    for rank in range(total):
        (tmp_path / f"w.{rank}.et").write_bytes(encode_et(make_metadata(), per_rank_nodes(rank)))
    system = write_system_config(tmp_path / "sys.json", dims=len(npus))
    net = tmp_path / "net.yml"
    net.write_text(f"topology: {topology}\nnpus_count: {npus}\nbandwidth: {[50.0] * len(npus)}\n"
                   f"latency: {[500.0] * len(npus)}\n")
    return str(prefix), system, str(net)


@fuzz_settings(40)
@given(data=st.data())
def test_generated_workloads_finish_or_report_a_deadlock_in_time(tmp_path_factory, data):
    topology, npus = data.draw(networks())
    total = 1
    for n in npus:
        total *= n
    per_rank = data.draw(workloads(total))
    backend = data.draw(st.sampled_from(["analytical", "analytical", "congestion", "flow"]))
    tmp_path = tmp_path_factory.mktemp("w")
    prefix, system, net = write_case(tmp_path, topology, npus, lambda r: build_nodes(per_rank[r]))
    results = []
    for fold in (True, False):
        with time_bound():
            try:
                report = simulate(prefix, system, net, network_backend=backend, fold=fold)
            except DeadlockError as exc:
                message = str(exc)
                assert "deadlock" in message and "rank " in message and "have not finished" in message
                results.append(("deadlock", message))
                continue
            except UnmatchedMessagesError as exc:  # only when a deadlock left sends behind: never here
                raise AssertionError(f"matched pairs reported unmatched: {exc}") from None
        assert all(r.finish_ns is not None and r.finish_ns >= 0 for r in report.ranks)
        assert report.unmatched_messages == []
        results.append(("finished", [(r.rank, r.finish_ns, r.exposed_comm_ns) for r in report.ranks]))
    assert results[0] == results[1], "folded and unfolded runs differ"


ATTRIBUTES = {
    T.COMP_NODE: ["num_ops", "tensor_size", "is_cpu_op"],
    T.COMM_COLL_NODE: ["comm_type", "comm_size", "pg_name", "involved_dim", "comm_priority"],
    T.COMM_SEND_NODE: ["comm_dst", "comm_size", "comm_tag", "comm_src"],
    T.COMM_RECV_NODE: ["comm_src", "comm_size", "comm_tag", "comm_dst"],
}


@st.composite
def hostile_nodes(draw):
    """One rank's node with an attribute of any value and type, and maybe a dependency on a missing node."""
    kind = draw(st.sampled_from(sorted(ATTRIBUTES)))
    attrs = {"comm_type": T.ALL_REDUCE, "comm_size": 1024} if kind == T.COMM_COLL_NODE else {}
    if kind == T.COMM_SEND_NODE:
        attrs = {"comm_dst": 1, "comm_size": 64, "comm_tag": 0}
    if kind == T.COMM_RECV_NODE:
        attrs = {"comm_src": 1, "comm_size": 64, "comm_tag": 0}
    key = draw(st.sampled_from(ATTRIBUTES[kind]))
    value = draw(st.one_of(hostile_values(), st.lists(st.booleans(), max_size=3),
                           st.lists(st.integers(-3, 3), max_size=3)))
    attrs[key] = value
    deps = draw(st.sampled_from([[], [7], [1]]))  # 7: missing; 1: itself (a cycle)
    return kind, attrs, deps, draw(st.sampled_from(["replay", "roofline"]))


@fuzz_settings(150)
@given(case=hostile_nodes())
@example(case=(T.COMM_COLL_NODE, {"comm_type": [False], "comm_size": 1024}, [], "replay"))  # crashed folding
@example(case=(T.COMM_SEND_NODE, {"comm_dst": "1", "comm_size": 64, "comm_tag": 0}, [], "replay"))
@example(case=(T.COMM_COLL_NODE, {"comm_type": 0, "comm_size": 1024, "pg_name": float("inf")}, [], "replay"))
def test_hostile_node_attributes_give_a_clear_error(tmp_path_factory, case):
    kind, attrs, deps, compute = case
    tmp_path = tmp_path_factory.mktemp("h")

    def nodes(rank):
        try:
            node = make_node(1, "hostile", kind, duration_micros=1, attrs=attrs, data_deps=deps)
        except AstraError:
            return None
        return [node] if rank == 0 else [make_node(1, "c", T.COMP_NODE, duration_micros=1,
                                                   attrs={"num_ops": 1000, "tensor_size": 64})]

    if nodes(0) is None:
        return  # the writer refuses values protobuf cannot hold: nothing to read
    prefix, system, net = write_case(tmp_path, ["Ring"], [2], nodes)
    if compute == "roofline":
        system = write_system_config(tmp_path / "roof.json", roofline_enabled=1, peak_perf=900,
                                     local_mem_bw=1600)
    with time_bound():
        try:
            simulate(prefix, system, net, allow_unmatched=True)
        except DeadlockError as exc:  # e.g. a receive from a rank that sends nothing: the stuck node is named
            assert "deadlock" in str(exc) and "w.0.et" in str(exc) and "node 1" in str(exc)
        except AstraError as exc:
            check_error(exc, "w.0.et", keys=("node 1", "'hostile'"))
