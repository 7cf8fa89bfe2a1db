"""Folding the ``flow`` backend: a folded run simulates one rank per class of a rank symmetry ``G``, and the
max-min fair network carries only the simulated ranks' flows, each standing for its ``|G|`` images.

When it is exact. Let every element ``g`` of ``G`` (the run's relabellings of ranks) extend to an automorphism
of the graph (nodes, links with their bandwidths and latencies, switch latencies) and let the extensions form a
group acting as ``G`` (checked: :func:`extend`, :func:`link_orbits`). Then

* routing is equivariant: the candidate paths are defined by the graph alone (fewest hops, then fewest NPUs
  forwarding, then the widest), so ``g`` maps the candidates of ``s -> d`` onto those of ``g(s) -> g(d)``, as long
  as the depth-first search is not cut at ``max_paths`` (the kept subset would depend on link numbering: the run
  is then abandoned, :class:`FoldAbandoned`). The series runs (``FlowRouting._series_runs``) are structural too.
* the ECMP choice is equivariant with ``ecmp="split"`` (every candidate gets ``size / n``) or when a pair has one
  candidate. ``ecmp="hash"`` picks candidate ``splitmix64(src, dst, k) mod n`` of a list ordered by link index:
  a relabelled pair picks a path unrelated to the relabelled path, so hash ECMP over several paths does not fold.
* the flows in progress are the images ``g(f)`` of the simulated flows ``f`` (the group acts freely on ranks,
  so the images are distinct and every flow is one of them), a set the automorphisms keep. A link ``c`` then
  carries ``|Stab(c)| x #{links of f's path in c's orbit}`` flows per simulated flow ``f`` (``|Stab(c)| =
  |G| / |orbit of c|``): each orbit is represented by its lowest-numbered link (its canonical link) and each
  flow's links by their canonical links with those multiplicities (weights).
* the max-min filling (``FlowNetwork._recompute``) is computed so that its floats are a function of the
  per-link (capacity, weighted flow count) only: all links whose fair share equals the lowest one are frozen in
  one step at that level, each link's capacity drops by ``level x frozen weight`` in one operation, and the slow
  flows' allocation is summed in increasing rate order. Orbit-mates start equal, so they stay equal bit for bit,
  and the canonical link's sequence of operations in the folded run is the one every mate has unfolded (same
  products, same differences, same heap decisions: a mate's heap key equals its canonical link's, and ties pop
  the lowest index, the canonical one). Each simulated flow therefore gets the rate its images get unfolded,
  and its end, arrival and statistics follow.
* the recomputation runs at the end of each nanosecond (``EventEngine.at_end_of_ns``), so which flows one
  recomputation sees does not depend on the order of that nanosecond's events (which the fold cannot know).
  A message's arrival is scheduled with the history of the event that sent it (the folded engine's check of
  same-nanosecond order, :mod:`astra_folding.engine`, then sees the chain the unfolded order follows: arrivals
  of one wake-up are in send order).

What it refuses (the run is then simulated unfolded, the report's ``settings.fold`` says why): hash ECMP on a
pair with several paths, a graph that no relabelling of the symmetry maps onto itself (an asymmetric placement,
failed links, a rotation of hosts across the leaves of a 2-tier tree), fixed routes (``route_fn``), links that
fail mid-run. A timeline's link-load tracks show each orbit's canonical link only (as the ``congestion`` backend's).

Per dimension :func:`symmetry_kinds` tells the fold planner which relabellings the graph keeps: ``"any"`` when
the whole rotation and a transposition of the dimension's coordinates are automorphisms, ``"rotation"`` when
only the rotation is, else ``"none"`` (the dimension is not folded, e.g. the hosts of a 2-tier tree with several
leaves: only blocks of one leaf are automorphisms, which the planner's kinds cannot say).
"""

from __future__ import annotations

from collections import Counter

from astra_sim.errors import FoldAbandoned
from astra_folding.symmetry import BlockShift, shift_image


class NotAutomorphism(Exception):
    """A rank relabelling that does not extend to an automorphism of the graph (the message says where)."""


def _adjacency(graph):
    adj = {name: [] for name in graph.nodes}
    for link in graph.links:
        adj[link.src].append((0, link.dst, link.bandwidth_bytes_per_ns, link.latency_ns))
        adj[link.dst].append((1, link.src, link.bandwidth_bytes_per_ns, link.latency_ns))
    return adj


def extend(graph, perm, adj=None):
    """The node map (``{name: image}``) of an automorphism of ``graph`` that moves rank ``r``'s node to rank
    ``perm[r]``'s, found layer by layer outwards from the NPUs: a node's image is a node of its layer with the
    same kind, switch latency and links (bandwidth, latency, direction) to the images of its mapped neighbours;
    among indistinguishable nodes a node maps to itself when it can. Raises :class:`NotAutomorphism`."""
    adj = adj if adj is not None else _adjacency(graph)
    nodes = graph.nodes
    latency = graph.switch_latency_ns
    image = {}
    for rank, name in enumerate(graph.rank_node):
        image[name] = graph.rank_node[perm[rank]]
    if len(set(image.values())) != len(image):
        raise NotAutomorphism("the relabelling is not a permutation of the ranks")
    layer = sorted({other for name in image for _d, other, _b, _l in adj[name] if other not in image})
    while layer:
        inside = set(layer)

        def signature(name, through):
            return (nodes[name], latency.get(name, 0.0),
                    tuple(sorted((d, through(o), b, l) for d, o, b, l in adj[name] if o in image)))

        by_key = {}
        for name in layer:
            by_key.setdefault(signature(name, lambda o: o), []).append(name)
        for key, sources in by_key.items():
            target_key = (key[0], key[1], tuple(sorted((d, image[o], b, l) for d, o, b, l in key[2])))
            targets = by_key.get(target_key)
            if targets is None or len(targets) != len(sources):
                raise NotAutomorphism(f"node {sources[0]!r} has no image with the same links to the images of its "
                                      "neighbours")
            if set(targets) == set(sources):
                image.update((s, s) for s in sources)
            else:
                image.update(zip(sources, targets))
        layer = sorted({o for name in inside for _d, o, _b, _l in adj[name] if o not in image})
    for name in nodes:  # unreachable from every rank: left in place
        image.setdefault(name, name)
    before = Counter((link.src, link.dst, link.bandwidth_bytes_per_ns, link.latency_ns) for link in graph.links)
    after = Counter((image[s], image[d], b, l) for (s, d, b, l) in before.elements())
    if before != after:
        (s, d, b, l), _n = next(iter((after - before).items()))
        raise NotAutomorphism(f"the image {s} -> {d} ({b} bytes/ns, {l} ns) of a link is not a link of the graph")
    return image


def link_map(graph, image):
    """Per link index, the index of its image under the node map ``image`` (parallel links in order)."""
    slots = {}
    for link in graph.links:
        slots.setdefault((link.src, link.dst, link.bandwidth_bytes_per_ns, link.latency_ns), []).append(link.index)
    used = Counter()
    out = []
    for link in graph.links:
        key = (image[link.src], image[link.dst], link.bandwidth_bytes_per_ns, link.latency_ns)
        out.append(slots[key][used[key]])
        used[key] += 1
    return out


def _dimension_strides(npus_per_dim):
    strides = [1]
    for count in npus_per_dim[:-1]:
        strides.append(strides[-1] * count)
    return strides


def symmetry_kinds(graph, npus_per_dim):
    """Per dimension ``"any"``, ``"rotation"`` or ``"none"`` (see the module docstring), and the reasons of the
    dimensions that are not ``"any"``."""
    adj = _adjacency(graph)
    total = len(graph.rank_node)
    kinds, notes = [], []
    for dim, (stride, count) in enumerate(zip(_dimension_strides(npus_per_dim), npus_per_dim)):
        if count == 1:
            kinds.append("any")
            continue
        rotation = BlockShift(stride, count, count)
        try:
            extend(graph, [shift_image(rotation, r) for r in range(total)], adj)
        except NotAutomorphism as exc:
            kinds.append("none")
            notes.append(f"dimension {dim}: rotating its coordinates is not an automorphism of the graph ({exc})")
            continue
        if count == 2:
            kinds.append("any")
            continue

        def swap(rank, stride=stride, count=count):
            digit = (rank // stride) % count
            return rank + ((1 - 2 * digit) * stride if digit < 2 else 0)

        try:
            extend(graph, [swap(r) for r in range(total)], adj)
            kinds.append("any")
        except NotAutomorphism as exc:
            kinds.append("rotation")
            notes.append(f"dimension {dim}: only rotations of its coordinates keep the graph ({exc})")
    return kinds, notes


def link_orbits(graph, symmetry):
    """``(canonical, weight)`` per link index: the lowest index of the link's orbit under ``symmetry``'s group, and
    ``|G| / orbit size`` (how many flows on the canonical link each simulated flow's hop through the orbit stands
    for). Raises :class:`FoldAbandoned` when a generator is not an automorphism or the extensions do not act as
    the group (commuting, each of its block's order)."""
    adj = _adjacency(graph)
    total = len(graph.rank_node)
    maps = []
    for shift in symmetry.shifts:
        try:
            node_map = extend(graph, [shift_image(shift, r) for r in range(total)], adj)
        except NotAutomorphism as exc:
            raise FoldAbandoned(f"flow: the relabelling {shift.describe()} is not an automorphism of the network "
                                f"graph: {exc}") from None
        maps.append((shift, node_map))
    for shift, node_map in maps:
        power = {name: name for name in node_map}
        for _ in range(shift.block):
            power = {name: node_map[v] for name, v in power.items()}
        if any(name != v for name, v in power.items()):
            raise FoldAbandoned(f"flow: the graph automorphism found for {shift.describe()} does not have order "
                                f"{shift.block}")
    for i, (_a, first) in enumerate(maps):
        for _b, second in maps[i + 1:]:
            if any(first[second[v]] != second[first[v]] for v in first):
                raise FoldAbandoned("flow: the graph automorphisms found for the symmetry's generators do not commute")
    n = len(graph.links)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for _shift, node_map in maps:
        for i, j in enumerate(link_map(graph, node_map)):
            a, b = find(i), find(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    roots = [find(i) for i in range(n)]
    sizes = Counter(roots)
    order = symmetry.order
    weight = [0] * n
    for root, size in sizes.items():
        if order % size:
            raise FoldAbandoned(f"flow: link {root}'s orbit has {size} links, which does not divide the group's "
                                f"order {order}")
        weight[root] = order // size
    return roots, weight


def network_kinds(network):
    """:meth:`FlowNetwork.symmetry_dims`: :func:`symmetry_kinds` of its graph (computed once; why a dimension is
    not ``"any"`` goes to ``describe()``'s ``fold_notes``), or None with fixed routes or links failing mid-run."""
    if network._no_fold is not None or network.route_fn is not None:
        return None
    if network._fold_kinds is None:
        network._fold_kinds = symmetry_kinds(network.graph, network.npus_per_dim)
        if network._fold_kinds[1]:
            network.description["fold_notes"] = list(network._fold_kinds[1])
    return list(network._fold_kinds[0])


def fold_network(network, symmetry):
    """:meth:`FlowNetwork.fold_links`: weigh every route by link orbit (:func:`link_orbits`), or raise
    :class:`FoldAbandoned` (links failing mid-run; hash ECMP where rank 0 already has several paths to the last
    rank: a send finds the others)."""
    if network._no_fold is not None:
        raise FoldAbandoned(f"flow: {network._no_fold}")
    if network.ecmp == "hash":
        far = len(network.graph.rank_node) - 1
        if far > 0 and len(network.routes(0, far)) > 1:
            raise FoldAbandoned(f"flow: ECMP hash picks one of the {len(network.routes(0, far))} paths from 0 to {far} "
                                "by a hash of the rank numbers, which relabelled ranks do not keep (ecmp split, or "
                                "single-path routes, fold)")
    network._canonical, network._weight = link_orbits(network.graph, symmetry)
    network._order = symmetry.order
    network._routes = {}  # routes are weighted by orbit from now on
    network.description["folded_links"] = len(set(network._canonical))
