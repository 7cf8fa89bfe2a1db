"""Trace signatures: what must match between a rank's trace and its image under a relabelling
(:mod:`astra_folding.groups`), computed once per distinct trace."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from astra_sim.chakra import types as T
from astra_folding.groups import _DEFAULT_PG, FoldRefused

#: Attributes the symmetry search reads, and the types it can reason about.
_PLAIN_ATTRS = {"comm_type": int, "comm_src": int, "comm_dst": int, "pg_name": (str, int)}


@dataclass(frozen=True)
class TraceSignature:
    """What must match between a rank's trace and its image: everything but the peers and groups
    (``structure``, a digest), the peers of its sends and receives in node order (``peers``), the
    ``pg_name`` of every node that names one (``groups``), and what the symmetry checks need to know:
    the collective types run on the default group and on sub-groups, and whether the trace declares
    process groups or remote-memory accesses."""

    structure: bytes
    peers: tuple
    groups: tuple
    native_collectives: frozenset
    group_collectives: frozenset
    declares_groups: bool
    uses_memory: bool


def trace_signature(nodes, cache=None):
    """The :class:`TraceSignature` of a rank's list of nodes.

    ``cache``: a dict kept across the ranks of a workload (``id`` of a node object -> its part of the
    signature), while those nodes live; ranks often share node objects (``parse_et(shared=...)``), whose
    parts are then computed once."""
    digest = hashlib.blake2b(digest_size=20)
    update = digest.update
    peers = []
    groups = []
    native = set()
    grouped = set()
    declares = False
    memory = False
    part_of = cache.get if cache is not None else None
    for node in nodes:
        part = part_of(id(node)) if part_of is not None else None
        if part is None:
            part = _node_part(node)
            if cache is not None:
                cache[id(node)] = part
        structure, peer, pg, kind = part
        update(structure)
        if peer is not None:
            peers.append(peer)
        if pg is not _NO_PG:
            groups.append(pg)
        if kind is not None:
            what, value = kind
            if what == "native":
                native.add(value)
            elif what == "grouped":
                grouped.add(value)
            elif what == "declares":
                declares = True
            else:
                memory = True
    return TraceSignature(digest.digest(), tuple(peers), tuple(groups), frozenset(native), frozenset(grouped),
                          declares, memory)


_NO_PG = object()


def _node_part(node):
    """A node's part of its trace's signature: (digest of all but peers and group, its send/receive
    peers or None, its pg_name or _NO_PG, what it tells about the trace or None)."""
    attrs = node.attrs
    for key, kinds in _PLAIN_ATTRS.items():
        value = attrs.get(key)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            # the workload layer names the node and the attribute; folding cannot reason about it
            raise FoldRefused(f"node {node.id} has a {key} of type {type(value).__name__}")
    kept = [(k, v) for k, v in attrs.items() if k not in ("comm_src", "comm_dst", "pg_name")]
    structure = hashlib.blake2b(repr((node.id, node.name, node.type, node.ctrl_deps, node.data_deps,
                                      node.duration_micros, node.inputs_values, node.inputs_shapes,
                                      node.inputs_types, kept)).encode(), digest_size=16).digest()
    node_type = node.type
    peer = None
    if node_type == T.COMM_SEND_NODE or node_type == T.COMM_RECV_NODE:
        peer = (attrs.get("comm_src"), attrs.get("comm_dst"))
    pg = attrs["pg_name"] if "pg_name" in attrs else _NO_PG
    kind = None
    if node_type == T.COMM_COLL_NODE:
        comm_type = attrs.get("comm_type")
        if comm_type is None:  # the search sorts collective types; the workload layer names the node
            raise FoldRefused(f"node {node.id} is a collective without comm_type")
        kind = ("native", comm_type) if attrs.get("pg_name", "") in _DEFAULT_PG else ("grouped", comm_type)
    elif node_type == T.METADATA_NODE and node.inputs_values:
        kind = ("declares", True)
    elif node_type == T.MEM_LOAD_NODE or node_type == T.MEM_STORE_NODE:
        kind = ("memory", True)
    return structure, peer, pg, kind
