"""Microbenchmark traces, byte for byte as the reference tools write them.

Two styles:

* ``astra-sim`` (default): ASTRA-sim's own generator scripts (``examples/workload/microbenchmarks/
  generator_scripts/*.py``) and the parity traces: GlobalMetadata version "0.0.4", node name
  ``<collective>_<N>npus_<size>`` (``all_reduce_8npus_1MB``), attributes ``is_cpu_op`` (bool false),
  ``comm_type`` and ``comm_size`` (int64). Send/receive nodes carry ``comm_src``/``comm_dst``/``comm_tag``
  (int32), which ASTRA-sim needs. Each rank file numbers its nodes from 0 (the parity traces); ``ids='global'``
  continues one counter across the rank files instead, as the generator scripts do (rank r's node has id r).
* ``chakra``: mlcommons ``chakra_generator``: version "1.0.0", names ``ALL_REDUCE``, ``COMP_NODE``, ...,
  one id counter for every file it writes (``first_id`` sets where it starts; the full generator run is
  :func:`chakra_suite`). Its send/receive nodes have only ``tensor_size`` (no peers: ASTRA-sim cannot run them).
"""

from __future__ import annotations

import os

from astra_sim.chakra import make_metadata, make_node, types as T
from astra_sim.errors import ConfigError
from astra_sim.limits import env_limit

from .common import parse_size, size_label, write_rank_files

#: Most NPUs ``astra workload micro`` writes traces for (one file per rank: far fewer than a run may simulate).
MAX_MICRO_NPUS = env_limit("ASTRA_MAX_MICRO_NPUS", 65_536)

__all__ = [
    "COLLECTIVES", "P2P_PATTERNS", "STYLES", "Trace", "collective_trace", "p2p_trace", "compute_trace",
    "memory_trace", "metadata_all_types_trace", "graph_trace", "load_graph_spec", "chakra_suite", "write_trace",
    "generate_micro", "MICRO_OPTIONS",
]

STYLES = ("astra-sim", "chakra")
COLLECTIVES = {
    "all_reduce": T.ALL_REDUCE,
    "all_gather": T.ALL_GATHER,
    "reduce_scatter": T.REDUCE_SCATTER,
    "all_to_all": T.ALL_TO_ALL,
    "broadcast": T.BROADCAST,
    "barrier": T.BARRIER,
}
P2P_PATTERNS = ("shift", "pairs", "send", "recv")
_VERSIONS = {"astra-sim": "0.0.4", "chakra": "1.0.0"}
_DEFAULT_IDS = {"astra-sim": "per-file", "chakra": "global"}


class Trace:
    """Per-rank node lists plus the GlobalMetadata, ready to write as ``<prefix>.<r>.et``."""

    def __init__(self, metadata, ranks, default_name=None):
        self.metadata = metadata
        self.ranks = ranks
        self.default_name = default_name

    @property
    def next_id(self):
        return max((n.id for nodes in self.ranks for n in nodes), default=-1) + 1


def _check_style(style):
    if style not in STYLES:
        raise ConfigError(f"--style must be one of {', '.join(STYLES)}, got {style!r}")


def _check_npus(npus):
    if isinstance(npus, bool) or not isinstance(npus, int) or npus < 1:
        raise ConfigError(f"--npus must be a positive integer, got {npus!r}")
    if npus > MAX_MICRO_NPUS:  # one file per rank, written before anything runs: refuse before the first
        raise ConfigError(f"--npus {npus:,} is more than the {MAX_MICRO_NPUS:,} NPUs a microbenchmark is written for "
                          "(a trace file each); ASTRA_MAX_MICRO_NPUS raises the limit")


class _Ids:
    """Node ids: ``per-file`` restarts at ``first_id`` in every rank file; ``global`` is one counter for all."""

    def __init__(self, mode, first_id):
        if mode not in ("per-file", "global"):
            raise ConfigError(f"--ids must be 'per-file' or 'global', got {mode!r}")
        if not isinstance(first_id, int) or first_id < 0:
            raise ConfigError(f"--first-id must be an integer >= 0, got {first_id!r}")
        self.mode = mode
        self.first = first_id
        self.next = first_id

    def start_rank(self):
        if self.mode == "per-file":
            self.next = self.first

    def take(self):
        value = self.next
        self.next += 1
        return value


def _setup(style, npus, ids, first_id, version):
    _check_style(style)
    _check_npus(npus)
    return _Ids(ids or _DEFAULT_IDS[style], first_id), make_metadata(version=_VERSIONS[style] if version is None
                                                                      else version)


def collective_trace(collective, size, npus, *, style="astra-sim", name=None, ids=None, first_id=0,
                     version=None) -> Trace:
    """One collective node per rank."""
    if collective not in COLLECTIVES:
        raise ConfigError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    comm_type = COLLECTIVES[collective]
    if collective == "barrier":
        if size:
            raise ConfigError("a barrier moves no data: leave --size out (its comm_size is 0)")
        size = 0
    elif size is None:
        raise ConfigError(f"--size is required for {collective}")
    counter, metadata = _setup(style, npus, ids, first_id, version)
    if name is None:
        if style == "chakra":
            name = T.comm_type_name(comm_type)
        elif collective == "barrier":
            name = f"barrier_{npus}npus"
        else:
            name = f"{collective}_{npus}npus_{size_label(size)}"
    ranks = []
    for _ in range(npus):
        counter.start_rank()
        ranks.append([make_node(counter.take(), name, T.COMM_COLL_NODE,
                                attrs={"is_cpu_op": False, "comm_type": comm_type, "comm_size": size})])
    return Trace(metadata, ranks, name)


def _p2p_node(node_id, name, type_, src, dst, size, tag):
    return make_node(node_id, name, type_, attrs={
        "is_cpu_op": False, "comm_src": src, "comm_dst": dst, "comm_size": size, "comm_tag": tag})


def p2p_trace(pattern, size, npus, *, style="astra-sim", shift=1, tag=0, names=None, ids=None, first_id=0,
              version=None) -> Trace:
    """Point-to-point patterns.

    * ``shift``: rank r sends to r+shift and receives from r-shift (mod N): nodes ``send`` (id 0), ``recv`` (1).
    * ``pairs``: ranks 2k and 2k+1 exchange (N even).
    * ``send`` / ``recv`` (chakra style only): Chakra's lone ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` with
      ``is_cpu_op`` and ``tensor_size`` and no peer.
    """
    if pattern not in P2P_PATTERNS:
        raise ConfigError(f"unknown --p2p pattern {pattern!r}; expected one of {', '.join(P2P_PATTERNS)}")
    if size is None:
        raise ConfigError("--size is required for --p2p")
    counter, metadata = _setup(style, npus, ids, first_id, version)
    ranks = []
    if pattern in ("send", "recv"):
        if style != "chakra":
            raise ConfigError(f"--p2p {pattern} is chakra_generator's lone node without a peer, which ASTRA-sim "
                              "cannot run; use --style chakra for it, or a pattern with peers (shift, pairs)")
        type_ = T.COMM_SEND_NODE if pattern == "send" else T.COMM_RECV_NODE
        name = (names or {}).get(pattern, T.node_type_name(type_))
        for _ in range(npus):
            counter.start_rank()
            ranks.append([make_node(counter.take(), name, type_, attrs={"is_cpu_op": False, "tensor_size": size})])
        return Trace(metadata, ranks, name)
    if style == "chakra":
        raise ConfigError(f"chakra_generator has no --p2p {pattern} pattern (its send/recv nodes have no peers); "
                          "use the default --style astra-sim")
    if not isinstance(tag, int) or not -(1 << 31) <= tag < (1 << 31):
        raise ConfigError(f"--tag must be a 32-bit integer, got {tag!r}")
    send_name = (names or {}).get("send", "send")
    recv_name = (names or {}).get("recv", "recv")
    if pattern == "shift":
        if npus < 2 or shift % npus == 0:
            raise ConfigError(f"--shift {shift} on {npus} NPUs sends every rank's message to itself")
    elif npus % 2:
        raise ConfigError(f"--p2p pairs needs an even number of NPUs, got {npus}")
    for rank in range(npus):
        counter.start_rank()
        if pattern == "shift":
            dst, src = (rank + shift) % npus, (rank - shift) % npus
        else:
            dst = src = rank ^ 1
        ranks.append([
            _p2p_node(counter.take(), send_name, T.COMM_SEND_NODE, rank, dst, size, tag),
            _p2p_node(counter.take(), recv_name, T.COMM_RECV_NODE, src, rank, size, tag),
        ])
    return Trace(metadata, ranks, send_name)


def compute_trace(duration_us, npus, *, count=1, dependent=False, style="astra-sim", name=None, ids=None,
                  first_id=0, version=None) -> Trace:
    """``count`` COMP nodes of ``duration_us`` µs per rank (a chain when ``dependent``); Chakra's
    one_comp_node / two_comp_nodes_independent / two_comp_nodes_dependent are count 1 / 2 / 2 dependent."""
    if not isinstance(duration_us, int) or duration_us < 0:
        raise ConfigError(f"--compute takes a duration in whole microseconds >= 0, got {duration_us!r}")
    if not isinstance(count, int) or count < 1:
        raise ConfigError(f"--count must be a positive integer, got {count!r}")
    counter, metadata = _setup(style, npus, ids, first_id, version)
    if name is None:
        name = "COMP_NODE" if style == "chakra" else "comp"
    ranks = []
    for _ in range(npus):
        counter.start_rank()
        nodes = []
        for j in range(count):
            node_name = name if style == "chakra" or count == 1 else f"{name}_{j}"
            deps = [nodes[-1].id] if dependent and nodes else []
            nodes.append(make_node(counter.take(), node_name, T.COMP_NODE, data_deps=deps,
                                   duration_micros=duration_us, attrs={"is_cpu_op": False}))
        ranks.append(nodes)
    return Trace(metadata, ranks, name)


def memory_trace(kind, size, npus, *, style="astra-sim", name=None, ids=None, first_id=0, version=None) -> Trace:
    """One remote-memory load or store of ``size`` bytes per rank (``tensor_size`` uint64)."""
    if kind not in ("load", "store"):
        raise ConfigError(f"memory access must be 'load' or 'store', got {kind!r}")
    counter, metadata = _setup(style, npus, ids, first_id, version)
    type_ = T.MEM_LOAD_NODE if kind == "load" else T.MEM_STORE_NODE
    if name is None:
        name = T.node_type_name(type_) if style == "chakra" else f"mem_{kind}"
    ranks = []
    for _ in range(npus):
        counter.start_rank()
        ranks.append([make_node(counter.take(), name, type_, attrs={"is_cpu_op": False, "tensor_size": size})])
    return Trace(metadata, ranks, name)


_ALL_TYPES_ATTRS = [
    # (name, kind, value, doc_string) in chakra_generator's order
    ("double", "double_val", 1.2345, "double"),
    ("double_list", "double_list", [1.2345, 2.3456], None),
    ("float", "float_val", 1.2345, "float"),
    ("float_list", "float_list", [1.2345, 2.3456], None),
    ("int32", "int32_val", 12345, "int32"),
    ("int32_list", "int32_list", [12345, 23456], None),
    ("int64", "int64_val", 9876543210, "int64"),
    ("int64_list", "int64_list", [9876543210, 1234567890], None),
    ("uint32", "uint32_val", 12345, "uint32"),
    ("uint32_list", "uint32_list", [12345, 23456], None),
    ("uint64", "uint64_val", 9876543210, "uint64"),
    ("uint64_list", "uint64_list", [9876543210, 1234567890], None),
    ("sint32", "sint32_val", -12345, "sint32"),
    ("sint32_list", "sint32_list", [12345, -23456], None),
    ("sint64", "sint64_val", -9876543210, "sint64"),
    ("sint64_list", "sint64_list", [9876543210, -1234567890], None),
    ("fixed32", "fixed32_val", 12345, None),
    ("fixed32_list", "fixed32_list", [12345, 23456], None),
    ("fixed64", "fixed64_val", 9876543210, None),
    ("fixed64_list", "fixed64_list", [9876543210, 1234567890], None),
    ("sfixed32", "sfixed32_val", -12345, None),
    ("sfixed32_list", "sfixed32_list", [12345, -23456], None),
    ("sfixed64", "sfixed64_val", -9876543210, None),
    ("sfixed64_list", "sfixed64_list", [9876543210, -1234567890], None),
    ("bool", "bool_val", True, "bool"),
    ("bool_list", "bool_list", [i % 2 == 0 for i in range(10)], None),
    ("string", "string_val", "12345", "string"),
    ("string_list", "string_list", [str(12345 + i) for i in range(10)], None),
    ("bytes", "bytes_val", b"12345", None),
    ("bytes_list", "bytes_list", [str(12345 + i).encode() for i in range(10)], None),
]


def metadata_all_types_trace(npus, *, ids="global", first_id=0, version="1.0.0") -> Trace:
    """chakra_generator's ``one_metadata_node_all_types``: a METADATA_NODE with every AttributeProto kind."""
    counter, metadata = _setup("chakra", npus, ids, first_id, version)
    attrs = {n: v for n, _, v, _ in _ALL_TYPES_ATTRS}
    kinds = {n: k for n, k, _, _ in _ALL_TYPES_ATTRS}
    docs = {n: d for n, _, _, d in _ALL_TYPES_ATTRS if d}
    ranks = []
    for _ in range(npus):
        counter.start_rank()
        ranks.append([make_node(counter.take(), "METADATA_NODE", T.METADATA_NODE, attrs=attrs, attr_types=kinds,
                                attr_docs=docs)])
    return Trace(metadata, ranks, "METADATA_NODE")


# ---------------------------------------------------------------------------------------------------------
# Graph specs
# ---------------------------------------------------------------------------------------------------------

_SPEC_TYPES = tuple(COLLECTIVES) + ("comp", "send", "recv", "mem_load", "mem_store")


def load_graph_spec(path):
    """Read a graph spec (JSON, or YAML for .yml/.yaml)."""
    path = os.fspath(path)
    from astra_sim.safeio import load_json, load_yaml

    load = load_yaml if path.lower().endswith((".yml", ".yaml")) else load_json
    return load(path, "graph spec"), path


def _peer(value, rank, npus, where, key):
    if value is None:
        return rank
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "+-" and text[1:].isdigit():
            return (rank + int(text)) % npus
        if text.isdigit():
            value = int(text)
        else:
            raise ConfigError(f"{where}: {key} must be a rank or a rank offset such as '+1' / '-1', got {value!r}")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < npus:
        raise ConfigError(f"{where}: {key} {value!r} is not a rank of the {npus} NPUs")
    return value


def graph_trace(spec, npus, *, style="astra-sim", ids=None, first_id=0, version=None, source="<spec>") -> Trace:
    """A small hand-described graph, the same on every rank (peers may be relative: ``dst: '+1'``).

    ``spec``: ``{"version": "0.0.4" (optional), "nodes": [{"name", "type", "size", "duration_us",
    "data_deps": [names], "ctrl_deps": [names], "src", "dst", "tag", "is_cpu_op", "attrs": {...}}]}``.
    ``type`` is a collective (all_reduce, ...), comp, send, recv, mem_load or mem_store. Node ids are the
    positions in the list (plus ``first_id``). Attributes are written in the reference generators' order."""
    if not isinstance(spec, dict) or not isinstance(spec.get("nodes"), list) or not spec["nodes"]:
        raise ConfigError(f"{source}: a graph spec is an object with a non-empty 'nodes' list")
    if version is None:
        version = spec.get("version")
    counter, metadata = _setup(style, npus, ids, first_id, version)
    allowed = {"name", "type", "size", "duration_us", "data_deps", "ctrl_deps", "src", "dst", "tag", "is_cpu_op",
               "attrs"}
    items = []
    names = {}
    for pos, item in enumerate(spec["nodes"]):
        where = f"{source}: nodes[{pos}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected an object, got {item!r}")
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
        kind = item.get("type")
        if kind not in _SPEC_TYPES:
            raise ConfigError(f"{where}: 'type' must be one of {', '.join(_SPEC_TYPES)}, got {kind!r}")
        name = str(item.get("name", f"{kind}_{pos}"))
        if name in names:
            raise ConfigError(f"{where}: name {name!r} is used twice (nodes are referred to by name)")
        names[name] = pos
        items.append((pos, where, kind, name, item))

    def dep_positions(item, key, where, pos):
        out = []
        deps = item.get(key, [])
        if not isinstance(deps, list):
            raise ConfigError(f"{where}: {key} must be a list of node names")
        for d in deps:
            if d not in names:
                raise ConfigError(f"{where}: {key} names {d!r}, which is not a node of the spec")
            if names[d] == pos:
                raise ConfigError(f"{where}: the node depends on itself")
            out.append(names[d])
        return out

    ranks = []
    for rank in range(npus):
        counter.start_rank()
        base = counter.next
        nodes = []
        for pos, where, kind, name, item in items:
            size = item.get("size")
            size = None if size is None else parse_size(size, f"{where}: size")
            duration = item.get("duration_us", 0)
            if isinstance(duration, bool) or not isinstance(duration, int) or duration < 0:
                raise ConfigError(f"{where}: duration_us must be whole microseconds >= 0, got {duration!r}")
            attrs = {"is_cpu_op": bool(item.get("is_cpu_op", False))}
            if kind in COLLECTIVES:
                if size is None and kind != "barrier":
                    raise ConfigError(f"{where}: a {kind} needs a 'size'")
                attrs["comm_type"] = COLLECTIVES[kind]
                attrs["comm_size"] = size or 0
                type_ = T.COMM_COLL_NODE
            elif kind in ("send", "recv"):
                if size is None:
                    raise ConfigError(f"{where}: a {kind} needs a 'size'")
                attrs["comm_src"] = _peer(item.get("src"), rank, npus, where, "src")
                attrs["comm_dst"] = _peer(item.get("dst"), rank, npus, where, "dst")
                attrs["comm_size"] = size
                tag = item.get("tag", 0)
                if isinstance(tag, bool) or not isinstance(tag, int):
                    raise ConfigError(f"{where}: tag must be an integer, got {tag!r}")
                attrs["comm_tag"] = tag
                type_ = T.COMM_SEND_NODE if kind == "send" else T.COMM_RECV_NODE
            elif kind in ("mem_load", "mem_store"):
                if size is None:
                    raise ConfigError(f"{where}: a {kind} needs a 'size'")
                attrs["tensor_size"] = size
                type_ = T.MEM_LOAD_NODE if kind == "mem_load" else T.MEM_STORE_NODE
            else:
                type_ = T.COMP_NODE
            extra = item.get("attrs", {})
            if not isinstance(extra, dict):
                raise ConfigError(f"{where}: attrs must be an object")
            attrs.update(extra)
            try:
                node = make_node(
                    counter.take(), name, type_, duration_micros=duration, attrs=attrs,
                    data_deps=[base + p for p in dep_positions(item, "data_deps", where, pos)],
                    ctrl_deps=[base + p for p in dep_positions(item, "ctrl_deps", where, pos)],
                )
            except Exception as exc:  # ChakraError for values that do not fit
                raise ConfigError(f"{where}: {exc}") from None
            nodes.append(node)
        ranks.append(nodes)
    return Trace(metadata, ranks, items[0][3])


# ---------------------------------------------------------------------------------------------------------
# The whole chakra_generator run
# ---------------------------------------------------------------------------------------------------------

def chakra_suite(out_dir, npus, *, runtime=5, tensor_size=1024, comm_size=65536, first_id=0, version="1.0.0"):
    """Write what ``chakra_generator --num_npus N --default_runtime R --default_tensor_size S
    --default_comm_size C`` writes into its working directory: 14 microbenchmarks x N ranks, with its one
    global id counter. Returns the written paths."""
    os.makedirs(out_dir, exist_ok=True)
    common = dict(style="chakra", ids="global", version=version)
    plan = [
        ("one_metadata_node_all_types", lambda f: metadata_all_types_trace(npus, first_id=f, version=version)),
        ("one_remote_mem_load_node", lambda f: memory_trace("load", tensor_size, npus, first_id=f, **common)),
        ("one_remote_mem_store_node", lambda f: memory_trace("store", tensor_size, npus, first_id=f, **common)),
        ("one_comp_node", lambda f: compute_trace(runtime, npus, first_id=f, **common)),
        ("two_comp_nodes_independent", lambda f: compute_trace(runtime, npus, count=2, first_id=f, **common)),
        ("two_comp_nodes_dependent",
         lambda f: compute_trace(runtime, npus, count=2, dependent=True, first_id=f, **common)),
    ]
    for coll in ("all_reduce", "all_to_all", "all_gather", "reduce_scatter", "broadcast", "barrier"):
        size = 0 if coll == "barrier" else comm_size
        plan.append((coll.upper(), lambda f, c=coll, s=size: collective_trace(c, s, npus, first_id=f, **common)))
    plan.append(("one_comm_send_node", lambda f: p2p_trace("send", tensor_size, npus, first_id=f, **common)))
    plan.append(("one_comm_recv_node", lambda f: p2p_trace("recv", tensor_size, npus, first_id=f, **common)))
    paths = []
    next_id = first_id
    for file_name, make in plan:
        trace = make(next_id)
        paths += write_trace(trace, os.path.join(out_dir, file_name))
        next_id = trace.next_id
    return paths


def write_trace(trace, prefix):
    return write_rank_files(prefix, trace.metadata, trace.ranks)


# ---------------------------------------------------------------------------------------------------------
#: generate_micro's options and their defaults (those of ``astra workload micro``'s flags)
MICRO_OPTIONS = {
    "npus": None, "collective": None, "p2p": None, "compute": None, "mem_load": None, "mem_store": None,
    "metadata_all_types": False, "graph": None, "chakra_suite": False, "size": None, "style": "astra-sim",
    "name": None, "shift": 1, "tag": 0, "count": 1, "dependent": False, "ids": None, "first_id": 0,
    "et_version": None, "runtime": 5, "tensor_size": 1024, "comm_size": 65536,
}
_WHAT = ("collective", "p2p", "compute", "mem_load", "mem_store", "metadata_all_types", "graph", "chakra_suite")
_write_chakra_suite = chakra_suite


def generate_micro(prefix, **options) -> dict:
    """Write the microbenchmark ``astra workload micro`` writes for the same options (byte for byte), from
    Python: ``generate_micro("out/ar", npus=8, collective="all_reduce", size="64MiB")``.

    ``options`` (names as the command's flags, with underscores or dashes):

    * ``npus`` (int, required): ranks, one ``PREFIX.<r>.et`` each;
    * exactly one of ``collective`` (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, barrier),
      ``p2p`` (shift, pairs, send, recv), ``compute`` (µs per COMP node), ``mem_load`` / ``mem_store`` (a size),
      ``metadata_all_types=True``, ``graph`` (a JSON/YAML spec file, or the spec itself as a dict) or
      ``chakra_suite=True`` (everything chakra_generator writes, into the folder ``prefix``);
    * ``size`` (bytes as an int, or text such as "64KiB"), ``style`` ("astra-sim" or "chakra"), ``name``,
      ``shift`` (p2p shift distance, 1), ``tag`` (p2p comm_tag, 0), ``count`` (compute nodes per rank, 1),
      ``dependent`` (chain them), ``ids`` ("per-file" or "global"; default by style), ``first_id`` (0),
      ``et_version`` (GlobalMetadata version; default by style), ``runtime`` / ``tensor_size`` / ``comm_size``
      (chakra_suite's, 5 µs / 1024 B / 65536 B).

    Returns ``{"npus", "paths", "nodes_per_rank"}`` (``nodes_per_rank``: None for the suite). Wrong or missing
    options raise a ConfigError naming the option."""
    o = dict(MICRO_OPTIONS)
    for key, value in options.items():
        dest = str(key).replace("-", "_")
        if dest not in MICRO_OPTIONS:
            from astra_sim.cliutil import did_you_mean

            hint = did_you_mean(dest, MICRO_OPTIONS)
            raise ConfigError(f"astra workload micro: unknown option {key!r}{hint}")
        o[dest] = value
    npus = o["npus"]
    _check_npus(npus)
    given = [k for k in _WHAT if o[k] is not None and o[k] is not False]
    if len(given) != 1:
        raise ConfigError("astra workload micro: give exactly one of " + ", ".join(_WHAT)
                          + (f" (got {', '.join(given)})" if given else ""))
    prefix = os.fspath(prefix)
    if o["chakra_suite"]:
        paths = _write_chakra_suite(prefix, npus, runtime=o["runtime"], tensor_size=o["tensor_size"],
                                    comm_size=o["comm_size"], first_id=o["first_id"],
                                    version=o["et_version"] or "1.0.0")
        return {"npus": npus, "paths": paths, "nodes_per_rank": None}
    size = None if o["size"] is None else parse_size(o["size"])
    common = dict(style=o["style"], ids=o["ids"], first_id=o["first_id"], version=o["et_version"])
    if o["collective"] is not None:
        trace = collective_trace(o["collective"], size, npus, name=o["name"], **common)
    elif o["p2p"] is not None:
        names = {"send": o["name"], "recv": o["name"]} if o["name"] else None
        trace = p2p_trace(o["p2p"], size, npus, shift=o["shift"], tag=o["tag"], names=names, **common)
    elif o["compute"] is not None:
        trace = compute_trace(o["compute"], npus, count=o["count"], dependent=o["dependent"], name=o["name"],
                              **common)
    elif o["mem_load"] is not None or o["mem_store"] is not None:
        kind = "load" if o["mem_load"] is not None else "store"
        trace = memory_trace(kind, parse_size(o[f"mem_{kind}"], f"--mem-{kind}"), npus, name=o["name"], **common)
    elif o["metadata_all_types"]:
        if o["style"] != "chakra":
            raise ConfigError("--metadata-all-types is chakra_generator's; add --style chakra")
        trace = metadata_all_types_trace(npus, ids=o["ids"] or "global", first_id=o["first_id"],
                                         version=o["et_version"] or "1.0.0")
    else:
        graph = o["graph"]
        spec, source = (graph, "<spec>") if isinstance(graph, dict) else load_graph_spec(graph)
        trace = graph_trace(spec, npus, source=source, **common)
    paths = write_trace(trace, prefix)
    return {"npus": npus, "paths": paths, "nodes_per_rank": sum(len(r) for r in trace.ranks) // npus}
