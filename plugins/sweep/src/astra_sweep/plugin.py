"""Hook implementations: the ``astra sweep`` and ``astra search`` commands."""

from astra_sim import hookimpl


@hookimpl
def astra_register_commands(subparsers):
    from .cli import add_commands

    add_commands(subparsers)
