"""``stats.energy``: a step's energy and power, from the breakdown (:mod:`astra_energy.account`), the GPU's power
(:mod:`astra_energy.power`) and the rest of the system (:mod:`astra_energy.system`)."""

from __future__ import annotations

import math

from astra_energy.account import millijoules, step_energy

#: the numbers of ``stats.energy`` (declared with astra_register_metrics)
METRICS = (
    ("gpu_energy_mj", "mj", "every GPU's energy over one step (the sum of by_part_mj, exactly)"),
    ("by_part_mj.*", "mj", "the GPUs' step energy by breakdown part (compute:gemm, exposed:dp, idle, ...)"),
    ("by_component_mj.*", "mj", "the step's IT energy by component: gpu, host, nvswitch, nic, network_switches"),
    ("it_energy_mj", "mj", "GPUs plus host, NVSwitch, NICs and scale-out switches over one step"),
    ("facility_energy_mj", "mj", "IT energy x PUE"),
    ("pue", "ratio", "the facility's power usage effectiveness (facility over IT energy, >= 1)"),
    ("gpu_clock_lock_mhz", "mhz", "the SM clock lock (--gpu-clock-mhz)"),
    ("max_rank_energy_mj", "mj", "the highest energy of one GPU over the step"),
    ("min_rank_energy_mj", "mj", "the lowest energy of one GPU over the step"),
    ("gpu_energy_per_token_mj", "mj", "GPU energy per token of the step (an LLM step's tokens)"),
    ("it_energy_per_token_mj", "mj", "IT energy per token of the step"),
    ("facility_energy_per_token_mj", "mj", "facility energy per token of the step"),
    ("mean_power_w_per_gpu", "w", "a GPU's mean power over the step"),
    ("peak_power_w_per_gpu", "w", "the highest phase power of any GPU"),
    ("mean_power_w_per_node", "w", "a node's mean power (its GPUs and its share of the system)"),
    ("peak_power_w_per_node", "w", "a node at its GPUs' highest phase power at once, plus the rest"),
    ("mean_power_w_cluster", "w", "the whole system's mean IT power"),
    ("peak_power_w_cluster", "w", "every GPU at its highest phase at once, plus the rest (an upper bound)"),
    ("nodes", "count", "nodes the energy counts (GPUs / gpus_per_node, rounded up)"),
    ("gpus_per_node", "count", "GPUs per node"),
    ("gpus", "count", "GPUs"),
    ("power_limit_w", "w", "the board power limit applied (its default, the TDP or lower, unless --power-limit-w)"),
    ("tdp_w", "w", "the GPU's TDP"),
    ("idle_power_w", "w", "the GPU's idle power"),
    ("class_power_w.*", "w", "each op class's power at its settled clock (gemm, attention, memory, comm, idle)"),
    ("clock_mhz.*", "mhz", "each op class's settled SM clock"),
    ("clock_ratio.*", "fraction", "each op class's settled clock over the maximum"),
    ("time_clock_ratio.*", "fraction", "settled clock over the default one: the gpu model's compute rates x this"),
    ("system_power_w_per_gpu.*", "w", "constant power per GPU beside it: host, nvswitch, nic, network_switches"),
)


def energy_stats(report, power, system, *, pue, power_limit_w=None, clock_mhz=None, gemm_class="gemm", tokens=0,
                 mode=None, part_watts=None) -> dict:
    """The report's ``stats.energy`` (see :data:`METRICS`). ``part_watts(class_w)``: ``{rank: {part: W}}``, the
    compute parts whose power is not their class's (:func:`astra_energy.utilisation.part_watts`), or None."""
    from astra_energy.power import CLASSES  # (not at import: metrics registration needs no power data)

    ratios = {cls: power.settled_clock_ratio(cls, power_limit_w, clock_mhz) for cls in CLASSES}
    class_w = {cls: power.watts(cls, ratios[cls]) for cls in CLASSES}
    class_mw = {cls: int(round(w * 1000)) for cls, w in class_w.items()}
    step_ns = report.max_finish_ns
    gpus = len(report.ranks)
    own_w = part_watts(class_w) if part_watts is not None else None
    own_mw = {rank: {part: int(round(w * 1000)) for part, w in parts.items()} for rank, parts in own_w.items()} \
        if own_w else None
    step = step_energy([(r.breakdown["parts"], r.finish_ns) for r in report.ranks], step_ns, class_mw, gemm_class,
                       own_mw)
    per_node = min(system.gpus_per_node, gpus) or 1
    nodes = math.ceil(gpus / per_node)
    beside_w = system.components_w(nodes)
    by_component = {"gpu": step["gpu_energy_mj"]}
    for name, watts in beside_w.items():
        by_component[name] = millijoules(int(round(watts * 1000)) * gpus, step_ns)
    it_mj = sum(by_component.values())
    facility_mj = int(round(it_mj * pue))

    def mean_w(mj, count):
        return mj * 1e6 / step_ns / count if step_ns and count else 0.0

    beside_per_gpu = sum(beside_w.values())
    peak_gpu_w = step["peak_mw_gpu"] / 1000
    out = {
        "gpu": power.name, "gpus": gpus, "nodes": nodes, "gpus_per_node": per_node, "system": system.name,
        "mode": mode or "step",
        "tdp_w": power.tdp_w, "idle_power_w": power.idle_w,
        "power_limit_w": power.default_limit if power_limit_w is None else float(power_limit_w),
        "gpu_energy_mj": step["gpu_energy_mj"], "by_part_mj": step["by_part_mj"], "by_component_mj": by_component,
        "it_energy_mj": it_mj, "facility_energy_mj": facility_mj, "pue": float(pue),
        "max_rank_energy_mj": step["max_rank_energy_mj"], "min_rank_energy_mj": step["min_rank_energy_mj"],
        "mean_power_w_per_gpu": mean_w(step["gpu_energy_mj"], gpus),
        "peak_power_w_per_gpu": peak_gpu_w,
        "mean_power_w_per_node": mean_w(it_mj, nodes) if nodes else 0.0,
        "peak_power_w_per_node": per_node * (peak_gpu_w + beside_per_gpu),
        "mean_power_w_cluster": mean_w(it_mj, 1),
        "peak_power_w_cluster": step["peak_mw_sum"] / 1000 + gpus * beside_per_gpu,
        "class_power_w": {cls: class_w[cls] for cls in CLASSES},
        "clock_ratio": {cls: ratios[cls] for cls in CLASSES if cls != "idle"},
        "clock_mhz": {cls: ratios[cls] * power.max_clock_mhz for cls in CLASSES if cls != "idle"},
        "time_clock_ratio": {cls: power.time_clock_ratio(cls, power_limit_w, clock_mhz)
                             for cls in CLASSES if cls != "idle"},
        "system_power_w_per_gpu": beside_w,
    }
    if clock_mhz is not None:
        out["gpu_clock_lock_mhz"] = float(clock_mhz)
    if tokens:
        out["gpu_energy_per_token_mj"] = step["gpu_energy_mj"] / tokens
        out["it_energy_per_token_mj"] = it_mj / tokens
        out["facility_energy_per_token_mj"] = facility_mj / tokens
    out["summary_line"] = summary_line(out, tokens)
    return out


def summary_line(e, tokens) -> str:
    """One line for people: the step's energy, power per GPU and energy per token."""
    line = (f"energy: {e['gpu_energy_mj'] / 1000:,.1f} J on {e['gpus']} GPUs ({e['it_energy_mj'] / 1000:,.1f} J IT, "
            f"{e['facility_energy_mj'] / 1000:,.1f} J at PUE {e['pue']:g}) per step; GPU mean "
            f"{e['mean_power_w_per_gpu']:,.0f} W, peak {e['peak_power_w_per_gpu']:,.0f} W of {e['power_limit_w']:g} W")
    if tokens:
        line += f"; {e['gpu_energy_per_token_mj']:,.2f} mJ (GPU) / {e['facility_energy_per_token_mj']:,.2f} mJ per token"
    return line


__all__ = ["METRICS", "energy_stats", "summary_line"]
