"""The figures of ``astra plot`` (matplotlib, Agg: no display needed). Each returns a Figure or None.

* :func:`breakdown_figure`: stacked bars of the breakdown's parts, per rank (up to ``MAX_BARS`` ranks), else
  per group of ranks with identical parts (a pipeline stage of an LLM job);
* :func:`timeline_figure`: the streams of a few ranks over time, from a Chrome timeline;
* :func:`links_figure`: a heat map of link use over time (``congestion`` / ``flow`` runs with a timeline);
* :func:`sweep_figure`: a table of several runs side by side (a sweep).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import colormaps  # noqa: E402

MAX_BARS = 32
MAX_LINK_ROWS = 48
_CATEGORY_COLORS = {"compute": "#1f77b4", "cpu": "#7f7f7f", "collective": "#ff7f0e", "send": "#d62728",
                    "recv": "#9467bd", "remote_memory": "#8c564b", "instant": "#bcbd22", "in_switch": "#2ca02c"}


def _ms(ns):
    return ns / 1e6


def part_order(names):
    """Parts in a stable order: compute, cpu, exposed communication, remote memory, receive waits, idle."""
    rank = {"compute": 0, "cpu": 1, "exposed": 2, "exposed_in_switch": 2.5, "remote_memory": 3, "recv_wait": 4,
            "idle": 5}
    return sorted(names, key=lambda n: (rank.get(n.split(":")[0], 6), n))


def part_colors(names):
    """A colour per part: blues for compute, oranges/reds for exposed communication, greens for exposed in-switch
    communication, purples for waits."""
    groups = {}
    for name in names:
        groups.setdefault(name.split(":")[0], []).append(name)
    maps = {"compute": "Blues", "exposed": "Oranges", "exposed_in_switch": "Greens", "recv_wait": "Purples"}
    fixed = {"cpu": "#7f7f7f", "remote_memory": "#8c564b", "idle": "#dddddd"}
    colors = {}
    for kind, members in groups.items():
        if kind in maps:
            cmap = colormaps[maps[kind]]
            for i, name in enumerate(members):
                colors[name] = cmap(0.85 - 0.5 * i / max(1, len(members)))
        else:
            for name in members:
                colors[name] = fixed.get(kind, "#17becf")
    return colors


def breakdown_figure(report):
    """Stacked bars of where the time went (ms), per rank or per group of identical ranks."""
    ranks = report["ranks"]
    if not ranks or "breakdown" not in ranks[0]:
        return None
    if len(ranks) <= MAX_BARS:
        labels = [str(r["rank"]) for r in ranks]
        bars = [r["breakdown"]["parts"] for r in ranks]
        xlabel = "rank"
    else:
        groups = report["breakdown"]["rank_groups"]
        labels = [f"{g['ranks']}\n({g['count']} ranks)" for g in sorted(groups, key=lambda g: _first(g["ranks"]))]
        bars = [g["parts"] for g in sorted(groups, key=lambda g: _first(g["ranks"]))]
        xlabel = "ranks with identical breakdowns (e.g. a pipeline stage)"
    names = part_order({name for parts in bars for name in parts})
    colors = part_colors(names)
    width = max(6.0, min(16.0, 0.45 * len(bars) + 4))
    fig, ax = plt.subplots(figsize=(width, 4.8), dpi=100)
    bottoms = [0.0] * len(bars)
    positions = list(range(len(bars)))
    for name in names:
        heights = [_ms(parts.get(name, 0)) for parts in bars]
        if not any(heights):
            continue
        ax.bar(positions, heights, bottom=bottoms, color=colors[name], label=name.replace("_", " "),
               edgecolor="white", linewidth=0.3)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(positions)
    ax.set_xticklabels(labels, fontsize=8 if len(bars) > 12 else 9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time (ms)")
    summary = report["summary"]
    ax.set_title(f"where the time goes: {summary['npus']} NPUs, step {_ms(summary['max_finish_ns']):.4g} ms")
    handles, legend = ax.get_legend_handles_labels()  # top of the stack first
    ax.legend(handles[::-1], legend[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _first(ranks_text):
    return int(ranks_text.split(",")[0].split("-")[0])


def timeline_figure(timeline, ranks):
    """Each chosen rank's streams over time (ms), coloured by what ran."""
    rows = sorted({(pid, tid) for pid, tid, *_ in timeline.events if pid in ranks})
    if not rows:
        return None
    index = {row: i for i, row in enumerate(rows)}
    bars = {}
    for pid, tid, ts, dur, cat, _name in timeline.events:
        if (pid, tid) in index:
            bars.setdefault((index[(pid, tid)], cat), []).append((ts / 1000.0, max(dur / 1000.0, 1e-6)))
    fig, ax = plt.subplots(figsize=(12, max(2.5, 0.32 * len(rows) + 1.4)), dpi=100)
    for (row, cat), spans in bars.items():
        ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=_CATEGORY_COLORS.get(cat, "#17becf"), linewidth=0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {pid}: {timeline.threads.get((pid, tid), tid)}" for pid, tid in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(f"timeline of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, sorted(ranks)))}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _CATEGORY_COLORS.values()]
    used = {cat for (_, cat) in bars}
    pairs = [(h, c.replace("_", " ")) for h, c in zip(handles, _CATEGORY_COLORS) if c in used]
    ax.legend([h for h, _ in pairs], [c for _, c in pairs], loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def links_figure(names, rows, bin_ns):
    """Heat map: one row per link (busiest first), one column per time bin, colour = share of bandwidth used."""
    if not rows:
        return None
    names, rows = names[:MAX_LINK_ROWS], rows[:MAX_LINK_ROWS]
    columns = max(len(r) for r in rows)
    grid = [list(r) + [0.0] * (columns - len(r)) for r in rows]
    fig, ax = plt.subplots(figsize=(12, max(2.5, 0.18 * len(rows) + 1.6)), dpi=100)
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0.0, vmax=1.0,
                      extent=(0, columns * bin_ns / 1e6, len(rows) - 0.5, -0.5))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(names, fontsize=6 if len(rows) > 24 else 8)
    ax.set_xlabel("time (ms)")
    ax.set_title(f"link utilisation ({len(rows)} busiest links, {bin_ns / 1000:.4g} us bins)")
    fig.colorbar(image, ax=ax, label="share of bandwidth in use")
    fig.tight_layout()
    return fig


def sweep_figure(labels, reports):
    """A table of runs side by side: NPUs, step time, largest exposed communication, largest breakdown part."""
    header = ["run", "NPUs", "step (ms)", "max exposed comm (ms)", "largest part of the slowest rank"]
    cells = []
    for label, report in zip(labels, reports):
        summary = report["summary"]
        parts = (report.get("breakdown") or {}).get("parts") or {}
        name, ns = max(parts.items(), key=lambda kv: kv[1]) if parts else ("-", 0)
        cells.append([label, str(summary["npus"]), f"{_ms(summary['max_finish_ns']):.4g}",
                      f"{_ms(summary['max_exposed_comm_ns']):.4g}",
                      f"{name.replace('_', ' ')} ({_ms(ns):.4g} ms)" if parts else "-"])
    fig, ax = plt.subplots(figsize=(12, 0.42 * len(cells) + 1.2), dpi=100)
    ax.axis("off")
    table = ax.table(cellText=cells, colLabels=header, loc="center", cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.auto_set_column_width(list(range(len(header))))
    table.scale(1, 1.3)
    ax.set_title(f"{len(reports)} runs")
    fig.tight_layout()
    return fig


def _value(text):
    """An axis value as a reader wants it: ``['ring']`` (a one-element list in the results file) -> ``ring``."""
    text = str(text)
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].replace("'", "").replace('"', "")
    return text


def sweep_results_figure(axes, rows, title):
    """Step time (ms) of every finished point of a sweep: groups of bars, one group per value of all axes but
    the last, one bar per value of the last axis (points that did not finish are left out)."""
    done = [r for r in rows if r.get("status") == "ok" and r.get("step_ns") not in (None, "")]
    if not done:
        return None
    last = axes[-1] if axes else None
    outer = axes[:-1]

    def label(row, names):
        return ", ".join(f"{n.split('.')[-1]}={_value(row[n])}" for n in names) if names else "all"

    groups, series = [], []
    for row in done:
        g, s = label(row, outer), (label(row, [last]) if last else "step")
        if g not in groups:
            groups.append(g)
        if s not in series:
            series.append(s)
    values = {(label(r, outer), label(r, [last]) if last else "step"): _ms(float(r["step_ns"])) for r in done}
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.5 * len(groups) * len(series) + 2), 5.5), dpi=100)
    cmap = colormaps["viridis"]
    for j, name in enumerate(series):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(groups))]
        ys = [values.get((g, name), 0.0) for g in groups]
        ax.bar(xs, ys, width, label=name, color=cmap(j / max(1, len(series) - 1) * 0.9))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30 if len(groups) > 4 else 0, ha="right" if len(groups) > 4 else "center",
                       fontsize=8)
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"{title}: {len(done)} of {len(rows)} points")
    ax.legend(fontsize=8, title=last.split(".")[-1] if last else None)
    fig.tight_layout()
    return fig
