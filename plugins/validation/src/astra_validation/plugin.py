"""``astra validate``: run the registry's published cases and print measured, simulated and error."""

from __future__ import annotations

import json
import statistics
import sys

from astra_sim import hookimpl
from astra_sim.errors import AstraError, ConfigError


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
    p.add_argument("--cases", metavar="YAML", help="another registry file of the same layout")
    from astra_sim.cliutil import add_executor_flags, add_output_flags

    add_output_flags(p, "the results (times in integer ns, error as a fraction)")
    add_executor_flags(p)
    p.set_defaults(run_command=_cmd_validate)


def _cmd_validate(args):
    from astra_sim.safeio import write_text_atomic
    from astra_sim.humanize import format_ns
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
    if args.jobs or args.dask or args.executor:
        results = _run_on_executor(args, chosen)
    else:
        results = []
        for case in chosen:
            print(f"astra validate: {case.name} ...", file=sys.stderr, flush=True)
            try:
                results.append(run_case(case))
            except AstraError as exc:  # one case's failure is reported with the others' results
                results.append({"name": case.name, "failed": str(exc)})
    failed = [r for r in results if "failed" in r]
    results = [r for r in results if "failed" not in r]
    def shown(r, key):
        if "unit" in r:  # a serving case: its metric in its own unit
            return f"{r[key + '_value']:,.1f} {r['unit']}"
        return format_ns(r[key + "_ns"])

    text_out = sys.stderr if args.json else sys.stdout  # with --json, stdout carries the JSON alone
    rows = [[r["name"] + (" (calibration input)" if r.get("calibration_input") else ""), f"{r['gpus']}",
             shown(r, "measured"), shown(r, "simulated"), f"{100 * r['error']:+.1f} %"]
            for r in results]
    print_table("astra validate: simulated against measured", [
        Column("case"), Column("GPUs", number=True, drop=2), Column("measured", number=True),
        Column("simulated", number=True), Column("error", number=True)], rows, stderr=args.json)
    counted = [r for r in results if not r.get("calibration_input")]
    errors = [abs(r["error"]) for r in counted]
    if errors:
        worst = max(counted, key=lambda r: abs(r["error"]))
        print(f"median |error| {100 * statistics.median(errors):.1f} %, worst {100 * abs(worst['error']):.1f} % "
              f"({worst['name']}), {len(counted)} case{'s' if len(counted) != 1 else ''}" + (f" (and {len(results) - len(counted)} that the "
              "calibration uses, not counted)" if len(counted) < len(results) else ""), file=text_out)
    summary = {"median_abs_error": statistics.median(errors) if errors else None,
               "max_abs_error": max(errors) if errors else None}
    document = json.dumps({"units": {"time": "ns", "error": "fraction"}, "cases": results, "failed": failed,
                           "summary": summary}, indent=1) + "\n"
    if args.output:
        write_text_atomic(args.output, document)
    if args.json:
        sys.stdout.write(document)
    for r in failed:
        print(f"astra validate: {r['name']} failed: {r['failed']}", file=sys.stderr)
    return 1 if failed else 0


def _run_on_executor(args, chosen):
    """The cases on the kernel's executors (a local pool, a Dask cluster, a registered one), in registry order."""
    from astra_sim.executors import ExecutorFailure, make_executor

    order = {c.name: i for i, c in enumerate(chosen)}
    results = [None] * len(chosen)
    with make_executor(jobs=args.jobs, dask=args.dask, executor=args.executor) as executor:
        tasks = [((args.cases, c.name), None) for c in chosen]
        for (_, name), result in executor.run(run_named_case, tasks):
            if isinstance(result, ExecutorFailure):
                result = {"name": name, "failed": result.message}
            print(f"astra validate: {name} done", file=sys.stderr, flush=True)
            results[order[name]] = result
    return results


def run_named_case(task, payload=None):
    """One case on an executor's worker, by registry path and name; a failure is a row, never an exception."""
    from astra_validation.registry import load_cases
    from astra_validation.runner import run_case

    cases_path, name = task
    try:
        case = next(c for c in load_cases(cases_path) if c.name == name)
        return run_case(case)
    except Exception as exc:  # noqa: BLE001 - the point's own failure is its row
        return {"name": name, "failed": f"{type(exc).__name__}: {exc}"}

