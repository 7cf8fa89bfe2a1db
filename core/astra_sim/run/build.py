"""Building a run: its inputs resolved (:class:`RunSetup`: registry, configurations, backends, workload format)
and its ranks made (:func:`build_ranks`: traces read, the fold decided, a system layer and a workload per
simulated rank)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from astra_sim.api import RunContext
from astra_sim.config import ignored_key_messages, parse_comm_groups, parse_memory_config, parse_system_config
from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.plugins import BACKEND_ROLES, build_registry
from astra_sim.system.context import SharedContext
from astra_sim.system.frontend import SendRecvMatcher
from astra_sim.system.sys import Sys
from astra_sim.workload.graph import build_graph
from astra_sim.workload.workload import RankWorkload


class RunSetup:
    """A run's resolved inputs (configurations, backends from the registry, workload format), made before any trace
    is read. ``callbacks``: how the backends' :class:`~astra_sim.api.RunContext` reaches the built ranks."""

    def __init__(self, workload, system, network, memory, comm_groups, *, pm, network_backend, memory_backend,
                 compute_model, workload_format, num_queues_per_dim, injection_scale, rendezvous, options, warn,
                 callbacks):
        self.workload_prefix = str(workload)
        self.system_config_path = str(system)
        self.network_config_path = str(network)
        self.memory_config_path = None if memory is None else str(memory)
        self.comm_group_path = None if comm_groups is None else str(comm_groups)
        if not isinstance(num_queues_per_dim, int) or num_queues_per_dim < 1:
            raise ConfigError(f"--num-queues-per-dim must be a positive integer, got {num_queues_per_dim!r}")
        if injection_scale < 0:
            raise ConfigError(f"--injection-scale must be >= 0, got {injection_scale!r}")
        self.rendezvous = bool(rendezvous)
        self.injection_scale = injection_scale
        self.pm = pm
        self.registry = registry = build_registry(pm, BACKEND_ROLES)
        self.engine = EventEngine()
        self.system_config = parse_system_config(self.system_config_path, injection_scale)
        for message in ignored_key_messages(self.system_config):
            warn(message)
        self.comm_groups = parse_comm_groups(self.comm_group_path)
        self.options = dict(options or {})
        self.host_issue = host_issue(self.options)
        self.context = context = RunContext(
            engine=self.engine, system_config=self.system_config, network_config_path=self.network_config_path,
            memory_config_path=self.memory_config_path, options=self.options, warn=warn,
            comm_groups=dict(self.comm_groups or {}), **callbacks)
        self.network_backend_name = network_backend
        self.network = registry.get("network_backend", network_backend).factory(context)
        self.npus_per_dim = list(self.network.npus_per_dim)
        self.total_npus = context.total_npus = math.prod(self.npus_per_dim)
        context.npus_per_dim = list(self.npus_per_dim)
        self._check_group_members()
        context.memory_config = parse_memory_config(self.memory_config_path)
        if memory_backend is None:
            memory_backend = "analytical" if "analytical" in registry.names("memory_backend") else "none"
        self.memory_backend_name = memory_backend
        self.memory = registry.get("memory_backend", memory_backend).factory(context)
        if compute_model is None:
            compute_model = "roofline" if self.system_config.roofline_enabled else "replay"
        self.compute_model_name = compute_model
        self.compute_model = registry.get("compute_model", compute_model).factory(context)
        self.queues_per_dim = [num_queues_per_dim] * len(self.npus_per_dim)
        self.workload_format_name = workload_format or self._detect_format()
        self.workload_format = registry.get("workload_format", self.workload_format_name).factory
        prepare = getattr(self.workload_format, "prepare", None)
        if prepare is not None:
            prepare(context)
        # A compact workload (api.CompactWorkload: each distinct trace once and a rank map) may name its groups file.
        compact_of = getattr(self.workload_format, "compact", None)
        self.compact = compact_of(self.workload_prefix) if compact_of is not None else None
        if self.compact is not None and self.comm_group_path is None and self.compact.comm_groups:
            self.comm_group_path = self.compact.comm_groups
            self.comm_groups = parse_comm_groups(self.comm_group_path)
            self._check_group_members()
            context.comm_groups.clear()
            context.comm_groups.update(self.comm_groups or {})

    def _check_group_members(self):
        total = self.total_npus
        for group_id, npus in (self.comm_groups or {}).items():
            bad = [n for n in npus if not 0 <= n < total]
            if bad:
                raise ConfigError(f"{self.comm_group_path}: group {group_id} names NPUs {bad} but the network "
                                  f"has {total} NPUs")

    def _detect_format(self):
        found = [name for name in self.registry.names("workload_format")
                 if self.registry.get("workload_format", name).factory.matches(self.workload_prefix)]
        if len(found) > 1:  # e.g. per-rank files and a compact manifest left by two generations into one prefix
            raise WorkloadError(f"workload {self.workload_prefix!r} reads as {' and as '.join(found)}: pass "
                                f"--workload-format {found[0]}|{found[1]}, or remove the files of the one not meant")
        if found:
            return found[0]
        raise WorkloadError(f"workload {self.workload_prefix!r}: no trace found (for Chakra, expected files "
                            f"{self.workload_prefix}.0.et ... {self.workload_prefix}.<N-1>.et; a compact "
                            f"{self.workload_prefix}.workload.json needs the workload_compact plugin)")


def host_issue(options):
    """``(launch_ns, sync_ns)`` of the host model (options host_launch_us, host_sync_us), or None (off)."""
    launch = options.get("host_launch_us")
    sync = options.get("host_sync_us")
    if not launch and not sync:
        return None
    values = []
    for key, value in (("host_launch_us", launch), ("host_sync_us", sync)):
        value = 0 if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e6:
            raise ConfigError(f"option {key} must be a number of microseconds in [0, 1e6), got {value!r}")
        values.append(int(round(value * 1000)))
    return tuple(values)


class Unfolded:
    """The fold planner of a run that simulates every rank (no ``astra_fold_planner`` plugin answered)."""

    symmetry = canonical_groups = None

    def __init__(self, total_npus, requested, refused=None):
        self.total_npus = total_npus
        self.active = False
        reason = refused or ("folding disabled (--no-fold)" if not requested else
                             "no fold planner is loaded (the astra-folding plugin)")
        self.info = {"requested": bool(requested), "simulated_ranks": total_npus, "reason": reason}

    def plan(self, traces):
        return range(self.total_npus)

    def plan_compact(self, compact, class_nodes):
        return range(self.total_npus)


@dataclass(slots=True)
class BuiltRanks:
    """What :func:`build_ranks` made (a folded run's non-representatives: None)."""

    systems: list
    workloads: list
    shared: SharedContext
    matcher: object
    traces_parsed: int


def build_ranks(setup, workload_format, catalogue, folding, *, warn, record_node, rank_finished):
    """Read and check every rank's trace, let ``folding`` (the fold planner, or :class:`Unfolded`) choose the ranks to
    simulate, and give each its system layer and workload. Ranks whose traces the format fingerprints as identical
    (``rank_digest``) share the first one's nodes and graph (only the unfinished-parent counts are per rank)."""
    if setup.compact is not None:
        simulated, rank_traces, parsed = _read_compact(setup, workload_format, folding, warn)
    else:
        simulated, rank_traces, parsed = _read_per_rank(setup, workload_format, folding, warn)
    matcher = SendRecvMatcher(setup.engine, setup.network)
    if folding.symmetry is not None:
        folding.fold_engine(setup.engine)
        matcher = folding.make_matcher(setup.engine, setup.network)
    shared = SharedContext(
        engine=setup.engine, system_config=setup.system_config, npus_per_dim=setup.npus_per_dim,
        queues_per_dim=setup.queues_per_dim, rendezvous=setup.rendezvous, matcher=matcher, network=setup.network,
        compute_model=setup.compute_model, memory=setup.memory, options=setup.options,
        comm_groups=setup.comm_groups, group_stream_ids=folding.canonical_groups, host_issue=setup.host_issue,
        symmetry=folding.symmetry, catalogue=catalogue, warn=warn, record_node=record_node,
        rank_finished=rank_finished)
    total = setup.total_npus
    systems = [None] * total
    workloads = [None] * total
    for rank in simulated:
        path, graph = rank_traces(rank)
        sys = Sys(shared, rank)
        systems[rank] = sys
        workloads[rank] = RankWorkload(shared, rank, path, graph, sys)
    if setup.compact is None:
        _check_rank_count(setup, workload_format, warn)
    return BuiltRanks(systems, workloads, shared, matcher, parsed)


def _read_per_rank(setup, workload_format, folding, warn):
    prefix = setup.workload_prefix
    load = workload_format.load_rank
    digest_of = getattr(workload_format, "rank_digest", None)
    parsed_count = 0
    parsed = {}  # digest -> [path, nodes, signature, key] of the first rank with that trace
    traces = []  # per rank: [path, nodes, signature or the entry it shares, shared graph key]
    for rank in range(setup.total_npus):
        known = digest_of(prefix, rank) if digest_of is not None else None
        entry = parsed.get(known[1]) if known is not None else None
        if entry is None:
            path, nodes = load(prefix, rank)
            parsed_count += 1
            entry = [path, nodes, None, rank]
            if known is not None:
                parsed[known[1]] = entry
            traces.append(entry)
        else:
            traces.append([known[0], entry[1], entry, entry[3]])
    simulated = folding.plan(traces)
    graphs = {}  # shared graph key (first rank with the trace) -> graph

    def rank_trace(rank):
        path, nodes, _sig, key = traces[rank]
        graph = graphs.get(key)
        if graph is None:
            graph = graphs[key] = build_graph(path, nodes, warn=warn)
        else:
            by_id, children, parents_left, roots = graph
            graph = (by_id, children, dict(parents_left), roots)
        return path, graph

    return simulated, rank_trace, parsed_count


def _read_compact(setup, workload_format, folding, warn):
    """A compact workload: each class trace parsed once; a simulated rank runs its class's trace relabelled for it."""
    compact = setup.compact
    if compact.npus != setup.total_npus:
        raise WorkloadError(f"{compact.path}: the workload has {compact.npus} NPUs but the network has "
                            f"{setup.total_npus}")
    class_nodes = {rep: workload_format.load_trace(path) for rep, path in compact.traces.items()}
    declared = compact.symmetry
    simulated = folding.plan_compact(compact, class_nodes)
    relabeller = compact.relabeller(setup.comm_groups)
    graphs = {}

    def rank_trace(rank):
        rep = declared.representative(rank)
        nodes = relabeller.nodes_for(class_nodes[rep], declared.offsets(rank))
        path = compact.traces[rep]
        graph = graphs.get(rep)
        if graph is None:
            graph = graphs[rep] = build_graph(path, class_nodes[rep], warn=warn)
        by_id, children, parents_left, roots = graph
        if nodes is not class_nodes[rep]:
            by_id = {node.id: node for node in nodes}
            path = f"{path} (as rank {rank})"
        return path, (by_id, children, dict(parents_left), roots)

    return simulated, rank_trace, len(class_nodes)


def _check_rank_count(setup, workload_format, warn):
    """Warn about traces beyond the network's NPUs, which the reference (and this run) ignore."""
    beyond = getattr(workload_format, "ranks_beyond", None)
    total, prefix = setup.total_npus, setup.workload_prefix
    extra = beyond(prefix, total) if beyond is not None else 0
    if extra:
        warn(f"workload {prefix} has traces for {total + extra} ranks ({prefix}.0.et .. "
             f"{prefix}.{total + extra - 1}.et) but the network {setup.network_config_path} has {total} NPUs: ranks "
             f"{total}..{total + extra - 1} are not simulated (as in the reference); give the network "
             f"{total + extra} NPUs to run them all")
