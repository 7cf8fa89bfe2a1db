"""Every hook the kernel calls, grouped by lifecycle phase.

Hooks register backends and mark lifecycle points, never per simulation event: after registration the kernel calls
backend objects directly. These docstrings are the reference (docs/plugins/hooks.md explains them with examples).
"""

import pluggy

from astra_sim import PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


# ---------------------------------------------------------------- bootstrap


@hookspec
def astra_add_run_options(parser):
    """Add options to ``astra run``'s :class:`argparse.ArgumentParser`; they reach backends through
    ``RunContext.options`` (every parsed option by ``dest``). Called once per CLI invocation, after plugin
    selection and before the full parse.
    """


@hookspec
def astra_register_commands(subparsers):
    """Add ``astra`` sub-commands: ``parser = subparsers.add_parser("name", help=...)``, then
    ``parser.set_defaults(run_command=fn)``; ``fn(args)`` returns the exit code (raise
    :class:`astra_sim.errors.AstraError` for user errors).
    """


# ---------------------------------------------------------------- registration


@hookspec
def astra_register_workload_formats(registry):
    """Register trace formats: ``registry.workload_format(name, fmt)``, ``fmt`` an object (used as is) with
    ``matches(prefix)``, ``load_rank(prefix, rank) -> (path, [EtNode])`` and optionally ``prepare(context)``
    (:class:`astra_sim.api.WorkloadFormat`).
    """


@hookspec
def astra_register_collective_algorithms(registry):
    """Register collective algorithms: ``registry.collective_algorithm(name, spec)``, ``name`` as the system
    config's ``*-implementation`` lists say it (``ring``, ``direct``, ...), ``spec`` a
    :class:`astra_sim.api.CollectiveAlgorithmSpec`.
    """


@hookspec
def astra_register_compute_models(registry):
    """Register compute-time models: ``registry.compute_model(name, factory)``; ``factory(context)`` returns an
    object with ``compute_time_ns(node, rank)`` (:class:`astra_sim.api.ComputeModel`).
    """


@hookspec
def astra_register_network_backends(registry):
    """Register network backends: ``registry.network_backend(name, factory)``; ``factory(context)`` returns a
    :class:`astra_sim.api.NetworkBackend` that reads its own ``context.network_config_path`` (``stats()``, if it
    has one, goes into the report as ``network_stats``).
    """


@hookspec
def astra_register_memory_backends(registry):
    """Register remote-memory backends: ``registry.memory_backend(name, factory)``; ``factory(context)`` returns a
    :class:`astra_sim.api.MemoryBackend` configured by ``context.memory_config``.
    """


@hookspec
def astra_register_platforms(registry):
    """Register platforms (machines ``--platform NAME`` stands for): ``registry.platform(obj)``.

    ``obj`` is an :class:`astra_sim.platforms.Platform`: it describes itself (``describe(nodes)``, what ``astra
    platforms`` shows) and gives a run's configurations, implied options, compute model and why (``resolve(nodes,
    options)`` -> :class:`PlatformSetup`). Every command resolves ``--platform`` through this registry.
    """


@hookspec
def astra_register_executors(registry):
    """Register executors (where a sweep's points, a search's candidates run): ``registry.executor(name, factory)``.

    ``factory(arg)`` returns an :class:`astra_sim.executors.Executor`; ``arg`` is the text after ``NAME:`` in
    ``--executor NAME[:ARG]`` (or None). ``local`` is the kernel's; ``dask`` (``--dask ADDRESS``) the
    astra-executor-dask plugin's.
    """


@hookspec
def astra_register_output_formats(registry):
    """Register output formats (timelines, reports of their own, logs): ``registry.output_format(name, factory,
    options=(), description="")``.

    ``factory(options, total_npus)`` gets a run's options (by argparse dest) before the run is built and returns
    None (not asked for) or an :class:`astra_sim.outputs.OutputFormat`: ``needs_every_rank`` (None or why the run
    must not fold), ``start(run)`` before the first event (``run.record_spans()`` there) and ``finish(run,
    report)`` after the last. ``options`` names the run options it reads. An output that cannot be written is a
    ConfigError raised by the factory.
    """


@hookspec
def astra_register_metrics(registry):
    """Declare the numbers a plugin adds to the report: ``registry.metric(key, unit, description)``.

    ``key``: the dotted place in the report's JSON (``stats.my_model_nodes.*``; ``*`` is any one level); ``unit``:
    one of :data:`astra_sim.metrics.UNITS`. The report's schema (:mod:`astra_sim.metrics`) is the kernel's metrics
    plus these: every number a report holds is declared there once.
    """


@hookspec(firstresult=True)
def astra_fold_planner(setup, catalogue, requested, refused):
    """The run's fold planner, deciding whether it simulates one rank per class of symmetric ranks (astra-folding's
    ``FoldPlanner``), or None: every rank is simulated.

    ``setup``: the :class:`astra_sim.run.build.RunSetup`; ``catalogue``: its collective catalogue; ``requested``:
    the user's ``fold``; ``refused``: None or why the run must not fold. The planner has ``symmetry`` (a
    :class:`astra_sim.symmetry.RankSymmetry` or None), ``canonical_groups``, ``info`` (the report's
    ``settings.fold``), ``plan(traces)`` and ``plan_compact(compact, class_nodes)`` (the ranks to simulate),
    ``fold_engine(engine)`` and ``make_matcher(engine, network)``. A folded run that cannot stay exact raises
    :class:`astra_sim.errors.FoldAbandoned`, and the kernel runs it unfolded.
    """


# ---------------------------------------------------------------- run lifecycle


@hookspec
def astra_run_start(run):
    """Called once per run, once it is built (traces read, the fold decided), before its first event.

    ``run`` is a read-only :class:`astra_sim.run.view.RunView`: ``now_ns``, ``options`` (by argparse dest),
    ``workload_prefix``, ``workload_format`` / ``workload_format_name``, ``compact``, ``system_config``,
    ``comm_groups``, ``npus_per_dim``, ``total_npus``, ``network`` / ``network_backend_name``, ``memory`` /
    ``memory_backend_name``, ``compute_model`` / ``compute_model_name``, ``symmetry`` (None unless the run folds;
    then a backend's counts cover one rank per class: multiply by ``symmetry.order``), ``fold``, ``warn(message)``
    and ``add_node_observer(fn)`` (``fn(rank, node, start_ns, end_ns)`` per finished node).

    Setting an attribute raises AttributeError: what a plugin keeps until ``astra_run_finish`` goes in
    ``run.plugin_state[<plugin name>]``. Check which backend runs (``isinstance(run.compute_model, MyModel)``)
    before using one. An :class:`astra_sim.errors.AstraError` stops the run with a one-line error.
    """


@hookspec(firstresult=True)
def astra_report_breakdown(run, report):
    """Fill in where every rank's time went (each ``report.ranks[i].breakdown`` and ``report.breakdown``) from the
    spans it asked for (``run.record_spans()``, ``run.spans``) and return True; None leaves it to the next plugin.
    Called once per run with ``breakdown=True`` (the default; ``--no-breakdown``), after its last event and checks,
    before the output formats finish. astra-analysis implements it; with none the report has no breakdown and a
    warning says why.
    """


@hookspec
def astra_run_finish(run, report):
    """Called once per run, after its last event and checks, with the same read-only ``run`` as ``astra_run_start``
    (``now_ns`` is the last event's time) and the :class:`astra_sim.report.Report`, which it may add to
    (``report.settings[...]``, ``report.stats[...]``). Not called when the run fails. A folded run simulated again
    unfolded is a new run: a new view, both hooks again."""
