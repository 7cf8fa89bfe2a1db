"""Hook implementations: the ``text`` workload format, an LLM step's throughput in the report, and the ``astra
workload`` commands."""

from astra_sim import hookimpl

from .text_format import TextFormat


@hookimpl
def astra_register_workload_formats(registry):
    registry.workload_format("text", TextFormat(), "ASTRA-sim 1.0 text workload (FILE.txt), converted in memory")


@hookimpl
def astra_run_start(run):
    fmt = getattr(run, "workload_format", None)
    if isinstance(fmt, TextFormat):
        fmt.bind_network(run.npus_per_dim)
    platform = run.options.get("platform")
    if platform is not None:  # an LLM step's FP8 casts written for another GPU than the platform's: say so
        from .throughput import step_metadata_of

        attrs = step_metadata_of(run) or {}
        if isinstance(attrs.get("te_fp8_transposes"), bool):
            from .llm.fp8 import fp8_layout_mismatch

            # against the GPU that runs: the run's resolved gpu option (an explicit --gpu replaces the platform's)
            message = fp8_layout_mismatch(attrs["te_fp8_transposes"], platform, run.options.get("gpu"))
            if message:
                run.warn(message)


@hookimpl
def astra_run_finish(run, report):
    """An LLM step's MFU, model FLOP/s per GPU and tokens/s (``stats.throughput``, and a line of ``astra run``'s
    summary), when its traces carry them."""
    from .throughput import step_throughput, summary_line

    throughput = step_throughput(run, report.max_finish_ns)
    if throughput is not None:
        report.stats["throughput"] = throughput
        report.step_lines.append(summary_line(throughput))


@hookimpl
def astra_register_metrics(registry):
    from .throughput import METRICS

    for key, unit, what in METRICS:
        registry.metric(f"stats.throughput.{key}", unit, what)


@hookimpl
def astra_register_commands(subparsers):
    from .cli import add_commands

    add_commands(subparsers)
