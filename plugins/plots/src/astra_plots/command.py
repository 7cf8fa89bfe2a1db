"""``astra plot REPORT.json [MORE.json ...] [--timeline T] -o DIR [--svg]``: PNG (and SVG) pictures of a run.

Writes into DIR, each file whole (a temporary name, then renamed):

* ``breakdown.png``: where the time goes, per rank or per group of identical ranks (needs the report's
  breakdown, on by default in ``astra run``);
* ``timeline.png`` (with ``--timeline``): a few ranks over time (``--ranks``), one lane per rank and stream
  (compute, each communicator), receive waits shaded on their communicator's lane;
* ``links.png``: link use over time, for ``congestion`` / ``flow`` runs written with ``--timeline``;
* ``sweep.png`` (several reports): the runs side by side in a table;
* ``latency_cdf.png`` and, for a QPS sweep or several reports, ``throughput_latency.png`` (``astra serve``
  reports): TTFT/TPOT/E2E CDFs and the throughput-latency curve;
* ``sweep_results.png`` (an ``astra sweep`` results file, .csv or .parquet, instead of reports): step time of
  every point, grouped by the axes; for a sweep of serving points (``workload.serve``) ``throughput_latency.png``
  instead, one curve per deployment;
* ``cluster_jobs.png`` and ``cluster_slowdown.png`` (``astra cluster`` reports, one colour each): job completion
  and goodput over the horizon, and each job's step together against alone (:mod:`astra_plots.cluster`).

A file that is not a report (or not a timeline) is an error naming it (exit 2), as is a DIR that cannot be
written, before anything is drawn.
"""

from __future__ import annotations

import functools
import os

from astra_sim import progress
from astra_sim.errors import ConfigError

MAX_TIMELINE_RANKS = 8


def register(subparsers):
    parser = subparsers.add_parser(
        "plot", help="draw a run report: breakdown bars, timeline overview, link heat map, sweep table",
        description="Draw an astra run report (--report-json) as PNG (and SVG with --svg): stacked breakdown "
                    "bars per rank (per group of identical ranks for large runs), a timeline overview of a few ranks "
                    "(--timeline, a file written by astra run --timeline), a link-utilisation heat map (congestion "
                    "and flow runs written with --timeline) and, for several reports, a table of the runs.")
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="report(s) written by astra run --report-json, or one astra sweep results file "
                             "(.csv/.parquet)")
    parser.add_argument("--timeline", metavar="TIMELINE", help="a Chrome timeline of the (first) run (.json or .json.gz)")
    parser.add_argument("--ranks", metavar="RANGES",
                        help="ranks of the timeline overview, e.g. 0-3,64 (default: the slowest rank and the first rank "
                             f"of each group of identical ranks, at most {MAX_TIMELINE_RANKS})")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the pictures (made if needed)")
    parser.add_argument("--svg", action="store_true", help="also write SVG files")
    parser.set_defaults(run_command=run)
    return parser


def run(args):
    from astra_plots.inputs import read_report, read_timeline

    from astra_sim.outputs import check_writable_folder

    check_writable_folder(args.output, f"-o {args.output}")  # before any file is read or figure drawn
    if args.reports[0].endswith((".csv", ".parquet")):
        return _plot_sweep_results(args)
    from astra_plots.cluster import cluster_plan, read_cluster
    from astra_plots.serving import read_serve, serve_plan

    progress.phase(f"reading {args.reports[0]}")
    if read_cluster(args.reports[0]) is not None:
        if args.timeline:
            raise ConfigError("astra plot: --timeline is for astra run reports, not astra cluster ones")
        for paths, note in drawn(cluster_plan(args.reports), args.output, args.svg):
            for path in paths or ():
                print(f"wrote {path}")
            if paths is None:
                print(f"astra plot: {note}")
        return 0
    if read_serve(args.reports[0]) is not None:
        if args.timeline:
            raise ConfigError("astra plot: --timeline is for astra run reports, not astra serve ones")
        for paths, _ in drawn(serve_plan(args.reports), args.output, args.svg):
            for path in paths:
                print(f"wrote {path}")
        return 0
    reports = []
    for path in args.reports:
        progress.phase(f"reading {path}")
        reports.append(read_report(path))
    report = reports[0]
    total = len(report["ranks"])
    ranks = None
    if args.ranks is not None:
        from astra_sim.humanize import parse_rank_ranges

        try:
            ranks = parse_rank_ranges(args.ranks, total, "--ranks")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    timeline = None
    if args.timeline:
        progress.phase(f"reading the timeline {args.timeline}")
        timeline = read_timeline(args.timeline, None if ranks is None else ranks)

    progress.phase("loading matplotlib")
    from astra_plots import figures

    plan = [("breakdown", lambda: figures.breakdown_figure(report),
             f"{args.reports[0]} has no breakdown (the run used --no-breakdown): no breakdown.png")]
    if timeline is not None:
        chosen = ranks if ranks is not None else _default_ranks(report, timeline)
        plan.append(("timeline", lambda: figures.timeline_figure(timeline, set(chosen), figures.run_title(report)),
                     f"{args.timeline} has no event of ranks {chosen}: no timeline.png"))
    link_notes = []
    names, rows, bin_ns = _link_rows(report, timeline)
    if rows:
        plan.append(("links", lambda: figures.links_figure(names, rows, bin_ns, figures.run_title(report)), None))
    elif report.get("settings", {}).get("network_backend") in ("congestion", "flow"):
        link_notes.append("no link use over time in the report: run with --timeline to record it (links.png)")
    if len(reports) > 1:
        labels = [os.path.basename(p) for p in args.reports]
        plan.append(("sweep", lambda: figures.sweep_figure(labels, reports), None))
    written, notes = [], []
    for paths, note in drawn(plan, args.output, args.svg):
        if paths is None:
            notes.append(note)
        else:
            written += paths
    for path in written:
        print(f"wrote {path}")
    for note in notes + link_notes:
        print(f"astra plot: {note}")
    return 0


def drawn(plan, folder, svg):
    """Draw and save each ``(name, draw, note)`` of ``plan`` in turn, naming the figure on the progress line
    (a large run's picture takes seconds); yields ``(the paths written, or None when draw gave None; note)``."""
    for index, (name, draw, note) in enumerate(plan, 1):
        progress.phase(f"drawing {name}.png ({index} of {len(plan)} figures)")
        fig = draw()
        yield (None if fig is None else _save(fig, folder, name, svg)), note


def _plot_sweep_results(args):
    from astra_plots import figures
    from astra_plots.inputs import read_sweep_results

    if len(args.reports) > 1 or args.timeline:
        raise ConfigError("astra plot: a sweep results file is drawn alone (no other report, no --timeline)")
    from astra_plots.serving import is_serve_sweep, serve_sweep_figure

    progress.phase(f"reading {args.reports[0]}")
    axes, rows = read_sweep_results(args.reports[0])
    serving = is_serve_sweep(rows)
    figure = serve_sweep_figure if serving else figures.sweep_results_figure
    plan = [("throughput_latency" if serving else "sweep_results",
             lambda: figure(axes, rows, os.path.basename(args.reports[0])),
             f"{args.reports[0]} has no finished point: nothing drawn")]
    for paths, note in drawn(plan, args.output, args.svg):
        for path in paths or ():
            print(f"wrote {path}")
        if paths is None:
            print(f"astra plot: {note}")
    return 0


def _default_ranks(report, timeline):
    present = timeline.pids
    ranks = report["ranks"]
    chosen = []
    if ranks:
        slowest = max(ranks, key=lambda r: (r["finish_ns"], -r["rank"]))["rank"]
        chosen.append(slowest)
    for group in (report.get("breakdown") or {}).get("rank_groups", []):
        first = int(group["ranks"].split(",")[0].split("-")[0])
        if first not in chosen:
            chosen.append(first)
    chosen = [r for r in chosen if r in present] or sorted(p for p in present if isinstance(p, int))
    return chosen[:MAX_TIMELINE_RANKS]


def _link_rows(report, timeline):
    """Link use per bin: from the report (``network_stats.link_utilisation``), else the timeline's counters."""
    stats = (report.get("network_stats") or {}).get("link_utilisation")
    if stats and stats.get("links"):
        links = stats["links"]
        return [f"{item['link']}: {item['name']}" for item in links], [item["utilisation"] for item in links], stats["bin_ns"]
    if timeline is None or not timeline.counters:
        return [], [], 0
    end = max(ts for samples in timeline.counters.values() for ts, _ in samples) or 1.0
    columns = 200
    width_us = end / columns
    rows = {}
    for name, samples in timeline.counters.items():
        samples.sort()
        values, j, value = [], 0, 0.0
        for c in range(columns):
            t = c * width_us
            while j < len(samples) and samples[j][0] <= t:
                value = samples[j][1]
                j += 1
            values.append(value)
        rows[name] = values
    busiest = sorted(rows, key=lambda n: -sum(rows[n]))
    return busiest, [rows[n] for n in busiest], width_us * 1000


def _save(fig, folder, name, svg):
    import matplotlib.pyplot as plt

    from astra_sim.safeio import write_or_recover

    paths = []
    for fmt in ("png", "svg") if svg else ("png",):
        path = os.path.join(folder, f"{name}.{fmt}")
        # a full disk: no partial picture; the figure is drawn again into a recovered file, and the error says where
        write_or_recover(path, functools.partial(fig.savefig, format=fmt), "astra plot", "-o")
        paths.append(path)
    plt.close(fig)
    return paths
