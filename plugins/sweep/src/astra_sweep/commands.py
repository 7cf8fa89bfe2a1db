"""The parsers of the commands a sweep spec names (``astra run``, ``astra workload llm|micro``, ``astra serve``
when the serving plugin is installed), taken from the real ``astra`` command line with every installed plugin's
options, so a spec accepts exactly what they do."""

from __future__ import annotations

import argparse


def _subparser(parser, name):
    for action in parser._actions:  # argparse has no public way to reach a sub-command's parser
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    raise KeyError(name)


def command_parsers(pm=None):
    """{"pm": plugin manager, "parsers": {"run": ..., "llm": ..., "micro": ..., "serve": ... (if installed)}}."""
    from astra_sim.cli import build_parser
    from astra_sim.plugins import make_plugin_manager

    pm = pm or make_plugin_manager()
    parser = build_parser(pm)
    workload = _subparser(parser, "workload")
    parsers = {"run": _subparser(parser, "run"), "llm": _subparser(workload, "llm"),
               "micro": _subparser(workload, "micro")}
    try:
        parsers["serve"] = _subparser(parser, "serve")
    except KeyError:  # the serving plugin is not installed: a spec's workload.serve says so
        pass
    return {"pm": pm, "parsers": parsers}
