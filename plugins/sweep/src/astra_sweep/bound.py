"""A lower bound on a layout's simulated step, from the gpu compute model's per-op costs and the NCCL model's
collective times, without simulating.

Why it is a lower bound: a rank has one GPU-compute slot (:mod:`astra_sim.workload.workload`), so its compute
nodes run one at a time and the step lasts at least the sum of their costs; and no node starts before the nodes it
depends on have finished, so the step lasts at least the rank's longest chain of dependencies, with compute at the
gpu compute model's cost and each collective whose group lies in one node at the NCCL model's time for its size
(``--platform-collective nccl``, the search's default: the simulated phase waits that time once its peers have
joined; Megatron's tensor-parallel all-gathers and reduce-scatters block the next GEMM, so they lie on the chain).
Other communication counts 0; pipeline bubbles, host launches and contention can only add. The bound is the
busiest rank's ``fixed + m x per_micro_batch``: both sums are linear in the micro-batch count ``m`` (every
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
from dataclasses import dataclass, replace

from astra_sim.errors import AstraError

#: bumped when what the terms measure changes: the disk cache's entries of another version are not read
TERMS_VERSION = 2


@dataclass(frozen=True)
class StepTerms:
    """Per-rank work of a layout that nothing overlaps (its longest chain, or its compute when that is longer):
    ``fixed_ns`` once per step, ``per_micro_batch_ns`` per micro-batch (each rank class's representative, by
    rank)."""

    fixed_ns: dict
    per_micro_batch_ns: dict

    def bound_ns(self, micro_batches):
        """The busiest rank's: a lower bound on the simulated step (int ns)."""
        return max(self.fixed_ns[r] + micro_batches * self.per_micro_batch_ns[r] for r in self.fixed_ns)


def pipeline_estimate(terms, cfg):
    """The bound plus the pipeline's bubble, ``(pp - 1) / vp`` micro-batches of the least loaded rank's work: an
    estimate (int ns), for ordering the candidates only."""
    bubble = (cfg.pp - 1) * min(terms.per_micro_batch_ns.values()) // cfg.virtual_stages
    return terms.bound_ns(cfg.micro_batches) + bubble


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
        from .search import _options

        shared = replace(cfg, micro_batches=1, virtual_stages=1)
        options = _options(shared)
        key = hashlib.sha256((self._salt + json.dumps(options, sort_keys=True, default=str)).encode()).hexdigest()
        if key in self.memory:
            return self.memory[key]
        found = self._load(key)
        if found is None:
            try:
                one, two = (self._compute(options, m) for m in (1, 2))
            except AstraError:
                self.memory[key] = None
                return None
            if set(one) != set(two):
                self.memory[key] = None
                return None
            # a rank's terms: its longest path where it exceeds its compute in both generations, else its compute
            i = {r: 1 if one[r][1] > one[r][0] and two[r][1] > two[r][0] else 0 for r in one}
            found = StepTerms({r: 2 * one[r][i[r]] - two[r][i[r]] for r in one},
                              {r: two[r][i[r]] - one[r][i[r]] for r in one})
            self.generated += 1
            self._store(key, found)
        self.memory[key] = found
        return found

    def _compute(self, options, micro_batches):
        """{rank: (compute ns, longest path ns)} of the layout generated with ``micro_batches``: the GPU-compute
        slot's sum, and the longest chain of dependencies with compute and in-node collectives at their costs."""
        from astra_sim.chakra import types as T
        from astra_sim.chakra.reader import read_et
        from astra_sim.workload.compact import read_compact_workload
        from astra_workload_generators.llm import LlmSpec, generate_llm_workload

        mapping = {**self.source, **options, "micro-batches": micro_batches}
        from astra_sim.generated import private_folder

        with private_folder("astra-bound-") as folder:  # named by this process: a SIGKILLed run's is reclaimed
            prefix = os.path.join(folder, "w")
            generate_llm_workload(LlmSpec.from_mapping(mapping, "workload.llm"), prefix, on_warning=lambda _: None)
            with open(f"{prefix}.groups.json") as handle:
                groups = json.load(handle)
            out = {}
            for rank, path in read_compact_workload(prefix).traces.items():
                finish, compute = {}, 0
                for node in read_et(path, keep_raw=False).nodes:
                    cost = 0
                    if node.type == T.COMP_NODE and not node.attrs.get("is_cpu_op"):  # CPU ops use the CPU slot
                        cost = int(self.model.compute_time_ns(node, rank) or 0)
                        compute += cost
                    elif node.type == T.COMM_COLL_NODE:
                        cost = self._collective_ns(node, groups)
                    deps = [finish[d] for d in (*node.data_deps, *node.ctrl_deps) if d in finish]
                    finish[node.id] = max(deps, default=0) + cost
                out[int(rank)] = (compute, int(max(finish.values(), default=0)))
        return out

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
            return StepTerms({int(r): int(v) for r, v in data["fixed_ns"].items()},
                             {int(r): int(v) for r, v in data["per_micro_batch_ns"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent or unreadable: compute it again
            return None

    def _store(self, key, terms):
        if not self.disk:
            return
        from astra_sim.safeio import write_text_atomic

        path = os.path.join(self.disk, key[:2], key + ".json")
        try:
            write_text_atomic(path, json.dumps({"units": {"time": "ns"}, "fixed_ns": terms.fixed_ns,
                                                "per_micro_batch_ns": terms.per_micro_batch_ns}))
        except OSError:  # a read-only home: the cache is only an optimisation
            pass
