"""AttributeProto <-> Python value conversion, and the choice of oneof member for Python values."""

from __future__ import annotations

import math

from .errors import ChakraError
from .types import ATTR_KINDS, ATTR_LIST_KINDS, CONVENTIONAL_ATTR_KINDS, INT_KINDS

_LIST_KINDS = frozenset(ATTR_LIST_KINDS)
_KIND_SET = frozenset(ATTR_KINDS)
_INT_RANGES = {**{kind + bits: (-(1 << (int(bits) - 1)), (1 << (int(bits) - 1)) - 1)
                   for kind in ("int", "sint", "sfixed") for bits in ("32", "64")},
               **{kind + bits: (0, (1 << int(bits)) - 1) for kind in ("uint", "fixed") for bits in ("32", "64")}}
_FLOAT32_MAX = 3.4028234663852886e38


def attrs_from_proto(attr_list, strings=None):
    """Repeated AttributeProto -> (name -> Python value, tuple of (name, kind)); a name's first occurrence wins
    (FeederV3). ``strings``, shared by a file's nodes, makes equal names and values one object (traces repeat them
    on every node: a million copies cost tens of megabytes)."""
    attrs = {}
    kinds = []
    for a in attr_list:
        name = a.name
        if strings is not None:
            name = strings.setdefault(name, name)
        if name in attrs:
            continue
        kind = a.WhichOneof("value")
        if kind is None:
            value = None
        else:
            value = getattr(a, kind)
            if kind in _LIST_KINDS:
                value = list(value.values)
            elif strings is not None and kind == "string_val":
                value = strings.setdefault(value, value)
        attrs[name] = value
        kinds.append((name, kind))
    return attrs, tuple(kinds)


def _scalar_fits(base: str, value) -> bool:
    """Does Python ``value`` fit the scalar kind ``base`` ('int32', 'double', 'bool', ...)?"""
    if base in _INT_RANGES:
        if not isinstance(value, int):
            return False
        lo, hi = _INT_RANGES[base]
        return lo <= value <= hi
    if base == "double":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "float":
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and (not math.isfinite(value) or abs(value) <= _FLOAT32_MAX))
    if base == "bool":
        return isinstance(value, bool)
    if base == "string":
        return isinstance(value, str)
    if base == "bytes":
        return isinstance(value, (bytes, bytearray))
    return False


def kind_fits(kind: str, value) -> bool:
    """Can ``value`` be stored in oneof member ``kind`` without changing it?"""
    if kind is None:
        return value is None
    if kind in _LIST_KINDS:
        if not isinstance(value, (list, tuple)):
            return False
        base = kind[:-5]
        return all(_scalar_fits(base, v) for v in value)
    return _scalar_fits(kind[:-4], value)


def _infer_kind(value):
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool_val"
    if isinstance(value, int):
        if _scalar_fits("int64", value):
            return "int64_val"
        if _scalar_fits("uint64", value):
            return "uint64_val"
        return None
    if isinstance(value, float):
        return "double_val"
    if isinstance(value, str):
        return "string_val"
    if isinstance(value, (bytes, bytearray)):
        return "bytes_val"
    if isinstance(value, (list, tuple)):
        if not value:
            return None
        for kind in ("bool_list", "int64_list", "uint64_list", "double_list", "string_list", "bytes_list"):
            if kind_fits(kind, value):
                return kind
    return None


def choose_kind(name, value, preferred, where, strict=False):
    """The oneof member for attribute ``name`` = ``value``: ``preferred`` (asked for, or the attribute's) when the
    value fits it (with ``strict`` it must); else the conventional kind of Chakra's writers for the names ASTRA-sim
    reads (``CONVENTIONAL_ATTR_KINDS``: comm_size int64, tensor_size uint64, comm_src/dst/tag/priority int32, ...)
    when it fits; else by Python type: bool_val, int64_val (uint64_val above 2**63-1), double_val, string_val,
    bytes_val, or the matching ``*_list``. An empty list needs an explicit kind unless its name is conventional.
    """
    if preferred is not None:
        if preferred not in _KIND_SET:
            raise ChakraError(f"{where}: attribute {name!r}: unknown attribute type {preferred!r} "
                              f"(expected one of {', '.join(ATTR_KINDS)})")
        if kind_fits(preferred, value):
            return preferred
        if strict:
            raise ChakraError(f"{where}: attribute {name!r}: value {value!r} does not fit {preferred}")
    conventional = CONVENTIONAL_ATTR_KINDS.get(name)
    if conventional is not None and kind_fits(conventional, value):
        return conventional
    kind = _infer_kind(value)
    if kind is None and value is not None:
        if isinstance(value, (list, tuple)) and not value:
            raise ChakraError(f"{where}: attribute {name!r}: empty list, give its type "
                              f"(e.g. attr_types={{{name!r}: 'int64_list'}})")
        raise ChakraError(f"{where}: attribute {name!r}: cannot store a {type(value).__name__} value "
                          f"{value!r} in an AttributeProto (expected bool, int, float, str, bytes or a list of one "
                          f"of these)")
    return kind


def fill_attr(a, name, kind, value, doc, where):
    """Fill the AttributeProto ``a``."""
    a.name = name
    if doc:
        a.doc_string = doc
    if kind is None:
        return
    try:
        if kind in _LIST_KINDS:
            sub = getattr(a, kind)
            sub.SetInParent()
            if value:
                if kind in ("bool_list",):
                    sub.values.extend(bool(v) for v in value)
                elif kind in ("double_list", "float_list"):
                    sub.values.extend(float(v) for v in value)
                elif kind == "bytes_list":
                    sub.values.extend(bytes(v) for v in value)
                elif kind == "string_list":
                    sub.values.extend(value)
                else:
                    sub.values.extend(int(v) for v in value)
        elif kind in INT_KINDS:
            setattr(a, kind, int(value))
        elif kind in ("double_val", "float_val"):
            setattr(a, kind, float(value))
        elif kind == "bytes_val":
            setattr(a, kind, bytes(value))
        else:
            setattr(a, kind, value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ChakraError(f"{where}: attribute {name!r}: cannot store {value!r} as {kind}: {exc}") from None
