"""A lower bound on a layout's simulated step, from the gpu compute model's per-op costs and the NCCL model's
collective times, without simulating.

Why it is a lower bound: a rank has one GPU-compute slot (:mod:`astra_sim.workload.workload`), so its compute
nodes run one at a time and the step lasts at least the sum of their costs; and no node starts before the nodes it
depends on have finished, so the step lasts at least the rank's longest chain of dependencies, with compute at the
gpu compute model's cost and each collective whose group lies in one node at the NCCL model's time for its size
(``--platform-collective nccl``, the search's default: the simulated phase waits that time once its peers have
joined; Megatron's tensor-parallel all-gathers and reduce-scatters block the next GEMM, so they lie on the chain).
Other communication counts 0; host launches and contention can only add. Across pipeline stages, the
representative ranks' traces are joined at their sends and receives (:func:`pipeline_edges`): a rank's compute
cannot start before the first micro-batch has come through the earlier stages, and the step cannot end before the
last backward has gone back through them, so without virtual stages the bound also holds the rank's compute plus
that fill and drain (its ``pipeline_*`` terms, linear in ``m`` too). The bound is the
busiest rank's ``fixed + m x per_micro_batch``: the sums are linear in the micro-batch count ``m`` (every
micro-batch is the same graph, chained in schedule order; the optimizer and the step's other fixed work come
once), so two small generations (``m`` = 1 and 2, VP 1) give both terms, whatever ``m`` the layout has; virtual
stages regroup a rank's layers into chunks without changing them. tests/test_search_bound.py holds these claims
against direct generation, and the bound against simulation.

Work is shared across layouts and processes: one compute model per GPU caches each op's cost by shape, and each
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
import os
from dataclasses import dataclass, field, replace

from astra_sim.errors import AstraError

#: bumped when what the terms measure changes: the disk cache's entries of another version are not read
TERMS_VERSION = 3


@dataclass(frozen=True)
class StepTerms:
    """Per-rank work of a layout that nothing overlaps (its longest chain, or its compute when that is longer):
    ``fixed_ns`` once per step, ``per_micro_batch_ns`` per micro-batch (each rank class's representative, by
    rank); its compute with the pipeline's edge (:func:`pipeline_edges`; valid without virtual stages) as
    ``pipeline_fixed_ns`` and ``pipeline_per_micro_batch_ns``."""

    fixed_ns: dict
    per_micro_batch_ns: dict
    pipeline_fixed_ns: dict = field(default_factory=dict)
    pipeline_per_micro_batch_ns: dict = field(default_factory=dict)

    def bound_ns(self, micro_batches, virtual_stages=1):
        """The busiest rank's: a lower bound on the simulated step (int ns). With virtual stages (or 0: none
        asked) the pipeline's edge is not counted (it was measured on whole stages, longer than a virtual
        stage's chunk)."""
        out = max(self.fixed_ns[r] + micro_batches * self.per_micro_batch_ns[r] for r in self.fixed_ns)
        if virtual_stages == 1 and self.pipeline_fixed_ns:
            out = max(out, max(self.pipeline_fixed_ns[r] + micro_batches * self.pipeline_per_micro_batch_ns[r]
                               for r in self.pipeline_fixed_ns))
        return out


def pipeline_edges(graphs):
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
    sends, recvs = {}, {}
    for rank, graph in graphs.items():
        for node_id, _, _, _, p2p in graph:
            if p2p is not None:
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
        return {}
    finish, tail = {}, {}
    for n in order:
        finish[n] = max((finish[p] for p in preds[n]), default=0) + cost[n]
    for n in reversed(order):
        tail[n] = max((cost[s] + tail[s] for s in succs.get(n, ())), default=0)
    out = {}
    for rank, graph in graphs.items():
        nodes = sorted(((tail[(rank, i)], finish[(rank, i)] - c, c) for i, c, on_slot, _, _ in graph if on_slot),
                       reverse=True)
        best, head, outside = 0, None, sum(c for _, _, c in nodes)
        for t, start, c in nodes:  # S grows by the next longest tail: min tail(S) is t
            head = start if head is None else min(head, start)
            outside -= c
            best = max(best, head + t - outside)
        out[rank] = int(best)
    return out


#: StepTerms' fields, as the disk cache keeps them
_FIELDS = ("fixed_ns", "per_micro_batch_ns", "pipeline_fixed_ns", "pipeline_per_micro_batch_ns")


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

    def __init__(self, source, gpu, gpus_per_node, *, nccl=True, disk=True):
        """``source``: the workload options naming the model (``{"preset": ...}`` or ``{"model": path}``, with
        ``seq-len`` / ``gemm-dtype`` when given); ``gpu``: the platform's GPU preset name or YAML; ``nccl``: the
        run times collectives with the NCCL model (``--platform-collective nccl``), so in-node ones count."""
        from astra_gpu_model import GpuComputeModel
        from astra_gpu_model.nccl import config_for_gpu

        self.source = dict(source)
        self.model = GpuComputeModel(gpu=gpu)  # its per-op cache is shared by every layout of the search
        self.nccl = config_for_gpu(gpu) if nccl else None
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
                                 TERMS_VERSION, _code_digest()], sort_keys=True, default=str)

    def terms(self, cfg):
        """The layout's :class:`StepTerms`, or None when the generator refuses its one- and two-micro-batch
        versions (then the layout is simulated whatever its bound)."""
        return self._terms(replace(cfg, micro_batches=1, virtual_stages=1), (1, 2))

    def interleaved_terms(self, cfg):
        """A layout with virtual stages: its terms per period of ``pp`` micro-batches (interleaving needs a
        multiple of ``pp``), from generations of ``pp`` and ``2 pp`` micro-batches with its own virtual stages, so
        the edge is its own chunks': ``bound_ns(micro_batches // pp)`` bounds its step. Dearer than
        :meth:`terms` (longer generations, one per virtual-stage count), so the search asks only for the layouts
        that :meth:`terms` could not prune. None without virtual stages or when the generator refuses."""
        if cfg.virtual_stages == 1:
            return None
        return self._terms(replace(cfg, micro_batches=cfg.pp), (cfg.pp, 2 * cfg.pp))

    def _terms(self, shared, counts):
        """Terms from generations of ``shared`` with ``counts`` micro-batches, linear from one to the next."""
        from .search import _options

        options = _options(shared)
        key = hashlib.sha256((self._salt + json.dumps([options, counts], sort_keys=True, default=str)).encode()
                             ).hexdigest()
        if key in self.memory:
            return self.memory[key]
        found = self._load(key)
        if found is None:
            try:
                one, two = (self._compute(options, m) for m in counts)
            except AstraError:
                self.memory[key] = None
                return None
            if set(one) != set(two):
                self.memory[key] = None
                return None
            # a rank's terms: its longest path where it exceeds its compute in both generations, else its compute;
            # its compute with the pipeline's edge (which grows by the same amount with each micro-batch, or period)
            i = {r: 1 if one[r][1] > one[r][0] and two[r][1] > two[r][0] else 0 for r in one}
            edged = {r: (one[r][0] + one[r][2], two[r][0] + two[r][2]) for r in one}
            found = StepTerms({r: 2 * one[r][i[r]] - two[r][i[r]] for r in one},
                              {r: two[r][i[r]] - one[r][i[r]] for r in one},
                              {r: 2 * a - b for r, (a, b) in edged.items()}, {r: b - a for r, (a, b) in edged.items()})
            self.generated += 1
            self._store(key, found)
        self.memory[key] = found
        return found

    def _compute(self, options, micro_batches):
        """{rank: (compute ns, longest path ns, edge ns)} of the layout generated with ``micro_batches``: the
        GPU-compute slot's sum, the rank's longest chain of dependencies with compute and in-node collectives at
        their costs, and the pipeline's edge (:func:`pipeline_edges`) over the representative ranks' traces."""
        from astra_sim.workload.compact import read_compact_workload
        from astra_workload_generators.llm import LlmSpec, generate_llm_workload

        mapping = {**self.source, **options, "micro-batches": micro_batches}
        from astra_sim.generated import private_folder

        with private_folder("astra-bound-") as folder:  # named by this process: a SIGKILLed run's is reclaimed
            prefix = os.path.join(folder, "w")
            generate_llm_workload(LlmSpec.from_mapping(mapping, "workload.llm"), prefix, on_warning=lambda _: None)
            with open(f"{prefix}.groups.json") as handle:
                groups = json.load(handle)
            graphs = {int(rank): self._graph(path, int(rank), groups)
                      for rank, path in read_compact_workload(prefix).traces.items()}
        edges = pipeline_edges(graphs)
        out = {}
        for rank, graph in graphs.items():
            finish = {}
            for node_id, cost, is_compute, deps, _ in graph:
                finish[node_id] = max((finish[d] for d in deps if d in finish), default=0) + cost
            compute = sum(cost for _, cost, is_compute, _, _ in graph if is_compute)
            out[rank] = (compute, int(max(finish.values(), default=0)), edges.get(rank, 0))
        return out

    def _graph(self, path, rank, groups):
        """A rank's trace as [(node id, cost ns, on the GPU-compute slot, deps, p2p key)] in file order; the
        p2p key is ("send" | "recv", src, dst, tag) for point-to-point nodes, else None."""
        from astra_sim.chakra import types as T
        from astra_sim.chakra.reader import read_et

        graph = []
        for node in read_et(path, keep_raw=False).nodes:
            cost, is_compute, p2p = 0, False, None
            if node.type == T.COMP_NODE and not node.attrs.get("is_cpu_op"):  # CPU ops use the CPU slot
                cost, is_compute = int(self.model.compute_time_ns(node, rank) or 0), True
            elif node.type == T.COMM_COLL_NODE:
                cost = self._collective_ns(node, groups)
            elif node.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE):
                send = node.type == T.COMM_SEND_NODE
                p2p = ("send" if send else "recv", node.attrs.get("comm_src", rank if send else None),
                       node.attrs.get("comm_dst", None if send else rank), node.attrs.get("comm_tag"))
            graph.append((node.id, cost, is_compute, (*node.data_deps, *node.ctrl_deps), p2p))
        return graph

    def _collective_ns(self, node, groups):
        """The NCCL model's time of a collective whose group lies in one node (what the simulated phase waits,
        at least: it also waits for its peers); 0 for any other (a lower bound needs no more)."""
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
        if len({m // self.gpus_per_node for m in members}) != 1:
            return 0
        n_bytes = size * len(members) if kind == ALL_GATHER else size  # NCCL's nBytes, as the simulated phase's
        return int(collective_time_us(kind, n_bytes, len(members), self.nccl, 1)[0] * 1000)

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
