"""The LLM generator's nodes in either form (issue 37, its hot path): :func:`encode_node` writes the bytes the kernel's
``make_node(...)._raw`` has without building a protobuf message and parsing it back; :func:`memory_node` makes the
:class:`~astra_sim.chakra.EtNode` that reading those bytes back gives, without the bytes (a run in the generating
process takes the nodes as they are: :func:`.generate.generate_llm` with ``in_memory``)."""

from __future__ import annotations

import struct

from astra_sim.chakra.attrs import choose_kind
from astra_sim.chakra.errors import ChakraError
from astra_sim.chakra.node import EtNode
from astra_sim.chakra.types import INT_KINDS
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


# -- the node in memory ----------------------------------------------------------------------------------------------
_INT_RULES = {}  # attribute name -> (member, low, high): choose_kind's member for its int values in [low, high]
_BOOL_KINDS = {}  # attribute name -> choose_kind's member for its bool values
#: the integer members choose_kind gives an int (conventional or inferred) and their ranges
_INT_RANGES = {"int32_val": (-(1 << 31), (1 << 31) - 1), "int64_val": (-(1 << 63), (1 << 63) - 1),
               "uint64_val": (0, (1 << 64) - 1)}
_KIND_TUPLES = {}  # (name, member, name, member, ...) -> one EtNode._kinds tuple for them (as the reader shares them)
_F32 = struct.Struct("<f")


def _read_back(kind, value):
    """``value`` as the reader gives attribute member ``kind`` back (attrs_from_proto of what fill_attr stored): an
    int for every integer member (True -> 1), a float for double/float (float: rounded to 32 bits), lists as lists."""
    if kind is None:
        return None
    if kind in INT_KINDS:
        return int(value)
    if kind == "bool_val":
        return bool(value)
    if kind == "double_val":
        return float(value)
    if kind == "float_val":
        return _F32.unpack(_F32.pack(float(value)))[0]
    if kind == "bytes_val":
        return bytes(value)
    if kind == "string_val":
        return value
    base = kind[:-5] + "_val"  # a list: each item as its scalar member
    return [_read_back(base, v) for v in value]


def _int_rule(name):
    """``(member, low, high)``: choose_kind's member for attribute ``name``'s int values in ``[low, high]`` (the
    member 0 takes, over its whole range: the conventional member, else int64; an empty range for any other)."""
    kind = choose_kind(name, 0, None, "<generated node>")
    low, high = _INT_RANGES.get(kind, (1, 0))
    return _cached(_INT_RULES, name, (kind, low, high))


def memory_attrs(attrs):
    """``(attrs, kinds)`` of a node whose ``attrs`` :func:`encode_node` writes, as the reader gives them back
    (``EtNode.attrs`` and ``EtNode._kinds``): the oneof member choose_kind picks, the value converted to it. A value
    no member takes is make_node's ChakraError.

    The members depend on the names and the value classes only, but for ints outside the range of the member 0
    takes: attributes of one shape (a generator makes a million nodes of a few dozen) take their plan
    (:func:`_attrs_plan`), and only ints out of its ranges, or classes other than str, int and bool, go the way
    of :func:`_memory_attrs`, one attribute at a time."""
    key = (tuple(attrs), tuple(map(type, attrs.values())))
    plan = _ATTR_PLANS.get(key)
    if plan is None:
        plan = _cached(_ATTR_PLANS, key, _attrs_plan(*key))
    if plan:
        kinds, ranges, to_int = plan
        for name, low, high in ranges:
            if not low <= attrs[name] <= high:
                return _memory_attrs(attrs)
        out = dict(attrs)
        for name in to_int:
            out[name] = int(out[name])
        return out, kinds
    return _memory_attrs(attrs)


_ATTR_PLANS = {}  # (names, value classes) -> (kinds, (name, low, high) of each int, bools stored as ints), or False


def _attrs_plan(names, classes):
    """What :func:`_memory_attrs` does with attributes ``names`` of ``classes`` whose ints lie in the ranges: the kinds
    tuple, the ranges to check and the names of bools an integer member takes (False: a class it converts)."""
    flat, ranges, to_int = [], [], []
    for name, cls in zip(names, classes):
        if cls is str:
            kind = "string_val"
        elif cls is int:
            kind, low, high = _INT_RULES.get(name) or _int_rule(name)
            ranges.append((name, low, high))
        elif cls is bool:
            kind = _BOOL_KINDS.get(name) or _cached(_BOOL_KINDS, name, choose_kind(name, True, None, "<generated node>"))
            if kind != "bool_val":
                to_int.append(name)
        else:
            return False
        flat += (name, kind)
    flat = tuple(flat)
    kinds = _KIND_TUPLES.get(flat) or _cached(_KIND_TUPLES, flat, tuple(zip(flat[::2], flat[1::2])))
    return kinds, tuple(ranges), tuple(to_int)


def _memory_attrs(attrs):
    """:func:`memory_attrs` one attribute at a time (every case)."""
    out = {}
    flat = []  # name, member, name, member, ...: the key of the kinds tuple (cheaper to hash than pairs)
    rules, bools = _INT_RULES, _BOOL_KINDS
    for name, value in attrs.items():
        cls = value.__class__
        if cls is str:  # (a str fits string_val only: choose_kind's answer for every name)
            kind = "string_val"
        elif cls is int:
            rule = rules.get(name)
            if rule is None:
                rule = _int_rule(name)
            kind, low, high = rule
            if not low <= value <= high:  # (outside the range of the member 0 takes: choose_kind's own answer)
                kind = choose_kind(name, value, None, "<generated node>")
                if kind not in INT_KINDS:
                    value = _read_back(kind, value)
        elif cls is bool:
            kind = bools.get(name)
            if kind is None:  # (a bool fits every integer member: its member does not depend on its value)
                kind = _cached(bools, name, choose_kind(name, True, None, "<generated node>"))
            if kind != "bool_val":
                value = int(value)
        else:
            kind = choose_kind(name, value, None, "<generated node>")
            value = _read_back(kind, value)
        out[name] = value
        flat.append(name)
        flat.append(kind)
    flat = tuple(flat)
    kinds = _KIND_TUPLES.get(flat)
    if kinds is None:
        kinds = _cached(_KIND_TUPLES, flat, tuple(zip(flat[::2], flat[1::2])))
    return out, kinds


def memory_node(id, name, type, deps, duration_micros, attrs, inputs_shapes=None, inputs_types=None,
                inputs_values=None):
    """The :class:`EtNode` that parsing ``encode_node(id, name, type, data_deps=deps, ...)`` gives (``keep_raw=False``;
    ``path`` None until the trace it is in is named): the same fields, attributes and attribute members. Tested node
    for node against the parsed traces in plugins/workload_generators/tests/test_llm_in_memory.py."""
    attrs, kinds = memory_attrs(attrs) if attrs else ({}, ())
    return EtNode(id, name or "", type, [], deps, duration_micros, inputs_values or "", attrs, None, kinds, None,
                  inputs_shapes or "", inputs_types or "")


def with_rank_attrs(node, extra, path):
    """``node`` (a stage's, shared by its ranks) with one rank's attributes ``extra`` (an EtNode: the parsed
    suffix the file's trace appends) after its own; a name it has already keeps its first value (the reader's rule)."""
    attrs = dict(node.attrs)
    kinds = list(node._kinds)
    for name, kind in extra._kinds:
        if name not in attrs:
            attrs[name] = extra.attrs[name]
            kinds.append((name, kind))
    return EtNode(node.id, node.name, node.type, node.ctrl_deps, node.data_deps, node.duration_micros,
                  node.inputs_values, attrs, path, tuple(kinds), None, node.inputs_shapes, node.inputs_types)


def encode_memory_node(node):
    """The bytes of the file's frame body for a node made by :func:`memory_node` / :func:`with_rank_attrs`: what the
    generator writes for it (a trace held in memory is written out with them when it must be a file)."""
    return encode_node(node.id, node.name, node.type, data_deps=node.data_deps, ctrl_deps=node.ctrl_deps,
                       duration_micros=node.duration_micros, attrs=node.attrs, inputs_values=node.inputs_values,
                       inputs_shapes=node.inputs_shapes, inputs_types=node.inputs_types)
