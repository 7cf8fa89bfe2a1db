"""The ``flow`` backend: a flow-level (fluid) network model for arbitrary graphs.

Every message is a *flow* on a routed path of directed links of a
:class:`~astra_network_congestion.graph.NetworkGraph`. The model:

Routing
    The candidate paths from the source rank's node to the destination rank's node are the
    fewest-hop paths (at most ``max_paths`` of them, found depth first along each node's
    ``out_links``, links to switches before links to NPUs: a deterministic order), and of those
    the ones that pass through the fewest other NPUs. NPUs may forward when nothing else does (the
    analytical YAML's ``Ring``: NPU k reaches k+2 through k+1), but a path through switches wins
    a tie. With ``path_selection="widest"`` (the default) only the candidates with the largest
    bottleneck bandwidth are kept, so traffic between two GPUs of one host takes the NVSwitch
    rather than an equally short detour through the NICs and a leaf switch; ``"all"`` keeps every
    candidate. A ``route_fn(src_rank, dst_rank) -> link indices`` given to the constructor
    replaces all this (one fixed path per pair, no ECMP). Paths are computed once per rank pair.

ECMP
    ``ecmp="hash"`` (default): each message takes one of the equal-cost paths, chosen by a stable
    64-bit mix (splitmix64, not Python's salted ``hash``) of ``(src, dst, k)`` where ``k`` counts
    the messages sent so far from ``src`` to ``dst``: runs are deterministic and successive
    messages of a pair spread over the paths. ``ecmp="split"``: the message is split evenly over
    every path (packet spraying): one sub-flow per path, ``size / n`` bytes each; the message
    arrives when its last sub-flow does.

Bandwidth sharing
    The rates of the flows in progress are max-min fair (progressive filling: repeatedly find the
    link with the smallest fair share ``unallocated capacity / unfrozen flows`` and freeze its
    unfrozen flows at that share). Rates are recomputed only when the set of flows changes: all
    starts and ends at one nanosecond are handled by one recomputation, run from an event
    scheduled for the current time when the first change is seen. A recomputation refills only
    the flows whose rate can change (see :meth:`FlowNetwork._recompute`): those at least as fast
    as the slowest flow that ended (or the smallest equal share a new flow can get), connected to
    the change through such flows; every slower flow provably keeps its rate. The result is the
    max-min allocation of all flows (the tests check it against a from-scratch computation).

Time and rounding
    Times are integer ns; remaining bytes are floats. When its rate changes at time ``t`` a flow
    records ``t`` and its remaining bytes ``r = r_prev - rate_prev * (t - t_prev)`` (clamped at
    0); a flow whose rate is unchanged by a recomputation keeps its record, so its end time does
    not move. With rate ``x`` (bytes/ns) and path latency ``L`` the flow's transfer ends at
    ``t + trunc(r / x)``: it frees its share of the links then (the event that ends it); its last
    byte reaches the destination at ``t + trunc(L + r / x)``, and the message's callback
    ``fn(arg)`` is scheduled for that time. So latency comes *after* the transfer (the link
    carries the flow from the moment it is sent; propagation only delays delivery), and on a
    single uncontended link a message takes exactly ``trunc(L + size / B)`` ns, like the
    analytical backend's ``int(latency + size / bandwidth)``.

Latency
    ``L`` is the sum of the path's link latencies plus ``graph.switch_latency_ns`` of every switch
    the path crosses, added once per message (not per hop of serialisation): flows are
    cut-through/pipelined, so a message through k switches does not pay k serialisations. With
    ``segment_bytes`` set, the first segment is stored and forwarded at every hop, which adds the
    pipeline fill ``s * (sum of 1/B_i over the path - 1/min B_i)`` with ``s = min(segment_bytes,
    size)`` and the links' nominal bandwidths ``B_i`` (for equal bandwidths: ``(hops - 1) * s /
    B``); it is part of ``L``.

Statistics (:meth:`FlowNetwork.stats`)
    per link that carried traffic: ``bytes``, ``busy_ns`` (time with at least one flow on it),
    ``saturated_ns`` (time the flows on it used all of its bandwidth: it was a bottleneck of the
    max-min allocation), ``max_concurrent_flows``; ``bottleneck`` lists the links with the
    longest ``saturated_ns`` (ties: ``busy_ns``, then bytes).

Options
    ``FlowNetwork(graph, engine, ecmp=, segment_bytes=, path_selection=, max_paths=, route_fn=)``;
    through :meth:`FlowNetwork.from_context` the run options ``flow_ecmp``,
    ``flow_segment_bytes``, ``flow_path_selection`` and ``flow_max_paths`` (when a plugin adds
    such command-line flags).

Failed links
    The run option ``failed_links`` (pairs of node names) takes those cables out of the graph
    before routing: every route is a fewest-hop path of what is left, so traffic reroutes and
    shares the remaining capacity (two parallel paths, one down: the transfer takes twice as long).
    The run option ``link_failures`` (``[{link: [a, b], at_ns: T}]``) takes a cable down at ``T`` in the
    middle of the run: the flows on it reroute then (:mod:`astra_network_congestion.link_failures`).

Folding
    Runs of symmetric ranks fold where the graph and the routes are symmetric (:mod:`astra_network_congestion.flow_fold`).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from astra_sim.errors import ConfigError, FoldAbandoned

from astra_network_congestion.flow_config import _is_analytical_yaml, _options
from astra_network_congestion.flow_routing import FlowRouting, ecmp_index  # noqa: F401 (ecmp_index: re-exported)

#: A link is saturated when less than this fraction of its bandwidth is left unallocated.
_SATURATION_SLACK = 1e-9
_INF = float("inf")
_THETA_SLACK = 1.0 - 1e-9
ECMP_MODES = ("hash", "split")
PATH_SELECTIONS = ("widest", "all")


class _Message:
    __slots__ = ("fn", "arg", "pending", "arrival", "history")

    def __init__(self, fn, arg, pending, history=None):
        self.fn = fn
        self.arg = arg
        self.pending = pending
        self.arrival = 0
        self.history = history  # a folded run: the sending event's history (its arrival descends from it)


class _Single:
    """The callback of a message that travels as one flow."""

    __slots__ = ("fn", "arg", "history")

    def __init__(self, fn, arg, history=None):
        self.fn = fn
        self.arg = arg
        self.history = history


class _Flow:
    __slots__ = ("fid", "links", "path", "size", "left", "rate", "t_base", "end_ns", "ver", "latency", "message",
                 "mark", "lw", "pw", "wmap")

    def __init__(self, fid, route, size, latency, message, now, folded):
        self.fid = fid
        self.links = route.cfill  # the links that constrain its rate (Route.fill; canonical links when folded) ...
        self.lw = route.cfill_w  # ... and how many flows it counts for on each (1 unfolded)
        self.path = route.cpath  # every link it crosses (canonical when folded) ...
        self.pw = route.cpath_w  # ... and its weight on each
        self.wmap = dict(zip(route.cfill, route.cfill_w)) if folded else None
        self.size = size
        self.left = float(size)  # bytes left at t_base
        self.rate = 0.0  # bytes/ns; 0 until the first recomputation
        self.t_base = now
        self.end_ns = -1
        self.ver = 0
        self.latency = latency
        self.message = message
        self.mark = 0


class FlowNetwork(FlowRouting):
    """Flow-level network over a :class:`~astra_network_congestion.graph.NetworkGraph`.

    ``FlowNetwork(graph, engine, *, ecmp="hash", segment_bytes=None, path_selection="widest",
    max_paths=64, route_fn=None, npus_per_dim=None, description=None)``; see the module
    docstring for the model. :meth:`from_context` builds the graph from the run's network file
    (the analytical YAML, else an InfraGraph file).
    """

    def __init__(
        self,
        graph,
        engine,
        *,
        ecmp="hash",
        segment_bytes=None,
        path_selection="widest",
        max_paths=64,
        route_fn=None,
        npus_per_dim=None,
        description=None,
    ):
        if not graph.rank_node:
            raise ConfigError(f"{graph.source}: the network graph places no rank on an NPU")
        if ecmp not in ECMP_MODES:
            raise ConfigError(f"flow network: ecmp must be one of {', '.join(ECMP_MODES)}, got {ecmp!r}")
        if path_selection not in PATH_SELECTIONS:
            raise ConfigError(
                f"flow network: path_selection must be one of {', '.join(PATH_SELECTIONS)}, got {path_selection!r}"
            )
        if segment_bytes is not None:
            if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, (int, float)) or segment_bytes <= 0:
                raise ConfigError(f"flow network: segment_bytes must be a number > 0, got {segment_bytes!r}")
        if isinstance(max_paths, bool) or not isinstance(max_paths, int) or max_paths < 1:
            raise ConfigError(f"flow network: max_paths must be an integer >= 1, got {max_paths!r}")
        self.graph = graph
        self.engine = engine
        self.ecmp = ecmp
        self.segment_bytes = segment_bytes
        self.path_selection = path_selection
        self.max_paths = max_paths
        self.route_fn = route_fn
        self.description = dict(description or {})
        self.npus_per_dim = graph.logical_dims(npus_per_dim)
        links = graph.links
        for link in links:
            if not link.bandwidth_bytes_per_ns > 0:
                raise ConfigError(
                    f"{graph.source}: link {link.src} -> {link.dst} has bandwidth {link.bandwidth_bytes_per_ns}"
                )
        n = len(links)
        self._bw = [link.bandwidth_bytes_per_ns for link in links]
        self._groups = [{} for _ in range(n)]  # link -> {rate: {fid: flow}} (rated flows, start order)
        self._nflows = [0] * n  # link -> flows on it (rated or not)
        self._cap = [0.0] * n  # scratch for progressive filling
        self._cnt = [0] * n
        self._drop = [0] * n
        self._lmark = [0] * n
        self._hl = [None] * n
        # statistics
        self._bytes = [0] * n
        self._busy_ns = [0] * n
        self._busy_since = [0] * n
        self._sat_ns = [0] * n
        self._sat_since = [-1] * n  # -1: not saturated
        self._max_flows = [0] * n
        self._down = set()  # links down now (link_failures): no route crosses them
        # routing
        self._routes = {}  # (src rank, dst rank) -> [_Route]
        self._rep = self._series_runs()  # link -> the link that stands for its run
        self._dist = {}  # dst node -> {node: hops to dst}, a bounded cache
        self._reverse = None
        self._out = None
        self._pair_count = {}  # (src, dst) -> messages sent
        # flows
        self._next_fid = 0
        self._active = {}  # fid -> flow
        self._heap = []  # (end_ns, fid, ver); stale entries are skipped
        self._new = []  # flows started since the last recomputation
        self._dirty = []  # links of the flows that ended since the last recomputation
        self._theta = _INF  # the smallest rate of those flows
        self._recompute_pending = False
        self._wakeups = set()  # times with a pending _wake event
        self._epoch = 0
        self.flows_started = 0
        self.messages = 0
        self.recomputations = 0
        self.flows_rated = 0  # flow rate assignments over all recomputations
        self._link_load = None  # a LinkLoad when a timeline records link use (record_link_load)
        # a folded run (fold_links): per link its orbit's canonical link and weight, the group's order
        self._canonical = None
        self._weight = None
        self._order = 1
        self._fold_kinds = None  # (kinds, notes) of symmetry_dims, computed once
        self._no_fold = None  # why this instance cannot fold at all (fixed routes, links failing mid-run)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_context(cls, context):
        """The ``flow`` backend: the analytical YAML (Ring / FullyConnected / Switch dimensions,
        built by :func:`astra_network_congestion.builders.from_analytical`) when the network file
        has ``topology:`` and ``npus_count:`` keys, else an InfraGraph file
        (:func:`astra_network_congestion.infragraph.load_network_graph`).

        Options (``context.options``, e.g. from command-line flags): ``flow_ecmp``,
        ``flow_segment_bytes``, ``flow_path_selection``, ``flow_max_paths``; ``failed_links``
        (``[[node, node], ...]``, set by ``astra cluster``): cables down for the whole run, left out of
        the graph before any route is computed (:meth:`NetworkGraph.without_links`)."""
        path = context.network_config_path
        if path is None:
            raise ConfigError("the flow network backend needs a network configuration file")
        description = {}
        config = fabric = None
        if _is_analytical_yaml(path):
            from astra_network_analytical import parse_network_config

            from astra_network_congestion.builders import fabric_options, from_analytical
            from astra_network_congestion.fabrics import build_fabric, fabric_from_options

            config = parse_network_config(path, getattr(context, "warn", None))
            fabric = fabric_from_options(getattr(context, "options", None))  # --fabric: rail / multi-plane
            if fabric is not None:
                built = build_fabric(config, fabric)
                graph = built.graph
            else:
                built = from_analytical(config, **fabric_options(getattr(context, "options", None)))
                graph = built[0] if isinstance(built, tuple) else built
            description = {
                "topology": list(config.topology),
                "npus_count": list(config.npus_count),
                "bandwidth_gib_per_s": list(config.bandwidth_gib_per_s),
                "latency_ns": list(config.latency_ns),
            }
            tiers = fabric_options(getattr(context, "options", None))
            if fabric is not None:
                description["fabric"] = built.description
            elif tiers["nodes_per_leaf"] is not None:
                description["fabric"] = tiers
        else:
            if (getattr(context, "options", None) or {}).get("fabric") is not None:
                raise ConfigError(f"--fabric builds the network from the analytical YAML (e.g. --platform's), "
                                  f"not from the InfraGraph file {path}")
            from astra_network_congestion.infragraph import load_network_graph

            graph = load_network_graph(path, context)
        failed = (context.options or {}).get("failed_links")
        if failed:  # links down for the whole run: routes go around them (ECMP over what is left)
            graph = graph.without_links(failed, "option failed_links")
            description["failed_links"] = [list(pair) for pair in failed]
        settings = _options(context.options or {})
        if fabric is not None and fabric.kind == "planes":
            settings.setdefault("ecmp", "split")  # a multi-plane NIC sprays a message over its planes
        network = cls(graph, context.engine, description=description, **settings)
        network.switch_config = config  # the switches' in-network reduction (inSwitch)
        if (context.options or {}).get("link_failures"):  # cables that go down mid-run: their flows reroute then
            from astra_network_congestion.link_failures import arm

            arm(network, context.options["link_failures"])
            network._no_fold = "links fail mid-run (link_failures): the flows on them reroute asymmetrically"
            network.description["fold_notes"] = [network._no_fold]
        return network

    # ------------------------------------------------------------------ hot path
    def send(self, src, dst, size, fn, arg):
        """Start a message of ``size`` bytes; ``fn(arg)`` runs on the engine when it has arrived."""
        routes = self._routes.get((src, dst))
        if routes is None:
            routes = self.routes(src, dst)
        self.messages += 1
        engine = self.engine
        now = engine.now
        segment = self.segment_bytes
        history = engine.current if self._canonical is not None else None
        if len(routes) == 1 or self.ecmp == "hash":
            if len(routes) == 1:
                route = routes[0]
            else:
                if self._canonical is not None:
                    raise FoldAbandoned(f"flow: ECMP hash picks one of the {len(routes)} paths from {src} to {dst} "
                                        "by a hash of the rank numbers, which relabelled ranks do not keep "
                                        "(ecmp split, or single-path routes, fold)")
                key = (src, dst)
                k = self._pair_count.get(key, 0)
                self._pair_count[key] = k + 1
                route = routes[ecmp_index(src, dst, k, len(routes))]
            self._start(route, size, _Single(fn, arg, history), now, segment)
        else:  # split evenly over every path
            n = len(routes)
            message = _Message(fn, arg, n, history)
            for route in routes:
                self._start(route, size / n, message, now, segment)
        if not self._recompute_pending:
            self._recompute_pending = True
            engine.at_end_of_ns(self._recompute)

    def _start(self, route, size, message, now, segment):
        latency = route.latency
        if segment is not None:
            s = segment if segment < size else size
            latency += s * (route.inv_sum - route.inv_max)
        fid = self._next_fid
        self._next_fid = fid + 1
        flow = _Flow(fid, route, size, latency, message, now, self._canonical is not None)
        self._active[fid] = flow
        self._new.append(flow)
        self.flows_started += 1
        nflows = self._nflows
        nbytes = self._bytes
        max_flows = self._max_flows
        if self._canonical is None:
            for link in flow.path:
                c = nflows[link] + 1
                nflows[link] = c
                if c == 1:
                    self._busy_since[link] = now
                if c > max_flows[link]:
                    max_flows[link] = c
                nbytes[link] += size
            return
        for link, w in zip(flow.path, flow.pw):  # folded: the flow counts for w flows on the canonical link
            c = nflows[link]
            if not c:
                self._busy_since[link] = now
            c += w
            nflows[link] = c
            if c > max_flows[link]:
                max_flows[link] = c
            for _ in range(w):  # one addition per flow, as unfolded
                nbytes[link] += size

    def _recompute(self, _arg=None):
        """New max-min fair rates after flows started or ended (progressive filling).

        Only part of the network is refilled. Let ``theta`` be the smallest of the old rates of
        the flows that ended and, for each flow that started, ``min over its links of
        capacity / flows on the link`` (a lower bound of its new rate: no link of the flow can
        fill up below that level). Progressive filling runs identically below level ``theta``
        with or without the change (a link that filled below it would have frozen an ended flow
        below its old rate, or a new flow below its bound), so every flow with a rate below
        ``theta`` keeps it. The others (``H``) are refilled, as a max-min problem on the
        capacities the slower flows leave, but only the ones connected to the change through
        links and flows of ``H`` (the rest of ``H`` has the same sub-problem as before). Rates
        within 1e-9 (relative) below ``theta`` count as ``theta``: equal rates on paper may
        differ in their last bits. Per link, flows are kept grouped by rate so the slower ones
        are skipped in bulk.

        The floats depend only on each link's capacity and (weighted) flow count, not on link or
        flow numbering: every link whose share equals the lowest one is frozen in the same step at
        that level, and a link's capacity drops by ``level x flows frozen on it`` in one operation
        (what lets a folded run give every flow the rate its images get unfolded:
        :mod:`astra_network_congestion.flow_fold`). It runs once at the end of a nanosecond with
        changes (``EventEngine.at_end_of_ns``), so the flows one recomputation sees do not depend on
        the order of that nanosecond's events.
        """
        self._recompute_pending = False
        new = self._new
        dirty = self._dirty
        if not new and not dirty:
            return
        self._new = []
        self._dirty = []
        self.recomputations += 1
        now = self.engine.now
        bw = self._bw
        nflows = self._nflows
        groups = self._groups
        theta = self._theta
        self._theta = _INF
        for flow in new:
            for link in flow.links:
                share = bw[link] / nflows[link]
                if share < theta:
                    theta = share
        # Rates equal on paper may differ in the last bits: refill those just below theta too.
        theta *= _THETA_SLACK
        selected = self._select(theta, dirty, new)
        if selected is None:  # rounding left no room for the faster flows somewhere: refill all
            selected = self._select(-1.0, dirty, new)
        visited, hflows, touched, heap = selected
        frozen = visited + 1
        hl = self._hl
        cap = self._cap
        cnt = self._cnt
        drop = self._drop  # per link: the weight of the flows frozen on it in this step (0 between steps)
        heapify(heap)
        events = self._heap
        link_load = self._link_load
        while heap:
            share, link = heappop(heap)
            c = cnt[link]
            if not c:
                continue
            level = cap[link] / c
            if level > share:
                heappush(heap, (level, link))
                continue
            # Every other link whose share is this level now is frozen with it.
            batch = [link]
            lower = None
            while heap and heap[0][0] <= level:
                _key, other = heappop(heap)
                c = cnt[other]
                if not c:
                    continue
                cur = cap[other] / c
                if cur == level:
                    batch.append(other)
                elif cur > level:
                    heappush(heap, (cur, other))
                else:  # only through rounding: a lower share than the level found; start again from it
                    lower = (cur, other)
                    break
            if lower is not None:
                heappush(heap, lower)
                for other in batch:
                    heappush(heap, (level, other))
                continue
            if level <= 0.0:  # only through rounding: keep every flow moving
                level = share if share > 0.0 else bw[link] * 1e-12
            dropped = []
            mark_dropped = dropped.append
            for blink in batch:
                for flow in hl[blink]:
                    if flow.mark != visited:
                        continue
                    flow.mark = frozen
                    for other, w in zip(flow.links, flow.lw):
                        if not drop[other]:
                            mark_dropped(other)
                        drop[other] += w
                    old = flow.rate
                    if old == level:
                        continue  # same rate: same end time
                    links = flow.links
                    fid = flow.fid
                    if old:
                        if link_load is not None:
                            self._load(flow, now)
                        left = flow.left - old * (now - flow.t_base)
                        flow.left = left if left > 0.0 else 0.0
                        flow.t_base = now
                        for other in links:
                            by_rate = groups[other]
                            group = by_rate[old]
                            del group[fid]
                            if not group:
                                del by_rate[old]
                    for other in links:
                        by_rate = groups[other]
                        group = by_rate.get(level)
                        if group is None:
                            by_rate[level] = {fid: flow}
                        else:
                            group[fid] = flow
                    flow.rate = level
                    end = now + int(flow.left / level)
                    flow.end_ns = end
                    flow.ver += 1
                    heappush(events, (end, fid, flow.ver))
            for other in dropped:
                n = drop[other]
                drop[other] = 0
                cap[other] -= level * n
                cnt[other] -= n
        self.flows_rated += len(hflows)
        # Saturated (bottleneck) links: all of their bandwidth is allocated.
        sat_since = self._sat_since
        sat_ns = self._sat_ns
        for link in touched:
            hl[link] = None
            saturated = nflows[link] > 0 and cap[link] <= bw[link] * _SATURATION_SLACK
            since = sat_since[link]
            if saturated:
                if since < 0:
                    sat_since[link] = now
            elif since >= 0:
                sat_ns[link] += now - since
                sat_since[link] = -1
        if len(events) > 4 * len(self._active) + 1024:
            self._compact()
        self._arm()

    def _select(self, theta, dirty, new):
        """The flows to refill (rate >= theta, connected to the change), the links they and the
        change touch, and the progressive-filling heap of those links; None when the capacity the
        slower flows leave on such a link is not positive (only possible through rounding). The
        slower flows' allocation is summed in increasing rate order (independent of history)."""
        self._epoch += 2
        visited = self._epoch
        bw = self._bw
        groups = self._groups
        # H: the flows to refill; ``touched``: the links explored, hl[link]: its flows in H, cnt[link]: their weight.
        lmark = self._lmark
        hl = self._hl
        cnt = self._cnt
        hflows = []
        touched = []
        for link in dirty:
            if lmark[link] != visited:
                lmark[link] = visited
                hl[link] = []
                cnt[link] = 0
                touched.append(link)
        for flow in new:
            flow.mark = visited
            hflows.append(flow)
            for link, w in zip(flow.links, flow.lw):
                if lmark[link] != visited:
                    lmark[link] = visited
                    hl[link] = [flow]
                    cnt[link] = w
                    touched.append(link)
                else:
                    hl[link].append(flow)
                    cnt[link] += w
        i = 0
        while i < len(touched):
            link = touched[i]
            i += 1
            for rate, group in groups[link].items():
                if rate < theta:
                    continue
                for flow in group.values():
                    if flow.mark == visited:
                        continue
                    flow.mark = visited
                    hflows.append(flow)
                    for other, w in zip(flow.links, flow.lw):
                        if lmark[other] != visited:
                            lmark[other] = visited
                            hl[other] = [flow]
                            cnt[other] = w
                            touched.append(other)
                        else:
                            hl[other].append(flow)
                            cnt[other] += w
        # The capacity the flows below theta leave on those links.
        cap = self._cap
        heap = []
        folded = self._canonical is not None
        for link in touched:
            left = bw[link]
            by_rate = groups[link]
            if by_rate:
                for rate in (by_rate if len(by_rate) == 1 else sorted(by_rate)):
                    if rate >= theta:
                        break
                    group = by_rate[rate]
                    if folded:
                        left -= rate * sum(flow.wmap[link] for flow in group.values())
                    else:
                        left -= rate * len(group)
            cap[link] = left
            c = cnt[link]
            if c:
                if left <= 0.0:
                    for link in touched:
                        hl[link] = None
                    return None
                heap.append((left / c, link))
        return visited, hflows, touched, heap

    def _compact(self):
        events = [(f.end_ns, fid, f.ver) for fid, f in self._active.items() if f.rate]
        heapify(events)
        self._heap = events

    def _arm(self):
        """Make sure an event wakes us at the earliest end of a transfer."""
        events = self._heap
        active = self._active
        while events:
            end, fid, ver = events[0]
            flow = active.get(fid)
            if flow is None or flow.ver != ver:
                heappop(events)
                continue
            if end not in self._wakeups:
                self._wakeups.add(end)
                self.engine.schedule_at(end, self._wake, end)
            return

    def _wake(self, when):
        self._wakeups.discard(when)
        engine = self.engine
        now = engine.now
        woke = engine.current
        events = self._heap
        active = self._active
        groups = self._groups
        nflows = self._nflows
        busy_ns = self._busy_ns
        busy_since = self._busy_since
        schedule = self.engine.schedule
        dirty = self._dirty
        theta = self._theta
        folded = self._canonical is not None
        done = False
        while events and events[0][0] <= now:
            end, fid, ver = heappop(events)
            flow = active.get(fid)
            if flow is None or flow.ver != ver:
                continue
            done = True
            del active[fid]
            rate = flow.rate
            if self._link_load is not None:
                self._load(flow, now)
            if rate < theta:
                theta = rate
            for link in flow.links:
                by_rate = groups[link]
                group = by_rate[rate]
                del group[fid]
                if not group:
                    del by_rate[rate]
                dirty.append(link)
            if folded:
                for link, w in zip(flow.path, flow.pw):
                    c = nflows[link] - w
                    nflows[link] = c
                    if not c:
                        busy_ns[link] += now - busy_since[link]
            else:
                for link in flow.path:
                    c = nflows[link] - 1
                    nflows[link] = c
                    if not c:
                        busy_ns[link] += now - busy_since[link]
            message = flow.message
            arrival = flow.t_base + int(flow.latency + flow.left / rate)
            if message.history is not None:  # a folded run: the arrival descends from the send
                engine.current = message.history
            if message.__class__ is _Single:
                schedule(arrival - now if arrival > now else 0, message.fn, message.arg)
                continue
            if arrival > message.arrival:
                message.arrival = arrival
            message.pending -= 1
            if not message.pending:
                delay = message.arrival - now
                schedule(delay if delay > 0 else 0, message.fn, message.arg)
        self._theta = theta
        engine.current = woke
        if done:
            if not self._recompute_pending:
                self._recompute_pending = True
                engine.at_end_of_ns(self._recompute)
        else:
            self._arm()

    def record_link_load(self, link_load):
        """Report the bandwidth every flow takes on its links to ``link_load``
        (:class:`astra_analysis.links.LinkLoad`) from now on (called before the run). In a folded run only each
        orbit's canonical link is reported (with the load of all the flows it stands for)."""
        for link in self.graph.links:
            link_load.names[link.index] = link.name or f"{link.src} -> {link.dst}"
        self._link_load = link_load

    def _load(self, flow, now):
        """The flow ran at its rate since its last rate change: that share of each of its links."""
        rate = flow.rate
        add = self._link_load.add
        bw = self._bw
        for link, w in zip(flow.path, flow.pw):  # w: the flows it stands for (folded), else 1
            add(link, flow.t_base, now, rate * w / bw[link])

    # ------------------------------------------------------------------ folding
    def symmetry_dims(self):
        """Per dimension, which relabellings of its coordinates extend to automorphisms of the graph (``"any"``,
        ``"rotation"`` or ``"none"``); None with fixed routes or links that fail mid-run
        (:func:`astra_network_congestion.flow_fold.network_kinds`)."""
        from astra_network_congestion.flow_fold import network_kinds

        return network_kinds(self)

    def fold_links(self, symmetry):
        """Before a folded run: each simulated flow stands for its images under ``symmetry``, each link for its
        orbit (:func:`astra_network_congestion.flow_fold.fold_network`); raises FoldAbandoned where not exact."""
        from astra_network_congestion.flow_fold import fold_network

        fold_network(self, symmetry)

    # ------------------------------------------------------------------ report
    def flow_rates(self):
        """The flows in progress as ``(link indices, rate in bytes/ns)``, oldest first (a rate of 0
        means not yet rated: the recomputation of this nanosecond has not run)."""
        return [(flow.path, flow.rate) for flow in self._active.values()]

    def in_switch(self, dim):
        """The switch of dimension ``dim`` for ``inSwitch``: the analytical YAML's ``switch_reduction*`` keys, or
        an InfraGraph's switches that declare reduction (:mod:`astra_network_congestion.switch_tiers`)."""
        from astra_network_congestion.switch_tiers import network_in_switch

        return network_in_switch(self, dim)

    def describe(self):
        out = {
            "backend": "flow",
            "graph": self.graph.describe(),
            "routing": "fixed routes (route_fn)" if self.route_fn is not None else
            f"fewest hops, path selection {self.path_selection!r}, at most {self.max_paths} paths",
            "ecmp": self.ecmp,
            "sharing": "max-min fair (progressive filling), recomputed when flows start or end",
            "latency": "sum of link and switch latencies, after the transfer; times truncated to ns",
            "segment_bytes": self.segment_bytes,
        }
        out.update(self.description)
        return out

    def stats(self, top=10):
        """Per-link traffic and the bottleneck links (see the module docstring)."""
        now = self.engine.now
        graph = self.graph
        canonical = self._canonical  # a folded run: every link carries what its orbit's canonical link does
        rows = []
        for link in graph.links:
            i = link.index
            c = i if canonical is None else canonical[i]
            if not self._bytes[c]:
                continue
            busy = self._busy_ns[c] + (now - self._busy_since[c] if self._nflows[c] else 0)
            r = self._rep[i]  # a link left out of the max-min computation is as full as its run's
            if r == i or self._bw[i] <= self._bw[r] * (1.0 + _SATURATION_SLACK):
                r = r if canonical is None else canonical[r]
                sat = self._sat_ns[r] + (now - self._sat_since[r] if self._sat_since[r] >= 0 else 0)
            else:
                sat = 0
            nbytes = self._bytes[c]
            rows.append({
                "link": i,
                "name": link.name,
                "src": link.src,
                "dst": link.dst,
                "bandwidth_bytes_per_ns": link.bandwidth_bytes_per_ns,
                "bytes": int(nbytes) if float(nbytes).is_integer() else nbytes,
                "busy_ns": busy,
                "saturated_ns": sat,
                "max_concurrent_flows": self._max_flows[c],
                "utilization": round(nbytes / (link.bandwidth_bytes_per_ns * busy), 6) if busy else None,
            })
        ranked = sorted(rows, key=lambda r: (-r["saturated_ns"], -r["busy_ns"], -r["bytes"], r["link"]))
        order = self._order  # a folded run's flows stand for this many each
        return {
            "backend": "flow",
            "messages": self.messages * order,
            "flows": self.flows_started * order,
            "recomputations": self.recomputations,
            "flow_rate_assignments": self.flows_rated * order,
            "links": rows,
            "bottleneck": [
                {k: r[k] for k in ("link", "name", "src", "dst", "bytes", "busy_ns", "saturated_ns",
                                   "max_concurrent_flows")}
                for r in ranked[:top]
            ],
        }


__all__ = ["FlowNetwork", "ecmp_index"]
