"""Fit the clock-power exponent ``alpha`` on ``clock_power.fit_points``; check it on ``clock_power.check_points``.

A fit point says: GPU ``gpu`` capped at ``power_limit_w`` ran a compute-bound load at ``relative_throughput`` of
its speed at the TDP, i.e. at that clock ratio ``r`` to the clock it ran at there. The model says the GEMM class
draws the cap at the one clock and ``P_T = min(P_gemm, TDP)`` at the other (a GEMM whose boost power exceeds the
TDP is already capped at it: the measured H200's, 992.7 W)::

    L - P_idle = (P_T - P_idle) * r ** alpha   =>   ln y = alpha ln r,  y = (L - P_idle) / (P_T - P_idle)

so ``alpha`` is the least-squares slope through the origin of ``ln y`` on ``ln r``. Check points never enter the
fit (docs/validation.md's rule: a constant is judged on cases it was not fitted on). Each names the op class whose
settled clock stands for it and the quantity measured: ``relative_throughput`` (the capped clock over the uncapped
one, :meth:`GpuPower.time_clock_ratio`) or ``clock_ratio`` (the clock over the maximum,
:meth:`GpuPower.settled_clock_ratio`). Run ``python -m astra_energy.fit`` to print alpha and the check errors;
``data/power.json``'s ``clock_power.alpha`` is the fit, rounded to 2 digits.
"""

from __future__ import annotations

import math

from astra_energy.power import gpu_power, power_data

CHECK_QUANTITIES = ("relative_throughput", "clock_ratio")


def fit_alpha(points) -> float:
    """The least-squares ``alpha`` of ``points`` (``{"gpu", "power_limit_w", "relative_throughput"}``)."""
    num = den = 0.0
    for point in points:
        power = gpu_power(point["gpu"])
        at_tdp = min(power.class_w["gemm"], power.tdp_w)
        y = (point["power_limit_w"] - power.idle_w) / (at_tdp - power.idle_w)
        r = point["relative_throughput"]
        if not (0 < y < 1 and 0 < r < 1):
            raise ValueError(f"fit point {point}: limit must lie between idle and GEMM power, throughput in (0, 1)")
        num += math.log(y) * math.log(r)
        den += math.log(r) ** 2
    return num / den


def check(points, alpha=None) -> list:
    """The model's value and error (``predicted / measured - 1``) at each check point, with ``alpha`` (default: the
    data's) for every GPU: ``[{"name", "quantity", "measured", "predicted", "error", "same_source_as_fit"}]``."""
    from dataclasses import replace

    rows = []
    for point in points:
        if point["quantity"] not in CHECK_QUANTITIES:
            raise ValueError(f"check point {point['name']}: quantity must be one of {', '.join(CHECK_QUANTITIES)}")
        power = gpu_power(point["gpu"])
        if alpha is not None:
            power = replace(power, alpha=alpha)
        limit, cls = point["power_limit_w"], point["op_class"]
        if point["quantity"] == "relative_throughput":
            predicted = power.time_clock_ratio(cls, limit)
        else:
            predicted = power.settled_clock_ratio(cls, limit)
        rows.append({"name": point["name"], "quantity": point["quantity"], "measured": point["measured"],
                     "predicted": predicted, "error": predicted / point["measured"] - 1.0,
                     "same_source_as_fit": bool(point.get("same_source_as_fit", False))})
    return rows


def main():
    clock_power = power_data()["clock_power"]
    points = clock_power["fit_points"]
    alpha = fit_alpha(points)
    print(f"alpha = {alpha:.4f} from {len(points)} fit point(s); data/power.json has {clock_power['alpha']}")
    for row in check(clock_power["check_points"]):
        mark = " (same source as the fit: not independent)" if row["same_source_as_fit"] else ""
        print(f"check {row['name']:34s} {row['quantity']:19s} measured {row['measured']:.3f} model "
              f"{row['predicted']:.3f} error {100 * row['error']:+5.1f}%{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
