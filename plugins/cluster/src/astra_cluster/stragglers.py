"""Stragglers: per-GPU compute slowdowns, drawn with a seed, and the step-time distribution they give.

A factor is ``exp(sigma x N(0, 1))`` (a lognormal of median 1) or a value drawn uniformly from ``table``, clipped
below at ``min_factor`` (default 1: no GPU runs faster than its model); ``slow_gpus`` fixes some GPUs' factors.
Each draw slows the job's GPUs' compute (the ``slowed`` compute model) and is simulated; a synchronous step
waits for its slowest rank, so the distribution's tail is the slowest GPU's. The GPUs that set the pace are, per
draw that is slower than nominal, those with the largest factor (the others wait for them in every collective);
the report counts them. With ``op_jitter_sigma`` every compute op is also scaled by its own lognormal factor
(a new seed per draw): each collective waits for the slowest of the N ranks (the max-of-N effect), and the GPU
that set the pace in a draw is the one that computed longest."""

from __future__ import annotations

import math


def draw_factors(stragglers, gpus, rng) -> dict:
    """``{GPU: factor}`` for ``gpus`` (factors of exactly 1.0 left out)."""
    out = {}
    for gpu in gpus:
        if stragglers.table is not None:
            factor = rng.choice(stragglers.table)
        elif stragglers.sigma:
            factor = math.exp(rng.gauss(0.0, stragglers.sigma))
        else:
            factor = 1.0
        factor = max(stragglers.min_factor, factor)
        factor = stragglers.slow_gpus.get(gpu, factor)
        if factor != 1.0:
            out[gpu] = factor
    return out


def percentile(values, q) -> int:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``."""
    ordered = sorted(values)
    index = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[index]


def straggler_study(steps, job, gpus, stragglers, rng) -> dict:
    """The step of ``job`` on ``gpus`` over ``stragglers.draws`` seeded draws (a
    :class:`~astra_cluster.steps.StepTimes` simulates each distinct one once): nominal, median, p95, p99, and
    how often each GPU set the pace."""
    nominal = steps.step_ns(job, gpus)
    times, pace = [], {}
    for _ in range(stragglers.draws):
        factors = draw_factors(stragglers, gpus, rng)
        jitter = (stragglers.op_jitter_sigma, rng.randrange(1 << 31)) if stragglers.op_jitter_sigma else None
        step, busiest = steps.step_and_busiest(job, gpus, factors, jitter)
        times.append(step)
        if step <= nominal:
            continue
        if jitter:
            pace[gpus[busiest]] = pace.get(gpus[busiest], 0) + 1
            continue
        slowest = max((factors.get(gpu, 1.0) for gpu in gpus), default=1.0)
        for gpu in gpus:
            if factors.get(gpu, 1.0) == slowest:
                pace[gpu] = pace.get(gpu, 0) + 1
    return {"job": job.name, "draws": len(times), "op_jitter_sigma": stragglers.op_jitter_sigma,
            "nominal_step_ns": nominal,
            "median_step_ns": percentile(times, 50), "p95_step_ns": percentile(times, 95),
            "p99_step_ns": percentile(times, 99), "max_step_ns": max(times),
            "mean_slowdown": sum(times) / len(times) / nominal if nominal else 1.0,
            "pace_setters": [{"gpu": gpu, "draws": count} for gpu, count in
                             sorted(pace.items(), key=lambda item: (-item[1], item[0]))][:8],
            "step_ns_by_draw": times}
