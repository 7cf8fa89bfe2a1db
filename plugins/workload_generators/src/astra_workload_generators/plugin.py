"""Hook implementations: the ``text`` workload format and the ``astra workload`` commands."""

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


@hookimpl
def astra_register_commands(subparsers):
    from .cli import add_commands

    add_commands(subparsers)
