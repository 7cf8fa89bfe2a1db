"""Chakra execution-trace (ET) reader and writer, schema v0.0.4 wire format (unchanged through Chakra 1.0.0).

Public API::

    read_et(path, *, keep_raw=True) -> EtFile      # .path, .metadata (GlobalMetadata pb or None), .nodes
    read_metadata(path) -> dict                    # the GlobalMetadata's attributes only
    parse_et(data, path="<bytes>") -> EtFile       # same, from bytes
    write_et(path, metadata, nodes, *, reencode=False, compress=None) -> int
    encode_et(metadata, nodes) -> bytes
    make_node(id, name, type, *, data_deps=(), ctrl_deps=(), duration_micros=0, attrs=None,
              attr_types=None, attr_docs=None, inputs_values=None) -> EtNode
    make_metadata(version="0.0.4", attrs=None, attr_types=None) -> GlobalMetadata
    get_int / get_bool / get_bool_list / get_float / get_str / get_str_list(node, key, default=MISSING)
    ChakraError, EtNode, EtFile, MISSING
    types: node-type and collective constants (COMP_NODE, ALL_REDUCE, ...) and their names

Errors are always :class:`ChakraError` with a message naming the file (and node / byte offset).
The protobuf bindings are in :mod:`astra_sim.chakra.et_def_pb2` (regenerate with scripts/gen_chakra_proto.sh).
"""

from . import et_def_pb2, types
from .errors import ChakraError
from .node import (
    MISSING, EtFile, EtNode, attr_kind, get_bool, get_bool_list, get_float, get_int, get_str, get_str_list,
)
from .reader import GZIP_MAGIC, parse_et, parse_node, read_et, read_metadata
from .types import *  # noqa: F401,F403  (plain int constants)
from .types import __all__ as _types_all
from .writer import encode_et, encode_varint, make_metadata, make_node, node_to_proto, write_et

__all__ = [
    "ChakraError", "EtFile", "EtNode", "MISSING",
    "read_et", "read_metadata", "parse_et", "parse_node", "write_et", "encode_et", "encode_varint", "node_to_proto",
    "make_node", "make_metadata",
    "get_int", "get_bool", "get_bool_list", "get_float", "get_str", "get_str_list", "attr_kind",
    "GZIP_MAGIC", "et_def_pb2", "types",
] + list(_types_all)
