"""``astra cluster SPEC.yaml [-o OUT.json] [--json]``: the command line (terminal in human units, JSON in ns)."""

from __future__ import annotations

import json
import sys

from astra_sim.humanize import format_ns


def add_command(sub):
    from astra_sim.cliutil import add_output_flags

    p = sub.add_parser(
        "cluster", help="several jobs on one cluster: placement, shared links, stragglers, failures and goodput",
        description="Answer a cluster spec (YAML): place its jobs on the machine, simulate them together against "
        "each alone (slowdown, links they share), their step-time distribution under straggling GPUs, and the "
        "cluster over time (arrivals, scheduler, failures, checkpoints, goodput). See docs/clusters.md.")
    p.add_argument("spec", metavar="SPEC.yaml", help="the cluster spec")
    add_output_flags(p, "the cluster report")
    p.set_defaults(run_command=_cmd_cluster)


def _cmd_cluster(args):
    import os

    from astra_sim.errors import ConfigError
    from astra_sim.outputs import check_writable_folder
    from astra_sim.safeio import write_text_atomic

    from .cluster import run_cluster

    if args.output:  # before any simulation: a typo in -o must not cost the whole run
        check_writable_folder(os.path.dirname(os.path.abspath(args.output)), f"-o {args.output}")
    report = run_cluster(args.spec)
    text = json.dumps(report, indent=1)
    if args.output:
        try:
            write_text_atomic(args.output, text + "\n")
        except OSError as exc:  # late (a full disk): the atomic writer left no partial file; stdout keeps the report
            print(text)
            raise ConfigError(f"-o {args.output}: cannot write: {exc.strerror or exc}; the report is on stdout "
                              "instead") from None
    if args.json:
        print(text)
    else:
        print_report(report, args.output)
    return 0


def print_report(report, output=None, file=None):
    """The report for a terminal."""
    out = file or sys.stdout
    c = report["cluster"]
    machine = f"{c['platform']} x {_count(c['nodes'], 'node')}" if c["platform"] else _count(c["nodes"], "node")
    print(f"cluster: {machine}, {c['gpus']} GPUs ({c['gpus_per_node']} per node), network {c['network_backend']}, "
          f"placement {c['placement']}, scheduler {c['scheduler']}, seed {c['seed']}", file=out)
    if c.get("failed_links"):
        how = "their dimensions' bandwidth lowered" if c["network_backend"] == "analytical" else "routed around"
        print(f"  failed links ({how}): " + ", ".join(f"{a}-{b}" for a, b in c["failed_links"][:6])
              + (", ..." if len(c["failed_links"]) > 6 else ""), file=out)
    for row in report["placement"]:
        where = (f"{_count(row['gpus'], 'GPU')} on {_count(row['nodes'], 'node')}" if row["placed"] else
                 "does not fit with the others")
        print(f"  {row['job']}: {where}", file=out)
    if "corun" in report:
        print("together vs alone (same GPUs):", file=out)
        for row in report["corun"]["jobs"]:
            print(f"  {row['job']}: step {format_ns(row['together_step_ns'])} together, "
                  f"{format_ns(row['alone_step_ns'])} alone: slowdown {row['slowdown']:.3f}x", file=out)
        shared = report["corun"]["shared_links"]
        print(f"  links shared: {len(shared)}" + ("" if not shared else " (" + ", ".join(
            f"{s['src']}->{s['dst']} by {'+'.join(s['jobs'])}" for s in shared[:4]) + (", ..." if len(shared) > 4
                                                                                      else "") + ")"), file=out)
    for row in report.get("stragglers", []):
        pace = ", ".join(f"GPU {p['gpu']} ({p['draws']} draws)" for p in row["pace_setters"][:3]) or "none"
        jitter = f" (per-op jitter sigma {row['op_jitter_sigma']:g})" if row.get("op_jitter_sigma") else ""
        print(f"stragglers {row['job']}: {row['draws']} draws{jitter}: step median {format_ns(row['median_step_ns'])}, "
              f"p95 {format_ns(row['p95_step_ns'])}, p99 {format_ns(row['p99_step_ns'])} (nominal "
              f"{format_ns(row['nominal_step_ns'])}); pace set by {pace}", file=out)
    if "timeline" in report:
        t = report["timeline"]
        goodput = t["cluster_goodput"]
        mean = t["mean_completion_ns"]
        print(f"over {format_ns(t['end_ns'])}: {_count(t['failures'], 'failure')}, "
              f"{t['jobs_done']} of {len(t['jobs'])} jobs done"
              + (f", mean completion {format_ns(mean)}" if mean else "")
              + (f", cluster goodput {goodput:.1%}" if goodput is not None else ""), file=out)
        cables = t.get("cable_events") or []
        if cables:
            down = sum(1 for event in cables if event["down"])
            how = "lowering their dimensions' bandwidth" if c["network_backend"] == "analytical" else "routed around"
            print(f"  cables {how}: {down} down, {len(cables) - down} back (jobs ran on at their new steps)",
                  file=out)
        for row in t["jobs"]:
            done = f"done in {format_ns(row['completion_ns'])}" if row["end_ns"] is not None else row["state"]
            good = f", goodput {row['goodput']:.1%}" if row["goodput"] is not None else ""
            every = f", checkpoint every {row['interval_steps']} steps" if row["interval_steps"] else ""
            print(f"  {row['job']}: {done}, {row['useful_steps']}/{row['steps']} steps, "
                  f"{_count(row['failures'], 'failure')}"
                  f"{every}{good}", file=out)
    for message in report.get("warnings", [])[:5]:
        print(f"warning: {message}", file=sys.stderr)
    print(f"distinct steps simulated: {report['distinct_steps_simulated']} ({report['wall_s']:.1f} s)"
          + (f"; wrote {output}" if output else ""), file=out)


def _count(n, noun):
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
