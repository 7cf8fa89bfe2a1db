"""Published power and energy measurements against the model (``cases.yaml``): load, simulate, report errors.

Each case names a measured quantity of ``stats.energy``, its value and source, and the step that stands for it (an
``astra workload llm`` spec on a platform). :func:`evaluate` generates the step, simulates it through the public API
and returns the simulated value and the relative error ``simulated / measured - 1``.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from astra_sim.errors import ConfigError

CASES_PATH = Path(__file__).with_name("cases.yaml")
QUANTITIES = ("mean_power_w_per_node", "peak_power_w_per_node", "mean_power_w_per_gpu", "gpu_energy_per_token_mj",
              "it_energy_per_token_mj")
_KEYS = {"name": str, "source": str, "quantity": str, "measured": (int, float), "platform": str, "nodes": int,
         "llm": dict, "notes": str, "uses_parameter_source": bool, "options": dict}
_REQUIRED = ("name", "source", "quantity", "measured", "platform", "llm")


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    quantity: str
    measured: float
    platform: str
    llm: dict
    nodes: int = 1
    notes: str = ""
    uses_parameter_source: bool = False
    options: dict = field(default_factory=dict)


def parse_cases(data, where="cases.yaml") -> list:
    """The cases of a parsed ``cases.yaml``; a ConfigError naming ``where``, the case and the key otherwise."""
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ConfigError(f"{where}: expected a mapping with a list under 'cases'")
    out, names = [], set()
    for index, item in enumerate(data["cases"]):
        at = f"{where}: cases[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at}: expected a mapping")
        for key, value in item.items():
            kind = _KEYS.get(key)
            if kind is None:
                raise ConfigError(f"{at}: unknown key {key!r}; allowed: {', '.join(_KEYS)}")
            if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
                raise ConfigError(f"{at}: key {key!r} has the wrong type ({type(value).__name__})")
        for key in _REQUIRED:
            if key not in item:
                raise ConfigError(f"{at}: missing key {key!r}")
        if item["quantity"] not in QUANTITIES:
            raise ConfigError(f"{at}: key 'quantity' must be one of {', '.join(QUANTITIES)}, got {item['quantity']!r}")
        if not (math.isfinite(item["measured"]) and item["measured"] > 0):
            raise ConfigError(f"{at}: key 'measured' must be a positive number")
        if item.get("nodes", 1) < 1:
            raise ConfigError(f"{at}: key 'nodes' must be >= 1")
        if item["name"] in names:
            raise ConfigError(f"{at}: case name {item['name']!r} appears twice")
        names.add(item["name"])
        out.append(Case(**item))
    return out


def load_cases(path=CASES_PATH) -> list:
    from astra_sim.safeio import parse_yaml, read_text

    return parse_cases(parse_yaml(read_text(path, "energy cases"), str(path)), str(path))


def step_report(case, workdir=None, *, in_memory=True):
    """The run report of ``case``'s step (its ``astra workload llm`` spec on its platform, through the public API).
    The step is held in memory for the run, in this process (issue 37: no encode and parse back);
    ``in_memory=False`` writes its Chakra files and parses them back instead: the same ns and joules."""
    from astra_sim import simulate
    from astra_workload_generators import LlmSpec, generate_llm_workload

    from astra_sim.generated import private_folder  # named by this process: a SIGKILLed run's is reclaimed

    with private_folder("astra-energy-") if workdir is None else tempfile.TemporaryDirectory(dir=workdir) as folder:
        prefix = os.path.join(folder, "step")
        # for the case's platform and the GPU its options compute on (a gpu option replaces the platform's)
        spec = LlmSpec.from_mapping(case.llm, f"{case.name}: llm").for_platform(case.platform, case.options)
        generate_llm_workload(spec, prefix, in_memory=in_memory)
        return simulate(workload=prefix, platform=case.platform, nodes=case.nodes, **case.options)


def evaluate(case, workdir=None) -> dict:
    """Simulate ``case``: ``{"name", "quantity", "measured", "simulated", "error"}`` (error = simulated/measured - 1)."""
    report = step_report(case, workdir)
    energy = report.stats.get("energy")
    if not energy or case.quantity not in energy:
        raise ConfigError(f"energy case {case.name}: the run has no stats.energy.{case.quantity}")
    simulated = float(energy[case.quantity])
    return {"name": case.name, "quantity": case.quantity, "measured": case.measured, "simulated": simulated,
            "error": simulated / case.measured - 1.0, "uses_parameter_source": case.uses_parameter_source}


def evaluate_all(path=CASES_PATH) -> list:
    return [evaluate(case) for case in load_cases(path)]


def main():
    rows = evaluate_all()
    for row in rows:
        mark = " (source also informs a parameter)" if row["uses_parameter_source"] else ""
        print(f"{row['name']:58s} {row['quantity']:24s} measured {row['measured']:>9.1f} simulated "
              f"{row['simulated']:>9.1f} error {100 * row['error']:+6.1f}%{mark}")
    errors = [abs(row["error"]) for row in rows]
    print(f"{len(rows)} cases, mean |error| {100 * sum(errors) / len(errors):.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
