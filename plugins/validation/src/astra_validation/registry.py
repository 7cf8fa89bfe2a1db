"""The registry of published cases (``cases/cases.yaml``): read and checked once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from astra_sim.errors import ConfigError

CASES_DIR = Path(__file__).with_name("cases")
KINDS = ("llm_step", "collective", "serving")
#: what a serving case measured: median time per output token or to first token (ms), or output-token
#: throughput (tokens/s)
SERVING_METRICS = ("tpot_p50_ms", "ttft_p50_ms", "output_tokens_per_s")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass(frozen=True)
class Case:
    """One published measurement and how to simulate it."""

    name: str
    kind: str
    source: str
    hardware: str
    platform: str
    nodes: int
    measured: dict
    workload: tuple = ()
    run: tuple = ()
    collective: str | None = None
    size_bytes: int | None = None
    serve: tuple = ()
    long: bool = False
    #: the model's calibration uses this very number: shown, but not counted in the median and the worst error
    calibration_input: bool = False
    extra: dict = field(default_factory=dict)

    def measured_ns(self, gpus=None) -> int:
        """:meth:`measured_s` in integer ns."""
        return round(self.measured_s(gpus) * 1e9)

    def measured_s(self, gpus=None):
        """The measured time (s): a step's, a collective's from its bus bandwidth on ``gpus`` GPUs, a serving
        case's median TPOT or TTFT, or its time per output token (1 / output-token throughput)."""
        if self.kind == "llm_step":
            return float(self.measured["step_s"])
        if self.kind == "serving":
            for key in ("tpot_p50_ms", "ttft_p50_ms"):
                if key in self.measured:
                    return float(self.measured[key]) / 1e3
            return 1.0 / float(self.measured["output_tokens_per_s"])
        factor = {"all_reduce": 2.0 * (gpus - 1) / gpus}.get(self.collective, (gpus - 1) / gpus)
        return self.size_bytes * factor / (float(self.measured["bus_bandwidth_gbps"]) * 1e9)


def load_cases(path=None):
    """Every case of the registry (``path``: another YAML file of the same layout)."""
    path = Path(path) if path else CASES_DIR / "cases.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the validation cases: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ConfigError(f"{path}: expected a mapping with a list 'cases'")
    cases = []
    seen = set()
    for i, raw in enumerate(data["cases"]):
        where = f"{path}: cases[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where} must be a mapping")
        name = raw.get("name")
        if not isinstance(name, str) or not name or name in seen:
            raise ConfigError(f"{where}: 'name' must be a new non-empty string, got {name!r}")
        seen.add(name)
        where = f"{path}: case {name!r}"
        kind = raw.get("kind")
        if kind not in KINDS:
            raise ConfigError(f"{where}: 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
        for key in ("source", "hardware", "platform"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise ConfigError(f"{where}: {key!r} must be a non-empty string")
        nodes = raw.get("nodes")
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise ConfigError(f"{where}: 'nodes' must be a positive integer, got {nodes!r}")
        measured = raw.get("measured")
        wanted = "step_s" if kind == "llm_step" else "bus_bandwidth_gbps"
        if kind == "serving":
            keys = [k for k in SERVING_METRICS if isinstance(measured, dict) and k in measured]
            if len(keys) != 1:
                raise ConfigError(f"{where}: a serving case's 'measured' must have exactly one of "
                                  f"{', '.join(SERVING_METRICS)}")
            wanted = keys[0]
        value = measured.get(wanted) if isinstance(measured, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"{where}: 'measured.{wanted}' must be a positive number, got {value!r}")
        fields = dict(name=name, kind=kind, source=raw["source"], hardware=raw["hardware"],
                      platform=raw["platform"], nodes=nodes, measured=dict(measured), long=bool(raw.get("long")),
                      calibration_input=bool(raw.get("calibration_input")))
        for key in ("workload", "run", "serve"):
            value = raw.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}: {key!r} must be a list of command-line words (strings)")
            fields[key] = tuple(v.replace("{cases}", str(CASES_DIR)) for v in value)
        if kind == "llm_step" and not fields["workload"]:
            raise ConfigError(f"{where}: an llm_step case needs 'workload' (astra workload llm's options)")
        if kind == "serving" and not fields["serve"]:
            raise ConfigError(f"{where}: a serving case needs 'serve' (astra serve's options)")
        if kind == "collective":
            if raw.get("collective") not in COLLECTIVES:
                raise ConfigError(f"{where}: 'collective' must be one of {', '.join(COLLECTIVES)}")
            size = raw.get("size_bytes")
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ConfigError(f"{where}: 'size_bytes' must be a positive integer, got {size!r}")
            fields.update(collective=raw["collective"], size_bytes=size)
        cases.append(Case(**fields))
    return cases
