"""A step's energy from the report's breakdown: every rank's parts at their class's power, in integer millijoules.

Each part of a rank's breakdown (``compute:gemm``, ``exposed:dp``, ``idle``, ...) runs at one power
(:data:`PART_CLASSES`): GEMMs at the GEMM power of the run's dtype, attention at the attention power,
memory-bound ops at the memory power, exposed communication at the communication power, and waits, CPU ops and
idle time at the idle power. Communication hidden under compute is charged as that compute (the breakdown gives the
time to the compute). A rank that finishes before the step's end idles until it (``wait_for_step_end``).

Energy is exact integer arithmetic: power in integer milliwatts times nanoseconds is picojoules, rounded to the
nearest millijoule per rank and part. Totals are sums of those integers, so the parts add up to the step exactly.
The GPUs' neighbours (host, NVSwitch, NICs, scale-out switches) draw a constant power per GPU over the step
(:mod:`astra_energy.system`), and the facility multiplies the IT energy by the PUE.
"""

from __future__ import annotations

#: breakdown part kind (before the ``:``) -> power class; ``compute:gemm`` is the GEMM class of the run's dtype
PART_CLASSES = {
    "compute:gemm": "gemm", "compute:attention": "attention", "compute:elementwise": "memory",
    "compute:other": "memory", "remote_memory": "memory", "exposed": "comm", "exposed_in_switch": "comm",
    "recv_wait": "idle", "cpu": "idle", "idle": "idle", "wait_for_step_end": "idle",
}
_PJ_PER_MJ = 10 ** 9


def part_class(part: str, gemm_class: str = "gemm") -> str:
    """The power class of breakdown part ``part`` (``exposed:dp`` -> ``comm``)."""
    cls = PART_CLASSES.get(part)
    if cls is None:
        cls = PART_CLASSES.get(part.partition(":")[0], "idle")
    return gemm_class if cls == "gemm" else cls


def millijoules(milliwatts: int, ns: int) -> int:
    """``milliwatts x ns`` (picojoules) to the nearest millijoule, in integers."""
    return (milliwatts * ns + _PJ_PER_MJ // 2) // _PJ_PER_MJ


def part_mw(part: str, class_mw: dict, gemm_class="gemm", own_mw=None) -> int:
    """The power of ``part`` (milliwatts): its own where ``own_mw`` (:mod:`astra_energy.utilisation`) has it, else
    its class's."""
    if own_mw:
        mw = own_mw.get(part)
        if mw is not None:
            return mw
    return class_mw[part_class(part, gemm_class)]


def rank_energy(parts: dict, step_ns: int, finish_ns: int, class_mw: dict, gemm_class="gemm", own_mw=None) -> dict:
    """``{part: mJ}`` of one rank over the step (its parts, and the wait from its finish to the step's end);
    ``own_mw``: parts whose power is not their class's (``{part: mW}``)."""
    out = {}
    for part, ns in parts.items():
        if ns:
            out[part] = millijoules(part_mw(part, class_mw, gemm_class, own_mw), ns)
    if step_ns > finish_ns:
        out["wait_for_step_end"] = millijoules(class_mw["idle"], step_ns - finish_ns)
    return out


def rank_peak_mw(parts: dict, class_mw: dict, gemm_class="gemm", own_mw=None) -> int:
    """The highest power of any phase the rank ran (milliwatts)."""
    return max((part_mw(part, class_mw, gemm_class, own_mw) for part, ns in parts.items() if ns),
               default=class_mw["idle"])


def step_energy(ranks, step_ns: int, class_mw: dict, gemm_class="gemm", own_mw=None) -> dict:
    """The GPUs' energy over one step: ``gpu_energy_mj`` (sum over ranks), ``by_part_mj`` (summed over ranks, adds
    up to it exactly), ``peak_mw`` (each rank's highest phase power, summed: every GPU at its peak at once) and the
    per-rank extremes. ``ranks``: ``(parts, finish_ns)`` per rank; ranks sharing one ``parts`` dict (and one
    ``own_mw`` entry) are computed once. ``own_mw``: ``{rank index: {part: mW}}``, parts whose power is not their
    class's (:mod:`astra_energy.utilisation`)."""
    by_part = {}
    total = 0
    peak_sum = 0
    peak_gpu = 0
    per_rank = []
    cache = {}
    for index, (parts, finish_ns) in enumerate(ranks):
        own = own_mw.get(index) if own_mw else None
        key = (id(parts), finish_ns, id(own))
        hit = cache.get(key)
        if hit is None:
            energy = rank_energy(parts, step_ns, finish_ns, class_mw, gemm_class, own)
            hit = cache[key] = (energy, sum(energy.values()), rank_peak_mw(parts, class_mw, gemm_class, own), parts,
                                own)
        energy, rank_total, peak, _, _ = hit
        for part, mj in energy.items():
            by_part[part] = by_part.get(part, 0) + mj
        total += rank_total
        peak_sum += peak
        peak_gpu = max(peak_gpu, peak)
        per_rank.append(rank_total)
    return {"gpu_energy_mj": total, "by_part_mj": by_part, "peak_mw_sum": peak_sum, "peak_mw_gpu": peak_gpu,
            "max_rank_energy_mj": max(per_rank, default=0), "min_rank_energy_mj": min(per_rank, default=0)}


__all__ = ["PART_CLASSES", "part_class", "part_mw", "millijoules", "rank_energy", "rank_peak_mw", "step_energy"]
