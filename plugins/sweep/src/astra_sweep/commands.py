"""The parsers a sweep spec's options are checked against: ``astra run``'s from the kernel
(:func:`astra_sim.spec.run_parser`, every installed plugin's options), and, until the workload generators and
the serving plugin offer spec objects of their own, ``astra workload llm|micro`` and ``astra serve`` (when the
serving plugin is installed), so a spec accepts exactly what they do."""

from __future__ import annotations

import argparse


def _subparser(parser, name):
    # (only for the generators' and serving's parsers, which have no public constructor yet)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    raise KeyError(name)


def command_parsers(pm=None):
    """{"pm": plugin manager, "parsers": {"run": ..., "llm": ..., "micro": ..., "serve": ... (if installed)}}."""
    from astra_sim.cli import build_parser
    from astra_sim.plugins import default_plugin_manager
    from astra_sim.spec import run_parser

    pm = pm if pm is not None else default_plugin_manager()
    parser = build_parser(pm)
    workload = _subparser(parser, "workload")
    parsers = {"run": run_parser(pm), "llm": _subparser(workload, "llm"), "micro": _subparser(workload, "micro")}
    try:
        parsers["serve"] = _subparser(parser, "serve")
    except KeyError:  # the serving plugin is not installed: a spec's workload.serve says so
        pass
    return {"pm": pm, "parsers": parsers}
