"""``astra plot`` for ``astra serve`` reports: latency CDFs (TTFT, TPOT, end-to-end) of each report, and the
throughput-latency curve of a QPS sweep (``astra serve --qps 1,2,4 ...``, several serve reports, or an ``astra
sweep`` results file of serving points: one curve per deployment).

A serve report is recognised by its ``ttft_ns`` and ``deployment`` keys (a sweep's by ``qps_sweep``). Reports and
sweep rows keep integer ns; the figures show ms."""

from __future__ import annotations

import os

from astra_sim.errors import ConfigError

from .inputs import read_json_or_none

MS = 1_000_000


def _ms(ns):
    """Integer ns (a report's unit) as ms (the figures'); None stays None."""
    return None if ns is None else ns / MS


def latency_scale(ax, values, axis="x"):
    """A log axis with plain-number labels where the latencies span a decade or more, else a linear one: on a log
    axis that spans less, matplotlib labels the minor ticks in scientific notation, and they overlap."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    positive = [v for v in values if v is not None and v > 0]
    if not positive or max(positive) < 10 * min(positive):
        return
    getattr(ax, f"set_{axis}scale")("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def read_serve(path):
    """The serve reports in ``path`` (one, or a sweep's), or None when it is not a serve report."""
    data = read_json_or_none(path)  # None: read_report names the problem
    if isinstance(data, dict) and isinstance(data.get("qps_sweep"), list):
        points = data["qps_sweep"]
    elif isinstance(data, dict) and ("ttft_ns" in data or "ttft_ms" in data) and "deployment" in data:
        points = [data]
    else:
        return None
    for point in points:
        if not isinstance(point, dict) or not isinstance(point.get("cdf_ns"), dict):
            raise ConfigError(f"{path}: a serve report without cdf_ns (written by an older astra serve, in ms? run "
                              "astra serve again)")
    return points


def _label(point, fallback):
    d = point.get("deployment", {})
    qps = point.get("qps")
    return (f"{d.get('description', fallback)}" + (f", {qps:g} QPS" if isinstance(qps, (int, float)) else ""))


def serve_title(points):
    """``: llama3-70b on H100-SXM5-80GB`` when the reports serve one model on one GPU, else empty."""
    models = {p.get("deployment", {}).get("model") for p in points}
    gpus = {p.get("deployment", {}).get("gpu") for p in points}
    if len(models) != 1 or None in models:
        return ""
    return f": {models.pop()}" + (f" on {gpus.pop()}" if len(gpus) == 1 and None not in gpus else "")


def cdf_figure(points, labels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    quantiles = [q / 100 for q in range(101)]
    for ax, key, title in zip(axes, ("ttft", "tpot", "e2e"), ("time to first token", "time per output token",
                                                               "end-to-end latency")):
        shown = []
        for point, label in zip(points, labels):
            values = [_ms(v) for v in point["cdf_ns"].get(key) or []]
            if values:
                ax.plot(values, quantiles[:len(values)], label=label)
                shown += values
        ax.set_xlabel(f"{title} (ms)")
        ax.set_ylabel("fraction of requests")
        latency_scale(ax, shown, "x")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"latency CDFs (astra serve){serve_title(points)}", fontsize=10)
    fig.tight_layout()
    return fig


def _throughput_latency(curves, suptitle, figsize):
    """TTFT and TPOT (p50 solid, p99 dashed) against output throughput, one colour per curve. ``curves``:
    ``[(name or None, [{"x": tokens/s, "ttft": (p50, p99), "tpot": (p50, p99), "qps": label or None}])]``, each
    curve's points in throughput order; a point with a ``qps`` is labelled with it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, 2, figsize=figsize)
    for ax, key, title in zip(panels, ("ttft", "tpot"), ("TTFT", "TPOT")):
        for i, (name, points) in enumerate(curves):
            x = [p["x"] for p in points]
            for k, (stat, style, alpha) in enumerate((("p50", "o-", 1.0), ("p99", "s--", 0.6))):
                ax.plot(x, [p[key][k] for p in points], style, color=f"C{i % 10}", alpha=alpha,
                        label=f"{name or title} {stat}")
            for p in points:
                if p["qps"] is not None:
                    ax.annotate(p["qps"], (p["x"], p[key][0]), fontsize=7, textcoords="offset points",
                                xytext=(3, 3))
        ax.set_xlabel("output throughput (tokens/s)")
        ax.set_ylabel(f"{title} (ms)")
        latency_scale(ax, [v for _name, points in curves for p in points for v in p[key]], "y")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return fig


def throughput_latency_figure(points, labels):
    """The throughput-latency curve of serve reports (a QPS sweep's, or several), sorted by throughput."""
    curve = [{"x": p["throughput_tokens_per_s"], "ttft": (_ms(p["ttft_ns"]["p50"]), _ms(p["ttft_ns"]["p99"])),
              "tpot": (_ms(p["tpot_ns"]["p50"]), _ms(p["tpot_ns"]["p99"])),
              "qps": f"{p['qps']:g}" if isinstance(p.get("qps"), (int, float)) else None} for p in points]
    return _throughput_latency([(None, curve)], f"throughput-latency curve (labels: QPS){serve_title(points)}",
                               (11, 4))


def serve_plan(paths):
    """The figures of the serve reports of ``paths``: ``(name, draw, note)`` for ``astra plot`` to draw in turn."""
    points, labels = [], []
    for path in paths:
        found = read_serve(path)
        if found is None:
            raise ConfigError(f"{path}: not an astra serve report (mixing serve and run reports is not drawn)")
        points += found
        labels += [_label(p, os.path.basename(path)) for p in found]
    plan = [("latency_cdf", lambda: cdf_figure(points, labels), None)]
    if len(points) > 1:
        order = sorted(range(len(points)), key=lambda i: points[i]["throughput_tokens_per_s"])
        plan.append(("throughput_latency", lambda: throughput_latency_figure([points[i] for i in order],
                                                                             [labels[i] for i in order]), None))
    return plan


QPS_AXIS = "workload.serve.qps"


def is_serve_sweep(rows):
    """Whether ``astra sweep`` rows are serving points (their row has the serving columns)."""
    return any("throughput_tokens_per_s" in row for row in rows)


def serve_sweep_figure(axes, rows, title):
    """Throughput-latency curves of an ``astra sweep`` of serving points (columns in ns, drawn in ms): TTFT and TPOT
    (p50 solid, p99 dashed)
    against output throughput, one curve per value of the axes other than ``workload.serve.qps`` (points sorted by
    throughput, labelled with their QPS); None when no point finished."""

    def number(row, key):
        try:
            return float(row.get(key))
        except (TypeError, ValueError):
            return None

    done = [r for r in rows if r.get("status") == "ok" and number(r, "throughput_tokens_per_s") is not None]
    if not done:
        return None
    outer = [a for a in axes if a != QPS_AXIS]
    curves = {}
    for row in sorted(done, key=lambda r: number(r, "throughput_tokens_per_s")):
        name = ", ".join(f"{a.split('.')[-1]}={row.get(a)}" for a in outer) or "deployment"
        curves.setdefault(name, []).append({
            "x": number(row, "throughput_tokens_per_s"),
            "ttft": (_ms(number(row, "ttft_p50_ns")), _ms(number(row, "ttft_p99_ns"))),
            "tpot": (_ms(number(row, "tpot_p50_ns")), _ms(number(row, "tpot_p99_ns"))),
            "qps": f"{row.get(QPS_AXIS)}" if QPS_AXIS in axes else None})
    return _throughput_latency(list(curves.items()), f"{title}: throughput-latency, {len(done)} of {len(rows)} points"
                               + (" (labels: QPS)" if QPS_AXIS in axes else ""), (12, 4.5))
