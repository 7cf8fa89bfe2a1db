"""The ``congestion`` backend: the reference's congestion-aware analytical network model.

Every link is directed, has a bandwidth ``B`` (bytes/ns) and a latency ``L`` (ns), and serves one
message at a time in FIFO order. A message travels as one chunk along its route, store-and-forward:

* when the chunk reaches a link that is busy it joins the link's FIFO queue; otherwise the link
  starts it at once: the link stays busy ``trunc(m / B)`` ns and the chunk reaches the link's far
  end ``trunc(L + m / B)`` ns from now (two events, arrival first, as in the reference);
* when a link frees it starts the head of its queue;
* at the destination the delivery callback runs inside the arrival event (as the reference's
  ``Chunk::invoke_callback``), so same-time event order matches the reference.

Without contention a message takes ``sum over hops of trunc(L + m / B)``.
"""

from __future__ import annotations

from astra_sim.errors import ConfigError
from astra_sim.safeio import read_text

from astra_network_congestion.graph import SWITCH
from astra_network_congestion.links import LinkQueues

#: the top-level keys that make a network file an InfraGraph one (:func:`astra_network_congestion.infragraph._kind_of`)
INFRAGRAPH_KEYS = ("infrastructure", "devices", "instances")


def _may_be_infragraph(path):
    """False when ``path``'s text cannot be an InfraGraph file, told without parsing it: a YAML mapping has one of
    :data:`INFRAGRAPH_KEYS` only where the key's name is in the text, or where a double-quoted scalar's escapes (a
    backslash) spell it. True when the text cannot be read: the InfraGraph check then decides, as it always did."""
    try:
        text = read_text(path)
    except ConfigError:
        return True
    return "\\" in text or any(key in text for key in INFRAGRAPH_KEYS)


class CongestionNetwork:
    """Link-queue network over a :class:`~astra_network_congestion.graph.NetworkGraph`.

    ``CongestionNetwork(graph, engine, route_fn, npus_per_dim=None, description=None)``:

    * ``graph``: nodes, directed links (``bandwidth_bytes_per_ns``, ``latency_ns``) and
      ``rank_node`` (rank r runs on node ``graph.rank_node[r]``);
    * ``engine``: the event engine (``now``, ``schedule(delay_ns, fn, arg)``);
    * ``route_fn(src_rank, dst_rank)``: the link indices (into ``graph.links``) a message takes,
      in order; called at most once per (src, dst) pair, checked to be a connected path from the
      source's node to the destination's node (see :mod:`astra_network_congestion.builders`:
      ``from_analytical`` for the analytical YAML, ``shortest_path_router`` for any graph);
    * ``npus_per_dim``: the logical dimensions collectives use (default ``graph.npus_per_dim``);
    * ``description``: extra settings for the report (merged into :meth:`describe`).

    A switch's ``graph.switch_latency_ns`` is added to the latency of every link *into* that
    switch (the chunk reaches the switch that much later; the link's busy time is unchanged).

    :meth:`from_context` builds it from the analytical network YAML or an InfraGraph file (the
    ``congestion`` backend).

    ``store_and_forward``: every hop waits for the whole message (said to collective algorithms that model a
    streaming switch: ``inSwitch`` then sends its message as segments that pipeline through the switch).
    """

    store_and_forward = True

    def __init__(self, graph, engine, route_fn, npus_per_dim=None, description=None):
        if not graph.rank_node:
            raise ConfigError(f"{graph.source}: the network graph places no rank on an NPU")
        self.graph = graph
        self.engine = engine
        self.route_fn = route_fn
        self.npus_per_dim = graph.logical_dims(npus_per_dim)
        self.description = dict(description or {})
        links = graph.links
        switch_latency = graph.switch_latency_ns
        self._bandwidth = [link.bandwidth_bytes_per_ns for link in links]
        self._latency = [link.latency_ns + switch_latency.get(link.dst, 0.0) for link in links]
        for link in links:
            if not link.bandwidth_bytes_per_ns > 0:
                raise ConfigError(
                    f"{graph.source}: link {link.src} -> {link.dst} has bandwidth {link.bandwidth_bytes_per_ns}"
                )
        self._routes = {}  # (src, dst) -> tuple of link indices
        # (src, dst, size) -> [messages sent, link, trunc(L + m/B), trunc(m/B), link, ...]
        self._hops = {}
        self._max_queue = [0] * len(links)
        #: ``[(stride, count, topology)]`` per dimension when the graph is the analytical YAML's (one switch per
        #: group, nothing failed): its relabellings are then known and a run may fold (:meth:`fold_links`)
        self.fold_layout = None
        self._canonical = None  # per link, its orbit's canonical link in a folded run
        self._link_load = None
        self._build_engine()

    @classmethod
    def from_context(cls, context):
        """The ``congestion`` backend: the analytical YAML (Ring / FullyConnected / Switch
        dimensions, :func:`~astra_network_congestion.builders.from_analytical`, dimension-ordered
        routes), or an InfraGraph file
        (:func:`astra_network_congestion.infragraph.load_network_graph`, routed by
        :func:`~astra_network_congestion.builders.shortest_path_router`)."""
        from astra_network_analytical import parse_network_config

        from astra_network_congestion.builders import fabric_options, from_analytical, shortest_path_router

        path = context.network_config_path
        if path is None:
            raise ConfigError("the congestion network backend needs a network configuration file")
        is_infragraph_config = None
        if _may_be_infragraph(path):  # (the analytical YAML is parsed once, and the InfraGraph support not imported)
            try:
                from astra_network_congestion.infragraph import is_infragraph_config, load_network_graph
            except ImportError:  # pragma: no cover - the InfraGraph support is optional here
                pass
        if is_infragraph_config is not None and is_infragraph_config(path):
            if (getattr(context, "options", None) or {}).get("fabric") is not None:
                raise ConfigError(f"--fabric builds the network from the analytical YAML (e.g. --platform's), "
                                  f"not from the InfraGraph file {path}")
            graph = load_network_graph(path, context)
            description = {"routing": "shortest path (fewest hops, lowest link index first), no transit through NPUs"}
            return cls(graph, context.engine, shortest_path_router(graph), None, description)
        config = parse_network_config(path, getattr(context, "warn", None))
        description = {
            "topology": list(config.topology),
            "npus_count": list(config.npus_count),
            "bandwidth_gib_per_s": list(config.bandwidth_gib_per_s),
            "latency_ns": list(config.latency_ns),
            "routing": "dimension-ordered (dim 0 first); Ring: shorter direction, clockwise on ties",
        }
        fabric = None
        if (getattr(context, "options", None) or {}).get("fabric") is not None:  # --fabric: rail / multi-plane
            from astra_network_congestion.fabrics import build_fabric, fabric_from_options

            fabric = fabric_from_options(context.options)
        if fabric is not None:
            built = build_fabric(config, fabric)
            graph, route_fn = built.graph, built.route_fn
            description["fabric"] = built.description
            description["routing"] = built.description["routing"]
        else:
            graph, route_fn = from_analytical(config, **fabric_options(getattr(context, "options", None)))
        network = cls(graph, context.engine, route_fn, list(config.npus_count), description)
        network.switch_config = config  # the switches' in-network reduction (inSwitch)
        if fabric is None and fabric_options(getattr(context, "options", None))["nodes_per_leaf"] is None:
            strides = [1]
            for count in config.npus_count[:-1]:
                strides.append(strides[-1] * count)
            network.fold_layout = list(zip(strides, config.npus_count, config.topology))
        return network

    # ------------------------------------------------------------------ folding
    def symmetry_dims(self):
        """Per dimension, the relabellings that keep the graph and its routes (a ring's rotations, any
        permutation of a switch's or fully connected dimension's members); None for other graphs
        (InfraGraph, a switch in tiers), which do not fold."""
        from astra_network_congestion.congestion_fold import symmetry_kinds

        return None if self.fold_layout is None else symmetry_kinds(self.fold_layout)

    def fold_links(self, symmetry):
        """Before a folded run: every link's queue becomes its orbit's under ``symmetry``
        (:mod:`astra_network_congestion.congestion_fold`)."""
        from astra_network_congestion.congestion_fold import link_orbits

        self._canonical = link_orbits(self.graph, self.fold_layout, symmetry)
        self.description["folded_links"] = len(set(self._canonical))
        self._build_engine(self._link_load)

    # ------------------------------------------------------------------ routes
    def route(self, src, dst):
        """The link indices from rank ``src`` to rank ``dst`` (cached, checked)."""
        key = (src, dst)
        route = self._routes.get(key)
        if route is not None:
            return route
        graph = self.graph
        graph.check_message_ranks(src, dst, "congestion")
        route = tuple(self.route_fn(src, dst))
        graph.check_route(src, dst, route)
        self._routes[key] = route
        return route

    def _make_hops(self, src, dst, size):
        hops = [0]
        bandwidth = self._bandwidth
        latency = self._latency
        for link in self.route(src, dst):
            b = bandwidth[link]
            # The reference: (uint64)(L + m/B) and (uint64)(m/B), in double precision.
            hops.append(link)
            hops.append(int(latency[link] + size / b))
            hops.append(int(size / b))
        self._hops[(src, dst, size)] = hops
        return hops

    # ------------------------------------------------------------------ hot path
    def _build_engine(self, link_load=None):
        """The hot path: :class:`~astra_network_congestion.links.LinkQueues` (or a folded run's handlers), whose
        ``send`` becomes this network's. With ``link_load`` (a timeline was asked for) every link's busy intervals
        are reported to it; without, the handlers are the same as ever."""
        self._link_load = link_load
        if self._canonical is not None:
            from astra_network_congestion.congestion_fold import build_folded_handlers

            self.send, self._busy, self._queues = build_folded_handlers(self, self._canonical, link_load)
            return
        links = LinkQueues(self, self.engine, len(self.graph.links), link_load)
        self._busy = links.busy
        self._queues = links.queues
        self.send = links.send

    #: ``send(src, dst, size, fn, arg)``: route ``size`` bytes from rank ``src`` to rank ``dst``; ``fn(arg)`` runs on
    #: arrival (set per instance by ``_build_engine``: the hot path's own, called without a wrapper)
    send = None

    def record_link_load(self, link_load):
        """Report every link's busy intervals to ``link_load`` (:class:`astra_analysis.links.LinkLoad`)
        from now on (called before the run). In a folded run only each orbit's canonical link is reported."""
        for link in self.graph.links:
            link_load.names[link.index] = f"{link.src} -> {link.dst}"
        self._build_engine(link_load)

    # ------------------------------------------------------------------ report
    def in_switch(self, dim):
        """The switch of dimension ``dim`` for ``inSwitch``: the analytical YAML's ``switch_reduction*`` keys, or
        an InfraGraph's switches that declare reduction (:mod:`astra_network_congestion.switch_tiers`)."""
        from astra_network_congestion.switch_tiers import network_in_switch

        return network_in_switch(self, dim)

    def describe(self):
        out = {"backend": "congestion"}
        out.update(self.description)
        graph = self.graph.describe()
        out["devices"] = graph["npus"] + graph["switches"]
        out["switches"] = graph["switches"]
        out["links"] = graph["links"]
        return out

    def link_totals(self):
        """Per link index: (bytes, busy ns, messages), counted from every message sent."""
        n_links = len(self.graph.links)
        sent_bytes = [0] * n_links
        busy_ns = [0] * n_links
        messages = [0] * n_links
        canonical = self._canonical
        for (_src, _dst, size), hops in self._hops.items():
            count = hops[0]
            if not count:
                continue
            for pos in range(1, len(hops), 3):
                link = hops[pos] if canonical is None else canonical[hops[pos]]
                sent_bytes[link] += count * size
                busy_ns[link] += count * hops[pos + 2]
                messages[link] += count
        if canonical is not None:  # a folded run: every link carries what its orbit's canonical link does
            return tuple([column[c] for c in canonical] for column in (sent_bytes, busy_ns, messages))
        return sent_bytes, busy_ns, messages

    def stats(self, top=5):
        """Per-link traffic (links that carried any) and the busiest links.

        ``busy_ns`` is the sum of the serialization times ``trunc(m/B)`` on the link,
        ``utilization`` that over the simulated time, ``max_queue`` the most messages waiting at once (after
        each nanosecond's frees: a message that starts in the nanosecond it arrives does not wait).
        """
        graph = self.graph
        now = self.engine.now
        sent_bytes, busy_ns, messages = self.link_totals()
        max_queue = self._max_queue
        if self._canonical is not None:
            max_queue = [max_queue[c] for c in self._canonical]
        rows = []
        for link in graph.links:
            i = link.index
            if not messages[i]:
                continue
            rows.append({
                "src": link.src,
                "dst": link.dst,
                "bytes": sent_bytes[i],
                "busy_ns": busy_ns[i],
                "messages": messages[i],
                "max_queue": max_queue[i],
                "utilization": round(busy_ns[i] / now, 6) if now > 0 else 0.0,
            })
        ranked = sorted(rows, key=lambda row: (-row["busy_ns"], -row["bytes"]))
        switches = sum(1 for kind in graph.nodes.values() if kind == SWITCH)
        return {
            "model": "congestion",
            "links_total": len(graph.links),
            "links_used": len(rows),
            "switches": switches,
            "bytes_on_links": sum(sent_bytes),
            "links": rows,
            "bottleneck": [
                {key: row[key] for key in ("src", "dst", "busy_ns", "utilization", "bytes", "max_queue")}
                for row in ranked[:top]
            ],
        }
