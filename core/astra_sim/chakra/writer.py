"""Writing Chakra ET files, and builders for nodes and metadata."""

from __future__ import annotations

import gzip
import os

from . import et_def_pb2 as pb
from .attrs import attrs_from_proto, choose_kind, fill_attr
from .errors import ChakraError, where as _where
from .node import EtNode
from .types import DEFAULT_VERSION, NODE_TYPE_VALUES


def encode_varint(n: int) -> bytes:
    """Base-128 varint, least-significant group first (the frame-length encoding)."""
    if n < 0x4000:
        if n >= 0:
            return SMALL_VARINTS[n]
        return bytes((n,))  # (raises ValueError)
    if n < 0x200000:
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: encode_varint of 0 .. 0x3FFF, made once: frame lengths, ids and deps are mostly that small
SMALL_VARINTS = [bytes((n,)) for n in range(0x80)] + [bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(0x80, 0x4000)]


def _node_where(node):
    try:
        return node.where
    except Exception:  # pragma: no cover - only with absurd field values
        return _where(getattr(node, "path", None), getattr(node, "id", None))


def _fill_attrs(attr_field, attrs: dict, kinds: dict, docs: dict, where, strict=False):
    """Add ``attrs`` to ``attr_field``; ``kinds``: the preferred member per name (``strict``: the value must fit)."""
    for name, value in attrs.items():
        if not isinstance(name, str):
            raise ChakraError(f"{where}: attribute name {name!r} is not a string")
        kind = choose_kind(name, value, kinds.get(name), where, strict=strict and name in kinds)
        fill_attr(attr_field.add(), name, kind, value, docs.get(name), where)


def node_to_proto(node: EtNode, *, reencode: bool = False) -> pb.Node:
    """The ``pb.Node`` of ``node``: fields EtNode does not model come from its raw bytes; unchanged attributes keep
    their exact encoding unless ``reencode``, changed ones keep their oneof member when the value still fits."""
    where = _node_where(node)
    raw = node._raw
    m = pb.Node.FromString(raw) if raw is not None else pb.Node()
    try:
        m.id = node.id
        m.name = node.name
        m.type = node.type
        del m.ctrl_deps[:]
        m.ctrl_deps.extend(node.ctrl_deps)
        del m.data_deps[:]
        m.data_deps.extend(node.data_deps)
        m.duration_micros = node.duration_micros
        if node.inputs_values or node.inputs_shapes or node.inputs_types or m.HasField("inputs"):
            m.inputs.values = node.inputs_values
            m.inputs.shapes = node.inputs_shapes
            m.inputs.types = node.inputs_types
    except (TypeError, ValueError, OverflowError) as exc:
        raise ChakraError(f"{where}: cannot encode node: {exc}") from None

    kinds = dict(node._kinds) if node._kinds else {}
    if raw is not None:
        old_attrs, old_kinds = attrs_from_proto(m.attr)
        if (not reencode and list(old_attrs.items()) == list(node.attrs.items())
                and (node._kinds is None or tuple(node._kinds) == old_kinds)):
            return m
        docs = {}
        for a in m.attr:
            if a.doc_string and a.name not in docs:
                docs[a.name] = a.doc_string
        del m.attr[:]
    else:
        docs = {}
    _fill_attrs(m.attr, node.attrs, kinds, docs, where)
    return m


def _encode_node(node, reencode: bool) -> bytes:
    if isinstance(node, EtNode):
        m = node_to_proto(node, reencode=reencode)
        raw = node._raw
        if raw is not None and not reencode and m == pb.Node.FromString(raw):
            return raw  # unchanged: its own bytes, even where protobuf would encode it otherwise
        return m.SerializeToString()
    if isinstance(node, pb.Node):
        return node.SerializeToString()
    raise ChakraError(f"cannot write {type(node).__name__} {node!r} as a Chakra node "
                      f"(expected EtNode or et_def_pb2.Node)")


def encode_et(metadata, nodes, *, reencode: bool = False) -> bytes:
    """The bytes of a Chakra ET file (see :func:`write_et`)."""
    nodes = list(nodes)
    if metadata is None:
        if not nodes:
            return b""
        metadata = pb.GlobalMetadata(version=DEFAULT_VERSION)
    if not isinstance(metadata, pb.GlobalMetadata):
        raise ChakraError(f"metadata must be an et_def_pb2.GlobalMetadata (see make_metadata) or None, "
                          f"not {type(metadata).__name__}")
    chunks = []
    gm = metadata.SerializeToString()
    chunks.append(encode_varint(len(gm)))
    chunks.append(gm)
    for node in nodes:
        body = _encode_node(node, reencode)
        chunks.append(encode_varint(len(body)))
        chunks.append(body)
    return b"".join(chunks)


def write_et(path, metadata, nodes, *, reencode: bool = False, compress=None) -> int:
    """Write a Chakra ET file; returns its size. ``metadata`` None: an empty file without nodes, else version 0.0.4.
    What :func:`read_et` returned is written back byte for byte; changed nodes are re-encoded by protobuf's canonical
    rules, exactly as Chakra's writers do (``reencode``: every node). ``compress`` (default: a ``.gz`` name, as
    Chakra's C++ writer does) gzips with mtime 0, reproducibly; ASTRA-sim's FeederV3 cannot read it. An all-default
    Node is 0 bytes, which Chakra's Python tools take for end-of-file (the C++ feeders and :func:`read_et` do not).
    """
    name = os.fspath(path)
    data = encode_et(metadata, nodes, reencode=reencode)
    if compress is None:
        compress = name.endswith(".gz")
    if compress:
        data = gzip.compress(data, mtime=0)
    from astra_sim.safeio import write_bytes_atomic

    try:
        write_bytes_atomic(name, data)  # a killed writer leaves no half-written trace
    except OSError as exc:
        raise ChakraError(f"{name}: cannot write Chakra ET file: {exc.strerror or exc}", path=name) from None
    return len(data)


def _node_type_value(type_):
    if isinstance(type_, str):
        try:
            return NODE_TYPE_VALUES[type_]
        except KeyError:
            raise ChakraError(f"unknown node type {type_!r} (expected one of {', '.join(NODE_TYPE_VALUES)})") \
                from None
    return type_


def make_node(id, name="", type=0, *, data_deps=(), ctrl_deps=(), duration_micros=0, attrs=None,
              attr_types=None, attr_docs=None, inputs_values=None, start_time_micros=0,
              inputs_shapes=None, inputs_types=None, outputs_values=None, outputs_shapes=None,
              outputs_types=None) -> EtNode:
    """An :class:`EtNode` encoded as Chakra's own generator would (a :class:`ChakraError` for values that do not fit).

    ``type``: a NodeType value or name (``'COMP_NODE'``). ``attrs`` are written in dict order, each as
    ``attr_types[name]`` when given, else Chakra's conventional member for the names ASTRA-sim reads
    (``CONVENTIONAL_ATTR_KINDS``) when the value fits, else by Python type (:func:`astra_sim.chakra.attrs.choose_kind`).
    ``attr_docs`` sets doc strings; ``inputs_*`` / ``outputs_*`` the IOInfo strings (the METADATA node's process
    groups; shapes and types as the PyTorch converter writes them; ``outputs`` travels in the raw bytes only);
    ``start_time_micros`` is written but no simulator reads it.
    """
    from .reader import parse_node

    type_value = _node_type_value(type)
    where = _where(None, id, name)
    m = pb.Node()
    try:
        m.id = id
        m.name = name
        m.type = type_value
        m.ctrl_deps.extend(ctrl_deps)
        m.data_deps.extend(data_deps)
        m.start_time_micros = start_time_micros
        m.duration_micros = duration_micros
        for io, values, shapes, types in ((m.inputs, inputs_values, inputs_shapes, inputs_types),
                                          (m.outputs, outputs_values, outputs_shapes, outputs_types)):
            for field, text in (("values", values), ("shapes", shapes), ("types", types)):
                if text:  # (an IOInfo field set to "" would still mark the IOInfo present)
                    setattr(io, field, text)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ChakraError(f"{where}: cannot build node: {exc}") from None
    _fill_attrs(m.attr, dict(attrs or {}), dict(attr_types or {}), dict(attr_docs or {}), where, strict=True)
    return parse_node(m.SerializeToString(), None)


def make_metadata(version: str = DEFAULT_VERSION, attrs=None, attr_types=None, attr_docs=None) -> pb.GlobalMetadata:
    """A ``GlobalMetadata``: ``version`` "0.0.4" as ASTRA-sim's generator scripts write (Chakra 1.0.0's generator
    writes "1.0.0", its converters a ``schema`` attribute instead); attributes as in :func:`make_node`."""
    gm = pb.GlobalMetadata()
    where = "GlobalMetadata"
    try:
        gm.version = version
    except (TypeError, ValueError) as exc:
        raise ChakraError(f"{where}: bad version {version!r}: {exc}") from None
    _fill_attrs(gm.attr, dict(attrs or {}), dict(attr_types or {}), dict(attr_docs or {}), where, strict=True)
    return gm
