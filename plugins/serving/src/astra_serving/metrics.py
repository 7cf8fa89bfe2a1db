"""The serving report: per-request latencies and their percentiles, throughput, goodput under an SLO,
the queue (with Little's law's two sides) and KV-cache utilisation over time.

Definitions (vLLM's benchmark_serving ones): TTFT = first token - arrival; TPOT = (finish - first token) /
(output tokens - 1), for requests of more than one output token; E2E = finish - arrival; queueing delay =
first scheduled iteration's start - arrival. Throughput counts output tokens (and requests) over the makespan,
first arrival to last finish. Goodput: requests per second that met every given SLO.
"""

from __future__ import annotations

import numpy as np

NS = 1_000_000_000
MS = 1_000_000

#: what the report's numbers are in: JSON keeps integer ns (times) and bytes (sizes); names carry any other unit
#: (``throughput_tokens_per_s``); terminals show ms (:func:`describe`)
UNITS = {"time": "ns", "size": "bytes"}

#: the latency distributions of a report: (name, report key)
LATENCIES = (("ttft", "ttft_ns"), ("tpot", "tpot_ns"), ("e2e", "e2e_ns"), ("queueing", "queueing_delay_ns"))


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


def build_report(requests, cluster, slo_ttft_ms=None, slo_tpot_ms=None, max_points=400):
    """The report of served ``requests``: times in integer ns (``units``), SLOs given in ms read as ns."""
    ttft = [r.first_token_ns - r.arrival_ns for r in requests]
    e2e = [r.finish_ns - r.arrival_ns for r in requests]
    tpot = [t for t in (tpot_ns(r) for r in requests) if t is not None]
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
    def d(name, key):
        v = report[key]
        if v["p50"] is None:
            return f"{name}: n/a"
        return f"{name}: p50 {v['p50'] / MS:.1f} ms, p90 {v['p90'] / MS:.1f} ms, p99 {v['p99'] / MS:.1f} ms"

    def ms(ns):
        return "-" if ns is None else f"{ns / MS:g}"

    lines = [f"{report['requests']} requests in {report['duration_ns'] / NS:.2f} s: "
             f"{report['throughput_requests_per_s']:.2f} req/s, {report['throughput_tokens_per_s']:.0f} output tok/s "
             f"({report['throughput_input_tokens_per_s']:.0f} input tok/s), {report['preemptions']} preemptions",
             d("TTFT", "ttft_ns"), d("TPOT", "tpot_ns"), d("E2E", "e2e_ns"), d("queueing", "queueing_delay_ns")]
    if "goodput" in report:
        g = report["goodput"]
        targets = ", ".join(f"{what} <= {ms(g[key])} ms" for what, key in (("TTFT", "slo_ttft_ns"), ("TPOT", "slo_tpot_ns"))
                            if g.get(key) is not None)  # only the targets given
        lines.append(f"goodput: {g['requests_per_s']:.2f} req/s ({100 * g['fraction']:.1f} % of requests meet "
                     f"{targets})")
    if "limits" in report and any(report["limits"].values()):
        lim = report["limits"]
        lines.append("iterations that left requests waiting, by limit: " + ", ".join(
            f"{k.replace('_', ' ')} {100 * v:.1f} %" for k, v in lim.items()))
    if "kv_cache_utilisation" in report:
        k = report["kv_cache_utilisation"]
        lines.append(f"KV cache: {100 * k['mean']:.1f} % used on average, {100 * k['max']:.1f} % at most")
    return "\n".join(lines)
