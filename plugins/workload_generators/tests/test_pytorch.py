"""convert-pytorch: PyTorch host ET (+ Kineto) to Chakra, against Chakra's own converter output and a synthetic pair."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate

from astra_workload_generators.compare import compare_nodes
from astra_workload_generators.pytorch import convert_pytorch, convert_pytorch_trace

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
    assert counts == {"cpu": 8, "gpu_comp": 3, "coll": 1, "p2p": 0, "metadata": 1, "nodes": 13}
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
    with pytest.raises(ConfigError, match="b4.json: the PyTorch host execution trace is not valid JSON"):
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
