"""The serving report: per-request latencies and their percentiles, throughput, goodput under an SLO,
the queue (with Little's law's two sides) and KV-cache utilisation over time.

Definitions (vLLM's benchmark_serving ones): TTFT = first token - arrival; TPOT = (finish - first token) /
(output tokens - 1), for requests of more than one output token; E2E = finish - arrival; queueing delay =
first scheduled iteration's start - arrival. Throughput counts output tokens (and requests) over the makespan,
first arrival to last finish. Goodput: requests per second that met every given SLO.

An SLO is a percentile of TTFT or TPOT and a target (``--slo-ttft-p99 500``: 99 % of requests reach their first
token within 500 ms). It is met when that percentile, computed as the report's p50/p90/p99 are (numpy's linear
interpolation), is at most the target; the report also gives the share of requests within the target.
"""

from __future__ import annotations

import re

import numpy as np

NS = 1_000_000_000
MS = 1_000_000

#: what the report's numbers are in: JSON keeps integer ns (times) and bytes (sizes); names carry any other unit
#: (``throughput_tokens_per_s``); terminals show ms (:func:`describe`)
UNITS = {"time": "ns", "size": "bytes"}

#: the latency distributions of a report: (name, report key)
LATENCIES = (("ttft", "ttft_ns"), ("tpot", "tpot_ns"), ("e2e", "e2e_ns"), ("queueing", "queueing_delay_ns"))


#: the latencies an SLO can bound, with their terminal names
SLO_METRICS = {"ttft": "TTFT", "tpot": "TPOT"}
#: the percentiles an SLO flag may name: --slo-ttft-p1 ... --slo-ttft-p99, and p99.9
SLO_PERCENTILES = tuple(range(1, 100)) + (99.9,)
_SLO_KEY = re.compile(r"^slo_(ttft|tpot)_p(\d+(?:\.\d+)?)$")


def percentile_label(percentile):
    """``99`` -> ``p99``, ``99.9`` -> ``p99.9``."""
    return f"p{percentile:g}"


def slo_key(metric, percentile):
    """The option (dest) of an SLO: ``('ttft', 99)`` -> ``slo_ttft_p99``."""
    return f"slo_{metric}_{percentile_label(percentile)}"


def parse_slo_key(name):
    """``slo_ttft_p99`` -> ``('ttft', 99)``; None for any other name (or a percentile that is not offered)."""
    found = _SLO_KEY.match(str(name).replace("-", "_"))
    if found is None:
        return None
    value = float(found.group(2))
    percentile = int(value) if value.is_integer() else value
    return (found.group(1), percentile) if percentile in SLO_PERCENTILES else None


def _ns(value):
    return int(round(float(value)))


def distribution_ns(values_ns):
    """{p50, p90, p99, mean, max} of a list of ns, each an integer ns (None when empty)."""
    if not values_ns:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "max": None}
    a = np.asarray(values_ns, dtype=np.float64)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": _ns(p50), "p90": _ns(p90), "p99": _ns(p99), "mean": _ns(a.mean()), "max": _ns(a.max())}


def ms_to_ns(ms):
    """An SLO given in ms (the command line's unit) as integer ns (None stays None)."""
    return None if ms is None else _ns(ms * MS)


def tpot_ns(r):
    return (r.finish_ns - r.first_token_ns) / (r.output_tokens - 1) if r.output_tokens > 1 else None


def slo_results(slos, ttft, tpot):
    """The report's ``slo``: per ``(metric, percentile, target ms)``, the target and the percentile in ns, the
    share of requests within the target, whether it is met and how many requests lie beyond the percentile (a
    tail of a few requests decides it: :func:`astra_serving.cli.small_sample_warning`)."""
    values = {"ttft": ttft, "tpot": tpot}
    out = []
    for metric, percentile, target_ms in slos:
        target = ms_to_ns(target_ms)
        a = np.asarray(values[metric], dtype=np.float64)
        value = _ns(np.percentile(a, percentile)) if len(a) else None
        within = int(np.count_nonzero(a <= target)) if len(a) else 0
        out.append({"metric": metric, "percentile": percentile, "target_ns": target, "value_ns": value,
                    "fraction_within": within / len(a) if len(a) else None,
                    "met": value is not None and value <= target, "requests": len(a),
                    "requests_beyond": int(len(a) * (100 - percentile) / 100 + 1e-9)})
    return out


def build_report(requests, cluster, slo_ttft_ms=None, slo_tpot_ms=None, max_points=400, slos=()):
    """The report of served ``requests``: times in integer ns (``units``), SLOs given in ms read as ns.
    ``slos``: percentile SLOs ``(metric, percentile, target ms)`` (``ServeSpec.slo_targets``); the goodput counts
    the requests within every target (a metric's tightest) and the deprecated ``slo_ttft_ms``/``slo_tpot_ms``."""
    for metric, _, target in slos:
        if metric == "ttft":
            slo_ttft_ms = target if slo_ttft_ms is None else min(slo_ttft_ms, target)
        else:
            slo_tpot_ms = target if slo_tpot_ms is None else min(slo_tpot_ms, target)
    ttft = [r.first_token_ns - r.arrival_ns for r in requests]
    e2e = [r.finish_ns - r.arrival_ns for r in requests]
    tpot = [(r.finish_ns - r.first_token_ns) / (r.output_tokens - 1) for r in requests
            if r.output_tokens > 1]  # tpot_ns of each, inline
    queue = [r.scheduled_ns - r.arrival_ns for r in requests]
    start = min(r.arrival_ns for r in requests)
    end = max(r.finish_ns for r in requests)
    span_s = max(end - start, 1) / NS
    out_tokens = sum(r.output_tokens for r in requests)
    in_tokens = sum(r.prompt_tokens for r in requests)
    report = {
        "units": dict(UNITS),
        "requests": len(requests),
        "duration_ns": end - start,
        "ttft_ns": distribution_ns(ttft),
        "tpot_ns": distribution_ns(tpot),
        "e2e_ns": distribution_ns(e2e),
        "queueing_delay_ns": distribution_ns(queue),
        "throughput_tokens_per_s": out_tokens / span_s,
        "throughput_input_tokens_per_s": in_tokens / span_s,
        "throughput_requests_per_s": len(requests) / span_s,
        "output_tokens": out_tokens,
        "input_tokens": in_tokens,
        "preemptions": sum(r.preemptions for r in requests),
    }
    # the latency distributions as 101 quantiles (0 %, 1 %, ..., 100 %) in integer ns, for astra plot's CDFs
    report["cdf_ns"] = {name: ([_ns(x) for x in np.percentile(np.asarray(v, dtype=np.float64), np.arange(101))]
                               if v else [])
                        for name, v in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e))}
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        slo_ttft, slo_tpot = ms_to_ns(slo_ttft_ms), ms_to_ns(slo_tpot_ms)
        good = 0
        for r, t in zip(requests, ttft):
            ok = slo_ttft is None or t <= slo_ttft
            p = tpot_ns(r)
            ok = ok and (slo_tpot is None or p is None or p <= slo_tpot)
            good += ok
        report["goodput"] = {"slo_ttft_ns": slo_ttft, "slo_tpot_ns": slo_tpot, "requests_meeting_slo": good,
                             "fraction": good / len(requests), "requests_per_s": good / span_s}
    if slos:
        report["slo"] = slo_results(slos, ttft, tpot)
    # Little's law on the waiting queue: L (time-weighted mean length over the makespan) = lambda x W
    window = max(end - start, 1)
    lam = len(requests) / (window / NS)
    mean_wait_ns = sum(queue) / len(queue)
    report["queue"] = {"mean_length": cluster.queue_area_ns() / window, "arrival_rate_per_s": lam,
                       "mean_wait_ns": _ns(mean_wait_ns), "lambda_times_w": lam * mean_wait_ns / NS}
    samples = cluster.kv_samples
    if samples:
        fractions = [f for _, f in samples]
        step = max(1, -(-len(samples) // max_points))
        report["kv_cache_utilisation"] = {
            "mean": float(np.mean(fractions)), "max": float(np.max(fractions)),
            "over_time": [[int(t), round(max(f for _, f in samples[i:i + step]), 5)]
                          for i, (t, _) in enumerate(samples) if i % step == 0]}
    return report


def describe(report):
    """Terminal lines (human units: ms and s)."""
    from .intervals import describe_interval

    slos = report.get("slo") or []

    def d(name, key):
        v = report[key]
        if v["p50"] is None:
            return f"{name}: n/a"
        shown = {50: v["p50"], 90: v["p90"], 99: v["p99"]}
        for s in slos:  # the percentiles the SLOs ask for, too
            if f"{s['metric']}_ns" == key and s["value_ns"] is not None:
                shown.setdefault(s["percentile"], s["value_ns"])
        interval = describe_interval(report, name.lower(), lambda ns: f"{ns / MS:.1f} ms")
        return f"{name}: " + ", ".join(f"{percentile_label(p)} {ns / MS:.1f} ms" + (interval if p == 50 else "")
                                       for p, ns in sorted(shown.items()))

    def ms(ns):
        return "-" if ns is None else f"{ns / MS:g}"

    lines = [f"{report['requests']} requests in {report['duration_ns'] / NS:.2f} s: "
             f"{report['throughput_requests_per_s']:.2f} req/s, {report['throughput_tokens_per_s']:.0f} output tok/s"
             f"{describe_interval(report, 'throughput', lambda v: f'{v:.0f} tok/s')} "
             f"({report['throughput_input_tokens_per_s']:.0f} input tok/s), {report['preemptions']} preemptions",
             d("TTFT", "ttft_ns"), d("TPOT", "tpot_ns"), d("E2E", "e2e_ns"), d("queueing", "queueing_delay_ns")]
    if "goodput" in report:
        g = report["goodput"]
        targets = ", ".join(f"{what} <= {ms(g[key])} ms" for what, key in (("TTFT", "slo_ttft_ns"), ("TPOT", "slo_tpot_ns"))
                            if g.get(key) is not None)  # only the targets given
        lines.append(f"goodput: {g['requests_per_s']:.2f} req/s ({100 * g['fraction']:.1f} % of requests meet "
                     f"{targets})")
    for s in slos:
        what = f"{SLO_METRICS[s['metric']]} {percentile_label(s['percentile'])}"
        value = "n/a" if s["value_ns"] is None else f"{s['value_ns'] / MS:.1f} ms"
        lines.append(f"SLO {what} <= {ms(s['target_ns'])} ms: {'met' if s['met'] else 'MISSED'} ({what} is {value})")
    if "limits" in report and any(report["limits"].values()):
        lim = report["limits"]
        lines.append("iterations that left requests waiting, by limit: " + ", ".join(
            f"{k.replace('_', ' ')} {100 * v:.1f} %" for k, v in lim.items()))
    if report.get("energy"):
        from .energy import describe_energy

        lines.append(describe_energy(report["energy"], report.get("deployment", {}).get("gpus") or 1))
    if "kv_cache_utilisation" in report:
        k = report["kv_cache_utilisation"]
        lines.append(f"KV cache: {100 * k['mean']:.1f} % used on average, {100 * k['max']:.1f} % at most")
    return "\n".join(lines)
