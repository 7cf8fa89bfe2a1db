"""``astra plot`` for ``astra cluster`` reports: the jobs of one or several reports side by side (one colour per
report, e.g. two placement policies on the same spec).

* ``cluster_jobs.png`` (reports with a ``timeline``): each job's completion time (h) and goodput (%), and the
  cluster's goodput and mean completion;
* ``cluster_slowdown.png`` (reports with a ``corun``): each job's step together against alone;
* ``cluster_steps.png`` (reports with ``stragglers``): each job's step over the draws (stragglers, per-op
  jitter) against its nominal step, with the p99.

A cluster report is recognised by its ``cluster`` and ``placement`` keys. Reports keep integer ns; the figures
show hours and percent."""

from __future__ import annotations

import os

from astra_sim.errors import ConfigError

from .inputs import read_json_or_none

HOUR_NS = 3_600_000_000_000


def read_cluster(path):
    """The ``astra cluster`` report in ``path``, or None when it is not one."""
    data = read_json_or_none(path)  # None: read_report names the problem
    if isinstance(data, dict) and isinstance(data.get("cluster"), dict) and isinstance(data.get("placement"), list):
        return data
    return None


def _label(report, path):
    c = report["cluster"]
    return f"{os.path.basename(path)} ({c.get('placement')}, {c.get('scheduler')})"


def _bars(ax, names, series, labels):
    """Grouped bars: one group per job name, one bar per report (a job a report lacks is left out)."""
    width = 0.8 / max(1, len(series))
    for i, (values, label) in enumerate(zip(series, labels)):
        xs = [k + (i - (len(series) - 1) / 2) * width for k, name in enumerate(names) if values.get(name) is not None]
        ys = [values[name] for name in names if values.get(name) is not None]
        ax.bar(xs, ys, width, label=label)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def jobs_figure(reports, labels):
    """Completion (h) and goodput (%) per job, one bar per report; None when no report has a timeline."""
    timed = [(r["timeline"], label) for r, label in zip(reports, labels) if isinstance(r.get("timeline"), dict)]
    if not timed:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for t, _label in timed:
        names += [row["job"] for row in t["jobs"] if row["job"] not in names]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    completion = [{row["job"]: None if row["completion_ns"] is None else row["completion_ns"] / HOUR_NS
                   for row in t["jobs"]} for t, _l in timed]
    goodput = [{row["job"]: None if row["goodput"] is None else 100 * row["goodput"] for row in t["jobs"]}
               for t, _l in timed]
    legend = [f"{label}: mean {_hours(t['mean_completion_ns'])}, cluster goodput {_percent(t['cluster_goodput'])}"
              for t, label in timed]
    _bars(axes[0], names, completion, legend)
    axes[0].set_ylabel("job completion time (h, from arrival)")
    _bars(axes[1], names, goodput, legend)
    axes[1].set_ylabel("goodput (% of the job's rate on an empty cluster)")
    axes[0].legend(fontsize=7)
    fig.suptitle("astra cluster: jobs over the horizon (a missing bar: not done)", fontsize=10)
    fig.tight_layout()
    return fig


def slowdown_figure(reports, labels):
    """Each job's step together over alone, one bar per report; None when no report has a corun."""
    runs = [(r["corun"], label) for r, label in zip(reports, labels) if isinstance(r.get("corun"), dict)]
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for c, _label in runs:
        names += [row["job"] for row in c["jobs"] if row["job"] not in names]
    fig, ax = plt.subplots(figsize=(7, 4))
    _bars(ax, names, [{row["job"]: row["slowdown"] for row in c["jobs"]} for c, _l in runs],
          [f"{label}: {len(c['shared_links'])} links shared" for c, label in runs])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("step together / step alone")
    ax.legend(fontsize=7)
    fig.suptitle("astra cluster: jobs on one fabric", fontsize=10)
    fig.tight_layout()
    return fig


def steps_figure(reports, labels):
    """Each job's step (ms) in every draw, its nominal step and its p99, one colour per report; None when no report
    has a stragglers study."""
    studies = [(r["stragglers"], label) for r, label in zip(reports, labels) if isinstance(r.get("stragglers"), list)
               and r["stragglers"]]
    if not studies:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for rows, _label in studies:
        names += [row["job"] for row in rows if row["job"] not in names]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(studies)
    for i, (rows, label) in enumerate(studies):
        colour = f"C{i}"
        for row in rows:
            x = names.index(row["job"]) + (i - (len(studies) - 1) / 2) * width
            draws = [ns / 1e6 for ns in row.get("step_ns_by_draw") or ()]
            ax.scatter([x] * len(draws), draws, s=10, alpha=0.5, color=colour,
                       label=label if row is rows[0] else None)
            ax.hlines(row["nominal_step_ns"] / 1e6, x - width / 2, x + width / 2, color="black", linewidth=1)
            ax.scatter([x], [row["p99_step_ns"] / 1e6], marker="_", s=200, color=colour)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, fontsize=8)
    ax.set_ylabel("step (ms): each draw; black: nominal; bar: p99")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("astra cluster: step-time distribution over straggler draws", fontsize=10)
    fig.tight_layout()
    return fig


def cluster_plan(paths):
    """The figures of the cluster reports of ``paths``: ``(name, draw, note)`` for ``astra plot`` to draw in turn."""
    reports, labels = [], []
    for path in paths:
        report = read_cluster(path)
        if report is None:
            raise ConfigError(f"{path}: not an astra cluster report (mixing cluster and other reports is not drawn)")
        reports.append(report)
        labels.append(_label(report, path))
    return [("cluster_jobs", lambda: jobs_figure(reports, labels),
             "no report has a timeline (horizon_h): no cluster_jobs.png"),
            ("cluster_slowdown", lambda: slowdown_figure(reports, labels),
             "no report has a corun (corun: false): no cluster_slowdown.png"),
            ("cluster_steps", lambda: steps_figure(reports, labels),
             "no report has a stragglers study: no cluster_steps.png")]


def _hours(ns):
    return "-" if ns is None else f"{ns / HOUR_NS:.1f} h"


def _percent(value):
    return "-" if value is None else f"{value:.1%}"
