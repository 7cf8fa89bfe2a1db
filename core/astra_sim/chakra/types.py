"""Chakra ET enum values as plain ints (schema v0.0.4), with names for messages. ``CollectiveCommType`` is never a
field type: it travels as the integer value of the ``comm_type`` attribute."""

from __future__ import annotations

from . import et_def_pb2 as _pb
from .et_def_pb2 import (  # the schema's NodeType and CollectiveCommType values, as et_def.proto numbers them
    ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, BARRIER, BROADCAST, COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE,
    GATHER, INVALID_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, METADATA_NODE, REDUCE, REDUCE_SCATTER, REDUCE_SCATTER_BLOCK,
    SCATTER)

__all__ = ["INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
           "COMM_RECV_NODE", "COMM_COLL_NODE",
           "ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST", "ALL_TO_ALL", "REDUCE_SCATTER",
           "REDUCE_SCATTER_BLOCK", "BARRIER",
           "NODE_TYPE_NAMES", "NODE_TYPE_VALUES", "COMM_TYPE_NAMES", "node_type_name", "comm_type_name",
           "ATTR_SCALAR_KINDS", "ATTR_LIST_KINDS", "ATTR_KINDS", "INT_KINDS", "CONVENTIONAL_ATTR_KINDS",
           "DEFAULT_VERSION"]

NODE_TYPE_NAMES = {value: name for name, value in _pb.NodeType.items()}
NODE_TYPE_VALUES = {name: value for value, name in NODE_TYPE_NAMES.items()}
COMM_TYPE_NAMES = {value: name for name, value in _pb.CollectiveCommType.items()}


def node_type_name(value: int) -> str:
    """``4 -> 'COMP_NODE'``; unknown values give ``'UNKNOWN_NODE_TYPE(<n>)'``."""
    return NODE_TYPE_NAMES.get(value) or f"UNKNOWN_NODE_TYPE({value})"


def comm_type_name(value: int) -> str:
    """``0 -> 'ALL_REDUCE'``; unknown values give ``'UNKNOWN_COMM_TYPE(<n>)'``."""
    return COMM_TYPE_NAMES.get(value) or f"UNKNOWN_COMM_TYPE({value})"


# --- AttributeProto oneof members ---------------------------------------------------------------------------
# AttributeProto's ``value`` oneof members as the schema orders them (double_val=3, double_list=4, ...)
ATTR_KINDS = tuple(f.name for f in _pb.AttributeProto.DESCRIPTOR.oneofs_by_name["value"].fields)
ATTR_SCALAR_KINDS = tuple(k for k in ATTR_KINDS if k.endswith("_val"))
ATTR_LIST_KINDS = tuple(k for k in ATTR_KINDS if k.endswith("_list"))
INT_KINDS = frozenset(k for k in ATTR_SCALAR_KINDS if "int" in k or "fixed" in k)

# The oneof member Chakra's own writers (generator, text converter, ASTRA-sim scripts) use for the names the
# simulator reads (format dossier section 5.2); the builder uses them unless told otherwise.
CONVENTIONAL_ATTR_KINDS = {
    "is_cpu_op": "bool_val",
    "comm_type": "int64_val",
    "comm_size": "int64_val",
    "num_ops": "int64_val",
    "tensor_size": "uint64_val",
    "comm_src": "int32_val",
    "comm_dst": "int32_val",
    "comm_tag": "int32_val",
    "comm_priority": "int32_val",
    "pg_name": "string_val",
    "involved_dim": "bool_list",
}

# GlobalMetadata.version of a trace written without metadata (what ASTRA-sim's generator scripts write)
DEFAULT_VERSION = "0.0.4"
