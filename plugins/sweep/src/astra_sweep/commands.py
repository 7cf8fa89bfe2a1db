"""The parsers a sweep spec's options are checked against: ``astra run``'s from the kernel
(:func:`astra_sim.spec.run_parser`, every installed plugin's options) and, until the serving plugin offers a spec
object of its own, ``astra serve``'s (when the serving plugin is installed), so a spec accepts exactly what they
do. The generators' options are checked by their own specs (``LlmSpec``, ``generate_micro``'s options)."""

from __future__ import annotations

import argparse


def _serve_parser(pm):
    # (the serving plugin has no public constructor for its parser yet)
    from astra_sim.cli import build_parser

    parser = build_parser(pm)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and "serve" in action.choices:
            return action.choices["serve"]
    return None


def command_parsers(pm=None):
    """{"pm": plugin manager, "parsers": {"run": ..., "serve": ... (if installed)}}."""
    from astra_sim.plugins import default_plugin_manager
    from astra_sim.spec import run_parser

    pm = pm if pm is not None else default_plugin_manager()
    parsers = {"run": run_parser(pm)}
    serve = _serve_parser(pm)
    if serve is not None:  # else the serving plugin is not installed: a spec's workload.serve says so
        parsers["serve"] = serve
    return {"pm": pm, "parsers": parsers}
