"""Empirical prediction intervals for a simulated time, from the registry's cross-validated errors.

The 90 % interval of a simulated time ``t`` in a regime (training step, collective, serving) is
``[t * q05, t * q95]``, where ``q05`` and ``q95`` are the 5th and 95th percentiles (linear interpolation between
order statistics) of measured / simulated over that regime's cases, each predicted with its own source left out
(``astra validate --cv --save-residuals``; the shipped file is ``cases/residuals.json``).

It is **empirical**: no distribution is assumed, and it says how the model did on the registry's cases, no more.
With n cases the interval is never wider than their extremes, so with few cases it understates the tails, and it
covers the kind of run the cases are (their hardware, scale and software), not every run.
"""

from __future__ import annotations

import json
from pathlib import Path

from astra_sim.errors import ConfigError

from astra_validation.registry import CASES_DIR, TIME_KINDS

RESIDUALS = CASES_DIR / "residuals.json"
COVERAGE = 0.9
#: fewer cross-validated cases than this in a regime: no interval (one or two errors say nothing of a spread)
MIN_CASES = 3


def quantile(values, q):
    """The ``q``-quantile of ``values``: linear interpolation between the sorted values (position ``q (n - 1)``)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interval_ns(simulated_ns, errors, coverage=COVERAGE):
    """``(low_ns, high_ns)``: where the measured time lies for a simulated ``simulated_ns``, by the central
    ``coverage`` of measured / simulated = 1 / (1 + error) over ``errors`` (error = (simulated - measured) /
    measured)."""
    ratios = [1.0 / (1.0 + e) for e in errors]
    tail = (1.0 - coverage) / 2.0
    return round(simulated_ns * quantile(ratios, tail)), round(simulated_ns * quantile(ratios, 1.0 - tail))


def residuals_document(cv_summary, command):
    """The ``--save-residuals`` file: per regime, the cross-validated errors and the cases they come from."""
    regimes = {}
    for row in cv_summary["predictions"]:
        if row["kind"] in TIME_KINDS:
            regime = regimes.setdefault(row["kind"], {"errors": [], "cases": [], "sources": []})
            regime["errors"].append(row["error"])
            regime["cases"].append(row["name"])
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


__all__ = ["quantile", "interval_ns", "residuals_document", "load_residuals", "step_interval", "RESIDUALS",
           "COVERAGE", "MIN_CASES"]
