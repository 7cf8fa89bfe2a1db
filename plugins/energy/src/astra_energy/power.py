"""A GPU's power: idle, per op class at full utilisation, and the clock it settles at under a limit.

The clock-power curve (``data/power.json``, ``clock_power``)::

    P(class, f) = P_idle + (P_class - P_idle) * (f / f_max) ** alpha

``P_class`` is what the class draws fully busy at the maximum clock with no limit: a fraction of the TDP per class
(``class_fraction_of_tdp``), or, for a GPU that names a ``class_power`` measurement (``measured_class_power``: the
H200 SXM's, and the GH100 SXM boards' by ASSUMPTION), the power each class was measured to settle at under the limit,
moved to the maximum clock by the same curve (:func:`boost_power_w`). Under a power limit ``L`` a class whose ``P_class`` exceeds ``L`` runs at the clock
where ``P = L``; a clock lock caps ``f`` too (``nvidia-smi -lgc``), and the limit still applies. Without a flag the
limit is the board's default: its TDP, or a lower ``default_power_limit_w`` where the machine ships with one (Grand
Teton's H100s run at 500 W of 700). The gpu compute model's rates were calibrated on GPUs at their TDP, so its times
are scaled by the settled clock over the clock at the TDP (:meth:`GpuPower.time_clock_ratio`), for compute-bound work
only (the gpu model applies it to the FLOP rate, not to HBM bandwidth).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from astra_gpu_model.power_clock import settled_clock_ratio
from astra_sim.errors import ConfigError

#: the op classes that have a power (the breakdown's parts map onto them in :mod:`astra_energy.account`)
CLASSES = ("gemm", "gemm_fp32", "attention", "memory", "comm", "idle")


@functools.lru_cache(maxsize=1)
def power_data() -> dict:
    """``data/power.json`` (read once)."""
    with open(Path(__file__).with_name("data") / "power.json", encoding="utf-8") as handle:
        return json.load(handle)


@dataclass(frozen=True)
class GpuPower:
    """One GPU's power numbers (watts, MHz) and its clock-power exponent."""

    name: str
    tdp_w: float
    idle_w: float
    max_clock_mhz: float
    class_w: dict = field(default_factory=dict)
    alpha: float = 1.0
    default_limit_w: float | None = None  # the board's default limit where it is below the TDP (None: the TDP)
    #: the memory class's measured saturated copy rate over the HBM peak (None: the memory power is no copy's)
    copy_fraction_of_peak: float | None = None
    #: ``{dtype: the GEMM class's measured settled rate over the dense peak}`` (empty: no measured rate)
    gemm_rate_fraction_of_peak: dict = field(default_factory=dict)

    @property
    def default_limit(self) -> float:
        """The limit a run gets without ``--power-limit-w``: the board's default (watts)."""
        return self.tdp_w if self.default_limit_w is None else self.default_limit_w

    def watts(self, cls: str, clock_ratio: float = 1.0) -> float:
        """Power of ``cls`` running at ``clock_ratio`` x the maximum clock (``idle`` is the idle power)."""
        if cls == "idle":
            return self.idle_w
        return self.idle_w + (self.class_w[cls] - self.idle_w) * clock_ratio ** self.alpha

    def settled_clock_ratio(self, cls: str, power_limit_w: float | None = None, clock_mhz: float | None = None) -> float:
        """The clock (over the maximum) ``cls`` runs at under ``power_limit_w`` (None: the default limit) and a clock
        lock."""
        limit = self.default_limit if power_limit_w is None else power_limit_w
        ratio = 1.0 if clock_mhz is None else min(1.0, clock_mhz / self.max_clock_mhz)
        if cls == "idle":
            return ratio
        # the DVFS law is the gpu model's (power_clock, which slows burst-fitted GEMMs by it); a lock below the
        # settled clock keeps the lock
        return min(ratio, settled_clock_ratio(self.class_w[cls], self.idle_w, limit, self.alpha))

    def time_clock_ratio(self, cls: str, power_limit_w=None, clock_mhz=None) -> float:
        """Settled clock over the clock at the TDP with no lock (where the gpu model's rates were calibrated): what
        its rates are scaled by. Below 1 without flags where the board's default limit is below its TDP."""
        return self.settled_clock_ratio(cls, power_limit_w, clock_mhz) / self.settled_clock_ratio(cls, self.tdp_w)

    def check_limits(self, power_limit_w=None, clock_mhz=None):
        """ConfigError naming the flag when a limit is outside what the GPU accepts."""
        if power_limit_w is not None and not (self.idle_w < power_limit_w <= self.tdp_w):
            raise ConfigError(f"--power-limit-w {power_limit_w:g}: {self.name} accepts a limit above its idle power "
                              f"({self.idle_w:g} W) and at most its TDP ({self.tdp_w:g} W)")
        if clock_mhz is not None and not (0 < clock_mhz <= self.max_clock_mhz):
            raise ConfigError(f"--gpu-clock-mhz {clock_mhz:g}: {self.name} runs at most at {self.max_clock_mhz:g} MHz "
                              "(and above 0)")


def boost_power_w(settled_w: float, settled_clock_mhz: float, max_clock_mhz: float, idle_w: float,
                  alpha: float) -> float:
    """What a class measured drawing ``settled_w`` at ``settled_clock_mhz`` would draw at the maximum clock: the
    clock-power curve solved for ``P_class`` (the algebra of ``power_clock.gemm_boost_power_w``); a point at the
    maximum clock is its own boost power."""
    ratio = settled_clock_mhz / max_clock_mhz
    if not 0 < ratio <= 1 or settled_w <= idle_w:
        raise ValueError(f"settled point {settled_w} W at {settled_clock_mhz} MHz: needs idle < power and "
                         f"0 < clock <= {max_clock_mhz} MHz")
    return idle_w + (settled_w - idle_w) / ratio ** alpha


def measured_class_w(name: str) -> dict:
    """``{class: watts at the maximum clock}`` of measurement ``name`` (``measured_class_power``), from each class's
    settled point, with the measurement's own idle power and maximum clock."""
    data = power_data()
    entry = data["measured_class_power"][name]
    alpha = float(data["clock_power"]["alpha"])
    points = entry["points"]
    return {cls: boost_power_w(points[point]["settled_w"], points[point]["settled_clock_mhz"],
                               entry["max_clock_mhz"], entry["idle_w"], alpha)
            for cls, point in entry["classes"].items()}


def known_gpus() -> list:
    return sorted(power_data()["gpus"])


def gpu_power(name: str) -> GpuPower | None:
    """The power numbers of GPU ``name`` (a gpu_model preset name), or None when the data has none."""
    entry = power_data()["gpus"].get(name)
    if entry is None:
        return None
    default = entry.get("default_power_limit_w")
    return _build(name, float(entry["tdp_w"]), float(entry["idle_w"]), float(entry["max_clock_mhz"]),
                  None if default is None else float(default), entry.get("class_power"))


def gpu_power_of(spec) -> GpuPower | None:
    """The power of a gpu_model ``GpuSpec``: its preset's numbers, else (a user's GPU YAML) its ``tdp_w`` and
    ``boost_clock_mhz`` with the assumed idle fraction (``unknown_gpu``); None without those two."""
    known = gpu_power(spec.name)
    if known is not None or not (spec.tdp_w and spec.boost_clock_mhz):
        return known
    idle = power_data()["unknown_gpu"]["idle_fraction_of_tdp"] * spec.tdp_w
    return _build(spec.name, float(spec.tdp_w), idle, float(spec.boost_clock_mhz))


def _build(name, tdp, idle, clock, default_limit=None, class_power=None):
    data = power_data()
    fractions = data["class_fraction_of_tdp"]
    class_w = {cls: fractions[cls] * tdp for cls in CLASSES if cls != "idle"}
    copy_fraction, gemm_fractions = None, {}
    if class_power is not None:  # measured classes replace the fractions; the rest (gemm_fp32, comm) keep them
        class_w.update(measured_class_w(class_power))
        copy_fraction = copy_fraction_of_peak(class_power)
        gemm_fractions = gemm_rate_fraction_of_peak(class_power)
    return GpuPower(name=name, tdp_w=tdp, idle_w=idle, max_clock_mhz=clock, class_w=class_w,
                    alpha=float(data["clock_power"]["alpha"]), default_limit_w=default_limit,
                    copy_fraction_of_peak=copy_fraction, gemm_rate_fraction_of_peak=gemm_fractions)


def copy_fraction_of_peak(name: str) -> float | None:
    """The measured copy's rate over its board's HBM peak for measurement ``name``'s memory class (None: its memory
    point states no rate): where a memory-bound kernel draws the whole memory class power."""
    entry = power_data()["measured_class_power"][name]
    point = entry["points"].get(entry["classes"].get("memory", ""), {})
    if "rate_bytes_per_s" not in point:
        return None
    return float(point["rate_bytes_per_s"]) / float(point["peak_hbm_bytes_per_s"])


def gemm_rate_fraction_of_peak(name: str) -> dict:
    """``{dtype: settled rate over the dense peak}`` of measurement ``name``'s GEMM points (``gemm_rates``): the
    throughput the GEMM class's power buys, against which a memory-bound GEMM's tensor share is counted."""
    entry = power_data()["measured_class_power"][name]
    out = {}
    for dtype, point in entry.get("gemm_rates", {}).items():
        point = entry["points"][point]
        out[dtype] = float(point["rate_flops_per_s"]) / float(point["peak_flops_per_s"])
    return out


__all__ = ["CLASSES", "GpuPower", "boost_power_w", "copy_fraction_of_peak", "gemm_rate_fraction_of_peak", "gpu_power",
           "gpu_power_of", "known_gpus", "measured_class_w", "power_data"]
