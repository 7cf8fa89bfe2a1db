"""Every hook the kernel calls, grouped by lifecycle phase.

Hooks register backends and mark lifecycle points; they are never called per
simulation event. After registration the kernel calls backend objects directly.
The docstrings here are the reference documentation (see docs/plugins/hooks.md).
"""

import pluggy

from astra_sim import PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


# ---------------------------------------------------------------- bootstrap


@hookspec
def astra_add_run_options(parser):
    """Add command-line options to ``astra run``.

    ``parser`` is the :class:`argparse.ArgumentParser` of the ``run`` command.
    Options a plugin adds reach its backends through ``RunContext.options``
    (a dict of every parsed option, keyed by ``dest``). Called once per CLI
    invocation, after plugin selection and before the full parse.
    """


@hookspec
def astra_register_commands(subparsers):
    """Add ``astra`` sub-commands (e.g. ``astra infragraph``).

    ``subparsers`` is the :class:`argparse` sub-parser collection of the
    ``astra`` command: ``parser = subparsers.add_parser("name", help=...)``.
    Set ``parser.set_defaults(run_command=fn)``; ``fn(args)`` returns the exit
    code (raise :class:`astra_sim.errors.AstraError` for user errors).
    """


# ---------------------------------------------------------------- registration


@hookspec
def astra_register_workload_formats(registry):
    """Register workload (trace) formats: ``registry.workload_format(name, fmt)``.

    ``fmt`` is an object (used as is) with ``matches(prefix) -> bool``,
    ``load_rank(prefix, rank) -> (path, list[EtNode])`` and optionally
    ``prepare(context)``, called once with the RunContext before loading
    (see :class:`astra_sim.api.WorkloadFormat`).
    """


@hookspec
def astra_register_collective_algorithms(registry):
    """Register collective algorithms: ``registry.collective_algorithm(name, factory)``.

    ``name`` is what the system config's ``*-implementation`` lists say
    (``ring``, ``direct``, ...). See :class:`astra_sim.api.CollectiveAlgorithmSpec`.
    """


@hookspec
def astra_register_compute_models(registry):
    """Register compute-time models: ``registry.compute_model(name, factory)``.

    ``factory(context)`` returns an object with
    ``compute_time_ns(node, rank) -> int`` (see :mod:`astra_sim.api`).
    """


@hookspec
def astra_register_network_backends(registry):
    """Register network backends: ``registry.network_backend(name, factory)``.

    ``factory(context)`` returns a :class:`astra_sim.api.NetworkBackend`; it
    reads its own configuration from ``context.network_config_path``. A
    backend may offer ``stats()``: its dict goes into the report as
    ``network_stats`` (e.g. per-link bytes and busy time).
    """


@hookspec
def astra_register_memory_backends(registry):
    """Register remote-memory backends: ``registry.memory_backend(name, factory)``.

    ``factory(context)`` returns a :class:`astra_sim.api.MemoryBackend`; it
    reads its configuration from ``context.memory_config``.
    """


@hookspec
def astra_register_platforms(registry):
    """Register platforms (machines ``--platform NAME`` stands for): ``registry.platform(obj)``.

    ``obj`` is an :class:`astra_sim.platforms.Platform`: it describes itself (``describe(nodes)``, the
    numbers ``astra platforms`` shows) and gives a run's system and network configurations, the options
    and compute model it implies and why (``resolve(nodes, options)`` -> :class:`PlatformSetup`). Every
    command resolves ``--platform`` through this registry.
    """


@hookspec
def astra_register_executors(registry):
    """Register executors (where a sweep's points, a search's candidates run): ``registry.executor(name, factory)``.

    ``factory(arg)`` returns an :class:`astra_sim.executors.Executor`; ``arg`` is the text after ``NAME:`` in
    ``--executor NAME[:ARG]`` (None without it). The kernel's ``local`` is built in (:mod:`astra_sim.executors`);
    ``dask`` (``--dask ADDRESS``) is the astra-executor-dask plugin's.
    """


@hookspec
def astra_register_output_formats(registry):
    """Register output formats (timelines, reports of their own, logs): ``registry.output_format(name, factory,
    options=(), description="")``.

    ``factory(options, total_npus)`` gets a run's options (by argparse dest) before the run is built and
    returns None (not asked for) or an :class:`astra_sim.outputs.OutputFormat`: ``needs_every_rank``
    (None or why the run must not fold), ``start(run)`` before the first event (``run.record_spans()`` there) and
    ``finish(run, report)`` after the last (write files, add report keys). ``options`` names the run options
    the format reads. Raise a ConfigError in the factory for an output that cannot be written.
    """


@hookspec
def astra_register_metrics(registry):
    """Declare the numbers a plugin adds to the report: ``registry.metric(key, unit, description)``.

    ``key`` is the dotted place in the report's JSON (``stats.my_model_nodes.*``; ``*`` is any one level),
    ``unit`` one of :data:`astra_sim.metrics.UNITS`. The report's schema (:mod:`astra_sim.metrics`) is the kernel's
    metrics plus these; every number a report holds is declared there once.
    """


@hookspec(firstresult=True)
def astra_fold_planner(setup, catalogue, requested, refused):
    """The run's fold planner: decides whether it simulates one rank per class of symmetric ranks (the
    astra-folding plugin's ``FoldPlanner``), or None. Without one every rank is simulated.

    ``setup`` is the run's :class:`astra_sim.run.build.RunSetup`, ``catalogue`` its collective catalogue,
    ``requested`` the user's ``fold``, ``refused`` None or why the run must not fold (an output needs every
    rank). The planner has ``symmetry`` (an :class:`astra_sim.symmetry.RankSymmetry` or None),
    ``canonical_groups``, ``info`` (the report's ``settings.fold``), ``plan(traces)`` and ``plan_compact(compact,
    class_nodes)`` (the ranks to simulate), ``fold_engine(engine)`` and ``make_matcher(engine, network)``. A folded
    run that cannot stay exact raises :class:`astra_sim.errors.FoldAbandoned`, and the kernel runs it unfolded.
    """


# ---------------------------------------------------------------- run lifecycle


@hookspec
def astra_run_start(run):
    """Called once per run, after it is built (every trace read, the fold decided) and before its first event.

    ``run`` is a read-only :class:`astra_sim.run.view.RunView`:
    ``now_ns`` (the engine's time: 0 here), ``options`` (every run option by argparse dest, read-only),
    ``workload_prefix``, ``workload_format`` / ``workload_format_name``, ``compact`` (a compact workload or
    None), ``system_config``, ``comm_groups`` (read-only), ``npus_per_dim`` (a tuple), ``total_npus``,
    ``network`` / ``network_backend_name``, ``memory`` / ``memory_backend_name``, ``compute_model`` /
    ``compute_model_name``, ``symmetry`` (None unless the run folds; then counts a backend keeps cover one rank
    per class: multiply by ``symmetry.order``), ``fold`` (a copy of the report's ``settings.fold``),
    ``warn(message)`` and ``add_node_observer(fn)`` (``fn(rank, node, start_ns, end_ns)`` per finished node).

    Setting an attribute raises AttributeError. What a plugin needs until ``astra_run_finish`` goes in
    ``run.plugin_state[<plugin name>]``, a dict per run (the same view reaches both hooks). Check which
    backend runs (``isinstance(run.compute_model, MyModel)``) before using one. Raise an
    :class:`astra_sim.errors.AstraError` to stop the run with a one-line error.
    """


@hookspec(firstresult=True)
def astra_report_breakdown(run, report):
    """Fill in where every rank's time went (each ``report.ranks[i].breakdown`` and the summary
    ``report.breakdown``) from the spans it asked for (``run.record_spans()``, ``run.spans``), and return True;
    None leaves it to the next plugin. Called once per run that asked for a breakdown (``breakdown=True``, the
    default; ``--no-breakdown`` turns it off), after its last event and its checks, before the output formats
    finish. The astra-analysis plugin implements it; with none the report has no breakdown and a warning says why.
    """


@hookspec
def astra_run_finish(run, report):
    """Called once per run, after its last event and its checks, with the same read-only ``run`` as
    ``astra_run_start`` (``plugin_state`` included; ``now_ns`` is the last event's time) and the
    :class:`astra_sim.report.Report`, which the hook may add to (``report.settings[...]``,
    ``report.stats[...]``) before it is returned or written. Not called when the run fails. A folded run that
    is simulated again unfolded is a new run: a new view, both hooks again."""
