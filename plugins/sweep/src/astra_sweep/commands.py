"""What a sweep spec's options are checked against: ``astra run``'s parser from the kernel
(:func:`astra_sim.spec.run_parser`, with every installed plugin's options); the generators' and ``astra serve``'s
options are checked by their own specs (``LlmSpec``, ``generate_micro``'s options, ``ServeSpec``)."""

from __future__ import annotations


def command_parsers(pm=None):
    """{"pm": plugin manager (default: the kernel's shared one), "parsers": {"run": astra run's parser}}."""
    from astra_sim.plugins import default_plugin_manager
    from astra_sim.spec import run_parser

    pm = pm if pm is not None else default_plugin_manager()
    return {"pm": pm, "parsers": {"run": run_parser(pm)}}
