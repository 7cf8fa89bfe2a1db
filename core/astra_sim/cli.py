"""The ``astra`` command: ``astra run`` (reference-compatible flags) and ``astra plugins``.

Parsing is two-phase, as in pytest: ``-p/--plugin`` values are read first,
the plugin manager is built from them, plugins add ``run`` options through
``astra_add_run_options``, then the full command line is parsed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading

from astra_sim import __version__
from astra_sim.cliutil import non_negative_float, positive_int
from astra_sim.errors import AstraError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: Reference flags that are accepted for script compatibility but have no effect
#: (they have none in the reference's analytical binaries either).
_IGNORED_REFERENCE_FLAGS = ("--logging-configuration", "--logging-folder", "--comm-scale", "--compute-scale")


def _bool(text):
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _plugin_option(parser):
    parser.add_argument(
        "-p",
        "--plugin",
        action="append",
        default=[],
        metavar="NAME",
        help="load only the named plugin (repeatable); -p no:NAME blocks one. "
        "Default: every installed plugin, or $ASTRA_PLUGINS (comma-separated)",
    )


def _add_run_arguments(run):
    ref = run.add_argument_group("reference simulator flags (ASTRA-sim 2.x compatible)")
    ref.add_argument("--workload-configuration", required=True, metavar="PREFIX",
                     help="trace prefix: rank r reads PREFIX.r.et")
    ref.add_argument("--system-configuration", metavar="SYS.json",
                     help="required unless a plugin option (e.g. --platform) provides it")
    ref.add_argument("--network-configuration", metavar="NET.yml",
                     help="required unless a plugin option (e.g. --platform) provides it")
    ref.add_argument("--remote-memory-configuration", metavar="MEM.json")
    ref.add_argument("--comm-group-configuration", metavar="GROUPS.json",
                     help="JSON {\"id\": [npus]}; a value containing 'empty' disables groups")
    ref.add_argument("--num-queues-per-dim", type=positive_int, default=1, metavar="N")
    ref.add_argument("--injection-scale", type=non_negative_float, default=1.0, metavar="X",
                     help="multiplies endpoint-delay")
    ref.add_argument("--rendezvous-protocol", type=_bool, nargs="?", const=True, default=False,
                     metavar="BOOL", help="8 KiB handshake before every send")
    for flag in _IGNORED_REFERENCE_FLAGS:
        ref.add_argument(flag, help=argparse.SUPPRESS)
    ours = run.add_argument_group("astra-sim-py options")
    ours.add_argument("--network-backend", default="analytical", metavar="NAME",
                      help="network backend by name (default: analytical); see `astra plugins`")
    ours.add_argument("--memory-backend", default=None, metavar="NAME",
                      help="remote-memory backend (default: analytical if installed, else none)")
    ours.add_argument("--compute-model", default=None, metavar="NAME",
                      help="compute model (default: roofline if roofline-enabled, else replay)")
    ours.add_argument("--workload-format", default=None, metavar="NAME",
                      help="trace format (default: detected from the files)")
    ours.add_argument("--report-json", metavar="PATH", help="write the report (per-rank times, settings) as JSON")
    ours.add_argument("--astra-sim-log", action="store_true",
                      help="also print the reference's 'sys[i] finished, T cycles, ...' lines")
    ours.add_argument("--max-table-ranks", type=positive_int, default=16, metavar="N",
                      help="rows of the terminal's rank table (ranks with identical numbers share a row; default 16)")
    ours.add_argument("--host-launch-us", type=float, default=None, metavar="US",
                      help="the host launches one GPU operation per US microseconds, in order, ahead of the GPU; "
                           "a kernel starts no earlier than its launch (default: off; --platform sets a measured "
                           "value)")
    ours.add_argument("--host-sync-us", type=float, default=None, metavar="US",
                      help="with the host model: after a send/receive whose node has host_waits the host waits "
                           "for it and US more microseconds (a training loop's synchronize after its pipeline "
                           "transfers)")
    ours.add_argument("--no-fold", action="store_true",
                      help="simulate every rank, even those a symmetry makes identical to another "
                           "(by default one rank per class of symmetric ranks is simulated; same results)")
    ours.add_argument("--allow-unmatched", action="store_true",
                      help="a send never received (or a receive never sent) is a warning listed in the report's "
                           "unmatched_messages, not an error (exit 3)")
    ours.add_argument("--partial-report", action="store_true",
                      help="when the run is interrupted (Ctrl-C, SIGTERM), still write --report-json with what is "
                           "known so far, marked \"complete\": false (default: no report)")
    ours.add_argument("--timeline", metavar="PATH",
                      help="write the run as Chrome trace events (PATH.json or PATH.json.gz; Perfetto, "
                           "chrome://tracing), or with --timeline-format kineto a folder of per-rank traces")
    ours.add_argument("--timeline-format", choices=("chrome", "kineto"), default="chrome",
                      help="chrome (default): one trace-event file; kineto: one PyTorch-profiler-shaped trace per "
                           "rank (HolisticTraceAnalysis reads the folder)")
    ours.add_argument("--timeline-ranks", metavar="RANGES",
                      help="ranks the timeline holds, e.g. 0-7,64 (default: all)")
    ours.add_argument("--critical-path", action="store_true",
                      help="report the chain of nodes and waits that sets the last finish time")
    ours.add_argument("--no-breakdown", action="store_true",
                      help="do not record where each rank's time goes (the report's breakdown)")
    ours.add_argument("-q", "--quiet", action="store_true", help="no summary table")


def build_parser(pm=None):
    parser = argparse.ArgumentParser(
        prog="astra",
        description="astra-sim-py: simulate distributed ML workloads (Chakra traces) on modelled systems.",
    )
    parser.add_argument("--version", action="version", version=f"astra-sim-py {__version__}")
    _plugin_option(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run a simulation", description="Run a simulation.")
    _plugin_option(run)
    _add_run_arguments(run)
    if pm is not None:
        try:
            pm.hook.astra_add_run_options(parser=run)
        except argparse.ArgumentError as exc:
            from astra_sim.errors import PluginError

            raise PluginError(f"a plugin's astra_add_run_options failed: {exc}") from None
    plugins = sub.add_parser("plugins", help="list installed plugins and what they provide")
    _plugin_option(plugins)
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    if pm is not None:
        try:
            pm.hook.astra_register_commands(subparsers=sub)
        except argparse.ArgumentError as exc:
            from astra_sim.errors import PluginError

            raise PluginError(f"a plugin's astra_register_commands failed: {exc}") from None
    return parser


def _plugin_selection(argv):
    """First phase: find every -p/--plugin value anywhere on the command line."""
    values = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-p", "--plugin") and i + 1 < len(argv):
            values.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--plugin="):
            values.append(arg.split("=", 1)[1])
        elif arg.startswith("-p") and len(arg) > 2:
            values.append(arg[2:])
        i += 1
    if not values and os.environ.get("ASTRA_PLUGINS") is not None:
        env = os.environ["ASTRA_PLUGINS"]
        values = [v for v in env.split(",") if v.strip()] or [""]
        if values == [""]:
            return [], []
    from astra_sim.plugins import parse_plugin_args

    selected, blocked = parse_plugin_args(values)
    return selected, blocked


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _main(argv)
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
    """The reader of stdout went away (``astra run ... | head -1``): stop quietly, as a command
    killed by SIGPIPE would (exit 141), without a traceback now or at interpreter exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a real file (tests); nothing is flushed to it at exit
    return 141


def warning(message):
    """Print one warning on stderr, the way every astra command does."""
    print(f"astra: warning: {message}", file=sys.stderr)


def _main(argv):
    from astra_sim.plugins import make_plugin_manager

    selected, blocked = _plugin_selection(argv)
    pm = make_plugin_manager(selected, blocked)
    parser = build_parser(pm)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "plugins":
        return _cmd_plugins(pm, args)
    if args.command == "run":
        return _cmd_run(pm, args)
    args.plugin_manager = pm  # a plugin command may call hooks (e.g. `astra platforms` gathers astra_platforms)
    return args.run_command(args)


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
        provides = "\n".join(f"{role}: {', '.join(names)}" for role, names in by_role.items())
        table_rows.append([row["name"], row["distribution"], row["version"], provides, row["status"]])
    columns = [Column("name"), Column("distribution", drop=1), Column("version", number=True, drop=2),
               Column("provides"), Column("status")]
    print_table("astra-sim-py plugins", columns, table_rows)
    return 0


#: Reference flags whose value changes nothing here (nor in the reference's analytical binaries),
#: with the value that is the reference's default.
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
    from astra_sim.simulation import Simulation
    from astra_sim.generated import CONFIG_KEYS, GeneratedFile, generated_options, inline_settings, materialized

    early = _no_effect_warnings(args)
    say = (lambda message: None) if args.quiet else warning
    for message in early:
        say(message)
    options = vars(args).copy()
    generated = {}
    defaults = None
    if args.system_configuration is None or args.network_configuration is None:
        provided = pm.hook.astra_provide_configuration(options=options) or {}
        for key in CONFIG_KEYS:
            value = provided.get(key)
            if getattr(args, key) is None and value is not None:
                if isinstance(value, GeneratedFile):
                    generated[key] = value
                else:
                    setattr(args, key, value)
        options.update(provided.get("options") or {})
        if args.compute_model is None and provided.get("compute_model"):  # e.g. --platform implies its GPU model
            args.compute_model = provided["compute_model"]
        defaults = provided.get("defaults")
        generated.update(generated_options(options))
        for key in ("system_configuration", "network_configuration"):
            if getattr(args, key) is None and key not in generated:
                flag = "--" + key.replace("_", "-")
                raise AstraError(f"{flag} is required (or a plugin option that provides it, such as --platform)")
    if args.report_json:  # an output that cannot be written is an error before the simulation
        from astra_sim.analysis.output import check_writable_folder

        check_writable_folder(os.path.dirname(os.path.abspath(args.report_json)), f"--report-json {args.report_json}")
    simulation = None
    with _interruptible() as interrupt, materialized(generated) as paths:
        # generated configurations exist on disk only inside this block (removed however it ends)
        for key, path in paths.items():
            if key.startswith("option:"):
                options[key[len("option:"):]] = path
            else:
                setattr(args, key, path)
        options.update({k: getattr(args, k) for k in ("system_configuration", "network_configuration")})
        try:
            simulation = Simulation(
                args.workload_configuration,
                args.system_configuration,
                args.network_configuration,
                args.remote_memory_configuration,
                args.comm_group_configuration,
                network_backend=args.network_backend,
                memory_backend=args.memory_backend,
                compute_model=args.compute_model,
                workload_format=args.workload_format,
                num_queues_per_dim=args.num_queues_per_dim,
                injection_scale=args.injection_scale,
                rendezvous=args.rendezvous_protocol,
                plugin_manager=pm,
                options=options,
                fold=not args.no_fold,
                on_warning=say,
                allow_unmatched=args.allow_unmatched,
                breakdown=not args.no_breakdown,
                critical_path=args.critical_path,
                timeline=args.timeline,
                timeline_format=args.timeline_format,
                timeline_ranks=args.timeline_ranks,
            )
            report = simulation.run()
        except Interrupted as stop:
            return _interrupted(stop, simulation, args, generated, early, paths=paths)
        interrupt.deferred = True  # from here on a signal waits until the report is written
        if defaults:
            report.settings["platform_defaults"] = dict(defaults)
        report.warnings[:0] = [m for m in early if m not in report.warnings]
        inline_settings(report.settings, generated, paths)
        if args.report_json:
            _write_report(report, args.report_json)
    if interrupt.pending is not None:
        return _interrupted(interrupt.pending, None, args, generated, early, written=bool(args.report_json))
    if args.astra_sim_log:
        # stdout carries exactly the reference's lines, so scripts that diff them keep working;
        # the summary goes to stderr then.
        sys.stdout.write("".join(line + "\n" for line in report.astra_sim_log_lines(prefixed=True)))
        sys.stdout.flush()
    if not args.quiet:
        from astra_sim.summary import print_summary

        print_summary(report, args.max_table_ranks, stderr=args.astra_sim_log)
    return 0


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM during ``astra run``: raised in the main thread at once, so the run
    stops within a moment and every ``finally`` (temporary files, generated configurations) runs."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum


class _InterruptState:
    deferred = False  # set once the run is over: a first signal then waits until the report is written
    pending = None


@contextlib.contextmanager
def _interruptible():
    """SIGINT and SIGTERM raise :class:`Interrupted` inside the block (SIGTERM would otherwise kill the
    process without cleaning up); the previous handlers come back after it."""
    state = _InterruptState()
    if threading.current_thread() is not threading.main_thread():
        yield state  # signal handlers belong to the main thread; leave them alone
        return

    def handler(signum, _frame):
        if state.deferred and state.pending is None:
            state.pending = Interrupted(signum)
            return
        raise Interrupted(signum)

    previous = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, handler)
        yield state
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _write_report(report, path):
    try:
        report.write_json(path)
    except OSError as exc:
        raise AstraError(f"cannot write --report-json {path}: {exc}") from None


def _interrupted(stop, simulation, args, generated, early, written=False, paths=None):
    """Ctrl-C or SIGTERM: nothing half-done is written. With --partial-report, --report-json gets what
    the run knew so far, marked ``"complete": false``; otherwise no report at all."""
    from astra_sim.generated import inline_settings

    what = f"interrupted by {stop.signal_name}"
    if written:
        print(f"astra: {what} after the report was written; stopped", file=sys.stderr)
    elif args.report_json and args.partial_report and simulation is not None:
        report = simulation.partial_report(what)
        report.warnings[:0] = [m for m in early if m not in report.warnings]
        inline_settings(report.settings, generated, paths)
        _write_report(report, args.report_json)
        print(f"astra: {what}; partial report (complete: false) written to {args.report_json}", file=sys.stderr)
    else:
        hint = " (--partial-report writes what is known so far)" if args.report_json else ""
        print(f"astra: {what}; no report written{hint}", file=sys.stderr)
    return stop.exit_code


if __name__ == "__main__":
    sys.exit(main())
