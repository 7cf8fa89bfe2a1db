"""The figures of ``astra plot`` (matplotlib, Agg: no display needed). Each returns a Figure or None.

* :func:`breakdown_figure`: stacked bars of the breakdown's parts, per rank (up to ``MAX_BARS`` ranks), else
  per group of ranks with identical parts (a pipeline stage of an LLM job);
* :func:`timeline_figure`: a few ranks over time, from a Chrome timeline: one lane per rank and stream (compute,
  CPU, each communicator), a receive's wait shaded on its communicator's lane;
* :func:`links_figure`: a heat map of link use over time (``congestion`` / ``flow`` runs with a timeline);
* :func:`sweep_figure`: a table of several runs side by side (a sweep).

Titles say what ran (:func:`run_title`): the model and the layout, when the workload generator wrote them into the
traces (``stats.throughput``), the devices, and the step time with MFU and tokens/s when the report has them.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import colormaps  # noqa: E402

MAX_BARS = 32
MAX_LINK_ROWS = 48
#: the timeline's colours: compute by op class, then the other kinds of work; receive waits are a light shade
_TIMELINE_COLORS = {"GEMM": "#1f4e9c", "attention": "#4f9fd6", "element-wise": "#9ecae9", "other compute": "#6b8fb3",
                    "CPU": "#7f7f7f", "remote memory": "#8c564b", "collective": "#ff7f0e", "send": "#d62728",
                    "in-switch": "#2ca02c", "receive wait": "#d9cce8"}
_OP_CLASS = {"gemm": "GEMM", "attention": "attention", "elementwise": "element-wise"}
#: the fixed lanes of a rank, before its communicators
_FIXED_LANES = ("compute", "CPU", "remote memory")
MAX_FIGURE_INCHES = 16.0


def _ms(ns):
    return ns / 1e6


def communicator_label(name):
    """A communicator as people say it: ``tp`` -> ``TP``, ``fsdp`` -> ``FSDP``; ``world`` -> empty (the whole
    job); ``p2p`` -> ``point-to-point``; anything else (``group 7``) as it is."""
    if name in (None, "", "world"):
        return ""
    if name == "p2p":
        return "point-to-point"
    return name.upper() if name.isalpha() and len(name) <= 4 else name


def part_label(name):
    """A breakdown part as a legend says it: ``exposed:tp`` -> ``exposed TP communication``, ``recv_wait:pp`` ->
    ``pipeline receive wait``, ``compute:gemm`` -> ``GEMM compute``, ``exposed_in_switch:dp`` -> ``exposed in-switch
    DP communication``, ``cpu`` -> ``CPU``, ``idle`` -> ``idle``."""
    kind, _, what = name.partition(":")
    if kind == "compute":
        return f"{_OP_CLASS.get(what, what or 'other')} compute"
    if kind in ("exposed", "exposed_in_switch"):
        comm = communicator_label(what)
        return " ".join(w for w in ("exposed", "in-switch" if kind == "exposed_in_switch" else "", comm,
                                    "communication") if w)
    if kind == "recv_wait":
        return "pipeline receive wait" if what == "pp" else " ".join(w for w in (communicator_label(what),
                                                                                  "receive wait") if w)
    if kind == "cpu":
        return "CPU"
    return name.replace("_", " ").replace(":", ": ")


def run_title(report):
    """What ran, for a figure's title: ``llama3-70b, TP 8 x PP 4 x DP 1 on 32 x H100-SXM5-80GB`` (the model and
    layout when the traces name them, else the NPU count) and, on a second line, ``step 1.234 s, 41.2 % MFU,
    52,100 tokens/s`` (MFU and tokens/s when the report has ``stats.throughput``)."""
    summary = report.get("summary") or {}
    settings = report.get("settings") or {}
    throughput = (report.get("stats") or {}).get("throughput") or {}
    npus = summary.get("npus") or len(report.get("ranks") or [])
    gpu = (settings.get("gpu_model") or {}).get("gpu")
    what = ", ".join(str(throughput[k]) for k in ("model", "layout") if throughput.get(k))
    devices = f"{npus} x {gpu}" if gpu else f"{npus} NPUs"
    first = f"{what} on {devices}" if what else devices
    numbers = []
    if summary.get("max_finish_ns") is not None:
        numbers.append(f"step {format_ns(summary['max_finish_ns'])}")
    if isinstance(throughput.get("mfu"), (int, float)):
        numbers.append(f"{100 * throughput['mfu']:.1f} % MFU")
    if isinstance(throughput.get("tokens_per_s"), (int, float)):
        numbers.append(f"{throughput['tokens_per_s']:,.0f} tokens/s")
    return first + ("\n" + ", ".join(numbers) if numbers else "")


def format_ns(ns):
    """Integer ns in a unit that shows them (the terminal's, :func:`astra_sim.humanize.format_ns`)."""
    from astra_sim.humanize import format_ns as human

    return human(ns)


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
    width = max(8.0, min(16.0, 0.45 * len(bars) + 4))
    fig, ax = plt.subplots(figsize=(width, 4.8), dpi=100)
    bottoms = [0.0] * len(bars)
    positions = list(range(len(bars)))
    for name in names:
        heights = [_ms(parts.get(name, 0)) for parts in bars]
        if not any(heights):
            continue
        ax.bar(positions, heights, bottom=bottoms, color=colors[name], label=part_label(name),
               edgecolor="white", linewidth=0.3)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(positions)
    ax.set_xticklabels(labels, fontsize=8 if len(bars) > 12 else 9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time (ms)")
    fig.suptitle(f"where the time goes: {run_title(report)}", fontsize=10)
    handles, legend = ax.get_legend_handles_labels()  # top of the stack first
    ax.legend(handles[::-1], legend[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _first(ranks_text):
    return int(ranks_text.split(",")[0].split("-")[0])


def timeline_lanes(timeline, ranks):
    """The lanes of ``ranks`` in a timeline: ``[((rank, lane), {"spans": {colour key: [(start ms, length ms)]},
    "waits": [(start ms, length ms)]})]`` in drawing order: per rank, ``compute``, ``CPU``, ``remote memory`` (those
    it used), then one lane per communicator (``TP``, ``PP``, ...: its collectives, its sends, its in-switch phases;
    ``communication`` for the whole job's). A receive is no lane of its own: the time the rank waited for it, with
    no compute or CPU work running, is ``waits`` on its communicator's lane (the pipeline's bubbles)."""
    lanes = {}
    for pid, _tid, ts, dur, cat, _name, communicator, op_class in timeline.events:
        if pid not in ranks:
            continue
        if cat == "compute":
            lane, key = "compute", _OP_CLASS.get(op_class, "other compute")
        elif cat == "cpu":
            lane, key = "CPU", "CPU"
        elif cat == "remote_memory":
            lane, key = "remote memory", "remote memory"
        elif cat in ("collective", "send", "recv", "in_switch"):
            lane = communicator_label(communicator) or "communication"
            key = {"in_switch": "in-switch", "recv": None}.get(cat, cat)
        else:  # instants: nothing to draw
            continue
        entry = lanes.setdefault((pid, lane), {"spans": {}, "waits": []})
        span = (ts / 1000.0, max(dur / 1000.0, 1e-6))
        if key is None:
            entry["waits"].append(span)
        else:
            entry["spans"].setdefault(key, []).append(span)
    busy = {}  # rank -> its compute and CPU spans: a receive waits only where the rank has nothing else to run
    for (pid, lane), entry in lanes.items():
        if lane in ("compute", "CPU"):
            busy.setdefault(pid, []).extend(span for spans in entry["spans"].values() for span in spans)
    for (pid, _), entry in lanes.items():
        entry["waits"] = _minus(_merged(entry["waits"]), _merged(busy.get(pid, [])))

    def order(item):
        (pid, lane), _ = item
        fixed = _FIXED_LANES.index(lane) if lane in _FIXED_LANES else len(_FIXED_LANES)
        return (pid, fixed, lane)

    return sorted(lanes.items(), key=order)


def _merged(spans):
    """``[(start, length)]`` with overlapping spans joined (a shade drawn once, not darker where receives overlap)."""
    out = []
    for start, length in sorted(spans):
        if out and start <= out[-1][0] + out[-1][1]:
            first, size = out[-1]
            out[-1] = (first, max(size, start + length - first))
        else:
            out.append((start, length))
    return out


def _minus(spans, holes):
    """``spans`` (merged, sorted ``(start, length)``) less the merged ``holes``."""
    out = []
    for start, length in spans:
        end = start + length
        for h_start, h_length in holes:
            h_end = h_start + h_length
            if h_end <= start or h_start >= end:
                continue
            if h_start > start:
                out.append((start, h_start - start))
            start = max(start, h_end)
            if start >= end:
                break
        if start < end:
            out.append((start, end - start))
    return out


def timeline_figure(timeline, ranks, title=None):
    """Each chosen rank's lanes over time (ms, :func:`timeline_lanes`): compute coloured by op class, each
    communicator's collectives and sends, receive waits shaded; ``title``: what ran (:func:`run_title`)."""
    lanes = timeline_lanes(timeline, set(ranks))
    if not lanes:
        return None
    height = min(MAX_FIGURE_INCHES, max(2.5, 0.3 * len(lanes) + 1.6))
    fig, ax = plt.subplots(figsize=(12, height), dpi=100)
    used = set()
    for row, (_, entry) in enumerate(lanes):
        if entry["waits"]:
            ax.broken_barh(entry["waits"], (row - 0.45, 0.9), facecolors=_TIMELINE_COLORS["receive wait"],
                           linewidth=0, zorder=1)
            used.add("receive wait")
        for key, spans in entry["spans"].items():
            thin = key == "in-switch"  # a phase of a collective drawn on it: a narrower bar inside the lane
            ax.broken_barh(spans, (row - (0.15 if thin else 0.35), 0.3 if thin else 0.7),
                           facecolors=_TIMELINE_COLORS[key], linewidth=0, zorder=3 if thin else 2)
            used.add(key)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"rank {pid}: {lane}" for (pid, lane), _ in lanes], fontsize=7 if len(lanes) > 24 else 8)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlabel("time (ms)")
    chosen = sorted({pid for (pid, _), _ in lanes})
    head = f"timeline of rank{'s' if len(chosen) > 1 else ''} {', '.join(map(str, chosen))}"
    ax.set_title(f"{head}: {title}" if title else head, fontsize=10)
    pairs = [(plt.Rectangle((0, 0), 1, 1, color=c), k) for k, c in _TIMELINE_COLORS.items() if k in used]
    ax.legend([h for h, _ in pairs], [k for _, k in pairs], loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def links_figure(names, rows, bin_ns, title=None):
    """Heat map: one row per link (busiest first), one column per time bin, colour = share of bandwidth used;
    ``title``: what ran (:func:`run_title`)."""
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
    head = f"link utilisation ({len(rows)} busiest links, {bin_ns / 1000:.4g} us bins)"
    ax.set_title(f"{head}: {title}" if title else head, fontsize=10)
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
                      f"{part_label(name)} ({_ms(ns):.4g} ms)" if parts else "-"])
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
