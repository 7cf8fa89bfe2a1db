"""The numbers ``astra validate`` reports over its results: median and worst |error|, and the sign balance.

The headline counts only ``check`` cases of the time kinds (training step, collective, serving): a ``fit`` case's
error says how well a constant was fitted, not how well the model predicts. Memory cases are their own group.
Signs are counted as a time's: positive is slow (a serving throughput's error, on the throughput, counts with its
sign flipped). Left one source out (``--cv``), serving is reported apart from training steps, per metric family: a
TTFT, a TPOT and a throughput err for different reasons.
"""

from __future__ import annotations

import statistics

from astra_validation.registry import TIME_KINDS


def sign_balance(errors):
    """``{"positive", "negative", "zero", "larger_share", "larger_side"}``: how many errors are positive (simulated
    above measured: too slow, or too much memory) and negative; ``larger_share`` is the larger side's fraction.
    An unbiased model is near 0.5; 1.0 means every case errs the same way."""
    positive = sum(1 for e in errors if e > 0)
    negative = sum(1 for e in errors if e < 0)
    zero = len(errors) - positive - negative
    if not errors:
        return {"positive": 0, "negative": 0, "zero": 0, "larger_share": None, "larger_side": None}
    side = "positive" if positive >= negative else "negative"
    return {"positive": positive, "negative": negative, "zero": zero,
            "larger_share": max(positive, negative) / len(errors), "larger_side": side}


def time_sign_error(row):
    """A row's error with the sign of a time (positive: the model is slow). A serving throughput's error is on the
    throughput (``metric: throughput``), whose sign is the opposite: a throughput above the measured one is fast."""
    return -row["error"] if row.get("metric") == "throughput" else row["error"]


def error_stats(results):
    """``{"cases", "median_abs_error", "max_abs_error", "worst", "sign_balance"}`` of result rows (``error`` each);
    the signs are counted as a time's (:func:`time_sign_error`)."""
    errors = [time_sign_error(r) for r in results]
    if not errors:
        return {"cases": 0, "median_abs_error": None, "max_abs_error": None, "worst": None,
                "sign_balance": sign_balance([])}
    worst = max(results, key=lambda r: abs(r["error"]))
    return {"cases": len(errors), "median_abs_error": statistics.median(abs(e) for e in errors),
            "max_abs_error": abs(worst["error"]), "worst": worst["name"], "sign_balance": sign_balance(errors)}


def summarize(results):
    """The JSON ``summary``: the headline (``check`` cases of the time kinds) and one group per kind (its
    ``check`` cases), plus how many ``fit`` cases were left out."""
    checks = [r for r in results if r.get("role", "check") == "check"]
    headline = error_stats([r for r in checks if r["kind"] in TIME_KINDS])
    groups = {kind: error_stats([r for r in checks if r["kind"] == kind])
              for kind in dict.fromkeys(r["kind"] for r in results)}
    return {**headline, "fit_cases_not_counted": len(results) - len(checks), "groups": groups}


#: a serving case's metric family -> (its name in a terminal, the words for a time-signed error above and below 0)
SERVING_FAMILY_WORDS = {"ttft": ("TTFT", "long", "short"), "tpot": ("TPOT", "long", "short"),
                        "throughput": ("throughput", "low", "high")}


def serving_loso(predictions, results):
    """``summary.cv.serving``: the serving cases' leave-one-source-out errors, apart from training steps: over all of
    them, per metric family (``ttft``, ``tpot``, ``throughput``) and per source (the one left out); signs as a
    time's (a throughput above the measured one is fast). ``not_predicted``: the serving cases whose source a
    constant was fitted on that cannot be refitted without it (not counted)."""
    family = {r["name"]: r.get("metric") for r in results}
    rows = [{**r, "metric": family.get(r["name"])} for r in predictions if r["kind"] == "serving"]
    predicted = {r["name"] for r in rows}
    return {**error_stats(rows),
            "not_predicted": [{"name": r["name"], "source_id": r["source_id"]} for r in results
                              if r["kind"] == "serving" and r["name"] not in predicted],
            "families": {f: error_stats([r for r in rows if r["metric"] == f]) for f in SERVING_FAMILY_WORDS},
            "sources": {s: error_stats([r for r in rows if r["source_id"] == s])
                        for s in dict.fromkeys(r["source_id"] for r in rows)}}


def cv_lines(cv):
    """The terminal lines of ``--cv`` after its headline: training steps, collectives and serving each apart;
    serving per metric family and per source left out."""
    groups, lines = cv.get("groups", {}), []
    for kind, what in (("llm_step", "training steps"), ("collective", "collectives")):
        if groups.get(kind, {}).get("cases"):
            lines.append(f"  {what}, source out: {describe(groups[kind])}")
    serving = cv.get("serving")
    if serving and serving["cases"]:
        lines.append(f"  serving, source out: {describe(serving)} (a throughput above the measured one is fast)")
        for key, (name, positive, negative) in SERVING_FAMILY_WORDS.items():
            if serving["families"][key]["cases"]:
                lines.append(f"    {name}: {describe(serving['families'][key], 'case', positive, negative)}")
        for source, stats in serving["sources"].items():
            lines.append(f"    {source} left out: {describe(stats)}")
    unpredicted = (serving or {}).get("not_predicted", [])
    if unpredicted:
        lines.append(f"  serving cases with no out-of-source prediction (not counted): {len(unpredicted)}, from "
                     f"{', '.join(sorted({r['source_id'] for r in unpredicted}))}")
    return lines


def describe_balance(balance, positive="slow", negative="fast"):
    """``"3 slow, 6 fast: 67 % fast"`` for terminals."""
    if balance["larger_share"] is None:
        return "no cases"
    side = positive if balance["larger_side"] == "positive" else negative
    return (f"{balance['positive']} {positive}, {balance['negative']} {negative}: "
            f"{100 * balance['larger_share']:.0f} % {side}")


def describe(stats, what="case", positive="slow", negative="fast"):
    """``"median |error| 1.7 %, max 6.1 % (name), 9 cases; signs: 5 slow, 4 fast: 56 % slow"``."""
    if not stats["cases"]:
        return f"no {what}s"
    n = stats["cases"]
    return (f"median |error| {100 * stats['median_abs_error']:.1f} %, max {100 * stats['max_abs_error']:.1f} % "
            f"({stats['worst']}), {n} {what}{'s' if n != 1 else ''}; signs: "
            f"{describe_balance(stats['sign_balance'], positive, negative)}")


__all__ = ["sign_balance", "time_sign_error", "error_stats", "summarize", "describe", "describe_balance",
           "serving_loso", "cv_lines"]
