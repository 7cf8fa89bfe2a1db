"""Power, clocks and energy for astra-sim-py (docs/energy.md): the power model (:func:`gpu_power`), the rest of the
system (:func:`system_power`), a report's ``stats.energy`` (:func:`energy_stats`) and the published measurements
(:func:`load_cases`, :func:`evaluate`). Other plugins use these, never the CLI."""

#: each public name's module, imported on first use (the plugin's hooks load for every run; the power data and the
#: gpu model it reads only matter to a run on the gpu model). The cases module runs as a script too.
_MODULES = {"account": ("millijoules", "step_energy"), "power": ("GpuPower", "gpu_power", "gpu_power_of", "known_gpus"),
            "report": ("energy_stats",), "system": ("SystemPower", "default_pue", "system_power"),
            "cases": ("load_cases", "evaluate")}


def __getattr__(name):
    for module, names in _MODULES.items():
        if name in names:
            import importlib

            return getattr(importlib.import_module(f"astra_energy.{module}"), name)
    raise AttributeError(f"module 'astra_energy' has no attribute {name!r}")


__all__ = ["GpuPower", "gpu_power", "gpu_power_of", "known_gpus", "SystemPower", "system_power", "default_pue",
           "energy_stats", "step_energy", "millijoules", "load_cases", "evaluate"]
