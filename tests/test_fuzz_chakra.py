"""Fuzzing the Chakra ET reader: hostile bytes give a parsed trace or a ChakraError naming file and offset.

Random bytes, truncations, bit flips, duplicated frames, unknown fields, huge varints, nested garbage
and gzip garbage, built on valid traces so the mutations reach deep into the protobuf decoder. The
reader must never raise anything else, never hang and never allocate more than the input justifies
(every length is checked against what remains before it is used). Inputs that once broke it are kept
in ``tests/fuzz_corpus/chakra`` and replayed here.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st

from astra_sim.chakra import ChakraError, encode_et, encode_varint, make_metadata, make_node, parse_et, types as T
from astra_sim.chakra.reader import _frames as reader_frames
from astra_sim.errors import AstraError
from astra_sim_testing.fuzzing import fuzz_settings

CORPUS = Path(__file__).parent / "fuzz_corpus" / "chakra"
PATH = "fuzz.0.et"


def seed_trace(n):
    """A valid trace with n nodes of every common kind and attribute type."""
    nodes = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            nodes.append(make_node(i + 1, f"gemm{i}", T.COMP_NODE, duration_micros=i, data_deps=[i] if i else [],
                                   attrs={"num_ops": 1 << 20, "tensor_size": 4096, "op_type": "aten::mm"}))
        elif kind == 1:
            nodes.append(make_node(i + 1, "ar", T.COMM_COLL_NODE, data_deps=[i],
                                   attrs={"comm_type": T.ALL_REDUCE, "comm_size": 1 << 20, "pg_name": "0",
                                          "involved_dim": [True, False]}))
        elif kind == 2:
            nodes.append(make_node(i + 1, "s", T.COMM_SEND_NODE, ctrl_deps=[i],
                                   attrs={"comm_dst": 1, "comm_size": 64, "comm_tag": i, "ratio": 0.5}))
        else:
            nodes.append(make_node(i + 1, "meta", T.METADATA_NODE, inputs_values='[[{"pg_name": "1"}]]'))
    return encode_et(make_metadata(attrs={"schema": "1.0.2"}), nodes)


SEEDS = [seed_trace(n) for n in (0, 1, 3, 8)]


def check(data, path=PATH):
    """The property: a parse, or a ChakraError naming the file and a byte offset."""
    try:
        et = parse_et(data, path)
    except ChakraError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: "), message
        assert exc.path == path and exc.offset is not None, message
        assert "byte offset" in message, message
        assert isinstance(exc, AstraError)
        return None
    # every frame takes at least its one-byte length prefix: nodes cannot outnumber bytes
    assert len(et.nodes) <= len(data) + 1
    for node in et.nodes:
        assert isinstance(node.id, int) and isinstance(node.attrs, dict)
    return et


# ------------------------------------------------------------------------------------ strategies
def _frames(data):
    """Split a valid ET into its frames (prefix + body), with the reader's own framing."""
    return [data[prefix:end] for prefix, _, end in reader_frames(data, "valid.et")]


@st.composite
def mutations(draw):
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "flip", "duplicate", "unknown", "varint", "nested", "insert",
                                   "delete", "zero_frame"]))
        if op == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        elif op == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "duplicate" and data:
            frames = _frames(bytes(data)) if _well_framed(data) else [bytes(data)]
            pick = draw(st.sampled_from(frames))
            data += pick * draw(st.integers(1, 3))
        elif op == "unknown":
            # a frame whose body carries fields the schema does not know (any wire type)
            field = draw(st.integers(16, 1 << 28))
            wire = draw(st.sampled_from([0, 1, 2, 5]))
            body = encode_varint(field << 3 | wire)
            body += {0: encode_varint(draw(st.integers(0, (1 << 64) - 1))), 1: bytes(8), 5: bytes(4),
                     2: encode_varint(3) + b"abc"}[wire]
            data += encode_varint(len(body)) + body
        elif op == "varint":
            # a length prefix or field value of 10+ continuation bytes (a varint that never ends)
            at = draw(st.integers(0, len(data)))
            data[at:at] = b"\xff" * draw(st.integers(9, 12)) + draw(st.sampled_from([b"\x01", b"\x7f", b""]))
        elif op == "nested":
            # deeply nested length-delimited garbage inside an attribute (field 8, AttributeProto)
            inner = draw(st.binary(max_size=16))
            for _ in range(draw(st.integers(1, 200))):
                inner = b"\x42" + encode_varint(len(inner)) + inner
            body = b"\x08\x01" + inner
            data += encode_varint(len(body)) + body
        elif op == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete" and data:
            at = draw(st.integers(0, len(data) - 1))
            del data[at:at + draw(st.integers(1, 8))]
        elif op == "zero_frame":
            data += b"\x00"
    if draw(st.booleans()) and draw(st.integers(0, 4)) == 0:
        data = bytearray(gzip.compress(bytes(data), mtime=0))
    return bytes(data)


def _well_framed(data):
    try:
        parse_et(bytes(data), "x")
        return True
    except ChakraError:
        return False


@st.composite
def gzip_garbage(draw):
    inner = draw(st.one_of(st.sampled_from(SEEDS), st.binary(max_size=64)))
    data = bytearray(gzip.compress(inner, mtime=0))
    op = draw(st.sampled_from(["truncate", "flip", "magic_only", "trailing", "members", "header"]))
    if op == "truncate":
        del data[draw(st.integers(2, len(data) - 1)):]
    elif op == "flip":
        i = draw(st.integers(2, len(data) - 1))
        data[i] ^= 1 << draw(st.integers(0, 7))
    elif op == "magic_only":
        data = bytearray(b"\x1f\x8b" + draw(st.binary(max_size=32)))
    elif op == "trailing":
        data += draw(st.binary(min_size=1, max_size=8))
    elif op == "members":
        data += gzip.compress(draw(st.binary(max_size=32)), mtime=0)
    else:
        data[3] = draw(st.integers(0, 255))  # flags: FEXTRA/FNAME/FCOMMENT with nothing behind them
    return bytes(data)


# ------------------------------------------------------------------------------------ properties
@fuzz_settings(400)
@given(st.binary(max_size=300))
@example(b"\xff" * 11)  # a length prefix that never ends
@example(b"\x1f\x8b")  # the gzip magic alone
@example(b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01")  # 2**63: far past the end
def test_random_bytes(data):
    check(data)


@fuzz_settings(500)
@given(mutations())
def test_mutated_valid_traces(data):
    check(data)


@fuzz_settings(200)
@given(gzip_garbage())
def test_gzip_garbage(data):
    check(data)


def test_gzip_bomb_stops_at_the_input_limit(monkeypatch):
    import astra_sim.safeio as safeio

    monkeypatch.setattr(safeio, "MAX_INPUT_BYTES", 1 << 20)
    bomb = gzip.compress(bytes(64 << 20), mtime=0)  # 64 MiB of zeros in ~64 KiB
    with pytest.raises(ChakraError, match=r"bomb.et: gzip-compressed Chakra ET file expands to more than 1,048,576"):
        parse_et(bomb, "bomb.et")


def test_file_larger_than_the_limit_is_refused_before_reading(tmp_path, monkeypatch):
    import astra_sim.safeio as safeio
    from astra_sim.chakra import read_et

    monkeypatch.setattr(safeio, "MAX_INPUT_BYTES", 1000)
    path = tmp_path / "big.0.et"
    path.write_bytes(seed_trace(200))
    with pytest.raises(ChakraError, match=r"big.0.et: Chakra ET file of [\d,]+ bytes, more than the 1,000 accepted"):
        read_et(path)


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*")) or ["(empty)"])
def test_corpus_regressions(name):
    if name == "(empty)":
        pytest.skip("no corpus entries")
    check((CORPUS / name).read_bytes(), name)
