"""``astra serve``: the command line, a thin layer over :class:`~astra_serving.spec.ServeSpec` (which owns the
options) and :func:`astra_serving.serve` (which runs one); the command adds how the report is shown and written,
and runs a list of rates (``--qps 1,2,4``) as a QPS sweep, one spec per rate."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from astra_sim.cliutil import add_output_flags
from astra_sim.errors import ConfigError

from .spec import ServeSpec


def add_serve_command(sub):
    p = sub.add_parser(
        "serve", help="simulate an LLM serving deployment over time (requests, continuous batching, paged KV cache, "
        "replicas and routers, prefill/decode disaggregation)",
        description="Simulate requests served by replicas of a model: a vLLM-style engine per replica (waiting "
        "queue, token budget, chunked prefill, paged KV cache sized from the GPU's memory, preemption) whose every "
        "iteration is timed by the step simulator (astra workload llm + astra run's engine) in this process, "
        "memoised by bucketed batch shape. Prints TTFT, TPOT, end-to-end latency and throughput (ms); -o/--output "
        "writes the whole report as JSON, --json prints it (times in integer ns; docs/serving.md).")
    ServeSpec.add_cli_args(p)
    out = add_output_flags(p, "the report", aliases=("--report-json",),
                           json_help="print the report as JSON on stdout (times in integer ns; the summary goes to "
                           "stderr)")
    out.add_argument("--requests-csv", metavar="OUT", help="write one row per request (times in ns)")
    out.add_argument("-q", "--quiet", action="store_true", help="no terminal summary")
    p.set_defaults(run_command=_cmd_serve)


def specs_of(args):
    """The specs of parsed ``astra serve`` arguments: one, or one per rate of a ``--qps`` list."""
    from .spec import qps_list_or_error

    rates = [None] if args.qps is None else list(qps_list_or_error(args.qps))
    base = ServeSpec.from_cli_args(argparse.Namespace(**{**vars(args), "qps": None}))
    return [base.replace(qps=rate) for rate in rates]


#: ``astra serve``'s flags that write a file, by argparse dest
OUTPUT_FLAGS = {"output": "--output", "requests_csv": "--requests-csv", "save_trace": "--save-trace",
                "timeline": "--timeline"}


def check_outputs(args):
    """The folder of every file the command will write is checked before any step is simulated (a typo or a
    read-only folder must not cost the whole run)."""
    from astra_sim.outputs import check_writable_folder

    for dest, flag in OUTPUT_FLAGS.items():
        path = getattr(args, dest, None)
        if path:
            check_writable_folder(os.path.dirname(os.path.abspath(path)), f"{flag} {path}")


@contextlib.contextmanager
def writing(args, *dests):
    """A write of these outputs that fails late (a full disk) is a one-line error naming them; the atomic writers
    leave no partial file."""
    try:
        yield
    except OSError as exc:
        named = ", ".join(f"{OUTPUT_FLAGS[d]} {getattr(args, d)}" for d in dests if getattr(args, d, None))
        raise ConfigError(f"{named or 'astra serve'}: cannot write: {exc.strerror or exc}") from None


def _cmd_serve(args):
    """Run each spec; the summary on stdout (on stderr with --json, whose JSON owns stdout); -o writes the report
    (a QPS sweep's: ``{"qps_sweep": [...]}``)."""
    from .deployment import serve
    from .metrics import UNITS, describe

    shown = sys.stderr if args.json else sys.stdout
    reports = []
    specs = specs_of(args)
    if args.requests_csv and len(specs) > 1:
        raise ConfigError("--requests-csv is for one QPS (a sweep has one set of requests per QPS)")
    check_outputs(args)
    late = None  # a timeline that failed late: its report is still shown and written, then the error
    for spec in specs:
        try:
            with writing(args, "save_trace", "timeline"):
                report, requests = serve(spec)
        except ConfigError as exc:
            if not hasattr(exc, "served"):
                raise
            late, (report, requests) = exc, exc.served
        reports.append(report)
        if not args.quiet:
            d = report["deployment"]
            print(f"{d['model']} on {d['gpus']} x {d['gpu']} ({d['description']})"
                  + (f" at {spec.qps:g} QPS" if spec.qps is not None else "") + f"; step simulator: "
                  f"{report['step_simulator']['shapes_simulated']} shapes for "
                  f"{report['step_simulator']['lookups']} iterations; {report['wall_s']:.1f} s", file=shown)
            print(describe(report), file=shown)
            for thin in small_sample_warnings(report):
                from astra_sim.cliutil import warning

                warning(thin)
        if late is not None:  # the next rates would fail the same way
            break
    out = reports[0] if len(reports) == 1 else {"units": dict(UNITS), "qps_sweep": reports}
    try:
        _write_report(args, out, requests)
    except ConfigError as exc:  # one line says where both are
        if late is None:
            raise
        raise ConfigError(f"{late}; then {exc}") from None
    if late is not None:
        raise late
    return 0


def _write_report(args, out, requests):
    """-o, --json and --requests-csv: a late failure of -o prints the report on stdout, of the CSV keeps its rows
    in a recovered file (a ConfigError says so)."""
    from astra_sim.safeio import write_or_recover, write_text_atomic

    if args.output:
        try:
            write_text_atomic(args.output, json.dumps(out, indent=1) + "\n")
        except OSError as exc:  # late (a full disk): the simulated report is not lost, stdout gets it
            print(json.dumps(out, indent=1))
            raise ConfigError(f"--output {args.output}: cannot write: {exc.strerror or exc}; the report is on "
                              "stdout instead") from None
    if args.json:
        print(json.dumps(out, indent=1))
    if args.requests_csv:  # after the report is out: a late failure keeps the rows in a recovered file
        from .requests import REQUEST_COLUMNS, request_rows

        rows = [",".join(REQUEST_COLUMNS)] + [",".join(str(v) for v in row) for row in request_rows(requests)]
        write_or_recover(args.requests_csv, ("\n".join(rows) + "\n").encode(), "astra serve", "--requests-csv")


def serve(args):
    """``(report, requests)`` of parsed ``astra serve`` arguments or a :class:`ServeSpec` (the earlier entry
    point; new code calls :func:`astra_serving.serve` with a spec)."""
    from .deployment import serve as serve_spec

    return serve_spec(args if isinstance(args, ServeSpec) else ServeSpec.from_cli_args(args))


#: an SLO's percentile should rest on at least this many requests beyond it (else a few slow ones decide it)
SLO_TAIL_REQUESTS = 100


def small_sample_warning(requests, percentile=99, least=10, slo=None):
    """A warning when fewer than ``least`` of ``requests`` lie beyond the ``percentile`` (the p99 shown: under
    10, i.e. under 1,000 requests; an SLO's percentile, ``slo`` naming its latency: under
    :data:`SLO_TAIL_REQUESTS`), else None."""
    from .metrics import percentile_label

    label = percentile_label(percentile)
    tail = int(requests * (100 - percentile) / 100 + 1e-9)
    if requests <= 0 or tail >= least:
        return None
    needed = -(-round(least * 100 * 1000) // round((100 - percentile) * 1000))
    advice = f"--requests {needed} or more gives a {label} that a few requests do not decide"
    if slo is None:
        return f"the {label} latencies of {requests} requests rest on the slowest {max(1, tail)} of them; {advice}"
    return (f"the {slo} {label} SLO rests on the slowest {max(1, tail)} of {requests} requests (fewer than {least} "
            f"beyond it); {advice}")


def small_sample_warnings(report):
    """The report's small-sample warnings: the p99 shown, and each SLO's percentile (fewer than
    :data:`SLO_TAIL_REQUESTS` requests beyond it)."""
    from .metrics import SLO_METRICS

    out = [small_sample_warning(report.get("requests") or 0)]
    for s in report.get("slo") or []:
        out.append(small_sample_warning(s["requests"], s["percentile"], SLO_TAIL_REQUESTS,
                                        SLO_METRICS[s["metric"]]))
    return list(dict.fromkeys(w for w in out if w))
