"""Trace signatures: what must match between a rank's trace and its image under a relabelling
(:mod:`astra_folding.groups`).

The search (:mod:`astra_folding.search`) reads them through :class:`LazySignature`, which computes only what a
comparison needs: what the trace tells about its collectives in one cheap pass, the digests of the nodes where
two traces hold different node objects until one differs (ranks of a pipeline differ in their first nodes: a
run with no symmetry digests a few nodes, not every node; data-parallel replicas share their kernels' node
objects: only their sends, receives and collectives are digested), and its peers and groups only when its
structure matched."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import compress, count
from operator import attrgetter, is_not, methodcaller, not_, or_

from astra_sim.chakra import types as T
from astra_folding.groups import _DEFAULT_PG, FoldRefused

#: Attributes the symmetry search reads, and the types it can reason about.
_PLAIN_ATTRS = {"comm_type": int, "comm_src": int, "comm_dst": int, "pg_name": (str, int)}
#: Attributes left out of a node's structure digest (the peers and the group, compared relabelled).
_RELABELLED = ("comm_src", "comm_dst", "pg_name")
_PLAIN_KEYS = frozenset(_PLAIN_ATTRS)
#: Node types that tell the search something (or whose peers it relabels), whatever their attributes.
_TELLING_TYPES = frozenset({T.COMM_COLL_NODE, T.METADATA_NODE, T.MEM_LOAD_NODE, T.MEM_STORE_NODE,
                            T.COMM_SEND_NODE, T.COMM_RECV_NODE})
_ATTRS, _TYPE, _KEYS = attrgetter("attrs"), attrgetter("type"), methodcaller("keys")
_APART_FROM_PLAIN = methodcaller("isdisjoint", _PLAIN_KEYS)  # on a keys view: looks the 4 names up


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

    def same_structure(self, other):
        return self.structure == other.structure


def trace_signature(nodes, cache=None):
    """The whole :class:`TraceSignature` of a rank's list of nodes (every node digested).

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


class NodeCache:
    """What :class:`LazySignature` s of one workload share while its nodes live (ranks often share node objects:
    ``parse_et(shared=...)``): each node object's structure digest and what it tells about its trace."""

    __slots__ = ("digests", "kinds")

    def __init__(self):
        self.digests = {}  # id of a node -> its structure digest
        self.kinds = {}  # id of a node -> what it tells about its trace and whether it is relabelled (_node_kind)

    def digest(self, node):
        found = self.digests.get(id(node))
        if found is None:
            found = self.digests[id(node)] = _structure_digest(node)
        return found


class LazySignature:
    """A rank's trace signature, computed as far as the search asks (the same answers as
    :class:`TraceSignature`'s: equal structures, the same peers, groups and collectives).

    Made with one pass over the nodes (in C but for the few that name a peer, a group or a collective; each
    node object read once per ``cache``, a :class:`NodeCache` the ranks share) that reads what the symmetry
    checks need (the collective types on the default group and on sub-groups, process groups declared,
    remote memory) and refuses, as :func:`trace_signature` does, a node whose ``comm_*`` or ``pg_name``
    attribute folding cannot reason about. Structures are compared pairwise: the positions where the two
    traces hold the same node object are skipped in C, the others digested (once per node object) until one
    differs; peers and groups are read when asked."""

    __slots__ = ("nodes", "_cache", "_alike", "_relabelling", "_relabelled", "native_collectives",
                 "group_collectives", "declares_groups", "uses_memory")

    def __init__(self, nodes, cache=None):
        self.nodes = nodes
        self._cache = cache = NodeCache() if cache is None else cache
        self._alike = {}  # id of another LazySignature -> whether their structures are the same
        self._relabelled = None  # (peers, groups), once asked
        # In C: the nodes that name a peer, a group or a collective type, or whose type tells something (most
        # nodes, kernels, do neither); only those are read in Python, in trace order (the first refusal wins).
        apart = map(_APART_FROM_PLAIN, map(_KEYS, map(_ATTRS, nodes)))
        telling = compress(nodes, map(or_, map(not_, apart), map(_TELLING_TYPES.__contains__, map(_TYPE, nodes))))
        kinds = cache.kinds
        facts = set()
        relabelling = []  # the nodes whose peers or group the search relabels (sends, receives, group nodes)
        for node in telling:
            kind = kinds.get(id(node))
            if kind is None:
                kind = kinds[id(node)] = _node_kind(node)
            fact, relabels = kind
            if fact is not None:
                facts.add(fact)
            if relabels:
                relabelling.append(node)
        self._relabelling = relabelling
        self.native_collectives = frozenset(value for what, value in facts if what == "native")
        self.group_collectives = frozenset(value for what, value in facts if what == "grouped")
        self.declares_groups = ("declares", True) in facts
        self.uses_memory = ("memory", True) in facts

    def same_structure(self, other):
        """Whether the two traces are alike but for peers and groups (as equal ``structure`` digests say)."""
        if not isinstance(other, LazySignature):
            return self.structure == other.structure
        mine, theirs = self.nodes, other.nodes
        if mine is theirs:
            return True
        if len(mine) != len(theirs):
            return False
        alike = self._alike.get(id(other))
        if alike is None:
            digest = self._cache.digest
            alike = True
            for index in compress(count(), map(is_not, mine, theirs)):
                if digest(mine[index]) != digest(theirs[index]):
                    alike = False
                    break
            self._alike[id(other)] = other._alike[id(self)] = alike
        return alike

    @property
    def structure(self):
        """:class:`TraceSignature`'s ``structure`` (every node digested)."""
        whole = hashlib.blake2b(digest_size=20)
        digest = self._cache.digest
        for node in self.nodes:
            whole.update(digest(node))
        return whole.digest()

    @property
    def peers(self):
        return self._peers_and_groups()[0]

    @property
    def groups(self):
        return self._peers_and_groups()[1]

    def _peers_and_groups(self):
        if self._relabelled is None:
            peers, groups = [], []
            for node in self._relabelling:
                node_type = node.type
                attrs = node.attrs
                if node_type == T.COMM_SEND_NODE or node_type == T.COMM_RECV_NODE:
                    peers.append((attrs.get("comm_src"), attrs.get("comm_dst")))
                if "pg_name" in attrs:
                    groups.append(attrs["pg_name"])
            self._relabelled = (tuple(peers), tuple(groups))
        return self._relabelled


_NO_PG = object()


def _check_plain(node, attrs):
    for key, kinds in _PLAIN_ATTRS.items():
        value = attrs.get(key)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            # the workload layer names the node and the attribute; folding cannot reason about it
            raise FoldRefused(f"node {node.id} has a {key} of type {type(value).__name__}")


def _collective_kind(node):
    comm_type = node.attrs.get("comm_type")
    if comm_type is None:  # the search sorts collective types; the workload layer names the node
        raise FoldRefused(f"node {node.id} is a collective without comm_type")
    native = node.attrs.get("pg_name", "") in _DEFAULT_PG
    shared = _COLLECTIVE_KINDS[native]
    kind = shared.get(comm_type)
    return kind if kind is not None else shared.setdefault(comm_type, ("native" if native else "grouped", comm_type))


def _structure_digest(node):
    """The digest of all a node holds but its peers and group."""
    kept = [(k, v) for k, v in node.attrs.items() if k not in _RELABELLED]
    return hashlib.blake2b(repr((node.id, node.name, node.type, node.ctrl_deps, node.data_deps,
                                 node.duration_micros, node.inputs_values, node.inputs_shapes,
                                 node.inputs_types, kept)).encode(), digest_size=16).digest()


def _node_kind(node):
    """``(fact, relabels)``: what a node tells about its trace (``("native" | "grouped", comm_type)``,
    ``("declares", True)``, ``("memory", True)`` or None) and whether the search relabels its peers or group
    (a send, a receive, a node naming a group). :class:`FoldRefused` for attributes folding cannot reason
    about. The answers are shared objects: a run reads tens of thousands of nodes, and new tuples would wake
    the garbage collector, whose full passes over the run's millions of objects cost more than the reading."""
    attrs = node.attrs
    if not attrs.keys().isdisjoint(_PLAIN_KEYS):
        _check_plain(node, attrs)
    node_type = node.type
    relabels = node_type == T.COMM_SEND_NODE or node_type == T.COMM_RECV_NODE or "pg_name" in attrs
    fact = None
    if node_type == T.COMM_COLL_NODE:
        fact = _collective_kind(node)
    elif node_type == T.METADATA_NODE and node.inputs_values:
        fact = _DECLARES
    elif node_type == T.MEM_LOAD_NODE or node_type == T.MEM_STORE_NODE:
        fact = _MEMORY
    shared = _KINDS[relabels]
    kind = shared.get(fact)
    return kind if kind is not None else shared.setdefault(fact, (fact, relabels))


_DECLARES, _MEMORY = ("declares", True), ("memory", True)
_KINDS = {False: {}, True: {}}  # relabels -> fact -> (fact, relabels)
_COLLECTIVE_KINDS = {True: {}, False: {}}  # on the default group -> comm_type -> ("native" | "grouped", it)


def _node_part(node):
    """A node's part of its trace's signature: (digest of all but peers and group, its send/receive
    peers or None, its pg_name or _NO_PG, what it tells about the trace or None)."""
    kind = _node_kind(node)[0]
    attrs = node.attrs
    node_type = node.type
    peer = None
    if node_type == T.COMM_SEND_NODE or node_type == T.COMM_RECV_NODE:
        peer = (attrs.get("comm_src"), attrs.get("comm_dst"))
    pg = attrs["pg_name"] if "pg_name" in attrs else _NO_PG
    return _structure_digest(node), peer, pg, kind
