"""Tests of the Chakra ET reader/writer (astra_sim.chakra) against the reference sample corpus."""

from __future__ import annotations

import ast
import gzip
import os
import random
import sys
import time
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]
try:
    import astra_sim.chakra  # noqa: F401
except ImportError:  # running without PYTHONPATH=core
    sys.path.insert(0, str(_REPO / "core"))

from astra_sim.chakra import (  # noqa: E402
    MISSING, ChakraError, EtNode, encode_et, et_def_pb2, get_bool, get_bool_list, get_int, get_str, make_metadata,
    make_node, parse_et, read_et, types, write_et,
)
from astra_sim.chakra.types import (  # noqa: E402
    ALL_REDUCE, BARRIER, COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE, INVALID_NODE, METADATA_NODE,
)


# ---------------------------------------------------------------------------------------------------------
# locating the shared reference corpus
# ---------------------------------------------------------------------------------------------------------

def _find_shared():
    env = os.environ.get("ASTRA_SHARED_DIR")
    candidates = [Path(env)] if env else []
    candidates.append(_REPO.parent / "shared")
    for c in candidates:
        if (c / "samples" / "chakra").is_dir():
            return c
    return None


SHARED = _find_shared()


def shared_dir() -> Path:
    if SHARED is None:
        pytest.skip("shared reference corpus not found (set ASTRA_SHARED_DIR or put it at <repo>/../shared)")
    return SHARED


def _samples():
    return SHARED / "samples" / "chakra" if SHARED else None


def _sample_files():
    """Every .et the reference tools read (all samples except edge-cases/)."""
    if SHARED is None:
        return []
    root = _samples()
    return sorted(p for p in root.rglob("*.et") if "edge-cases" not in p.parts)


def _parity_files():
    if SHARED is None:
        return []
    return sorted((SHARED / "parity" / "traces").glob("*/*.et"))


def _edge_files():
    if SHARED is None:
        return []
    return sorted((_samples() / "edge-cases").glob("*.et"))


def _ids(paths):
    root = SHARED
    return [str(p.relative_to(root)) for p in paths]


SAMPLES = _sample_files()
PARITY = _parity_files()
EDGES = _edge_files()
ALL_ET = SAMPLES + PARITY + EDGES

# Nodes of these files carry fields EtNode does not model (IOInfo shapes/types/outputs, doc strings).
HAS_EXTRAS = {"one_metadata_node_all_types.0.et", "one_metadata_node_all_types.1.et", "chakra.0.et",
              "host_trace_1.0.2-chakra.0.0.4.et"}


def _plain_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _index():
    """INDEX.tsv of the samples: relative path -> (version, attr names, node count, (min id, max id), histogram)."""
    out = {}
    for line in (_samples() / "INDEX.tsv").read_text().splitlines():
        if not line.strip():
            continue
        cols = line.split("\t")
        rel = cols[0]
        version = ast.literal_eval(cols[2].split("=", 1)[1])
        attrs = ast.literal_eval(cols[3].split("=", 1)[1])
        count = int(cols[4].split("=", 1)[1])
        lo, hi = (int(x) for x in cols[5].split("=", 1)[1].split(".."))
        hist = ast.literal_eval(cols[6])
        out[rel] = (version, attrs, count, (lo, hi), hist)
    return out


# ---------------------------------------------------------------------------------------------------------
# schema and constants
# ---------------------------------------------------------------------------------------------------------

def test_constants_match_schema_enums():
    for name, value in et_def_pb2.NodeType.items():
        assert getattr(types, name) == value
        assert types.NODE_TYPE_NAMES[value] == name
    for name, value in et_def_pb2.CollectiveCommType.items():
        assert getattr(types, name) == value
        assert types.COMM_TYPE_NAMES[value] == name
    assert (types.INVALID_NODE, types.METADATA_NODE, types.MEM_LOAD_NODE, types.MEM_STORE_NODE, types.COMP_NODE,
            types.COMM_SEND_NODE, types.COMM_RECV_NODE, types.COMM_COLL_NODE) == tuple(range(8))
    assert (types.ALL_REDUCE, types.REDUCE, types.ALL_GATHER, types.GATHER, types.SCATTER, types.BROADCAST,
            types.ALL_TO_ALL, types.REDUCE_SCATTER, types.REDUCE_SCATTER_BLOCK, types.BARRIER) == tuple(range(10))
    assert types.node_type_name(12) == "UNKNOWN_NODE_TYPE(12)"
    assert types.comm_type_name(6) == "ALL_TO_ALL"


def test_schema_field_numbers():
    node = et_def_pb2.Node.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in node.items()} == {
        "id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5, "start_time_micros": 6,
        "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10}
    attr = et_def_pb2.AttributeProto.DESCRIPTOR
    assert [f.name for f in attr.oneofs_by_name["value"].fields] == list(types.ATTR_KINDS)
    assert [f.number for f in attr.oneofs_by_name["value"].fields] == list(range(3, 33))
    gm = et_def_pb2.GlobalMetadata.DESCRIPTOR.fields_by_name
    assert (gm["version"].number, gm["attr"].number) == (1, 2)


def test_generated_module_names_regeneration_command():
    text = Path(et_def_pb2.__file__).read_text()
    assert "scripts/gen_chakra_proto.sh" in text.split('"""', 1)[0]


# ---------------------------------------------------------------------------------------------------------
# reading the reference corpus
# ---------------------------------------------------------------------------------------------------------

def test_corpus_present():
    shared_dir()
    assert len(SAMPLES) >= 70 and len(PARITY) >= 100 and len(EDGES) == 13


@pytest.mark.parametrize("path", SAMPLES, ids=_ids(SAMPLES))
def test_read_sample_matches_index(path):
    index = _index()
    rel = str(path.relative_to(_samples()))
    et = read_et(path)
    version, attr_names, count, (lo, hi), hist = index[rel]
    assert et.path == str(path)
    assert et.version == version
    assert [a.name for a in et.metadata.attr] == attr_names
    assert list(et.metadata_attrs) == attr_names
    assert len(et.nodes) == count
    assert min(n.id for n in et.nodes) == lo and max(n.id for n in et.nodes) == hi
    got = {}
    for n in et.nodes:
        got[types.node_type_name(n.type)] = got.get(types.node_type_name(n.type), 0) + 1
    assert got == hist
    for n in et.nodes:
        assert isinstance(n, EtNode)
        assert isinstance(n.id, int) and isinstance(n.name, str) and isinstance(n.type, int)
        assert all(isinstance(d, int) for d in n.data_deps) and all(isinstance(d, int) for d in n.ctrl_deps)
        assert isinstance(n.duration_micros, int) and isinstance(n.inputs_values, str)


@pytest.mark.parametrize("path", PARITY, ids=_ids(PARITY))
def test_read_parity_trace(path):
    et = read_et(path)
    assert et.nodes
    for n in et.nodes:
        if n.type == COMM_COLL_NODE:
            assert get_int(n, "comm_size") > 0
            assert get_int(n, "comm_type") in types.COMM_TYPE_NAMES
            assert get_bool(n, "is_cpu_op", False) is False


def test_generator_all_reduce_fields():
    et = read_et(shared_dir() / "samples/chakra/generator/ALL_REDUCE.0.et")
    assert et.version == "1.0.0"
    (n,) = et.nodes
    assert (n.id, n.name, n.type) == (16, "ALL_REDUCE", COMM_COLL_NODE)
    assert n.attrs == {"is_cpu_op": False, "comm_type": 0, "comm_size": 65536}
    assert n.attr_kind("comm_size") == "int64_val" and n.attr_kind("is_cpu_op") == "bool_val"
    assert n.ctrl_deps == [] and n.data_deps == [] and n.duration_micros == 0 and n.inputs_values == ""


def test_all_attribute_types_to_python_values():
    et = read_et(shared_dir() / "samples/chakra/generator/one_metadata_node_all_types.0.et")
    (n,) = et.nodes
    a = n.attrs
    assert n.type == METADATA_NODE
    assert a["double"] == 1.2345 and isinstance(a["double"], float)
    assert a["float"] == pytest.approx(1.2345, rel=1e-6)
    for k in ("int32", "uint32", "fixed32"):
        assert a[k] == 12345 and type(a[k]) is int
    for k in ("sint32", "sfixed32"):
        assert a[k] == -12345
    for k in ("int64", "uint64", "fixed64"):
        assert a[k] == 9876543210
    for k in ("sint64", "sfixed64"):
        assert a[k] == -9876543210
    assert a["bool"] is True
    assert a["bool_list"] == [True, False] * 5
    assert a["string"] == "12345"
    assert a["string_list"] == [str(12345 + i) for i in range(10)]
    assert a["bytes"] == b"12345"
    assert a["bytes_list"][0] == b"12345" and len(a["bytes_list"]) == 10
    assert a["int64_list"] == [9876543210, 1234567890]
    assert a["sint64_list"] == [9876543210, -1234567890]
    assert a["sfixed32_list"] == [12345, -23456]
    assert a["double_list"] == [1.2345, 2.3456]
    assert all(isinstance(v, list) for k, v in a.items() if k.endswith("_list"))


def test_pytorch_trace_metadata_node_and_io():
    et = read_et(shared_dir() / "samples/chakra/pytorch/host_trace_1.0.2-chakra.0.0.4.et")
    gm = et.metadata_attrs
    assert gm["schema"] == "1.0.2-chakra.0.0.4" and isinstance(gm["pid"], int)
    meta = [n for n in et.nodes if n.type == METADATA_NODE]
    assert len(meta) == 1 and meta[0].name == "## process_group:init ##"
    assert meta[0].inputs_values.startswith("['[{\"pg_name\": \"0\"")
    assert meta[0].ctrl_deps == [2] and meta[0].data_deps == [2]
    assert et.nodes[0].inputs_values == "[]"
    assert get_bool(et.nodes[0], "is_cpu_op") is True


def test_legacy_trace_involved_dim_and_dangling_ctrl():
    et = read_et(shared_dir() / "samples/chakra/chakra-feeder-test/chakra.0.et")
    assert len(et.nodes) == 3664
    with_dim = [n for n in et.nodes if "involved_dim" in n.attrs]
    assert with_dim
    assert get_bool_list(with_dim[0], "involved_dim") == [True]
    ids = {n.id for n in et.nodes}
    # ctrl_deps that point at nodes absent from the file are kept as they are (workload layer's job)
    assert any(d not in ids for n in et.nodes for d in n.ctrl_deps)


# ---------------------------------------------------------------------------------------------------------
# writing: round trips
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL_ET, ids=_ids(ALL_ET))
def test_roundtrip_bytes(path, tmp_path):
    et = read_et(path)
    out = tmp_path / "out.et"
    write_et(out, et.metadata, et.nodes)
    assert out.read_bytes() == _plain_bytes(path)
    # re-encoding every node from its fields (not its raw bytes) gives the same bytes
    assert encode_et(et.metadata, et.nodes, reencode=True) == _plain_bytes(path)


@pytest.mark.parametrize("path", ALL_ET, ids=_ids(ALL_ET))
def test_roundtrip_without_raw_bytes(path):
    et = read_et(path, keep_raw=False)
    assert all(n._raw is None for n in et.nodes)
    data = encode_et(et.metadata, et.nodes)
    if path.name in HAS_EXTRAS:
        # fields EtNode does not model are dropped; what EtNode models survives
        again = parse_et(data, keep_raw=False)
        assert again.nodes == et.nodes
    else:
        assert data == _plain_bytes(path)


@pytest.mark.parametrize("path", [p for p in SAMPLES + PARITY if p.name not in HAS_EXTRAS],
                         ids=_ids([p for p in SAMPLES + PARITY if p.name not in HAS_EXTRAS]))
def test_builder_conventions_reproduce_reference_writers(path):
    """make_node with plain Python values (no attr_types) encodes exactly as Chakra's generator, text converter,
    ASTRA-sim's scripts and the MSCCL converter did."""
    et = read_et(path)
    nodes = [make_node(n.id, n.name, n.type, data_deps=n.data_deps, ctrl_deps=n.ctrl_deps,
                       duration_micros=n.duration_micros, attrs=dict(n.attrs), inputs_values=n.inputs_values)
             for n in et.nodes]
    assert encode_et(et.metadata, nodes) == path.read_bytes()


def test_builder_generator_all_reduce(tmp_path):
    ref = shared_dir() / "samples/chakra/generator/ALL_REDUCE.0.et"
    node = make_node(16, "ALL_REDUCE", COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": ALL_REDUCE, "comm_size": 65536})
    out = tmp_path / "ALL_REDUCE.0.et"
    n = write_et(out, make_metadata("1.0.0"), [node])
    assert out.read_bytes() == ref.read_bytes() and n == 73


def test_builder_generator_small_traces():
    gen = shared_dir() / "samples/chakra/generator"
    gm = make_metadata("1.0.0")
    cases = {
        "BARRIER.1.et": [make_node(27, "BARRIER", "COMM_COLL_NODE",
                                   attrs={"is_cpu_op": False, "comm_type": BARRIER, "comm_size": 0})],
        "one_comm_send_node.0.et": [make_node(28, "COMM_SEND_NODE", COMM_SEND_NODE,
                                              attrs={"is_cpu_op": False, "tensor_size": 1024})],
        "one_comm_recv_node.1.et": [make_node(31, "COMM_RECV_NODE", COMM_RECV_NODE,
                                              attrs={"is_cpu_op": False, "tensor_size": 1024})],
        "one_comp_node.0.et": [make_node(6, "COMP_NODE", COMP_NODE, duration_micros=5,
                                         attrs={"is_cpu_op": False})],
        "two_comp_nodes_dependent.0.et": [
            make_node(12, "COMP_NODE", COMP_NODE, duration_micros=5, attrs={"is_cpu_op": False}),
            make_node(13, "COMP_NODE", COMP_NODE, duration_micros=5, data_deps=[12], attrs={"is_cpu_op": False}),
        ],
    }
    for name, nodes in cases.items():
        assert encode_et(gm, nodes) == (gen / name).read_bytes(), name


def test_builder_all_attribute_types_with_attr_types_and_docs():
    ref = shared_dir() / "samples/chakra/generator/one_metadata_node_all_types.0.et"
    attrs, attr_types, docs = {}, {}, {}
    scalars = {"double": 1.2345, "float": 1.2345, "int32": 12345, "int64": 9876543210, "uint32": 12345,
               "uint64": 9876543210, "sint32": -12345, "sint64": -9876543210, "fixed32": 12345,
               "fixed64": 9876543210, "sfixed32": -12345, "sfixed64": -9876543210, "bool": True,
               "string": "12345", "bytes": b"12345"}
    lists = {"double": [1.2345, 2.3456], "float": [1.2345, 2.3456], "int32": [12345, 23456],
             "int64": [9876543210, 1234567890], "uint32": [12345, 23456], "uint64": [9876543210, 1234567890],
             "sint32": [12345, -23456], "sint64": [9876543210, -1234567890], "fixed32": [12345, 23456],
             "fixed64": [9876543210, 1234567890], "sfixed32": [12345, -23456],
             "sfixed64": [9876543210, -1234567890], "bool": [True, False] * 5,
             "string": [str(12345 + i) for i in range(10)], "bytes": [str(12345 + i).encode() for i in range(10)]}
    with_doc = {"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "string"}
    for base in scalars:
        attrs[base] = scalars[base]
        attr_types[base] = base + "_val"
        if base in with_doc:
            docs[base] = base
        attrs[base + "_list"] = lists[base]
        attr_types[base + "_list"] = base + "_list"
    node = make_node(0, "METADATA_NODE", METADATA_NODE, attrs=attrs, attr_types=attr_types, attr_docs=docs)
    assert encode_et(make_metadata("1.0.0"), [node]) == ref.read_bytes()


def test_builder_text_converter_metadata():
    ref = shared_dir() / "samples/chakra/text/microAllReduce.0.et"
    et = read_et(ref)
    gm = make_metadata("", attrs={"schema": "1.0.2-chakra.1.0.0", "input_file": et.metadata_attrs["input_file"]})
    node = make_node(0, "COMM_COLL_NODE_conv1_ALLREDUCE", COMM_COLL_NODE,
                     attrs={"comm_type": ALL_REDUCE, "comm_size": et.nodes[0].attrs["comm_size"]})
    assert encode_et(gm, [node]) == ref.read_bytes()


def test_modified_node_is_reencoded_and_extras_kept(tmp_path):
    src = shared_dir() / "samples/chakra/pytorch/host_trace_1.0.2-chakra.0.0.4.et"
    et = read_et(src)
    victim = et.nodes[5]
    victim.duration_micros = 1234
    victim.data_deps.append(2)
    victim.attrs["tid"] = 99            # int64_val stays int64_val
    victim.set_attr("extra", 7, "int32_val")
    out = tmp_path / "mod.et"
    write_et(out, et.metadata, et.nodes)
    back = read_et(out)
    assert len(back.nodes) == len(et.nodes)
    b = back.nodes[5]
    assert b.duration_micros == 1234 and b.data_deps[-1] == 2 and b.attrs["tid"] == 99
    assert b.attr_kind("tid") == "int64_val" and b.attr_kind("extra") == "int32_val"
    # fields EtNode does not model (outputs, IOInfo shapes) survive the change
    orig = et_def_pb2.Node.FromString(et.nodes[5]._raw)
    new = et_def_pb2.Node.FromString(b._raw)
    assert new.outputs == orig.outputs and new.inputs.shapes == orig.inputs.shapes
    # every other node is still byte-identical
    for x, y in zip(read_et(src).nodes, back.nodes):
        if x.id != victim.id:
            assert x._raw == y._raw


def test_set_attr_keeps_kind_and_rejects_misfits():
    node = make_node(1, "send", COMM_SEND_NODE, attrs={"comm_dst": 3, "comm_tag": 7, "comm_size": 10})
    assert node.attr_kind("comm_dst") == "int32_val"
    node.set_attr("comm_dst", 5)
    assert node.attr_kind("comm_dst") == "int32_val"
    data = encode_et(None, [node])
    back = parse_et(data)
    assert back.version == types.DEFAULT_VERSION
    assert back.nodes[0].attrs == {"comm_dst": 5, "comm_tag": 7, "comm_size": 10}
    assert back.nodes[0].attr_kind("comm_dst") == "int32_val"
    with pytest.raises(ChakraError, match="does not fit int32_val"):
        node.set_attr("comm_dst", 1 << 40, "int32_val")
    node.set_attr("comm_dst", 1 << 40)  # no longer fits int32: falls back to int64
    assert node.attr_kind("comm_dst") == "int64_val"


def test_builder_errors_name_node_and_attribute():
    with pytest.raises(ChakraError, match=r"node 3 \('x'\): attribute 'dims': empty list"):
        make_node(3, "x", COMP_NODE, attrs={"dims": []})
    assert make_node(3, "x", COMP_NODE, attrs={"dims": []}, attr_types={"dims": "int32_list"}).attrs == {"dims": []}
    assert make_node(3, "x", COMP_NODE, attrs={"involved_dim": []}).attr_kind("involved_dim") == "bool_list"
    with pytest.raises(ChakraError, match=r"node 3 \('x'\): attribute 'obj'"):
        make_node(3, "x", COMP_NODE, attrs={"obj": object()})
    with pytest.raises(ChakraError, match="does not fit uint32_val"):
        make_node(3, "x", COMP_NODE, attrs={"u": -1}, attr_types={"u": "uint32_val"})
    with pytest.raises(ChakraError, match="unknown attribute type"):
        make_node(3, "x", COMP_NODE, attrs={"u": 1}, attr_types={"u": "int128_val"})
    with pytest.raises(ChakraError, match="node 4"):
        make_node(4, "x", COMP_NODE, data_deps=[-1])
    with pytest.raises(ChakraError, match="unknown node type"):
        make_node(4, "x", "COMPUTE")
    with pytest.raises(ChakraError, match="cannot write"):
        encode_et(None, ["not a node"])
    assert make_node(5, "big", COMP_NODE, attrs={"n": 1 << 63}).attr_kind("n") == "uint64_val"


def test_write_plain_etnodes_and_protobuf_nodes():
    direct = EtNode(5, "COMM_SEND_NODE", COMM_SEND_NODE, attrs={"comm_size": 8, "comm_dst": 1, "comm_tag": 0})
    msg = et_def_pb2.Node(id=6, name="COMP_NODE", type=COMP_NODE, duration_micros=3, data_deps=[5])
    data = encode_et(make_metadata("1.0.0"), [direct, msg])
    back = parse_et(bytearray(data), "mem.et")
    assert back.nodes[0] == direct
    assert [back.nodes[0].attr_kind(k) for k in ("comm_size", "comm_dst", "comm_tag")] == [
        "int64_val", "int32_val", "int32_val"]
    assert (back.nodes[1].id, back.nodes[1].data_deps, back.nodes[1].duration_micros) == (6, [5], 3)
    assert back.nodes[1].to_proto() == msg


def test_builder_default_python_types():
    n = make_node(1, "n", COMP_NODE, attrs={
        "i": 5, "b": True, "f": 0.5, "s": "x", "y": b"\x00", "bl": [True], "il": [1, 2], "fl": [1.5, 2],
        "sl": ["a"], "comm_src": 2, "tensor_size": 10, "num_ops": 3, "pg_name": "0"})
    assert dict(n._kinds) == {
        "i": "int64_val", "b": "bool_val", "f": "double_val", "s": "string_val", "y": "bytes_val",
        "bl": "bool_list", "il": "int64_list", "fl": "double_list", "sl": "string_list", "comm_src": "int32_val",
        "tensor_size": "uint64_val", "num_ops": "int64_val", "pg_name": "string_val"}
    # is_cpu_op given as an int (STAGE style) is not forced into bool_val
    assert make_node(1, "n", COMP_NODE, attrs={"is_cpu_op": 1}).attr_kind("is_cpu_op") == "int64_val"


# ---------------------------------------------------------------------------------------------------------
# edge cases (samples/chakra/edge-cases): the reader reads them as they are; graph problems are left to the
# workload layer, but everything needed to detect them is exposed.
# ---------------------------------------------------------------------------------------------------------

def _edge(name):
    return read_et(shared_dir() / "samples/chakra/edge-cases" / name)


def test_edge_empty_file():
    et = _edge("empty_file.et")
    assert et.metadata is None and et.nodes == [] and et.version == ""
    assert encode_et(et.metadata, et.nodes) == b""


def test_edge_only_gm():
    et = _edge("only_gm.et")
    assert et.version == "1.0.0" and et.nodes == []


def test_edge_dangling_deps_are_kept():
    et = _edge("dangling_data.et")
    ids = {n.id for n in et.nodes}
    assert [n.data_deps for n in et.nodes] == [[], [99]] and 99 not in ids
    et = _edge("dangling_ctrl.et")
    assert [n.ctrl_deps for n in et.nodes] == [[], [99]] and [n.data_deps for n in et.nodes] == [[], []]


def test_edge_ctrl_only():
    et = _edge("ctrl_only.et")
    assert [(n.id, n.ctrl_deps, n.data_deps) for n in et.nodes] == [(1, [], []), (2, [1], [])]


def test_edge_forward_ref_keeps_file_order():
    et = _edge("forward_ref.et")
    assert [(n.id, n.data_deps) for n in et.nodes] == [(2, [1]), (1, [])]


def test_edge_dup_id_both_kept_in_order():
    et = _edge("dup_id.et")
    assert [(n.id, n.duration_micros) for n in et.nodes] == [(1, 5), (1, 7), (2, 5)]


def test_edge_cycle_read_as_is():
    et = _edge("cycle.et")
    assert [(n.id, n.data_deps) for n in et.nodes] == [(1, [2]), (2, [1])]


def test_edge_comm_size_double():
    et = _edge("comm_size_double.et")
    (n,) = et.nodes
    assert n.attrs["comm_size"] == 1024.0 and n.attr_kind("comm_size") == "double_val"
    with pytest.raises(ChakraError) as exc:
        get_int(n, "comm_size")
    msg = str(exc.value)
    assert "comm_size_double.et: node 1 ('ar'): attribute 'comm_size' is double_val 1024.0" in msg
    assert "expected an integer" in msg
    assert get_int(n, "comm_type") == ALL_REDUCE


def test_edge_mixed_int_types_read_leniently():
    (n,) = _edge("mixed_int_types.et").nodes
    assert [n.attr_kind(k) for k in ("is_cpu_op", "comm_type", "comm_size")] == ["int32_val", "uint32_val",
                                                                                  "uint64_val"]
    assert get_bool(n, "is_cpu_op") is False
    assert get_int(n, "comm_type") == types.ALL_GATHER
    assert get_int(n, "comm_size") == 4096


def test_edge_missing_comm_size():
    (n,) = _edge("missing_comm_size.et").nodes
    with pytest.raises(ChakraError) as exc:
        n.get_int("comm_size")
    assert str(exc.value).endswith("missing_comm_size.et: node 1 ('ar'): attribute 'comm_size' missing "
                                   "(expected an integer)")
    assert exc.value.node_id == 1 and exc.value.node_name == "ar"
    assert get_int(n, "comm_size", 0) == 0
    assert get_int(n, "comm_size", None) is None


def test_edge_zero_id_node_read_past():
    et = _edge("zero_id_node.et")
    assert [(n.id, n.name, n.type, n.data_deps) for n in et.nodes] == [(0, "", INVALID_NODE, []), (1, "c1", COMP_NODE,
                                                                                                  [0])]


def test_edge_gzipped_read_transparently(tmp_path):
    et = _edge("gzipped.et")
    assert et.gzipped
    assert [(n.id, n.data_deps) for n in et.nodes] == [(1, []), (2, [1])]
    out = tmp_path / "x.et.gz"
    write_et(out, et.metadata, et.nodes)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    back = read_et(out)
    assert back.gzipped and back.nodes == et.nodes
    # written twice -> same bytes (mtime 0)
    out2 = tmp_path / "y.et.gz"
    write_et(out2, et.metadata, et.nodes)
    assert out2.read_bytes() == out.read_bytes()
    plain = tmp_path / "plain.et"
    write_et(plain, et.metadata, et.nodes)
    assert plain.read_bytes() == gzip.decompress((shared_dir() / "samples/chakra/edge-cases/gzipped.et").read_bytes())


@pytest.mark.parametrize("path", EDGES, ids=_ids(EDGES))
def test_every_edge_case_reads_or_raises_chakra_error(path):
    try:
        et = read_et(path)
    except ChakraError as exc:  # pragma: no cover - none of the current edge cases raises
        assert path.name in str(exc)
    else:
        assert et.path == str(path)


# ---------------------------------------------------------------------------------------------------------
# damaged input
# ---------------------------------------------------------------------------------------------------------

def test_truncated_file_names_file_and_offset(tmp_path):
    src = (shared_dir() / "samples/chakra/text/DLRM_HybridParallel.0.et").read_bytes()
    cut = tmp_path / "t.3.et"
    cut.write_bytes(src[:-10])
    with pytest.raises(ChakraError) as exc:
        read_et(cut)
    msg = str(exc.value)
    assert msg.startswith(str(cut) + ": truncated file")
    assert "byte offset" in msg and "message #32" in msg
    assert exc.value.offset is not None and exc.value.path == str(cut)


def test_every_prefix_reads_or_raises_chakra_error():
    src = (shared_dir() / "samples/chakra/generator/one_metadata_node_all_types.0.et").read_bytes()
    src += (shared_dir() / "samples/chakra/text/MLP_ModelParallel.0.et").read_bytes()[1:]  # not a valid GM: junk
    ok = 0
    for i in range(len(src)):
        try:
            parse_et(src[:i], "p.et")
            ok += 1
        except ChakraError as exc:
            assert str(exc).startswith("p.et: ")
    assert ok >= 2


def test_cut_length_prefix():
    data = encode_et(make_metadata(), [make_node(1, "n" * 200, COMP_NODE)])
    assert data[8] >= 0x80  # two-byte length prefix at offset 8
    with pytest.raises(ChakraError, match=r"c.et: truncated file: the length prefix of message #1 at byte offset 8"):
        parse_et(data[:9], "c.et")


def test_truncated_and_corrupt_gzip(tmp_path):
    data = (shared_dir() / "samples/chakra/edge-cases/gzipped.et").read_bytes()
    p = tmp_path / "g.et"
    p.write_bytes(data[:30])
    with pytest.raises(ChakraError, match="g.et: byte offset 30: gzip-compressed Chakra ET file is truncated") as info:
        read_et(p)
    assert info.value.offset == 30
    p.write_bytes(data[:12] + bytes(20) + data[32:])
    with pytest.raises(ChakraError, match="g.et: gzip member at byte offset 0: gzip-compressed Chakra ET file is "
                                          "corrupt"):
        read_et(p)


def test_garbage_never_raises_raw_protobuf_errors():
    rng = random.Random(1234)
    for i in range(3000):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 120)))
        try:
            et = parse_et(data, "junk.et")
        except ChakraError as exc:
            assert str(exc).startswith("junk.et: ")
        else:
            encode_et(et.metadata, et.nodes, reencode=True)


@pytest.mark.parametrize("data", [b"\xff" * 16, b"\x05\x0a\x03\xff\xfe\xfd", b"\x02\x0f\x0f", b"hello world",
                                  b"\x07\x0a\x051.0.0\x04\x08\x01\x12\x05"],
                         ids=["long-varint", "bad-utf8", "bad-wiretype", "text", "bad-node"])
def test_garbage_examples(data, tmp_path):
    p = tmp_path / "junk.et"
    p.write_bytes(data)
    with pytest.raises(ChakraError) as exc:
        read_et(p)
    assert str(exc.value).startswith(str(p) + ": ")


def test_chakra_error_is_a_user_error():
    assert issubclass(ChakraError, Exception)
    try:
        from astra_sim.errors import AstraError
    except ImportError:  # pragma: no cover
        return
    assert issubclass(ChakraError, AstraError)


def test_missing_file():
    with pytest.raises(ChakraError, match=r"nope\.et: cannot read Chakra ET file"):
        read_et("/nonexistent/dir/nope.et")


def test_a_name_with_a_nul_byte_is_a_chakra_error_not_a_bare_value_error():
    from astra_sim.chakra.reader import read_metadata

    for read in (read_et, read_metadata):
        with pytest.raises(ChakraError, match="cannot read Chakra ET file: embedded null byte"):
            read("trace\x00.et")


# ---------------------------------------------------------------------------------------------------------
# getters
# ---------------------------------------------------------------------------------------------------------

def test_getters():
    n = make_node(17, "allreduce", COMM_COLL_NODE,
                  attrs={"comm_size": 10, "is_cpu_op": True, "pg_name": "3", "involved_dim": [True, False],
                         "f": 2.5, "u": 7},
                  attr_types={"u": "uint32_val"})
    assert get_int(n, "comm_size") == 10 and get_int(n, "u") == 7 and get_int(n, "is_cpu_op") == 1
    assert get_bool(n, "is_cpu_op") is True and get_bool(n, "u") is True
    assert get_str(n, "pg_name") == "3" and n.get_str("nope", "") == ""
    assert get_bool_list(n, "involved_dim") == [True, False]
    assert n.get_float("f") == 2.5 and n.get_float("comm_size") == 10.0
    assert n.get_str_list("absent", None) is None
    with pytest.raises(ChakraError, match="attribute 'absent' missing"):
        n.get_str_list("absent", MISSING)
    with pytest.raises(ChakraError, match=r"<memory>: node 17 \('allreduce'\): attribute 'pg_name' is string_val"):
        get_int(n, "pg_name")
    with pytest.raises(ChakraError, match="attribute 'involved_dim' is bool_list"):
        get_bool(n, "involved_dim")
    with pytest.raises(ChakraError, match="attribute 'comm_size' is int64_val 10, expected a bool_list"):
        get_bool_list(n, "comm_size")
    with pytest.raises(ChakraError, match="attribute 'comm_size' is int64_val 10, expected a string"):
        get_str(n, "comm_size")
    with pytest.raises(ChakraError, match="attribute 'x' missing"):
        get_bool(n, "x")


def test_error_message_example_shape(tmp_path):
    p = tmp_path / "t.3.et"
    write_et(p, make_metadata(), [make_node(17, "allreduce", COMM_COLL_NODE, attrs={"comm_type": 0})])
    (n,) = read_et(p).nodes
    with pytest.raises(ChakraError) as exc:
        get_int(n, "comm_size")
    assert str(exc.value) == f"{p}: node 17 ('allreduce'): attribute 'comm_size' missing (expected an integer)"


# ---------------------------------------------------------------------------------------------------------
# speed
# ---------------------------------------------------------------------------------------------------------

def _big_trace(n_nodes: int):
    nodes = []
    for i in range(n_nodes):
        if i % 3 == 0:
            node = make_node(i, f"COMM_COLL_NODE_{i}_ALLREDUCE", COMM_COLL_NODE, data_deps=[i - 1] if i else [],
                             attrs={"is_cpu_op": False, "comm_type": ALL_REDUCE, "comm_size": 1 << 20,
                                    "involved_dim": [True] * 4})
        else:
            node = make_node(i, f"COMP_NODE_{i}_FWD", COMP_NODE, data_deps=[i - 1],
                             ctrl_deps=[i - 2] if i > 1 else [], duration_micros=i % 97 + 1,
                             attrs={"is_cpu_op": False})
        nodes.append(node)
    return encode_et(make_metadata("0.0.4"), nodes)


def test_read_speed_10k_nodes(tmp_path):
    p = tmp_path / "big.0.et"
    p.write_bytes(_big_trace(10_000))
    read_et(p)  # warm up
    best = min(_timed(lambda: read_et(p)) for _ in range(3))
    print(f"read_et of a 10k-node trace: {best * 1000:.1f} ms")
    assert len(read_et(p).nodes) == 10_000
    assert best < 1.0


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_read_shares_repeated_strings_across_nodes():
    # Millions of nodes repeat the same names, shapes, types and attribute keys: the
    # reader keeps one object per distinct string of a file (memory), values unchanged.
    nodes = [make_node(i, "aten::mm", COMP_NODE, inputs_shapes="[[8, 16], [16, 4]]",
                       inputs_types="['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']",
                       attrs={"is_cpu_op": False, "num_ops": 1024 + i, "pg_name": "7"}) for i in range(3)]
    a, b, c = parse_et(encode_et(make_metadata(), nodes), keep_raw=False).nodes
    assert a.name == "aten::mm" and a.name is b.name is c.name
    assert a.inputs_shapes is b.inputs_shapes and a.inputs_types is c.inputs_types
    assert [k for k in a.attrs] == ["is_cpu_op", "num_ops", "pg_name"]
    assert all(ka is kb for ka, kb in zip(a.attrs, b.attrs))
    assert a.attrs["pg_name"] is b.attrs["pg_name"] == "7"
    assert [n.attrs["num_ops"] for n in (a, b, c)] == [1024, 1025, 1026]


def test_read_keeps_protobuf_merge_rules():
    # What protobuf does with the wire, which any faster decoding must keep: a singular `inputs` given twice is
    # merged field by field, a repeated attribute name keeps its first value (FeederV3), every node owns its list
    # values, a corrupt attribute is a corrupt node.
    from astra_sim.chakra import encode_varint, parse_node

    m = et_def_pb2.Node(id=3, name="n", type=COMP_NODE)
    m.inputs.values, m.inputs.shapes = "v1", "s1"
    m.attr.add(name="x", int64_val=5)
    m.attr.add(name="l").int64_list.values.extend([1, 2])
    m.attr.add(name="x", int64_val=7)
    second = et_def_pb2.Node()
    second.inputs.values, second.inputs.types = "v2", "t2"
    raw = m.SerializeToString() + second.SerializeToString()
    frame = encode_varint(len(raw)) + raw
    a, b = parse_et(encode_et(make_metadata(), []) + frame + frame, keep_raw=False).nodes
    assert (a.inputs_values, a.inputs_shapes, a.inputs_types) == ("v2", "s1", "t2")
    assert a.attrs == {"x": 5, "l": [1, 2]} and a._kinds == (("x", "int64_val"), ("l", "int64_list"))
    assert a.attrs["l"] is not b.attrs["l"]
    with pytest.raises(ChakraError, match="not a valid Node"):
        parse_node(et_def_pb2.Node(id=1).SerializeToString() + b"\x52\x03\xff\xff\xff")
