"""The reference's custom collectives: one Chakra ET per rank, ``<prefix>.<rank>.et``.

The system config names the prefix (``"all-reduce-implementation-custom": ["path/prefix"]``, also
``all-gather-``, ``reduce-scatter-``, ``all-to-all-``, or per workload node through
``per-node-custom-implementation``). Rank ``r`` (its position in the communicator: its index among
the group's NPUs sorted, or its rank without a group) runs the graph in ``<prefix>.<r>.et``:

* ``COMM_SEND_NODE``: a native send of the node's own ``comm_size`` bytes (it overrides the workload
  node's size) to algorithm rank ``comm_dst`` with tag ``comm_tag``; done when the message has
  arrived (the send handler);
* ``COMM_RECV_NODE``: a native receive of ``comm_size`` bytes from ``comm_src`` with tag ``comm_tag``;
* ``COMP_NODE``: ``duration_micros`` x 1000 ns (1 ns when 0) on the rank's event batching.

Algorithm ranks are translated through the communicator group (``comm_dst = 2`` is the group's
third NPU, in the order the group file lists them); without a group they are ranks. There is no
endpoint delay and no reduction cost; the collective (one stream, one phase, no chunking) ends when
the graph has drained. Data and control dependencies are treated alike.

This is ASTRA-sim 2.x's ``CustomAlgorithm`` node for node, including the order in which nodes that
become issuable together are issued: the reference iterates a copy of its dependency resolver's
``std::unordered_set`` of free node ids, and this module reproduces libstdc++'s iteration order of
that set (:class:`StdUnorderedSet`) from the same sequence of operations (building the resolver in
file order, finishing nodes, inserting freed children in the order of the parent's children set).
The order decides which of several same-tick sends the network sees first and, when one rank posts
several receives for the same (source, tag, size), which message each one gets.

Every file is read when a rank first needs it and checked before anything runs: a missing file, a
node type other than send/recv/comp, a missing or bad attribute, a dependency on an absent node, a
cycle, or a peer outside the communicator is an error naming the file and node (the reference
crashes, hangs, or silently skips the nodes of a cycle).
"""

from __future__ import annotations

import os

from astra_sim.chakra import ChakraError, get_int, read_et
from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.workload.graph import check_acyclic
from astra_sim.system.collectives import Algorithm

__all__ = ["ChakraCustomFormat", "ChakraCustomCollective", "ChakraCustomAlgorithm", "CustomGraph", "StdUnorderedSet"]

# Kinds of operation in a checked graph.
SEND, RECV, COMP = 0, 1, 2

_TYPE_KIND = {T.COMM_SEND_NODE: SEND, T.COMM_RECV_NODE: RECV, T.COMP_NODE: COMP}


# --------------------------------------------------------------------------- libstdc++'s hash set

#: ``_Prime_rehash_policy::_M_next_bkt``: bucket counts for small requests...
_FAST_BUCKETS = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
#: ... and libstdc++'s prime list from 17 on (read from libstdc++ 12 by calling _M_next_bkt).
_PRIMES = (
    17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109, 113, 127, 137,
    139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409, 439, 467,
    503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741,
    1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953,
    6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183,
    20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557,
    62233, 67307, 72817, 78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793, 159871,
    172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061, 379787, 410857,
    444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369, 1056323,
    1142821, 1236397, 1337629, 1447153, 1565659, 1693859, 1832561, 1982627, 2144977, 2320627, 2510653,
    2716249, 2938679, 3179303, 3439651, 3721303, 4026031, 4355707, 4712381, 5098259, 5515729, 5967347,
    6456007, 6984629, 7556579, 8175383, 8844859, 9569143, 10352717, 11200489, 12117689, 13109983,
    14183539, 15345007, 16601593, 17961079, 19431899, 21023161, 22744717, 24607243, 26622317, 28802401,
    31160981, 33712729, 36473443, 39460231, 42691603, 46187573, 49969847, 54061849, 58488943, 63278561,
    68460391, 74066549, 80131819, 86693767, 93793069, 101473717, 109783337, 118773397, 128499677,
    139022417, 150406843, 162723577, 176048909, 190465427, 206062531, 222936881, 241193053, 260944219,
    282312799, 305431229, 330442829, 357502601, 386778277, 418451333, 452718089, 489790921, 529899637,
    573292817, 620239453, 671030513, 725980837, 785430967, 849749479, 919334987, 994618837, 1076067617,
    1164186217, 1259520799, 1362662261, 1474249943, 1594975441, 1725587117, 1866894511, 2019773507,
    2185171673, 2364114217, 2557710269, 2767159799, 2993761039, 3238918481, 3504151727, 3791104843,
    4101556399, 4294967291,
)
_BEFORE_BEGIN = -1  # node ids are uint64, so -1 never is one


class StdUnorderedSet:
    """The iteration order of libstdc++'s ``std::unordered_set<uint64_t>`` (GCC 12, the library the
    reference is built with), for the operations the reference's dependency resolver uses.

    libstdc++ keeps one singly linked list of all elements; the elements of a bucket
    (``id % bucket_count``, ``std::hash`` of an integer being the identity) are contiguous in it.
    A new element goes first in its bucket's run, or first in the whole list when its bucket is
    empty; a rehash walks the old list and re-inserts each element that way; erasing never moves
    the others. The bucket count starts at 1, becomes 13 on the first insertion and then grows at
    load factor 1 to the next prime >= twice the old count (``_Prime_rehash_policy``). This class
    is that structure, with the "next" pointers in a dict (``-1`` is the list head). Values of an
    ``unordered_map`` do not affect its key order, so maps use this class too.
    """

    __slots__ = ("_next", "_buckets", "_bucket_count", "_count", "_next_resize")

    def __init__(self):
        self._next = {_BEFORE_BEGIN: None}
        self._buckets = {}  # bucket -> the element before its first element (or _BEFORE_BEGIN)
        self._bucket_count = 1
        self._count = 0
        self._next_resize = 0

    def __len__(self):
        return self._count

    def __contains__(self, key):
        return key >= 0 and key in self._next

    def __iter__(self):
        nxt = self._next
        key = nxt[_BEFORE_BEGIN]
        while key is not None:
            yield key
            key = nxt[key]

    def copy(self):
        other = StdUnorderedSet.__new__(StdUnorderedSet)
        other._next = dict(self._next)
        other._buckets = dict(self._buckets)
        other._bucket_count = self._bucket_count
        other._count = self._count
        other._next_resize = self._next_resize
        return other

    def _next_bucket_count(self, n):
        if n < len(_FAST_BUCKETS):
            if n == 0:
                return 1
            self._next_resize = _FAST_BUCKETS[n]
            return _FAST_BUCKETS[n]
        lo, hi = 0, len(_PRIMES)
        while lo < hi:
            mid = (lo + hi) // 2
            if _PRIMES[mid] < n:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(_PRIMES):  # past what any trace needs: any prime keeps the order rules
            raise ValueError(f"hash set of {n} buckets is beyond the emulated prime list")
        self._next_resize = _PRIMES[lo]
        return _PRIMES[lo]

    def _rehash(self, count):
        nxt = self._next
        p = nxt[_BEFORE_BEGIN]
        nxt[_BEFORE_BEGIN] = None
        buckets = {}
        first_bucket = 0
        while p is not None:
            following = nxt[p]
            b = p % count
            before = buckets.get(b)
            if before is None:
                nxt[p] = nxt[_BEFORE_BEGIN]
                nxt[_BEFORE_BEGIN] = p
                buckets[b] = _BEFORE_BEGIN
                if nxt[p] is not None:
                    buckets[first_bucket] = p
                first_bucket = b
            else:
                nxt[p] = nxt[before]
                nxt[before] = p
            p = following
        self._buckets = buckets
        self._bucket_count = count

    def add(self, key):
        """``insert(key)``; returns False when already present."""
        nxt = self._next
        if key in nxt:
            return False
        # _M_need_rehash(bucket_count, element_count, 1)
        wanted = self._count + 1
        if wanted > self._next_resize:
            min_buckets = max(wanted, 0 if self._next_resize else 11)
            if min_buckets >= self._bucket_count:
                self._rehash(self._next_bucket_count(max(min_buckets + 1, self._bucket_count * 2)))
            else:
                self._next_resize = self._bucket_count
        count = self._bucket_count
        b = key % count
        before = self._buckets.get(b)
        if before is not None:
            nxt[key] = nxt[before]
            nxt[before] = key
        else:
            first = nxt[_BEFORE_BEGIN]
            nxt[key] = first
            nxt[_BEFORE_BEGIN] = key
            if first is not None:
                self._buckets[first % count] = key
            self._buckets[b] = _BEFORE_BEGIN
        self._count += 1
        return True

    def discard(self, key):
        """``erase(key)``; returns False when absent."""
        nxt = self._next
        if key < 0 or key not in nxt:
            return False
        count = self._bucket_count
        b = key % count
        buckets = self._buckets
        first_before = buckets[b]
        prev = first_before
        while nxt[prev] != key:
            prev = nxt[prev]
        following = nxt[key]
        if prev == first_before:
            following_bucket = following % count if following is not None else 0
            if following is None or following_bucket != b:
                if following is not None:
                    buckets[following_bucket] = first_before
                del buckets[b]
        elif following is not None:
            following_bucket = following % count
            if following_bucket != b:
                buckets[following_bucket] = prev
        nxt[prev] = following
        del nxt[key]
        self._count -= 1
        return True


# --------------------------------------------------------------------------- one rank's graph


class CustomGraph:
    """One ``<prefix>.<position>.et``, checked, with the reference resolver's initial state.

    ``ops[id]``: ``(SEND, size, algo_dst, tag)``, ``(RECV, size, algo_src, tag)`` or
    ``(COMP, delay_ns)``. ``children[id]``: the children in the order the reference's finish_node
    visits them. ``parents[id]``: how many distinct parents. ``free``: the resolver's free set after
    loading (a :class:`StdUnorderedSet`, copied by every run). ``max_peer``: the largest algorithm
    rank named.
    """

    __slots__ = ("path", "ops", "children", "parents", "free", "max_peer", "names")

    def __init__(self, path):
        self.path = path
        try:
            et = read_et(path, keep_raw=False)
        except ChakraError as exc:
            raise WorkloadError(f"custom collective {exc}") from None
        nodes = et.nodes
        if not nodes:
            raise WorkloadError(f"{path}: custom collective graph has no nodes")
        ops = {}
        names = {}
        max_peer = -1
        for node in nodes:
            kind = _TYPE_KIND.get(node.type)
            if kind is None:
                raise WorkloadError(
                    f"{node.where}: a custom collective runs only COMM_SEND_NODE, COMM_RECV_NODE and "
                    f"COMP_NODE, not {node.type_name} (the reference would never finish it)"
                )
            names[node.id] = node.name
            if kind == COMP:
                delay = node.duration_micros * 1000
                ops[node.id] = (COMP, delay if delay > 0 else 1)
                continue
            peer_key = "comm_dst" if kind == SEND else "comm_src"
            try:
                size = get_int(node, "comm_size")
                peer = get_int(node, peer_key)
                tag = get_int(node, "comm_tag")
            except ChakraError as exc:
                raise WorkloadError(f"custom collective: {exc}") from None
            if size <= 0:
                raise WorkloadError(f"{node.where}: comm_size is {size}; a custom collective message needs > 0 bytes")
            if peer < 0:
                raise WorkloadError(f"{node.where}: {peer_key} is {peer}; algorithm ranks are >= 0")
            max_peer = max(max_peer, peer)
            ops[node.id] = (kind, size, peer, tag)
        self.ops = ops
        self.names = names
        self.max_peer = max_peer
        self._build_resolver(nodes)

    def _where(self, node_id):
        return f"{self.path}: node {node_id} ({self.names.get(node_id, '')!r})"

    def _build_resolver(self, nodes):
        """Replay the reference's DependancyResolver construction on its "enabled" layer (data and
        control dependencies together), checking the graph on the way."""
        keys = StdUnorderedSet()  # child_map_parent's keys, in order
        parents = {}  # id -> set of parent ids
        children = {}  # id -> StdUnorderedSet of child ids
        for node in nodes:
            enabled = StdUnorderedSet()
            for parent in node.data_deps:
                enabled.add(parent)
            for parent in node.ctrl_deps:
                enabled.add(parent)
            node_id = node.id
            if keys.add(node_id):
                parents[node_id] = set()
                children[node_id] = StdUnorderedSet()
            mine = parents[node_id]
            for parent in enabled:
                if keys.add(parent):
                    parents[parent] = set()
                    children[parent] = StdUnorderedSet()
                mine.add(parent)
                children[parent].add(node_id)
        ops = self.ops
        for node_id, node_parents in parents.items():
            for parent in node_parents:
                if parent not in ops:
                    raise WorkloadError(
                        f"{self._where(node_id)} depends on node {parent}, which is not in the file"
                    )
        free = StdUnorderedSet()
        for node_id in keys:
            if not parents[node_id]:
                free.add(node_id)
        self.children = {node_id: tuple(kids) for node_id, kids in children.items()}
        self.parents = {node_id: len(ps) for node_id, ps in parents.items()}
        self.free = free
        self._check_acyclic()

    def _check_acyclic(self):
        if not self.free:
            raise WorkloadError(f"{self.path}: every node of the custom collective waits for another (a cycle)")
        check_acyclic(self.path, self.children, self.parents, list(self.free), lambda n: self.names.get(n, ""),
                      "the custom collective's dependency graph")


# --------------------------------------------------------------------------- the format


class ChakraCustomFormat:
    """``*-implementation-custom: [prefix]`` where ``<prefix>.0.et`` exists."""

    def matches(self, path):
        return os.path.isfile(f"{os.fspath(path)}.0.et")

    def load(self, path, context):
        return ChakraCustomCollective(os.fspath(path), context)


class ChakraCustomCollective:
    """A loaded prefix; each position's file is read and checked once, when first needed."""

    def __init__(self, prefix, context=None):
        self.prefix = prefix
        self.total_npus = getattr(context, "total_npus", 0) or 0
        self._warn = getattr(context, "warn", None)
        self._graphs = {}

    def graph(self, position):
        graph = self._graphs.get(position)
        if graph is None:
            path = f"{self.prefix}.{position}.et"
            if not os.path.isfile(path):
                found = 0
                while os.path.isfile(f"{self.prefix}.{found}.et"):
                    found += 1
                raise ConfigError(
                    f"custom collective {self.prefix!r}: position {position} in the communicator needs "
                    f"{path}, which does not exist (found {self.prefix}.0.et .. {self.prefix}.{found - 1}.et: "
                    f"the algorithm has fewer ranks than the communicator)"
                )
            graph = self._graphs[position] = CustomGraph(path)
        return graph

    def make_algorithm(self, com_type, rank, position, group_npus, data_size):
        if position < 0:
            raise ConfigError(f"custom collective {self.prefix!r}: rank {rank} is not in its communicator group")
        if group_npus is not None and list(group_npus) != sorted(group_npus) and self._warn is not None:
            self._warn(
                f"custom collective {self.prefix!r}: communicator group {list(group_npus)} is not sorted; like the "
                "reference, a rank runs the file of its position among the sorted NPUs but algorithm ranks "
                "(comm_src/comm_dst) name NPUs in the listed order"
            )
        graph = self.graph(position)
        size = len(group_npus) if group_npus is not None else self.total_npus
        if size and graph.max_peer >= size:
            node_id = next(i for i, op in graph.ops.items() if op[0] != COMP and op[2] == graph.max_peer)
            what = f"communicator group {list(group_npus)}" if group_npus is not None else "the network"
            raise WorkloadError(
                f"{graph._where(node_id)} names algorithm rank {graph.max_peer}, but {what} has {size} NPUs"
            )
        return ChakraCustomAlgorithm(graph, com_type, rank, group_npus, data_size)


class ChakraCustomAlgorithm(Algorithm):
    """One rank's run of a :class:`CustomGraph` (the reference's ``CustomAlgorithm``)."""

    __slots__ = ("graph", "rank", "npus", "left", "free", "ongoing", "_done")

    def __init__(self, graph, com_type, rank, group_npus, data_size):
        self.graph = graph
        self.com_type = com_type
        self.rank = rank
        self.npus = None if group_npus is None else list(group_npus)
        self.data_size = data_size
        self.final_data_size = data_size
        self.left = dict(graph.parents)
        self.free = graph.free.copy()
        self.ongoing = 0

    def bind(self, stream):
        super().bind(stream)
        self._done = self._node_done

    def run_init(self):
        self._issue_free()

    def run_general(self, _arg=None):
        pass

    def run_received(self, _arg=None):
        pass

    def _issue_free(self):
        """Issue every free node, in the order the reference iterates its copy of the free set."""
        free = self.free
        if not len(free):
            return
        ops = self.graph.ops
        npus = self.npus
        sys = self.sys
        done = self._done
        for node_id in list(free):
            free.discard(node_id)
            self.ongoing += 1
            op = ops[node_id]
            kind = op[0]
            if kind == SEND:
                sys.native_send(op[2] if npus is None else npus[op[2]], op[1], op[3], done, node_id)
            elif kind == RECV:
                sys.native_recv(op[2] if npus is None else npus[op[2]], op[1], op[3], done, node_id)
            else:
                self._register(done, node_id, op[1])

    def _node_done(self, node_id):
        self.ongoing -= 1
        left = self.left
        free = self.free
        for child in self.graph.children[node_id]:
            count = left[child] - 1
            left[child] = count
            if count == 0:
                free.add(child)
        self._issue_free()
        if self.ongoing == 0 and not len(free):
            self._done = None
            self.finish()
