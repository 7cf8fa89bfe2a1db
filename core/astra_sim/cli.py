"""The ``astra`` command: ``astra run`` (reference-compatible flags), ``astra plugins``, plugins' commands. Parsing is
two-phase, as in pytest: ``-p/--plugin`` values first, then the full command line with the plugins' options."""

from __future__ import annotations

import argparse
import atexit
import gc
import itertools
import json
import os
import signal
import sys
import time

from astra_sim import __version__
from astra_sim.cliutil import positive_int, subcommand_action, warning
from astra_sim.errors import AstraError


def _plugin_option(parser):
    parser.add_argument("-p", "--plugin", action="append", default=[], metavar="NAME",
                        help="load only the named plugin (repeatable); -p no:NAME blocks one. "
                             "Default: every installed plugin, or $ASTRA_PLUGINS (comma-separated)")


def _add_run_arguments(run):
    """``astra run``: the spec's options (:meth:`RunSpec.add_cli_args`) and how to show or write the result."""
    from astra_sim.spec import RunSpec

    RunSpec.add_cli_args(run)
    out = run.add_argument_group("output")
    out.add_argument("-o", "--output", "--report-json", dest="report_json", metavar="PATH",
                     help="write the report (per-rank times in ns, settings) as JSON to PATH (--report-json: the "
                          "same, its earlier name)")
    out.add_argument("--json", action="store_true", help="print the report as JSON on stdout (no table)")
    out.add_argument("--per-rank", action="store_true",
                     help="-o/--json list every rank (\"ranks\"); by default ranks with equal numbers share one "
                          "\"rank_classes\" entry (a 1024-rank report shrinks from megabytes to kilobytes; "
                          "astra_sim.report.read_report reads either)")
    out.add_argument("--max-table-ranks", type=positive_int, default=16, metavar="N",
                     help="rows of the terminal's rank table (ranks with identical numbers share a row; default 16)")
    out.add_argument("--partial-report", action="store_true",
                     help="when the run is interrupted (Ctrl-C, SIGTERM), still write --output with what is "
                          "known so far, marked \"complete\": false (default: no report)")
    out.add_argument("-q", "--quiet", action="store_true", help="no summary table")


def build_parser(pm=None, plugin_commands=True):
    """The ``astra`` parser; ``plugin_commands=False`` leaves out the plugins' commands (building their parsers is a
    quarter of a short ``astra run``'s start-up)."""
    from astra_sim.spec import call_parser_hook

    parser = argparse.ArgumentParser(prog="astra", description="astra-sim-py: simulate distributed ML workloads "
                                                               "(Chakra traces) on modelled systems.")
    parser.add_argument("--version", action="version", version=f"astra-sim-py {__version__}")
    _plugin_option(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run a simulation", description="Run a simulation.")
    _plugin_option(run)
    _add_run_arguments(run)
    if pm is not None:
        call_parser_hook(pm, "astra_add_run_options", parser=run)
    plugins = sub.add_parser("plugins", help="list installed plugins and what they provide")
    _plugin_option(plugins)
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    completion = sub.add_parser("completion", help="print the shell completion script for bash, zsh or fish",
                                description="Print the script that completes astra's commands, flags and choices "
                                            "in your shell. bash/zsh: eval \"$(astra completion bash)\" in "
                                            "~/.bashrc or ~/.zshrc; fish: astra completion fish | source.")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    if pm is not None and plugin_commands:
        call_parser_hook(pm, "astra_register_commands", subparsers=sub)
    return parser


def _plugin_selection(argv):
    """First phase: find every -p/--plugin value anywhere on the command line."""
    values = []
    words = iter(argv)
    for arg in words:
        if arg in ("-p", "--plugin"):
            values.extend(itertools.islice(words, 1))  # the next word, when there is one
        elif arg.startswith("--plugin="):
            values.append(arg.split("=", 1)[1])
        elif arg.startswith("-p") and len(arg) > 2:
            values.append(arg[2:])
    if not values and "ASTRA_PLUGINS" in os.environ:
        values = os.environ["ASTRA_PLUGINS"].split(",")
        if not any(value.strip() for value in values):
            return [], []  # set but empty: no plugin beyond the default ones
    from astra_sim.plugins import parse_plugin_args

    return parse_plugin_args(values)


def main(argv=None):
    started = time.monotonic()  # the command's start: loading the plugins is waiting too (the progress line)
    if argv is None:  # the astra command, not an in-process caller: freeze the heap at exit (atexit runs before the
        atexit.register(gc.freeze)  # interpreter's last cyclic collection, which then skips all the run kept)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # answered before any plugin loads: scripts call it to probe the install
        print(f"astra-sim-py {__version__}")
        return 0
    try:
        code = _main(argv, started)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit flush
        return code
    except AstraError as exc:
        print(f"astra: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print("astra: interrupted", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed():
    """The reader of stdout went away (``| head -1``): stop quietly as SIGPIPE would (exit 141), without traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a real file (tests); nothing is flushed to it at exit
    return 141


def _main(argv, started=None):
    from astra_sim.plugins import make_plugin_manager

    selected, blocked = _plugin_selection(argv)
    pm = make_plugin_manager(selected, blocked)
    completing = "_ARGCOMPLETE" in os.environ
    parser = build_parser(pm, plugin_commands=completing or _command_word(argv) != "run")
    if completing:  # the shell asks for completions (`astra completion`): answer, then exit
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    import tempfile

    from astra_sim.generated import reclaim_all_leftovers

    reclaim_all_leftovers(tempfile.gettempdir())  # what a SIGKILLed command of any kind left behind
    if args.command == "plugins":
        return _cmd_plugins(pm, args)
    if args.command == "completion":
        import argcomplete

        sys.stdout.write(argcomplete.shellcode(["astra"], shell=args.shell))
        return 0
    from astra_sim.progress import activity

    # A command that may take a while says what it does (stderr); -q and ASTRA_PROGRESS=0 keep it quiet.
    shown = not (getattr(args, "quiet", False) or getattr(args, "own_progress", False))
    with activity(_command_name(parser, argv, args.command), enabled=shown, since=started):
        if args.command == "run":
            return _cmd_run(pm, args)
        args.plugin_manager = pm  # a plugin command may use the loaded plugins (registries, hooks)
        return args.run_command(args)


def _command_word(argv):
    """The command ``argv`` names (its first word that is not an option or a -p/--plugin value), or None."""
    words = iter(argv)
    for arg in words:
        if arg in ("-p", "--plugin"):
            next(words, None)  # its value
        elif not arg.startswith("-"):
            return arg
    return None


def _command_name(parser, argv, command):
    """The command and its subcommand (``astra workload llm``), as the progress line names them."""
    words = ["astra", command]
    chosen = _subcommand_choices(parser).get(command)
    after = argv[argv.index(command) + 1:] if command in argv else []
    if chosen is not None and after and after[0] in _subcommand_choices(chosen):
        words.append(after[0])
    return " ".join(words)


def _subcommand_choices(parser):
    """The parser's subcommands: ``{name: subparser}``."""
    action = subcommand_action(parser)
    return dict(action.choices) if action is not None else {}


def _cmd_plugins(pm, args):
    from astra_sim.plugins import describe_plugins

    rows = describe_plugins(pm)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    from astra_sim.termtable import Column, print_table

    table_rows = []
    for row in rows:
        by_role = {}
        for item in row["provides"]:
            role, _, name = item.partition(":")
            by_role.setdefault(role, []).append(name)
        provides = "\n".join(f"{role}: {len(names)} (--json lists them)" if role == "metric" else
                              f"{role}: {', '.join(names)}" for role, names in by_role.items())
        table_rows.append([row["name"], row["distribution"], row["version"], provides, row["status"]])
    columns = [Column("name"), Column("distribution", drop=1), Column("version", number=True, drop=2),
               Column("provides"), Column("status")]
    print_table("astra-sim-py plugins", columns, table_rows)
    return 0


#: Reference flags whose value changes nothing (nor in the reference's analytical binaries)
_NO_EFFECT_FLAGS = {"comm_scale": "--comm-scale", "compute_scale": "--compute-scale"}


def _no_effect_warnings(args):
    out = []
    for key, flag in _NO_EFFECT_FLAGS.items():
        value = getattr(args, key, None)
        if value is None:
            continue
        try:
            default = float(value) == 1.0
        except ValueError:
            default = False
        if not default:
            out.append(f"{flag}={value} has no effect: the reference's analytical binaries ignore it too; "
                       "scale the trace instead (`astra workload convert-text --comm-scale/--compute-scale`)")
    return out


def _cmd_run(pm, args):
    from astra_sim.executors import Stopped, stop_on_signals
    from astra_sim.runner import Run
    from astra_sim.spec import RunSpec

    early = _no_effect_warnings(args)
    quiet = args.quiet or args.json
    say = (lambda message: None) if args.quiet else warning
    for message in early:
        say(message)
    if args.report_json:  # an output that cannot be written is an error before the simulation
        from astra_sim.outputs import check_writable_folder

        check_writable_folder(os.path.dirname(os.path.abspath(args.report_json)), f"--output {args.report_json}")
    run = None
    # SIGINT and SIGTERM stop the run at once (SIGTERM would otherwise kill it without cleaning up); every
    # signal stops it, even during the clean-up
    with stop_on_signals((signal.SIGINT, signal.SIGTERM), once=False) as interrupt:
        try:
            run = Run(RunSpec.from_cli_args(args), pm, on_warning=say)
            report = run.execute()
        except Stopped as stop:
            return _interrupted(stop, run, args, early)
        interrupt.deferred = True  # from here on a signal waits until the report is written
        report.warnings[:0] = [m for m in early if m not in report.warnings]
        if args.report_json:
            _write_report(report, args.report_json, args.per_rank)
    if interrupt.pending is not None:
        return _interrupted(interrupt.pending, None, args, early, written=bool(args.report_json))
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(per_rank=args.per_rank), indent=1) + "\n")
    lines = report.stdout_lines  # an output format's (the reference log's)
    if lines is not None:
        # stdout carries exactly those lines, so scripts that diff them keep working; the summary goes to stderr
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()
    if not quiet:
        from astra_sim.summary import print_summary

        print_summary(report, args.max_table_ranks, stderr=lines is not None)
    return 0


def _write_report(report, path, per_rank=False):
    try:
        report.write_json(path, per_rank)
    except OSError as exc:
        raise AstraError(f"cannot write --output {path}: {exc}") from None


def _interrupted(stop, run, args, early, written=False):
    """Ctrl-C or SIGTERM: nothing half-done is written; --partial-report writes what the run knew, marked
    ``"complete": false``."""
    what = f"interrupted by {stop.signal_name}"
    partial = run.partial_report(what) if (args.report_json and args.partial_report and run is not None) else None
    if written:
        print(f"astra: {what} after the report was written; stopped", file=sys.stderr)
    elif partial is not None:
        partial.warnings[:0] = [m for m in early if m not in partial.warnings]
        _write_report(partial, args.report_json, args.per_rank)
        print(f"astra: {what}; partial report (complete: false) written to {args.report_json}", file=sys.stderr)
    else:
        hint = " (--partial-report writes what is known so far)" if args.report_json and not args.partial_report else ""
        print(f"astra: {what}; no report written{hint}", file=sys.stderr)
    return stop.exit_code


if __name__ == "__main__":
    sys.exit(main())
