"""Builders: a :class:`~astra_network_congestion.graph.NetworkGraph` plus a routing function.

A *routing function* is ``route_fn(src_rank, dst_rank) -> sequence of link indices`` (indices into
``graph.links``), the links a message takes from ``graph.rank_node[src_rank]`` to
``graph.rank_node[dst_rank]``, in order. :class:`~astra_network_congestion.congestion.CongestionNetwork`
calls it at most once per (src, dst) pair and caches the answer.

* :func:`from_analytical`: the reference's analytical YAML (Ring / FullyConnected / Switch per
  dimension) with the congestion-aware model's devices, links and dimension-ordered routes.
* :func:`shortest_path_router`: a deterministic shortest-path routing function for any graph
  (e.g. one built from an InfraGraph infrastructure).
"""

from __future__ import annotations

from astra_sim.errors import ConfigError

from astra_network_congestion.graph import NPU, SWITCH, NetworkGraph

RING, FULLY_CONNECTED, SWITCH_TOPOLOGY = "Ring", "FullyConnected", "Switch"


def npu_name(rank):
    return f"npu{rank}"


def switch_name(dim, group):
    return f"d{dim}.g{group}.switch"


def fabric_options(options):
    """``from_analytical``'s keyword arguments from run options: ``fabric_nodes_per_leaf`` and
    ``fabric_oversubscription`` (set by ``astra cluster``'s ``fabric:`` key)."""
    options = options or {}
    return {"nodes_per_leaf": options.get("fabric_nodes_per_leaf"),
            "oversubscription": options.get("fabric_oversubscription")}


def check_fabric(nodes_per_leaf, oversubscription, where="option fabric_nodes_per_leaf"):
    """``(nodes_per_leaf, oversubscription)`` checked: an integer >= 1 (or None: no tiers) and a number >= 1."""
    if nodes_per_leaf is None:
        return None, 1.0
    if isinstance(nodes_per_leaf, bool) or not isinstance(nodes_per_leaf, int) or nodes_per_leaf < 1:
        raise ConfigError(f"{where}: expected an integer >= 1 (members of the last Switch dimension per leaf "
                          f"switch), got {nodes_per_leaf!r}")
    ratio = 1.0 if oversubscription is None else oversubscription
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 1.0 <= ratio < float("inf"):
        raise ConfigError(f"option fabric_oversubscription: expected a number >= 1 (a leaf's downlink over its "
                          f"uplink capacity), got {oversubscription!r}")
    return nodes_per_leaf, float(ratio)


def from_analytical(config, nodes_per_leaf=None, oversubscription=1.0):
    """Devices, directed links and routing of the congestion-aware analytical model.

    ``config`` is an :class:`astra_network_analytical.NetworkConfig` (from
    ``parse_network_config``). Dimension 0 is the least significant digit of a rank id. Each
    dimension ``d`` instantiates its basic topology over every *group* of NPUs that differ only in
    coordinate ``d`` (group number = the rank with coordinate ``d`` removed, lower dimensions
    least significant, the order in which the reference creates them):

    * ``Ring``: links ``k -> k+1`` and ``k+1 -> k`` for consecutive members, plus the closing pair
      ``n-1 <-> 0`` when ``n > 2`` (a 2-member ring has one link per direction; the official 1-D
      reference aborts there, the multi-dimensional branch does the same as here);
    * ``FullyConnected``: one link per ordered pair of members;
    * ``Switch``: one switch node ``d<d>.g<group>.switch`` per group, links member <-> switch.

    Routing is dimension-ordered (as the reference's multi-dimensional branch): walk dimensions
    0..D-1 and, in each one where the current coordinate differs from the destination's, append
    that group's route: Ring = the shorter direction, clockwise (increasing coordinate) on ties;
    FullyConnected = the direct link; Switch = member -> switch -> member.

    ``nodes_per_leaf`` (the run option ``fabric_nodes_per_leaf``) builds the *last* dimension, a
    ``Switch``, as two tiers instead of one switch, so that traffic of different NPUs can share links
    (a platform's scale-out fabric: one group per rail). Each group's members are split, in order,
    into leaves of ``nodes_per_leaf`` (``d<d>.g<group>.leaf<j>``), which hang off one spine
    (``d<d>.g<group>.spine``) by one uplink per direction of ``members x bandwidth /
    oversubscription``: the spine layer taken as one switch with perfect load balance, its ECMP
    paths as one link of their total capacity. Members keep their own links (the dimension's
    bandwidth and latency) to their leaf; uplinks add no latency (the dimension's latency is already
    what a crossing costs), so with ``oversubscription`` 1 a lone message takes the time it takes on
    the single switch, and only traffic that shares an uplink beyond its capacity slows down.
    A message between leaves goes member -> leaf -> spine -> leaf -> member.

    Returns ``(graph, route_fn)``.
    """
    nodes_per_leaf, oversubscription = check_fabric(nodes_per_leaf, oversubscription)
    last = len(config.topology) - 1
    if nodes_per_leaf is not None and config.topology[last] != SWITCH_TOPOLOGY:
        raise ConfigError(f"{config.path}: option fabric_nodes_per_leaf needs a Switch as the last dimension, got "
                          f"{config.topology[last]!r}")
    graph = NetworkGraph(source=str(config.path))
    total = config.total_npus
    names = [npu_name(rank) for rank in range(total)]
    for name in names:
        graph.add_node(name, NPU)
    link_of = {}  # (node id, node id) -> link index; node ids: ranks, then switches

    def connect(a, b, bandwidth, latency, bidirectional):
        first = len(graph.links)
        graph.add_link(names[a], names[b], bandwidth, latency, bidirectional=bidirectional)
        link_of[(a, b)] = first
        if bidirectional:
            link_of[(b, a)] = first + 1

    dims = []  # (stride, count, topology, switch ids per group or None)
    stride = 1
    for dim, (topology, count, bandwidth, latency) in enumerate(
        zip(config.topology, config.npus_count, config.bandwidth_gib_per_s, config.latency_ns)
    ):
        switches = [] if topology == SWITCH_TOPOLOGY else None
        span = stride * count
        for high in range(total // span):
            for low in range(stride):
                group = high * stride + low
                base = high * span + low
                members = [base + k * stride for k in range(count)]
                if topology == RING:
                    for k in range(count - 1):
                        connect(members[k], members[k + 1], bandwidth, latency, True)
                    if count > 2:
                        connect(members[-1], members[0], bandwidth, latency, True)
                elif topology == FULLY_CONNECTED:
                    for a in members:
                        for b in members:
                            if a != b:
                                connect(a, b, bandwidth, latency, False)
                elif topology == SWITCH_TOPOLOGY and dim == last and nodes_per_leaf is not None:
                    spine = len(names)
                    names.append(f"d{dim}.g{group}.spine")
                    graph.add_node(names[spine], SWITCH)
                    leaf_of = {}
                    for j in range(0, count, nodes_per_leaf):
                        chunk = members[j:j + nodes_per_leaf]
                        leaf = len(names)
                        names.append(f"d{dim}.g{group}.leaf{j // nodes_per_leaf}")
                        graph.add_node(names[leaf], SWITCH)
                        for a in chunk:
                            connect(a, leaf, bandwidth, latency, True)
                            leaf_of[a] = leaf
                        connect(leaf, spine, len(chunk) * bandwidth / oversubscription, 0.0, True)
                    switches.append((leaf_of, spine))
                elif topology == SWITCH_TOPOLOGY:
                    switch = len(names)
                    names.append(switch_name(dim, group))
                    graph.add_node(names[switch], SWITCH)
                    switches.append(switch)
                    for a in members:
                        connect(a, switch, bandwidth, latency, True)
                else:  # parse_network_config rejects these already
                    raise ConfigError(f"{config.path}: topology[{dim}] {topology!r} is not supported")
        dims.append((stride, count, topology, switches))
        stride = span
    graph.set_ranks(names[:total])
    graph.npus_per_dim = list(config.npus_count)

    def route_fn(src, dst):
        path = []
        current = src
        for stride, count, topology, switches in dims:
            a = (current // stride) % count
            b = (dst // stride) % count
            if a == b:
                continue
            base = current - a * stride
            target = base + b * stride
            if topology == RING:
                clockwise = (b - a) % count
                step = -1 if count - clockwise < clockwise else 1
                k = a
                while k != b:
                    nxt = (k + step) % count
                    path.append(link_of[(base + k * stride, base + nxt * stride)])
                    k = nxt
            elif topology == FULLY_CONNECTED:
                path.append(link_of[(current, target)])
            else:
                span = stride * count
                switch = switches[(current // span) * stride + current % stride]
                if isinstance(switch, tuple):  # two tiers: up to the spine only between leaves
                    leaf_of, spine = switch
                    up, down = leaf_of[current], leaf_of[target]
                    path.append(link_of[(current, up)])
                    if up != down:
                        path.append(link_of[(up, spine)])
                        path.append(link_of[(spine, down)])
                    path.append(link_of[(down, target)])
                else:
                    path.append(link_of[(current, switch)])
                    path.append(link_of[(switch, target)])
            current = target
        return path

    return graph, route_fn


def shortest_path_router(graph):
    """A routing function for any :class:`NetworkGraph`: a fewest-hops path between the two ranks'
    nodes that passes no other NPU; among those, the first in the order of link indices (at every
    node the lowest-numbered out-link that keeps the path shortest), the same path as
    ``graph.shortest_paths(...)[0]`` wherever that one avoids other NPUs. Hop distances are
    computed once per destination node (one reverse breadth-first search) and cached."""
    rank_node = graph.rank_node
    nodes = graph.nodes
    out_links = graph.out_links
    reverse = {}
    for link in graph.links:
        reverse.setdefault(link.dst, []).append(link)
    distances = {}  # destination node -> {node: hops to it, through switches only}

    def distances_to(dst):
        dist = distances.get(dst)
        if dist is None:
            dist = {dst: 0}
            frontier = [dst]
            while frontier:
                nxt = []
                for node in frontier:
                    hops = dist[node] + 1
                    for link in reverse.get(node, ()):
                        src = link.src
                        if src not in dist:
                            dist[src] = hops
                            # An NPU can start a route but never forward one.
                            if nodes[src] != NPU:
                                nxt.append(src)
                frontier = nxt
            distances[dst] = dist
        return dist

    def route_fn(src, dst):
        a, b = rank_node[src], rank_node[dst]
        dist = distances_to(b)
        if a not in dist:
            raise ConfigError(f"{graph.source}: no path from {a!r} (rank {src}) to {b!r} (rank {dst}) "
                              "that avoids other NPUs")
        path = []
        node = a
        while node != b:
            want = dist[node] - 1
            for link in out_links[node]:
                nxt = link.dst
                if dist.get(nxt) == want and (nxt == b or nodes[nxt] != NPU):
                    path.append(link.index)
                    node = nxt
                    break
        return path

    return route_fn
