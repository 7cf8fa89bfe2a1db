"""Helpers for command-line parsing, shared by the kernel's CLI and plugin commands."""

from __future__ import annotations

import argparse
import math

from astra_sim.errors import ConfigError


def number(kind=int, minimum=None, exclusive=False, what="a number"):
    """An argparse ``type``: ``kind(text)`` at least ``minimum`` (above it when ``exclusive``); ``what`` names it."""
    bound = "" if minimum is None else (f" > {minimum}" if exclusive else f" >= {minimum}")

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        finite = value is not None and (not isinstance(value, float) or math.isfinite(value))
        if not finite or minimum is not None and (value <= minimum if exclusive else value < minimum):
            raise argparse.ArgumentTypeError(f"expected {what}{bound}, got {text!r}")
        return value

    return parse


positive_int = number(int, 1, what="a positive integer")
non_negative_int = number(int, 0, what="an integer")
non_negative_float = number(float, 0, what="a number")
positive_float = number(float, 0, exclusive=True, what="a number")


def subcommands(subparsers, name, dest, **parser_kwargs):
    """``(parser, its sub-commands)`` of ``astra NAME SUBCOMMAND``, made on first use: several plugins add to one group
    (``astra workload llm``, ``astra workload systolic``). Without a sub-command the group prints its help."""
    parser = subparsers.choices.get(name)
    if parser is None:
        parser = subparsers.add_parser(name, **parser_kwargs)

        def usage(args, parser=parser):
            parser.print_help()
            return 2

        parser.set_defaults(run_command=usage)
    return parser, subcommand_action(parser) or parser.add_subparsers(dest=dest, metavar="SUBCOMMAND")


def subcommand_action(parser):
    """The parser's sub-command collection (argparse keeps no public handle on it), or None."""
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def did_you_mean(name, known):
    """`` (did you mean 'x'?)`` for the known name nearest ``name``, or ``""``."""
    import difflib

    close = difflib.get_close_matches(str(name), sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def warning(message):
    """Print one warning on stderr, the way every astra command does (``astra: warning: ...``)."""
    import sys

    print(f"astra: warning: {message}", file=sys.stderr)


# ------------------------------------------------------------------ options from mappings (specs, sweeps)
def option_action(parser, name):
    """The parser's action for option ``name`` (its dest, or its long flag without dashes), or None."""
    key = str(name).replace("-", "_")
    for action in parser._actions:  # argparse keeps no public index of its options
        if action.dest == key and action.option_strings:
            return action
    for action in parser._actions:
        if f"--{name}" in action.option_strings:
            return action
    return None


def option_names(parser):
    """Every long option of ``parser`` without its dashes (for suggestions)."""
    return [s[2:] for a in parser._actions for s in a.option_strings if s.startswith("--")]


def option_argv(parser, name, value, where="option"):
    """The words of option ``name`` = ``value`` (None: not given), checked; a ConfigError names ``where``."""
    action = option_action(parser, name)
    if action is None:
        hint = did_you_mean(str(name).replace("_", "-"), option_names(parser))
        raise ConfigError(f"{where}: unknown {parser.prog} option {name!r}{hint}")
    flag = next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])
    if value is None:
        return []
    if isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: value {value!r} is not true or false")
        return [flag] if value else ["--no-" + flag[2:]]
    if action.nargs == 0:  # store_true / store_false
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: value {value!r} is not true or false ({flag} is a flag)")
        return [flag] if value == isinstance(action, argparse._StoreTrueAction) else []
    if isinstance(value, bool) and action.nargs == "?":
        return [flag] if value else [flag, "false"]
    if isinstance(action, argparse._AppendAction) and isinstance(value, (list, tuple)):
        return [word for item in value for word in option_argv(parser, name, item, where)]
    if isinstance(value, (dict, list, tuple)) or isinstance(value, bool):
        raise ConfigError(f"{where}: value {value!r} is not a valid {flag} value")
    text = str(value)
    if action.type is not None:
        try:
            converted = action.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: value {value!r} is not a valid {flag} value ({exc})") from None
    else:
        converted = text
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"{where}: value {value!r} is not one of {', '.join(map(str, action.choices))}")
    return [flag, text]


def mapping_to_argv(parser, mapping, where="options"):
    """``{option: value}`` as command-line words for ``parser`` (:func:`option_argv` for each)."""
    out = []
    for name, value in mapping.items():
        label = str(name) if str(name).isprintable() else repr(str(name))  # an error stays one line
        out += option_argv(parser, name, value, f"{where}: {label}" if where else label)
    return out


def parse_or_raise(parser, argv, where="options"):
    """``parser.parse_args(argv)``; what argparse refuses is a ConfigError naming ``where`` (not a SystemExit)."""
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(list(argv))
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        message = lines[-1] if lines else "invalid options"
        if message.startswith(f"{parser.prog}: error: "):
            message = message[len(f"{parser.prog}: error: "):]
        raise ConfigError(f"{where}: {message}") from None


# ------------------------------------------------------------------ the flags every command shares
def add_output_flags(parser, what="the results", json_help=None, aliases=(), required=False):
    """``-o/--output PATH`` (always writes a file) and ``--json`` (always prints JSON on stdout): every command's output
    vocabulary. ``aliases``: earlier names of ``--output`` (``--report-json``)."""
    group = parser.add_argument_group("output")
    group.add_argument("-o", "--output", *aliases, dest="output", metavar="PATH", required=required,
                       help=f"write {what} as JSON to PATH (times in integer ns)")
    group.add_argument("--json", action="store_true", help=json_help or f"print {what} as JSON on stdout")
    return group


def add_platform_flags(parser, required=False, nodes=True):
    """``--platform NAME`` (a registered platform: ``astra platforms``) and ``--nodes N``."""
    action = parser.add_argument("--platform", required=required, default=None, metavar="NAME",
                                 help="a registered platform (`astra platforms` lists them), e.g. hgx-h100")
    action.completer = platform_names  # what `astra completion`'s script offers
    if nodes:
        parser.add_argument("--nodes", type=positive_int, default=1, metavar="N",
                            help="nodes (scale-up domains, or slices) of --platform (default 1)")


def platform_names(**_context):
    """The registered platforms, for the shell completion of ``--platform``."""
    from astra_sim.platforms import platforms

    return sorted(platforms())


def add_executor_flags(parser):
    """``--jobs N`` / ``--dask ADDRESS`` / ``--executor NAME[:ARG]`` (:mod:`astra_sim.executors`)."""
    group = parser.add_argument_group("executors")
    group.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                       help="run on N local processes")
    group.add_argument("--dask", metavar="ADDRESS",
                       help="run on a Dask cluster: tcp://HOST:8786 (a running `dask scheduler`) or local:N")
    group.add_argument("--executor", metavar="NAME[:ARG]",
                       help="another executor: local[:N], dask:ADDRESS, or a registered one (astra_register_executors)")
    return group
