"""convert-pytorch on real traces recorded by other projects (sources: data/pytorch_public/README.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.simulation import simulate

PLUGINS = ["network_analytical", "workload_generators"]
DATA = Path(__file__).parent / "data" / "pytorch_public"
DDP = DATA / "param_resnet_ddp_rank1_et.json.gz"  # rank 1 of a 2-GPU DistributedDataParallel run, schema 1.1.0
OLD = DATA / "hta_simple_add_et.json.gz"  # schema 1.0.1
OLD_KINETO = DATA / "hta_simple_add_kineto.json.gz"


def _raw(path):
    return json.loads(gzip.decompress(path.read_bytes()))


def _ddp_collectives():
    """{record_param_comms id: (comm_type, bytes, pg_name)} read from the raw trace's attributes."""
    out = {}
    for n in _raw(DDP)["nodes"]:
        if n["name"] != "record_param_comms":
            continue
        a = {x["name"]: x["value"] for x in n["attrs"]}
        if a["collective_name"] == "wait":  # work.wait(): no transfer
            continue
        kind = {"allreduce": T.ALL_REDUCE, "broadcast": T.BROADCAST}[a["collective_name"]]
        out[n["id"]] = (kind, a["in_msg_nelems"] * {"Float": 4, "Long": 8}[a["dtype"]], a["pg_name"])
    return out


def _comm_nodes(prefix, rank):
    return [n for n in read_et(f"{prefix}.{rank}.et").nodes if n.type == T.COMM_COLL_NODE]


def test_ddp_trace_drops_collectives_like_chakra_and_says_so(tmp_path, capsys):
    # gzip-compressed, as PyTorch users usually keep them
    assert main(["workload", "convert-pytorch", str(DDP), "--rank", "1", "-o", str(tmp_path / "d")]) == 0
    err = capsys.readouterr().err
    assert "its 21 record_param_comms collectives and send/recv are left out" in err and "--comms-from-host" in err
    assert _comm_nodes(tmp_path / "d", 1) == []


def test_ddp_trace_collectives_from_host_simulate(tmp_path, configs, capsys):
    expected = _ddp_collectives()
    assert len(expected) == 21
    prefix = tmp_path / "ddp" / "w"
    assert main(["workload", "convert-pytorch", str(DDP), "--ranks", "2", "--comms-from-host",
                 "-o", str(prefix)]) == 0
    assert "21 collectives and send/recv come from record_param_comms" in capsys.readouterr().out
    for rank in (0, 1):
        nodes = _comm_nodes(prefix, rank)
        got = {n.data_deps[0]: (n.attrs["comm_type"], n.attrs["comm_size"], n.attrs["pg_name"]) for n in nodes}
        assert got == expected  # one node per record_param_comms, launched by it, with its size and group
        assert all(n.ctrl_deps == n.data_deps for n in nodes)
    kinds = [k for k, _, _ in expected.values()]
    assert kinds.count(T.ALL_REDUCE) == 15 and kinds.count(T.BROADCAST) == 6
    report = simulate(prefix, configs["sys1"], configs["net2"], plugins=PLUGINS)
    assert report.warnings == []
    r0, r1 = report.ranks
    assert r0.finish_ns == r1.finish_ns and r0.compute_ns == 0
    # a ring all-reduce on 2 ranks sends every byte once per rank (half in the reduce-scatter, half in the
    # all-gather): the gradient all-reduces alone need their bytes at 50 GiB/s
    allreduce_bytes = sum(b for k, b, _ in expected.values() if k == T.ALL_REDUCE)
    assert allreduce_bytes > 100e6
    assert r0.comm_ns >= allreduce_bytes / (50 * 2 ** 30) * 1e9


def _new_layout(node):
    """A schema-1.0.1 node rewritten by hand in the 1.0.2+ layout."""
    attrs = [{"name": k, "type": t, "value": node[k]} for k, t in (
        ("rf_id", "uint64"), ("fw_parent", "uint64"), ("seq_id", "int64"), ("scope", "uint64"), ("tid", "uint64"),
        ("fw_tid", "uint64"), ("op_schema", "string"))]
    return {"id": node["id"], "name": node["name"], "ctrl_deps": node["parent"],
            "inputs": {"values": node["inputs"], "shapes": node["input_shapes"], "types": node["input_types"]},
            "outputs": {"values": node["outputs"], "shapes": node["output_shapes"], "types": node["output_types"]},
            "attrs": attrs}


def test_schema_1_0_1_converts_as_the_same_trace_in_the_new_layout(tmp_path):
    raw = _raw(OLD)
    assert raw["schema"] == "1.0.1" and "parent" in raw["nodes"][0] and "ctrl_deps" not in raw["nodes"][0]
    rewritten = dict(raw, nodes=[_new_layout(n) for n in raw["nodes"]])
    (tmp_path / "new.json").write_text(json.dumps(rewritten))
    assert main(["workload", "convert-pytorch", str(OLD), "--rank", "0", "-o", str(tmp_path / "old")]) == 0
    assert main(["workload", "convert-pytorch", str(tmp_path / "new.json"), "--rank", "0",
                 "-o", str(tmp_path / "new")]) == 0
    assert (tmp_path / "old.0.et").read_bytes() == (tmp_path / "new.0.et").read_bytes()
    nodes = {n.id: n for n in read_et(str(tmp_path / "old.0.et")).nodes}
    assert len(nodes) == len(raw["nodes"]) - 1  # all but the process root
    add = nodes[36]
    # its parent (id 35) comes later in the file (old traces list children first): still its ctrl dep (Chakra's
    # converter drops it, keeping only the parents it has already met); the data dependency chain follows the
    # call tree
    assert add.name == "aten::add" and add.ctrl_deps == [35] and add.data_deps == [35] and add.attrs["rf_id"] == 22
    assert add.inputs_shapes == "[[256, 256], [256, 256], []]" and add.attrs["is_cpu_op"] is True


def test_kineto_trace_without_record_function_ids_is_refused(tmp_path, capsys):
    assert main(["workload", "convert-pytorch", str(OLD), "--kineto", str(OLD_KINETO), "--rank", "0",
                 "-o", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert str(OLD_KINETO) in err and "no 'Record function id'" in err and "without --kineto" in err
    assert not (tmp_path / "k.0.et").exists()
