"""The reference simulator's stdout, line for line (``astra run --astra-sim-log``).

ASTRA-sim logs through spdlog, one message per line behind three bracketed prefixes
(``[2026-03-26 10:00:00.123] [workload] [info] sys[0] finished, ...``). Scripts written for it,
its own regression test ``tests/rt_template/run.sh`` among them, strip those prefixes and diff
what is left, so the messages, their order and the prefixes must all be the reference's:

* at start, rank 0's logical rings: one ``ring of node 0, ...`` line per dimension of each
  collective type's implementation list (all-reduce, reduce-scatter, all-gather, all-to-all);
* during the run, ``custom ring, ...`` when a rank first runs a collective type on a
  communicator group that is a subset of the NPUs;
* when a rank finishes, ``sys[i] finished, ...`` and its statistics (``Statistics.cc``): wall time,
  the union of node intervals per kind of node (CPU, GPU, Comm, Remote mem, Invalid), the
  compute-communication overlap when positive, and four roofline averages when roofline is on;
* at the end, ``Exiting``.

The reference keeps per-node statistics in ``std::unordered_map``s, so the order of the per-kind
lines (and the summation order of the roofline averages) is libstdc++'s iteration order;
:func:`libstdcxx_iteration_order` reproduces it.
"""

from __future__ import annotations

import math
import time

from astra_sim.chakra import types as T

#: Bucket counts a libstdc++ ``std::unordered_map`` takes as it grows from empty: 13 at the first
#: insertion, then the next of these when an insertion would exceed one element per bucket
#: (measured with g++ 12's libstdc++; the growth policy has been the same since GCC 5).
LIBSTDCXX_BUCKET_COUNTS = (
    13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061, 712697,
    1447153, 2938679, 5967347, 12117689, 24607243, 49969847, 101473717, 206062531, 418451333,
    849749479, 1725587117, 3504151727, 8589934583, 25769803693, 68719476731, 206158430123,
)

# The reference's OperatorType (workload/Statistics.hh), in its enum order.
CPU, GPU, COMM, REMOTE_MEM, REPLAY, INVALID = range(6)
KIND_LABELS = ("CPU time", "GPU time", "Comm time", "Remote mem time", "Replay time", "Invalid time")
_WRAP = 1 << 64


def libstdcxx_iteration_order(keys):
    """The order a libstdc++ ``std::unordered_map<uint64_t, ...>`` iterates ``keys`` (distinct
    integers) inserted in the given order.

    libstdc++ keeps one singly linked list; a bucket's nodes are contiguous in it. A node whose
    bucket is empty starts a new run at the front of the list, any other node goes to the front of
    its bucket's run; a rehash walks the old list and re-inserts every node by the same rule.
    The hash of an integer is the integer itself.
    """
    counts = iter(LIBSTDCXX_BUCKET_COUNTS)
    buckets = 1
    runs = {}  # bucket -> its keys, most recent last (the run is this list reversed)
    run_order = []  # buckets by when their run started, most recent last
    size = 0
    for key in keys:
        if size + 1 > buckets or size == 0:
            try:
                buckets = next(counts)
            except StopIteration:  # pragma: no cover - more than 2^34 nodes on one rank
                raise ValueError("too many nodes for the reference's statistics order") from None
            old = [k for b in reversed(run_order) for k in reversed(runs[b])]
            runs, run_order = {}, []
            for k in old:
                _prepend(runs, run_order, k % buckets, k)
        _prepend(runs, run_order, key % buckets, key)
        size += 1
    return [k for b in reversed(run_order) for k in reversed(runs[b])]


def _prepend(runs, run_order, bucket, key):
    run = runs.get(bucket)
    if run is None:
        runs[bucket] = [key]
        run_order.append(bucket)
    else:
        run.append(key)


def merged_length(intervals):
    """Total time covered by ``(start, end)`` intervals, overlaps counted once (the reference's
    ``_calculateTotalRuntimeFromIntervals``)."""
    if not intervals:
        return 0
    ordered = sorted(intervals)
    total = 0
    merged_start, merged_end = ordered[0]
    for start, end in ordered:
        if start <= merged_end:
            merged_end = max(merged_end, end)
        else:
            total += merged_end - merged_start
            merged_start, merged_end = start, end
    return total + merged_end - merged_start


def node_kind(node):
    """The reference's statistics kind of a node. METADATA nodes, which abort the reference's
    statistics, count as Invalid (they take no time, like INVALID nodes)."""
    node_type = node.type
    if node_type == T.COMP_NODE:
        return CPU if node.attrs.get("is_cpu_op") else GPU
    if node_type in (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE):
        return COMM
    if node_type in (T.MEM_LOAD_NODE, T.MEM_STORE_NODE):
        return REMOTE_MEM
    return INVALID


def _ieee_div(a, b):
    """``a / b`` as C++ doubles divide (no exception for a zero divisor)."""
    if b == 0:
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a)
    return a / b


class ReferenceLog:
    """Collects what the reference would print during one run and renders it afterwards.

    ``run`` is the run's read-only :class:`~astra_sim.run.view.RunView` before its first event (every rank
    simulated: the format turns folding off): the log observes every finished node, each rank's issue order
    (the key order of the reference's statistics) and the collectives planned on communicator groups
    (:meth:`group_plan`); :meth:`records` renders it for the report.
    """

    def __init__(self, run):
        self.run = run
        self._nodes = {}  # rank -> {node id: (kind, start, end, roofline metrics or None)}
        self._issue_logs = run.record_issue_order()  # rank -> the node ids in the order the rank issued them
        self._group_events = []  # (ranks finished before it, message)
        self._group_plans = set()
        config = run.system_config
        self._roofline = config.roofline_enabled and not config.replay_only
        run.add_node_observer(self._observe)
        run.add_plan_observer(self.group_plan)

    # ------------------------------------------------------------ during the run

    def _observe(self, rank, node, start_ns, end_ns):
        kind = node_kind(node)
        metrics = None
        if self._roofline and kind == GPU:
            metrics = self._roofline_metrics(node)
        self._nodes.setdefault(rank, {})[node.id] = (kind, start_ns, end_ns, metrics)

    def _roofline_metrics(self, node):
        """(intensity, compute utilisation, memory utilisation, memory bound) as the reference's
        ``issue_comp`` records them; None for a node it skips (tensor_size 0)."""
        num_ops = node.attrs.get("num_ops")
        tensor_size = node.attrs.get("tensor_size")
        if not isinstance(num_ops, int) or not isinstance(tensor_size, int) or tensor_size == 0:
            return None
        config = self.run.system_config
        bandwidth, peak = config.local_mem_bw_bytes_per_s, config.peak_perf_flops
        intensity = float(num_ops) / float(tensor_size)
        perf = min(bandwidth * intensity, peak)
        return (intensity, _ieee_div(perf, peak), _ieee_div(_ieee_div(perf, intensity), bandwidth), perf < peak)

    def group_plan(self, rank, group, com_type):
        """A collective of ``com_type`` on ``group``: the reference builds the group's ring (and
        logs it) the first time each rank runs that collective type on a subset of the NPUs."""
        key = (id(group), com_type)
        if key in self._group_plans or len(group.npus) == self.run.total_npus or rank not in group.npus:
            return
        self._group_plans.add(key)
        n = len(group.npus)
        self._group_events.append((
            self.run.ranks_finished,
            f"custom ring, id: {rank}, dimension: local total nodes in ring: {n} "
            f"index in ring: {group.npus.index(rank)} total nodes in ring {n}",
        ))

    # ------------------------------------------------------------ rendering
    def startup_records(self):
        """Rank 0's ``ring of node 0`` lines, for all-reduce, reduce-scatter, all-gather and
        all-to-all in that order (the reference's ``GeneralComplexTopology``)."""
        from astra_sim.errors import AstraError

        records = []
        dims = self.run.npus_per_dim
        total = self.run.total_npus
        implementations = self.run.system_config.implementations
        for com_type in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"):
            offset = 1
            for dim, name in enumerate(implementations.get(com_type, ())[:len(dims)]):
                try:
                    topology = self.run.algorithm_spec(name)[0].topology
                except AstraError:
                    break  # an unknown name fails when a collective uses it
                if topology == "one":
                    records.append(_ring_record(total, 1))
                    break
                if topology != "tree":
                    records.append(_ring_record(dims[dim], offset))
                offset *= dims[dim]
        return records

    def rank_records(self, report):
        """What the reference prints when ``report``'s rank finishes."""
        rank = report.rank
        nodes = self._nodes.get(rank, {})
        order = [i for i in libstdcxx_iteration_order(self._issue_logs.get(rank, ())) if i in nodes]
        records = [("workload", "info", f"sys[{rank}] finished, {report.finish_ns} cycles, "
                    f"exposed communication {report.exposed_comm_ns % _WRAP} cycles."),
                   ("statistics", "info", f"sys[{rank}]. Post statistics processing start.")]
        wall = max((nodes[i][2] for i in order), default=0)
        intervals = {}
        for i in order:
            kind, start, end, _ = nodes[i]
            intervals.setdefault(kind, []).append((start, end))
        kind_time = {kind: merged_length(spans) for kind, spans in intervals.items()}
        records.append(("statistics", "info", f"sys[{rank}]. Post statistics processing end."))
        records.append(("statistics", "info", f"sys[{rank}], Wall time: {wall}"))
        for kind in intervals:  # first-appearance order in the node map, as libstdc++ iterates it
            records.append(("statistics", "info", f"sys[{rank}], {KIND_LABELS[kind]}: {kind_time[kind]}"))
        if GPU in kind_time and COMM in kind_time:
            overlap = (kind_time[GPU] + kind_time[COMM] - wall) % _WRAP
            if overlap > 0:
                records.append(("statistics", "info", f"sys[{rank}], Total compute-communication overlap: {overlap}"))
        if self.run.system_config.roofline_enabled:
            records.extend(self._roofline_records(rank, nodes, order))
        return records

    def _roofline_records(self, rank, nodes, order):
        bound_ns, compute, memory, intensity = 0, 0.0, 0.0, 0.0
        total_ns = 1  # the reference starts at 1 "to avoid division by zero"
        for i in order:
            kind, start, end, metrics = nodes[i]
            if kind not in (CPU, GPU):
                continue
            duration = end - start
            if metrics is not None:
                oi, cu, mu, memory_bound = metrics
                if not memory_bound:
                    bound_ns += duration
                compute += cu * duration
                memory += mu * duration
                intensity += oi * duration
            total_ns += duration
        return [
            ("statistics", "info", f"sys[{rank}], Compute bound percentage: {bound_ns / total_ns * 100:.3f}%"),
            ("statistics", "info", f"sys[{rank}], Average compute utilization: {compute / total_ns * 100:.3f}%"),
            ("statistics", "info", f"sys[{rank}], Average memory utilization: {memory / total_ns * 100:.3f}%"),
            ("statistics", "info", f"sys[{rank}], Average operation intensity: {intensity / total_ns:.3f}"),
        ]

    def unsupported_kinds(self):
        """``{rank: [kind labels]}`` for ranks with nodes whose statistics the reference cannot
        print (its overlap step accepts only GPU and Comm nodes and throws on any other kind)."""
        out = {}
        for rank, nodes in self._nodes.items():
            kinds = sorted({n[0] for n in nodes.values()} - {GPU, COMM})
            if kinds:
                out[rank] = [KIND_LABELS[k].split(" time")[0] for k in kinds]
        return out

    def records(self, rank_reports, finish_order):
        """Every ``(logger, level, message)`` the reference prints for this run, in its order."""
        unsupported = self.unsupported_kinds()
        if unsupported:
            ranks = sorted(unsupported)
            kinds = sorted({k for v in unsupported.values() for k in v})
            self.run.warn(
                f"--astra-sim-log: rank(s) {_rank_list(ranks)} ran {', '.join(kinds)} nodes; the reference's "
                "statistics accept only GPU and Comm nodes (it stops after 'Post statistics processing start.' "
                "for such a rank, or aborts on METADATA nodes), so the statistics lines of those ranks are "
                "what its report would print"
            )
        by_rank = {r.rank: r for r in rank_reports}
        records = list(self.startup_records())
        events = iter(self._group_events)
        pending = next(events, None)
        for finished, rank in enumerate(finish_order):
            while pending is not None and pending[0] <= finished:
                records.append(("system::topology::RingTopology", "info", pending[1]))
                pending = next(events, None)
            records.extend(self.rank_records(by_rank[rank]))
        while pending is not None:
            records.append(("system::topology::RingTopology", "info", pending[1]))
            pending = next(events, None)
        records.append(("system", "warning", "Exiting"))
        return records


def _rank_list(ranks, limit=8):
    shown = ", ".join(str(r) for r in ranks[:limit])
    return shown + (f" and {len(ranks) - limit} more" if len(ranks) > limit else "")


def _ring_record(nodes, offset):
    return ("system::topology::RingTopology", "info",
            f"ring of node 0, id: 0 dimension: local total nodes in ring: {nodes} index in ring: 0 "
            f"offset: {offset} total nodes in ring: {nodes}")


def spdlog_line(logger, level, message, now=None):
    """``message`` behind spdlog's default prefixes: ``[date time.ms] [logger] [level] ``."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    return f"[{stamp}.{int(now * 1000) % 1000:03d}] [{logger}] [{level}] {message}"


def log_lines(report, prefixed=False):
    """The reference's stdout lines for ``report``'s run.

    With the full log collected (``astra_sim_log=True``): every line the reference prints (rings,
    ``sys[i] finished``, statistics, ``Exiting``); ``prefixed`` adds spdlog's ``[time] [logger] [level] ``
    prefixes, as the reference prints them. Otherwise only the ``sys[i] finished, ...`` lines, in the order ranks
    finished.

    The reference prints exposed communication as an unsigned 64-bit number, so a negative value (possible with
    ``replay-only``, where overlapping communication counts as compute) wraps around; these lines do the same so
    scripts that parse them see identical text. The report itself keeps the signed value.
    """
    if report.astra_sim_log is not None:
        if not prefixed:
            return [message for _, _, message in report.astra_sim_log]
        now = time.time()
        return [spdlog_line(logger, level, message, now) for logger, level, message in report.astra_sim_log]
    by_rank = {r.rank: r for r in report.ranks}
    lines = []
    for rank in report.finish_order:
        r = by_rank[rank]
        lines.append(f"sys[{r.rank}] finished, {r.finish_ns} cycles, exposed communication "
                     f"{r.exposed_comm_ns % _WRAP} cycles.")
    return lines
