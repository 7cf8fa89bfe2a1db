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

from astra_sim.chakra.types import COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE

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


#: spans from which a rank's sweep runs in numpy (:func:`_sweep_arrays`); fewer run in Python (:func:`_sweep`)
ARRAY_SWEEP_MIN_SPANS = 2000


def rank_parts(view, arrays=None):
    """Sweep the rank's spans once (see the module docstring). ``arrays``: sweep in numpy (True), in Python
    (False) or by size (None, the default); both give the same parts (integers: nothing is rounded)."""
    parts = RankParts(view.finish_ns or 0)
    analysis = view.analysis
    rep = view.rep
    categories = {}  # (class, key) -> index
    cat_class = []
    cat_key = []
    starts = []
    ends = []
    cats = []

    def index_of(cat):
        index = categories.get(cat)
        if index is None:
            index = categories[cat] = len(cat_class)
            cat_class.append(cat[0])
            cat_key.append(cat[1])
        return index

    for node, _op, _dim, _size, start, end in view.in_switch_phases():
        if end > start:
            starts.append(start)
            ends.append(end)
            cats.append(index_of((_C_SWITCH, analysis.kind_of(rep, node)[1])))
    kind_of = analysis.kind_of
    op_class = analysis.op_class
    comm_index = {}  # kind, communicator -> index (the same categories as index_of, looked up once per pair)
    class_index = {}  # compute class -> index
    kinds = {}  # what kind_of reads of a node -> its answer (see _kind)
    records, nodes_known = _records(view)
    for node, start, end in records:
        if end <= start:
            continue
        if nodes_known and node.type == COMP_NODE and not node.attrs.get("is_cpu_op"):  # views.node_kind's K_COMPUTE
            cls = op_class(rep, node)
            index = class_index.get(cls)
            if index is None:
                index = class_index[cls] = index_of((_C_COMPUTE, cls))
            starts.append(start)
            ends.append(end)
            cats.append(index)
            continue
        kind, comm = _kind(kind_of, kinds, rep, node) if nodes_known else kind_of(rep, node)
        if kind == K_COMPUTE:
            index = index_of((_C_COMPUTE, op_class(rep, node)))
        else:
            index = comm_index.get((kind, comm))
            if index is None:
                if kind in (K_COLL, K_SEND):
                    cat = (_C_COMM, comm)
                elif kind == K_RECV:
                    cat = (_C_RECV, comm)
                elif kind == K_MEM:
                    cat = (_C_MEM, None)
                elif kind == K_CPU:
                    cat = (_C_CPU, None)
                else:
                    continue
                index = comm_index[(kind, comm)] = index_of(cat)
        starts.append(start)
        ends.append(end)
        cats.append(index)
    if arrays is None:
        arrays = len(starts) >= ARRAY_SWEEP_MIN_SPANS
    if arrays and len(cat_class) <= 62 and (not starts or min(starts) >= 0):
        _sweep_arrays(parts, starts, ends, cats, cat_class, cat_key)
    else:
        _sweep(parts, starts, ends, cats, cat_class, cat_key)
    return parts


def _records(view):
    """(``view.records()``, whether they are trace nodes): a :class:`~astra_analysis.views.RankView`'s read straight
    from its span array (a C slice per column, no generator step per node: the breakdown reads every node of every
    simulated rank), whose compute nodes need no cached kind (each is read once here)."""
    spans, nodes = getattr(view, "spans", None), getattr(view, "nodes", None)
    if spans is None or nodes is None:
        return view.records(), False
    return zip(map(nodes.__getitem__, spans[0::3]), spans[1::3], spans[2::3]), True


def _kind(kind_of, kinds, rep, node):
    """``kind_of(rep, node)``, asked once per distinct value of what it reads (``views.node_kind``, ``node_group``,
    the peer for ``pair_group``: type, ``is_cpu_op``, ``pg_name``, ``comm_dst`` or ``comm_src``, each with its class):
    a rank's thousands of sends and receives name a few peers and groups."""
    attrs, t = node.attrs, node.type
    pg = attrs.get("pg_name")
    peer = attrs.get("comm_dst") if t == COMM_SEND_NODE else attrs.get("comm_src") if t == COMM_RECV_NODE else None
    key = (t, bool(attrs.get("is_cpu_op")), pg, pg.__class__, peer, peer.__class__)
    try:
        found = kinds.get(key)
    except TypeError:  # (an unhashable value)
        return kind_of(rep, node)
    if found is None:
        found = kinds[key] = kind_of(rep, node)
    return found


def _sweep(parts, starts, ends, cats, cat_class, cat_key):
    """The sweep in Python: the events in time order, each elementary interval assigned (:func:`_assign`)."""
    events = []
    for start, end, index in zip(starts, ends, cats):
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


def _sweep_arrays(parts, starts, ends, cats, cat_class, cat_key):
    """:func:`_sweep` in numpy, for the same parts: the elementary intervals (between consecutive span ends,
    from 0) are grouped by the set of categories running in them (a bit mask), and each set is assigned as
    :func:`_assign` would, its intervals' lengths summed (integers); an even share over several communicators
    is taken interval by interval (quotients and remainders of arrays), since the remainders do not add up."""
    import numpy as np

    if not starts:
        if parts.finish_ns > 0:
            parts.idle += parts.finish_ns
        return
    start = np.asarray(starts, dtype=np.int64)
    end = np.asarray(ends, dtype=np.int64)
    index = np.asarray(cats, dtype=np.int64)
    times = np.unique(np.concatenate((start, end)))
    first = int(times[0])
    if first > 0:  # nothing runs before the first span
        parts.idle += first
    lengths = np.diff(times)
    masks = np.zeros(len(times), dtype=np.int64)
    at_start = np.searchsorted(times, start)
    at_end = np.searchsorted(times, end)
    for cat in range(len(cat_class)):
        chosen = index == cat
        delta = np.bincount(at_start[chosen], minlength=len(times)) - np.bincount(at_end[chosen], minlength=len(times))
        masks |= (np.cumsum(delta) > 0).astype(np.int64) << cat
    masks = masks[:-1]  # interval i is [times[i], times[i + 1])
    now = int(times[-1])
    if parts.finish_ns > now:
        parts.idle += parts.finish_ns - now
    if not len(lengths):
        return
    kinds, inverse = np.unique(masks, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(kinds) + 1))
    sorted_lengths = lengths[order]
    for k, mask in enumerate(kinds.tolist()):
        group = sorted_lengths[bounds[k]:bounds[k + 1]]
        running = [[], [], [], [], [], []]  # per class: the active categories, ascending
        bit = 0
        while mask >> bit:
            if mask >> bit & 1:
                running[cat_class[bit]].append(bit)
            bit += 1
        _assign_group(parts, group, running, cat_key)


def _assign_group(parts, lengths, running, cat_key):
    """:func:`_assign` for every interval of ``lengths`` (an int64 array) with the same categories ``running``."""
    total = int(lengths.sum())
    comm = running[_C_COMM]
    recv = running[_C_RECV]
    switch = running[_C_SWITCH]
    both = comm + recv
    if both:
        parts.comm_busy += total
        busy = parts.busy
        for index in both:
            key = cat_key[index]
            busy[key] = busy.get(key, 0) + total
    if switch:
        in_switch_busy = parts.in_switch_busy
        for key in {cat_key[i] for i in switch}:
            in_switch_busy[key] = in_switch_busy.get(key, 0) + total
    if running[_C_COMPUTE]:
        parts.compute[cat_key[running[_C_COMPUTE][0]]] += total
        if both:
            parts.comm_overlapped += total
            overlapped = parts.overlapped
            for index in both:
                key = cat_key[index]
                overlapped[key] = overlapped.get(key, 0) + total
    elif comm:
        keys = sorted(cat_key[i] for i in comm)
        switch_keys = {cat_key[i] for i in switch}
        for key, ns in zip(keys, _shares(lengths, total, len(keys))):
            target = parts.in_switch_exposed if key in switch_keys else parts.exposed
            target[key] = target.get(key, 0) + ns
    elif running[_C_MEM]:
        parts.memory += total
    elif recv:
        keys = sorted(cat_key[i] for i in recv)
        recv_wait = parts.recv_wait
        for key, ns in zip(keys, _shares(lengths, total, len(keys))):
            recv_wait[key] = recv_wait.get(key, 0) + ns
    elif running[_C_CPU]:
        parts.cpu += total
    else:
        parts.idle += total


def _shares(lengths, total, count):
    """What :func:`_share` gives each of ``count`` keys over every interval of ``lengths``, summed."""
    if count == 1:
        return [total]
    import numpy as np

    each = int((lengths // count).sum())
    extra = lengths % count
    return [each + int(np.count_nonzero(extra > j)) for j in range(count)]


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
    Ranks whose breakdowns come out equal share one dict (:func:`summary` groups them by it). A rank's view is made
    only when its communicators' groups are new: per rank, only its representative and its groups' images."""
    from astra_analysis.views import RankView

    symmetry = analysis.symmetry
    by_rep = {}  # representative -> (its parts, their communicator keys, its own key, whether a key is a group)
    by_groups = {}
    by_value = {}
    out = []
    for rank in range(analysis.total):
        rep = symmetry.representative(rank) if symmetry is not None else rank
        known = by_rep.get(rep)
        if known is None:  # (ranks go up: a class's first rank is its representative)
            parts = rank_parts(RankView(analysis, rep))
            keys = sorted(set(parts.busy) | set(parts.exposed) | set(parts.recv_wait) | set(parts.in_switch_busy))
            known = by_rep[rep] = (parts, keys, (rep, tuple(keys)), any(k is not None and k > 0 for k in keys))
        parts, keys, key, groups = known
        if groups and rank != rep:  # (as RankView.group: the world, p2p and None keys are every rank's)
            offsets = symmetry.offsets(rank)
            key = (rep, tuple(k if k is None else analysis.group_image(k, offsets) for k in keys))
        result = by_groups.get(key)
        if result is None:
            result = labelled(parts, RankView(analysis, rank))
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
    shared = {}  # id(a rank's breakdown) -> its class's ranks: ranks sharing one dict compare their parts once
    for rank, result in enumerate(per_rank):
        ranks = shared.get(id(result))
        if ranks is None:
            key = tuple(result["parts"].items())
            ranks = classes.get(key)
            if ranks is None:
                ranks = classes[key] = []
                order.append(key)
            shared[id(result)] = ranks
        ranks.append(rank)
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


_PART_LABELS = {"exposed": "exposed comm: {}", "exposed_in_switch": "exposed in-switch comm: {}",
                "recv_wait": "recv wait: {} (bubble)"}


def part_label(name):
    """``exposed:dp`` -> ``exposed comm: dp``; ``exposed_in_switch:dp`` -> ``exposed in-switch comm: dp``;
    ``recv_wait:pp`` -> ``recv wait: pp (bubble)``; ``host_launch`` -> ``host launch``."""
    kind, _, what = name.partition(":")
    if kind in _PART_LABELS:
        return _PART_LABELS[kind].format(what)
    return f"{kind.replace('_', ' ')}: {what}" if what else name.replace("_", " ")


def format_share(part, whole):
    """``part`` as a percentage of ``whole`` (one decimal), for the summary tables' share column."""
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def summary_table(report):
    """Where the slowest rank's time went (``report.breakdown``), as ``astra run``'s summary shows it after the rank
    table (``(title, columns, rows)``, for ``report.summary_tables``): its parts with their share of its finish."""
    from astra_sim.humanize import format_ns, parse_rank_ranges
    from astra_sim.termtable import Column

    b = report.breakdown
    finish = b["finish_ns"]
    total = len(report.ranks)
    like = next((g for g in b["rank_groups"] if b["slowest_rank"] in parse_rank_ranges(g["ranks"], total)), None)
    who = f"rank {b['slowest_rank']}"
    if like and like["count"] > 1:
        who += f" (and every rank of {like['ranks']})"
    rows = [[part_label(name), format_ns(ns), format_share(ns, finish)]
            for name, ns in b["parts"].items() if ns or name == "idle"]
    return (f"where the time went: {who}, {format_ns(finish)}",
            [Column("part"), Column("time", number=True), Column("share", number=True)], rows)
