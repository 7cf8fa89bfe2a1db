"""Power, clocks and energy for astra-sim-py (docs/energy.md): the power model (:func:`gpu_power`), the rest of the
system (:func:`system_power`), a report's ``stats.energy`` (:func:`energy_stats`) and the published measurements
(:func:`load_cases`, :func:`evaluate`). Other plugins use these, never the CLI."""

from astra_energy.account import millijoules, step_energy
from astra_energy.power import GpuPower, gpu_power, gpu_power_of, known_gpus
from astra_energy.report import energy_stats
from astra_energy.system import SystemPower, default_pue, system_power


def __getattr__(name):
    # the cases module runs as a script (python -m astra_energy.cases): imported on first use only
    if name in ("load_cases", "evaluate"):
        from astra_energy import cases

        return getattr(cases, name)
    raise AttributeError(f"module 'astra_energy' has no attribute {name!r}")


__all__ = ["GpuPower", "gpu_power", "gpu_power_of", "known_gpus", "SystemPower", "system_power", "default_pue",
           "energy_stats", "step_energy", "millijoules", "load_cases", "evaluate"]
