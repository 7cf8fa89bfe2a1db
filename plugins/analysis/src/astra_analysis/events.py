"""What the timelines show of a node: its name and arguments, the track (stream) it ran on, and which
send a receive got its message from. Shared by the Chrome and the Kineto writers and the critical path.
"""

from __future__ import annotations

from bisect import bisect_left
from heapq import heappop, heappush

from astra_analysis.views import (
    K_COLL, K_COMPUTE, K_CPU, K_INSTANT, K_MEM, K_RECV, K_SEND, KIND_NAMES, WORLD, node_group,
)
from astra_sim.chakra import types as T

#: fixed track ids (Chrome ``tid``); communication streams and receive lanes are numbered above these
TID_COMPUTE, TID_CPU, TID_MEMORY, TID_COMM, TID_INSTANT = 1, 2, 3, 4, 5
TID_RECV = 100
TID_GROUP = 1000
TID_IN_SWITCH = 5_000_000  # lanes of in-switch phases (see :func:`in_switch_events`)
TID_SEND = 10_000_000

_COLLECTIVE_NAMES = {T.ALL_REDUCE: "all_reduce", T.ALL_GATHER: "all_gather", T.REDUCE_SCATTER: "reduce_scatter",
                     T.ALL_TO_ALL: "all_to_all", T.BROADCAST: "broadcast"}


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class NodeDescriber:
    """The static part of a node's event (the same on every rank of its class), cached per node."""

    def __init__(self, analysis):
        self.analysis = analysis
        run = analysis.run
        self.config = run.system_config
        self.details = getattr(run.compute_model, "node_details", None)
        self._cache = {}

    def describe(self, rep, node, duration_ns):
        """``(name, kind, args)`` of a representative's node; ``args`` holds no rank-specific value."""
        key = (rep, node.id)
        found = self._cache.get(key)
        if found is not None:
            return found
        analysis = self.analysis
        kind, _ = analysis.kind_of(rep, node)
        attrs = node.attrs
        args = {"node_id": node.id, "type": T.node_type_name(node.type), "op": node.name}
        if kind in (K_COLL, K_SEND, K_RECV):
            size = _int(attrs.get("comm_size"))
            if size is not None:
                args["bytes"] = size
            if kind == K_COLL:
                comm_type = _int(attrs.get("comm_type"))
                if comm_type is not None:
                    args["collective"] = _COLLECTIVE_NAMES.get(comm_type, T.comm_type_name(comm_type))
                    args["algorithm"] = self.algorithm(comm_type)
            else:
                tag = _int(attrs.get("comm_tag"))
                if tag is not None:
                    args["tag"] = tag
        elif kind in (K_COMPUTE, K_CPU):
            if kind == K_COMPUTE:
                args["op_class"] = analysis.op_class(rep, node)
            details = self.details(node, rep, duration_ns) if self.details is not None and kind == K_COMPUTE else None
            if details:
                args.update(details)
            else:
                num_ops = _int(attrs.get("num_ops"))
                if num_ops:
                    args["flops"] = num_ops
                    peak = self.config.peak_perf_flops
                    if peak and duration_ns and analysis.run.compute_model_name == "roofline":
                        args["efficiency"] = round(num_ops / (duration_ns * 1e-9) / peak, 4)
            size = _int(attrs.get("tensor_size"))
            if size:
                args.setdefault("bytes", size)
        elif kind == K_MEM:
            size = _int(attrs.get("tensor_size"))
            if size is not None:
                args["bytes"] = size
        label = attrs.get("label")
        name = label if isinstance(label, str) and label else node.name or f"node {node.id}"
        found = self._cache[key] = (name, KIND_NAMES[kind], args)
        return found

    def algorithm(self, comm_type):
        """The implementation the system configuration gives a collective type (per dimension)."""
        name = _COLLECTIVE_NAMES.get(comm_type)
        custom = self.config.custom_implementations.get(name)
        if custom:
            return f"custom: {custom}"
        if comm_type == T.BROADCAST:
            return "replayed"
        return ",".join(self.config.implementations.get(name, [])) or None


def track(view, node, kind, per_communicator, total):
    """``(tid, name)`` of the stream a node ran on (receives: see :func:`recv_lanes`)."""
    if kind == K_COMPUTE:
        return TID_COMPUTE, "compute"
    if kind == K_CPU:
        return TID_CPU, "cpu"
    if kind == K_MEM:
        return TID_MEMORY, "remote memory"
    if kind in (K_COLL, K_SEND):
        if not per_communicator:
            return TID_COMM, "communication"
        group = view.group(node_group(node))
        label = view.analysis.communicators.label(group)
        if kind == K_COLL:
            if group == WORLD:
                return TID_COMM, "communication"
            return TID_GROUP + group, f"comm {label} (group {group})"
        dst = view.peer(node)
        return TID_SEND + group * total + (dst or 0), f"send to {dst}" + ("" if group == WORLD else f" ({label})")
    return TID_INSTANT, "instant"


def recv_lanes(records):
    """Receive lanes (so that no two receives overlap on one track): ``{node id: lane}`` by first fit over
    the receives in start order (:func:`phase_lanes`; ties by node id)."""
    recvs = sorted((start, end, node.id) for node, start, end in records)
    lanes = phase_lanes([(start, end) for start, end, _ in recvs])
    return {node_id: lane for (_, _, node_id), lane in zip(recvs, lanes)}


def phase_lanes(intervals):
    """A lane per interval (``[(start, end), ...]``, first fit in start order) so that no two on one lane overlap."""
    order = sorted(range(len(intervals)), key=lambda i: intervals[i])
    lanes = [0] * len(intervals)
    free = []  # (end, lane)
    count = 0
    for i in order:
        start, end = intervals[i]
        if free and free[0][0] <= start:
            _, lane = heappop(free)
        else:
            lane = count
            count += 1
        lanes[i] = lane
        heappush(free, (end, lane))
    return lanes


def in_switch_events(view):
    """The rank's in-switch phases as timeline slices: ``(lane, start, end, name, args)``, one per phase of a
    collective that a switch reduced or multicast (``inSwitch``); lanes keep overlapping chunks apart."""
    from astra_sim.spans import IN_SWITCH_OP_NAMES as OP_NAMES

    phases = list(view.in_switch_phases())
    if not phases:
        return []
    analysis = view.analysis
    lanes = phase_lanes([(p[4], p[5]) for p in phases])
    out = []
    for (node, op, mask, size, start, end), lane in zip(phases, lanes):
        comm = view.kind(node)[1]
        dims = [d for d in range(mask.bit_length()) if mask >> d & 1]
        args = {"node_id": node.id, "op": node.name}
        if len(dims) == 1:
            args["dimension"] = dims[0]
        else:  # an aggregation tree over several switch tiers
            args["dimensions"] = dims
        args.update({"bytes": size, "communicator": analysis.communicators.label(comm)})
        comm_type = _int(node.attrs.get("comm_type"))
        if comm_type is not None:
            args["collective"] = _COLLECTIVE_NAMES.get(comm_type, T.comm_type_name(comm_type))
        if comm is not None and comm > 0:
            args["group"] = comm
        out.append((lane, start, end, OP_NAMES[op], args))
    return out


class Messages:
    """Which send a receive matched: the k-th receive of ``(src, dst, tag, size)`` meets the k-th send of it,
    in the order they were posted (start time, then node id), as the frontend matches them."""

    def __init__(self, analysis):
        self.analysis = analysis
        self._sends = {}  # representative -> {(raw dst, tag, size): [(start, node id, end), ...]}
        self._recvs = {}  # representative -> {(raw src, tag, size): [(start, node id), ...]}

    def _index(self, rep, kind):
        cache = self._sends if kind == K_SEND else self._recvs
        index = cache.get(rep)
        if index is None:
            analysis = self.analysis
            view = analysis.view(rep)
            index = {}
            peer_key = "comm_dst" if kind == K_SEND else "comm_src"
            for node, start, end in view.records():
                if node.type != (T.COMM_SEND_NODE if kind == K_SEND else T.COMM_RECV_NODE):
                    continue
                attrs = node.attrs
                key = (attrs.get(peer_key), attrs.get("comm_tag"), attrs.get("comm_size"))
                index.setdefault(key, []).append((start, node.id, end))
            for items in index.values():
                items.sort()
            cache[rep] = index
        return index

    def matching_send(self, recv_view, node, start):
        """``(sender view, send node, send start, send end)`` for a receive of ``recv_view``, or None."""
        analysis = self.analysis
        attrs = node.attrs
        src = recv_view.peer(node)
        tag, size = attrs.get("comm_tag"), attrs.get("comm_size")
        own = self._index(recv_view.rep, K_RECV).get((attrs.get("comm_src"), tag, size), ())
        k = _position(own, start, node.id)
        if k is None or src is None:
            return None
        sender = analysis.view(src)
        raw_dst = recv_view.rank
        if sender.offsets and any(sender.offsets):
            raw_dst = analysis.symmetry.moved(recv_view.rank, sender.offsets, -1)
        sends = self._index(sender.rep, K_SEND).get((raw_dst, tag, size), ())
        if k >= len(sends):
            return None
        send_start, send_id, send_end = sends[k]
        return sender, sender.nodes[send_id], send_start, send_end


def _position(items, start, node_id):
    k = bisect_left(items, (start, node_id))
    return k if k < len(items) and items[k][0] == start and items[k][1] == node_id else None


__all__ = ["NodeDescriber", "track", "recv_lanes", "phase_lanes", "in_switch_events", "Messages", "K_INSTANT"]
