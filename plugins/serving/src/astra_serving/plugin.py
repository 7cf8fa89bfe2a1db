"""Hook implementation: the ``astra serve`` command."""

from astra_sim import hookimpl


@hookimpl
def astra_register_commands(subparsers):
    from .cli import add_serve_command

    add_serve_command(subparsers)
