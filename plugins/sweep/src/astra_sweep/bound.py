"""A lower bound on a layout's simulated step, from the gpu compute model's per-op costs and the NCCL model's
collective times, without simulating.

Why it is a lower bound: a rank has one GPU-compute slot (:mod:`astra_sim.workload.workload`), so its compute
nodes run one at a time and the step lasts at least the sum of their costs; and no node starts before the nodes it
depends on have finished, so the step lasts at least the rank's longest chain of dependencies, with compute at the
gpu compute model's cost and each collective at the NCCL model's time for its size, group and the nodes it spans
(``--platform-collective nccl``, the search's default: the simulated phase waits that time once its peers have
joined; Megatron's tensor-parallel all-gathers and reduce-scatters block the next GEMM, so they lie on the chain;
:meth:`BoundCache._collective_ns` says which groups count). A rank's collectives on one communicator also run one at
a time (:func:`communicator_bounds`). A compute node that the run's measured contention model slows in every run
(issued with a collective that waits on the same node: :func:`beside_collectives`) counts at its least slowed
cost. Point-to-point transfers count 0; host launches and other contention can only add. Across pipeline stages, the
representative ranks' traces are joined at their sends and receives (:func:`pipeline_edges`): a rank's compute
cannot start before the first micro-batch has come through the earlier stages, and the step cannot end before the
last backward has gone back through them, so without virtual stages the bound also holds the rank's compute plus
that fill and drain (its ``pipeline_*`` terms, linear in ``m`` too). The bound is the busiest rank's ``fixed + m x
per_micro_batch``: the sums are linear in the micro-batch count ``m`` (every micro-batch after the first is the same
graph, chained in schedule order; the optimizer and the step's other fixed work come once), so two small generations
give both terms, whatever ``m`` the layout has: ``m`` = 2 and 3 (VP 1; the first micro-batch is no later one's
graph: :meth:`BoundCache.terms_layout`), or ``m`` = 1 alone. Virtual stages regroup a rank's layers into chunks
without changing them. An interleaved layout's own fill and drain come from the same layout with ``pp x
virtual_stages`` whole stages (:func:`interleaved_bound_ns`, which says why).
tests/test_search_bound.py holds these claims against direct generation, and the bound against simulation;
tests/test_search_bound_interleaved.py the interleaved bound against simulation on random layouts.

Work is shared across layouts and processes: the generations run side by side on the search's workers
(:meth:`BoundCache.prefetch`), one compute model per GPU and worker caches each op's cost by shape, and each
layout's terms are kept in memory and on disk, content-addressed by the layout, the GPU's description and the
generator's and compute model's files (``ASTRA_SEARCH_CACHE``, default ``~/.cache/astra-sim/search``; written
atomically, so concurrent searches never read half a file).

:func:`pipeline_estimate` adds the 1F1B bubble, ``(pp - 1) / vp`` micro-batches of the cheapest rank's work: it is
only an estimate (the bubble depends on how forward and backward split a micro-batch) and orders the candidates;
only the bound prunes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field, replace

from astra_sim.errors import AstraError

#: micro-batch 0 or 1 in a node's label (``bwd.l3.mb1.qkv.wgrad``): :meth:`BoundCache._graph`'s gaps
_MICRO_BATCH = re.compile(r"\.mb([01])\.")
#: bumped when what the terms measure changes: the disk cache's entries of another version are not read
TERMS_VERSION = 8


@dataclass(frozen=True)
class StepTerms:
    """Per-rank work of a layout that nothing overlaps (its longest chain, or its compute when that is longer):
    ``fixed_ns`` once per step, ``per_micro_batch_ns`` per micro-batch (each rank class's representative, by
    rank); its compute with the pipeline's edge (:func:`pipeline_edges`; valid without virtual stages) as
    ``pipeline_fixed_ns`` and ``pipeline_per_micro_batch_ns``; for :func:`interleaved_bound_ns`, each rank's compute
    per micro-batch and, in the first generation, its ``fill_ns`` (the longest path before its first
    compute node) and ``drain_ns`` (the longest path after its last send to a lower rank, its backward's); the
    serial work of its communicators (:func:`communicator_bounds`; valid without virtual stages) as
    ``slot_fixed_ns`` and ``slot_per_micro_batch_ns``, and ``post_ns``, the most collective time one communicator
    runs after the rank's last compute node (:func:`communicator_bounds`, for :func:`interleaved_bound_ns`), and
    ``first_gap_ns``, how much less its first micro-batch's compute costs than a later one's."""

    fixed_ns: dict
    per_micro_batch_ns: dict
    pipeline_fixed_ns: dict = field(default_factory=dict)
    pipeline_per_micro_batch_ns: dict = field(default_factory=dict)
    compute_per_micro_batch_ns: dict = field(default_factory=dict)
    chain_per_micro_batch_ns: dict = field(default_factory=dict)
    fill_ns: dict = field(default_factory=dict)
    drain_ns: dict = field(default_factory=dict)
    slot_fixed_ns: dict = field(default_factory=dict)
    slot_per_micro_batch_ns: dict = field(default_factory=dict)
    post_ns: dict = field(default_factory=dict)
    first_gap_ns: dict = field(default_factory=dict)

    def bound_ns(self, micro_batches, virtual_stages=1):
        """The busiest rank's: a lower bound on the simulated step (int ns). With virtual stages (or 0: none
        asked) the pipeline's edge and the communicators' serial work are not counted (they were measured on
        whole stages, whose waits differ from a virtual stage's chunk's)."""
        out = max(self.fixed_ns[r] + micro_batches * self.per_micro_batch_ns[r] for r in self.fixed_ns)
        if virtual_stages == 1:
            for fixed, per in ((self.pipeline_fixed_ns, self.pipeline_per_micro_batch_ns),
                               (self.slot_fixed_ns, self.slot_per_micro_batch_ns)):
                if fixed:
                    out = max(out, max(fixed[r] + micro_batches * per[r] for r in fixed))
        return out


def _paths(graphs):
    """The representative ranks' traces joined at their sends and receives (see :func:`pipeline_edges`):
    ({node: longest path before it starts}, {node: longest path after it ends}), nodes as (rank, id); None for a
    cycle (never in a workload that finishes)."""
    sends, recvs = {}, {}
    for rank, graph in graphs.items():
        for node_id, _, _, _, p2p in graph:
            if p2p is not None and p2p[0] in ("send", "recv"):
                (sends if p2p[0] == "send" else recvs).setdefault(p2p[1:], []).append((rank, node_id))
    joined = {recvs[key][0]: found[0] for key, found in sends.items()
              if len(found) == 1 and len(recvs.get(key, ())) == 1}
    cost, preds, succs = {}, {}, {}
    for rank, graph in graphs.items():
        ids = {node_id for node_id, *_ in graph}
        for node_id, c, _, deps, _ in graph:
            n = (rank, node_id)
            cost[n] = c
            preds[n] = [(rank, d) for d in deps if d in ids] + ([joined[n]] if n in joined else [])
            for p in preds[n]:
                succs.setdefault(p, []).append(n)
    waiting = {n: len(p) for n, p in preds.items()}
    order = [n for n, count in waiting.items() if count == 0]
    for n in order:  # topological order (the list grows as nodes become free)
        for s in succs.get(n, ()):
            waiting[s] -= 1
            if waiting[s] == 0:
                order.append(s)
    if len(order) != len(cost):
        return None
    start, tail = {}, {}
    for n in order:
        start[n] = max((start[p] + cost[p] for p in preds[n]), default=0)
    for n in reversed(order):
        tail[n] = max((cost[s] + tail[s] for s in succs.get(n, ())), default=0)
    return start, tail


def pipeline_edges(graphs, paths=None):
    """{rank: edge ns}: how much a rank's compute is extended by the time before it can start and after it ends.

    ``graphs``: {rank: [(node id, cost ns, on the GPU-compute slot, deps, p2p key)]} of some ranks (the
    representatives of a compact workload). A send and a receive with the same (src, dst, tag), the only such pair
    among these ranks, are joined: the receive completes no earlier than the send is issued, and the send is
    issued no earlier than its dependencies finish (a send costs 0 here, its time is its issue). Over this graph
    (dependencies, joined pairs, costs as in :class:`BoundCache`) ``head(n)`` is the longest path before node
    ``n`` starts and ``tail(n)`` the longest path after it ends: every path is a chain of waits that the
    simulation also makes, so ``n`` starts no earlier than ``head(n)`` and the step lasts at least
    ``tail(n)`` after ``n`` ends.

    Why ``min head(S) + cost(S) + min tail(S)`` is a lower bound on the step for any set ``S`` of one rank's
    compute nodes: they share one GPU-compute slot, so they run one at a time; the first of them starts at
    ``min head(S)`` or later, the last ends ``cost(S)`` after that or later, and the step lasts its ``tail``
    more, at least ``min tail(S)``. With ``S`` the ``k`` compute nodes of longest tail (each ``k`` tried), the
    edge is the best ``min head(S) + min tail(S) - cost(not S)``, so ``edge + compute`` bounds the step. In a
    1F1B pipeline the last stage's edge is the fill and drain (``pp - 1`` stages' forward of the first
    micro-batch, their backward of the last) less its optimizer, which ends the step; without joined pairs
    (one stage) the edge is 0. A cycle (never in a workload that finishes) gives no edge.
    """
    paths = _paths(graphs) if paths is None else paths
    if paths is None:
        return {}
    start, tail = paths
    out = {}
    for rank, graph in graphs.items():
        nodes = sorted(((tail[(rank, i)], start[(rank, i)], c) for i, c, on_slot, _, _ in graph if on_slot),
                       reverse=True)
        best, head, outside = 0, None, sum(c for _, _, c in nodes)
        for t, begin, c in nodes:  # S grows by the next longest tail: min tail(S) is t
            head = begin if head is None else min(head, begin)
            outside -= c
            best = max(best, head + t - outside)
        out[rank] = int(best)
    return out


def fill_and_drain(graphs, paths=None):
    """{rank: (fill ns, drain ns)}: the longest path before the rank's first compute node starts, and the longest
    path after its last send to a lower rank is issued (0 without one), over the joined graph of
    :func:`pipeline_edges`; {} for a cycle. :func:`interleaved_bound_ns` reads them."""
    paths = _paths(graphs) if paths is None else paths
    if paths is None:
        return {}
    start, tail = paths
    out = {}
    for rank, graph in graphs.items():
        fill = min((start[(rank, i)] for i, _, on_slot, _, _ in graph if on_slot), default=0)
        drains = [tail[(rank, i)] for i, _, _, _, p2p in graph
                  if p2p is not None and p2p[0] == "send" and isinstance(p2p[2], int) and p2p[2] < rank]
        out[rank] = (int(fill), int(min(drains, default=0)))
    return out


def communicator_bounds(graphs, paths=None):
    """{rank: (serial ns, post ns)} over the joined graph of :func:`pipeline_edges` (a collective's key is
    ("coll", its communicator)); {} for a cycle.

    Why ``serial`` is a lower bound on the step: a rank's collectives on one communicator run one at a time (the
    workload gives each communicator one communication slot under ``comm-streams: per-communicator``, the
    platforms' setting, and all of them one slot otherwise; :mod:`astra_sim.workload.workload`), each for at
    least its cost here. So for any set ``S`` of them the first starts at ``min head(S)`` or later, the last
    ends ``cost(S)`` after that or later, and the step lasts ``min tail(S)`` more: ``min head(S) + cost(S) +
    min tail(S)``, tried for ``S`` the ``k`` of longest tail and the ``k`` of latest head, every ``k``, every
    communicator. A data-parallel step's gradient reduce-scatters and parameter all-gathers across nodes are the
    largest such sets.

    ``post``: the most collective time one communicator runs after the rank's last compute node (in trace
    order, the end of its chain of compute: the optimizer), its own descendants: they start after it ends and
    run one at a time, so the step lasts at least that long after it (ZeRO-1/2's parameter all-gathers)."""
    paths = _paths(graphs) if paths is None else paths
    if paths is None:
        return {}
    start, tail = paths
    out = {}
    for rank, graph in graphs.items():
        by_comm = {}
        for node_id, cost, _, _, key in graph:
            if key is not None and key[0] == "coll" and cost > 0:
                by_comm.setdefault(key[1], []).append((start[(rank, node_id)], cost, tail[(rank, node_id)]))
        serial = 0
        for items in by_comm.values():
            for order in (sorted(items, key=lambda x: -x[2]), sorted(items, key=lambda x: -x[0])):
                head = least_tail = None
                total = 0
                for h, c, t in order:
                    head = h if head is None else min(head, h)
                    least_tail = t if least_tail is None else min(least_tail, t)
                    total += c
                    serial = max(serial, head + total + least_tail)
        out[rank] = (int(serial), _post(graph))
    return out


def _post(graph):
    """The most collective time one communicator of a rank runs among the descendants of its last compute
    node (see :func:`communicator_bounds`)."""
    last = None
    for node_id, _, on_slot, _, _ in graph:
        if on_slot:
            last = node_id
    if last is None:
        return 0
    children = {}
    for node_id, _, _, deps, _ in graph:
        for d in deps:
            children.setdefault(d, []).append(node_id)
    seen, todo = {last}, [last]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    by_comm = {}
    for node_id, cost, _, _, key in graph:
        if node_id in seen and key is not None and key[0] == "coll":
            by_comm[key[1]] = by_comm.get(key[1], 0) + cost
    return int(max(by_comm.values(), default=0))


@dataclass(frozen=True)
class Contention:
    """What the run's ``--gpu-contention-model measured`` (implied by the GPU platforms) needs for
    :func:`beside_collectives`: the SMs a collective or send takes without a ``comm_sms`` attribute
    (``--gpu-comm-sms``), the GPU's SMs, and the host model's launch interval (``--host-launch-us``, in ns as the
    kernel rounds it; 0 without a host model)."""

    comm_sms: int
    sm_count: int
    host_launch_ns: int = 0


def contention_of(options, gpu):
    """The :class:`Contention` of a run's options (a platform's implied ones) on the GPU preset or YAML ``gpu``, or
    None when the run has no measured contention model (``--gpu-contention`` with another model: not counted)."""
    from astra_gpu_model.contention import DEFAULT_COMM_SMS
    from astra_gpu_model.gpu import load_gpu

    if not options.get("gpu_contention") or options.get("gpu_contention_model") != "measured":
        return None
    launch = options.get("host_launch_us") or 0
    comm_sms = options.get("gpu_comm_sms")
    return Contention(int(DEFAULT_COMM_SMS if comm_sms is None else comm_sms), int(load_gpu(gpu).sm_count),
                      int(round(launch * 1000)))


def beside_collectives(graph, info, contention):
    """{node id: raised cost}: the compute nodes that the run's measured contention model slows in every run, each
    at its least slowed cost (:func:`least_piecewise_ns`).

    ``graph``: a rank's [(node id, cost, on the GPU-compute slot, deps, key)] (:meth:`BoundCache._graph`);
    ``info``: {node id: (name, comm_sms attribute or None, has an sm_margin attribute)}.

    Why: the model times a compute node ``G`` once every event of the nanosecond it starts has run, piecewise: while
    a collective or send of the rank runs, at ``1 / (cost x measured_slowdown(kind, SMs taken / SMs))`` of its work
    per ns (never decreasing in the SMs taken), until that operation's end where it is already fixed (a collective's
    NCCL phase, once launched), for the rest of ``G`` otherwise. Take ``G`` whose only dependency is ``P``, the compute
    node before it, on a rank whose compute nodes form one chain (each descends from the one before: no other compute
    node can be ready when ``P`` ends), and a collective ``C`` whose only dependency is also ``P`` and whose NCCL time
    is ``d > 0``, and no other collective of ``C``'s communicator (its own communication slot: the GPU platforms run
    ``comm-streams: per-communicator``) can hold that slot when ``P`` ends (each is used by a compute node up to
    ``P``, so it ended before ``P`` started, or waits for ``C``, ``G`` or a later compute node, or for ``P`` with a
    higher id than ``C``). When ``P`` ends (at ``t``) one pass in id order issues ``G`` (its slot is free: ``P`` just
    left it) and ``C``. ``G`` starts at ``g = max(t, L_G)``, ``L_G`` its launch by the host model, which launches the
    issued GPU operations one per interval ``i`` in issue order; ``C``'s phase starts at ``max(t, L_C)`` (its
    communicator's queue is free) and ends ``d`` or more later. If ``C`` is issued after ``G`` (a higher id), either it
    is not launched when ``G`` is timed (its end unknown: ``G`` slowed throughout) or it starts at ``g``: ``C`` runs
    for at least ``w = d`` of ``G``. If before, ``L_G <= L_C + k x i`` with ``k`` the ids from ``C`` to ``G``, so it
    runs for at least ``w = d - k x i`` of ``G`` (counted when positive). Some operation taking at least ``s`` SMs
    (the fewest any collective or send of the rank takes) thus runs during ``G``'s first ``w`` ns, and afterwards
    ``G`` progresses at most at its whole-GPU rate (``kind``: ``compute`` for a compute-bound ATen op, ``memory`` for
    another, the smaller factor when the name is not an ATen op's). A node launched with an ``sm_margin`` is left as
    it is. Megatron's sequence-parallel backward re-gathers a layer's input (a tensor-parallel all-gather) beside its
    data-gradient GEMM: those GEMMs are the nodes raised."""
    if contention is None or not contention.sm_count:
        return {}
    deps_of = {node_id: tuple(deps) for node_id, _, _, deps, _ in graph}
    cost_of = {node_id: cost for node_id, cost, _, _, _ in graph}
    chain = sorted(node_id for node_id, _, on_slot, _, _ in graph if on_slot)
    on_slot = set(chain)
    top = {}  # node -> the highest compute node id among its ancestors (-1: none)
    for node_id in sorted(deps_of):
        best = -1
        for d in deps_of[node_id]:
            if d not in deps_of or d >= node_id:  # not in id order: no claim
                return {}
            best = max(best, d if d in on_slot else top[d])
        top[node_id] = best
    if any(top[b] != a for a, b in zip(chain, chain[1:])):
        return {}
    sms = [info[n][1] if isinstance(info[n][1], int) else contention.comm_sms
           for n, _, _, _, key in graph if key is not None and key[0] in ("coll", "send")]
    least = min(min(sms, default=0), contention.sm_count - 1)
    if least <= 0:
        return {}
    from astra_gpu_model.contention import measured_slowdown
    from astra_sim.ops import COMPUTE_BOUND_OPS, canonical_name

    fraction = least / contention.sm_count
    factor = {kind: measured_slowdown(kind, fraction) for kind in ("compute", "memory")}
    hanging = {}  # compute node -> [(collective id, its cost)] that depend on it alone
    by_comm = {}  # communicator -> its collectives' ids
    used_by = {}  # collective -> the lowest compute node that depends on it directly
    for node_id, cost, _, deps, key in graph:
        if key is not None and key[0] == "coll":
            by_comm.setdefault(_communicator(key[1]), []).append(node_id)
            if cost > 0 and len(deps) == 1 and deps[0] in on_slot:
                hanging.setdefault(deps[0], []).append((node_id, cost))
        if node_id in on_slot:
            for d in deps:
                if d not in on_slot and used_by.get(d, node_id + 1) > node_id:
                    used_by[d] = node_id

    def slot_free(c, p, g):
        """No other collective of ``c``'s communicator can hold its slot when ``p`` ends."""
        for x in by_comm[_communicator(graph_key[c][1])]:
            if x == c:
                continue
            deps = deps_of[x]
            if used_by.get(x, g) <= p:  # used by a compute node up to p: over before p started
                continue
            if any(d == c or (d in on_slot and d >= g) for d in deps) or (x > c and p in deps):
                continue
            return False
        return True

    graph_key = {node_id: key for node_id, _, _, _, key in graph}
    out = {}
    for p, g in zip(chain, chain[1:]):
        name, _, margin = info[g][:3]
        if deps_of[g] != (p,) or margin or not cost_of[g]:
            continue
        overlap = max((d if c > g else d - (g - c) * contention.host_launch_ns
                       for c, d in hanging.get(p, ()) if slot_free(c, p, g)), default=0)
        if overlap > 0:
            if name.startswith("aten::"):
                op = canonical_name(name)
                f = factor["compute" if op is None or op in COMPUTE_BOUND_OPS else "memory"]
            else:
                f = min(factor.values())
            out[g] = least_piecewise_ns(cost_of[g], f, overlap)
    return out


def _communicator(pg_name):
    """A collective's communication slot as the workload keys it (the default group's names are one)."""
    from astra_sim.workload.workload import DEFAULT_PG_NAMES

    return "" if pg_name in DEFAULT_PG_NAMES else pg_name


def least_piecewise_ns(cost, factor, overlap):
    """The least time (int ns) of a kernel of whole-GPU time ``cost`` that runs ``factor`` times slower for at least
    its first ``overlap`` ns and then at most at its whole-GPU rate: ``overlap + (1 - overlap / slowed) x cost``, or
    ``slowed`` when it ends within the overlap, with ``slowed = cost x factor - 1/2`` (the run rounds the slowed
    time and the last piece to the nearest ns), less 1 ns for floats; never below ``cost``."""
    slowed = cost * factor - 0.5
    least = slowed if overlap >= slowed else overlap + (1.0 - overlap / slowed) * cost
    return max(cost, math.floor(least) - 1)


def interleaved_bound_ns(cfg, stages, micro_batches):
    """A lower bound (int ns) on the step of ``cfg``, a layout with ``V = cfg.virtual_stages > 1``, from ``stages``:
    the :class:`StepTerms` of the same layout with ``P x V`` whole stages (VP 1, the same TP, DP, CP, EP, micro-batch
    size, ZeRO and recomputation: :meth:`BoundCache.virtual_stage_terms`); None when they do not cover every stage.

    Why: virtual stage ``u = c x P + q`` (chunk ``c`` of pipeline rank ``q``) holds the same layers as stage ``u``
    of the ``P x V``-stage layout (:func:`astra_workload_generators.llm.split.stage_layers` splits ``P x V`` ways in
    both), so a micro-batch's forward or backward of one chunk is the same nodes, at the same costs, as that stage's.
    Rank ``q`` runs chunk 0's forward of micro-batch 0 first and chunk 0's backward of the last micro-batch last
    (Megatron's interleaved order), and its compute nodes are chained in that order. So (with ``S`` the compute of
    its micro-batches, everything but the step's once-only work such as the optimizer):

    * every node of ``S`` starts after micro-batch 0's forward went through virtual stages ``0 .. q-1`` (chunk 0 of
      ranks ``0 .. q-1``): at least stage ``q``'s ``fill_ns`` in the ``P x V``-stage generation, the same path;
    * after every node of ``S`` the last micro-batch's backward still goes back through virtual stages
      ``q-1 .. 0``: at least stage ``q``'s ``drain_ns`` there, the path after its backward's send (the stages
      after it run the same nodes; their once-only work, over one chunk's parameters, is no more than a rank's
      over all its chunks');
    * ``S`` runs one node at a time on the GPU-compute slot, and costs ``micro_batches`` times the sum over the
      rank's chunks ``c`` of stage ``c x P + q``'s compute per micro-batch, less the first micro-batch's gap
      (``first_gap_ns``: no ``main_grad`` read); and the nodes of its micro-batches are chained (each waits for the
      one before), compute and in-node collectives alike, so from the first to the last they take at least
      ``micro_batches`` times the sum of those stages' longest path per micro-batch (the chain's, as the whole-stage
      terms count it, :class:`BoundCache`), less the same gap (the chain passes the first micro-batch's nodes once).

    * after every node of ``S`` the rank still runs its optimizer (chained after ``S``) and then, one at a time
      on its data-parallel communicator, the parameter all-gathers of every one of its chunks' layers (ZeRO-1/2):
      at least the sum over its chunks ``c`` of stage ``c x P + q``'s ``post_ns`` (:func:`communicator_bounds`;
      the same layers' all-gathers, of the same sizes, on a communicator of the same ranks and nodes, when
      stages fill whole nodes: :meth:`BoundCache._collective_ns`), so the larger of that and ``drain_ns`` follows
      ``S``.

    So the step is at least ``fill + micro_batches x per micro-batch + drain`` of every rank ``q``, per
    micro-batch the larger of the two sums: the interleaved pipeline's fill and drain of ``(P - 1) / V``
    micro-batches, from its own chunks. A layout with ZeRO-3 has no such bound (its first micro-batch gathers the
    parameters again in the backward, which the last one does not), nor one whose stages' generation was refused.
    """
    P, V = cfg.pp, cfg.virtual_stages
    if V == 1 or cfg.zero == 3 or stages is None:
        return None
    per_stage = cfg.tp * cfg.cp * cfg.dp  # ranks of a stage: rank = t + TP (c + CP (d + DP p))
    by_stage = {}
    for rank, compute in stages.compute_per_micro_batch_ns.items():
        here = (compute, stages.chain_per_micro_batch_ns.get(rank, 0), stages.fill_ns.get(rank, 0),
                stages.drain_ns.get(rank, 0), stages.post_ns.get(rank, 0), -stages.first_gap_ns.get(rank, 0))
        u = rank // per_stage
        # several representatives of a stage: the least of each term (the largest gap) holds for all of them
        by_stage[u] = here if u not in by_stage else tuple(map(min, by_stage[u], here))
    if set(by_stage) != set(range(P * V)):
        return None
    out = 0
    for q in range(P):
        chunks = [by_stage[c * P + q] for c in range(V)]
        per_mb = max(sum(c[0] for c in chunks), sum(c[1] for c in chunks))
        after = max(by_stage[q][3], sum(c[4] for c in chunks))
        out = max(out, by_stage[q][2] + micro_batches * per_mb + sum(c[5] for c in chunks) + after)
    return int(out)


#: StepTerms' fields, as the disk cache keeps them
_FIELDS = ("fixed_ns", "per_micro_batch_ns", "pipeline_fixed_ns", "pipeline_per_micro_batch_ns",
           "compute_per_micro_batch_ns", "chain_per_micro_batch_ns", "fill_ns", "drain_ns", "slot_fixed_ns",
           "slot_per_micro_batch_ns", "post_ns", "first_gap_ns")


def pipeline_estimate(terms, cfg):
    """The bound without the edge plus the pipeline's bubble, ``(pp - 1) / vp`` micro-batches of the least loaded
    rank's work, or the bound when that is larger: an estimate (int ns), for ordering the candidates only."""
    bubble = (cfg.pp - 1) * min(terms.per_micro_batch_ns.values()) // cfg.virtual_stages
    return max(terms.bound_ns(cfg.micro_batches, 0) + bubble, terms.bound_ns(cfg.micro_batches, cfg.virtual_stages))


def _cache_dir():
    return os.environ.get("ASTRA_SEARCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "astra-sim",
                                                                 "search")


_CODE = []


def _code_digest():
    """A hash of what the terms are computed by: the generator's and the gpu model's files (code and data) and
    this module, so that an edited checkout never reads another code's terms (versions alone stay put while a
    checkout is edited)."""
    if not _CODE:
        import astra_gpu_model
        import astra_workload_generators

        h = hashlib.sha256()
        for package in (astra_workload_generators, astra_gpu_model):
            root = os.path.dirname(package.__file__)
            for folder, dirs, files in sorted(os.walk(root)):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith((".py", ".json", ".yaml", ".yml")):
                        with open(os.path.join(folder, name), "rb") as handle:
                            h.update(name.encode() + hashlib.sha256(handle.read()).digest())
        with open(__file__, "rb") as handle:
            h.update(handle.read())
        _CODE.append(h.hexdigest())
    return _CODE[0]


class BoundCache:
    """Each layout's :class:`StepTerms` on one GPU, computed once per search (and once per machine on disk)."""

    def __init__(self, source, gpu, gpus_per_node, *, nccl=True, disk=True, nic_gbps=None, sharp=False,
                 contention=None, board_power_w=None, nccl_version=None, nccl_nvls=None, cudnn_version=None):
        """``source``: the workload options naming the model (``{"preset": ...}`` or ``{"model": path}``, with
        ``seq-len`` / ``gemm-dtype`` when given); ``gpu``: the platform's GPU preset name or YAML; ``nccl``: the
        run times collectives with the NCCL model (``--platform-collective nccl``), so in-node ones count;
        ``nic_gbps`` and ``sharp``: the NIC rate (GB/s per GPU and direction) and SHARP the run's NCCL model
        prices the fabric with (the platform's ``nccl_nic_gbps`` and ``nccl_sharp`` options), so collectives
        across nodes count too (None: they count 0); ``contention``: the run's measured contention model
        (:class:`Contention`), whose certain slowdowns count (:func:`beside_collectives`; None: none counts);
        ``board_power_w``: the GPUs' board power limit where the platform sets one (its implied
        ``gpu_board_power_w``: a rack tray's, above the preset's TDP), at which the run's gpu model takes its
        sustained GEMM clock; the bound's GEMMs must use the same clock, or they would be slower than the run's;
        ``nccl_version``: the run's ``--nccl-version``, whose tuning picks the (algorithm, protocol) pair across
        nodes: the bound must time the pair the run times (another pair may be faster than the run's);
        ``nccl_nvls``: the run's ``--nccl-nvls`` (``"off"``: NCCL_NVLS_ENABLE=0, no NVLS nor NVLSTree in the choice),
        for the same reason; ``cudnn_version``: the run's ``--cudnn-version``, whose rows time attention on
        Blackwell (an older release's rows are not slower at every length, so the bound takes the run's)."""
        from types import SimpleNamespace

        from astra_gpu_model import GpuComputeModel
        from astra_gpu_model.nccl import config_for_options

        self.source = dict(source)
        self.gpu = gpu
        self.board_power_w = float(board_power_w) if board_power_w else None
        options = {"gpu_board_power_w": self.board_power_w} if self.board_power_w else {}
        self.cudnn_version = None if cudnn_version is None else str(cudnn_version)
        if self.cudnn_version:
            options["cudnn_version"] = self.cudnn_version
        # its per-op cache is shared by every layout of the search
        self.model = GpuComputeModel(SimpleNamespace(options=options), gpu=gpu)
        self.nic_gbps, self.sharp = (float(nic_gbps) if nic_gbps else None), bool(sharp)
        self.nccl_version = None if nccl_version is None else str(nccl_version)
        self.nccl_nvls = None if nccl_nvls is None else str(nccl_nvls)
        self.contention = contention
        run_options = {"gpu": gpu, "nccl_nic_gbps": self.nic_gbps, "nccl_sharp": self.sharp,
                       "nccl_version": self.nccl_version, "nccl_nvls": self.nccl_nvls}
        self.nccl = config_for_options(run_options) if nccl else None  # the run's own
        self.gpus_per_node = int(gpus_per_node)
        self.disk = _cache_dir() if disk else None
        self.memory = {}
        self.generated = 0  # layouts whose terms were computed here (not found in memory or on disk)
        model_file = self.source.get("model")
        model_digest = None
        if isinstance(model_file, str) and os.path.isfile(model_file):
            with open(model_file, "rb") as handle:
                model_digest = hashlib.sha256(handle.read()).hexdigest()
        self._salt = json.dumps([self.source, model_digest, self.model.describe(), bool(nccl), self.gpus_per_node,
                                 self.nic_gbps, self.sharp, contention, self.nccl_version, self.nccl_nvls,
                                 self.cudnn_version, TERMS_VERSION,
                                 _code_digest()],
                                sort_keys=True,
                                default=str)

    @classmethod
    def for_platform(cls, source, platform, gpus, *, nccl=True, disk=True, nccl_version=None, nccl_nvls=None,
                     cudnn_version=None):
        """The cache of a search on ``gpus`` GPUs of ``platform`` (a GPU platform: its GPU, node size, and the
        NIC rate and SHARP its runs' NCCL model prices collectives across nodes with, and its measured contention
        model and host launches, from its implied options); ``nccl_version``, ``nccl_nvls``: the search's
        ``--nccl-version`` and ``--nccl-nvls``; ``cudnn_version``: its ``--cudnn-version``."""
        implied = platform.resolve(max(1, gpus // platform.gpus_per_node), {"platform_collective": "nccl"}).options
        return cls(source, platform.gpu, platform.gpus_per_node, nccl=nccl, disk=disk,
                   nic_gbps=implied.get("nccl_nic_gbps"), sharp=bool(implied.get("nccl_sharp")),
                   contention=contention_of(implied, platform.gpu), board_power_w=implied.get("gpu_board_power_w"),
                   nccl_version=nccl_version, nccl_nvls=nccl_nvls, cudnn_version=cudnn_version)

    def terms(self, cfg):
        """The layout's :class:`StepTerms`, or None when the generator refuses :meth:`terms_layout`'s
        generations (then the layout is simulated whatever its bound)."""
        return self._terms(self.terms_layout(cfg))

    def virtual_stage_terms(self, cfg):
        """A layout with virtual stages: the :class:`StepTerms` of the same layout with ``pp x virtual_stages``
        whole stages, which :func:`interleaved_bound_ns` reads (None without virtual stages, or when the generator
        refuses it)."""
        shared = self.virtual_stage_layout(cfg)
        return None if shared is None else self._terms(shared)

    @staticmethod
    def terms_layout(cfg):
        """What :meth:`terms` generates: (whole-stage layout, micro-batch counts). A Megatron step's micro-batches
        are one graph from the second on (the first writes its weight gradients without reading ``main_grad``:
        ``NodeEmitter._grad_buffer``), so ``m >= 2`` extrapolates from 2 and 3 (from 1 and 2 the slope, which
        has the drain's dearer last backward, passes the step); ``m = 1`` is its own generation."""
        counts = (1,) if cfg.micro_batches == 1 else (2, 3)
        return replace(cfg, micro_batches=counts[0], virtual_stages=1), counts

    @staticmethod
    def virtual_stage_layout(cfg):
        """What :meth:`virtual_stage_terms` generates: ``pp x virtual_stages`` whole stages, two micro-batches
        and three (as :meth:`terms_layout`); None without virtual stages or with ZeRO-3
        (:func:`interleaved_bound_ns`)."""
        if cfg.virtual_stages == 1 or cfg.zero == 3:
            return None
        return replace(cfg, pp=cfg.pp * cfg.virtual_stages, virtual_stages=1, micro_batches=2), (2, 3)

    def _key(self, plan):
        from .search import _options

        layout, counts = plan
        return hashlib.sha256((self._salt + json.dumps([_options(layout), counts], sort_keys=True, default=str)
                               ).encode()).hexdigest()

    def _terms(self, shared):
        """Terms from the generations of plan ``shared`` (:meth:`terms_layout`), linear from one to the next: from
        memory, else from disk, else computed here."""
        key = self._key(shared)
        if key not in self.memory:
            found = self._load(key)
            if found is None:
                found = compute_terms(self, shared)
                if found is not None:
                    self.generated += 1
                    self._store(key, found)
            self.memory[key] = found
        return self.memory[key]

    def prefetch(self, layouts, executor):
        """Compute the terms of ``layouts`` (the plans of :meth:`terms_layout` /
        :meth:`virtual_stage_layout`) that neither memory nor disk holds, side by side on ``executor``'s workers
        (each generates and reads its own traces), and keep them; returns how many were computed. The terms do not
        depend on where they were computed."""
        todo = {}
        for shared in layouts:
            key = self._key(shared)
            if key in self.memory or key in todo:
                continue
            found = self._load(key)
            if found is not None:
                self.memory[key] = found
            else:
                todo[key] = shared
        if not todo:
            return 0
        payload = executor.share((self.source, self.gpu, self.gpus_per_node, self.nccl is not None, self.nic_gbps,
                                  self.sharp, self.contention, self.board_power_w, self.nccl_version,
                                  self.nccl_nvls, self.cudnn_version))
        tasks = [((key, shared), payload) for key, shared in todo.items()]
        for (key, _), found in executor.run(terms_task, tasks):
            if not isinstance(found, (StepTerms, type(None))):  # a worker that died: computed here instead
                found = compute_terms(self, todo[key])
            self.memory[key] = found
            if found is not None:
                self.generated += 1
                self._store(key, found)
        return len(todo)

    def _compute(self, options, micro_batches):
        """{rank: (compute ns, longest path ns, edge ns, fill ns, drain ns, serial ns, post ns, gap ns)} of the
        layout generated with ``micro_batches``: the GPU-compute slot's sum, the rank's longest chain of
        dependencies with compute and collectives at their costs, the pipeline's edge (:func:`pipeline_edges`), the
        fill and drain (:func:`fill_and_drain`) and its communicators' serial work (:func:`communicator_bounds`)
        over the representative ranks' traces, and its first micro-batch's compute gap (:meth:`_graph`)."""
        from astra_workload_compact import read_compact_workload
        from astra_workload_generators.llm import LlmSpec, generate_llm_workload

        mapping = {**self.source, **options, "micro-batches": micro_batches}
        from astra_sim.generated import private_folder

        # stages of whole nodes: a group spans the same nodes in a layout and in its P x V whole-stage twin
        whole_nodes = (options["tp"] * options["cp"] * options["dp"]) % self.gpus_per_node == 0
        with private_folder("astra-bound-") as folder:  # named by this process: a SIGKILLed run's is reclaimed
            prefix = os.path.join(folder, "w")
            # held in memory (issue 37): the traces are read right here, in this process (no encode, no parse)
            generate_llm_workload(LlmSpec.from_mapping(mapping, "workload.llm"), prefix, on_warning=lambda _: None,
                                  in_memory=True)
            with open(f"{prefix}.groups.json") as handle:
                groups = json.load(handle)
            workload = read_compact_workload(prefix)
            across = workload.npus if whole_nodes else None
            gaps = {}
            graphs = {int(rank): self._graph(path, int(rank), groups, across, gaps)
                      for rank, path in workload.traces.items()}
        paths = _paths(graphs)
        edges = pipeline_edges(graphs, paths)
        ends = fill_and_drain(graphs, paths)
        slots = communicator_bounds(graphs, paths)
        out = {}
        for rank, graph in graphs.items():
            finish = {}
            for node_id, cost, is_compute, deps, _ in graph:
                finish[node_id] = max((finish[d] for d in deps if d in finish), default=0) + cost
            compute = sum(cost for _, cost, is_compute, _, _ in graph if is_compute)
            out[rank] = (compute, int(max(finish.values(), default=0)), edges.get(rank, 0), *ends.get(rank, (0, 0)),
                         *slots.get(rank, (0, 0)), gaps.get(rank, 0))
        return out

    def _graph(self, path, rank, groups, npus=None, gaps=None):
        """A rank's trace as [(node id, cost ns, on the GPU-compute slot, deps, key)] in file order; the key is
        ("send" | "recv", src, dst, tag) for point-to-point nodes, ("coll", communicator) for collectives, else
        None. ``npus``: the workload's ranks, when collectives across nodes count (:meth:`_collective_ns`);
        ``gaps[rank]``: its compute labelled micro-batch 1 (``.mb1.``) less micro-batch 0's, when it has a 1."""
        from astra_sim.chakra import types as T
        from astra_workload_compact import trace_nodes

        graph, info = [], {}
        for node in trace_nodes(path):  # (the nodes read_et(path, keep_raw=False) gives, held or parsed)
            info[node.id] = (node.name, node.attrs.get("comm_sms"), "sm_margin" in node.attrs,
                             node.attrs.get("label", ""))
            cost, is_compute, key = 0, False, None
            if node.type == T.COMP_NODE and not node.attrs.get("is_cpu_op"):  # CPU ops use the CPU slot
                cost, is_compute = int(self.model.compute_time_ns(node, rank) or 0), True
            elif node.type == T.COMM_COLL_NODE:
                cost = self._collective_ns(node, groups, npus)
                key = ("coll", str(node.attrs.get("pg_name", "")))
            elif node.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE):
                send = node.type == T.COMM_SEND_NODE
                key = ("send" if send else "recv", node.attrs.get("comm_src", rank if send else None),
                       node.attrs.get("comm_dst", None if send else rank), node.attrs.get("comm_tag"))
            graph.append((node.id, cost, is_compute, (*node.data_deps, *node.ctrl_deps), key))
        raised = beside_collectives(graph, info, self.contention)
        if raised:
            graph = [(i, raised.get(i, c), *rest) for i, c, *rest in graph]
        if gaps is not None:
            by_mb = {"0": 0}
            for node_id, cost, on_slot, _, _ in graph:
                mb = _MICRO_BATCH.search(info[node_id][3]) if on_slot else None
                by_mb[mb and mb.group(1)] = by_mb.get(mb and mb.group(1), 0) + cost
            gaps[rank] = by_mb["1"] - by_mb["0"] if "1" in by_mb else 0
        return graph

    def _collective_ns(self, node, groups, npus=None):
        """The NCCL model's time of a collective (what the simulated phase waits, at least: it also waits for its
        peers and its communicator's earlier collectives): with ``--platform-collective nccl`` a communicator
        group's collective is one phase of :class:`astra_gpu_model.nccl.NcclCollective` over the group's ranks
        and the nodes they span, timed by ``collective_time_us`` with the run's NCCL configuration (the GPU, the
        platform's NIC rate and SHARP, the run's ``--nccl-version`` and ``--nccl-nvls``: ``self.nccl``). Counted
        when the group lies in one node, or, given the workload's ``npus`` and the NIC rate, spans several nodes
        without being every rank (the default group, and a group of every rank, run one phase per network dimension
        instead); 0 otherwise (a lower bound needs no more)."""
        from astra_gpu_model.nccl import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, collective_time_us
        from astra_sim.chakra import types as T

        if self.nccl is None:
            return 0
        kind = {T.ALL_REDUCE: ALL_REDUCE, T.ALL_GATHER: ALL_GATHER, T.REDUCE_SCATTER: REDUCE_SCATTER,
                T.ALL_TO_ALL: ALL_TO_ALL}.get(node.attrs.get("comm_type"))
        members = groups.get(str(node.attrs.get("pg_name")))
        size = node.attrs.get("comm_size")
        if kind is None or not members or not isinstance(size, int) or size <= 0 or len(members) < 2:
            return 0
        nodes = len({m // self.gpus_per_node for m in members})
        if nodes > 1 and (npus is None or self.nic_gbps is None or len(members) >= npus
                          or str(node.attrs.get("pg_name")) in ("", "0")):
            return 0
        n_bytes = size * len(members) if kind == ALL_GATHER else size  # NCCL's nBytes, as the simulated phase's
        return int(collective_time_us(kind, n_bytes, len(members), self.nccl, nodes)[0] * 1000)

    def _load(self, key):
        if not self.disk:
            return None
        path = os.path.join(self.disk, key[:2], key + ".json")
        try:
            with open(path) as handle:
                data = json.load(handle)
            return StepTerms(*({int(r): int(v) for r, v in data[name].items()} for name in _FIELDS))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent or unreadable: compute it again
            return None

    def _store(self, key, terms):
        if not self.disk:
            return
        from astra_sim.safeio import write_text_atomic

        path = os.path.join(self.disk, key[:2], key + ".json")
        try:
            write_text_atomic(path, json.dumps({"units": {"time": "ns"},
                                                **{name: getattr(terms, name) for name in _FIELDS}}))
        except OSError:  # a read-only home: the cache is only an optimisation
            pass


def compute_terms(cache, plan):
    """The :class:`StepTerms` of ``plan`` (:meth:`BoundCache.terms_layout`), linear through its two generations
    (one: no slope; None when the generator refuses one): a rank's terms are its longest path where that exceeds
    its compute in both, else its compute; its compute with the pipeline's edge; its compute and longest path per
    micro-batch; its communicators' serial work; and of the first generation, the fill and drain, the work after
    its last compute node and the first micro-batch's compute gap (:meth:`BoundCache._compute`)."""
    from .search import _options

    layout, counts = plan
    try:
        runs = [cache._compute(_options(layout), m) for m in counts]
    except AstraError:
        return None
    one, two = runs * 2 if len(runs) == 1 else runs
    if set(one) != set(two):
        return None
    a = counts[0]  # a line through (a, x) and (a + 1, y): fixed x - a (y - x), per micro-batch y - x
    i = {r: 1 if one[r][1] > one[r][0] and two[r][1] > two[r][0] else 0 for r in one}
    edged = {r: (one[r][0] + one[r][2], two[r][0] + two[r][2]) for r in one}
    return StepTerms({r: (a + 1) * one[r][i[r]] - a * two[r][i[r]] for r in one},
                     {r: two[r][i[r]] - one[r][i[r]] for r in one},
                     {r: (a + 1) * x - a * y for r, (x, y) in edged.items()},
                     {r: y - x for r, (x, y) in edged.items()},
                     {r: two[r][0] - one[r][0] for r in one}, {r: two[r][1] - one[r][1] for r in one},
                     {r: one[r][3] for r in one},
                     {r: one[r][4] for r in one},
                     {r: (a + 1) * one[r][5] - a * two[r][5] for r in one}, {r: two[r][5] - one[r][5] for r in one},
                     {r: one[r][6] for r in one}, {r: max(0, one[r][7]) for r in one})


#: a worker process's caches by their settings (a worker computes many layouts' terms with one compute model)
_WORKER_CACHES = {}


def terms_task(task, payload):
    """An executor task of :meth:`BoundCache.prefetch`: (key, plan) -> its :class:`StepTerms` or None,
    computed in this worker (no disk: the search's process keeps them)."""
    _key, plan = task
    (source, gpu, gpus_per_node, nccl, nic_gbps, sharp, contention, board_power_w, nccl_version, nccl_nvls,
     cudnn_version) = payload
    ident = json.dumps(payload, sort_keys=True, default=str)
    if ident not in _WORKER_CACHES:
        _WORKER_CACHES[ident] = BoundCache(source, gpu, gpus_per_node, nccl=nccl, disk=False, nic_gbps=nic_gbps,
                                           sharp=sharp, contention=contention, board_power_w=board_power_w,
                                           nccl_version=nccl_version, nccl_nvls=nccl_nvls,
                                           cudnn_version=cudnn_version)
    return compute_terms(_WORKER_CACHES[ident], plan)
