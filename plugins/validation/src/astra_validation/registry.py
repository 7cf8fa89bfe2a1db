"""The registry of published cases (``cases/cases.yaml``, and the files of ``EXTRA_FILES`` beside it when present:
memory peaks, serving measurements from further sources): read and checked once.

Every case has a ``role``: ``fit`` when some constant of the model (or of the case's own inputs) was fitted on or
tuned to its source's numbers, else ``check``; only ``check`` cases make the headline error, so it says how the
model does on numbers it was not shaped on. ``source_id`` groups the cases of one source (a paper, a benchmark
page), the unit that ``astra validate --cv`` leaves out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from astra_sim.errors import ConfigError

CASES_DIR = Path(__file__).with_name("cases")
#: further case files beside ``cases.yaml``, loaded when present (the same layout; a name must be new)
EXTRA_FILES = ("memory.yaml", "serving_sources.yaml", "kv_cache.yaml")
KINDS = ("llm_step", "collective", "serving", "memory", "energy", "kv_cache")
#: the kinds whose error is on a time (step, collective, serving metric): the headline; memory is its own group
TIME_KINDS = ("llm_step", "collective", "serving")
ROLES = ("fit", "check")
#: what a memory case measured (``measured_what``) -> the estimate's attribute it is compared with (the first one
#: the estimate has; ``total`` is every estimate's)
MEMORY_MEASURES = {
    "torch.cuda.max_memory_allocated": ("allocated_bytes", "total"),
    "torch.cuda.max_memory_reserved": ("reserved_bytes", "total"),
    "nvidia-smi": ("reserved_bytes", "total"),
}
#: what a serving case measured: median time per output token or to first token (ms), or output-token
#: throughput (tokens/s)
SERVING_METRICS = ("tpot_p50_ms", "ttft_p50_ms", "output_tokens_per_s")
#: the metric family of each (``astra validate --cv`` reports serving by family: a TTFT and a throughput err apart)
SERVING_FAMILIES = {"ttft_p50_ms": "ttft", "tpot_p50_ms": "tpot", "output_tokens_per_s": "throughput"}
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
    #: ``fit``: a constant was fitted on or tuned to this source's numbers (shown, not in the headline error);
    #: ``check``: nothing was
    role: str = "check"
    #: the source this case belongs to (cases of one paper or page share it; ``--cv`` leaves one out at a time)
    source_id: str = ""
    #: what was fitted on or tuned to this source (the constants' names), for a ``fit`` case
    fitted: tuple = ()
    #: a memory case: what the source measured (a key of ``MEMORY_MEASURES``)
    measured_what: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def serving_family(self):
        """``ttft``, ``tpot`` or ``throughput``: what a serving case measured (None for other kinds)."""
        if self.kind != "serving":
            return None
        return next(SERVING_FAMILIES[k] for k in SERVING_METRICS if k in self.measured)

    @property
    def calibration_input(self) -> bool:
        """The older name of ``role == "fit"``."""
        return self.role == "fit"

    def measured_ns(self, gpus=None) -> int:
        """:meth:`measured_s` in integer ns."""
        return round(self.measured_s(gpus) * 1e9)

    def measured_s(self, gpus=None):
        """The measured time (s): a step's, a collective's from its bus bandwidth on ``gpus`` GPUs, a serving
        case's median TPOT or TTFT, or its time per output token (1 / output-token throughput)."""
        if self.kind in ("memory", "energy", "kv_cache"):
            raise ValueError(f"case {self.name!r} measured {self.kind}, not a time")
        if self.kind == "llm_step":
            return float(self.measured["step_s"])
        if self.kind == "serving":
            for key in ("tpot_p50_ms", "ttft_p50_ms"):
                if key in self.measured:
                    return float(self.measured[key]) / 1e3
            return 1.0 / float(self.measured["output_tokens_per_s"])
        factor = {"all_reduce": 2.0 * (gpus - 1) / gpus}.get(self.collective, (gpus - 1) / gpus)
        return self.size_bytes * factor / (float(self.measured["bus_bandwidth_gbps"]) * 1e9)


def load_cases(path=None, check=True):
    """Every case of the registry (``path``: another YAML file of the same layout). Without ``path``:
    ``cases/cases.yaml``, each of ``EXTRA_FILES`` beside it that exists, and the energy plugin's published power and
    energy measurements (:func:`energy_cases`). ``check``: parse each case's command-line words as its run will
    (:func:`check_words`); False for a reader that only wants names or metrics (it saves building the parsers)."""
    if path:
        return _load_file(Path(path), check)
    cases = _load_file(CASES_DIR / "cases.yaml", check)
    extra = [case for name in EXTRA_FILES if (CASES_DIR / name).exists()
             for case in _load_file(CASES_DIR / name, check)]
    extra += energy_cases()
    names = {c.name for c in cases}
    for case in extra:
        if case.name in names:
            raise ConfigError(f"validation case {case.name!r} ({case.kind}) is also in {CASES_DIR / 'cases.yaml'} "
                              f"or another of {', '.join(EXTRA_FILES)}")
        names.add(case.name)
        cases.append(case)
    return cases


def energy_cases():
    """The energy plugin's cases (``astra_energy/cases.yaml``: measured power or energy, with its source) as
    ``kind: energy`` cases; a case whose source also set a power parameter is a ``fit`` case."""
    from astra_energy.cases import load_cases as load_energy_cases

    return [Case(name=c.name, kind="energy", source=c.source, hardware=c.platform, platform=c.platform, nodes=c.nodes,
                 measured={c.quantity: c.measured}, role="fit" if c.uses_parameter_source else "check",
                 source_id=c.source.split(":")[0].strip(), fitted=("energy.gemm_power_fraction",)
                 if c.uses_parameter_source else ()) for c in load_energy_cases()]


def _load_file(path, check=True):
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
        wanted = {"llm_step": "step_s", "memory": "peak_bytes", "kv_cache": "kv_tokens"}.get(kind,
                                                                                          "bus_bandwidth_gbps")
        if kind == "serving":
            keys = [k for k in SERVING_METRICS if isinstance(measured, dict) and k in measured]
            if len(keys) != 1:
                raise ConfigError(f"{where}: a serving case's 'measured' must have exactly one of "
                                  f"{', '.join(SERVING_METRICS)}")
            wanted = keys[0]
        value = measured.get(wanted) if isinstance(measured, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ConfigError(f"{where}: 'measured.{wanted}' must be a positive number, got {value!r}")
        fields = dict(name=name, kind=kind, source=raw["source"], hardware=raw["hardware"],
                      platform=raw["platform"], nodes=nodes, measured=dict(measured), long=bool(raw.get("long")),
                      **_provenance(raw, where, name))
        for key in ("workload", "run", "serve"):
            value = raw.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}: {key!r} must be a list of command-line words (strings)")
            fields[key] = tuple(v.replace("{cases}", str(CASES_DIR)) for v in value)
        if kind in ("llm_step", "memory") and not fields["workload"]:
            raise ConfigError(f"{where}: an {kind} case needs 'workload' (astra workload llm's options)")
        if kind == "memory":
            what = raw.get("measured_what")
            if not isinstance(what, str) or what not in MEMORY_MEASURES:
                raise ConfigError(f"{where}: 'measured_what' must be one of {', '.join(MEMORY_MEASURES)}, got {what!r}")
            fields["measured_what"] = what
        if kind in ("serving", "kv_cache") and not fields["serve"]:
            raise ConfigError(f"{where}: a {kind} case needs 'serve' (astra serve's options)")
        if kind == "collective":
            if raw.get("collective") not in COLLECTIVES:
                raise ConfigError(f"{where}: 'collective' must be one of {', '.join(COLLECTIVES)}")
            size = raw.get("size_bytes")
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ConfigError(f"{where}: 'size_bytes' must be a positive integer, got {size!r}")
            fields.update(collective=raw["collective"], size_bytes=size)
        case = Case(**fields)
        if check:
            check_words(case, path)
        cases.append(case)
    return cases


def check_words(case, path=None):
    """Parse ``case``'s stored words with the parsers its run uses (``astra run``'s :class:`RunSpec` as
    :func:`.runner.case_run_spec` builds it; ``astra workload llm``'s :class:`LlmSpec`; ``astra serve``'s
    ``ServeSpec``), so that an unknown flag or a refused value (``--nccl-version 9.9``) is a ConfigError when the
    registry loads, naming the case, its file and the flag, not when the case runs. Parsing only: nothing is
    resolved, read or simulated (a workload's ``--model`` file is read when the case runs). Words already parsed
    in this process are not parsed again (an executor's task loads the registry for each case it runs)."""
    words = (case.kind, case.platform, case.nodes, case.run, case.workload, case.serve)
    if words in _CHECKED:
        return
    where = f"validation case {case.name!r}" + (f" ({path})" if path else "")
    if case.kind in ("llm_step", "collective", "memory"):
        from astra_validation.runner import case_run_spec

        case_run_spec(case, "<case>", where=f"{where}: run")  # a placeholder trace prefix: parsing reads no file
    elif case.run:
        raise ConfigError(f"{where}: 'run' is for llm_step, collective and memory cases; a {case.kind} case "
                          f"would ignore it")
    if case.workload:
        from astra_workload_generators.llm import LlmSpec

        LlmSpec.from_argv(case.workload, where=f"{where}: workload")
    if case.serve:
        from astra_serving import ServeSpec

        ServeSpec.from_argv([*case.serve, "--platform", case.platform], where=f"{where}: serve")
    _CHECKED.add(words)


#: the words :func:`check_words` has parsed without an error in this process
_CHECKED = set()


def _provenance(raw, where, name):
    """``role``, ``source_id`` and ``fitted`` of one raw case (``calibration_input: true`` is ``role: fit``)."""
    if not isinstance(raw.get("calibration_input", False), bool):
        raise ConfigError(f"{where}: 'calibration_input' must be true or false, got {raw['calibration_input']!r}")
    role = raw.get("role", "fit" if raw.get("calibration_input") is True else "check")
    if role not in ROLES:
        raise ConfigError(f"{where}: 'role' must be one of {', '.join(ROLES)}, got {role!r}")
    if raw.get("calibration_input") is True and role != "fit":
        raise ConfigError(f"{where}: 'calibration_input: true' contradicts 'role: {role}'")
    source_id = raw.get("source_id", name)
    if not isinstance(source_id, str) or not source_id:
        raise ConfigError(f"{where}: 'source_id' must be a non-empty string, got {source_id!r}")
    fitted = raw.get("fitted", [])
    if not isinstance(fitted, list) or not all(isinstance(v, str) and v for v in fitted):
        raise ConfigError(f"{where}: 'fitted' must be a list of the constants' names (strings)")
    if role == "fit" and not fitted and raw.get("calibration_input") is not True:
        raise ConfigError(f"{where}: a 'role: fit' case must name what was fitted on it ('fitted': [...])")
    return {"role": role, "source_id": source_id, "fitted": tuple(fitted)}
