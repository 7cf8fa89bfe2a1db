"""``astra validate``: run the registry's published cases and print measured, simulated and error."""

from __future__ import annotations

import contextlib
import json
import os
import sys

from astra_sim import hookimpl
from astra_sim.errors import AstraError, ConfigError


@hookimpl
def astra_register_commands(subparsers):
    p = subparsers.add_parser(
        "validate", help="compare simulated with published measurements (training steps, NCCL bandwidths, serving, "
        "memory peaks, power and energy)",
        description="Run the published cases that ship with astra-sim-py (docs/validation.md names every "
        "case's source, hardware and configuration) and print measured, simulated and error, with the median "
        "and the worst |error| and how many err each way over the check cases (a fit case's source was used to "
        "fit a constant: shown, not counted). Long cases (MLPerf, the 175B row: minutes each) run only with --all "
        "or --only.")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="run these cases (repeatable, also comma-separated); see --list")
    p.add_argument("--all", action="store_true", help="also the long cases")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--cases", metavar="YAML", help="another registry file of the same layout")
    p.add_argument("--cv", action="store_true",
                   help="also leave one source out: refit every constant fitted on a source without it and predict "
                        "that source's cases (sources nothing was fitted on: the plain run)")
    p.add_argument("--save-residuals", metavar="JSON",
                   help="with --cv: write each regime's cross-validated errors here (what astra run's empirical "
                        "90 %% interval of a training step is computed from; the shipped file is "
                        "astra_validation/cases/residuals.json)")
    from astra_sim.cliutil import add_executor_flags, add_output_flags

    add_output_flags(p, "the results (times in integer ns, error as a fraction)")
    add_executor_flags(p)
    p.set_defaults(run_command=_cmd_validate)


@hookimpl(trylast=True)
def astra_run_finish(run, report):
    """A training step simulated on a platform gets the empirical 90 % interval of the registry's cross-validated
    step errors (``stats.step_interval_90_ns``, and a note on ``astra run``'s step time;
    ``astra_validation.intervals``). Runs after the workload generator's hook, whose ``stats.throughput`` says the run
    is a training step."""
    throughput = report.stats.get("throughput")
    if not isinstance(throughput, dict) or throughput.get("mode") != "train" or not run.options.get("platform"):
        return
    from astra_sim.humanize import format_ns

    from astra_validation.intervals import step_interval

    found = step_interval(report.max_finish_ns, "llm_step")
    if found is not None:
        report.stats["step_interval_90_ns"] = found["interval_ns"]
        report.stats["step_interval_90_cases"] = found["cases"]
        low, high = found["interval_ns"]
        report.step_notes.append(f"90 %: {format_ns(low)}-{format_ns(high)}, empirical over {found['cases']} "
                                 "validated steps")


@hookimpl(optionalhook=True)
def astra_serve_intervals(values):
    """The serving plugin's hook (``astra_serving.intervals``; optional: declared when serving asks): the empirical
    90 % interval of each serving metric from its family's cross-validated errors
    (``astra_validation.intervals.serving_intervals``)."""
    from astra_validation.intervals import serving_intervals

    return serving_intervals(values)


@hookimpl
def astra_register_metrics(registry):
    registry.metric("stats.step_interval_90_ns.*", "ns", "empirical 90 % interval of the measured step time: the "
                    "step scaled by the 5th and 95th percentiles of measured / simulated over astra validate's "
                    "cross-validated training-step cases (low, high)")
    registry.metric("stats.step_interval_90_cases", "count", "cross-validated training-step cases behind "
                    "stats.step_interval_90_ns")


def _cmd_validate(args):
    from astra_sim.safeio import write_or_recover, write_text_atomic

    from astra_validation.registry import load_cases
    from astra_validation.summary import summarize

    if args.save_residuals and not args.cv:
        raise ConfigError("--save-residuals needs --cv (the residuals are the errors with each source left out)")
    cases = load_cases(args.cases)
    names = [n for item in args.only for n in item.split(",") if n]
    unknown = sorted(set(names) - {c.name for c in cases})
    if unknown:
        raise ConfigError(f"unknown validation case {unknown[0]!r}; known: {', '.join(c.name for c in cases)}")
    if args.list:
        for case in cases:
            print(f"{case.name:42s} {case.kind:10s} {case.role:5s} {'long ' if case.long else ''}{case.hardware}")
        return 0
    chosen = [c for c in cases if (c.name in names if names else (args.all or not c.long))]
    _check_outputs(args)
    plans = {}
    if args.cv:
        from astra_validation.crossval import plan

        plans = {c.name: plan(c, cases) for c in chosen}
    refitted = [c for c in chosen if plans and plans[c.name][0] == "refit"]
    from astra_sim.executors import Stopped, stop_on_signals

    finished = []  # every case's row as it finishes, for the line an interrupt prints
    try:
        with stop_on_signals():
            results, failed = _run_cases(args, chosen, finished=finished)
            summary = summarize(results)
            if args.cv:
                refits, cv_failed = _run_cases(args, refitted, cv=True, finished=finished)
                failed += cv_failed
                summary["cv"] = _cv_summary(results, plans, {r["name"]: r for r in refits})
    except Stopped as stop:
        _interrupted(args, stop, finished, len(chosen) + len(refitted))
        raise
    text_out = sys.stderr if args.json else sys.stdout  # with --json, stdout carries the JSON alone
    _print_results(results, summary, text_out, stderr=args.json)
    document = json.dumps({"units": {"time": "ns", "memory": "bytes", "error": "fraction"}, "cases": results,
                           "failed": failed, "summary": summary}, indent=1) + "\n"
    if args.output:
        try:
            write_text_atomic(args.output, document)
        except OSError as exc:  # late (a full disk): the cases' results are not lost, stdout gets them
            sys.stdout.write(document)
            raise ConfigError(f"--output {args.output}: cannot write: {exc.strerror or exc}; the results are on "
                              "stdout instead") from None
    if args.json:  # the report is out before the residuals are written
        sys.stdout.write(document)
    if args.save_residuals:
        from astra_validation.intervals import residuals_document

        command = "astra validate --cv " + (f"--only {','.join(c.name for c in chosen)}" if names
                                            else "--all" if args.all else "(the short cases)")
        write_or_recover(args.save_residuals,  # a late failure keeps them in a recovered file, and says where
                         (json.dumps(residuals_document(summary["cv"], command), indent=1) + "\n").encode(),
                         "astra validate", "--save-residuals")
    for r in failed:
        print(f"astra validate: {r['name']} failed: {r['failed']}", file=sys.stderr)
    return 1 if failed else 0


def _check_outputs(args):
    """-o's and --save-residuals' folders are checked before any case runs (a case takes seconds to minutes)."""
    from astra_sim.outputs import check_writable_folder

    for flag, path in (("--output", args.output), ("--save-residuals", args.save_residuals)):
        if path:
            check_writable_folder(os.path.dirname(os.path.abspath(path)), f"{flag} {path}")


@contextlib.contextmanager
def _writing(flag, path):
    """A write that fails late (a full disk) is a one-line error naming the flag; the atomic writer leaves no
    partial file."""
    try:
        yield
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None


def _interrupted(args, stop, finished, total):
    """After a stop signal: the cases finished so far go to -o as a document marked ``complete: false`` (validate
    does not resume: a rerun runs every case), and one line says what was kept."""
    line = f"astra validate: {stop.signal_name}: {len(finished)} of {total} case runs finished"
    if args.output:
        document = {"units": {"time": "ns", "memory": "bytes", "error": "fraction"}, "complete": False,
                    "interrupted_by": stop.signal_name, "cases": [r for r in finished if "failed" not in r],
                    "failed": [r for r in finished if "failed" in r]}
        try:
            with _writing("--output", args.output):
                from astra_sim.safeio import write_text_atomic

                write_text_atomic(args.output, json.dumps(document, indent=1) + "\n")
            line += f", kept in {args.output} (complete: false); rerun the same command to run them all"
        except ConfigError as exc:
            line += f"; nothing kept ({exc})"
    else:
        line += "; nothing kept (-o FILE keeps them); rerun the same command to run them all"
    print(line, file=sys.stderr)


def _run_cases(args, chosen, cv=False, finished=None):
    """``(results, failed)``: the cases run here one after the other, or on the kernel's executors; ``cv``: with
    the constants fitted on each case's source refitted without it. Each row is added to ``finished`` as it
    comes."""
    finished = [] if finished is None else finished
    if args.jobs or args.dask or args.executor:
        results = _run_on_executor(args, chosen, cv, finished)
    else:
        results = []
        for case in chosen:
            print(f"astra validate: {case.name}{' (without its source)' if cv else ''} ...", file=sys.stderr,
                  flush=True)
            results.append(run_named_case((args.cases, case.name, cv)))
            finished.append(results[-1])
    return [r for r in results if "failed" not in r], [r for r in results if "failed" in r]


def _cv_summary(results, plans, refits):
    """``summary.cv``: each case's leave-one-source-out prediction (the plain run where nothing was fitted on its
    source), and the headline and groups over them (fit and check cases alike: all are out of source now)."""
    from astra_validation.registry import TIME_KINDS
    from astra_validation.summary import error_stats, serving_loso

    rows, not_predicted = [], []
    for r in results:
        how, detail = plans[r["name"]]
        if how == "none":
            not_predicted.append({"name": r["name"], "source_id": r["source_id"], "why": detail})
            continue
        if how == "refit" and r["name"] not in refits:
            continue  # its refitted run failed (listed under failed)
        row = refits[r["name"]] if how == "refit" else r
        rows.append({"name": r["name"], "kind": r["kind"], "source_id": r["source_id"], "role": r["role"],
                     "how": how, "refitted": detail, "error": row["error"],
                     **{k: row[k] for k in ("simulated_ns", "simulated_bytes", "simulated_value", "metric")
                        if k in row}})
    groups = {kind: error_stats([r for r in rows if r["kind"] == kind]) for kind in dict.fromkeys(
        r["kind"] for r in rows)}
    return {**error_stats([r for r in rows if r["kind"] in TIME_KINDS]), "groups": groups,
            "serving": serving_loso(rows, results), "predictions": rows, "not_predicted": not_predicted}


def _print_results(results, summary, out, stderr):
    """The tables (times; memory apart) and the summary lines."""
    from astra_sim.humanize import format_ns
    from astra_sim.termtable import Column, print_table

    from astra_validation.summary import cv_lines, describe

    cv = {r["name"]: r for r in summary.get("cv", {}).get("predictions", [])}

    def shown(r, key):
        if r["kind"] == "memory":
            return f"{r[key + '_bytes'] / 1e9:,.2f} GB"
        if "unit" in r:  # a serving case: its metric in its own unit
            return f"{r[key + '_value']:,.1f} {r['unit']}"
        return format_ns(r[key + "_ns"])

    columns = [Column("case (fit: not counted)"), Column("GPUs", number=True, drop=2), Column("measured", number=True),
               Column("simulated", number=True), Column("error", number=True)]
    if cv:
        columns.append(Column("source out", number=True))  # the error with its source left out (--cv)
    for title, part in (("astra validate: simulated against measured",
                         [r for r in results if r["kind"] not in ("memory", "energy")]),
                        ("astra validate: peak memory, estimated against measured",
                         [r for r in results if r["kind"] == "memory"]),
                        ("astra validate: power and energy, simulated against measured",
                         [r for r in results if r["kind"] == "energy"])):
        if not part:
            continue
        rows = [[r["name"] + (" (fit)" if r["role"] == "fit" else ""), f"{r['gpus']}", shown(r, "measured"), shown(r, "simulated"),
                 f"{100 * r['error']:+.1f} %"] + ([f"{100 * cv[r['name']]['error']:+.1f} %" if r["name"] in cv
                                                    else "-"] if cv else []) for r in part]
        print_table(title, columns, rows, stderr=stderr)
    print(describe(summary, "check case") + (f" (and {summary['fit_cases_not_counted']} fit case"
          f"{'s' if summary['fit_cases_not_counted'] != 1 else ''}, shown, not counted)"
          if summary["fit_cases_not_counted"] else ""), file=out)
    for kind, stats in summary["groups"].items():
        if kind in ("memory", "energy"):
            print(f"  {kind} (its own group): {describe(stats, 'check case', 'over', 'under')}", file=out)
        elif stats["cases"] and len(summary["groups"]) > 1:
            print(f"  {kind}: {describe(stats, 'check case')}", file=out)
    if "cv" in summary:
        cv_summary = summary["cv"]
        refitted = sorted({r["source_id"] for r in cv_summary["predictions"] if r["how"] == "refit"})
        print(f"leave one source out: {describe(cv_summary)}; refitted without their source: "
              f"{', '.join(refitted) or 'none'}; every other source: nothing was fitted on it, the plain run",
              file=out)
        for line in cv_lines(cv_summary):
            print(line, file=out)
        for row in cv_summary["not_predicted"]:
            print(f"  {row['name']}: no out-of-source prediction ({row['why']})", file=out)


def _run_on_executor(args, chosen, cv, finished):
    """The cases on the kernel's executors (a local pool, a Dask cluster, a registered one), in registry order."""
    from astra_sim.executors import ExecutorFailure, make_executor

    order = {c.name: i for i, c in enumerate(chosen)}
    results = [None] * len(chosen)
    with make_executor(jobs=args.jobs, dask=args.dask, executor=args.executor) as executor:
        tasks = [((args.cases, c.name, cv), None) for c in chosen]
        for (_, name, _cv), result in executor.run(run_named_case, tasks):
            if isinstance(result, ExecutorFailure):
                result = {"name": name, "failed": result.message}
            print(f"astra validate: {name} done", file=sys.stderr, flush=True)
            results[order[name]] = result
            finished.append(result)
    return results


def run_named_case(task, payload=None):
    """One case by registry path and name (``cv``: with what was fitted on its source refitted without it), here or
    on an executor's worker; a failure is a row, never an exception."""
    from astra_validation.registry import load_cases
    from astra_validation.runner import run_case

    cases_path, name, cv = task
    try:
        cases = load_cases(cases_path)
        case = next(c for c in cases if c.name == name)
        if cv:
            from astra_validation.crossval import run_case_without_source

            return run_case_without_source(case, cases)
        return run_case(case)
    except AstraError as exc:  # one case's failure is reported with the others' results
        return {"name": name, "failed": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the point's own failure is its row
        return {"name": name, "failed": f"{type(exc).__name__}: {exc}"}
