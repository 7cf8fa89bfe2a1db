"""convert-pytorch: PyTorch host ET (+ Kineto) to Chakra, against Chakra's own converter output and a synthetic pair."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import encode_et, make_node, read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config

from astra_workload_generators.compare import compare_nodes
from astra_workload_generators.pytorch import BATCHED_P2P, _comm_kind, convert_pytorch, convert_pytorch_trace

PLUGINS = ["network_analytical", "workload_generators"]
SAMPLE = "chakra/pytorch/host_trace_1.0.2-chakra.0.0.4"


def _attrs(rf):
    return [{"name": "rf_id", "type": "uint64", "value": rf}, {"name": "fw_parent", "type": "uint64", "value": 0},
            {"name": "seq_id", "type": "int64", "value": -1}, {"name": "scope", "type": "uint64", "value": 0},
            {"name": "tid", "type": "uint64", "value": 1}, {"name": "fw_tid", "type": "uint64", "value": 0},
            {"name": "op_schema", "type": "string", "value": ""}]


def _op(id, name, parent, rf, ins=(), outs=()):
    ins, outs = list(ins), list(outs)
    return {"id": id, "name": name, "ctrl_deps": parent, "attrs": _attrs(rf),
            "inputs": {"values": [v for v, _, _ in ins], "shapes": [s for _, s, _ in ins],
                       "types": [t for _, _, t in ins]},
            "outputs": {"values": [v for v, _, _ in outs], "shapes": [s for _, s, _ in outs],
                        "types": [t for _, _, t in outs]}}


def _tensor(tid, shape):
    numel = 1
    for d in shape:
        numel *= d
    return ([tid, tid, 0, numel, 4, "cuda:0"], list(shape), "Tensor(float)")


PGS = [{"pg_name": "0", "ranks": [], "group_size": 2}, {"pg_name": "1", "ranks": [0, 1], "group_size": 2}]


def _host():
    a, b, c, d = _tensor(10, (64, 128)), _tensor(11, (128, 256)), _tensor(12, (64, 256)), _tensor(13, (64, 256))
    grad = ([[12, 12, 0, 64 * 256, 4, "cuda:0"]], [[64, 256]], "GenericList[Tensor(float)]")
    return {"schema": "1.0.2-chakra.0.0.4", "pid": 7, "time": "2026-11-21 00:00:00", "start_ts": 100,
            "finish_ts": 200, "nodes": [
                _op(1, "[pytorch|profiler|execution_trace|process]", 1, 0),
                _op(2, "[pytorch|profiler|execution_trace|thread]", 1, 1),
                _op(3, "## process_group:init ##", 2, 2, ins=[(json.dumps(PGS), [], "String")]),
                _op(4, "aten::mm", 2, 3, ins=[a, b], outs=[c]),
                _op(5, "aten::mm", 2, 4, ins=[c, _tensor(14, (256, 64))], outs=[d]),
                _op(6, "nccl:all_reduce", 2, 5, ins=[grad]),
                _op(7, "record_param_comms", 6, 6, ins=[grad]),
                _op(8, "aten::mm", 2, 7, ins=[d, b], outs=[_tensor(15, (64, 256))]),
                _op(20, "[pytorch|profiler|execution_trace|thread]", 1, 8),
                _op(21, "aten::add", 20, 9, ins=[c, c], outs=[_tensor(16, (64, 256))]),
            ]}


def _kineto():
    ev = []
    for ext, (rf, name, dur) in enumerate([(3, "aten::mm", 6), (4, "aten::mm", 5), (5, "nccl:all_reduce", 3),
                                           (6, "record_param_comms", 2), (7, "aten::mm", 4), (9, "aten::add", 1)]):
        ev.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": ext * 10, "dur": dur,
                   "args": {"External id": 100 + ext, "Record function id": rf}})
    kernels = [("sm80_xmma_gemm_f32", 100, 40.4), ("sm80_xmma_gemm_f32", 101, 31.6),
               ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 103, 80.0), ("sm80_xmma_gemm_f32", 104, 12.0)]
    for name, ext, dur in kernels:
        args = {"External id": ext, "stream": 7}
        if "nccl" in name:
            args["Process Group Name"] = "1"
        ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": 0, "dur": dur, "args": args})
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 1, "args": {}})
    return {"traceEvents": ev}


@pytest.fixture
def pair(tmp_path):
    host, kin = tmp_path / "host.json", tmp_path / "kineto.json"
    host.write_text(json.dumps(_host()))
    kin.write_text(json.dumps(_kineto()))
    return host, kin


def test_sample_matches_chakra_converter(shared_dir, tmp_path):
    out = tmp_path / "o"
    assert main(["workload", "convert-pytorch", str(shared_dir / "samples" / f"{SAMPLE}.json"), "--rank", "0",
                 "-o", str(out)]) == 0
    ours = read_et(f"{out}.0.et")
    theirs = read_et(str(shared_dir / "samples" / f"{SAMPLE}.et"))
    host = json.loads((shared_dir / "samples" / f"{SAMPLE}.json").read_text())
    position = {n["id"]: i for i, n in enumerate(host["nodes"])}
    parent = {n["id"]: n["ctrl_deps"] for n in host["nodes"]}
    # ctrl_deps: Chakra's converter keeps a node's parent only when the host file lists it earlier (it walks the
    # nodes in file order); we keep every parent (but the process root, which neither writes)
    kept = lost = 0
    for a, b in zip(ours.nodes, theirs.nodes):
        assert a.ctrl_deps == [parent[a.id]] or parent[a.id] == 1
        if b.ctrl_deps:
            assert a.ctrl_deps == b.ctrl_deps
            kept += 1
        elif a.ctrl_deps:
            assert position[parent[a.id]] > position[a.id]
            lost += 1
    assert (kept, lost) == (91, 170)
    # everything else is byte for byte Chakra's file, outputs IOInfo included
    for node in theirs.nodes:
        node.ctrl_deps = [parent[node.id]] if parent[node.id] != 1 else []
    assert encode_et(theirs.metadata, theirs.nodes, reencode=True) == open(f"{out}.0.et", "rb").read()
    # same GlobalMetadata, same nodes/types/names/durations/inputs.values/attrs/data+ctrl deps, ids included
    assert ours.metadata.SerializeToString() == theirs.metadata.SerializeToString()
    assert compare_nodes(ours.nodes, theirs.nodes) is None
    assert [n.id for n in ours.nodes] == [n.id for n in theirs.nodes]
    assert [(n.inputs_shapes, n.inputs_types) for n in ours.nodes] == \
        [(n.inputs_shapes, n.inputs_types) for n in theirs.nodes]
    meta = [n for n in ours.nodes if n.type == T.METADATA_NODE]
    assert len(meta) == 1 and json.loads(meta[0].inputs_values[2:-2])[0]["pg_name"] == "0"


def test_sample_simulates(shared_dir, tmp_path, configs):
    convert_pytorch(shared_dir / "samples" / f"{SAMPLE}.json", tmp_path / "s", ranks=2)
    report = simulate(tmp_path / "s", configs["sys1"], configs["net2"], plugins=PLUGINS)
    assert report.max_finish_ns > 0


def test_synthetic_host_and_kineto(pair):
    host, kin = pair
    gm, nodes, counts = convert_pytorch_trace(host, kin)
    assert counts == {"cpu": 8, "gpu_comp": 3, "coll": 1, "p2p": 0, "metadata": 1, "nodes": 13, "host_comms": 0,
                      "dropped_comms": 0, "cpu_backend_comms": 0, "blocking_comms": 0, "rendezvous_notes": 0,
                      "not_simulated": {}, "a2a_uneven": 0, "a2a_even_splits": 0}
    by_name = {}
    for n in nodes:
        by_name.setdefault(n.name, []).append(n)
    assert 1 not in [n.id for n in nodes]  # the process root is left out
    gemms = by_name["aten::mm | sm80_xmma_gemm_f32"]
    assert [n.id for n in gemms] == [22, 23, 25] and [n.duration_micros for n in gemms] == [40, 32, 12]
    assert [n.data_deps for n in gemms] == [[4], [5], [8]] and [n.ctrl_deps for n in gemms] == [[4], [5], [8]]
    assert gemms[0].inputs_shapes == "[[64, 128], [128, 256]]"
    assert gemms[0].inputs_types == "['Tensor(float)', 'Tensor(float)']"
    assert all(n.attrs["is_cpu_op"] is False and n.attrs["stream"] == 7 for n in gemms)
    (ar,) = by_name["record_param_comms | ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert ar.type == T.COMM_COLL_NODE and ar.duration_micros == 80
    assert (ar.attrs["comm_type"], ar.attrs["comm_size"], ar.attrs["pg_name"]) == (T.ALL_REDUCE, 64 * 256 * 4, "1")
    cpu = {n.id: n for n in nodes if n.attrs.get("is_cpu_op")}
    assert sorted(cpu) == [2, 3, 4, 5, 6, 7, 8, 20, 21]
    # exclusive CPU time: nccl:all_reduce 3 µs minus its child record_param_comms 2 µs
    assert (cpu[4].duration_micros, cpu[6].duration_micros, cpu[7].duration_micros) == (6, 1, 2)
    assert cpu[4].name == "aten::mm" and cpu[4].type == T.COMP_NODE
    # DFS chain within a thread, ctrl dep on the parent; the second thread depends on the producer of tensor 12
    assert [cpu[i].data_deps for i in (3, 4, 5, 6, 7, 8)] == [[2], [3], [4], [5], [6], [7]]
    assert cpu[7].ctrl_deps == [6] and cpu[20].data_deps == [] and cpu[21].data_deps == [20, 4]
    meta = cpu[3]
    assert meta.type == T.METADATA_NODE
    assert json.loads(meta.inputs_values[2:-2]) == PGS
    assert [a.name for a in gm.attr] == ["schema", "pid", "time", "start_ts", "finish_ts"]


def test_synthetic_simulates_with_groups(pair, tmp_path, configs):
    host, kin = pair
    assert main(["workload", "convert-pytorch", str(host), "--kineto", str(kin), "--ranks", "2",
                 "-o", str(tmp_path / "t" / "w")]) == 0
    report = simulate(tmp_path / "t" / "w", configs["sys1"], configs["net2"], plugins=PLUGINS)
    # at least the gemms (40+32+12 µs) and the all-reduce on the GPU path
    assert report.max_finish_ns > (40 + 32 + 12) * 1000
    # the all-reduce ran on process group 1 (declared by the METADATA node, else the run would fail), off the
    # critical path of the GPU kernels; the kernel's 80 µs Kineto duration is not replayed, the network is simulated
    assert report.warnings == []
    assert all(r.comm_ns > 0 for r in report.ranks)
    assert all(r.compute_ns == (40 + 32 + 12) * 1000 for r in report.ranks)


def test_per_rank_files_and_single_rank(pair, tmp_path):
    host, kin = pair
    for r in range(2):
        (tmp_path / f"h.{r}.json").write_text(host.read_text())
        (tmp_path / f"k.{r}.json").write_text(kin.read_text())
    s = convert_pytorch(str(tmp_path / "h.{rank}.json"), tmp_path / "p", kineto=str(tmp_path / "k.{rank}.json"),
                        ranks=2)
    assert s["files"] == 2 and len(s["paths"]) == 2
    s = convert_pytorch(host, tmp_path / "one", kineto=kin, rank=3)
    assert s["paths"] == [f"{tmp_path / 'one'}.3.et"]
    assert compare_nodes(read_et(f"{tmp_path / 'one'}.3.et").nodes, read_et(f"{tmp_path / 'p'}.1.et").nodes) is None


def _broken(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_malformed_input_errors(pair, tmp_path, capsys):
    host, kin = pair
    bad = _host()
    del bad["nodes"][3]["name"]
    p = _broken(tmp_path, "b1.json", bad)
    with pytest.raises(ConfigError, match=r"b1.json: nodes\[3\] \(id 4\): missing string field 'name'"):
        convert_pytorch_trace(p)
    bad = _host()
    bad["nodes"][4]["id"] = 4
    with pytest.raises(ConfigError, match=r"nodes\[4\] \(id 4\): duplicate node id 4"):
        convert_pytorch_trace(_broken(tmp_path, "b2.json", bad))
    with pytest.raises(ConfigError, match="b3.json: not a PyTorch host execution trace"):
        convert_pytorch_trace(_broken(tmp_path, "b3.json", {"traceEvents": []}))
    with pytest.raises(ConfigError, match="b4.json: invalid JSON at line 1"):
        convert_pytorch_trace(_broken(tmp_path, "b4.json", "{nodes"))
    k = _kineto()
    k["traceEvents"][6]["args"]["External id"] = 999
    with pytest.raises(ConfigError, match=r"k1.json: traceEvents\[6\] \('sm80_xmma_gemm_f32'\): no cpu_op with "
                                          "External id 999"):
        convert_pytorch_trace(host, _broken(tmp_path, "k1.json", k))
    k = _kineto()
    k["traceEvents"][8]["name"] = "ncclDevKernel_Reduce_Sum"
    with pytest.raises(ConfigError, match=r"k2.json: traceEvents\[8\] .*cannot tell the collective"):
        convert_pytorch_trace(host, _broken(tmp_path, "k2.json", k))
    k = _kineto()
    k["traceEvents"][7]["dur"] = "long"
    with pytest.raises(ConfigError, match=r"k3.json: traceEvents\[7\] .*'dur'"):
        convert_pytorch_trace(host, _broken(tmp_path, "k3.json", k))
    assert main(["workload", "convert-pytorch", str(tmp_path / "b4.json"), "--rank", "0",
                 "-o", str(tmp_path / "x")]) == 2
    assert "b4.json" in capsys.readouterr().err


def test_outputs_are_written(pair, tmp_path):
    host, kin = pair
    convert_pytorch(host, tmp_path / "o", kineto=kin, rank=0)
    nodes = {n.id: n for n in read_et(f"{tmp_path / 'o'}.0.et").nodes}
    cpu = nodes[4].to_proto()  # aten::mm: outputs [tensor 12]
    assert cpu.HasField("outputs")
    assert cpu.outputs.values == "[[12, 12, 0, 16384, 4, 'cuda:0']]"
    assert (cpu.outputs.shapes, cpu.outputs.types) == ("[[64, 256]]", "['Tensor(float)']")
    assert nodes[7].to_proto().outputs.values == "[]"  # record_param_comms: no outputs, written as Chakra does
    gemm = nodes[22].to_proto()  # GPU kernel of node 4: the launcher's output shapes/types, no values
    assert (gemm.outputs.values, gemm.outputs.shapes, gemm.outputs.types) == \
        ("", "[[64, 256]]", "['Tensor(float)']")


def test_make_node_outputs_optional():
    plain = make_node(3, "n", T.COMP_NODE, inputs_shapes="[[1]]")
    assert make_node(3, "n", T.COMP_NODE, inputs_shapes="[[1]]", outputs_values=None)._raw == plain._raw
    assert not plain.to_proto().HasField("outputs")
    full = make_node(3, "n", T.COMP_NODE, outputs_values="[1]", outputs_shapes="[[]]", outputs_types="['Int']")
    out = full.to_proto().outputs
    assert (out.values, out.shapes, out.types) == ("[1]", "[[]]", "['Int']")


# ---------------------------------------------------------------- point-to-point send/recv
#
# A two-stage pipeline: the sender computes (a 40 µs CPU op and a GPU gemm) then sends tensor 12 (64x256 fp32,
# 64 KiB) with nccl:send; the receiver receives it with nccl:recv, then computes. record_param_comms carries the
# peer in the group's numbering, in the old 8-argument layout or the newer 10-argument one.

MSG = 64 * 256 * 4
WORLD_PG = [{"pg_name": "0", "pg_desc": "default_pg", "backend_id": 5000, "ranks": [], "group_size": 2}]


def _param_comms(id, parent, rf, coll, peer, tensor, layout, pg=None, world=2, start=0, stride=1):
    """A record_param_comms host op in the old layout [tensors, seq, pg_id, rank, name, in_split, out_split,
    world_size] or the newer one [tensors, (seq, is_p2p), (pg_name, pg_desc), rank, name, in_split, out_split,
    global_rank_start, global_rank_stride, world_size]."""
    tl = ([tensor[0]], [tensor[1]], "GenericList[Tensor(float)]")
    if layout == "old":
        args = [tl, (3, [], "Int"), (5000 if pg is None else pg, [], "Int"), (peer, [], "Int"),
                (coll, [], "String"), ([], [], "GenericList[]"), ([], [], "GenericList[]"), (world, [], "Int")]
    else:
        args = [tl, ([3, True], [[], []], "Tuple[Int,Bool]"),
                (list(pg or ("0", "default_pg")), [[], []], "Tuple[String,String]"), (peer, [], "Int"),
                (coll, [], "String"), ([], [], "GenericList[]"), ([], [], "GenericList[]"), (start, [], "Int"),
                (stride, [], "Int"), (world, [], "Int")]
    return _op(id, "record_param_comms", parent, rf, ins=args, outs=[tl])


def _p2p_rank(kind, me, peer, layout, *, pgs=WORLD_PG, pg=None, world=2, start=0, stride=1, kargs=None,
              header=None, title=True):
    """(host trace, Kineto trace) of one pipeline rank. kind: 'send' or 'recv'. layout: 'old' (record_param_comms
    above nccl:send|recv, which launches the kernel), 'new' (record_param_comms under it; for a receiver it
    launches the kernel itself), or 'kineto' (no record_param_comms: the peer is in the kernel's args)."""
    t = _tensor(12, (64, 256))
    op = f"nccl:{kind} {me}{'->' if kind == 'send' else '<-'}{peer}" if title else f"nccl:{kind}"
    nodes = [_op(1, "[pytorch|profiler|execution_trace|process]", 1, 0),
             _op(2, "[pytorch|profiler|execution_trace|thread]", 1, 1),
             _op(3, "## process_group:init ##", 2, 2, ins=[(json.dumps(pgs), [], "String")])]
    cpu = {}  # rf -> (name, inclusive µs)
    if kind == "send":
        nodes.append(_op(4, "aten::mm", 2, 3, ins=[_tensor(10, (64, 128)), _tensor(11, (128, 256))], outs=[t]))
        cpu[3] = ("aten::mm", 40)
        first, compute = 5, [("sm80_xmma_gemm_f32", 3, 30.0)]
    else:
        first, compute = 4, []
    rpc = lambda id, parent, rf: _param_comms(id, parent, rf, kind, peer, t, layout, pg, world, start, stride)
    # host ids `first`, `first + 1` have rf_id `first - 1`, `first`; `launcher` is the kernel's launching rf_id
    if layout == "old":
        nodes += [rpc(first, 2, first - 1), _op(first + 1, op, first, first, ins=[t])]
        launcher = first
    elif layout == "new":
        nodes += [_op(first, op, 2, first - 1, ins=[t]), rpc(first + 1, first, first)]
        launcher = first - 1 if kind == "send" else first
    else:
        nodes += [_op(first, op, 2, first - 1, ins=[t]), _op(first + 1, "aten::empty", first, first)]
        launcher = first - 1
    cpu[first - 1], cpu[first] = (nodes[-2]["name"], 5), (nodes[-1]["name"], 2)
    if kind == "recv":
        nodes.append(_op(first + 2, "aten::mm", 2, first + 1, ins=[t, _tensor(14, (256, 64))],
                         outs=[_tensor(15, (64, 64))]))
        cpu[first + 1] = ("aten::mm", 8)
        compute = [("sm80_xmma_gemm_f32", first + 1, 12.0)]
    host = {"schema": "1.0.2-chakra.0.0.4", "pid": 100 + me, "time": "2026-11-21 00:00:00", "start_ts": 1,
            "finish_ts": 2, "nodes": nodes}
    if header is not None:
        host["rank"] = header
    ev = [{"ph": "X", "cat": "cpu_op", "name": name, "ts": rf, "dur": dur,
           "args": {"External id": 100 + rf, "Record function id": rf}} for rf, (name, dur) in sorted(cpu.items())]
    args = {"External id": 100 + launcher, "stream": 9}
    args.update(kargs or {})
    ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
               "ts": 0, "dur": 7.0, "args": args})
    for name, rf, dur in compute:
        ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": 0, "dur": dur,
                   "args": {"External id": 100 + rf, "stream": 7}})
    return host, {"traceEvents": ev}


def _write_ranks(tmp_path, traces):
    for r, (host, kin) in enumerate(traces):
        (tmp_path / f"h.{r}.json").write_text(json.dumps(host))
        (tmp_path / f"k.{r}.json").write_text(json.dumps(kin))
    return str(tmp_path / "h.{rank}.json"), str(tmp_path / "k.{rank}.json")


def _p2p_nodes(prefix, rank):
    return [n for n in read_et(f"{prefix}.{rank}.et").nodes if n.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE)]


def _idle_rank(pgs):
    nodes = [_op(1, "[pytorch|profiler|execution_trace|process]", 1, 0),
             _op(2, "[pytorch|profiler|execution_trace|thread]", 1, 1),
             _op(3, "## process_group:init ##", 2, 2, ins=[(json.dumps(pgs), [], "String")]),
             _op(4, "aten::relu", 2, 3)]
    return {"schema": "1.0.2-chakra.0.0.4", "nodes": nodes}, {"traceEvents": []}


KINETO_PEERS = {"send": {"Dst Rank": 1, "Process Group Name": "0"}, "recv": {"Src Rank": 0, "Process Group Name": "0"}}


@pytest.mark.parametrize("layouts", [("old", "old"), ("new", "new"), ("old", "new"), ("kineto", "kineto")])
def test_p2p_pipeline_converts_and_simulates(tmp_path, configs, layouts):
    traces = [_p2p_rank("send", 0, 1, layouts[0], kargs=KINETO_PEERS["send"] if layouts[0] == "kineto" else None,
                        title=layouts[0] != "kineto"),
              _p2p_rank("recv", 1, 0, layouts[1], kargs=KINETO_PEERS["recv"] if layouts[1] == "kineto" else None,
                        title=layouts[1] != "kineto")]
    host, kin = _write_ranks(tmp_path, traces)
    s = convert_pytorch(host, tmp_path / "p" / "w", kineto=kin, ranks=2)
    assert s["files"] == 2 and s["p2p"] == 1
    (send,), (recv,) = _p2p_nodes(tmp_path / "p" / "w", 0), _p2p_nodes(tmp_path / "p" / "w", 1)
    assert send.type == T.COMM_SEND_NODE and recv.type == T.COMM_RECV_NODE
    assert (send.attrs["comm_dst"], send.attrs["comm_tag"], send.attrs["comm_size"]) == (1, 0, MSG)
    assert (recv.attrs["comm_src"], recv.attrs["comm_tag"], recv.attrs["comm_size"]) == (0, 0, MSG)
    assert "comm_src" not in send.attrs and "comm_dst" not in recv.attrs  # the simulator defaults them to self
    assert dict(send._kinds)["comm_dst"] == "int32_val" and dict(recv._kinds)["comm_tag"] == "int32_val"
    assert send.attrs["pg_name"] == recv.attrs["pg_name"] == "0"
    report = simulate(tmp_path / "p" / "w", configs["sys1"], configs["net2"], plugins=PLUGINS)  # no deadlock
    r0, r1 = report.ranks
    assert report.warnings == [] and r0.cpu_ns >= 43_000
    # the receiver waits for the sender's compute before the send (aten::mm 40 µs + nccl:send's own 3 µs on the
    # CPU) and for the 64 KiB transfer (500 ns + 64 KiB at 50 GiB/s); its own ops alone take 13+12 µs
    transfer = 500 + MSG / (50 * 2 ** 30) * 1e9
    assert r1.finish_ns >= 43_000 + transfer > 25_000


def test_p2p_sub_group_via_process_group_init(tmp_path, configs):
    # a 4-rank job; ranks 2 and 3 form process group "1" (group ranks 0, 1). Old layout: the record_param_comms
    # process-group argument is the backend id, different on each process, found in the init metadata.
    pgs = lambda bid: [{"pg_name": "0", "backend_id": 10, "ranks": [], "group_size": 4},
                       {"pg_name": "1", "backend_id": bid, "ranks": [2, 3], "group_size": 2}]
    traces = [_idle_rank(pgs(7)), _idle_rank(pgs(8)),
              _p2p_rank("send", 0, 1, "old", pgs=pgs(1002), pg=1002),
              _p2p_rank("recv", 1, 0, "old", pgs=pgs(1003), pg=1003)]
    host, kin = _write_ranks(tmp_path, traces)
    convert_pytorch(host, tmp_path / "g", kineto=kin, ranks=4)
    (send,), (recv,) = _p2p_nodes(tmp_path / "g", 2), _p2p_nodes(tmp_path / "g", 3)
    assert (send.attrs["comm_dst"], send.attrs["comm_tag"], send.attrs["pg_name"]) == (3, 1, "1")
    assert (recv.attrs["comm_src"], recv.attrs["comm_tag"], recv.attrs["pg_name"]) == (2, 1, "1")
    net4 = write_network_config(tmp_path / "net4.yml", npus=(4,))
    report = simulate(tmp_path / "g", configs["sys1"], net4, plugins=PLUGINS)
    assert report.ranks[3].finish_ns > 40_000 + MSG / 50 > report.ranks[0].finish_ns


def test_p2p_sub_group_via_global_rank_stride_and_kineto_ranks(tmp_path):
    # newer layout, group "5" not in the metadata: global_rank_start 2 + local 1 * stride 1 = 3
    h, k = _p2p_rank("send", 0, 1, "new", pg=("5", "pp"), world=2, start=2, stride=1)
    (tmp_path / "h.json").write_text(json.dumps(h))
    (tmp_path / "k.json").write_text(json.dumps(k))
    gm, nodes, _ = convert_pytorch_trace(tmp_path / "h.json", tmp_path / "k.json", rank=2, world_size=4)
    (send,) = [n for n in nodes if n.type == T.COMM_SEND_NODE]
    assert (send.attrs["comm_dst"], send.attrs["comm_tag"], send.attrs["pg_name"]) == (3, 5, "5")
    # Kineto's "Rank" + "Process Group Ranks" (the group-local peer and the group's global ranks)
    h, k = _p2p_rank("recv", 1, 0, "kineto", title=False,
                     kargs={"Collective name": "recv", "Rank": 0, "Process Group Ranks": "[4, 6]",
                            "Process Group Name": "pp_stage"})
    (tmp_path / "h2.json").write_text(json.dumps(h))
    (tmp_path / "k2.json").write_text(json.dumps(k))
    gm, nodes, _ = convert_pytorch_trace(tmp_path / "h2.json", tmp_path / "k2.json", rank=6)
    (recv,) = [n for n in nodes if n.type == T.COMM_RECV_NODE]
    assert recv.attrs["comm_src"] == 4 and recv.attrs["pg_name"] == "pp_stage"
    assert 0 < recv.attrs["comm_tag"] < 2 ** 28  # a CRC of the group name, the same on both ranks
    # no record_param_comms, no Kineto peer: the launcher's profiling title "nccl:send 0->1" (world group "0")
    _, nodes, _ = _convert_one(tmp_path, _p2p_rank("send", 0, 1, "kineto", kargs={"Process Group Name": "0"}),
                               name="t1")
    (send,) = [n for n in nodes if n.type == T.COMM_SEND_NODE]
    assert (send.attrs["comm_dst"], send.attrs["comm_tag"]) == (1, 0)
    # Kineto's global "Dst Rank" wins; the tag still comes from the record_param_comms group (found by backend id)
    pgs = [{"pg_name": "0", "ranks": []}, {"pg_name": "3", "backend_id": 42, "ranks": [0, 5]}]
    _, nodes, _ = _convert_one(tmp_path, _p2p_rank("send", 0, 1, "old", pgs=pgs, pg=42, kargs={"Dst Rank": 5}),
                               name="t2")
    (send,) = [n for n in nodes if n.type == T.COMM_SEND_NODE]
    assert (send.attrs["comm_dst"], send.attrs["comm_tag"], send.attrs["pg_name"]) == (5, 3, "3")


def _convert_one(tmp_path, trace, rank=0, name="e", **kw):
    h, k = trace
    (tmp_path / f"{name}.json").write_text(json.dumps(h))
    (tmp_path / f"{name}k.json").write_text(json.dumps(k))
    return convert_pytorch_trace(tmp_path / f"{name}.json", tmp_path / f"{name}k.json", rank=rank, **kw)


def test_p2p_errors(tmp_path):
    # no peer anywhere: no record_param_comms, no Kineto peer args, a launcher without "a->b" in its name
    with pytest.raises(ConfigError, match=r"e1k.json: traceEvents\[\d+\] .*: send node \d+ .*launched by host "
                                          r"node id 5 .*cannot find the destination rank: expected Kineto args "
                                          r"'Dst Rank'"):
        _convert_one(tmp_path, _p2p_rank("send", 0, 1, "kineto", title=False), name="e1")
    # the peer is outside its group (group "1" has 2 ranks, the trace says local peer 5)
    pgs = [{"pg_name": "1", "backend_id": 77, "ranks": [2, 3], "group_size": 2}]
    with pytest.raises(ConfigError, match=r"peer 5 \(from record_param_comms host node id 5\) is outside process "
                                          r"group '1', whose 2 ranks are \[2, 3\]"):
        _convert_one(tmp_path, _p2p_rank("send", 0, 5, "old", pgs=pgs, pg=77), rank=2, name="e2")
    # a group that is not the world group and that nothing describes
    with pytest.raises(ConfigError, match=r"is a rank of process group id 99, which is not the world group"):
        _convert_one(tmp_path, _p2p_rank("send", 0, 1, "old", pg=99), rank=2, world_size=4, name="e3")
    # the peer is this rank
    with pytest.raises(ConfigError, match=r"the destination rank 1 .* is this rank itself; this trace is rank 1"):
        _convert_one(tmp_path, _p2p_rank("send", 0, 1, "new"), rank=1, name="e4")
    # the header's rank disagrees with the rank being converted
    with pytest.raises(ConfigError, match=r"e5.json: the host trace header says rank 1, but it is being converted "
                                          r"as rank 0"):
        _convert_one(tmp_path, _p2p_rank("send", 0, 1, "new", header=1), name="e5")
    h, k = _p2p_rank("send", 0, 1, "new")
    k["distributedInfo"] = {"backend": "nccl", "rank": 3, "world_size": 4}
    with pytest.raises(ConfigError, match=r"e6k.json: Kineto's distributedInfo says rank 3, but it is being "
                                          r"converted as rank 0"):
        _convert_one(tmp_path, (h, k), name="e6")
    # agreeing header: fine, and the header alone gives the rank
    _convert_one(tmp_path, _p2p_rank("send", 0, 1, "new", header=0), name="e7")
    _convert_one(tmp_path, _p2p_rank("send", 0, 1, "new", header=0), rank=None, name="e8")
    with pytest.raises(ConfigError, match=r"the rank of this trace is needed"):
        _convert_one(tmp_path, _p2p_rank("send", 0, 1, "new"), rank=None, name="e9")
    # a p2p trace copied to every rank
    with pytest.raises(ConfigError, match=r"cannot be copied to 2 ranks"):
        convert_pytorch(tmp_path / "e7.json", tmp_path / "x", kineto=tmp_path / "e7k.json", ranks=2)
    # the CLI reports it with exit status 2
    assert main(["workload", "convert-pytorch", str(tmp_path / "e5.json"), "--rank", "0",
                 "-o", str(tmp_path / "y")]) == 2


@pytest.mark.parametrize("layout", ["old", "new"])
def test_p2p_from_host_record_param_comms(tmp_path, configs, layout):
    # the same pipeline without Kineto traces: --comms-from-host takes the send/recv from record_param_comms
    traces = [_p2p_rank("send", 0, 1, layout), _p2p_rank("recv", 1, 0, layout)]
    host, _ = _write_ranks(tmp_path, traces)
    dropped = convert_pytorch(host, tmp_path / "d" / "w", ranks=2)
    assert (dropped["p2p"], dropped["dropped_comms"], dropped["host_comms"]) == (0, 1, 0)
    s = convert_pytorch(host, tmp_path / "p" / "w", ranks=2, comms_from_host=True)
    assert (s["p2p"], s["host_comms"], s["dropped_comms"], s["gpu_comp"]) == (1, 1, 0, 0)
    (send,), (recv,) = _p2p_nodes(tmp_path / "p" / "w", 0), _p2p_nodes(tmp_path / "p" / "w", 1)
    assert (send.attrs["comm_dst"], send.attrs["comm_tag"], send.attrs["comm_size"]) == (1, 0, MSG)
    assert (recv.attrs["comm_src"], recv.attrs["comm_tag"], recv.attrs["comm_size"]) == (0, 0, MSG)
    assert send.attrs["pg_name"] == recv.attrs["pg_name"] == "0"
    report = simulate(tmp_path / "p" / "w", configs["sys1"], configs["net2"], plugins=PLUGINS)
    assert report.warnings == []
    assert report.ranks[1].finish_ns >= 500 + MSG / (50 * 2 ** 30) * 1e9


def test_comms_from_host_refuses_traces_with_kernels(pair, tmp_path):
    host, kin = pair
    with pytest.raises(ConfigError, match=r"host.json: --comms-from-host is for traces without GPU kernels, "
                                          r"but this one has 4 \(from the Kineto trace\)"):
        convert_pytorch(host, tmp_path / "x", kineto=kin, rank=0, comms_from_host=True)


def test_kineto_errors_cut_long_kernel_names(pair, tmp_path, capsys):
    host, kin = pair
    k = json.loads(kin.read_text())
    kernel = next(e for e in k["traceEvents"] if e["cat"] == "kernel")
    kernel["name"] = "void cutlass::Kernel<" + "x" * 5000 + ">"
    kernel["args"]["External id"] = 999  # launched by no known op
    kin.write_text(json.dumps(k))
    assert main(["workload", "convert-pytorch", str(host), "--kineto", str(kin), "--rank", "0",
                 "-o", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert "no cpu_op with External id 999" in err and "void cutlass::Kernel<xxx" in err and len(err) < 800


def test_kineto_without_execution_trace_ids_is_refused(pair, tmp_path, capsys):
    """A Kineto trace recorded without the execution-trace observer has 'Record function id' 0 on every cpu_op;
    the host trace's roots have rf_id 0 too, so the kernels would all hang on the process root: refused."""
    host, kin = pair
    k = json.loads(kin.read_text())
    for ev in k["traceEvents"]:
        if ev["cat"] == "cpu_op":
            ev["args"]["Record function id"] = 0
    kin.write_text(json.dumps(k))
    with pytest.raises(ConfigError, match=r"kineto.json: every cpu_op has 'Record function id' 0, .* cannot be "
                                          r"matched with the host ops of .*host.json"):
        convert_pytorch_trace(host, kin)
    # one op with id 0 among real ones: its kernel finds no host op (not the root, which also has rf_id 0)
    k["traceEvents"][0]["args"]["Record function id"] = 3
    k["traceEvents"][1]["args"]["Record function id"] = 4
    kin.write_text(json.dumps(k))
    with pytest.raises(ConfigError, match=r"no cpu_op with External id 103 matching a host op"):
        convert_pytorch_trace(host, kin)


def test_gzip_traces(pair, tmp_path):
    import gzip

    host, kin = pair
    (tmp_path / "h.json.gz").write_bytes(gzip.compress(host.read_bytes()))
    (tmp_path / "k.json.gz").write_bytes(gzip.compress(kin.read_bytes()))
    plain = convert_pytorch_trace(host, kin)[1]
    packed = convert_pytorch_trace(tmp_path / "h.json.gz", tmp_path / "k.json.gz")[1]
    assert [n._raw for n in packed] == [n._raw for n in plain]
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b" + b"not gzip at all")
    with pytest.raises(ConfigError, match=r"bad.json.gz: .*gzip-compressed PyTorch host execution trace is (corrupt|truncated)"):
        convert_pytorch_trace(tmp_path / "bad.json.gz")


@pytest.mark.parametrize("names, expected", [
    (["nccl:send 0->1", "record_param_comms"], "send"),
    (["record_param_comms", "nccl:recv 1<-0"], "recv"),
    (["nccl:coalesced", "record_param_comms"], "batched"),
    (["nccl:send 0->1", "torch.distributed.batch_isend_irecv"], "batched"),  # a batch op above: one batched kernel
    (["nccl:send 0->1", "nccl:recv 0<-1"], "both a send and a receive"),
    (["aten::mm"], "names send, recv, all_to_all, coalesced or batch_isend_irecv"),
    (["nccl:send 0->1", "aten::batch_norm"], "send"),
])
def test_sendrecv_kernel_kinds(names, expected):
    """A SendRecv kernel is a send or a receive by its launching ops' names, or a batch of them (several p2p ops in
    one kernel, expanded by _batched_p2p_nodes) under a coalesced or batch op, never a lone send that would drop
    its receives."""
    kernel = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
    if expected in ("send", "recv", "batched"):
        kind = _comm_kind(kernel, names, "k.json", "kernel 7")
        assert kind == ((None, BATCHED_P2P) if expected == "batched" else
                        ((T.COMM_SEND_NODE if expected == "send" else T.COMM_RECV_NODE), None))
    else:
        with pytest.raises(ConfigError, match=expected) as err:
            _comm_kind(kernel, names, "k.json", "kernel 7")
        assert "k.json: kernel 7" in str(err.value)


# ---------------------------------------------------------------- batched p2p (batch_isend_irecv)
#
# torch.distributed.batch_isend_irecv records one record_param_comms per isend/irecv and then launches one SendRecv
# kernel for all of them under "nccl:coalesced". Two ranks, each: an ordinary send or receive (its own kernel), then
# a batch that sends 64 KiB to the other rank and receives 32 KiB from it (the exchange that deadlocks in NCCL
# unless grouped), then a batch with one 16 MiB send (rank 0) or receive (rank 1), then a GEMM.

SMALL, LONE = 64 * 128 * 4, 16 * 2 ** 20


def _batched_rank(me, *, single=True, members=True, hung_on_last=False):
    """hung_on_last: the first batch's kernel hangs on its last record_param_comms (under the batch_isend_irecv
    scope), as a linker that skips nccl:coalesced leaves it, instead of on nccl:coalesced."""
    peer = 1 - me
    big, small, last = _tensor(12, (64, 256)), _tensor(13, (64, 128)), _tensor(17, (4096, 1024))
    rpc = lambda id, parent, rf, coll, t: _param_comms(id, parent, rf, coll, peer, t, "new")
    nodes = [_op(1, "[pytorch|profiler|execution_trace|process]", 1, 0),
             _op(2, "[pytorch|profiler|execution_trace|thread]", 1, 1),
             _op(3, "## process_group:init ##", 2, 2, ins=[(json.dumps(WORLD_PG), [], "String")])]
    launchers = []  # rf_ids that launch a SendRecv kernel
    if single:  # an ordinary p2p op first: nccl:send|recv launches its own kernel, its record_param_comms under it
        kind = "send" if me == 0 else "recv"
        nodes += [_op(4, f"nccl:{kind} {me}{'->' if kind == 'send' else '<-'}{peer}", 2, 3, ins=[_tensor(16, (8,))]),
                  rpc(5, 4, 4, kind, _tensor(16, (8,)))]
        launchers.append(3)
    # the first batch: its send and receive in the order this rank issued them, then nccl:coalesced
    first = [("send", big), ("recv", small)] if me == 0 else [("recv", big), ("send", small)]
    nodes += [_op(6, "batch_isend_irecv", 2, 5)]
    if members:
        nodes += [rpc(7 + k, 6, 6 + k, coll, t) for k, (coll, t) in enumerate(first)]
    nodes += [_op(9, "nccl:coalesced", 6, 8)]
    launchers.append(7 if hung_on_last else 8)
    # the second batch, on its own
    nodes += [rpc(10, 2, 9, "send" if me == 0 else "recv", last), _op(11, "nccl:coalesced", 2, 10)]
    launchers.append(10)
    nodes += [_op(12, "aten::mm", 2, 11, ins=[last, _tensor(14, (256, 64))], outs=[_tensor(15, (64, 64))])]
    host = {"schema": "1.0.2-chakra.0.0.4", "pid": 100 + me, "nodes": nodes}
    ev = [{"ph": "X", "cat": "cpu_op", "name": n["name"], "ts": rf, "dur": 2,
           "args": {"External id": 100 + rf, "Record function id": rf}}
          for n in nodes[1:] for rf in [n["attrs"][0]["value"]]]
    for rf in launchers:
        ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                   "ts": 0, "dur": 9.0, "args": {"External id": 100 + rf, "stream": 9, "Process Group Name": "0"}})
    ev.append({"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f32", "ts": 0, "dur": 12.0,
               "args": {"External id": 111, "stream": 7}})
    return host, {"traceEvents": ev}


def test_batched_p2p_becomes_one_node_per_transfer_and_simulates(tmp_path, configs):
    host, kin = _write_ranks(tmp_path, [_batched_rank(0), _batched_rank(1)])
    s = convert_pytorch(host, tmp_path / "b" / "w", kineto=kin, ranks=2)
    assert s["p2p"] == 4  # per rank: the single op, the batch's two, the lone batch's one
    for me in (0, 1):
        peer = 1 - me
        every = read_et(f"{tmp_path / 'b' / 'w'}.{me}.et").nodes
        p2p = _p2p_nodes(tmp_path / "b" / "w", me)
        single, b_first, b_second, lone = sorted(p2p, key=lambda n: (n.ctrl_deps, n.id))
        assert single.name.startswith("nccl:") and single.ctrl_deps == [4]
        # the batch: both transfers, in issue order, launched together by nccl:coalesced (host node 9)
        assert b_first.name.endswith(("send 1/2" if me == 0 else "recv 1/2"))
        assert b_second.name.endswith(("recv 2/2" if me == 0 else "send 2/2"))
        assert b_first.data_deps == b_second.data_deps == b_first.ctrl_deps == b_second.ctrl_deps == [9]
        # the first keeps the kernel's id, the second takes a fresh one after every other node's
        assert b_first.id < lone.id < b_second.id == max(n.id for n in every)
        assert len({n.id for n in every}) == len(every)
        sends = [n for n in (b_first, b_second) if n.type == T.COMM_SEND_NODE]
        recvs = [n for n in (b_first, b_second) if n.type == T.COMM_RECV_NODE]
        assert len(sends) == len(recvs) == 1
        assert (sends[0].attrs["comm_dst"], sends[0].attrs["comm_size"]) == (peer, MSG if me == 0 else SMALL)
        assert (recvs[0].attrs["comm_src"], recvs[0].attrs["comm_size"]) == (peer, SMALL if me == 0 else MSG)
        assert {n.attrs["comm_tag"] for n in p2p} == {0} and {n.attrs["pg_name"] for n in p2p} == {"0"}
        assert lone.type == (T.COMM_SEND_NODE if me == 0 else T.COMM_RECV_NODE) and lone.ctrl_deps == [11]
        assert lone.attrs["comm_size"] == LONE and lone.name.endswith("1/1")
    # every send meets its receive (sizes and tags agree across the ranks), so the run ends without a deadlock
    report = simulate(tmp_path / "b" / "w", configs["sys1"], configs["net2"], plugins=PLUGINS)
    assert report.warnings == []
    # the lone batch's receive is issued after 12 µs of CPU ops (the metadata node is not timed) and then takes
    # 16 MiB at 50 GiB/s (312.5 µs): far more than rank 1's 14 µs of CPU ops, so a lost or mis-sized receive shows
    transfer = 500 + LONE / (50 * 2 ** 30) * 1e9
    assert report.ranks[1].finish_ns >= 12_000 + transfer > 10 * report.ranks[1].cpu_ns
    # the host traces alone: --comms-from-host takes each record_param_comms as its own transfer, the same four
    s = convert_pytorch(host, tmp_path / "h" / "w", ranks=2, comms_from_host=True)
    assert (s["p2p"], s["host_comms"]) == (4, 4)
    assert [n.attrs["comm_size"] for n in _p2p_nodes(tmp_path / "h" / "w", 0)] == [32, MSG, SMALL, LONE]
    assert simulate(tmp_path / "h" / "w", configs["sys1"], configs["net2"], plugins=PLUGINS).warnings == []


@pytest.mark.parametrize("scope", ["batch_isend_irecv", "aten::detach"])
def test_batched_p2p_kernel_hung_on_the_last_member(tmp_path, scope):
    # as chakra_trace_link leaves it: the kernel on the batch's last record_param_comms, found as batched by the
    # batch_isend_irecv scope above it, or else by the nccl:coalesced op that follows it
    h, k = _batched_rank(1, hung_on_last=True)
    h["nodes"][5]["name"] = scope
    _, nodes, counts = _convert_one(tmp_path, (h, k), rank=1, name="hl")
    batch = [n for n in nodes if n.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE) and n.ctrl_deps == [8]]
    assert [(n.type, n.attrs["comm_size"]) for n in batch] == [(T.COMM_RECV_NODE, MSG), (T.COMM_SEND_NODE, SMALL)]
    assert counts["p2p"] == 4
    if scope.startswith("batch"):
        return
    # without nccl:coalesced after it the kernel is not known as a batch, and its launching ops name no send or
    # recv: an error, not a guess
    h["nodes"][8]["name"] = "aten::detach"
    with pytest.raises(ConfigError, match=r"is a SendRecv launched by \['record_param_comms', 'aten::detach'.*none of "
                                          r"them names send, recv"):
        _convert_one(tmp_path, (h, k), rank=1, name="hl2")


def test_batched_p2p_without_members_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"nbk.json: traceEvents\[\d+\] .*: batched SendRecv kernel node \d+ "
                                          r"\(nccl:coalesced \| ncclDevKernel_SendRecv.*launched by host node id 9 "
                                          r".*: no send/recv record_param_comms host op comes before "
                                          r"'nccl:coalesced' \(host node id 9\) on its thread since the previous "
                                          r"NCCL kernel"):
        _convert_one(tmp_path, _batched_rank(0, members=False), name="nb")
    # without the ordinary send before it, the search runs back to the thread root: still none
    with pytest.raises(ConfigError, match=r"no send/recv record_param_comms"):
        _convert_one(tmp_path, _batched_rank(0, single=False, members=False), name="nb2")
    _convert_one(tmp_path, _batched_rank(0, single=False), name="ok")
