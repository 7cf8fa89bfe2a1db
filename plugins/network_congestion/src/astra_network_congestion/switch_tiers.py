"""In-network reduction on a graph network (InfraGraph): which switch serves a logical dimension, and what
it offers the ``inSwitch`` collective algorithm (:class:`astra_sim.api.InSwitchSpec`).

A switch node reduces when its InfraGraph attributes say so (set by an annotation; a bare instance name
such as ``leaf`` annotates every node of that instance). Attribute names and defaults:

==============================  ===============================================================  ==========
attribute                       value                                                            default
==============================  ===============================================================  ==========
``switch_reduction``            ``true`` / ``false``: the switch can reduce                      ``false``
``switch_reduction_bandwidth``  reduction throughput for one collective, ``"<n> Gb/s|GB/s|..."``  line rate
``switch_reduction_latency``    added once per reduction, ``"<n> ns|us|ms"`` (bare number: ns)    0
``switch_reduction_buffer``     reduction buffer per collective, bytes (``"16 MiB"``, ``65536``)  0 (none)
==============================  ===============================================================  ==========

Unlike the analytical YAML (an abstract ``Switch`` dimension reduces unless told otherwise), a switch of a
described network reduces only where declared: a real switch needs SHARP-capable silicon.

The switch of a dimension: for every group of ranks along the dimension (those that differ only in its
coordinate), every fewest-hop path between ring neighbours must cross a node that reduces; the reducing
node nearest the middle of the path is where the data meet (a ToR's ``asic`` rather than its ports; a
spine on a path that crosses leaves). The dimension's line rate is the narrowest layer of links between a
member and those switches (four NVSwitch chips in parallel give the GPU's whole NVLink bandwidth), its
link latency the links' and transit switches' latency on the way. Where the groups differ the slowest
values are taken. A dimension whose paths cross no reducing node is refused with a one-line error naming
the dimension, two of its NPUs and the attribute to set.
"""

from __future__ import annotations

import re

from astra_sim.errors import ConfigError

from astra_network_congestion.graph import NPU

ATTRIBUTES = ("switch_reduction", "switch_reduction_bandwidth", "switch_reduction_latency", "switch_reduction_buffer")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}


class Reducer:
    """One switch node's declared reduction: rate in bytes per ns (None: line rate), latency ns, buffer bytes."""

    __slots__ = ("can_reduce", "rate", "latency_ns", "buffer_bytes")

    def __init__(self, can_reduce=False, rate=None, latency_ns=0, buffer_bytes=0):
        self.can_reduce = can_reduce
        self.rate = rate
        self.latency_ns = latency_ns
        self.buffer_bytes = buffer_bytes


def parse_size(value, where):
    """Bytes from ``65536``, ``"64 KiB"``, ``"16 MiB"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {value!r} is not a size in bytes")
    match = _SIZE.match(str(value))
    if not match:
        raise ConfigError(f"{where}: cannot read size {value!r}; write bytes, e.g. 65536 or '16 MiB'")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def read_reducers(model):
    """``{node: Reducer}`` for the graph nodes that carry any ``switch_reduction*`` attribute."""
    from astra_network_congestion.infragraph import parse_bandwidth, parse_latency

    out = {}
    for node, data in model.graph.nodes(data=True):
        if not any(data.get(key) is not None for key in ATTRIBUTES):
            continue
        where = f"{model.path}: node {node}"
        if node in model.npu_nodes:
            raise ConfigError(f"{where}: switch_reduction* attributes belong on switches, and this node is an NPU")
        reducer = Reducer()
        flag = data.get("switch_reduction")
        if flag is not None:
            text = str(flag).strip().lower()
            if text not in _TRUE + _FALSE:
                raise ConfigError(f"{where}: switch_reduction must be true or false, got {flag!r}")
            reducer.can_reduce = text in _TRUE
        if data.get("switch_reduction_bandwidth") is not None:
            rate = parse_bandwidth(data["switch_reduction_bandwidth"], f"{where} switch_reduction_bandwidth")
            reducer.rate = rate / 1e9  # bytes per ns
        if data.get("switch_reduction_latency") is not None:
            reducer.latency_ns = int(parse_latency(data["switch_reduction_latency"], f"{where} switch_reduction_latency"))
        if data.get("switch_reduction_buffer") is not None:
            reducer.buffer_bytes = parse_size(data["switch_reduction_buffer"], f"{where} switch_reduction_buffer")
        out[node] = reducer
    return out


def dimension_groups(npus_per_dim, dim):
    """The groups of ranks along ``dim`` (dimension 0 varies fastest), each in coordinate order."""
    stride = 1
    for count in npus_per_dim[:dim]:
        stride *= count
    size = npus_per_dim[dim]
    total = 1
    for count in npus_per_dim:
        total *= count
    return [[base + k * stride for k in range(size)] for base in range(total) if (base // stride) % size == 0]


def network_in_switch(network, dim):
    """What the ``congestion`` and ``flow`` backends answer to ``in_switch(dim)``: the analytical YAML's
    ``switch_reduction*`` keys when the network came from one (``network.switch_config``), else the InfraGraph's
    switches that declare reduction (:func:`graph_in_switch`)."""
    config = getattr(network, "switch_config", None)
    if config is None:
        return graph_in_switch(network.graph, network.npus_per_dim, dim)
    from astra_network_analytical import in_switch_spec

    return in_switch_spec(config, dim)


def graph_in_switch(graph, dims, dim):
    """The :class:`astra_sim.api.InSwitchSpec` of logical dimension ``dim`` (of ``dims``, the backend's
    logical dimensions) of ``graph`` (None when ``dim`` is not one of them); a ConfigError when no reducing
    switch serves it."""
    from astra_sim.api import InSwitchSpec

    if not 0 <= dim < len(dims) or dims[dim] < 2:
        return None
    reducers = {node: r for node, r in getattr(graph, "reducers", {}).items() if r.can_reduce}
    line_rate = reduce_rate = None
    latency = buffer = 0
    link_latency = 0.0
    for members in dimension_groups(dims, dim):
        nodes = [graph.rank_node[r] for r in members]
        pairs = [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))] if len(nodes) > 2 else [tuple(nodes)]
        meet = set()
        for a, b in pairs:
            for path in graph.shortest_paths(a, b):
                hops = [graph.links[i].dst for i in path[:-1]]  # the nodes between the two NPUs
                on_path = [k for k, node in enumerate(hops) if node in reducers]
                if not on_path:
                    held = [n for n in hops if n in getattr(graph, "reducers", {})]
                    hint = f" ({held[0]} declares switch_reduction: false)" if held else ""
                    raise ConfigError(
                        f"{graph.source}: inSwitch on network dimension {dim}: the path from {a} to {b} crosses no "
                        f"switch that reduces{hint}; annotate the switch with switch_reduction: true"
                    )
                middle = (len(hops) - 1) / 2
                meet.add(hops[min(on_path, key=lambda k: (abs(k - middle), k))])
        for node in nodes:
            rate, lat = _reach(graph, node, meet)
            line_rate = rate if line_rate is None else min(line_rate, rate)
            link_latency = max(link_latency, lat)
        for switch in meet:
            r = reducers[switch]
            if r.rate is not None:
                reduce_rate = r.rate if reduce_rate is None else min(reduce_rate, r.rate)
            latency = max(latency, r.latency_ns)
            if r.buffer_bytes:
                buffer = r.buffer_bytes if not buffer else min(buffer, r.buffer_bytes)
    return InSwitchSpec(can_reduce=True, line_rate=line_rate, reduce_rate=line_rate if reduce_rate is None else reduce_rate,
                        latency_ns=latency, buffer_bytes=buffer, link_latency_ns=link_latency)


def _reach(graph, source, targets):
    """``(bytes per ns, ns)`` from NPU node ``source`` to the switches ``targets``: the narrowest layer of links
    on the fewest-hop ways there (parallel switches add up), and the slowest way's latency (links and transit
    switches)."""
    dist = {source: 0}
    frontier = [source]
    layers = []  # per hop: {link index}
    found = set()
    while frontier and not found:
        nxt = []
        layer = set()
        for node in frontier:
            if node != source and graph.nodes[node] == NPU:
                continue
            for link in graph.out_links[node]:
                if dist.get(link.dst, len(layers) + 1) == len(layers) + 1:
                    layer.add(link.index)
                    if link.dst not in dist:
                        dist[link.dst] = len(layers) + 1
                        nxt.append(link.dst)
        layers.append(layer)
        found = targets.intersection(nxt)
        frontier = nxt
    if not found:
        raise ConfigError(f"{graph.source}: inSwitch: NPU {source} reaches none of the switches {sorted(targets)}")
    # keep only the links on fewest-hop ways to the reached targets (walk back from them)
    keep = [set() for _ in layers]
    wanted = set(found)
    for depth in range(len(layers) - 1, -1, -1):
        previous = set()
        for index in layers[depth]:
            link = graph.links[index]
            if link.dst in wanted:
                keep[depth].add(index)
                previous.add(link.src)
        wanted = previous
    rate = min(sum(graph.links[i].bandwidth_bytes_per_ns for i in layer) for layer in keep)
    latency = {source: 0.0}
    for layer in keep:
        for index in sorted(layer):
            link = graph.links[index]
            transit = graph.switch_latency_ns.get(link.src, 0.0) if link.src != source else 0.0
            value = latency[link.src] + transit + link.latency_ns
            latency[link.dst] = max(latency.get(link.dst, 0.0), value)
    return rate, max(latency[t] for t in found)
