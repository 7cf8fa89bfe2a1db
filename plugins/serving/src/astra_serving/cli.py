"""``astra serve``: the command line, a thin layer over :class:`~astra_serving.spec.ServeSpec` (which owns the
options) and :func:`astra_serving.serve` (which runs one); the command adds how the report is shown and written,
and runs a list of rates (``--qps 1,2,4``) as a QPS sweep, one spec per rate."""

from __future__ import annotations

import argparse
import json
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


def _cmd_serve(args):
    """Run each spec; the summary on stdout (on stderr with --json, whose JSON owns stdout); -o writes the report
    (a QPS sweep's: ``{"qps_sweep": [...]}``)."""
    from astra_sim.safeio import write_text_atomic

    from .deployment import serve
    from .metrics import UNITS, describe

    shown = sys.stderr if args.json else sys.stdout
    reports = []
    for spec in specs_of(args):
        report, requests = serve(spec)
        reports.append(report)
        if not args.quiet:
            d = report["deployment"]
            print(f"{d['model']} on {d['gpus']} x {d['gpu']} ({d['description']})"
                  + (f" at {spec.qps:g} QPS" if spec.qps is not None else "") + f"; step simulator: "
                  f"{report['step_simulator']['shapes_simulated']} shapes for "
                  f"{report['step_simulator']['lookups']} iterations; {report['wall_s']:.1f} s", file=shown)
            print(describe(report), file=shown)
            thin = small_sample_warning(report.get("requests") or 0)
            if thin:
                from astra_sim.cliutil import warning

                warning(thin)
    out = reports[0] if len(reports) == 1 else {"units": dict(UNITS), "qps_sweep": reports}
    if args.output:
        write_text_atomic(args.output, json.dumps(out, indent=1) + "\n")
    if args.requests_csv:
        if len(reports) > 1:
            raise ConfigError("--requests-csv is for one QPS (a sweep has one set of requests per QPS)")
        from .requests import REQUEST_COLUMNS, request_rows

        rows = [",".join(REQUEST_COLUMNS)] + [",".join(str(v) for v in row) for row in request_rows(requests)]
        write_text_atomic(args.requests_csv, "\n".join(rows) + "\n")
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


def serve(args):
    """``(report, requests)`` of parsed ``astra serve`` arguments or a :class:`ServeSpec` (the earlier entry
    point; new code calls :func:`astra_serving.serve` with a spec)."""
    from .deployment import serve as serve_spec

    return serve_spec(args if isinstance(args, ServeSpec) else ServeSpec.from_cli_args(args))


def small_sample_warning(requests):
    """A warning when the p99 of ``requests`` rests on fewer than 10 of them (under 1,000 requests), else None."""
    if 0 < requests < 1000:
        tail = max(1, requests // 100)
        return (f"the p99 latencies of {requests} requests rest on the slowest {tail} of them; --requests 1000 or "
                "more gives a p99 that a few requests do not decide")
    return None
