"""convert-pytorch on CPU jobs with the gloo backend: c10d host ops as communication, Kineto user annotations,
blocking and asynchronous operations, process groups, rendezvous, cross-rank checks (synthetic traces shaped like
torch 2.14's; the real sample jobs are in test_pytorch_gloo_samples.py)."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config

from astra_workload_generators.pytorch import convert_pytorch, convert_pytorch_trace
from astra_workload_generators.pytorch_c10d import READY_BYTES, p2p_tag, ready_tag, schema_args

PLUGINS = ["network_analytical", "workload_generators"]
PROCESS, THREAD = "[pytorch|profiler|execution_trace|process]", "[pytorch|profiler|execution_trace|thread]"
SEND_SCHEMA = ("c10d::send(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, int dst, "
               "int tag) -> __torch__.torch.classes.c10d.Work")
RECV_SCHEMA = SEND_SCHEMA.replace("send(", "recv_(").replace("int dst", "int src")
AR_SCHEMA = ("c10d::allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
             "__torch__.torch.classes.c10d.ReduceOp reduce_op, Tensor? sparse_indices, bool async_op=True, "
             "int timeout=-1) -> (Tensor[], __torch__.torch.classes.c10d.Work)")
MAIN, WORKER = 100, 101  # thread ids in the Kineto traces


def _tensor(tid, storage, numel):
    return [tid, storage, 0, numel, 4, "cpu"]


class Rank:
    """A torch-2.14-like host trace of one rank, written in the order the execution-trace observer writes it (an
    op when it ends: children before parents), and its Kineto trace: ``op(...)`` opens an op on the main thread
    at the current time; ops are timed as [start, start + dur)."""

    def __init__(self, rank, world, groups=None):
        self.rank, self.world = rank, world
        self.nodes, self.events, self.next_id, self.clock = [], [], 5, 0.0
        groups = groups if groups is not None else [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [],
                                                     "group_size": world}]
        self.groups = groups
        self.step = self._node(4, "ProfilerStep#1", 2, 4)
        self.meta = self._node(3, "## process_group:init ##", 2, 3, ins=[(json.dumps(groups), "String")])

    def _node(self, nid, name, parent, rf, ins=(), outs=(), schema=""):
        attrs = [{"name": "rf_id", "type": "uint64", "value": rf}, {"name": "fw_parent", "type": "uint64", "value": 0},
                 {"name": "seq_id", "type": "int64", "value": -1}, {"name": "scope", "type": "uint64", "value": 0},
                 {"name": "tid", "type": "uint64", "value": 1}, {"name": "fw_tid", "type": "uint64", "value": 0},
                 {"name": "op_schema", "type": "string", "value": schema}]
        shape = lambda v, t: [v[3]] if t.startswith("Tensor") else [[x[3]] for x in v] if "Tensor" in t else []
        return {"id": nid, "name": name, "ctrl_deps": parent, "attrs": attrs,
                "inputs": {"values": [v for v, _ in ins], "shapes": [shape(v, t) for v, t in ins],
                           "types": [t for _, t in ins]},
                "outputs": {"values": [v for v, _ in outs], "shapes": [shape(v, t) for v, t in outs],
                            "types": [t for _, t in outs]}}

    def op(self, name, dur, ins=(), outs=(), parent=4, schema="", cat="cpu_op", tid=MAIN, start=None, gap=1.0):
        nid = self.next_id
        self.next_id += 1
        node = self._node(nid, name, parent, nid, ins, outs, schema)
        self.nodes.append(node)
        start = self.clock + gap if start is None else start
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": start, "dur": dur,
                            "args": {"External id": 1000 + nid, "Record function id": nid}})
        if tid == MAIN:
            self.clock = start + dur
        return nid

    def compute(self, dur, tensor=None, name="aten::mm"):
        t = tensor or _tensor(self.next_id + 500, self.next_id + 500, 64)
        return self.op(name, dur, ins=[(t, "Tensor(float)")], outs=[(t, "Tensor(float)")])

    def p2p(self, kind, peer, tensor, tag=0, wait=0.0, blocking=True, marker=True):
        """c10d::send / c10d::recv_ (peer: group rank) and its gloo marker; a blocking op's marker holds the main
        thread ``wait`` µs after the op ends."""
        start = self.clock + 1.0
        launcher = self.op(f"c10d::{'send' if kind == 'send' else 'recv_'}", 10.0,
                           ins=[([tensor], "GenericList[Tensor(float)]"), ("<Object>", "Object"), (peer, "Int"),
                                (tag, "Int")], outs=[("<Object>", "Object")],
                           schema=SEND_SCHEMA if kind == "send" else RECV_SCHEMA, start=start)
        if marker:
            self.op(f"gloo:{kind}", 5.0 + wait, ins=[(tensor, "Tensor(float)")], parent=launcher,
                    cat="user_annotation", start=start + 8.0)
            if blocking:
                self.clock = start + 13.0 + wait
        return launcher

    def all_reduce(self, tensor, dur=400.0, async_op=True, marker_parent=None):
        start = self.clock + 1.0
        launcher = self.op("c10d::allreduce_", 20.0, ins=[([tensor], "GenericList[Tensor(float)]"),
                                                          ("<Object>", "Object"), ("<Object>", "Object"),
                                                          ("<None>", "None"), (async_op, "Bool"), (-1, "Int")],
                           schema=AR_SCHEMA, start=start)
        self.op("gloo:all_reduce", dur, ins=[(tensor, "Tensor(float)")],
                parent=launcher if marker_parent is None else marker_parent, cat="user_annotation",
                tid=WORKER, start=start + 5.0)
        if not async_op:
            self.clock = start + 5.0 + dur
        return launcher

    def traces(self):
        end = max([self.clock] + [e["ts"] + e["dur"] for e in self.events if e["tid"] == MAIN]) + 1.0
        step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": MAIN, "ts": -1.0,
                "dur": end, "args": {"External id": 999, "Record function id": 4}}
        # exit order: the ops as they end (parents after children), the step, the thread root, the process root
        nodes = sorted(self.nodes, key=lambda n: next(e["ts"] + e["dur"] for e in self.events
                                                       if e["args"]["Record function id"] == n["id"]))
        host = {"schema": "1.1.1-chakra.0.0.4", "pid": 10 + self.rank, "time": "2026-11-24 00:00:00",
                "start_ts": 1, "finish_ts": 2,
                "nodes": [self.meta] + nodes + [self.step, self._node(2, THREAD, 1, 0), self._node(1, PROCESS, 1, 0)]}
        kineto = {"traceEvents": self.events + [step],
                  "distributedInfo": {"backend": "gloo", "rank": self.rank, "world_size": self.world}}
        return host, kineto


def _write(tmp_path, ranks, name="j"):
    for r in ranks:
        host, kineto = r.traces()
        (tmp_path / f"{name}_host{r.rank}.json").write_text(json.dumps(host))
        (tmp_path / f"{name}_kin{r.rank}.json").write_text(json.dumps(kineto))
    return str(tmp_path / f"{name}_host{{rank}}.json"), str(tmp_path / f"{name}_kin{{rank}}.json")


def _pipeline(tag=0):
    """Two ranks: rank 0 computes 300 µs and sends tensor A to rank 1, which computes 50 µs, receives it and
    computes 200 µs on it; rank 1 then sends B back, which rank 0 receives after 100 µs more of compute."""
    a, b = _tensor(40, 41, 1024), _tensor(50, 51, 2048)
    r0, r1 = Rank(0, 2), Rank(1, 2)
    r0.compute(300.0, a)
    r0.p2p("send", 1, a, tag=tag)
    r0.compute(100.0)
    r0.p2p("recv", 1, b, tag=tag, wait=150.0)
    r0.compute(30.0, b)
    r1.compute(50.0)
    r1.p2p("recv", 0, a, tag=tag, wait=260.0)
    r1.compute(200.0, a, name="aten::addmm")
    r1.p2p("send", 0, b, tag=tag)
    return r0, r1


def _comm(nodes, kind=None):
    kinds = (kind,) if kind else (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE)
    return [n for n in nodes if n.type in kinds]


def test_schema_args():
    assert schema_args(SEND_SCHEMA) == ["tensors", "process_group", "dst", "tag"]
    assert schema_args(AR_SCHEMA)[4:] == ["async_op", "timeout"]
    assert schema_args("c10d::alltoall_base_(Tensor output, Tensor input, ProcessGroup process_group, "
                       "int[] output_split_sizes, int[] input_split_sizes, int timeout) -> Work")[3] == \
        "output_split_sizes"
    assert schema_args("c10d::f(Tensor(a!) self, *, int x=1) -> Tensor(a!)") == ["self", "x"]
    for junk in ("", "no parens", None, 3, "f(a, b)", "f("):
        assert schema_args(junk) == []


def test_p2p_tags_match_and_separate():
    assert p2p_tag("0", 0) == 0 and p2p_tag(None, 0) == 0 and p2p_tag("3", 0) == 3
    assert p2p_tag("0", 7) == p2p_tag("0", 7) != p2p_tag("0", 8)
    assert p2p_tag("0", 7) != p2p_tag("1", 7)
    assert all(0 <= p2p_tag(g, t) < 2 ** 28 for g in ("0", "pp", "12") for t in (0, 1, -5, 2 ** 40))
    assert ready_tag(p2p_tag("0", 0)) != p2p_tag("0", 0) and ready_tag(ready_tag(5)) == 5


def test_gloo_pipeline_converts_with_peers_tags_and_rendezvous(tmp_path, capsys):
    host, kin = _write(tmp_path, _pipeline(tag=3))
    assert main(["workload", "convert-pytorch", host, "--kineto", kin, "--ranks", "2", "-o",
                 str(tmp_path / "p")]) == 0
    out, err = capsys.readouterr()
    assert "gloo" in out and "every receive first tells its sender that it is ready (2 of the send/recv" in out
    assert err == ""  # every message matches across the ranks
    n0 = read_et(str(tmp_path / "p.0.et")).nodes
    n1 = read_et(str(tmp_path / "p.1.et")).nodes
    tag = p2p_tag("0", 3)
    (send0,) = [n for n in _comm(n0, T.COMM_SEND_NODE) if n.attrs["comm_tag"] == tag]
    (recv1,) = [n for n in _comm(n1, T.COMM_RECV_NODE) if n.attrs["comm_tag"] == tag]
    assert send0.name == "c10d::send | gloo:send" and recv1.name == "c10d::recv_ | gloo:recv"
    assert (send0.attrs["comm_dst"], send0.attrs["comm_size"], send0.attrs["pg_name"]) == (1, 4096, "0")
    assert (recv1.attrs["comm_src"], recv1.attrs["comm_size"], recv1.attrs["pg_name"]) == (0, 4096, "0")
    assert send0.attrs["is_cpu_op"] is False and dict(send0._kinds)["comm_tag"] == "int32_val"
    # the measured marker time is kept as the node's duration (gloo:recv held rank 1 for 265 µs)
    assert recv1.duration_micros == 265
    # rendezvous: rank 1's receive tells rank 0 it is ready; rank 0's data send waits for that
    (ready1,) = [n for n in _comm(n1, T.COMM_SEND_NODE) if n.attrs["comm_tag"] == ready_tag(tag)]
    (wait0,) = [n for n in _comm(n0, T.COMM_RECV_NODE) if n.attrs["comm_tag"] == ready_tag(tag)]
    assert ready1.attrs["comm_dst"] == 0 and wait0.attrs["comm_src"] == 1
    assert ready1.attrs["comm_size"] == wait0.attrs["comm_size"] == READY_BYTES
    assert send0.data_deps == [wait0.id] and ready1.data_deps == recv1.data_deps
    # blocking ops: the op after the receive waits for the message (its data deps: the chain and the node)
    by1 = {n.id: n for n in n1}
    (after,) = [n for n in n1 if recv1.id in n.data_deps]
    assert after.name == "aten::addmm" and by1[recv1.data_deps[0]].name == "c10d::recv_"
    report = simulate(tmp_path / "p", _sys(tmp_path), write_network_config(tmp_path / "n2.yml", npus=(2,)),
                      plugins=PLUGINS)
    r0, r1 = report.ranks
    assert report.warnings == []
    # rank 1 cannot start its 200 µs addmm before rank 0's 300 µs of compute and the send: its finish includes both
    assert r1.finish_ns > (300 + 200) * 1000
    # rank 0's 30 µs op after the receive waits for rank 1's send
    assert r0.finish_ns > r1.finish_ns - 20_000 and r0.finish_ns > (300 + 200 + 30) * 1000


def _sys(tmp_path):
    from astra_sim_testing import write_system_config

    return write_system_config(tmp_path / "sys.json", dims=1)


def test_ctrl_deps_kept_when_parents_are_written_after_children(tmp_path):
    host, kin = _write(tmp_path, _pipeline())
    _, nodes, _ = convert_pytorch_trace(host.replace("{rank}", "0"), rank=0, world_size=2)
    by_id = {n.id: n for n in nodes}
    raw = json.loads((tmp_path / "j_host0.json").read_text())["nodes"]
    parent = {n["id"]: n["ctrl_deps"] for n in raw}
    later = [n["id"] for i, n in enumerate(raw) if any(m["id"] == n["ctrl_deps"] for m in raw[i + 1:])]
    assert len(later) > 5  # the file lists most parents after their children
    for nid in later:
        if nid in by_id and parent[nid] != 1:
            assert by_id[nid].ctrl_deps == [parent[nid]]
    assert by_id[2].ctrl_deps == []  # the thread root: its parent, the process root, is not written


def test_kineto_user_annotations_and_exclusive_times(tmp_path):
    r = Rank(0, 1)
    outer = r.op("DistributedDataParallel.forward", 100.0, cat="user_annotation")
    r.op("aten::linear", 30.0, parent=outer, start=10.0)
    r.op("aten::relu", 20.0, parent=outer, start=50.0)
    host, kin = r.traces()
    (tmp_path / "h.json").write_text(json.dumps(host))
    (tmp_path / "k.json").write_text(json.dumps(kin))
    _, nodes, _ = convert_pytorch_trace(tmp_path / "h.json", tmp_path / "k.json")
    dur = {n.name: n.duration_micros for n in nodes}
    # the annotation's own time is its 100 µs minus its two ops; the profiler step's is not simulated (Chakra)
    assert (dur["DistributedDataParallel.forward"], dur["aten::linear"], dur["aten::relu"]) == (50, 30, 20)
    assert dur["ProfilerStep#1"] == 0


def test_marker_that_outlives_its_op_is_subtracted_only_up_to_the_op_end(tmp_path):
    r0, r1 = _pipeline()
    host, kin = _write(tmp_path, [r0, r1])
    _, nodes, _ = convert_pytorch_trace(host.replace("{rank}", "1"), kin.replace("{rank}", "1"), rank=1)
    dur = {}
    for n in nodes:
        dur.setdefault(n.name, []).append(n.duration_micros)
    # c10d::recv_ lasts 10 µs; its gloo:recv starts 8 µs in and holds the thread 265 µs: 8 µs of the op's own
    assert dur["c10d::recv_"] == [8] and dur["gloo:recv"] == [0]
    assert dur["c10d::recv_ | gloo:recv"] == [265]


def test_async_all_reduce_waited_for_by_the_first_op_touching_its_storage(tmp_path):
    ranks = []
    for rank in range(2):
        r = Rank(rank, 2)
        bucket = _tensor(60, 61, 250_000)  # 1 MB
        r.compute(50.0)
        # the marker's recorded parent is an unrelated later op, as torch 2.14 records some async gloo scopes
        r.all_reduce(bucket, dur=900.0, async_op=True)
        r.compute(400.0)  # backward goes on while the all-reduce runs
        view = [62, 61, 0, 1000, 4, "cpu"]  # another tensor on the bucket's storage
        r.op("aten::copy_", 10.0, ins=[(view, "Tensor(float)")])
        r.compute(20.0)
        ranks.append(r)
    host, kin = _write(tmp_path, ranks, name="d")
    s = convert_pytorch(host, tmp_path / "d", kineto=kin, ranks=2)
    assert s["coll"] == 1 and s["blocking_comms"] == 0 and s["warnings"] == []
    nodes = read_et(str(tmp_path / "d.0.et")).nodes
    (ar,) = _comm(nodes)
    assert (ar.attrs["comm_type"], ar.attrs["comm_size"], ar.attrs["pg_name"]) == (T.ALL_REDUCE, 1_000_000, "0")
    (waiter,) = [n for n in nodes if ar.id in n.data_deps]
    assert waiter.name == "aten::copy_"
    # the 400 µs op right after the launch does not wait
    assert not any(ar.id in n.data_deps for n in nodes if n.name == "aten::mm")
    # with async_op False, and no Kineto to say otherwise, the next op waits
    _, nodes, counts = convert_pytorch_trace(host.replace("{rank}", "0"), rank=0, world_size=2)
    assert counts["blocking_comms"] == 0  # async_op True in the trace
    raw = json.loads((tmp_path / "d_host0.json").read_text())
    for n in raw["nodes"]:
        if n["name"] == "c10d::allreduce_":
            n["inputs"]["values"][4] = False
    (tmp_path / "sync.json").write_text(json.dumps(raw))
    _, nodes, counts = convert_pytorch_trace(tmp_path / "sync.json", rank=0, world_size=2)
    (ar,) = _comm(nodes)
    assert counts["blocking_comms"] == 1
    assert [n.name for n in nodes if ar.id in n.data_deps] == ["aten::mm"]


def test_blocking_read_from_kineto_when_the_thread_waited(tmp_path):
    # async_op=True, but the thread issues nothing until the all-reduce ends: it waited (the last DDP bucket)
    r = Rank(0, 2)
    r.compute(10.0)
    r.all_reduce(_tensor(70, 71, 1000), dur=500.0, async_op=True)
    r.clock += 600.0
    r.compute(10.0)
    host, kin = _write(tmp_path, [r], name="w")
    _, nodes, counts = convert_pytorch_trace(host.replace("{rank}", "0"), kin.replace("{rank}", "0"), rank=0,
                                             world_size=2)
    assert counts["blocking_comms"] == 1


def test_process_group_inference(tmp_path):
    groups = [{"pg_name": "0", "ranks": [], "group_size": 4}, {"pg_name": "1", "ranks": [0, 1], "group_size": 2},
              {"pg_name": "2", "ranks": [2, 3], "group_size": 2}]
    # rank 2 sends to group rank 1 of its pipeline group: the world group also fits (4 ranks), so it is ambiguous
    r = Rank(2, 4, groups)
    r.p2p("send", 1, _tensor(1, 2, 10))
    host, _ = r.traces()
    (tmp_path / "a.json").write_text(json.dumps(host))
    with pytest.raises(ConfigError, match=r"a.json: node id \d+ \('c10d::send'\): .*<Object>.*2 declared groups"):
        convert_pytorch_trace(tmp_path / "a.json", rank=2, world_size=4)
    # group rank 3 only fits the world group
    r = Rank(2, 4, groups)
    r.p2p("send", 3, _tensor(1, 2, 10))
    (tmp_path / "b.json").write_text(json.dumps(r.traces()[0]))
    _, nodes, _ = convert_pytorch_trace(tmp_path / "b.json", rank=2, world_size=4)
    (send,) = _comm(nodes, T.COMM_SEND_NODE)
    assert (send.attrs["comm_dst"], send.attrs["pg_name"]) == (3, "0")
    # only the sub-group is declared besides a group this rank is not in: group rank 1 of [2, 3] is rank 3
    sub = [{"pg_name": "1", "ranks": [0, 1]}, {"pg_name": "2", "ranks": [2, 3]}]
    r = Rank(2, 4, sub)
    r.p2p("send", 1, _tensor(1, 2, 10))
    (tmp_path / "c.json").write_text(json.dumps(r.traces()[0]))
    _, nodes, _ = convert_pytorch_trace(tmp_path / "c.json", rank=2, world_size=4)
    (send,) = _comm(nodes, T.COMM_SEND_NODE)
    assert (send.attrs["comm_dst"], send.attrs["pg_name"], send.attrs["comm_tag"]) == (3, "2", 2)
    # a peer outside every group of this rank
    r = Rank(2, 4, sub)
    r.p2p("send", 5, _tensor(1, 2, 10))
    (tmp_path / "d.json").write_text(json.dumps(r.traces()[0]))
    with pytest.raises(ConfigError, match=r"d.json: node id \d+ \('c10d::send'\): no declared process group fits "
                                          r"\(peer 5, rank 2\)"):
        convert_pytorch_trace(tmp_path / "d.json", rank=2, world_size=4)
    # an all-gather's output-to-input ratio picks the group of that size
    r = Rank(2, 4, groups[:2] + [{"pg_name": "5", "ranks": [0, 1, 2], "group_size": 3}])
    r.op("c10d::_allgather_base_", 5.0, ins=[(_tensor(9, 9, 300), "Tensor(float)"), (_tensor(8, 8, 100),
                                                                                     "Tensor(float)"),
                                             ("<Object>", "Object"), (False, "Bool"), (-1, "Int")])
    (tmp_path / "e.json").write_text(json.dumps(r.traces()[0]))
    _, nodes, _ = convert_pytorch_trace(tmp_path / "e.json", rank=2, world_size=4)
    (ag,) = _comm(nodes)
    assert (ag.attrs["comm_type"], ag.attrs["comm_size"], ag.attrs["pg_name"]) == (T.ALL_GATHER, 400, "5")


def test_bad_c10d_arguments_are_errors_naming_the_node(tmp_path):
    r = Rank(0, 2)
    r.p2p("send", "one", _tensor(1, 2, 10))
    (tmp_path / "a.json").write_text(json.dumps(r.traces()[0]))
    with pytest.raises(ConfigError, match=r"a.json: node id 5 \('c10d::send'\): expected the peer's group rank as "
                                          r"an integer argument"):
        convert_pytorch_trace(tmp_path / "a.json", rank=0, world_size=2)
    r = Rank(0, 2)
    r.op("c10d::recv_", 5.0, ins=[("junk", "String")], schema=RECV_SCHEMA)
    (tmp_path / "b.json").write_text(json.dumps(r.traces()[0]))
    with pytest.raises(ConfigError, match=r"b.json: node id 5 \('c10d::recv_'\): expected the tensors it moves in "
                                          r"argument 'tensors'"):
        convert_pytorch_trace(tmp_path / "b.json", rank=0, world_size=2)
    r = Rank(0, 2)
    r.p2p("recv", 0, _tensor(1, 2, 10))
    (tmp_path / "c.json").write_text(json.dumps(r.traces()[0]))
    with pytest.raises(ConfigError, match=r"c.json: node id 5 .*source rank 0 is this rank itself"):
        convert_pytorch_trace(tmp_path / "c.json", rank=0, world_size=2)
    assert main(["workload", "convert-pytorch", str(tmp_path / "c.json"), "--rank", "0", "-o",
                 str(tmp_path / "x")]) == 2


def test_unsupported_c10d_ops_stay_cpu_ops_and_are_reported(tmp_path, capsys):
    r = Rank(0, 1)
    r.op("c10d::reduce_", 5.0, ins=[([_tensor(1, 2, 10)], "GenericList[Tensor(float)]")])
    r.op("c10d::recv_any_source_", 5.0, ins=[([_tensor(3, 4, 10)], "GenericList[Tensor(float)]")])
    (tmp_path / "a.json").write_text(json.dumps(r.traces()[0]))
    assert main(["workload", "convert-pytorch", str(tmp_path / "a.json"), "--rank", "0", "-o",
                 str(tmp_path / "x")]) == 0
    err = capsys.readouterr().err
    assert "1 c10d::recv_any_source_ (a receive from any rank has no peer)" in err
    assert "1 c10d::reduce_ (no REDUCE collective)" in err
    assert _comm(read_et(str(tmp_path / "x.0.et")).nodes) == []


def test_cross_rank_checks_warn_about_unmatched_messages(tmp_path, capsys):
    r0, r1 = _pipeline()
    r1.p2p("send", 0, _tensor(90, 91, 7))  # rank 0 never receives this one
    host, kin = _write(tmp_path, [r0, r1])
    assert main(["workload", "convert-pytorch", host, "--ranks", "2", "-o", str(tmp_path / "p")]) == 0
    err = capsys.readouterr().err
    assert "point-to-point messages that do not match across ranks" in err
    assert "send #2 from rank 1 to rank 0 (tag 0, node id" in err and "has no matching receive on rank 0" in err
    # collectives of different sizes on one group
    ranks = [Rank(r, 2) for r in range(2)]
    ranks[0].all_reduce(_tensor(1, 2, 100))
    ranks[1].all_reduce(_tensor(1, 2, 200))
    host, _ = _write(tmp_path, ranks, name="c")
    s = convert_pytorch(host, tmp_path / "c", ranks=2)
    (warning,) = s["warnings"]
    assert "collective #1 on group '0': rank 0 node id" in warning and "ALL_REDUCE of 400 bytes" in warning
    assert "ALL_REDUCE of 800 bytes" in warning


def test_no_communication_at_all_is_a_warning(tmp_path):
    ranks = [Rank(r, 2) for r in range(2)]
    for r in ranks:
        r.compute(10.0)
    host, _ = _write(tmp_path, ranks, name="n")
    s = convert_pytorch(host, tmp_path / "n", ranks=2)
    assert s["warnings"] == ["no collective or send/recv in any of the 2 ranks: they will simulate as independent "
                             "ranks that never exchange a message"]


def test_summary_names_each_rank_when_they_differ(tmp_path, capsys):
    host, kin = _write(tmp_path, _pipeline())
    assert main(["workload", "convert-pytorch", host, "--kineto", kin, "--ranks", "2", "-o",
                 str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    n0 = len(read_et(str(tmp_path / "p.0.et")).nodes)
    n1 = len(read_et(str(tmp_path / "p.1.et")).nodes)
    assert n0 != n1
    assert f"{min(n0, n1)} to {max(n0, n1)} nodes per rank" in out
    assert f"rank 0: {n0} nodes (" in out and f"rank 1: {n1} nodes (" in out


def test_comms_from_host_is_accepted_with_a_cpu_kineto_trace(tmp_path):
    host, kin = _write(tmp_path, _pipeline())
    s = convert_pytorch(host, tmp_path / "c", kineto=kin, ranks=2, comms_from_host=True)
    assert s["host_comms"] == 0 and s["p2p"] == 4  # no record_param_comms on gloo; the c10d ops give them


def test_isend_marker_that_stays_open_is_no_container(tmp_path):
    # dist.isend under a 200 µs annotation: the gloo:send scope stays open on the thread (18..150 µs) while an
    # aten::mm (30..130 µs) runs; the mm is the annotation's, not the marker's, and the send did not block
    r0, r1 = Rank(0, 2), Rank(1, 2)
    t = _tensor(5, 6, 100)
    outer = r0.op("Model.step", 200.0, cat="user_annotation", start=0.0)
    send = r0.op("c10d::send", 10.0, ins=[([t], "GenericList[Tensor(float)]"), ("<Object>", "Object"), (1, "Int"),
                                           (0, "Int")], schema=SEND_SCHEMA, parent=outer, start=10.0)
    r0.op("gloo:send", 132.0, ins=[(t, "Tensor(float)")], parent=send, cat="user_annotation", start=18.0)
    r0.op("aten::mm", 100.0, parent=outer, start=30.0)
    r1.p2p("recv", 0, t, wait=100.0)
    host, kin = _write(tmp_path, [r0, r1], name="i")
    _, nodes, counts = convert_pytorch_trace(host.replace("{rank}", "0"), kin.replace("{rank}", "0"), rank=0,
                                             world_size=2)
    dur = {n.name: n.duration_micros for n in nodes}
    assert (dur["Model.step"], dur["c10d::send"], dur["aten::mm"]) == (90, 8, 100)
    assert counts["blocking_comms"] == 0


def test_nccl_c10d_ops_are_left_to_their_kernels_and_record_param_comms(tmp_path):
    # the same dispatcher op on NCCL has a record_param_comms (and nccl:*) under it: not a CPU-backend collective
    r = Rank(0, 2)
    t = _tensor(1, 2, 100)
    ar = r.op("c10d::allreduce_", 20.0, ins=[([t], "GenericList[Tensor(float)]")], schema=AR_SCHEMA)
    r.op("record_param_comms", 5.0, ins=[([t], "GenericList[Tensor(float)]")], parent=ar, start=r.clock - 15.0)
    (tmp_path / "n.json").write_text(json.dumps(r.traces()[0]))
    _, nodes, counts = convert_pytorch_trace(tmp_path / "n.json", rank=0, world_size=2)
    assert counts["cpu_backend_comms"] == 0 and _comm(nodes) == []


FUNC_AG = ("_c10d_functional::all_gather_into_tensor(Tensor input, int group_size, str group_name) -> Tensor")


def test_functional_collectives_name_their_group_and_are_waited_for_by_wait_tensor(tmp_path):
    groups = [{"pg_name": "0", "ranks": [], "group_size": 4}, {"pg_name": "7", "ranks": [0, 2], "group_size": 2}]
    r = Rank(0, 4, groups)
    shard, full = _tensor(1, 2, 100), _tensor(3, 4, 200)
    r.compute(5.0)
    r.op("_c10d_functional::all_gather_into_tensor", 8.0, ins=[(shard, "Tensor(float)"), (2, "Int"), ("7", "String")],
         outs=[(full, "Tensor(float)")], schema=FUNC_AG)
    r.compute(50.0)  # overlaps the gather
    r.op("_c10d_functional::wait_tensor", 1.0, ins=[(full, "Tensor(float)")], outs=[(full, "Tensor(float)")])
    (tmp_path / "f.json").write_text(json.dumps(r.traces()[0]))
    _, nodes, counts = convert_pytorch_trace(tmp_path / "f.json", rank=0, world_size=4)
    (ag,) = _comm(nodes)
    assert (ag.attrs["comm_type"], ag.attrs["comm_size"], ag.attrs["pg_name"]) == (T.ALL_GATHER, 400, "7")
    assert counts["blocking_comms"] == 0
    assert [n.name for n in nodes if ag.id in n.data_deps] == ["_c10d_functional::wait_tensor"]
    # a group the trace does not declare is an error naming it (no schema: the string argument is the name)
    r = Rank(0, 4, groups)
    r.op("_c10d_functional::all_reduce", 8.0, ins=[(shard, "Tensor(float)"), ("sum", "String"), ("9", "String")])
    (tmp_path / "g.json").write_text(json.dumps(r.traces()[0]))
    with pytest.raises(ConfigError, match=r"g.json: node id 5 \('_c10d_functional::all_reduce'\): process group "
                                          r"'9' is not among the groups the trace declares: \['0', '7'\]"):
        convert_pytorch_trace(tmp_path / "g.json", rank=0, world_size=4)
