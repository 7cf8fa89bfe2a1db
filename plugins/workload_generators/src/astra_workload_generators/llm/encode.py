"""The LLM generator's direct node encoder (issue 37, its hot path): :func:`encode_node` writes the bytes the kernel's
``make_node(...)._raw`` has without building a protobuf message and parsing it back."""

from __future__ import annotations

import struct

from astra_sim.chakra.attrs import choose_kind
from astra_sim.chakra.errors import ChakraError
from astra_sim.chakra.writer import SMALL_VARINTS, encode_varint, make_node

#: tag bytes of the AttributeProto members encode_node writes itself (chakra-format.md section 2.3); any other
#: member (only reachable through attr_types) goes the make_node way
_VARINT_TAGS = {"int32_val": b"\x38", "int64_val": b"\x48", "uint64_val": b"\x68", "bool_val": b"\xd8\x01"}
_LEN_TAGS = {"string_val": b"\xea\x01", "bytes_val": b"\xfa\x01"}
_LIST_TAGS = {"int64_list": b"\x52", "uint64_list": b"\x72", "bool_list": b"\xe2\x01", "double_list": b"\x22",
              "string_list": b"\xf2\x01", "bytes_list": b"\x82\x02"}
_U64 = (1 << 64) - 1
_CACHE_MAX = 1 << 14  # entries per cache below (they are cleared when full: generators repeat few distinct values)
_ATTR_FRAMES = {}  # (name, value class, value) -> the attr entry's bytes (tag 0x52, length, AttributeProto)
_NAME_FIELDS = {}  # attribute name -> its AttributeProto name field (0a <len> name)
_HEADS = {}  # (node name, type) -> their fields
_INPUTS = {}  # (values, shapes, types) -> the inputs field


def _len_field(tag: bytes, data: bytes) -> bytes:
    return tag + encode_varint(len(data)) + data


def _cached(cache, key, value):
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


def _attr_value(kind, value):
    """The encoded oneof member ``kind`` = ``value`` (as :func:`fill_attr` stores it), or None for a member this
    encoder leaves to protobuf."""
    tag = _VARINT_TAGS.get(kind)
    if tag is not None:  # int32/int64 negatives: two's complement in 64 bits (10 bytes)
        return tag + encode_varint(int(value) & _U64)
    if kind == "double_val":
        return b"\x19" + struct.pack("<d", float(value))
    tag = _LEN_TAGS.get(kind)
    if tag is not None:
        return _len_field(tag, value.encode("utf-8") if kind == "string_val" else bytes(value))
    tag = _LIST_TAGS.get(kind)
    if tag is None:
        return None
    if kind in ("string_list", "bytes_list"):
        items = [v.encode("utf-8") if kind == "string_list" else bytes(v) for v in value]
        return _len_field(tag, b"".join(_len_field(b"\x0a", v) for v in items))
    if kind == "double_list":
        packed = b"".join(struct.pack("<d", float(v)) for v in value)
    elif kind == "bool_list":
        packed = bytes(1 if v else 0 for v in value)
    else:
        packed = b"".join(encode_varint(int(v) & _U64) for v in value)
    return _len_field(tag, _len_field(b"\x0a", packed) if packed else b"")


def _attr_frame(name, value):
    """``52 <len> AttributeProto`` of attribute ``name`` = ``value`` as make_node encodes it without attr_types /
    attr_docs. Raises ValueError/TypeError for what make_node must do (a member not written here, a value it
    refuses)."""
    name_field = _NAME_FIELDS.get(name)
    if name_field is None:
        if name.__class__ is not str:
            raise TypeError
        name_field = _cached(_NAME_FIELDS, name, _len_field(b"\x0a", name.encode("utf-8")) if name else b"")
    cls = value.__class__
    if cls is str:  # (choose_kind gives string_val for every str; labels are distinct, so they are not cached)
        data = value.encode("utf-8")
        body = name_field + b"\xea\x01" + encode_varint(len(data)) + data
        return b"\x52" + encode_varint(len(body)) + body
    key = (name, cls, value) if cls is int or cls is bool else None  # (floats: -0.0 == 0.0; lists: unhashable)
    if key is not None:
        frame = _ATTR_FRAMES.get(key)
        if frame is not None:
            return frame
    try:
        body = _attr_value(choose_kind(name, value, None, None), value)
    except (ChakraError, struct.error) as exc:
        raise ValueError from exc
    if body is None:
        raise ValueError
    frame = _len_field(b"\x52", name_field + body)
    return frame if key is None else _cached(_ATTR_FRAMES, key, frame)


def _varint_u64(n):
    """encode_varint of a uint64 field's value; ValueError for what protobuf would refuse."""
    if n.__class__ is int and 0 <= n < 0x200000:  # (ids, deps, durations: one to three bytes)
        if n < 0x4000:
            return SMALL_VARINTS[n]
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
    if n.__class__ is not int or not 0 <= n <= _U64:
        raise ValueError
    return encode_varint(n)


def _packed_u64(tag, deps):
    """A packed repeated uint64 field (the deps)."""
    if len(deps) == 1:
        data = _varint_u64(deps[0])
    else:
        data = b"".join([_varint_u64(d) for d in deps])
    return tag + encode_varint(len(data)) + data


def encode_node(id, name="", type=0, *, data_deps=(), ctrl_deps=(), duration_micros=0, attrs=None,
                inputs_values=None, inputs_shapes=None, inputs_types=None) -> bytes:
    """The serialized Node that ``make_node(...)._raw`` gives for the same arguments, written directly (fields in
    number order, proto3 defaults omitted, packed deps: chakra-format.md section 4) instead of through a protobuf
    message and a parse back. What it does not write itself (an unusual value type or member, a value make_node
    refuses) it hands to make_node, so the bytes and the errors are make_node's. Tested against make_node in
    plugins/workload_generators/tests/test_llm_encode.py."""
    try:
        parts = [b"\x08", _varint_u64(id)] if id else []
        if type.__class__ is not int:  # (before the cache: 4.0 and True would find 4's and 1's entry)
            raise TypeError
        head = _HEADS.get((name, type))
        if head is None:
            if not 0 <= type <= 0x7FFFFFFF:
                raise ValueError
            head = _cached(_HEADS, (name, type), (_len_field(b"\x12", name.encode("utf-8")) if name else b"")
                           + (b"\x18" + encode_varint(type) if type else b""))
        parts.append(head)
        if ctrl_deps:
            parts.append(_packed_u64(b"\x22", ctrl_deps))
        if data_deps:
            parts.append(_packed_u64(b"\x2a", data_deps))
        if duration_micros:
            parts.append(b"\x38")
            parts.append(_varint_u64(duration_micros))
        if inputs_values or inputs_shapes or inputs_types:
            key = (inputs_values, inputs_shapes, inputs_types)
            io = _INPUTS.get(key)
            if io is None:
                io = _cached(_INPUTS, key, _len_field(b"\x42", b"".join(
                    [_len_field(tag, s.encode("utf-8")) for tag, s in
                     ((b"\x0a", inputs_values), (b"\x12", inputs_shapes), (b"\x1a", inputs_types)) if s])))
            parts.append(io)
        if attrs:
            frames = _ATTR_FRAMES
            for attr_name, value in attrs.items():
                cls = value.__class__
                frame = frames.get((attr_name, cls, value)) if cls is int or cls is bool else None
                parts.append(frame if frame is not None else _attr_frame(attr_name, value))
        return b"".join(parts)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return make_node(id, name, type, data_deps=data_deps, ctrl_deps=ctrl_deps, duration_micros=duration_micros,
                         attrs=attrs, inputs_values=inputs_values, inputs_shapes=inputs_shapes,
                         inputs_types=inputs_types)._raw
