"""Every hook the kernel calls, grouped by lifecycle phase. Hooks register backends and mark lifecycle points, never
per simulation event: after registration the kernel calls backend objects directly. The docstrings are the short
form of docs/plugins/hooks.md, which documents each hook in full, with an example.
"""

import pluggy

from astra_sim import PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


# ---------------------------------------------------------------- bootstrap
@hookspec
def astra_add_run_options(parser):
    """Add options to ``astra run``'s parser, after plugin selection and before the full parse; they reach backends as
    ``RunContext.options`` (by ``dest``)."""


@hookspec
def astra_register_commands(subparsers):
    """Add ``astra`` sub-commands (``subparsers.add_parser``; ``set_defaults(run_command=fn)``, ``fn(args)`` -> the
    exit code)."""


# ---------------------------------------------------------------- registration
@hookspec
def astra_register_workload_formats(registry):
    """``registry.workload_format(name, fmt)``: a trace format object (:class:`astra_sim.api.WorkloadFormat`)."""


@hookspec
def astra_register_collective_algorithms(registry):
    """``registry.collective_algorithm(name, spec)``: an algorithm the system config's ``*-implementation`` lists
    name (:class:`astra_sim.api.CollectiveAlgorithmSpec`)."""


@hookspec
def astra_register_compute_models(registry):
    """``registry.compute_model(name, factory)``: ``factory(context)`` -> :class:`astra_sim.api.ComputeModel`."""


@hookspec
def astra_register_network_backends(registry):
    """``registry.network_backend(name, factory)``: ``factory(context)`` -> :class:`astra_sim.api.NetworkBackend`,
    which reads ``context.network_config_path``."""


@hookspec
def astra_register_memory_backends(registry):
    """``registry.memory_backend(name, factory)``: ``factory(context)`` -> :class:`astra_sim.api.MemoryBackend`,
    configured by ``context.memory_config``."""


@hookspec
def astra_register_platforms(registry):
    """``registry.platform(obj)``: an :class:`astra_sim.platforms.Platform`, a machine ``--platform NAME`` stands for
    (every command resolves ``--platform`` through this registry)."""


@hookspec
def astra_register_executors(registry):
    """``registry.executor(name, factory)``: ``factory(arg)`` -> an :class:`astra_sim.executors.Executor` (``arg``:
    the text after ``NAME:`` in ``--executor NAME[:ARG]``)."""


@hookspec
def astra_register_output_formats(registry):
    """``registry.output_format(name, factory, options=(), description="")``: ``factory(options, total_npus)`` ->
    None or an :class:`astra_sim.outputs.OutputFormat`, before the run is built; ``options``: the run options it
    reads."""


@hookspec
def astra_register_metrics(registry):
    """``registry.metric(key, unit, description)``: a number the plugin adds to the report, at a dotted ``key``
    (``*``: any one level), in one of :data:`astra_sim.metrics.UNITS`."""


@hookspec(firstresult=True)
def astra_fold_planner(setup, catalogue, requested, refused):
    """The run's fold planner (astra-folding's), which decides whether it simulates one rank per class of symmetric
    ranks; None: every rank is. ``refused``: None or why the run must not fold. A folded run that cannot stay exact
    raises :class:`astra_sim.errors.FoldAbandoned` and runs unfolded."""


# ---------------------------------------------------------------- run lifecycle
@hookspec
def astra_run_start(run):
    """Once per run, built (traces read, the fold decided), before its first event. ``run`` is a read-only
    :class:`astra_sim.run.view.RunView`; a plugin's state until ``astra_run_finish`` goes in
    ``run.plugin_state[<plugin name>]``. An AstraError stops the run."""


@hookspec(firstresult=True)
def astra_report_breakdown(run, report):
    """Fill in where every rank's time went from the spans it asked for (``run.record_spans()``) and return True;
    None leaves it to the next plugin. Called after the last event of a run that wants a breakdown (astra-analysis
    implements it)."""


@hookspec
def astra_run_finish(run, report):
    """Once per run, after its last event and checks (not when it fails), with ``astra_run_start``'s ``run`` and the
    :class:`astra_sim.report.Report`, which it may add to. A folded run simulated again unfolded is a new run."""
