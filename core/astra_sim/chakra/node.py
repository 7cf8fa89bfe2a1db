"""In-memory objects of a Chakra ET file: :class:`EtNode`, :class:`EtFile`, and the typed attribute getters."""

from __future__ import annotations

from .errors import ChakraError, where
from .types import node_type_name


class _Missing:
    __slots__ = ()

    def __repr__(self):
        return "MISSING"

    def __bool__(self):
        return False


#: Sentinel default of the typed getters: "no default, raise if the attribute is absent".
MISSING = _Missing()


class EtNode:
    """One Chakra ``Node`` with ``__slots__`` (made by the million), its fields plain Python values to mutate freely
    (:func:`write_et` notices). ``inputs_*``: the IOInfo strings ('' if absent). ``attrs``: name -> value in file
    order (None for an unset oneof); of a repeated name the **first** is kept (ASTRA-sim's FeederV3), the others
    survive a round trip only while the node is unchanged. ``path``: its file (None when built), for messages.
    Private: ``_kinds``, interned ``(name, oneof member)`` pairs parallel to ``attrs``, and ``_raw``, the original
    bytes to write it back byte for byte (None when not kept)."""

    __slots__ = ("id", "name", "type", "ctrl_deps", "data_deps", "duration_micros", "inputs_values", "attrs", "path",
                 "inputs_shapes", "inputs_types", "_kinds", "_raw")

    def __init__(self, id, name="", type=0, ctrl_deps=None, data_deps=None, duration_micros=0,
                 inputs_values="", attrs=None, path=None, _kinds=None, _raw=None,
                 inputs_shapes="", inputs_types=""):
        self.id = id
        self.name = name
        self.type = type
        self.ctrl_deps = [] if ctrl_deps is None else ctrl_deps
        self.data_deps = [] if data_deps is None else data_deps
        self.duration_micros = duration_micros
        self.inputs_values = inputs_values
        self.inputs_shapes = inputs_shapes
        self.inputs_types = inputs_types
        self.attrs = {} if attrs is None else attrs
        self.path = path
        self._kinds = _kinds
        self._raw = _raw

    # -- presentation -------------------------------------------------------------------------------------
    @property
    def type_name(self) -> str:
        return node_type_name(self.type)

    @property
    def where(self) -> str:
        """``"<file>: node <id> ('<name>')"``, the prefix of error messages about this node."""
        return where(self.path, self.id, self.name)

    def __repr__(self):
        parts = [f"id={self.id}", f"name={self.name!r}", f"type={self.type_name}"]
        for field in ("data_deps", "ctrl_deps", "duration_micros", "inputs_values", "inputs_shapes", "inputs_types",
                      "attrs"):
            value = getattr(self, field)
            if value:
                parts.append(f"{field}={value!r}")
        return f"EtNode({', '.join(parts)})"

    def _key(self):
        return (self.id, self.name, self.type, list(self.ctrl_deps), list(self.data_deps),
                self.duration_micros, self.inputs_values, self.inputs_shapes, self.inputs_types,
                list(self.attrs.items()))

    def __eq__(self, other):
        if not isinstance(other, EtNode):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None

    # -- attributes (and, as methods, the typed getters below: ``node.get_int(key)``) --------------------------
    def set_attr(self, key, value, kind=None):
        """Set attribute ``key``; ``kind`` (e.g. ``'int32_val'``) chooses the wire type, else an existing attribute
        keeps its kind when the value fits and a new one gets the conventional kind (:func:`make_node`)."""
        from .attrs import choose_kind

        old = dict(self._kinds) if self._kinds else {}
        if kind is None:
            kind = choose_kind(key, value, old.get(key), self.where)
        else:
            choose_kind(key, value, kind, self.where, strict=True)
        self.attrs[key] = value
        old[key] = kind
        self._kinds = tuple((k, old.get(k)) for k in self.attrs)

    def to_proto(self):
        """This node as an ``et_def_pb2.Node`` (with the fields EtNode does not model when it kept its raw bytes)."""
        from .writer import node_to_proto

        return node_to_proto(self)


class EtFile:
    """A whole ``.et`` file as :func:`read_et` read it: ``path``; ``metadata``, the ``GlobalMetadata`` message, or
    **None for an empty file**; ``nodes`` in file order (duplicates, dangling and cyclic deps kept: graph checks are
    the workload layer's); ``gzipped``: the file was gzip-compressed.
    """

    __slots__ = ("path", "metadata", "nodes", "gzipped")

    def __init__(self, path, metadata, nodes, gzipped=False):
        self.path = path
        self.metadata = metadata
        self.nodes = nodes
        self.gzipped = gzipped

    @property
    def version(self) -> str:
        """``metadata.version`` ('' when unset or when the file is empty)."""
        return self.metadata.version if self.metadata is not None else ""

    @property
    def metadata_attrs(self) -> dict:
        """The GlobalMetadata attributes as a dict name -> Python value (same rules as ``EtNode.attrs``)."""
        from .attrs import attrs_from_proto

        if self.metadata is None:
            return {}
        return attrs_from_proto(self.metadata.attr)[0]

    def __len__(self):
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    def __repr__(self):
        return (f"EtFile(path={self.path!r}, version={self.version!r}, nodes={len(self.nodes)}"
                f"{', gzipped' if self.gzipped else ''})")


# ------------------------------------------------ typed getters (ASTRA-sim FeederV3's get_attr<T>(name[, default]))
def attr_kind(node, key):
    """The oneof member name of ``node``'s attribute ``key`` (None if absent or unknown)."""
    kinds = node._kinds
    if kinds:
        for name, kind in kinds:
            if name == key:
                return kind
    return None


def _describe(node, key, value):
    kind = attr_kind(node, key)
    if value is None:
        return "has no value (its oneof is unset)"
    if kind is not None:
        return f"is {kind} {value!r}"
    return f"is {type(value).__name__} {value!r}"


def _get(node, key, default, expected, convert):
    """Attribute ``key`` as ``convert`` gives it (None: refused), ``default`` when absent; else a ChakraError."""
    value = node.attrs.get(key, MISSING)
    if value is MISSING:
        if default is MISSING:
            raise ChakraError(f"{node.where}: attribute {key!r} missing (expected {expected})",
                              path=node.path, node_id=node.id, node_name=node.name)
        return default
    out = convert(value)
    if out is None:
        raise ChakraError(f"{node.where}: attribute {key!r} {_describe(node, key, value)}, expected {expected}",
                          path=node.path, node_id=node.id, node_name=node.name)
    return out


def get_int(node, key, default=MISSING):
    """Integer attribute ``key``: every integer oneof member and ``bool_val`` (as 0/1), like FeederV3; a
    :class:`ChakraError` naming file, node and key when absent without ``default``, or not an integer."""
    return _get(node, key, default, "an integer", lambda v: int(v) if isinstance(v, int) else None)


def get_bool(node, key, default=MISSING):
    """Boolean attribute ``key``: ``bool_val``, or any integer member (non-zero is True)."""
    return _get(node, key, default, "a bool (or an integer)", lambda v: bool(v) if isinstance(v, int) else None)


def get_bool_list(node, key, default=MISSING):
    """``bool_list`` attribute ``key`` (``involved_dim``); any other kind is an error, as in ASTRA-sim."""
    def convert(value):
        if not isinstance(value, list):
            return None
        kind = attr_kind(node, key)
        bools = kind == "bool_list" or (kind is None and all(isinstance(v, bool) for v in value))
        return list(value) if bools else None

    return _get(node, key, default, "a bool_list", convert)


def get_float(node, key, default=MISSING):
    """Numeric attribute ``key`` as float: ``double_val``/``float_val`` or any integer member."""
    return _get(node, key, default, "a number", lambda v: float(v) if isinstance(v, (int, float)) else None)


def get_str(node, key, default=MISSING):
    """``string_val`` attribute ``key`` (e.g. ``pg_name``); any other kind is an error, as in FeederV3."""
    return _get(node, key, default, "a string (string_val)", lambda v: v if isinstance(v, str) else None)


def get_str_list(node, key, default=MISSING):
    """``string_list`` attribute ``key`` as a list of str."""
    def convert(value):
        strings = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return list(value) if strings and attr_kind(node, key) in (None, "string_list") else None

    return _get(node, key, default, "a string_list", convert)


# The getters take the node first, so they are EtNode's methods as they are (``node.get_int(key, default)``).
for _getter in (attr_kind, get_int, get_bool, get_bool_list, get_float, get_str, get_str_list):
    setattr(EtNode, _getter.__name__, _getter)
