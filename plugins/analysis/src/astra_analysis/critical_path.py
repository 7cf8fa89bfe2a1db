"""``--critical-path``: the chain of nodes and waits that sets the last finish time.

The walk starts at the node that finishes last on the slowest rank and goes back in time:

* a compute, CPU, remote-memory or send node is on the path for its whole duration; the path goes on with
  whatever let it start: a dependency that ended when it started, else the node before it on its stream,
  else any node of the rank that ended then;
* a receive that waited for its message: the path goes to the matching send on the sender (the message
  from the send's start to its arrival is on the path) and on from the sender;
* a collective: the path goes to the member of the communicator that joined it last (the k-th collective of
  the group on every member) and on from there; the collective from that moment to its end is on the path.

The items cover ``[0, last finish]`` without gap or overlap (a stretch where no node explains the wait is
kept as a ``gap`` item; ``host_launch`` when the host model is on: the kernel waited for the host to launch it), so
their durations add up to the last finish time.

The path's time is then grouped, each group with its ns and share of the path (the groups add up to the path):

* ``by_kind``: compute by op class (``compute:gemm``, ``compute:attention``, ... from :func:`astra_sim.ops.op_class`,
  the breakdown's classes), collectives, sends and messages per communicator (``collective:tp``, ``message:pp``: a
  receive that waited), ``host_launch`` and ``gap``;
* ``by_layer``: the transformer layer a node belongs to, read from the names the generators write
  (``fwd.l12.mb0.qkv``, ``tp_ar.bwd.l3.mb1.mlp_in``, ``layer12.attn.qkv``, ``model.layers.12.mlp``: ``layer 12``),
  the model's other named
  parts (``fwd.embedding.mb0``: ``embedding``, ``fwd.head.mb0``: ``head``, ``optimizer.adam``: ``optimizer``),
  anything else ``other``;
* ``top``: the largest contributors, items summed by name (after the groups: one node is rarely the story).

``totals`` keeps the by-kind ns as a mapping (its earlier form).
"""

from __future__ import annotations

import re
from bisect import bisect_left

from astra_analysis.events import Messages, track
from astra_analysis.views import K_COLL, K_COMPUTE, K_CPU, K_INSTANT, K_MEM, K_RECV, K_SEND, WORLD, node_group

TOP = 10


class _RankIndex:
    """A representative's nodes by id and by end time, and its collectives per (raw) group in issue order."""

    def __init__(self, view):
        self.times = {}
        self.by_end = {}
        self.collectives = {}
        analysis = view.analysis
        for node, start, end in view.records():
            self.times[node.id] = (start, end)
            self.by_end.setdefault(end, []).append(node.id)
            if analysis.kind_of(view.rep, node)[0] == K_COLL:
                self.collectives.setdefault(node_group(node), []).append((start, node.id))
        for items in self.collectives.values():
            items.sort()


class CriticalPath:
    def __init__(self, analysis, host_model=False):
        self.analysis = analysis
        self.host_model = host_model  # the run models the host's kernel launches (a wait is then a launch)
        self.messages = Messages(analysis)
        self._index = {}

    def index(self, view):
        found = self._index.get(view.rep)
        if found is None:
            found = self._index[view.rep] = _RankIndex(view)
        return found

    def item(self, view, node, kind, start, end, what=None):
        analysis = self.analysis
        _, comm = view.kind(node)
        name = node.attrs.get("label") or node.name or f"node {node.id}"
        out = {"rank": view.rank, "node_id": node.id, "name": name, "kind": what or _KIND[kind],
               "start_ns": start, "end_ns": end}
        if kind == K_COMPUTE:
            out["op_class"] = analysis.op_class(view.rep, node)
        if comm is not None:
            out["communicator"] = analysis.communicators.label(comm)
        return out

    def walk(self, rank, end_ns):
        analysis = self.analysis
        view = analysis.view(rank)
        index = self.index(view)
        candidates = index.by_end.get(end_ns, [])
        if not candidates:
            return []
        node_id = max(candidates, key=lambda i: (index.times[i][1] - index.times[i][0], -i))
        items = []
        seen = set()
        while True:
            key = (view.rank, node_id)
            if key in seen:  # a zero-length loop (instant nodes at one time): stop here
                break
            seen.add(key)
            node = view.nodes[node_id]
            index = self.index(view)
            start, end = index.times[node_id]
            kind, _ = view.kind(node)
            if kind == K_RECV and end > start:
                match = self.messages.matching_send(view, node, start)
                if match is not None:
                    sender, send, send_start, _ = match
                    items.append(self.item(view, node, K_RECV, send_start, end, "message"))
                    items[-1]["from_rank"] = sender.rank
                    view, node_id, start = sender, send.id, send_start
                    found = self.cause(view, node_id, start, items)
                    if found is None:
                        break
                    view, node_id = found
                    continue
            if kind == K_COLL:
                joined = self.last_joiner(view, node, start)
                if joined is not None:
                    other, other_id, join = joined
                    items.append(self.item(view, node, kind, join, end))
                    items[-1]["waited_for_rank"] = other.rank
                    view, node_id, start = other, other_id, join
                    found = self.cause(view, node_id, start, items)
                    if found is None:
                        break
                    view, node_id = found
                    continue
            if end > start or kind != K_INSTANT:
                items.append(self.item(view, node, kind, start, end))
            found = self.cause(view, node_id, start, items)
            if found is None:
                break
            view, node_id = found
        items.reverse()
        return [i for i in items if i["end_ns"] > i["start_ns"]]

    def last_joiner(self, view, node, start):
        """The member of the collective's communicator that issued its k-th collective on it last, when that
        is later than this rank: ``(view, node id, time)``; else None."""
        analysis = self.analysis
        raw = node_group(node)
        group = view.group(raw)
        members = range(analysis.total) if group == WORLD else analysis.run.comm_groups.get(group, ())
        own = self.index(view).collectives.get(raw, ())
        k = bisect_left(own, (start, node.id))
        best = None
        for member in members:
            if member == view.rank:
                continue
            other = analysis.view(member)
            index = self.index(other)
            mine = self._raw_group(other, group)
            items = index.collectives.get(mine, ())
            if k < len(items) and items[k][0] > (best[2] if best else start):
                best = (other, items[k][1], items[k][0])
        return best

    def _raw_group(self, view, group):
        if group <= 0 or not any(view.offsets):
            return group
        for raw in self.index(view).collectives:
            if view.group(raw) == group:
                return raw
        return None

    def cause(self, view, node_id, start, items):
        """What let node ``node_id`` start at ``start``: ``(view, node id)`` of a node that ended then (a
        dependency, else the node before it on its stream, else any); a gap item when none ended then."""
        if start <= 0:
            return None
        index = self.index(view)
        node = view.nodes[node_id]
        ended = [i for i in index.by_end.get(start, ()) if i != node_id]
        if ended:
            parents = set(node.data_deps) | set(node.ctrl_deps)
            pick = [i for i in ended if i in parents]
            if not pick:
                stream = self._stream(view, node)
                pick = [i for i in ended if self._stream(view, view.nodes[i]) == stream] or ended
            return view, max(pick, key=lambda i: (index.times[i][1] - index.times[i][0], -i))
        # nothing ended then: the latest end before (with the host model, the kernel waited for its launch)
        kind = "host_launch" if self.host_model else "gap"
        ends = [(e, i) for i, (s, e) in index.times.items() if e < start]
        if not ends:
            items.append({"rank": view.rank, "kind": kind, "name": kind, "start_ns": 0, "end_ns": start})
            return None
        end, other = max(ends)
        items.append({"rank": view.rank, "kind": kind, "name": kind, "start_ns": end, "end_ns": start})
        return view, other

    def _stream(self, view, node):
        kind, _ = view.kind(node)
        if kind == K_RECV:
            return ("recv", node.id)
        return track(view, node, kind, self.analysis.per_communicator, self.analysis.total)[0]


_KIND = {K_COMPUTE: "compute", K_CPU: "cpu", K_COLL: "collective", K_SEND: "send", K_RECV: "recv",
         K_MEM: "remote_memory", K_INSTANT: "instant"}


#: a layer index in a node name: ``l12``, ``layer12`` or ``layers.12`` as a dotted (or underscored) component
_LAYER = re.compile(r"(?:^|[._])(?:l|layer[._]?|layers[._])(\d+)(?=[._]|$)")
#: a named part outside the layers: ``fwd.embedding...``, ``bwd.head...``, ``optimizer...``
_PART = re.compile(r"^(?:(?:fwd|bwd)\.([a-z][a-z_]*)(?=[._]|$)|(optimizer)(?=[._]|$))")


def layer_of(name):
    """The layer (``layer 12``) or other named part of the model (``embedding``, ``head``, ``optimizer``) a node
    name says it belongs to; ``other`` for a name that says neither."""
    if not isinstance(name, str):
        return "other"
    found = _LAYER.search(name)
    if found is not None:
        return f"layer {int(found.group(1))}"
    found = _PART.match(name)
    return (found.group(1) or found.group(2)) if found is not None else "other"


def kind_key(item):
    """The by-kind group of a path item: ``compute:<op class>``, ``<collective|send|recv|message>:<communicator>``,
    or its kind (``host_launch``, ``gap``, ``cpu``, ...)."""
    kind = item["kind"]
    if kind == "compute":
        return f"compute:{item.get('op_class', 'other')}"
    if kind in ("collective", "send", "recv", "message"):
        return f"{kind}:{item.get('communicator', 'p2p')}"
    return kind


def _groups(totals, length):
    """``[{"name", "ns", "share"}]``, largest first (ties by name), the share of the path's ``length``."""
    ordered = sorted(totals.items(), key=lambda kv: (-kv[1], _natural(kv[0])))
    return [{"name": name, "ns": ns, "share": round(ns / length, 6) if length else 0.0} for name, ns in ordered]


def _natural(name):
    """``layer 2`` before ``layer 10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def critical_path(analysis, report):
    """The report's ``critical_path``: the items, their time grouped by kind and by layer (ns and share of the
    path), and the top contributors."""
    finishes = [r.finish_ns for r in report.ranks]
    if not finishes:
        return None
    last = max(range(len(finishes)), key=lambda r: (finishes[r], -r))
    items = CriticalPath(analysis, "host" in report.settings).walk(last, finishes[last])
    totals, layers, contributors = {}, {}, {}
    for item in items:
        length = item["end_ns"] - item["start_ns"]
        key = kind_key(item)
        totals[key] = totals.get(key, 0) + length
        layer = layer_of(item["name"])
        layers[layer] = layers.get(layer, 0) + length
        name = (key, item["name"])
        contributors[name] = contributors.get(name, 0) + length
    top = sorted(contributors.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    path = finishes[last]
    return {"rank": last, "length_ns": path, "items": items,
            "by_kind": _groups(totals, path), "by_layer": _groups(layers, path),
            "totals": dict(sorted(totals.items(), key=lambda kv: -kv[1])),
            "top": [{"kind": k, "name": n, "ns": ns, "share": round(ns / path, 6) if path else 0.0}
                    for (k, n), ns in top],
            "ranks_visited": len({item["rank"] for item in items})}


def summary_table(c):
    """The critical path ``c`` as ``astra run``'s summary shows it (``(title, columns, rows)``): by kind, by layer,
    then the top items (indented)."""
    from astra_analysis.breakdown import format_share, part_label
    from astra_sim.humanize import format_ns
    from astra_sim.termtable import Column

    length = c["length_ns"]
    kinds = c.get("by_kind") or [{"name": k, "ns": ns} for k, ns in c["totals"].items()]
    rows = [[part_label(g["name"]), format_ns(g["ns"]), format_share(g["ns"], length)] for g in kinds[:8]]
    layers = [g for g in c.get("by_layer") or [] if g["name"] != "other" or len(c["by_layer"]) > 1]
    rows += [[f"by layer: {g['name']}", format_ns(g["ns"]), format_share(g["ns"], length)] for g in layers[:6]]
    rows += [[f"  {item['name']} ({part_label(item['kind'])})", format_ns(item["ns"]), format_share(item["ns"], length)]
             for item in c["top"][:5]]
    title = (f"critical path: {format_ns(length)} to the end of rank {c['rank']} ({len(c['items']):,} items "
             f"on {c['ranks_visited']} rank{'s' if c['ranks_visited'] != 1 else ''}): by kind, by layer, then the "
             "top items (indented)")
    return title, [Column("on the path"), Column("time", number=True), Column("share", number=True)], rows
