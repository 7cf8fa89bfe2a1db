"""Energy of a serving run: each iteration's IT energy split over the requests in it, with the replicas' idle power.

Why here: a serving run times its iterations from memoised step shapes (steptime.py), so the energy plugin's
``stats.energy`` of each simulated step is kept beside its time and interpolated with the same weights
(:meth:`StepTimer.energy_mj`). An iteration's energy is its steps' IT energy on the replica's GPUs, plus the
replica's idle IT power over the rest of the iteration (the scheduler pass's host time, swap copies, the sampler's
kernels: a lower bound for those) and over the gap before it (the replica waited for that work). It is split over
the iteration's sequences by the tokens each was scheduled (a decode one, a prefill chunk its tokens); the lazy
decoders (engine.py) take theirs through a running sum per engine (:meth:`Engine.charge`). The idle power after a
replica's last iteration to the run's end (and of a replica that ran nothing) is split over every request by its
tokens (prompt and output).

Energy adds up exactly: the run's total, rounded once to an integer mJ, is apportioned over the requests (each its
share's floor, the remainder one mJ each to the largest fractional parts, ties by request id), so the requests'
integer mJ sum to the total. Units: mW x ns = 1e-9 mJ.
"""

from __future__ import annotations

import math

from .metrics import distribution_ns

#: mW x ns in mJ
MJ_PER_MW_NS = 1e-9


def apportion(total, shares):
    """Integers summing to ``total`` (int >= 0), each within 1 of its float share scaled to that total (largest
    remainders, ties by position): how the run's integer mJ are given to its requests."""
    if not shares:
        return []
    whole = sum(shares)
    scaled = [s * total / whole for s in shares] if whole > 0 else [total / len(shares)] * len(shares)
    out = [math.floor(s) for s in scaled]
    left = total - sum(out)
    if not left:
        return out
    # largest fractional part first, ties by position (the sort is stable); -(s - o) is exactly o - s
    order = sorted(range(len(out)), key=[o - s for s, o in zip(scaled, out)].__getitem__)
    for k in range(abs(left)):  # |left| < len(out) but for float rounding of the scaled shares
        out[order[k % len(out)] if left > 0 else order[-1 - k % len(out)]] += 1 if left > 0 else -1
    return out


class EnergyMeter:
    """The energy of one serving run's iterations (:meth:`iteration`, called as each is scheduled) and the idle
    power of its replicas (each replica's IT power when idle, int mW, read from the first simulated step).
    ``available`` turns False for good when a step has no ``stats.energy`` (a GPU without power data)."""

    def __init__(self, start_ns):
        self.start_ns = start_ns
        self.idle_mw = None
        self.available = True
        self.last_end = {}       # engine index -> end of its last iteration (ns)
        self.busy_mj = 0.0       # the iterations' step energy
        self.idle_mj = 0.0       # idle power between and inside iterations, and after the last ones

    def iteration(self, engine, batch, now, duration):
        """Charge the iteration of ``batch`` on ``engine``, from ``now`` for ``duration`` ns, to its sequences."""
        if not self.available:
            return
        steps_mj, energy_mj = 0.0, engine.timer.energy_mj
        for shape in batch.shapes:  # what end_ns timed
            step_mj = energy_mj(*shape)
            if step_mj is None:
                self.available = False
                return
            steps_mj += step_mj
        idle_mw = self.idle_mw
        if idle_mw is None:
            idle_mw = self.idle_mw = engine.timer.idle_mw()
        # idle before the iteration, and in it while the host schedules and the swap copies run (engine.end_ns); the
        # sampler's kernels (sampler.py) at the idle power too: a lower bound (their own power is not simulated)
        last_end, index = self.last_end, engine.index
        gap = now - last_end.get(index, self.start_ns)
        idle = idle_mw * ((gap if gap > 0 else 0) + batch.host_ns + batch.extra_ns + batch.sampler_ns) * MJ_PER_MW_NS
        last_end[index] = now + duration
        self.busy_mj += steps_mj
        self.idle_mj += idle
        engine.charge(batch, steps_mj + idle)

    def finish(self, requests, engines, end_ns):
        """Split the idle power after each replica's last iteration over ``requests``, give each its integer mJ
        (``Request.energy_mj``) and return the report's ``energy`` section; None when not ``available``."""
        if not self.available or self.idle_mw is None or not requests:
            return None
        tail_ns = sum(max(0, end_ns - self.last_end.get(e.index, self.start_ns)) for e in engines)
        tail = self.idle_mw * tail_ns * MJ_PER_MW_NS
        self.idle_mj += tail
        tokens = sum(r.prompt_tokens + r.output_tokens for r in requests)
        for r in requests:
            r.energy_share_mj += tail * (r.prompt_tokens + r.output_tokens) / tokens
        total = int(round(self.busy_mj + self.idle_mj))
        for r, mj in zip(requests, apportion(total, [r.energy_share_mj for r in requests])):
            r.energy_mj = mj
        return energy_report(requests, total, int(round(self.idle_mj)), end_ns - self.start_ns, self.idle_mw)


def energy_report(requests, total_mj, idle_mj, duration_ns, idle_mw):
    """The report's ``energy``: integer mJ (the run's IT energy, its idle part, per request p50/p90/p99, mean and
    max), mJ per output token and the mean IT power (W)."""
    out_tokens = sum(r.output_tokens for r in requests)
    per_request = distribution_ns([r.energy_mj for r in requests])  # integer rounding as the times'
    return {"it_energy_mj": total_mj, "idle_energy_mj": idle_mj, "per_request_mj": per_request,
            "it_energy_per_output_token_mj": total_mj / out_tokens if out_tokens else None,
            "mean_power_w": total_mj * 1e6 / duration_ns if duration_ns > 0 else None,
            "idle_power_w_per_replica": idle_mw / 1000}


def describe_energy(energy, gpus):
    """One terminal line (J and W)."""
    p = energy["per_request_mj"]
    per_token = energy["it_energy_per_output_token_mj"]
    power = energy["mean_power_w"]
    return (f"energy: {energy['it_energy_mj'] / 1000:,.1f} J IT; per request p50 {p['p50'] / 1000:,.1f} J, "
            f"p90 {p['p90'] / 1000:,.1f} J, p99 {p['p99'] / 1000:,.1f} J; "
            + (f"{per_token / 1000:.3f} J per output token; " if per_token is not None else "")
            + (f"mean IT power {power / 1000:,.2f} kW ({power / gpus:,.0f} W per GPU)" if power is not None else ""))
