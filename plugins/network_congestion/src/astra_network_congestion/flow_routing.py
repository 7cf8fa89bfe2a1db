"""The ``flow`` backend's routing (:class:`FlowRouting`, a mixin of :class:`~astra_network_congestion.flow.FlowNetwork`):
the candidate paths between two ranks (fewest hops, fewest NPUs forwarding, the widest with
``path_selection="widest"``), the links that constrain a path's rate, and which equal-cost path a message takes
(:func:`ecmp_index`). The module docstring of :mod:`astra_network_congestion.flow` states the rules."""

from __future__ import annotations

from astra_sim.errors import ConfigError

from astra_network_congestion.graph import NPU

_MASK64 = (1 << 64) - 1


def _mix64(x):
    """splitmix64's finaliser: a stable, well-spread 64-bit hash of an integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def ecmp_index(src, dst, k, n):
    """Which of ``n`` equal-cost paths the ``k``-th message from ``src`` to ``dst`` takes."""
    return _mix64(_mix64(_mix64(src) ^ dst) ^ k) % n


class _Route:
    """One candidate path: link indices, the links that constrain its rate (``fill``: one per
    run of links in series, see :meth:`FlowNetwork._series_runs`), latency (links + switches),
    1/bandwidth sums. ``cfill``/``cfill_w`` and ``cpath``/``cpath_w``: the links a flow on it counts on and
    with which weights: ``fill`` and ``links`` with weight 1, or in a folded run their orbits' canonical links
    with multiplicities (:mod:`astra_network_congestion.flow_fold`)."""

    __slots__ = ("links", "fill", "latency", "inv_sum", "inv_max", "cfill", "cfill_w", "cpath", "cpath_w")

    def __init__(self, links, fill, latency, inv_sum, inv_max, canonical=None, weight=None):
        self.links = links
        self.fill = fill
        self.latency = latency
        self.inv_sum = inv_sum
        self.inv_max = inv_max
        if canonical is None:
            self.cfill, self.cfill_w = fill, (1,) * len(fill)
            self.cpath, self.cpath_w = links, (1,) * len(links)
        else:
            self.cfill, self.cfill_w = _weighted(fill, canonical, weight)
            self.cpath, self.cpath_w = _weighted(links, canonical, weight)


def _weighted(links, canonical, weight):
    """``links`` as their canonical links (first-seen order) and the summed weights of each."""
    total = {}
    for link in links:
        c = canonical[link]
        total[c] = total.get(c, 0) + weight[c]
    return tuple(total), tuple(total.values())


class FlowRouting:
    """Routing of a :class:`~astra_network_congestion.flow.FlowNetwork` (it holds ``graph``, ``route_fn``,
    ``max_paths``, ``path_selection`` and the caches these methods fill)."""
    def routes(self, src, dst):
        """The candidate paths (:class:`_Route`) from rank ``src`` to rank ``dst`` (cached)."""
        key = (src, dst)
        routes = self._routes.get(key)
        if routes is None:
            routes = self._routes[key] = self._make_routes(src, dst)
        return routes

    def paths(self, src, dst):
        """The candidate paths from rank ``src`` to rank ``dst`` as lists of link indices."""
        return [list(route.links) for route in self.routes(src, dst)]

    def _make_routes(self, src, dst):
        graph = self.graph
        graph.check_message_ranks(src, dst, "flow")
        a, b = graph.rank_node[src], graph.rank_node[dst]
        if self.route_fn is not None:
            path = [tuple(self.route_fn(src, dst))]
            self._check_path(src, dst, path[0])
        else:
            path = self._shortest(a, b)
        links = graph.links
        bw = self._bw
        if self.path_selection == "widest" and len(path) > 1:
            widest = [min(bw[i] for i in p) for p in path]
            best = max(widest)
            path = [p for p, w in zip(path, widest) if w == best]
        switch_latency = graph.switch_latency_ns
        routes = []
        for p in path:
            latency = 0.0
            for i in p:
                latency += links[i].latency_ns
            for i in p[:-1]:  # the nodes the path crosses
                latency += switch_latency.get(links[i].dst, 0.0)
            inv = [1.0 / bw[i] for i in p]
            fill = []
            for i in p:
                r = self._rep[i]
                if r not in fill:
                    fill.append(r)
            routes.append(_Route(p, tuple(fill), latency, sum(inv), max(inv), self._canonical, self._weight))
        return routes

    def _series_runs(self):
        """For every link, the representative of its *run*: the links joined end to end through
        switches that have exactly two neighbours and one link each way to each (a NIC between a
        GPU's PCIe and a leaf, a switch port between a cable and the ASIC). A fewest-hop path
        never turns back, so every flow on one link of a run is on all of them: only the run's
        slowest link (the first of equal ones) can limit their rates, the others are left out of
        the max-min computation. Fixed routes (``route_fn``) are not compressed."""
        graph = self.graph
        links = graph.links
        rep = list(range(len(links)))
        if self.route_fn is not None:
            return rep
        into = {}
        for link in links:
            into.setdefault(link.dst, []).append(link)

        def relay(node):
            if graph.nodes[node] == NPU:
                return False
            out = graph.out_links[node]
            inn = into.get(node, ())
            if len(out) != 2 or len(inn) != 2:
                return False
            ends = {out[0].dst, out[1].dst}
            return len(ends) == 2 and ends == {inn[0].src, inn[1].src}

        relays = {node for node in graph.nodes if relay(node)}
        bw = self._bw
        for head in links:
            if head.src in relays:
                continue  # not the start of a run
            run = [head]
            link = head
            while link.dst in relays:
                out = graph.out_links[link.dst]
                link = out[0] if out[0].dst != link.src else out[1]
                run.append(link)
            if len(run) > 1:
                best = min(run, key=lambda item: bw[item.index])
                for item in run:
                    rep[item.index] = best.index
        return rep

    def _check_path(self, src, dst, path):
        self.graph.check_route(src, dst, path)

    def _distances(self, dst):
        """Hops from every node to ``dst`` (BFS on reversed links; a bounded cache)."""
        dist = self._dist.get(dst)
        if dist is not None:
            return dist
        graph = self.graph
        if self._reverse is None:
            reverse = {}
            for link in (link for link in graph.links if link.index not in self._down):
                reverse.setdefault(link.dst, []).append(link)
            self._reverse = reverse
        reverse = self._reverse
        dist = {dst: 0}
        frontier = [dst]
        d = 0
        while frontier:
            d += 1
            nxt = []
            for node in frontier:
                for link in reverse.get(node, ()):
                    u = link.src
                    if u not in dist:
                        dist[u] = d
                        nxt.append(u)
            frontier = nxt
        if len(self._dist) >= 256:
            self._dist.pop(next(iter(self._dist)))
        self._dist[dst] = dist
        return dist

    def _shortest(self, src, dst):
        """Fewest-hop paths from node ``src`` to node ``dst``; of those, the ones that cross the
        fewest other NPUs (switches are tried first, so these are found first)."""
        graph = self.graph
        dist = self._distances(dst)
        if src not in dist:
            raise ConfigError(f"{graph.source}: no path from {src!r} to {dst!r}")
        nodes = graph.nodes
        out = self._out
        if out is None:
            # Each node's links, those to switches (and the destination) before those to NPUs.
            out = self._out = {
                name: sorted((link for link in links if link.index not in self._down),
                             key=lambda link: nodes[link.dst] == NPU)
                for name, links in graph.out_links.items()
            }
        limit = self.max_paths
        paths = []
        truncated = self._canonical is not None
        prefix = []

        def walk(node, d, npus):
            if node == dst:
                paths.append((npus, tuple(prefix)))
                return
            for link in out[node]:
                nxt = link.dst
                if dist.get(nxt) == d - 1:
                    prefix.append(link.index)
                    walk(nxt, d - 1, npus + (nxt != dst and nodes[nxt] == NPU))
                    prefix.pop()
                    if len(paths) >= limit:
                        return

        walk(src, dist[src], 0)
        if truncated and len(paths) >= limit:
            from astra_sim.errors import FoldAbandoned

            raise FoldAbandoned(f"flow: the paths from {src} to {dst} reach max_paths ({limit}): which are kept "
                                "depends on link numbering, not on the graph alone")
        fewest = min(npus for npus, _ in paths)
        return [path for npus, path in paths if npus == fewest]
