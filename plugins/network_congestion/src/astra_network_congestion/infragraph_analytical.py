"""The analytical equivalent of an InfraGraph network: its logical dimensions (found from the graph when
not given) and, per dimension, the topology kind, NPU count, bandwidth and latency that the analytical
backends take (`astra infragraph --to-analytical`)."""

from __future__ import annotations

import math

from astra_sim.errors import ConfigError

from astra_network_congestion.graph import NPU
from astra_network_congestion.infragraph import GIB, ROUTER_SUFFIX

RING, FULLY_CONNECTED, SWITCH_TOPOLOGY = "Ring", "FullyConnected", "Switch"


def _ordered_factorizations(n, minimum=2, limit=4):
    if n == 1:
        yield []
        return
    if limit == 0:
        return
    for first in range(minimum, n + 1):
        if n % first == 0:
            for rest in _ordered_factorizations(n // first, minimum, limit - 1):
                yield [first] + rest


def _dim_groups(total, dims, d):
    stride = math.prod(dims[:d])
    size = dims[d]
    span = stride * size
    for high in range(total // span):
        for low in range(stride):
            base = high * span + low
            yield [base + k * stride for k in range(size)]


def _rank_of_nodes(network):
    """Rank of every NPU node and of every NPU's router node."""
    index = {node: r for r, node in enumerate(network.rank_node)}
    for node, r in list(index.items()):
        if node + ROUTER_SUFFIX in network.nodes:
            index[node + ROUTER_SUFFIX] = r
    return index


def _direct_pairs(network):
    """Rank pairs joined by a direct link (NPU to NPU, or router to router), both directions."""
    index = _rank_of_nodes(network)
    pairs = {}
    for link in network.links:
        a, b = index.get(link.src), index.get(link.dst)
        if a is not None and b is not None and a != b:
            pairs.setdefault(frozenset((a, b)), []).append(link)
    return pairs


def _dim_edges(total, dims, d, kind):
    """Rank pairs a Ring / FullyConnected of dimension ``d`` links."""
    edges = set()
    for members in _dim_groups(total, dims, d):
        n = len(members)
        if kind == FULLY_CONNECTED:
            edges.update(frozenset((a, b)) for i, a in enumerate(members) for b in members[i + 1:])
        else:
            edges.update(frozenset((members[k], members[(k + 1) % n])) for k in range(n if n > 2 else 1))
    return edges


def _hop_distances(network, source):
    """Hops from ``source`` to every node, never passing through another NPU."""
    dist = {source: 0}
    frontier = [source]
    while frontier:
        nxt = []
        for node in frontier:
            if node != source and network.nodes[node] == NPU:
                continue
            for link in network.out_links[node]:
                if link.dst not in dist:
                    dist[link.dst] = dist[node] + 1
                    nxt.append(link.dst)
        frontier = nxt
    return dist


def auto_logical_dims(network):
    """Logical dimensions read off the graph: first the dimensions that direct NPU-NPU links form
    (Ring / FullyConnected, e.g. a torus), then switched levels by hop distance from rank 0 (the
    smallest contiguous blocks of ranks that are nearer to rank 0 than the rest)."""
    total = network.total_npus
    direct = set(_direct_pairs(network))
    dims = []
    unit = 1
    if direct:
        # The smallest block of consecutive ranks that holds every direct link.
        block = next(b for b in range(2, total + 1)
                     if total % b == 0 and all(min(p) // b == max(p) // b for p in direct))
        rest = [total // block] if block < total else []
        found = None
        for candidate in _ordered_factorizations(block):
            full = candidate + rest
            expected = set()
            for d, n in enumerate(candidate):
                mesh = _dim_edges(total, full, d, FULLY_CONNECTED)
                expected |= mesh if n > 3 and mesh <= direct else _dim_edges(total, full, d, RING)
            if expected == direct:
                found = candidate
                break
        if found is None:
            raise ConfigError(
                f"{network.source}: the direct NPU-NPU links do not form rings, a torus or full meshes over "
                "contiguous rank blocks; give --logical-dims"
            )
        dims, unit = list(found), block
    remaining = total // unit
    if remaining > 1:
        dist = _hop_distances(network, network.rank_node[0])
        classes = {}
        for k in range(1, remaining):
            node = network.rank_node[k * unit]
            if node not in dist:
                raise ConfigError(f"{network.source}: rank {k * unit} cannot be reached from rank 0")
            classes.setdefault(dist[node], set()).add(k)
        members, size = {0}, 1
        for hops in sorted(classes):
            members |= classes[hops]
            n = len(members)
            if members == set(range(n)) and n % size == 0 and remaining % n == 0:
                dims.append(n // size)
                size = n
    return dims


def _path_latency(network, path):
    total = 0.0
    for i, index in enumerate(path):
        link = network.links[index]
        total += link.latency_ns
        if i < len(path) - 1:
            total += network.switch_latency_ns.get(link.dst, 0.0)
    return total


def _pair_capacity(network, src, dst):
    """(bytes/ns a lone src->dst transfer gets over all equal-hop paths, the largest path latency,
    number of paths, hops)."""
    import networkx

    paths = network.shortest_paths(src, dst, limit=64)
    flow = networkx.DiGraph()
    for path in paths:
        for index in path:
            link = network.links[index]
            if flow.has_edge(link.src, link.dst):
                if index not in flow[link.src][link.dst]["ids"]:
                    flow[link.src][link.dst]["ids"].add(index)
                    flow[link.src][link.dst]["capacity"] += link.bandwidth_bytes_per_ns
            else:
                flow.add_edge(link.src, link.dst, capacity=link.bandwidth_bytes_per_ns, ids={index})
    capacity = networkx.maximum_flow_value(flow, src, dst)
    latency = max(_path_latency(network, path) for path in paths)
    return capacity, latency, len(paths), len(paths[0])


def to_analytical(network, dims=None):
    """The analytical network (``topology``, ``npus_count``, ``bandwidth`` GB/s = GiB/s,
    ``latency`` ns) equivalent to ``network`` with logical ``dims`` (auto-detected when None), plus
    notes. Raises :class:`ConfigError` when a dimension is neither a Ring, a FullyConnected nor a
    Switch on the graph."""
    total = network.total_npus
    dims = list(dims) if dims else auto_logical_dims(network)
    if total < 2:
        raise ConfigError(f"{network.source}: an analytical network needs at least 2 NPUs, this has {total}")
    if math.prod(dims) != total or any(n < 2 for n in dims):
        raise ConfigError(f"{network.source}: logical dims {dims} must each be >= 2 and multiply to {total}")
    direct = _direct_pairs(network)
    result = {"topology": [], "npus_count": list(dims), "bandwidth": [], "latency": [], "notes": []}
    for d, n in enumerate(dims):
        groups = list(_dim_groups(total, dims, d))
        all_pairs = ring = True
        none = True
        for members in groups:
            for i, a in enumerate(members):
                for j in range(i + 1, n):
                    linked = frozenset((a, members[j])) in direct
                    neighbour = j == i + 1 or (i == 0 and j == n - 1)
                    all_pairs &= linked
                    none &= not linked
                    ring &= linked == neighbour
        label = f"dimension {d} ({n} NPUs, ranks {groups[0][:4]}{'...' if n > 4 else ''})"
        if all_pairs or ring:
            kind = FULLY_CONNECTED if all_pairs and n > 3 else RING
            if kind == FULLY_CONNECTED:
                pairs = [(a, b) for m in groups for i, a in enumerate(m) for b in m[i + 1:]]
            else:
                pairs = [(m[i], m[(i + 1) % n]) for m in groups for i in range(n if n > 2 else 1)]
            bandwidths, latencies = [], []
            for a, b in pairs:
                links = direct[frozenset((a, b))]
                bandwidths.append(sum(l.bandwidth_bytes_per_ns for l in links if l.src == links[0].src))
                path = network.shortest_paths(network.rank_node[a], network.rank_node[b], limit=1)[0]
                latencies.append(_path_latency(network, path))
            via = "direct links"
        elif none:
            kind = SWITCH_TOPOLOGY
            bandwidths, latencies, shapes = [], [], set()
            for members in groups:
                for b in members[1:]:
                    cap, lat, count, hops = _pair_capacity(network, network.rank_node[members[0]], network.rank_node[b])
                    bandwidths.append(cap)
                    latencies.append(lat / 2.0)  # the analytical Switch charges two link latencies
                    shapes.add((hops, count))
            via = "paths of " + "/".join(f"{h} hops x {c}" for h, c in sorted(shapes))
        else:
            raise ConfigError(
                f"{network.source}: {label} is not a Ring (each NPU directly linked to its two neighbours), "
                "a FullyConnected mesh (all pairs directly linked) or a Switch (no pair directly linked); "
                "try other --logical-dims"
            )
        bandwidth = min(bandwidths) * 1e9 / GIB
        latency = max(latencies)
        result["topology"].append(kind)
        result["bandwidth"].append(round(bandwidth, 6))
        result["latency"].append(round(latency, 6))
        note = f"dim {d}: {kind} of {n} over {via}"
        if max(bandwidths) - min(bandwidths) > 1e-9 * max(bandwidths):
            low, high = min(bandwidths) * 1e9 / GIB, max(bandwidths) * 1e9 / GIB
            note += f"; bandwidth varies {low:g}-{high:g} GB/s, the lowest is used"
        if max(latencies) - min(latencies) > 1e-9:
            note += f"; latency varies {min(latencies):g}-{max(latencies):g} ns, the highest is used"
        result["notes"].append(note)
    return result


def format_analytical(result, source, dims_source):
    def fmt(x):
        return f"{float(x):.6f}".rstrip("0").rstrip(".") if float(x) != int(x) else f"{float(x):.1f}"

    lines = [f"# Analytical network equivalent to {source} (astra infragraph --to-analytical)",
             f"# logical dims: {dims_source}"]
    lines += [f"# {note}" for note in result["notes"]]
    lines += [
        f"topology: [ {', '.join(result['topology'])} ]",
        f"npus_count: [ {', '.join(str(n) for n in result['npus_count'])} ]",
        f"bandwidth: [ {', '.join(fmt(b) for b in result['bandwidth'])} ]  # GB/s (2^30 bytes) per link and direction",
        f"latency: [ {', '.join(fmt(x) for x in result['latency'])} ]  # ns per link traversal",
    ]
    if len(result["npus_count"]) > 1:
        # on the graph a message between NPUs that differ in several dimensions crosses all of them
        lines.append("cross_dimension_route: dimension_order  # charge every crossed dimension, as the graph routes")
    return "\n".join(lines) + "\n"
