"""Registers the ``astra plot`` command (matplotlib is imported only when it runs)."""

from astra_sim import hookimpl


@hookimpl
def astra_register_commands(subparsers):
    from astra_plots.command import register

    register(subparsers)
