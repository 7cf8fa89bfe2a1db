"""``astra validate``: run the registry's published cases and print measured, simulated and error."""

from __future__ import annotations

import json
import statistics
import sys

from astra_sim import hookimpl


@hookimpl
def astra_register_commands(subparsers):
    p = subparsers.add_parser(
        "validate", help="compare simulated with published measurements (training steps, NCCL bandwidths)",
        description="Run the published cases that ship with astra-sim-py (docs/validation.md names every "
        "case's source, hardware and configuration) and print measured, simulated and error, with the median "
        "and the worst |error|. Long cases (MLPerf, the 175B row: minutes each) run only with --all or --only.")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="run these cases (repeatable, also comma-separated); see --list")
    p.add_argument("--all", action="store_true", help="also the long cases")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (times in s, error as a fraction)")
    p.add_argument("--cases", metavar="YAML", help="another registry file of the same layout")
    p.set_defaults(run_command=_cmd_validate)


def _cmd_validate(args):
    from astra_sim.cliutil import write_text_atomic
    from astra_sim.errors import ConfigError
    from astra_sim.termtable import Column, print_table

    from astra_validation.registry import load_cases
    from astra_validation.runner import run_case

    cases = load_cases(args.cases)
    names = [n for item in args.only for n in item.split(",") if n]
    unknown = sorted(set(names) - {c.name for c in cases})
    if unknown:
        raise ConfigError(f"unknown validation case {unknown[0]!r}; known: {', '.join(c.name for c in cases)}")
    if args.list:
        for case in cases:
            print(f"{case.name:32s} {case.kind:10s} {'long ' if case.long else ''}{case.hardware}")
        return 0
    chosen = [c for c in cases if (c.name in names if names else (args.all or not c.long))]
    results = []
    for case in chosen:
        print(f"astra validate: {case.name} ...", file=sys.stderr, flush=True)
        results.append(run_case(case))
    rows = [[r["name"], f"{r['gpus']}", _seconds(r["measured_s"]), _seconds(r["simulated_s"]),
             f"{100 * r['error']:+.1f} %"] for r in results]
    print_table("astra validate: simulated against measured", [
        Column("case"), Column("GPUs", number=True, drop=2), Column("measured", number=True),
        Column("simulated", number=True), Column("error", number=True)], rows)
    errors = [abs(r["error"]) for r in results]
    if errors:
        worst = max(results, key=lambda r: abs(r["error"]))
        print(f"median |error| {100 * statistics.median(errors):.1f} %, worst {100 * abs(worst['error']):.1f} % "
              f"({worst['name']}), {len(results)} cases")
    if args.json:
        summary = {"median_abs_error": statistics.median(errors) if errors else None,
                   "max_abs_error": max(errors) if errors else None}
        write_text_atomic(args.json, json.dumps({"cases": results, "summary": summary}, indent=1) + "\n")
    return 0


def _seconds(value):
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} us"
