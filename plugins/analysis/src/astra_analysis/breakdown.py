"""Where a rank's time goes: parts that add up exactly to its finish time (the report's breakdown, filled in through
the hook ``astra_report_breakdown`` from the spans the kernel records, :mod:`astra_sim.spans`, seen through
:mod:`astra_analysis.views`).

Every nanosecond of ``[0, finish]`` goes to exactly one part, the first of these that is running then:

1. ``compute:<class>``: a GPU compute node (``gemm``, ``attention``, ``elementwise``, ``other``);
2. ``exposed:<communicator>``: collectives and sends not hidden by compute, per communicator (when
   several run at once, the nanoseconds are shared out evenly, the remainder to the first by name);
   a communicator's share while one of its collectives has a phase that a switch reduces or multicasts
   (the ``inSwitch`` algorithm) goes to ``exposed_in_switch:<communicator>`` instead: in-switch
   communication is its own kind;
3. ``remote_memory``: remote-memory loads and stores;
4. ``recv_wait:<communicator>``: waiting on a receive with nothing else running (the pipeline bubble);
5. ``cpu``: CPU ops;
6. ``idle``: nothing.

GPU activity comes before CPU ops, so compute + exposed + remote memory + receive wait is what a profiler's
GPU timeline shows as busy (HolisticTraceAnalysis's temporal breakdown: its compute is our compute, its
non-compute the exposed, remote-memory and receive parts). Per communicator the breakdown also gives the
time any of its operations ran (``busy_ns``) and the part of it under compute (``overlapped_ns``), and per rank
the union of all communication (receives included) and the part of it under compute (HTA's comm/comp overlap
is their ratio); a communicator with in-switch phases also gets ``in_switch_busy_ns`` (the time any of them ran)
and ``in_switch_exposed_ns``.
"""

from __future__ import annotations

from astra_analysis.views import K_COLL, K_COMPUTE, K_CPU, K_MEM, K_RECV, K_SEND

COMPUTE_CLASSES = ("gemm", "attention", "elementwise", "other")
_C_COMPUTE, _C_COMM, _C_MEM, _C_RECV, _C_CPU, _C_SWITCH = range(6)


class RankParts:
    """A rank's breakdown with communicators keyed by group id (the representative's, see ``relabelled``)."""

    __slots__ = ("finish_ns", "compute", "cpu", "memory", "idle", "exposed", "recv_wait", "busy", "overlapped",
                 "comm_busy", "comm_overlapped", "in_switch_exposed", "in_switch_busy")

    def __init__(self, finish_ns):
        self.finish_ns = finish_ns
        self.compute = dict.fromkeys(COMPUTE_CLASSES, 0)
        self.cpu = self.memory = self.idle = 0
        self.exposed = {}
        self.recv_wait = {}
        self.busy = {}
        self.overlapped = {}
        self.comm_busy = self.comm_overlapped = 0
        self.in_switch_exposed = {}
        self.in_switch_busy = {}


def rank_parts(view):
    """Sweep the rank's spans once (see the module docstring)."""
    parts = RankParts(view.finish_ns or 0)
    analysis = view.analysis
    rep = view.rep
    categories = {}  # (class, key) -> index
    cat_class = []
    cat_key = []
    events = []
    for node, _op, _dim, _size, start, end in view.in_switch_phases():
        if end > start:
            events.append((start, end, (_C_SWITCH, analysis.kind_of(rep, node)[1])))
    for node, start, end in view.records():
        if end <= start:
            continue
        kind, comm = analysis.kind_of(rep, node)
        if kind == K_COMPUTE:
            cat = (_C_COMPUTE, analysis.op_class(rep, node))
        elif kind in (K_COLL, K_SEND):
            cat = (_C_COMM, comm)
        elif kind == K_RECV:
            cat = (_C_RECV, comm)
        elif kind == K_MEM:
            cat = (_C_MEM, None)
        elif kind == K_CPU:
            cat = (_C_CPU, None)
        else:
            continue
        events.append((start, end, cat))
    spans = events
    events = []
    for start, end, cat in spans:
        index = categories.get(cat)
        if index is None:
            index = categories[cat] = len(cat_class)
            cat_class.append(cat[0])
            cat_key.append(cat[1])
        events.append((start, 1, index))
        events.append((end, -1, index))
    events.sort()
    active = [0] * len(cat_class)
    running = [set() for _ in range(6)]  # per class: the active categories
    compute, exposed, recv_wait, busy, overlapped = parts.compute, parts.exposed, parts.recv_wait, parts.busy, parts.overlapped
    now = 0
    i = 0
    n = len(events)
    while i < n:
        t = events[i][0]
        if t > now:
            _assign(parts, now, t, running, cat_key, compute, exposed, recv_wait, busy, overlapped)
            now = t
        while i < n and events[i][0] == t:
            _, step, index = events[i]
            before = active[index]
            active[index] = before + step
            if before == 0:
                running[cat_class[index]].add(index)
            elif active[index] == 0:
                running[cat_class[index]].discard(index)
            i += 1
    if parts.finish_ns > now:
        parts.idle += parts.finish_ns - now
    return parts


def _assign(parts, t0, t1, running, cat_key, compute, exposed, recv_wait, busy, overlapped):
    length = t1 - t0
    comm = running[_C_COMM]
    recv = running[_C_RECV]
    switch = running[_C_SWITCH]
    if comm or recv:
        parts.comm_busy += length
        for index in comm | recv:
            key = cat_key[index]
            busy[key] = busy.get(key, 0) + length
    if switch:
        in_switch_busy = parts.in_switch_busy
        for key in {cat_key[i] for i in switch}:
            in_switch_busy[key] = in_switch_busy.get(key, 0) + length
    if running[_C_COMPUTE]:
        compute[cat_key[min(running[_C_COMPUTE])]] += length
        if comm or recv:
            parts.comm_overlapped += length
            for index in comm | recv:
                key = cat_key[index]
                overlapped[key] = overlapped.get(key, 0) + length
    elif comm:
        keys = sorted(cat_key[i] for i in comm)
        if switch:
            _share_split(exposed, parts.in_switch_exposed, length, keys, {cat_key[i] for i in switch})
        else:
            _share(exposed, length, keys)
    elif running[_C_MEM]:
        parts.memory += length
    elif recv:
        _share(recv_wait, length, sorted(cat_key[i] for i in recv))
    elif running[_C_CPU]:
        parts.cpu += length
    else:
        parts.idle += length


def _share(into, length, keys):
    """Share ``length`` ns out evenly over ``keys`` (integers: the remainder goes to the first ones)."""
    each, extra = divmod(length, len(keys))
    for j, key in enumerate(keys):
        into[key] = into.get(key, 0) + each + (1 if j < extra else 0)


def _share_split(into, in_switch, length, keys, switch_keys):
    """:func:`_share`, each key's share going to ``in_switch`` when the key has an in-switch phase running."""
    each, extra = divmod(length, len(keys))
    for j, key in enumerate(keys):
        target = in_switch if key in switch_keys else into
        target[key] = target.get(key, 0) + each + (1 if j < extra else 0)


def labelled(parts, view):
    """The rank's breakdown as JSON: parts named by communicator (roles, group ids) for this rank."""
    comms = view.analysis.communicators
    entries = {}

    def entry(key):
        group = view.group(key)
        label = comms.label(group)
        item = entries.get(label)
        if item is None:
            item = entries[label] = {"communicator": label, "groups": [], "busy_ns": 0, "overlapped_ns": 0,
                                     "exposed_ns": 0, "recv_wait_ns": 0}
        if group > 0 and group not in item["groups"]:
            item["groups"].append(group)
        return item

    for source, field in ((parts.busy, "busy_ns"), (parts.overlapped, "overlapped_ns"),
                          (parts.exposed, "exposed_ns"), (parts.recv_wait, "recv_wait_ns")):
        for key, ns in source.items():
            entry(key)[field] += ns
    for source, field in ((parts.in_switch_busy, "in_switch_busy_ns"),
                          (parts.in_switch_exposed, "in_switch_exposed_ns")):
        for key, ns in source.items():  # only communicators with in-switch phases carry these fields
            item = entry(key)
            item[field] = item.get(field, 0) + ns
    for item in entries.values():
        if "in_switch_busy_ns" in item:
            item.setdefault("in_switch_exposed_ns", 0)
    out = {f"compute:{c}": ns for c, ns in parts.compute.items() if ns}
    if parts.cpu:
        out["cpu"] = parts.cpu
    for label in sorted(entries):
        if entries[label]["exposed_ns"]:
            out[f"exposed:{label}"] = entries[label]["exposed_ns"]
    for label in sorted(entries):
        if entries[label].get("in_switch_exposed_ns"):
            out[f"exposed_in_switch:{label}"] = entries[label]["in_switch_exposed_ns"]
    if parts.memory:
        out["remote_memory"] = parts.memory
    for label in sorted(entries):
        if entries[label]["recv_wait_ns"]:
            out[f"recv_wait:{label}"] = entries[label]["recv_wait_ns"]
    out["idle"] = parts.idle
    for item in entries.values():
        item["groups"].sort()
    return {"parts": out,
            "communicators": [entries[label] for label in sorted(entries)],
            "comm_busy_ns": parts.comm_busy, "comm_overlapped_ns": parts.comm_overlapped}


def breakdowns(analysis):
    """Every rank's breakdown (JSON), computed once per simulated rank and relabelled for the others.
    Ranks whose breakdowns come out equal share one dict (:func:`summary` groups them by it)."""
    from astra_analysis.views import RankView

    by_rep = {}
    by_groups = {}
    by_value = {}
    out = []
    for rank in range(analysis.total):
        view = RankView(analysis, rank)
        parts = by_rep.get(view.rep)
        if parts is None:
            parts = by_rep[view.rep] = rank_parts(view)
        keys = sorted(set(parts.busy) | set(parts.exposed) | set(parts.recv_wait) | set(parts.in_switch_busy))
        key = (view.rep, tuple(view.group(k) for k in keys))
        result = by_groups.get(key)
        if result is None:
            result = labelled(parts, view)
            result = by_groups[key] = by_value.setdefault(repr(result), result)
        out.append(result)
    return out


def summary(per_rank, finish_ns):
    """The report's ``breakdown``: the slowest rank's parts, and the ranks grouped by identical parts."""
    if not per_rank:
        return None
    slowest = max(range(len(per_rank)), key=lambda r: (finish_ns[r], -r))
    classes = {}
    order = []
    for rank, result in enumerate(per_rank):
        key = tuple(result["parts"].items())
        if key not in classes:
            classes[key] = []
            order.append(key)
        classes[key].append(rank)
    from astra_sim.humanize import rank_ranges

    groups = []
    for key in order:
        ranks = classes[key]
        groups.append({"ranks": rank_ranges(ranks), "count": len(ranks), "finish_ns": finish_ns[ranks[0]],
                       "parts": per_rank[ranks[0]]["parts"]})
    groups.sort(key=lambda g: -g["finish_ns"])
    best = per_rank[slowest]
    return {"slowest_rank": slowest, "finish_ns": finish_ns[slowest], "parts": dict(best["parts"]),
            "communicators": best["communicators"], "comm_busy_ns": best["comm_busy_ns"],
            "comm_overlapped_ns": best["comm_overlapped_ns"], "rank_groups": groups}
