"""Hook implementation: the ``astra serve`` command."""

from astra_sim import hookimpl


@hookimpl
def astra_register_commands(subparsers):
    from .cli import add_serve_command
    from .search import add_search_command

    add_serve_command(subparsers)
    add_search_command(subparsers)
