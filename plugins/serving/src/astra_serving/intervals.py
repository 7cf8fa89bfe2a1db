"""90 % prediction intervals of a serve report's median TTFT, median TPOT and output-token throughput.

How far the model's serving metrics are from measured ones is known to astra-validation (its registry's
cross-validated errors), which depends on astra-serving; serving must not import it back. So this module declares a
hook of serving's own, :func:`astra_serve_intervals`, added to the plugin manager when a report asks for it, and
astra-validation implements it (``optionalhook``: a plugin manager without serving still loads it). No
implementation (validation not installed, or blocked): the report has no ``interval_90``.
"""

from __future__ import annotations

import sys

import pluggy

from astra_sim import PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)

#: metric family -> the report value its interval is of: (report key, statistic or None, interval key)
METRICS = {"ttft": ("ttft_ns", "p50", "ttft_p50_ns"), "tpot": ("tpot_ns", "p50", "tpot_p50_ns"),
           "throughput": ("throughput_tokens_per_s", None, "throughput_tokens_per_s")}


@hookspec(firstresult=True)
def astra_serve_intervals(values):
    """The 90 % interval of each simulated serving metric.

    ``values``: ``{"ttft": median TTFT ns, "tpot": median TPOT ns, "throughput": output tokens/s}`` (None when the
    report has none). Returns ``{family: {"interval": [low, high] or None, "cases": n}}`` (None: too few cases of
    that family to say), or None when the implementation has nothing to give. The first non-None answer wins.
    """


def _caller(pm):
    """The hook's caller on ``pm``, its spec added the first time (the kernel declares only its own hooks)."""
    caller = getattr(pm.hook, "astra_serve_intervals", None)
    if caller is None or caller.spec is None:
        pm.add_hookspecs(sys.modules[__name__])
        caller = pm.hook.astra_serve_intervals
    return caller


def report_intervals(report, pm):
    """The report's ``interval_90``: ``{"ttft_p50_ns": [low, high] | None, "tpot_p50_ns": ..., (integer ns)
    "throughput_tokens_per_s": [low, high] | None, "cases": {family: n}}``, or None when no plugin gives intervals."""
    values = {}
    for family, (key, stat, _) in METRICS.items():
        value = report.get(key)
        values[family] = value.get(stat) if stat and isinstance(value, dict) else value
    found = _caller(pm)(values=values)
    if found is None:
        return None
    out = {"cases": {}}
    for family, (_, _, name) in METRICS.items():
        entry = found.get(family) or {}
        low_high = entry.get("interval")
        if low_high is not None:
            low_high = [round(v) for v in low_high] if name.endswith("_ns") else [float(v) for v in low_high]
        out[name] = low_high
        out["cases"][family] = int(entry.get("cases") or 0)
    return out


def describe_interval(report, family, shown):
    """``" (90 %: 95.1-130.4 ms, empirical over 12 validated cases)"``, or ``" (90 %: none, 2 validated cases)"``,
    for the terminal after a metric; ``shown(value)`` writes one value in the terminal's unit. "" when the report
    has no intervals, or ``family`` has none (E2E, queueing)."""
    intervals = report.get("interval_90")
    if not intervals or family not in METRICS:
        return ""
    low_high, cases = intervals.get(METRICS[family][2]), intervals["cases"].get(family, 0)
    if low_high is None:
        return f" (90 %: none, {cases} validated case{'s' if cases != 1 else ''})"
    return f" (90 %: {shown(low_high[0])}-{shown(low_high[1])}, empirical over {cases} validated cases)"
