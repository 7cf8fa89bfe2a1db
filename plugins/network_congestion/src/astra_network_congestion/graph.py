"""A network as a directed graph: the common input of the ``congestion`` and ``flow`` backends.

Nodes are NPUs (each the home of one rank) or switches; every link is directed and has its own
bandwidth and latency (a cable is two links). Builders: from the analytical YAML's Ring /
FullyConnected / Switch dimensions (:func:`from_analytical`, in :mod:`.builders`) and from an
InfraGraph infrastructure (:mod:`.infragraph`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from astra_sim.errors import ConfigError, SimulationError

NPU = "npu"
SWITCH = "switch"


@dataclass
class Link:
    """One direction of a cable. ``index`` is its position in ``NetworkGraph.links``."""

    index: int
    src: str
    dst: str
    bandwidth_bytes_per_ns: float
    latency_ns: float
    name: str = ""


@dataclass
class NetworkGraph:
    """Nodes, directed links, and which node each rank runs on.

    ``npus_per_dim``: the logical dimensions collectives use (their product is the rank count);
    ``source``: where the graph came from, for error messages and the report.
    """

    source: str = "<graph>"
    nodes: dict = field(default_factory=dict)  # name -> kind (NPU or SWITCH)
    links: list = field(default_factory=list)
    out_links: dict = field(default_factory=dict)  # name -> [Link]
    rank_node: list = field(default_factory=list)  # rank -> node name
    npus_per_dim: list = field(default_factory=list)
    switch_latency_ns: dict = field(default_factory=dict)  # name -> extra ns per traversal
    #: name -> :class:`astra_network_congestion.switch_tiers.Reducer`: switches declaring in-network reduction
    reducers: dict = field(default_factory=dict)
    _reverse_cache: tuple = field(default=None, repr=False, compare=False)

    def add_node(self, name, kind, switch_latency_ns=0.0):
        if name in self.nodes:
            raise ConfigError(f"{self.source}: node {name!r} is defined twice")
        if kind not in (NPU, SWITCH):
            raise ConfigError(f"{self.source}: node {name!r} has unknown kind {kind!r}")
        self.nodes[name] = kind
        self.out_links[name] = []
        if switch_latency_ns:
            self.switch_latency_ns[name] = float(switch_latency_ns)

    def add_link(self, src, dst, bandwidth_gbps, latency_ns, bidirectional=True, name=""):
        """Add a link (two when ``bidirectional``); bandwidth in GB/s with GB = 2^30 bytes, as the
        reference's analytical networks count it."""
        for end in (src, dst):
            if end not in self.nodes:
                raise ConfigError(f"{self.source}: link {name or (src, dst)} uses unknown node {end!r}")
        if not bandwidth_gbps or bandwidth_gbps <= 0:
            raise ConfigError(f"{self.source}: link {name or (src, dst)} needs a bandwidth > 0, got {bandwidth_gbps!r}")
        if latency_ns is None or latency_ns < 0:
            raise ConfigError(f"{self.source}: link {name or (src, dst)} needs a latency >= 0 ns, got {latency_ns!r}")
        bytes_per_ns = bandwidth_gbps * (1 << 30) / 1_000_000_000
        pairs = [(src, dst), (dst, src)] if bidirectional else [(src, dst)]
        for a, b in pairs:
            link = Link(len(self.links), a, b, bytes_per_ns, float(latency_ns), name)
            self.links.append(link)
            self.out_links[a].append(link)

    def set_ranks(self, node_names):
        """Rank r runs on ``node_names[r]`` (an NPU node)."""
        for name in node_names:
            if self.nodes.get(name) != NPU:
                raise ConfigError(f"{self.source}: rank node {name!r} is not an NPU of the graph")
        if len(set(node_names)) != len(node_names):
            raise ConfigError(f"{self.source}: two ranks are placed on the same NPU")
        self.rank_node = list(node_names)
        if not self.npus_per_dim:
            self.npus_per_dim = [len(node_names)]

    @property
    def total_npus(self):
        return len(self.rank_node)

    def without_links(self, failed, where="failed_links"):
        """A copy of the graph without the failed cables: ``failed`` is a list of node-name pairs ``[a, b]``,
        each removing every link between ``a`` and ``b`` in both directions (a cable fails as a whole). Routes
        computed on the copy go around them. A pair that joins no link is a ConfigError naming ``where``."""
        down = set()
        for pair in failed:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
                raise ConfigError(f"{where}: each failed link is a pair of node names [a, b], got {pair!r}")
            a, b = (str(end) for end in pair)
            hits = [link.index for link in self.links if {link.src, link.dst} == {a, b}]
            if not hits:
                example = f"{self.links[0].src}-{self.links[0].dst}" if self.links else "none"
                raise ConfigError(f"{where}: no link joins {a!r} and {b!r} in {self.source} (links join node names "
                                  f"such as {example}; see the report's network_stats links src/dst)")
            down.update(hits)
        graph = NetworkGraph(source=self.source)
        for name, kind in self.nodes.items():
            graph.add_node(name, kind, self.switch_latency_ns.get(name, 0.0))
        for link in self.links:
            if link.index not in down:
                kept = Link(len(graph.links), link.src, link.dst, link.bandwidth_bytes_per_ns, link.latency_ns,
                            link.name)
                graph.links.append(kept)
                graph.out_links[link.src].append(kept)
        graph.rank_node = list(self.rank_node)
        graph.npus_per_dim = list(self.npus_per_dim)
        graph.reducers = dict(self.reducers)
        return graph

    def shortest_paths(self, src, dst, limit=64):
        """All fewest-hop paths from node ``src`` to node ``dst`` that pass through no other NPU, as
        lists of link indices in a deterministic order (by the sequence of link indices). At most
        ``limit`` paths."""
        if src == dst:
            return [[]]
        # Hop distances to dst over reversed links; an NPU other than src/dst gets a distance but
        # is not expanded, so no path passes through it.
        reverse = self._reverse_links()
        dist = {dst: 0}
        frontier = [dst]
        while frontier and src not in dist:
            nxt = []
            for node in frontier:
                if node != dst and self.nodes[node] == NPU:
                    continue
                for link in reverse.get(node, ()):
                    if link.src not in dist:
                        dist[link.src] = dist[node] + 1
                        nxt.append(link.src)
            frontier = nxt
        if src not in dist:
            raise ConfigError(f"{self.source}: no path from {src!r} to {dst!r} that avoids other NPUs")
        paths = []

        def walk(node, prefix):
            if len(paths) >= limit:
                return
            if node == dst:
                paths.append(list(prefix))
                return
            for link in self.out_links[node]:
                nxt = link.dst
                if dist.get(nxt) == dist[node] - 1 and (nxt == dst or self.nodes[nxt] != NPU):
                    prefix.append(link.index)
                    walk(nxt, prefix)
                    prefix.pop()

        walk(src, [])
        return paths

    def _reverse_links(self):
        """Incoming links per node, built once (and again if links were added since)."""
        cached = getattr(self, "_reverse_cache", None)
        if cached is None or cached[0] != len(self.links):
            reverse = {}
            for link in self.links:
                reverse.setdefault(link.dst, []).append(link)
            cached = (len(self.links), reverse)
            self._reverse_cache = cached
        return cached[1]

    def logical_dims(self, npus_per_dim=None):
        """``npus_per_dim`` (default: the graph's own), checked to multiply to the number of ranks."""
        dims = list(npus_per_dim if npus_per_dim is not None else self.npus_per_dim)
        total = 1
        for count in dims:
            total *= count
        if total != len(self.rank_node):
            raise ConfigError(
                f"{self.source}: npus_per_dim {dims} makes {total} ranks but the graph places {len(self.rank_node)}"
            )
        return dims

    def check_message_ranks(self, src, dst, backend):
        """Raise a SimulationError unless ranks ``src`` and ``dst`` are two distinct ranks of the
        graph (``backend`` names the network in the message)."""
        total = len(self.rank_node)
        for rank in (src, dst):
            if not 0 <= rank < total:
                raise SimulationError(f"message {src} -> {dst}: rank {rank} is not in the network (0..{total - 1})")
        if src == dst:
            raise SimulationError(f"NPU {src} sends a message to itself; the {backend} network needs two distinct NPUs")

    def check_route(self, src, dst, route):
        """Raise a ConfigError unless ``route`` (link indices) leads from rank ``src``'s node to rank
        ``dst``'s node, link after link."""
        links = self.links
        node = self.rank_node[src]
        if not route:
            raise ConfigError(f"{self.source}: the route from rank {src} to rank {dst} is empty")
        for index in route:
            if not (isinstance(index, int) and 0 <= index < len(links)) or links[index].src != node:
                raise ConfigError(
                    f"{self.source}: the route from rank {src} to rank {dst} ({list(route)}) is not a "
                    f"path of links from {self.rank_node[src]!r}"
                )
            node = links[index].dst
        if node != self.rank_node[dst]:
            raise ConfigError(
                f"{self.source}: the route from rank {src} to rank {dst} ends at {node!r}, "
                f"not at {self.rank_node[dst]!r}"
            )

    def describe(self):
        kinds = {}
        for kind in self.nodes.values():
            kinds[kind] = kinds.get(kind, 0) + 1
        return {
            "source": self.source,
            "npus": kinds.get(NPU, 0),
            "switches": kinds.get(SWITCH, 0),
            "links": len(self.links),
            "npus_per_dim": list(self.npus_per_dim),
        }
