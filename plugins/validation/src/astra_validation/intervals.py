"""Empirical prediction intervals for a simulated time, from the registry's cross-validated errors.

The 90 % interval of a simulated time ``t`` in a regime (training step, collective, serving) is
``[t * q05, t * q95]``, where ``q05`` and ``q95`` are the 5th and 95th percentiles (linear interpolation between
order statistics) of measured / simulated over that regime's cases, each predicted with its own source left out
(``astra validate --cv --save-residuals``; the shipped file is ``cases/residuals.json``).

It is **empirical**: no distribution is assumed, and it says how the model did on the registry's cases, no more.
With n cases the interval is never wider than their extremes, so with few cases it understates the tails, and it
covers the kind of run the cases are (their hardware, scale and software), not every run.

Serving is one regime of three metric families (median TTFT, median TPOT, output-token throughput), which err for
different reasons: each family's interval comes from its own cases' errors (:func:`serving_intervals`, behind the
serving plugin's ``astra_serve_intervals`` hook). A throughput's error is on the throughput, so measured =
simulated / (1 + error) holds for it as for a time.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from astra_sim.errors import ConfigError

from astra_validation.registry import CASES_DIR, SERVING_FAMILIES, TIME_KINDS

RESIDUALS = CASES_DIR / "residuals.json"
COVERAGE = 0.9
#: fewer cross-validated cases than this in a regime: no interval (one or two errors say nothing of a spread)
MIN_CASES = 3
#: the serving regime's metric families: ttft, tpot, throughput
SERVING_FAMILY_NAMES = tuple(dict.fromkeys(SERVING_FAMILIES.values()))


def quantile(values, q):
    """The ``q``-quantile of ``values``: linear interpolation between the sorted values (position ``q (n - 1)``)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interval(simulated, errors, coverage=COVERAGE):
    """``(low, high)``: where the measured value lies for a ``simulated`` one (a time, or a throughput), by the
    central ``coverage`` of measured / simulated = 1 / (1 + error) over ``errors`` (error = (simulated - measured)
    / measured)."""
    ratios = [1.0 / (1.0 + e) for e in errors]
    tail = (1.0 - coverage) / 2.0
    return simulated * quantile(ratios, tail), simulated * quantile(ratios, 1.0 - tail)


def interval_ns(simulated_ns, errors, coverage=COVERAGE):
    """:func:`interval` of a time, in integer ns."""
    low, high = interval(simulated_ns, errors, coverage)
    return round(low), round(high)


def residuals_document(cv_summary, command):
    """The ``--save-residuals`` file: per regime, the cross-validated errors and the cases they come from."""
    regimes = {}
    for row in cv_summary["predictions"]:
        if row["kind"] in TIME_KINDS:
            regime = regimes.setdefault(row["kind"], {"errors": [], "cases": [], "sources": []})
            regime["errors"].append(row["error"])
            regime["cases"].append(row["name"])
            if row["kind"] == "serving":  # each case's metric family: its errors make that family's interval
                regime.setdefault("metrics", []).append(row.get("metric"))
            if row["source_id"] not in regime["sources"]:
                regime["sources"].append(row["source_id"])
    return {"generated_by": command, "what": "error = (simulated - measured) / measured of each case, predicted with "
            "its source left out (astra validate --cv)", "regimes": regimes,
            "not_predicted": [row["name"] for row in cv_summary["not_predicted"]]}


def load_residuals(path=None):
    """The residuals file (default: the shipped one), or None when it does not exist."""
    path = Path(path) if path else RESIDUALS
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        regimes = data["regimes"]
        for name, regime in regimes.items():
            if not all(isinstance(e, (int, float)) and e > -1 for e in regime["errors"]):
                raise ValueError(f"regime {name!r}: errors must be numbers above -1")
            metrics = regime.get("metrics")
            if metrics is not None and (not isinstance(metrics, list) or len(metrics) != len(regime["errors"])
                                        or not set(metrics) <= set(SERVING_FAMILY_NAMES)):
                raise ValueError(f"regime {name!r}: metrics must list one of {', '.join(SERVING_FAMILY_NAMES)} "
                                 "per error")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a residuals file of astra validate --save-residuals ({exc})") from None
    return data


def step_interval(simulated_ns, regime="llm_step", path=None):
    """``{"interval_ns": [low, high], "cases": n}`` for a simulated time of ``regime``, or None (no file, or fewer
    than MIN_CASES cross-validated cases in that regime)."""
    data = load_residuals(path)
    errors = ((data or {}).get("regimes", {}).get(regime) or {}).get("errors", [])
    if len(errors) < MIN_CASES:
        return None
    return {"interval_ns": list(interval_ns(simulated_ns, errors)), "cases": len(errors)}


def serving_family_errors(data):
    """``{family: [error, ...]}`` of the serving regime of a residuals document: each case's family from the file's
    ``metrics`` (written since they were added), else from the registry by case name (a name it does not hold is
    left out)."""
    regime = (data or {}).get("regimes", {}).get("serving") or {}
    errors = regime.get("errors", [])
    metrics = regime.get("metrics")
    if metrics is None:
        families = _registry_families()
        metrics = [families.get(name) for name in regime.get("cases", [])]
    out = {family: [] for family in SERVING_FAMILY_NAMES}
    for metric, error in zip(metrics, errors):
        if metric in out:
            out[metric].append(error)
    return out


@functools.lru_cache(maxsize=1)
def _registry_families():
    """``{case name: family}`` of the registry's serving cases (read once per process; their words are not parsed:
    ``astra serve`` asks for the families only)."""
    from astra_validation.registry import load_cases

    return {c.name: c.serving_family for c in load_cases(check=False) if c.kind == "serving"}


def serving_intervals(values, path=None):
    """``{family: {"interval": [low, high] or None, "cases": n}}`` for simulated serving metrics ``values``
    (``{"ttft": ns, "tpot": ns, "throughput": tokens/s}``; a None value has no interval), each from its own
    family's cross-validated errors (None with fewer than MIN_CASES); None when there is no residuals file."""
    data = load_residuals(path)
    if data is None:
        return None
    errors = serving_family_errors(data)
    out = {}
    for family, value in values.items():
        found = errors.get(family, [])
        usable = value is not None and len(found) >= MIN_CASES
        out[family] = {"interval": list(interval(value, found)) if usable else None, "cases": len(found)}
    return out


__all__ = ["quantile", "interval", "interval_ns", "serving_family_errors", "serving_intervals", "residuals_document",
           "load_residuals", "step_interval", "RESIDUALS", "COVERAGE", "MIN_CASES"]
