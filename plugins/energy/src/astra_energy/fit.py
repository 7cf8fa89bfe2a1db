"""Fit the clock-power exponent ``alpha`` from published power-cap measurements (``clock_power.fit_points``).

A point says: GPU ``gpu`` capped at ``power_limit_w`` ran a compute-bound load at ``relative_throughput`` of its
uncapped speed, i.e. at that clock ratio ``r``. The model says the GEMM class then draws the limit::

    L = P_idle + (P_gemm - P_idle) * r ** alpha   =>   ln y = alpha ln r,  y = (L - P_idle) / (P_gemm - P_idle)

so ``alpha`` is the least-squares slope through the origin of ``ln y`` on ``ln r``. Run ``python -m
astra_energy.fit`` to print it; ``data/power.json``'s ``clock_power.alpha`` is its answer, rounded to 2 digits.
"""

from __future__ import annotations

import math

from astra_energy.power import gpu_power, power_data


def fit_alpha(points) -> float:
    """The least-squares ``alpha`` of ``points`` (``{"gpu", "power_limit_w", "relative_throughput"}``)."""
    num = den = 0.0
    for point in points:
        power = gpu_power(point["gpu"])
        y = (point["power_limit_w"] - power.idle_w) / (power.class_w["gemm"] - power.idle_w)
        r = point["relative_throughput"]
        if not (0 < y < 1 and 0 < r < 1):
            raise ValueError(f"fit point {point}: limit must lie between idle and GEMM power, throughput in (0, 1)")
        num += math.log(y) * math.log(r)
        den += math.log(r) ** 2
    return num / den


def main():
    points = power_data()["clock_power"]["fit_points"]
    alpha = fit_alpha(points)
    print(f"alpha = {alpha:.4f} from {len(points)} point(s); data/power.json has "
          f"{power_data()['clock_power']['alpha']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
