"""Hook implementations: the ``astra cluster`` command and the ``slowed`` compute model (stragglers)."""

from astra_sim import hookimpl


@hookimpl
def astra_register_commands(subparsers):
    from .cli import add_command

    add_command(subparsers)


@hookimpl
def astra_register_compute_models(registry):
    from .slowed import SLOWED, make_slowed

    registry.compute_model(SLOWED, make_slowed)
