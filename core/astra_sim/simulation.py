"""One simulation run, built, run and reported: :class:`Simulation` ties :mod:`astra_sim.run`'s pieces together and
owns the run's state (the ranks share a SharedContext, hooks see a read-only RunView, not this object).
"""

from __future__ import annotations

import time

from astra_sim import progress
from astra_sim.chakra import ChakraError
from astra_sim.errors import ConfigError, FoldAbandoned, PluginError, WorkloadError
from astra_sim.gcpause import gc_paused
from astra_sim.humanize import format_ns
from astra_sim.limits import LONG_STEP_NS, MAX_TIME_NS, check_step, time_overflow
from astra_sim.outputs import output_registry
from astra_sim.plugins import plugin_manager_for
from astra_sim.run.build import RunSetup, Unfolded, build_ranks
from astra_sim.run.catalogue import CollectiveCatalogue
from astra_sim.run.loop import check_all_finished, check_all_matched, run_events
from astra_sim.run.report import final_report, partial_report
from astra_sim.run.view import RunView


def _of(part, name, settable=False):
    """An attribute that is ``self.<part>.<name>`` (read-only unless ``settable``)."""

    def get(self):
        return getattr(getattr(self, part), name)

    def put(self, value):
        setattr(getattr(self, part), name, value)

    return property(get, put if settable else None, doc=f"``{part}.{name}``")


def _built(name, before, doc=None):
    """A read-only attribute: ``self.ranks.<name>`` once the ranks are built, ``before()`` until then."""
    return property(lambda self: getattr(self.ranks, name) if self.ranks is not None else before(), doc=doc)


class Simulation:
    """One simulation run (the kernel's own object; hooks get :attr:`view`, ranks a SharedContext)."""

    def __init__(self, workload, system, network, memory=None, comm_groups=None, *, network_backend="analytical",
                 memory_backend=None, compute_model=None, workload_format=None, num_queues_per_dim=1,
                 injection_scale=1.0, rendezvous=False, plugins=None, block=(), extra_plugins=(), options=None,
                 plugin_manager=None, fold=True, on_warning=None, allow_unmatched=False, breakdown=True,
                 **output_options):
        # Keywords such as timeline=, critical_path=, astra_sim_log= are run options an output format reads.
        self.pm = plugin_manager_for(plugins, block, extra_plugins, plugin_manager)
        outputs = output_registry(self.pm)
        options = _with_output_options(options, output_options, outputs)
        # Kept to run again unfolded when a folded run finds a tie it cannot order exactly.
        self._arguments = dict(
            workload=workload, system=system, network=network, memory=memory, comm_groups=comm_groups,
            network_backend=network_backend, memory_backend=memory_backend, compute_model=compute_model,
            workload_format=workload_format, num_queues_per_dim=num_queues_per_dim,
            injection_scale=injection_scale, rendezvous=rendezvous, plugins=plugins, block=block,
            extra_plugins=extra_plugins, options=options, plugin_manager=self.pm,
            allow_unmatched=allow_unmatched, breakdown=breakdown)
        #: a run that ends with sends never received (or receives never sent) is an error unless allowed
        self.allow_unmatched = bool(allow_unmatched)
        self._active = self  # the run in progress (a fresh unfolded one after a folded run gave up)
        self.unmatched_messages = []
        self.warnings = []
        self._on_warning = on_warning  # called once per distinct warning as it is raised (the CLI prints it)
        self._node_observers = []
        self.finish_order = []
        self.node_counts = {}
        self.ranks = None  # the BuiltRanks, once built
        self.setup = setup = RunSetup(
            workload, system, network, memory, comm_groups, pm=self.pm, network_backend=network_backend,
            memory_backend=memory_backend, compute_model=compute_model, workload_format=workload_format,
            num_queues_per_dim=num_queues_per_dim, injection_scale=injection_scale, rendezvous=rendezvous,
            options=options, warn=self.warn,
            callbacks=dict(schedule_for_rank=self._schedule_for_rank, comm_in_flight=self._comm_in_flight,
                           comm_nodes_in_flight=self._comm_nodes_in_flight, rank_nodes=self._rank_nodes,
                           add_node_observer=self._node_observers.append))
        self.catalogue = CollectiveCatalogue(setup.registry, setup.system_config, setup.system_config_path,
                                             setup.npus_per_dim, self.warn, setup.context)
        #: ``[(name, OutputFormat)]`` the options ask for (astra_sim.outputs); an unwritable one fails here
        self.outputs = outputs.requested(setup.options, setup.total_npus)
        #: fold symmetric ranks (simulate one per class) unless an output needs every rank's nodes (the reference log)
        every_rank = next((o.needs_every_rank for _, o in self.outputs if o.needs_every_rank), None)
        self.folding = (self.pm.hook.astra_fold_planner(setup=setup, catalogue=self.catalogue, requested=bool(fold),
                                                        refused=every_rank)
                        or Unfolded(setup.total_npus, fold, every_rank))
        self.want_breakdown = bool(breakdown)
        #: the spans of every executed node (astra_sim.spans), recorded only when a plugin asks (record_spans)
        self.recorder = None
        self.loop_started = False  # the engine counts its events only when its loop returns
        #: what the lifecycle hooks get (astra_run_start / astra_run_finish)
        self.view = RunView(self)

    # ------------------------------------------------------------ the run's inputs (see RunSetup)
    engine = _of("setup", "engine")
    options = _of("setup", "options")
    network = _of("setup", "network")
    network_backend_name = _of("setup", "network_backend_name")
    total_npus = _of("setup", "total_npus")
    compute_model = _of("setup", "compute_model")
    compute_model_name = _of("setup", "compute_model_name")
    rendezvous = _of("setup", "rendezvous")
    workload_format = _of("setup", "workload_format", settable=True)
    # ------------------------------------------------------------ the fold decision (the fold planner)
    symmetry = _of("folding", "symmetry")
    fold_info = _of("folding", "info")

    def output(self, name):
        """The requested output format ``name`` (an :class:`astra_sim.outputs.OutputFormat`), or None."""
        return next((output for found, output in self.outputs if found == name), None)

    # ------------------------------------------------------------ the built ranks
    workloads = _built("workloads", list, "Per rank its :class:`~astra_sim.workload.workload.RankWorkload` (None for "
                                          "a folded run's non-representatives); empty before :meth:`build`.")
    systems = _built("systems", list)
    matcher = _built("matcher", lambda: None)
    traces_parsed = _built("traces_parsed", int, "Distinct traces read by :meth:`build` (identical ones are shared).")

    # ------------------------------------------------------------ what the ranks report back
    def warn(self, message):
        if message not in self.warnings:
            self.warnings.append(message)
            if self._on_warning is not None:
                self._on_warning(message)

    def record_node(self, rank, node, start_ns, end_ns):
        """Every finished node passes here: counted, and shown to the node observers."""
        self.node_counts[node.type] = self.node_counts.get(node.type, 0) + 1
        if end_ns - start_ns > LONG_STEP_NS or end_ns > MAX_TIME_NS:
            check_step(rank, node, start_ns, end_ns, self.warn)
        for observer in self._node_observers:
            observer(rank, node, start_ns, end_ns)

    def rank_finished(self, workload):
        self.finish_order.append(workload.rank)

    def add_node_observer(self, fn):
        """``fn(rank, node, start_ns, end_ns)`` for every finished node (timelines, utilisation, logs)."""
        self._node_observers.append(fn)

    @property
    def node_observers(self):
        """The observers of finished nodes, in the order they are called (the span recorder's among them)."""
        return tuple(self._node_observers)

    def record_spans(self):
        """Record every simulated node's span (:class:`astra_sim.spans.SpanRecorder`); before the first event only (a
        later start would leave holes)."""
        if self.recorder is None:
            if self.loop_started:
                raise PluginError("record_spans() after the first event: call it from astra_run_start or an "
                                  "output format's start")
            from astra_sim.spans import SpanRecorder

            self.recorder = SpanRecorder([w.rank for w in self.workloads if w is not None])
            self._node_observers.append(self.recorder.observer())
            self.ranks.shared.recorder = self.recorder
        return self.recorder

    # The backends' RunContext reaches the built ranks through these (some per node: no property on the way).
    def _rank_nodes(self, rank):
        return self.ranks.workloads[rank].nodes

    def _comm_in_flight(self, rank):
        return self.ranks.workloads[rank].comm_in_flight()

    def _comm_nodes_in_flight(self, rank):
        return self.ranks.workloads[rank].comm_nodes_in_flight()

    def _schedule_for_rank(self, rank, delay_ns, fn, arg):
        self.ranks.systems[rank].register_event(fn, arg, delay_ns)

    # ------------------------------------------------------------ run
    def build(self):
        """Read and check every rank's trace (:func:`build_ranks`); a folded run's non-representatives get None."""
        self.ranks = build_ranks(self.setup, self.setup.workload_format, self.catalogue, self.folding,
                                 warn=self.warn, record_node=self.record_node, rank_finished=self.rank_finished)

    def run(self, measure_memory=False):
        try:
            with gc_paused():  # the build, the loop and the report make millions of acyclic objects
                return self._run(measure_memory)
        except FoldAbandoned as exc:
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
            import tracemalloc  # (here: a run that does not measure its memory skips it, 0.3 % of the Ring 256 run)
            tracemalloc.start()
        try:
            if not self.workloads:
                progress.phase(f"reading the traces of {self.total_npus:,} ranks")
                self.build()
            built = time.perf_counter()
            for _, output in self.outputs:
                output.start(self.view)
            self.pm.hook.astra_run_start(run=self.view)
            progress.phase("simulating", self._progress_figure)
            drive = getattr(self.folding, "time_fold_driver", None)  # astra-folding's jumps over repeats
            self.loop_started = True
            run_events(self.engine, self.workloads, self.symmetry is not None, drive and drive(self))
        except ChakraError as exc:
            raise WorkloadError(str(exc)) from None
        except OverflowError:  # a time past int64 in a phase that is no node's end (check_step names those)
            if self.engine.now <= MAX_TIME_NS:
                raise
            raise time_overflow("a network, memory or collective phase") from None
        finally:
            peak = tracemalloc.get_traced_memory()[1] if measure_memory else None
            if measure_memory:
                tracemalloc.stop()
        finished = time.perf_counter()
        folded = self.symmetry is not None
        check_all_finished(self.engine, self.workloads, self.matcher, folded)
        self.unmatched_messages = check_all_matched(self.workloads, self.matcher, folded, self.allow_unmatched,
                                                    self.warn)
        progress.phase("computing the breakdown and the report")
        report = final_report(self, built - started, finished - built, peak)
        if self.outputs:
            for _, output in self.outputs:
                output.finish(self.view, report)
            report.warnings.extend(w for w in self.warnings if w not in report.warnings)  # raised by outputs
        self.pm.hook.astra_run_finish(run=self.view, report=report)
        return report

    def _progress_figure(self):
        """How far the loop is, for the progress line (read from another thread: plain reads only)."""
        simulated = sum(w is not None for w in self.workloads)
        return f"{format_ns(self.engine.now)} simulated, {len(self.finish_order):,} of {simulated:,} ranks done"

    def partial_report(self, reason):
        """What an interrupted run knew (``astra run --partial-report``), marked ``complete: False``."""
        return partial_report(self._active, reason)


def _with_output_options(options, given, outputs):
    """``options`` plus the output keywords (``timeline=``, ...); one no output format reads is a ConfigError."""
    given = {k: v for k, v in given.items() if v is not None and v is not False}
    if not given:
        return options
    known = outputs.option_names()
    unknown = sorted(k for k in given if k not in known)
    if unknown:
        formats = ", ".join(outputs.names()) or "none"
        raise ConfigError(f"Simulation(): no output format reads {', '.join(unknown)} (registered output formats: "
                          f"{formats}; timelines, the critical path and the reference log are the astra-analysis "
                          "plugin's)")
    return {**(options or {}), **given}


def simulate(*args, **kwargs):
    """:func:`astra_sim.simulate` (kept here for earlier imports)."""
    from astra_sim import simulate as _simulate

    return _simulate(*args, **kwargs)
