"""What ``astra search`` minimises (``--objective time|energy|cost``) under a step-time bound
(``--max-step-time-ms``), and how far a layout's lower bound on its step lets the search skip it.

* ``time``: the step (ns), as before.
* ``energy``: IT energy per token (``stats.energy.it_energy_mj``: the GPUs plus host, NVSwitch, NICs and switches,
  over the step, divided by the step's tokens). A search has one model, global batch and sequence length, so the
  tokens per step are the same for every layout and the layouts rank as their integer ``it_energy_mj`` does (the
  facility's energy is the IT energy times one PUE: the same order).
* ``cost``: dollars per token from a price table (``--prices``, the sweep's format, :mod:`.derived`): a GPU-hour's
  price x GPUs x step / tokens. One platform, one GPU count and one batch per search make that proportional to the
  step, so ``cost`` ranks as ``time`` does; it adds the cost columns and needs a price for the platform.

Pruning stays exact for each objective (:meth:`Objective.limit_ns`): the search's bound is a lower bound on a
layout's step (:mod:`.bound`), so for ``time`` and ``cost`` a layout whose bound is not below the best step cannot
win. For ``energy`` it becomes a lower bound on the IT energy: every GPU draws at least its idle power during the
whole step (the breakdown's parts cover a rank's time to its finish, each at a class power not below the idle one,
and a rank that finishes early idles to the step's end), and the rest of the system draws its constant power, so
``IT energy >= GPUs x (P_idle + P_system) x step``, less the accounting's rounding (half a millijoule per part and
rank: :data:`ROUNDING_SLACK_MJ_PER_GPU`). That bound is weak (on an H100 node the floor, 370 W per GPU, is about
half a training step's mean IT power), so it skips only layouts whose step bound is about twice the best one's;
the rest are simulated. A layout whose bound exceeds ``--max-step-time-ms`` cannot meet it and is never simulated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from astra_sim.errors import ConfigError

OBJECTIVES = ("time", "energy", "cost")
#: the energy accounting rounds each rank's breakdown parts to the nearest mJ (astra_energy.account): this allows
#: half a millijoule for each of up to 63 parts and the wait to the step's end (an LLM step's ranks have about 6-12)
ROUNDING_SLACK_MJ_PER_GPU = 32
#: the columns of a ranked row (JSON) beside the layout, its step, MFU and memory, by what the row carries
ENERGY_FIELDS = ("it_energy_mj", "gpu_energy_mj", "it_energy_per_token_mj", "gpu_energy_per_token_mj",
                 "mean_power_w_per_gpu")
COST_FIELDS = ("usd_per_gpu_hour", "usd_per_million_tokens", "price_assumed")
#: the JSON's units of those columns (added to the search's ``units`` when they are present)
ENERGY_UNITS = {"energy": "mJ", "power": "W"}
COST_UNITS = {"cost": "USD"}


@dataclass(frozen=True)
class Objective:
    """The search's objective: ``name`` (one of :data:`OBJECTIVES`), the step-time bound (``max_step_ns``, None:
    none), for ``energy`` the least IT power a GPU and its share of the system draw (``floor_w_per_gpu``) over
    ``gpus`` GPUs, and the price table (``prices``, a :class:`.derived.PriceTable`) with the platform it prices."""

    name: str = "time"
    max_step_ns: int | None = None
    gpus: int = 0
    floor_w_per_gpu: float = 0.0
    prices: object = None
    platform: str | None = None

    def __post_init__(self):
        if self.name not in OBJECTIVES:
            raise ConfigError(f"--objective {self.name}: expected one of {', '.join(OBJECTIVES)}")
        if self.name == "energy" and not (self.gpus > 0 and self.floor_w_per_gpu > 0):
            raise ConfigError("--objective energy: the GPUs' count and idle power are needed to bound the energy")
        if self.name == "cost" and (self.prices is None or self.prices.get(self.platform) is None):
            where = f"--prices {self.prices.path}: no price for {self.platform}" if self.prices is not None else \
                "--objective cost needs --prices FILE (a price table, as a sweep's prices:)"
            raise ConfigError(where)

    @property
    def needs_energy(self) -> bool:
        """Rows need the energy columns (the sweep's runs record a breakdown): ``energy`` and ``cost`` show them."""
        return self.name in ("energy", "cost")

    def meets_bound(self, step_ns) -> bool:
        return self.max_step_ns is None or int(step_ns) <= self.max_step_ns

    def key(self, row):
        """What the search minimises for a simulated row (a tuple, lower is better), or None: failed, or slower
        than the bound. ``energy`` breaks ties by the step."""
        if row is None or row.get("status") != "ok" or not self.meets_bound(row["step_ns"]):
            return None
        step = int(row["step_ns"])
        if self.name != "energy":
            return (step,)
        energy = row.get("it_energy_mj")
        if energy is None:
            raise ConfigError("--objective energy: a simulated layout has no it_energy_mj (its platform's GPU has no "
                              "power data, or the run recorded no breakdown)")
        return (int(energy), step)

    def limit_ns(self, best_row):
        """Layouts whose lower bound on the step (ns) is at or above this cannot be ranked above ``best_row`` (the
        best simulated row so far, or None) or cannot meet the step-time bound; None: no limit yet."""
        limits = []
        if self.max_step_ns is not None:
            limits.append(self.max_step_ns + 1)  # a bound above max_step_ns means a step above it
        if best_row is not None:
            if self.name == "energy":
                # IT energy >= gpus x floor x step - slack; it cannot beat best's energy once that reaches it
                best_mj = int(best_row["it_energy_mj"]) + self.gpus * ROUNDING_SLACK_MJ_PER_GPU
                limits.append(math.ceil(best_mj * 1e6 / (self.gpus * self.floor_w_per_gpu)))
            else:  # time, and cost (proportional to the step within a search)
                limits.append(int(best_row["step_ns"]))
        return min(limits) if limits else None

    def columns(self, row) -> dict:
        """The row's energy and cost columns for the JSON answer (those it has; cost with a price table)."""
        out = {k: row[k] for k in ENERGY_FIELDS if row.get(k) is not None} if self.needs_energy else {}
        if self.prices is not None:
            from .derived import add_cost

            priced = add_cost(dict(row), self.platform, self.prices)
            out.update({k: priced[k] for k in COST_FIELDS if priced.get(k) is not None})
        return out

    def units(self) -> dict:
        """The units the answer's extra columns are in."""
        return {**(ENERGY_UNITS if self.needs_energy else {}), **(COST_UNITS if self.prices is not None else {})}

    def title(self) -> str:
        return {"time": "fastest layouts", "energy": "least-energy layouts (IT energy per token)",
                "cost": "cheapest layouts (cost per token)"}[self.name]

    def best_label(self) -> str:
        return {"time": "fastest", "energy": "least energy per token", "cost": "cheapest per token"}[self.name]

    def pruned_why(self) -> str:
        return ("their lower bound on the IT energy (idle GPUs and the rest of the system over their bounded step) is "
                "not below the least simulated energy" if self.name == "energy" else
                "their lower bound is not below the best simulated step")

    def check_resumed(self, rows, path):
        """A ``--points`` file's rows were simulated as this objective simulates (with a breakdown or without:
        the runs differ, so a row of the other kind would be simulated again under another point id)."""
        ok = [r for r in rows.values() if r.get("status") == "ok"]
        with_energy = [r for r in ok if r.get("it_energy_mj") is not None]
        if self.needs_energy and ok and not with_energy:
            raise ConfigError(f"--points {path}: its layouts were simulated without a breakdown (a search by time: no "
                              f"energy columns); give another file for --objective {self.name}")
        if not self.needs_energy and with_energy:
            raise ConfigError(f"--points {path}: its layouts were simulated for --objective energy or cost (with a "
                              "breakdown); give another file for --objective time, or the same --objective")


def energy_floor_w_per_gpu(platform, gpus) -> float:
    """The least power a GPU of ``platform`` and its share of the system draw during a step of ``gpus`` GPUs: the
    GPU's idle power plus the system's constant power per GPU (astra_energy: the same numbers ``stats.energy``
    uses). A ConfigError when the platform's GPU has no power data."""
    gpu = getattr(platform, "gpu", None)
    power = None
    if isinstance(gpu, str):
        from astra_energy import gpu_power_of, system_power
        from astra_gpu_model import GpuComputeModel

        power = gpu_power_of(GpuComputeModel(gpu=gpu).gpu)
    if power is None:
        raise ConfigError(f"--objective energy: --platform {platform.name}'s GPU has no power data (the energy plugin "
                          "knows the gpu_model presets; a GPU YAML needs tdp_w and boost_clock_mhz)")
    system = system_power(platform.name, platform.gpus_per_node)
    nodes = math.ceil(gpus / min(system.gpus_per_node, gpus))
    return power.idle_w + sum(system.components_w(nodes).values())


__all__ = ["OBJECTIVES", "Objective", "energy_floor_w_per_gpu", "ROUNDING_SLACK_MJ_PER_GPU"]
