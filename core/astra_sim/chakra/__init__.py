"""Chakra execution-trace (ET) reader and writer, schema v0.0.4 wire format (unchanged through Chakra 1.0.0):
``read_et`` / ``parse_et`` / ``read_metadata``, ``write_et`` / ``encode_et``, ``make_node`` / ``make_metadata``, the
typed getters (``get_int``, ...) and ``types``' constants. Every error is a :class:`ChakraError` naming the file (and
node / byte offset). The protobuf bindings :mod:`astra_sim.chakra.et_def_pb2` come from scripts/gen_chakra_proto.sh.
"""

from . import et_def_pb2, types
from .errors import ChakraError
from .node import MISSING, EtFile, EtNode, attr_kind, get_bool, get_bool_list, get_float, get_int, get_str, get_str_list
from .reader import GZIP_MAGIC, parse_et, parse_node, read_et, read_metadata
from .types import *  # noqa: F401,F403  (plain int constants)
from .types import __all__ as _types_all

#: the writer's names, imported when first asked for (PEP 562): a run reads traces and never writes one
_WRITER = ("write_et", "encode_et", "encode_varint", "node_to_proto", "make_node", "make_metadata")
__all__ = ["ChakraError", "EtFile", "EtNode", "MISSING", "read_et", "read_metadata", "parse_et", "parse_node", *_WRITER,
           "get_int", "get_bool", "get_bool_list", "get_float", "get_str", "get_str_list", "attr_kind",
           "GZIP_MAGIC", "et_def_pb2", "types", *_types_all]


def __getattr__(name):
    if name not in _WRITER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import writer

    return getattr(writer, name)
