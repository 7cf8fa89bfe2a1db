"""Builds a run from its inputs, runs it, and reports (the Python API behind ``astra run``)."""

from __future__ import annotations

import gc
import os
import time
import tracemalloc

from astra_sim import __version__
from astra_sim.api import RunContext
from astra_sim.chakra import ChakraError
from astra_sim.chakra.types import node_type_name
from astra_sim.config import (
    COLLECTIVE_KEYS, ignored_key_messages, parse_comm_groups, parse_memory_config, parse_system_config,
)
from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError, DeadlockError, WorkloadError
from astra_sim.plugins import build_registry, make_plugin_manager
from astra_sim.report import RankReport, Report
from astra_sim.safeio import brief
from astra_sim.folded_engine import FoldedEventEngine, FoldTieBroken
from astra_sim.symmetry import FoldRefused, TraceSignature, check_declared_symmetry, find_symmetry, trace_signature
from astra_sim.system.frontend import FoldedSendRecvMatcher, SendRecvMatcher
from astra_sim.system.sys import Sys
from astra_sim.unmatched import describe_unmatched, lines as unmatched_lines, unmatched_error, unmatched_warning
from astra_sim.workload.compact import Relabeller
from astra_sim.workload.graph import build_graph
from astra_sim.workload.workload import _COLLECTIVES, RankWorkload

#: Chakra comm_type value -> the system layer's collective name (for the system config's lists)
_COLLECTIVE_NAMES = dict(_COLLECTIVES)


class Simulation:
    """One simulation run. Also the context every rank's system layer shares."""

    def __init__(
        self,
        workload,
        system,
        network,
        memory=None,
        comm_groups=None,
        *,
        network_backend="analytical",
        memory_backend=None,
        compute_model=None,
        workload_format=None,
        num_queues_per_dim=1,
        injection_scale=1.0,
        rendezvous=False,
        plugins=None,
        block=(),
        extra_plugins=(),
        options=None,
        plugin_manager=None,
        fold=True,
        astra_sim_log=False,
        on_warning=None,
        allow_unmatched=False,
        breakdown=True,
        critical_path=False,
        timeline=None,
        timeline_format="chrome",
        timeline_ranks=None,
    ):
        # Kept to run again unfolded when a folded run finds a tie it cannot order exactly.
        self._arguments = dict(
            workload=workload, system=system, network=network, memory=memory, comm_groups=comm_groups,
            network_backend=network_backend, memory_backend=memory_backend, compute_model=compute_model,
            workload_format=workload_format, num_queues_per_dim=num_queues_per_dim,
            injection_scale=injection_scale, rendezvous=rendezvous, plugins=plugins, block=block,
            extra_plugins=extra_plugins, options=options, plugin_manager=plugin_manager,
            allow_unmatched=allow_unmatched,
            breakdown=breakdown, critical_path=critical_path, timeline=timeline, timeline_format=timeline_format,
            timeline_ranks=timeline_ranks)
        #: a run that ends with sends never received (or receives never sent) is an error unless allowed
        self.allow_unmatched = bool(allow_unmatched)
        self._active = self  # the run in progress (a fresh unfolded one after a folded run gave up)
        self.unmatched_messages = []
        self.warnings = []
        self._on_warning = on_warning  # called once per distinct warning as it is raised (the CLI prints it)
        self.reference_log = None  # a ReferenceLog when the reference's stdout is wanted (--astra-sim-log)
        self._node_observers = []
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
        self.pm = plugin_manager or make_plugin_manager(plugins, block, extra_plugins)
        self.registry = build_registry(self.pm)
        self.engine = EventEngine()
        self.system_config = parse_system_config(self.system_config_path, injection_scale)
        for message in ignored_key_messages(self.system_config):
            self.warn(message)
        self.comm_groups = parse_comm_groups(self.comm_group_path)
        self.options = dict(options or {})
        self.host_issue = _host_issue(self.options)
        context = RunContext(
            engine=self.engine,
            system_config=self.system_config,
            network_config_path=self.network_config_path,
            memory_config_path=self.memory_config_path,
            options=self.options,
            warn=self.warn,
            schedule_for_rank=self._schedule_for_rank,
            comm_in_flight=self._comm_in_flight,
            comm_nodes_in_flight=self._comm_nodes_in_flight,
            comm_groups=dict(self.comm_groups or {}),
            rank_nodes=self._rank_nodes,
            add_node_observer=self._node_observers.append,
        )
        self.network_backend_name = network_backend
        self.network = self.registry.get("network_backend", network_backend).factory(context)
        self.npus_per_dim = list(self.network.npus_per_dim)
        total = 1
        for count in self.npus_per_dim:
            total *= count
        self.total_npus = total
        context.total_npus = total
        context.npus_per_dim = list(self.npus_per_dim)
        self._check_group_members()
        context.memory_config = parse_memory_config(self.memory_config_path)
        if memory_backend is None:
            memory_backend = "analytical" if "analytical" in self.registry.names("memory_backend") else "none"
        self.memory_backend_name = memory_backend
        self.memory = self.registry.get("memory_backend", memory_backend).factory(context)
        if compute_model is None:
            compute_model = "roofline" if self.system_config.roofline_enabled else "replay"
        self.compute_model_name = compute_model
        self.compute_model = self.registry.get("compute_model", compute_model).factory(context)
        self.queues_per_dim = [num_queues_per_dim] * len(self.npus_per_dim)
        self.matcher = SendRecvMatcher(self.engine, self.network)
        self._impls = {}
        self._custom_loaded = {}
        self._per_node = None
        self.context = context
        self.workload_format_name = workload_format or self._detect_format()
        self.workload_format = self.registry.get("workload_format", self.workload_format_name).factory
        prepare = getattr(self.workload_format, "prepare", None)
        if prepare is not None:
            prepare(context)
        # A compact workload (each distinct trace once and a rank map, astra_sim.workload.compact) may name
        # its communicator groups file.
        compact_of = getattr(self.workload_format, "compact", None)
        self.compact = compact_of(self.workload_prefix) if compact_of is not None else None
        if self.compact is not None and self.comm_group_path is None and self.compact.comm_groups:
            self.comm_group_path = self.compact.comm_groups
            self.comm_groups = parse_comm_groups(self.comm_group_path)
            self._check_group_members()
            context.comm_groups.clear()
            context.comm_groups.update(self.comm_groups or {})
        self.systems = []
        self.workloads = []
        self.traces_parsed = 0  # distinct traces read by build() (identical ones are shared)
        self.finish_order = []
        self.node_counts = {}
        if astra_sim_log or self.options.get("astra_sim_log"):
            from astra_sim.reference_log import ReferenceLog

            self.reference_log = ReferenceLog(self)
        #: fold symmetric ranks (simulate one per class); ``fold_info`` says what happened and why.
        #: --astra-sim-log needs every rank's own nodes (their statistics and issue order): no folding.
        self.fold_requested = bool(fold) and self.reference_log is None
        self.symmetry = None
        self.fold_info = {"requested": bool(fold), "simulated_ranks": None}
        self.group_stream_ids = None
        # What the run records for the report (astra_sim.analysis): spans of every executed node, kept
        # only when something derives from them (the breakdown, the critical path, a timeline).
        from astra_sim.analysis.output import TimelineRequest

        self.timeline = TimelineRequest.make(timeline, timeline_format, timeline_ranks, self.total_npus)
        self.want_breakdown = bool(breakdown)
        self.want_critical_path = bool(critical_path)
        self.recorder = None
        self.analysis = None

    def _check_group_members(self):
        total = self.total_npus
        for group_id, npus in (self.comm_groups or {}).items():
            bad = [n for n in npus if not 0 <= n < total]
            if bad:
                raise ConfigError(
                    f"{self.comm_group_path}: group {group_id} names NPUs {bad} but the network has {total} NPUs"
                )

    # ------------------------------------------------------------ shared context
    def warn(self, message):
        if message not in self.warnings:
            self.warnings.append(message)
            if self._on_warning is not None:
                self._on_warning(message)

    def _detect_format(self):
        for name in self.registry.names("workload_format"):
            if self.registry.get("workload_format", name).factory.matches(self.workload_prefix):
                return name
        raise WorkloadError(
            f"workload {self.workload_prefix!r}: no trace found (for Chakra, expected files "
            f"{self.workload_prefix}.0.et ... {self.workload_prefix}.<N-1>.et)"
        )

    def algorithm_spec(self, name):
        """The registered algorithm for an implementation name, and its window (-1 = none)."""
        entries = self.registry.entries["collective_algorithm"]
        if name in entries and entries[name].factory.topology == "custom":
            raise ConfigError(f"{self.system_config_path}: {name!r} is a custom collective format; "
                              "name its file in '*-implementation-custom' instead")
        if name in entries:
            return entries[name].factory, -1
        for base, reg in entries.items():
            suffix = name[len(base):]
            if reg.factory.takes_window and name.startswith(base) and suffix.isdigit():
                return reg.factory, int(suffix)
        known = ", ".join(sorted(entries))
        raise ConfigError(f"{self.system_config_path}: unknown collective algorithm {name!r}; known: {known}")

    def custom_impl(self, com_type, node_id):
        """The custom collective for this node (per-node map first, then per collective type),
        or None for the native algorithms."""
        path = self._per_node_custom().get(node_id)
        if path is None:
            path = self.system_config.custom_implementations.get(com_type)
            if path is None:
                return None
            path = self._custom_path(path, f"'{COLLECTIVE_KEYS[com_type]}-custom'")
        loaded = self._custom_loaded.get(path)
        if loaded is None:
            loaded = self._custom_loaded[path] = self._custom_format(path).load(path, self.context)
        return loaded

    def _custom_path(self, path, key):
        """Relative paths are relative to the system config (then, like the reference, the
        working directory)."""
        if os.path.isabs(path):
            return path
        beside = os.path.join(self.system_config.base_dir, path)
        if self._exists_as_file_or_prefix(beside) or not self._exists_as_file_or_prefix(path):
            return beside
        return os.path.abspath(path)

    @staticmethod
    def _exists_as_file_or_prefix(path):
        return os.path.exists(path) or os.path.exists(f"{path}.0.et")

    def _custom_format(self, path):
        for reg in self.registry.entries["collective_algorithm"].values():
            spec = reg.factory
            if spec.topology == "custom" and spec.factory.matches(path):
                return spec.factory
        known = [n for n, r in self.registry.entries["collective_algorithm"].items() if r.factory.topology == "custom"]
        raise ConfigError(
            f"{self.system_config.path}: no installed plugin reads the custom collective {path!r} "
            f"(custom formats installed: {', '.join(known) or 'none; install plugins/collectives_msccl'})"
        )

    def _per_node_custom(self):
        if self._per_node is None:
            self._per_node = {}
            yaml_path = self.system_config.per_node_custom_implementation
            if yaml_path:
                from astra_sim.safeio import load_yaml

                yaml_path = self._custom_path(yaml_path, "'per-node-custom-implementation'")
                try:
                    data = load_yaml(yaml_path, "per-node custom implementation")
                except ConfigError as exc:
                    raise ConfigError(f"{self.system_config.path}: per-node-custom-implementation: {exc}") from None
                if not isinstance(data, dict):
                    raise ConfigError(f"{yaml_path}: must map workload node ids to custom collective paths")
                base = os.path.dirname(yaml_path)
                for node_id, path in data.items():
                    if not isinstance(node_id, int) or not isinstance(path, str):
                        raise ConfigError(f"{yaml_path}: entries must be <node id>: <path>, got {brief(node_id)}: "
                                          f"{brief(path)}")
                    self._per_node[node_id] = path if os.path.isabs(path) else os.path.join(base, path)
        return self._per_node

    def native_impls(self, com_type):
        impls = self._impls.get(com_type)
        if impls is not None:
            return impls
        cfg = self.system_config
        key = COLLECTIVE_KEYS[com_type]
        names = cfg.implementations.get(com_type)
        if not names:
            raise ConfigError(f"{cfg.path}: the workload has a {com_type.replace('_', '-')} but {key!r} is not set")
        if len(names) > len(self.npus_per_dim):
            raise ConfigError(
                f"{cfg.path}: {key!r} lists {len(names)} algorithms but the network has "
                f"{len(self.npus_per_dim)} dimension(s); give at most one per dimension"
            )
        impls = []
        for name in names:
            spec, window = self.algorithm_spec(name)
            impls.append((spec, window))
        self._impls[com_type] = impls
        return impls

    def check_dimensions_covered(self, com_type, kinds):
        """Warn when a collective over all NPUs covers only the first dimensions: an implementation
        list shorter than the network's dimensions (and no one* algorithm spanning every NPU) runs
        it there only, as in the reference, which silently gives a much shorter time."""
        dims = self.npus_per_dim
        if len(kinds) >= len(dims) or "one" in kinds:
            return
        covered = 1
        for count in dims[:len(kinds)]:
            covered *= count
        key = COLLECTIVE_KEYS[com_type]
        names = self.system_config.implementations.get(com_type, [])
        which = "dimension 0" if len(kinds) == 1 else f"dimensions 0-{len(kinds) - 1}"
        example = names + [names[-1]] * (len(dims) - len(names))
        self.warn(
            f"{self.system_config_path}: {key!r} lists {len(kinds)} algorithm(s) for a {len(dims)}-dimensional "
            f"network ({' x '.join(map(str, dims))} NPUs), so every {com_type.replace('_', '-')} over all NPUs "
            f"runs in {which} only, among {covered} of the {self.total_npus} NPUs (as in the reference); "
            f"list one per dimension, e.g. {example}, or a one* algorithm to span every NPU"
        )

    def _rank_nodes(self, rank):
        return self.workloads[rank].nodes

    def _comm_in_flight(self, rank):
        return self.workloads[rank].comm_in_flight()

    def _comm_nodes_in_flight(self, rank):
        return self.workloads[rank].comm_nodes_in_flight()

    def _schedule_for_rank(self, rank, delay_ns, fn, arg):
        self.systems[rank].register_event(fn, arg, delay_ns)

    def record_node(self, rank, node, start_ns, end_ns):
        """Every finished node passes here: counted, and shown to the node observers."""
        self.node_counts[node.type] = self.node_counts.get(node.type, 0) + 1
        for observer in self._node_observers:
            observer(rank, node, start_ns, end_ns)

    def rank_finished(self, workload):
        self.finish_order.append(workload.rank)

    # ------------------------------------------------------------ run
    def build(self):
        """Read every rank's trace and check its graph; decide whether the run folds.

        Ranks whose traces the format fingerprints as identical (``rank_digest``) share the nodes and
        graph of the first one (only the count of unfinished parents is per rank): parsed once, held
        once. When the run folds (:mod:`astra_sim.symmetry`), only class representatives get a
        workload and a system layer; the other entries of ``systems`` and ``workloads`` are None."""
        if self.compact is not None:
            return self._build_compact(self.compact)
        prefix = self.workload_prefix
        load = self.workload_format.load_rank
        digest_of = getattr(self.workload_format, "rank_digest", None)
        parsed = {}  # digest -> (path, nodes, signature) of the first rank with that trace
        traces = []  # per rank: (path, nodes, signature, shared graph key)
        for rank in range(self.total_npus):
            known = digest_of(prefix, rank) if digest_of is not None else None
            entry = parsed.get(known[1]) if known is not None else None
            if entry is None:
                path, nodes = load(prefix, rank)
                self.traces_parsed += 1
                entry = [path, nodes, None, rank]
                if known is not None:
                    parsed[known[1]] = entry
                traces.append(entry)
            else:
                traces.append([known[0], entry[1], entry, entry[3]])
        simulated = self._plan_fold(lambda: self._fold_plan(traces))
        graphs = {}  # shared graph key (first rank with the trace) -> graph
        self.systems = [None] * self.total_npus
        self.workloads = [None] * self.total_npus
        for rank in simulated:
            path, nodes, _sig, key = traces[rank]
            graph = graphs.get(key)
            if graph is None:
                graph = graphs[key] = build_graph(path, nodes, warn=self.warn)
            else:
                by_id, children, parents_left, roots = graph
                graph = (by_id, children, dict(parents_left), roots)
            sys = Sys(self, rank)
            self.systems[rank] = sys
            self.workloads[rank] = RankWorkload(self, rank, path, graph, sys)
        self._check_rank_count()
        if self.reference_log is not None:  # never folded: every rank has its workload
            self.reference_log.watch(self.workloads)

    def _check_rank_count(self):
        """Warn when the workload has traces for more ranks than the network has NPUs: the reference
        (and this run) simulate ranks 0 .. NPUs-1 and ignore the others."""
        beyond = getattr(self.workload_format, "ranks_beyond", None)
        extra = beyond(self.workload_prefix, self.total_npus) if beyond is not None else 0
        if extra:
            total, prefix = self.total_npus, self.workload_prefix
            self.warn(
                f"workload {prefix} has traces for {total + extra} ranks ({prefix}.0.et .. {prefix}.{total + extra - 1}.et) "
                f"but the network {self.network_config_path} has {total} NPUs: ranks {total}..{total + extra - 1} "
                f"are not simulated (as in the reference); give the network {total + extra} NPUs to run them all"
            )

    def _build_compact(self, compact):
        """A compact workload: parse each class trace once; every simulated rank runs its class's trace
        relabelled for it (the representatives run it as it is)."""
        if compact.npus != self.total_npus:
            raise WorkloadError(f"{compact.path}: the workload has {compact.npus} NPUs but the network has "
                                f"{self.total_npus}")
        load = self.workload_format.load_trace
        class_nodes = {}
        for rep, path in compact.traces.items():
            class_nodes[rep] = load(path)
            self.traces_parsed += 1
        declared = compact.symmetry
        simulated = self._plan_fold(lambda: self._compact_fold_plan(compact, class_nodes))
        relabeller = Relabeller(declared, self.comm_groups, compact.path)
        graphs = {}
        self.systems = [None] * self.total_npus
        self.workloads = [None] * self.total_npus
        for rank in simulated:
            rep = declared.representative(rank)
            offsets = declared.offsets(rank)
            nodes = relabeller.nodes_for(class_nodes[rep], offsets)
            path = compact.traces[rep]
            graph = graphs.get(rep)
            if graph is None:
                graph = graphs[rep] = build_graph(path, class_nodes[rep], warn=self.warn)
            by_id, children, parents_left, roots = graph
            if nodes is not class_nodes[rep]:
                by_id = {node.id: node for node in nodes}
                path = f"{path} (as rank {rank})"
            sys = Sys(self, rank)
            self.systems[rank] = sys
            self.workloads[rank] = RankWorkload(self, rank, path, (by_id, children, dict(parents_left), roots), sys)
        if self.reference_log is not None:  # never folded: every rank has its workload
            self.reference_log.watch(self.workloads)

    def _compact_fold_plan(self, compact, class_nodes):
        kinds = self._fold_preconditions()
        parts = {}
        signatures = [trace_signature(nodes, parts) for nodes in class_nodes.values()]
        self._check_memory_folds(signatures)
        native_impls, group_impl = self._algorithm_lookups()
        return check_declared_symmetry(compact.symmetry, self.npus_per_dim, kinds, signatures,
                                       self.comm_groups or {}, native_impls, group_impl, class_nodes)

    def _plan_fold(self, make_plan):
        """Decide the symmetry the run folds by; returns the ranks to simulate (all when it does not)."""
        everyone = range(self.total_npus)
        if not self.fold_requested:
            reason = ("folding disabled (--no-fold)" if self.reference_log is None else
                      "not folded: --astra-sim-log prints every rank's own statistics")
            self.fold_info.update(simulated_ranks=self.total_npus, reason=reason)
            return everyone
        try:
            plan = make_plan()
        except FoldRefused as exc:
            self.fold_info.update(simulated_ranks=self.total_npus, reason=str(exc))
            return everyone
        symmetry = plan.symmetry
        if symmetry.order == 1:
            reason = "; ".join(plan.notes) or "no symmetry found"
            self.fold_info.update(simulated_ranks=self.total_npus, reason=reason)
            return everyone
        self.symmetry = symmetry
        self.group_stream_ids = plan.canonical_groups or None
        FoldedEventEngine.fold(self.engine, symmetry)
        self.matcher = FoldedSendRecvMatcher(self.engine, self.network, symmetry)
        reps = symmetry.representatives(self.total_npus)
        self.fold_info.update(simulated_ranks=len(reps), ranks_per_class=symmetry.order,
                              generators=symmetry.describe(), notes=plan.notes)
        return reps

    def _fold_plan(self, traces):
        kinds = self._fold_preconditions()
        signatures = []
        parts = {}  # node -> its part of a signature (ranks share node objects: parse_et(shared=...))
        for entry in traces:
            first = entry if entry[2] is None or isinstance(entry[2], TraceSignature) else entry[2]
            if not isinstance(first[2], TraceSignature):
                first[2] = trace_signature(first[1], parts)
            signatures.append(first[2])
        self._check_memory_folds(signatures)
        native_impls, group_impl = self._algorithm_lookups()
        return find_symmetry(self.npus_per_dim, kinds, signatures, self.comm_groups or {}, native_impls, group_impl)

    def _fold_preconditions(self):
        """The network's per-dimension symmetry kinds; FoldRefused when the backends cannot fold at all."""
        network_kinds = getattr(self.network, "symmetry_dims", None)
        if network_kinds is None:
            raise FoldRefused(f"network backend {self.network_backend_name!r} keeps state shared between "
                              "messages (links, flows): ranks cannot be simulated apart")
        kinds = list(network_kinds())
        if len(kinds) != len(self.npus_per_dim):
            raise FoldRefused(f"network backend {self.network_backend_name!r} describes {len(kinds)} dimensions, "
                              f"the run has {len(self.npus_per_dim)}")
        if not getattr(self.compute_model, "foldable", False):
            raise FoldRefused(f"compute model {self.compute_model_name!r} does not declare rank-independent "
                              "timing (foldable)")
        cfg = self.system_config
        if cfg.custom_implementations or cfg.per_node_custom_implementation:
            raise FoldRefused("custom collective implementations are not folded")
        return kinds

    def _check_memory_folds(self, signatures):
        if any(sig.uses_memory for sig in signatures) and not getattr(self.memory, "foldable", False):
            raise FoldRefused(f"remote memory ({self.memory_backend_name}, "
                              f"{getattr(self.memory, 'memory_type', 'shared')}) is shared between NPUs")

    def _algorithm_lookups(self):
        """``native_impls(comm_type)`` and ``group_impl(comm_type)`` for Chakra comm_type values."""
        cfg = self.system_config

        def native_impls(comm_type):
            name = _COLLECTIVE_NAMES.get(comm_type)
            return self.native_impls(name) if name is not None and name in cfg.implementations else []

        def group_impl(comm_type):
            name = _COLLECTIVE_NAMES.get(comm_type)
            if name is None or name not in cfg.implementations:
                return None
            impls = self.native_impls(name)
            if len(impls) > 1 and not getattr(impls[0][0], "whole_group", False):
                return self.algorithm_spec("ring")[0]
            return impls[0][0]

        return native_impls, group_impl

    def run(self, measure_memory=False):
        try:
            return self._run(measure_memory)
        except (FoldTieBroken, _FoldedRunIncomplete) as exc:
            # Not exact folded: simulate every rank (a fresh run; this one's state is half-way).
            printed, say = set(self.warnings), self._on_warning

            def on_warning(message):  # the terminal has this run's warnings already
                if say is not None and message not in printed:
                    say(message)

            unfolded = Simulation(**self._arguments, fold=False, on_warning=on_warning)
            self._active = unfolded  # what an interrupt's partial report describes
            report = unfolded.run(measure_memory)
            report.settings["fold"] = {"requested": True, "simulated_ranks": unfolded.total_npus,
                                       "reason": f"folding abandoned: {exc}"}
            return report

    def _run(self, measure_memory=False):
        started = time.perf_counter()
        if measure_memory:
            tracemalloc.start()
        try:
            if not self.workloads:
                self.build()
            built = time.perf_counter()
            if self.want_breakdown or self.want_critical_path or self.timeline is not None:
                from astra_sim.analysis.spans import SpanRecorder

                self.recorder = SpanRecorder([w.rank for w in self.workloads if w is not None])
                self._node_observers.append(self.recorder.observer())
            if self.timeline is not None:
                self.timeline.prepare(self)
            self.pm.hook.astra_run_start(run=self)
            # The event loop allocates millions of short-lived, acyclic objects;
            # the cyclic collector would walk the whole (large) live heap over
            # and over. Reference counting frees them; collect once at the end.
            gc_was_enabled = gc.isenabled()
            gc.disable()
            try:
                folded = self.symmetry is not None
                for workload in self.workloads:
                    if workload is not None:
                        if folded:
                            self.engine.start_rank(workload.rank)
                        workload.start()
                self.engine.run()
            finally:
                if gc_was_enabled:
                    gc.enable()
        except ChakraError as exc:
            raise WorkloadError(str(exc)) from None
        finally:
            peak = tracemalloc.get_traced_memory()[1] if measure_memory else None
            if measure_memory:
                tracemalloc.stop()
        finished = time.perf_counter()
        self._check_all_finished()
        self._check_all_matched()
        report = self._report(built - started, finished - built, peak)
        self.pm.hook.astra_run_finish(run=self, report=report)
        if self.timeline is not None:
            written = time.perf_counter()
            report.timeline = self.timeline.write(self.analysis, report)
            report.stats["timeline_s"] = round(time.perf_counter() - written, 6)
            if self.timeline.link_load is not None and self.timeline.link_load.bins:
                from astra_sim.analysis.links import utilisation_summary

                report.network_stats["link_utilisation"] = utilisation_summary(self.timeline.link_load,
                                                                               report.max_finish_ns)
        return report

    def _check_all_finished(self):
        stuck = [w for w in self.workloads if w is not None and w.finish_ns is None]
        if not stuck:
            return
        if self.symmetry is not None:
            raise _FoldedRunIncomplete("the run deadlocked; simulated unfolded to name every stuck rank exactly")
        lines = [
            f"deadlock: no event is left at {self.engine.now} ns but {len(stuck)} of "
            f"{sum(w is not None for w in self.workloads)} simulated ranks have not finished:"
        ]
        for workload in stuck[:8]:
            lines.append(f"  rank {workload.rank} ({workload.path}): {workload.stuck_description()}")
        if len(stuck) > 8:
            lines.append(f"  ... and {len(stuck) - 8} more ranks")
        unmatched = describe_unmatched(self.matcher.unmatched(), self.workloads)
        if unmatched:
            lines.append(f"  {len(unmatched)} unmatched message(s), e.g.:")
            lines.extend("  " + text for text in unmatched_lines(unmatched, 5))
        raise DeadlockError("\n".join(lines))

    def _check_all_matched(self):
        """Every rank finished: any message still waiting is a send never received (or the reverse).
        A folded run's messages are mirrored (keyed at representatives), so it runs again unfolded to
        name the real ranks exactly; the error, or the warning with ``allow_unmatched``, lists them."""
        waiting = self.matcher.unmatched()
        if not waiting:
            return
        if self.symmetry is not None:
            raise _FoldedRunIncomplete("the run ended with unmatched messages; simulated unfolded to name "
                                       "them exactly")
        self.unmatched_messages = describe_unmatched(waiting, self.workloads)
        if not self.allow_unmatched:
            raise unmatched_error(self.unmatched_messages)
        self.warn(unmatched_warning(self.unmatched_messages))

    def _settings(self):
        """The report's ``settings``: the inputs and choices that produced it."""
        return {
            "astra_sim_version": __version__,
            "workload": self.workload_prefix,
            "workload_format": self.workload_format_name,
            "system_configuration": self.system_config_path,
            "network_configuration": self.network_config_path,
            "remote_memory_configuration": self.memory_config_path,
            "comm_group_configuration": self.comm_group_path,
            "network_backend": self.network_backend_name,
            "memory_backend": self.memory_backend_name,
            "compute_model": self.compute_model_name,
            "num_queues_per_dim": self.queues_per_dim[0],
            "injection_scale": self.injection_scale,
            "rendezvous_protocol": self.rendezvous,
            "npus_per_dim": self.npus_per_dim,
            "network": getattr(self.network, "describe", lambda: {})(),
            "plugins": sorted(name for name, _ in self.pm.list_name_plugin()),
            "fold": dict(self.fold_info),
            "allow_unmatched": self.allow_unmatched,
            **({"host": {"launch_ns": self.host_issue[0], "sync_after_p2p_ns": self.host_issue[1]}}
               if self.host_issue is not None else {}),
        }

    def partial_report(self, reason):
        """What an interrupted run knew (``astra run --partial-report``): the ranks so far (``finish_ns``
        None for those still running), marked ``complete: False``. The run is not resumable."""
        sim = self._active
        ranks = []
        for rank, w in enumerate(sim.workloads):
            if w is None and sim.symmetry is not None:
                w = sim.workloads[sim.symmetry.representative(rank)]
            if w is None:
                continue
            finish = w.finish_ns
            ranks.append(RankReport(rank=rank, finish_ns=finish, compute_ns=w.compute_ns,
                                    exposed_comm_ns=None if finish is None else finish - w.compute_ns,
                                    cpu_ns=w.cpu_ns, comm_ns=w.comm_ns, nodes=len(w.nodes)))
        stats = {"interrupted": reason, "simulated_ns": sim.engine.now,
                 "ranks_finished": sum(r.finish_ns is not None for r in ranks),
                 "stage": "simulating" if sim.workloads else "reading the workload"}
        return Report(ranks, sim._settings(), stats, list(sim.warnings), complete=False)

    def _report(self, build_s, run_s, peak_bytes):
        ranks = []
        symmetry = self.symmetry
        for rank, w in enumerate(self.workloads):
            if w is None:  # folded: the class representative's numbers
                w = self.workloads[symmetry.representative(rank)]
            ranks.append(
                RankReport(
                    rank=rank,
                    finish_ns=w.finish_ns,
                    compute_ns=w.compute_ns,
                    exposed_comm_ns=w.finish_ns - w.compute_ns,
                    cpu_ns=w.cpu_ns,
                    comm_ns=w.comm_ns,
                    nodes=len(w.nodes),
                )
            )
        finish_order = list(self.finish_order)
        scale = 1
        if symmetry is not None:
            # Ranks finish with their representative; among equal times, in rank order.
            finish_order = sorted(range(self.total_npus), key=lambda r: (ranks[r].finish_ns, r))
            scale = symmetry.order
        settings = self._settings()
        stats = {
            "events": self.engine.events_run,
            "simulated_ranks": sum(w is not None for w in self.workloads),
            # folded runs count the messages and nodes of every rank (each class's representative's
            # times the class size)
            "messages": self.matcher.messages * scale,
            "message_bytes": self.matcher.bytes * scale,
            "build_s": round(build_s, 6),
            "traces_parsed": self.traces_parsed,
            "run_s": round(run_s, 6),
            "events_per_s": round(self.engine.events_run / run_s) if run_s > 0 else None,
            "nodes_by_type": {node_type_name(t): n * scale for t, n in sorted(self.node_counts.items())},
        }
        if peak_bytes is not None:
            stats["peak_python_memory_bytes"] = peak_bytes
        network_stats = getattr(self.network, "stats", None)
        log = self.reference_log.records(ranks, finish_order) if self.reference_log is not None else None
        report = Report(ranks, settings, stats, list(self.warnings), finish_order,
                        network_stats() if network_stats is not None else {}, log,
                        unmatched_messages=list(self.unmatched_messages))
        if self.recorder is not None:
            self._analyse(report)
        return report

    def _analyse(self, report):
        """The breakdown and critical path from the recorded spans (astra_sim.analysis)."""
        from astra_sim.analysis.spans import Analysis

        started = time.perf_counter()
        self.analysis = analysis = Analysis(self, self.recorder)
        if self.want_breakdown:
            from astra_sim.analysis.breakdown import breakdowns, summary

            per_rank = breakdowns(analysis)
            for rank, result in zip(report.ranks, per_rank):
                rank.breakdown = result
            report.breakdown = summary(per_rank, [r.finish_ns for r in report.ranks])
        if self.want_critical_path:
            from astra_sim.analysis.critical_path import critical_path

            report.critical_path = critical_path(analysis, report)
        report.stats["analysis_s"] = round(time.perf_counter() - started, 6)


class _FoldedRunIncomplete(Exception):
    """A folded run ended with stuck ranks or unmatched messages, whose report needs real rank numbers:
    :meth:`Simulation.run` simulates again, unfolded."""


def _host_issue(options):
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


def simulate(*args, **kwargs):
    """:func:`astra_sim.simulate` (kept here for earlier imports)."""
    from astra_sim import simulate as _simulate

    return _simulate(*args, **kwargs)


__all__ = ["Simulation", "simulate"]
