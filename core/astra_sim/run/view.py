"""What the lifecycle hooks see of a run (``astra_run_start(run)``, ``astra_run_finish(run, report)``)."""

from __future__ import annotations

from types import MappingProxyType


def _setup(name, doc=None):
    """A read-only attribute of the view: the run's ``setup.<name>`` (:class:`astra_sim.run.build.RunSetup`)."""
    return property(lambda view: getattr(view._sim.setup, name), doc=doc)


class RunView:
    """A read-only view of one run, the ``run`` of ``astra_run_start`` and ``astra_run_finish`` (the same object for
    both). What a plugin carries from start to finish goes in :attr:`plugin_state` (a dict per run, keyed by plugin
    name), the one mutable part. A folded run simulated again unfolded is a new run: a new view.
    """

    __slots__ = ("_sim", "plugin_state")

    def __init__(self, sim):
        object.__setattr__(self, "_sim", sim)
        object.__setattr__(self, "plugin_state", {})

    def __setattr__(self, name, value):
        raise AttributeError(f"the run is read-only (cannot set {name!r}); keep a plugin's own state in "
                             "run.plugin_state[<plugin name>]")

    def __delattr__(self, name):
        raise AttributeError(f"the run is read-only (cannot delete {name!r})")

    # ------------------------------------------------------------ time and messages
    @property
    def now_ns(self) -> int:
        """The engine's current time (0 at ``astra_run_start``; the last event's time at finish)."""
        return self._sim.engine.now

    def warn(self, message: str) -> None:
        """Add a warning to the run (printed once as ``astra: warning: ...``, listed in the report)."""
        self._sim.warn(message)

    def add_node_observer(self, fn) -> None:
        """``fn(rank, node, start_ns, end_ns)`` per finished node of a simulated rank (keep it cheap; call it early)."""
        self._sim.add_node_observer(fn)

    def add_plan_observer(self, fn) -> None:
        """``fn(rank, group, com_type)`` whenever a simulated rank plans a collective on a communicator group, before
        its streams are made (the reference log's ``custom ring`` lines); call it before the first event."""
        self._sim.ranks.shared.plan_observers.append(fn)

    def record_issue_order(self) -> dict:
        """``{rank: [node id, ...]}`` of the simulated ranks, filled in the order each issues its nodes from now on (the
        reference log's statistics order); call it before the first event (again: the same lists)."""
        out = {}
        for workload in self._sim.workloads:
            if workload is not None:
                if workload.issue_log is None:
                    workload.issue_log = []
                out[workload.rank] = workload.issue_log
        return out

    # ------------------------------------------------------------ progress and results
    @property
    def ranks_finished(self) -> int:
        """How many ranks have finished so far."""
        return len(self._sim.finish_order)

    @property
    def finish_order(self) -> tuple:
        """The simulated ranks in the order they finished (so far)."""
        return tuple(self._sim.finish_order)

    # ------------------------------------------------------------ spans (what the analyses read)
    def record_spans(self):
        """Record every simulated node's span (:class:`astra_sim.spans.SpanRecorder`: one array append per node; none
        unless a plugin asks); call it before the first event (again: the same recorder)."""
        return self._sim.record_spans()

    @property
    def spans(self):
        """The :class:`astra_sim.spans.SpanRecorder` (read-only) when a plugin asked for spans, else None."""
        return self._sim.recorder

    @property
    def wants_breakdown(self) -> bool:
        """Whether the run asked for a breakdown (``astra_report_breakdown`` is then called after the last event)."""
        return self._sim.want_breakdown

    def rank_nodes(self, rank) -> dict:
        """``{node id: node}`` of a simulated rank's trace (read it, do not change it)."""
        return self._sim.workloads[rank].nodes

    def rank_finish_ns(self, rank):
        """A simulated rank's finish time (None while it runs)."""
        return self._sim.workloads[rank].finish_ns

    def collective_end_ns(self, rank, node_id):
        """When a simulated rank's running collective ends, once fixed (else None;
        :meth:`astra_sim.system.sys.Sys.collective_end_ns`)."""
        return self._sim.ranks.systems[rank].collective_end_ns(node_id)

    def algorithm_spec(self, name):
        """The catalogue's ``(CollectiveAlgorithmSpec, window)`` of an implementation name (unknown: an AstraError)."""
        return self._sim.catalogue.algorithm_spec(name)

    # ------------------------------------------------------------ inputs
    @property
    def options(self):
        """Every run option by argparse dest (flags, platform-implied, ``simulate(options=)``), read-only."""
        return MappingProxyType(self._sim.setup.options)

    workload_prefix = _setup("workload_prefix")
    workload_format_name = _setup("workload_format_name")
    workload_format = _setup("workload_format", "The registered workload format object that reads the traces.")
    compact = _setup("compact", "The compact workload (:class:`astra_sim.api.CompactWorkload`: class traces, rank "
                                "map, declared symmetry), or None for per-rank traces.")
    system_config = _setup("system_config", "The parsed system configuration (:class:`astra_sim.config.SystemConfig`; "
                                            "do not modify).")
    comm_group_path = _setup("comm_group_path", "The ``--comm-group-configuration`` file (None without one).")

    @property
    def comm_groups(self):
        """``{group id: [NPU, ...]}`` of ``--comm-group-configuration`` (read-only; empty without one)."""
        return MappingProxyType(self._sim.setup.comm_groups or {})

    # ------------------------------------------------------------ machine and backends
    @property
    def npus_per_dim(self) -> tuple:
        return tuple(self._sim.setup.npus_per_dim)

    total_npus = _setup("total_npus")
    network = _setup("network", "The network backend object (its optional capabilities: :mod:`astra_sim.api`).")
    network_backend_name = _setup("network_backend_name")
    memory = _setup("memory", "The remote-memory backend object.")
    memory_backend_name = _setup("memory_backend_name")
    compute_model = _setup("compute_model", "The compute model object (e.g. to find one's own model with "
                                            "``isinstance``).")
    compute_model_name = _setup("compute_model_name")

    # ------------------------------------------------------------ folding
    @property
    def symmetry(self):
        """The :class:`astra_folding.symmetry.RankSymmetry` the run folds by, or None (every rank simulated). Backend
        counts then cover the representatives only: multiply by ``symmetry.order``."""
        return self._sim.symmetry

    @property
    def fold(self) -> dict:
        """What the report's ``settings.fold`` says (a copy): requested, simulated_ranks, reason, ..."""
        return dict(self._sim.fold_info)

    def __repr__(self):
        setup = self._sim.setup
        return (f"<RunView {setup.workload_prefix!r} on {setup.total_npus} NPUs ({setup.network_backend_name}, "
                f"{setup.compute_model_name})>")
