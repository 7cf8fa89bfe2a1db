"""Cables that go down in the middle of a run on the ``flow`` backend: the run option ``link_failures``.

``link_failures: [{link: [a, b], at_ns: T}, ...]`` names a cable by its two nodes (as ``failed_links`` does) and
the simulated time, in ns from the run's start, at which both of its directions stop carrying anything. Then:

* no route crosses it any more: the routes computed before ``T`` are dropped, and every later one is a fewest-hop
  path of the links left (with the backend's ECMP);
* every flow still transferring over it is cut at ``T``. The fluid model keeps no bytes on the wire, so what it
  sent by ``T`` has arrived; the bytes left leave its source again on a route of the links left, with that
  route's latency (``ecmp="hash"``: one route, by the pair's hash; ``"split"``: evenly over all of them), and
  share those links max-min with the flows already there. Its message arrives when its last part does;
* a flow cut off from its destination (no route left) is a SimulationError naming the cable and the time.

So a step whose cable fails at ``T`` takes longer than the intact step and less than the step without the cable
from the start: until ``T`` it runs at the intact rates, from ``T`` at the rates the remaining capacity gives.
The report's ``network.link_failures`` lists each failure with the flows it cut and the bytes they re-sent."""

from __future__ import annotations

from astra_sim.errors import ConfigError, SimulationError

from astra_network_congestion.flow import _Message, _Single, ecmp_index


def parse_link_failures(value, where="option link_failures"):
    """``[(a, b, at_ns)]`` from the option's value (a list of ``{link: [a, b], at_ns: T}``); a ConfigError naming
    ``where`` and the entry otherwise."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: expected a list of {{link: [a, b], at_ns: T}}, got {value!r}")
    out = []
    for i, entry in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"link", "at_ns"}:
            raise ConfigError(f"{here}: expected {{link: [a, b], at_ns: T}} (T: ns from the run's start), got "
                              f"{entry!r}")
        pair, at = entry["link"], entry["at_ns"]
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise ConfigError(f"{here}.link: expected a pair of node names [a, b], got {pair!r}")
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            raise ConfigError(f"{here}.at_ns: expected an integer >= 0 (ns), got {at!r}")
        out.append((str(pair[0]), str(pair[1]), at))
    return out


def arm(network, value, where="option link_failures"):
    """Book every failure of ``value`` on ``network``'s engine (a :class:`~.flow.FlowNetwork` not yet run)."""
    if network.route_fn is not None:
        raise ConfigError(f"{where}: a network with fixed routes (route_fn) cannot route around a failed link")
    records = []
    for a, b, at in parse_link_failures(value, where):
        links = [link.index for link in network.graph.links if {link.src, link.dst} == {a, b}]
        if not links:
            example = network.graph.links[0] if network.graph.links else None
            raise ConfigError(f"{where}: no link joins {a!r} and {b!r} in {network.graph.source} (links join node "
                              f"names such as {example.src}-{example.dst}; see the report's network_stats links "
                              "src/dst)" if example else f"{where}: {network.graph.source} has no links")
        record = {"link": [a, b], "at_ns": at, "flows_rerouted": 0, "bytes_rerouted": 0}
        records.append(record)
        network.engine.schedule_at(at, _go_down, (network, frozenset(links), record))
    network.description["link_failures"] = records


def _go_down(args):
    """The cable's links go down now: routes are recomputed without them, and the flows on them reroute."""
    net, links, record = args
    net._down.update(links)
    net._routes.clear()
    net._dist.clear()
    net._reverse = None
    net._out = None
    now = net.engine.now
    cut = [flow for flow in net._active.values() if not links.isdisjoint(flow.path)]
    rank = {node: r for r, node in enumerate(net.graph.rank_node)}
    for flow in cut:
        left = _stop(net, flow, now)
        if left <= 0.0:  # its transfer ends now: it arrives as booked
            continue
        graph_links = net.graph.links
        src, dst = rank[graph_links[flow.path[0]].src], rank[graph_links[flow.path[-1]].dst]
        try:
            routes = net.routes(src, dst)
        except ConfigError:
            a, b = record["link"]
            raise SimulationError(f"flow network: link {a}-{b} went down at {record['at_ns']} ns and left no path "
                                  f"from NPU {src} to NPU {dst}, with {left:.0f} bytes of a message still to send"
                                  ) from None
        record["flows_rerouted"] += 1
        record["bytes_rerouted"] += left
        message = flow.message
        if len(routes) > 1 and net.ecmp == "split":
            if message.__class__ is _Single:
                message = _Message(message.fn, message.arg, 1)  # the part it replaces
            message.pending += len(routes) - 1
            for route in routes:
                net._start(route, left / len(routes), message, now, net.segment_bytes)
        else:
            k = net._pair_count.get((src, dst), 0)
            net._pair_count[(src, dst)] = k + 1
            route = routes[ecmp_index(src, dst, k, len(routes))] if len(routes) > 1 else routes[0]
            net._start(route, left, message, now, net.segment_bytes)
    record["bytes_rerouted"] = round(record["bytes_rerouted"], 3)
    if not net._recompute_pending:
        net._recompute_pending = True
        net.engine.schedule(0, net._recompute)


def _stop(net, flow, now):
    """Take ``flow`` off its links now, as an ended flow is (its links refill); the bytes it has left to send
    (0 when its transfer ends now: it is left to end as booked)."""
    rate = flow.rate
    left = float(flow.left)
    if rate:
        left = max(0.0, flow.left - rate * (now - flow.t_base))
        if flow.end_ns <= now or left <= 0.0:
            return 0.0
        if net._link_load is not None:
            net._load(flow, now)
        for link in flow.links:
            by_rate = net._groups[link]
            group = by_rate[rate]
            del group[flow.fid]
            if not group:
                del by_rate[rate]
            net._dirty.append(link)
        net._theta = min(net._theta, rate)
    else:  # started this nanosecond, not rated yet
        net._new.remove(flow)
    del net._active[flow.fid]
    for link in flow.path:
        net._bytes[link] -= left  # counted in full when it started: these bytes never cross the old path
        count = net._nflows[link] - 1
        net._nflows[link] = count
        if not count:
            net._busy_ns[link] += now - net._busy_since[link]
    return left
