"""Reading Chakra ET files (schema v0.0.4 wire format): a plain stream of ``varint(length) + message`` frames, a
``GlobalMetadata`` then one ``Node`` each, without magic number, header or trailer."""

from __future__ import annotations

import os

from google.protobuf.message import DecodeError

from astra_sim import safeio
from astra_sim.gcpause import gc_paused
from astra_sim.safeio import GZIP_MAGIC

from . import et_def_pb2 as pb
from .attrs import attrs_from_proto
from .errors import ChakraError
from .node import EtFile, EtNode

_MAX_VARINT_BYTES = 10


def read_et(path, *, keep_raw: bool = True) -> EtFile:
    """Read the Chakra ET file ``path`` into an :class:`EtFile`. gzip is read transparently (as Chakra's Python tools
    and v1 C++ feeder do; ASTRA-sim's FeederV3 cannot; offsets in errors are then decompressed). An empty file gives
    ``metadata=None`` (rejecting it, as ASTRA-sim does, is the caller's choice); a 0-byte frame is an all-default
    Node, as the C++ feeders read it (Chakra's Python tools stop there). Nodes come unchecked, in file order. Every
    malformed input is a :class:`ChakraError` naming the byte offset. ``keep_raw`` keeps each node's bytes, so that
    :func:`write_et` reproduces the file byte for byte; without it, memory is about halved.
    """
    name = os.fspath(path)
    limit = safeio.MAX_INPUT_BYTES
    try:
        with open(name, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise ChakraError(f"{name}: Chakra ET file of {size:,} bytes, more than the {limit:,} accepted "
                                  "(ASTRA_MAX_INPUT_BYTES raises the limit)", path=name)
            data = f.read(limit + 1)
    except (OSError, ValueError) as exc:
        raise _unreadable(name, exc) from None
    if len(data) > limit:
        raise ChakraError(f"{name}: Chakra ET file larger than the {limit:,} bytes accepted", path=name)
    return parse_et(data, name, keep_raw=keep_raw)


def read_metadata(path) -> dict:
    """The GlobalMetadata attributes of ``path`` ({name: value}; {} for an empty file), from the first frame only:
    reading what a generator wrote there (a memory estimate) need not parse the nodes."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            head = f.read(1 << 16)
            if head[:2] == GZIP_MAGIC:
                head = _gunzip(head + f.read(safeio.MAX_INPUT_BYTES), name)  # bounded, as read_et
            else:
                frames = _frames(head, name) if head else iter(())
                try:
                    _, _, end = next(frames)
                except ChakraError:  # a metadata frame longer than the first read
                    head += f.read(safeio.MAX_INPUT_BYTES)
    except (OSError, ValueError) as exc:
        raise _unreadable(name, exc) from None
    first = next(_frames(head, name), None)
    return {} if first is None else attrs_from_proto(_metadata(head, first, name).attr)[0]


def _unreadable(name, exc) -> ChakraError:
    """A file that cannot be opened or read (a ValueError: its name holds a NUL byte)."""
    return ChakraError(f"{name}: cannot read Chakra ET file: {getattr(exc, 'strerror', None) or exc}", path=name)


def _gunzip(data: bytes, path) -> bytes:
    """Decompressed in bounded steps: a gzip bomb stops at the input limit instead of filling memory."""
    return safeio.gunzip(data, path, "Chakra ET file", safeio.MAX_INPUT_BYTES,
                         error=lambda message, offset: ChakraError(message, path=path, offset=offset))


def _frames(data: bytes, path):
    """Yield (offset_of_length_prefix, start, end) for every frame of ``data``."""
    size = len(data)
    pos = 0
    index = 0
    while pos < size:
        start_of_prefix = pos
        b = data[pos]
        pos += 1
        if b < 0x80:
            length = b
        else:
            length = b & 0x7F
            shift = 7
            while True:
                if pos >= size:
                    what = "GlobalMetadata" if index == 0 else f"message #{index}"
                    raise ChakraError(
                        f"{path}: truncated file: the length prefix of {what} at byte offset {start_of_prefix} "
                        f"is cut off by the end of the file ({size} bytes)", path=path, offset=start_of_prefix)
                b = data[pos]
                pos += 1
                length |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
                if pos - start_of_prefix >= _MAX_VARINT_BYTES:
                    raise ChakraError(
                        f"{path}: byte offset {start_of_prefix}: invalid length prefix (varint longer than "
                        f"{_MAX_VARINT_BYTES} bytes); not a Chakra ET file, or corrupt", path=path,
                        offset=start_of_prefix)
        end = pos + length
        if end > size:
            what = "GlobalMetadata" if index == 0 else f"message #{index}"
            hint = " (or not a Chakra ET file)" if index == 0 else ""
            raise ChakraError(
                f"{path}: truncated file{hint}: {what} at byte offset {start_of_prefix} declares {length} bytes but "
                f"only {size - pos} remain (file is {size} bytes)", path=path, offset=start_of_prefix)
        yield start_of_prefix, pos, end
        pos = end
        index += 1


def _metadata(data, frame, path):
    """The GlobalMetadata of the file's first frame."""
    off, s, e = frame
    metadata = pb.GlobalMetadata()
    try:
        metadata.ParseFromString(data[s:e])
    except DecodeError as exc:
        raise ChakraError(f"{path}: byte offset {off}: the first message is not a valid GlobalMetadata ({exc}); "
                          f"not a Chakra ET file, or corrupt", path=path, offset=off) from None
    return metadata


def parse_et(data: bytes, path="<bytes>", *, keep_raw: bool = True, shared: dict | None = None) -> EtFile:
    """Parse the bytes of a Chakra ET file (:func:`read_et`); ``path`` names it in messages.

    ``shared`` (serialized node -> :class:`EtNode`, kept across one workload's files): a node seen in an earlier file
    is that file's object, not parsed again (a data-parallel job's ranks repeat most nodes byte for byte); such
    nodes must not be modified."""
    if not isinstance(data, bytes):
        data = bytes(data)
    gzipped = False
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, path)
        gzipped = True

    with gc_paused():
        return _parse_frames(data, path, keep_raw, gzipped, shared)


def _parse_frames(data, path, keep_raw, gzipped, shared=None):
    frames = _frames(data, path)
    nodes = []
    first = next(frames, None)
    if first is None:
        return EtFile(path, None, nodes, gzipped)
    metadata = _metadata(data, first, path)

    from_string = pb.Node.FromString
    kind_cache = {}
    strings = {}  # one object per distinct name / shape / type string of the file
    intern = strings.setdefault
    new_node = EtNode
    append = nodes.append
    index = 0
    known = shared.get if shared is not None else None
    for off, s, e in frames:
        index += 1
        raw = data[s:e]
        if known is not None:
            node = known(raw)
            if node is not None:
                append(node)
                continue
        try:
            m = from_string(raw)
        except DecodeError as exc:
            raise ChakraError(f"{path}: byte offset {off}: message #{index} is not a valid Node ({exc}); "
                              f"the file is corrupt", path=path, offset=off) from None
        attrs, kinds = attrs_from_proto(m.attr, strings)
        kinds = kind_cache.setdefault(kinds, kinds)
        inputs = m.inputs
        name, values, shapes, types = m.name, inputs.values, inputs.shapes, inputs.types
        node = new_node(m.id, intern(name, name), m.type, list(m.ctrl_deps), list(m.data_deps), m.duration_micros,
                        intern(values, values), attrs, path, kinds, raw if keep_raw else None,
                        intern(shapes, shapes), intern(types, types))
        append(node)
        if shared is not None:
            shared[raw] = node
    return EtFile(path, metadata, nodes, gzipped)


def parse_node(raw: bytes, path=None, *, keep_raw: bool = True) -> EtNode:
    """One serialized Node (without its length prefix) -> :class:`EtNode`."""
    try:
        m = pb.Node.FromString(raw)
    except DecodeError as exc:
        raise ChakraError(f"{path if path is not None else '<memory>'}: not a valid Node ({exc})",
                          path=path) from None
    attrs, kinds = attrs_from_proto(m.attr)
    return EtNode(m.id, m.name, m.type, list(m.ctrl_deps), list(m.data_deps), m.duration_micros,
                  m.inputs.values, attrs, path, kinds, raw if keep_raw else None, m.inputs.shapes, m.inputs.types)
