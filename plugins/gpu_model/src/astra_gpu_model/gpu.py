"""GPU descriptions: the shipped presets and user YAML files (schema in the README).

``load_gpu(name_or_path)`` returns a :class:`GpuSpec`. A preset is named by its file stem
(``H100-SXM5-80GB``) or a short alias (``h100``); anything else is read as a YAML file. Every problem is a
:class:`astra_sim.errors.ConfigError` naming the file and the key.

Units are in the key names: ``*_tflops`` 10^12 FLOP/s (dense, no sparsity), ``*_gbps`` GB/s = 10^9 bytes/s
(gigaBYTES, as ASTRA-sim's bandwidth settings), ``*_gb`` 10^9 bytes, ``*_mb`` 2^20 bytes (cache sizes as
vendors quote them), ``*_mhz``, ``*_us`` microseconds, ``*_w`` watts.

``scaleup.topology`` says how a node's GPUs are joined: ``nvswitch`` (the default: every GPU on NVSwitch, or an
equivalent all-to-all fabric) or ``pairwise`` (PCIe cards: NVLink bridges join pairs, ``ports x
bandwidth_per_port_gbps`` per direction, and a PCIe switch everything else at ``pcie_gbps`` per direction).
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from astra_sim.errors import ConfigError
from astra_sim.limits import check_number
from astra_sim.safeio import brief

from astra_gpu_model.gemm import DATA_PARALLEL, DEFAULT_TILES, SCHEDULES, GemmParams
# (the run options' names, re-exported: names.py holds them so that building the parser does not import this module)
from astra_gpu_model.names import COLLECTIVES, DEFAULT_GPU, DTYPES, preset_dir, preset_names  # noqa: F401

#: Block-scaled GEMM formats (``aten::_scaled_mm`` with block scales, :mod:`astra_gpu_model.ops`): the
#: ``tensor_tflops`` key each runs at, the elements sharing one 1-byte scale, and an element's bytes. NVFP4: E2M1 with
#: an FP8 E4M3 scale per 16 elements (NVIDIA developer blog "Introducing NVFP4 for Efficient and Accurate Low-Precision
#: Inference", 2025); MXFP8 / MXFP6 / MXFP4: E4M3 / E2M3 / E2M1 with an E8M0 scale per 32 (OCP Microscaling Formats
#: (MX) v1.0, 2023), MXFP6 at the datasheets' FP6 rate (B200, B300, GB200: the FP8 rate; MI355X: the FP4 rate).
#: A GPU runs only those its preset lists under ``block_scaled``.
BLOCK_SCALED = {"nvfp4": ("fp4", 16, 0.5), "mxfp8": ("fp8", 32, 1.0), "mxfp6": ("fp6", 32, 0.75),
                "mxfp4": ("fp4", 32, 0.5)}
#: the ``astra workload llm --gemm-dtype`` value that writes each format (for the refusal's hint)
BLOCK_SCALED_FLAGS = {"nvfp4": "fp4", "mxfp8": "mxfp8", "mxfp6": "mxfp6", "mxfp4": "mxfp4"}
#: Data types the model knows, their element size in bytes (a block-scaled format's with its share of a scale:
#: NVFP4 0.5 + 1/16, MXFP8 1 + 1/32, MXFP6 0.75 + 1/32, MXFP4 0.5 + 1/32).
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1,
               **{name: element + 1 / block for name, (_, block, element) in BLOCK_SCALED.items()}}
#: Keys allowed under ``tensor_tflops``. ``fp4`` (Blackwell, CDNA 4) is the rate block-scaled FP4 GEMMs run at (NVFP4,
#: MXFP4); ``fp6`` the rate MXFP6 GEMMs run at.
TFLOPS_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4")
#: When a GPU has no throughput for a dtype, the model uses the first of these that it has.
DTYPE_FALLBACK = {
    "fp8": ("fp16", "bf16"), "int8": ("fp16", "bf16"), "bf16": ("fp16",), "fp16": ("bf16",),
    "tf32": ("fp32",), "fp64": ("fp32",), "fp32": (),
}
EFFICIENCY_KEYS = ("compute_efficiency", "tile_penalty", "k_overhead", "hbm_efficiency", "launch_us",
                   "overlap_exponent", "attention_efficiency", "fp8_gemm_scale", "fp4_gemm_scale",
                   "mxfp8_gemm_scale")

_TOP_KEYS = {
    "name": "str", "base": "str", "vendor": "str", "architecture": "str", "sm_count": "int",
    "boost_clock_mhz": "num", "tensor_tflops": "map", "hbm_bandwidth_gbps": "num", "hbm_capacity_gb": "num",
    "l2_cache_mb": "num", "last_level_cache_mb": "num", "scaleup": "map", "copy_engines": "int",
    "calibration": "str", "efficiency": "map", "gemm_tiles": "list", "gemm_schedule": "str",
    "sources": "map", "notes": "str",
    "tdp_w": "num", "calibration_status": "str", "block_scaled": "list", "sustained_gemm": "str",
    "sustained_gemm_cap": "str",
}
#: ``calibration_status``: how far the GEMM efficiencies were measured on this GPU. ``fitted``: on its own GEMM
#: timings (or those of the same die); ``partial``: the large-GEMM efficiency fitted to published peak-GEMM
#: measurements of this GPU, the size dependence borrowed from ``calibration``'s family; ``not-calibrated``: every
#: efficiency borrowed from ``calibration``'s family. Absent: ``unstated`` (a user's GPU YAML; no warning).
CALIBRATION_STATUSES = ("fitted", "partial", "not-calibrated")
_REQUIRED = ("name", "sm_count", "tensor_tflops", "hbm_bandwidth_gbps", "calibration")
_SCALEUP_KEYS = {"technology": "str", "ports": "int", "bandwidth_per_port_gbps": "num", "topology": "str",
                 "pcie_gbps": "num"}
#: ``scaleup.topology`` values: every GPU on a switch, or NVLink-bridged pairs on a PCIe switch
SCALEUP_TOPOLOGIES = ("nvswitch", "pairwise")

PRESET_ALIASES = {
    "a100": "A100-SXM4-80GB", "a100-80gb": "A100-SXM4-80GB", "a100-sxm4": "A100-SXM4-80GB",
    "h100": "H100-SXM5-80GB", "h100-sxm": "H100-SXM5-80GB", "h100-sxm5": "H100-SXM5-80GB",
    "h200": "H200-SXM", "b200": "B200", "mi300x": "MI300X", "b300": "B300", "mi325x": "MI325X", "mi355x": "MI355X",
    "l40s": "L40S", "gb200": "GB200",
    "a100-40gb": "A100-SXM4-40GB", "h100-pcie": "H100-PCIe-80GB", "h100-nvl": "H100-NVL-94GB", "h20": "H20",
    "h100-96gb": "H100-SXM-96GB-HBM2e", "h800": "H800-SXM5-80GB",
}


@dataclass
class GpuSpec:
    """One GPU, as the compute model uses it. ``raw`` keeps the loaded mapping (with ``sources``)."""

    name: str
    sm_count: int
    tensor_tflops: dict
    hbm_bandwidth_gbps: float
    calibration: str
    gemm: GemmParams
    attention_efficiency: float
    gemm_tiles: tuple = DEFAULT_TILES
    #: how the GPU's GEMM library schedules a last partial wave of tiles (one of ``gemm.SCHEDULES``)
    gemm_schedule: str = DATA_PARALLEL
    #: FP8 GEMMs run at ``fp8_gemm_scale x compute_efficiency`` of the FP8 peak (the fit is on fp16/bf16 GEMMs;
    #: FP8 kernels reach a smaller fraction of their doubled peak). Fitted per family where FP8 measurements
    #: exist (``fit/fit_gemm_fp8.py``), else 1.0.
    fp8_gemm_scale: float = 1.0
    #: FP4 GEMMs (NVFP4, MXFP4) run at ``fp4_gemm_scale x compute_efficiency`` of the FP4 peak, fitted where published
    #: FP4 GEMM measurements exist (``calibration.fit_peak_efficiency``); None: at the FP8 GEMMs' (an ASSUMPTION)
    fp4_gemm_scale: float | None = None
    #: MXFP8 GEMMs likewise, at ``mxfp8_gemm_scale x compute_efficiency`` of the FP8 peak; None: at the FP8 GEMMs'
    mxfp8_gemm_scale: float | None = None
    #: the block-scaled GEMM formats its tensor cores run (keys of :data:`BLOCK_SCALED`)
    block_scaled: tuple = ()
    vendor: str = ""
    architecture: str = ""
    boost_clock_mhz: float | None = None
    hbm_capacity_gb: float | None = None
    l2_cache_mb: float | None = None
    last_level_cache_mb: float | None = None
    scaleup: dict = field(default_factory=dict)
    copy_engines: int | None = None
    #: the board's power limit (W), as the vendor states it: the limit a sustained GEMM phase settles its clock
    #: under (:mod:`astra_gpu_model.power_clock`; a platform's board may differ) and the energy plugin's TDP
    tdp_w: float | None = None
    #: the GPU whose published sustained/burst GEMM pair moves this preset's burst-fitted GEMM rates to a sustained
    #: phase's (a key of ``power_clock.SUSTAINED_GEMM``); None: the fit is sustained already, or its state unknown
    sustained_gemm: str | None = None
    #: the GPU whose published sustained GEMM rate caps this preset's GEMM rate at the shape it was measured at
    #: (a key of ``power_clock.SUSTAINED_GEMM``), for a fit that is neither burst nor sustained (per-layer timings):
    #: :func:`astra_gpu_model.power_clock.sustained_gemm_factor`; None: no cap
    sustained_gemm_cap: str | None = None
    #: with ``sustained_gemm_cap``: the model's uncapped TFLOP/s at MSMF's shape per GEMM class, computed once as the
    #: preset loads (``power_clock.cap_reference_tflops``), so a copy with SMs taken by communication
    #: (``contention.contended_gpu``) keeps the whole board's cap
    sustained_cap_tflops: dict = field(default_factory=dict)
    #: one of :data:`CALIBRATION_STATUSES`, or ``unstated``
    calibration_status: str = "unstated"
    path: str | None = None
    raw: dict = field(default_factory=dict)

    @property
    def hbm_capacity_bytes(self) -> int | None:
        """The HBM a program can use, bytes. A datasheet's "80 GB" of HBM is binary: 80 GiB (five 16 GiB stacks);
        nvidia-smi shows 81,920 MiB on an A100 80GB and 81,559 MiB on an H100 80GB, the driver keeping the rest,
        which the memory estimate's ``context`` part holds. Read as 80e9 bytes, every GPU lost 7 % of its memory."""
        return None if self.hbm_capacity_gb is None else int(self.hbm_capacity_gb * 2**30)

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        """``(major, minor)`` of an NVIDIA GPU, as its preset's ``architecture`` states it ("..., compute capability
        10.0)"); None when it states none (AMD, or a user YAML without it). What a framework's GPU-specific kernel
        choice reads (Transformer Engine's FP8 transposes: ``astra_workload_generators.llm.fp8``)."""
        found = re.search(r"compute capability (\d+)\.(\d+)", self.architecture)
        return (int(found.group(1)), int(found.group(2))) if found else None

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_bandwidth_gbps * 1e9

    @property
    def scaleup_topology(self) -> str:
        """``nvswitch`` or ``pairwise`` (see the module docstring)."""
        return self.scaleup.get("topology", "nvswitch")

    @property
    def scaleup_bandwidth_gbps(self):
        """Total scale-up bandwidth per direction, GB/s (None when not described)."""
        ports = self.scaleup.get("ports")
        bw = self.scaleup.get("bandwidth_per_port_gbps")
        return None if ports is None or bw is None else ports * bw

    def rate_dtype(self, dtype: str) -> str:
        """The dtype whose throughput is used for ``dtype`` (itself, or its fallback when absent). A block-scaled
        format has no fallback: a GPU without it refuses it (ConfigError)."""
        if dtype in BLOCK_SCALED:
            if dtype not in self.block_scaled:
                have = ", ".join(self.block_scaled) or "none"
                raise ConfigError(f"GPU {self.name} has no {dtype} GEMMs (its block-scaled formats: {have}); a "
                                  f"trace of `astra workload llm --gemm-dtype {BLOCK_SCALED_FLAGS[dtype]}` needs a GPU "
                                  "that runs them (e.g. B200, B300, GB200; MI355X for the MX formats)")
            return BLOCK_SCALED[dtype][0]
        if self.tensor_tflops.get(dtype):
            return dtype
        for other in DTYPE_FALLBACK.get(dtype, ()):
            if self.tensor_tflops.get(other):
                return other
        return "fp32" if self.tensor_tflops.get("fp32") else next(iter(self.tensor_tflops))

    def gemm_params(self, dtype: str) -> GemmParams:
        """The GEMM parameters for GEMMs of ``dtype`` (a rate dtype, or a block-scaled format) at its rate's peak
        (FP8: scaled compute efficiency; FP4 by ``fp4_gemm_scale`` and MXFP8 by ``mxfp8_gemm_scale``, else as FP8, an
        ASSUMPTION where no published GEMM measurement of that format is fitted). MXFP6 takes MXFP8's (else FP8's):
        an ASSUMPTION everywhere, no published FP6 GEMM measurement was found."""
        rate_dtype = BLOCK_SCALED[dtype][0] if dtype in BLOCK_SCALED else dtype
        scale = self.fp8_gemm_scale
        if rate_dtype == "fp4" and self.fp4_gemm_scale is not None:
            scale = self.fp4_gemm_scale
        elif dtype in ("mxfp8", "mxfp6") and self.mxfp8_gemm_scale is not None:
            scale = self.mxfp8_gemm_scale
        if rate_dtype not in ("fp8", "fp6", "fp4") or scale == 1.0:
            return self.gemm
        return replace(self.gemm, compute_efficiency=min(1.0, self.gemm.compute_efficiency * scale))

    def dtype_tflops(self, dtype: str) -> float | None:
        """The dense peak TFLOP/s of ``dtype`` itself (a block-scaled format: its rate's), None when this GPU has
        none (no fallback: the peak an MFU is taken against)."""
        if dtype in BLOCK_SCALED:
            return self.tensor_tflops.get(BLOCK_SCALED[dtype][0]) if dtype in self.block_scaled else None
        return self.tensor_tflops.get(dtype)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (using the fallback dtype when this GPU has none for it)."""
        return self.tensor_tflops[self.rate_dtype(dtype)] * 1e12

    @staticmethod
    def dtype_bytes(dtype: str) -> int:
        return DTYPE_BYTES.get(dtype, 2)

    def calibration_warning(self) -> str | None:
        """The sentence a run on this GPU warns with when its GEMM times rest on borrowed efficiencies (None when
        they were fitted on this GPU's die, or its YAML does not say): such times are indicative only."""
        if self.calibration_status == "not-calibrated":
            return (f"{self.name}: GEMM efficiencies are assumed from {self.calibration} (not calibrated): its compute "
                    "times are indicative only (the preset's sources.calibration says why)")
        if self.calibration_status == "partial":
            return (f"{self.name}: GEMM efficiencies are partly calibrated: the large-GEMM rate is fitted to published "
                    f"{self.name} measurements, the size dependence is assumed from {self.calibration} (the preset's "
                    "sources.calibration says which)")
        return None

    def describe(self) -> dict:
        return {
            "gpu": self.name, "sm_count": self.sm_count, "tensor_tflops": dict(self.tensor_tflops),
            "hbm_bandwidth_gbps": self.hbm_bandwidth_gbps, "calibration": self.calibration,
            "calibration_status": self.calibration_status,
            "gemm": self.gemm.to_dict(), "attention_efficiency": self.attention_efficiency,
            "fp8_gemm_scale": self.fp8_gemm_scale, "block_scaled": list(self.block_scaled),
            **({} if self.fp4_gemm_scale is None else {"fp4_gemm_scale": self.fp4_gemm_scale}),
            **({} if self.mxfp8_gemm_scale is None else {"mxfp8_gemm_scale": self.mxfp8_gemm_scale}),
        }


# ------------------------------------------------------------------------------------------- loading
def fitted_parameters():
    """The checked-in fit (``data/gemm_fit.json``): ``{"families": {family: {"params": ...}}, ...}``."""
    text = (resources.files("astra_gpu_model") / "data" / "gemm_fit.json").read_text()
    return json.loads(text)


def _resolve_preset(name):
    names = preset_names()
    lowered = {n.lower(): n for n in names}
    key = str(name).strip().lower()
    if key in lowered:
        return lowered[key]
    if key in PRESET_ALIASES:
        return PRESET_ALIASES[key]
    return None


def load_gpu(name_or_path=None, *, fit=None) -> GpuSpec:
    """A preset name (or alias), or the path of a GPU YAML file; None gives the default preset.

    ``fit`` replaces the checked-in fitted parameters (``{family: {"params": {...}}}``; used by the fit).
    """
    if name_or_path is None or name_or_path == "":
        name_or_path = DEFAULT_GPU
    if isinstance(name_or_path, GpuSpec):
        return name_or_path
    preset = _resolve_preset(name_or_path)
    if preset is not None:
        path = preset_dir() / f"{preset}.yaml"
        if fit is not None:
            return _build(_read_yaml(path, f"preset {preset}"), f"preset {preset} ({path})", fit=fit)
        return copy.deepcopy(_built_preset(preset, path))
    path = Path(str(name_or_path))
    if not path.exists():
        if path.suffix.lower() in (".yaml", ".yml", ".json") or "/" in str(name_or_path):
            raise ConfigError(f"--gpu {name_or_path}: no such file")
        close = difflib.get_close_matches(str(name_or_path), preset_names() + sorted(PRESET_ALIASES), n=3,
                                          cutoff=0.4)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(
            f"--gpu {name_or_path!r}: neither a preset{hint} nor an existing YAML file; presets: "
            f"{', '.join(preset_names())}"
        )
    return load_gpu_file(path, fit=fit)


#: built presets by the texts they are built from (the preset's, its base's, the checked-in fit's): a serving run
#: resolves its GPU about ten times per batch shape, each build about 5 ms; callers get copies
_BUILT = {}


def _built_preset(preset, path):
    """The preset's GpuSpec, built again only when one of the files it is built from reads differently."""
    text = path.read_text(encoding="utf-8")
    data = _yaml_mapping(text, f"preset {preset}")
    base = data.get("base")
    base_preset = _resolve_preset(base) if isinstance(base, str) else None
    base_text = (preset_dir() / f"{base_preset}.yaml").read_text(encoding="utf-8") if base_preset else ""
    fit_text = (resources.files("astra_gpu_model") / "data" / "gemm_fit.json").read_text()
    key = (str(path), text, base_text, fit_text)
    spec = _BUILT.get(key)
    if spec is None:
        spec = _BUILT[key] = _build(data, f"preset {preset} ({path})")
    return spec


def load_gpu_file(path, *, fit=None) -> GpuSpec:
    path = Path(path)
    return _build(_read_yaml(path, str(path)), str(path), path=str(path), fit=fit)


def _read_yaml(path, where):
    """A GPU description (bounded, UTF-8, safe YAML); every failure a ConfigError naming ``where``."""
    import os

    from astra_sim.safeio import read_text

    if isinstance(path, os.PathLike):
        text = read_text(path, "GPU description")
    else:  # a preset inside a zipped package (importlib.resources)
        text = path.read_text(encoding="utf-8")
    return _yaml_mapping(text, where)


def _yaml_mapping(text, where):
    """``text`` as a GPU description's mapping, parsed once per text (a serving run resolves its GPU about ten times
    per batch shape; PyYAML's pure-Python parse of the same preset was half of that run's CPU); a caller's own copy."""
    from astra_sim.safeio import parse_yaml_once

    data = parse_yaml_once(text, where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a GPU description must be a YAML mapping (key: value), "
                          f"got {type(data).__name__}")
    return data


def _merge(base, over):
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _unknown(where, key, allowed, prefix=""):
    close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.5)
    hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
    return ConfigError(f"{where}: unknown key {prefix + str(key)!r}{hint}; allowed: {', '.join(sorted(allowed))}")


def _number(where, key, value, *, positive=True, integer=False, allow_none=False, upper=None):
    if value is None and allow_none:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and integer and not (isinstance(value, int) or float(value).is_integer()):
        ok = False
    if ok and not math.isfinite(float(value)):
        ok = False
    if ok and positive and value <= 0:
        ok = False
    if ok and upper is not None and value > upper:
        ok = False
    if not ok:
        what = "a positive integer" if integer else "a positive number"
        if upper is not None:
            what += f" <= {upper}"
        if allow_none:
            what += " (or null)"
        raise ConfigError(f"{where}: key {key!r} must be {what}, got {brief(value)}")
    return int(value) if integer else float(value)


def _build(data, where, path=None, fit=None) -> GpuSpec:
    if "base" in data:
        base_name = data["base"]
        if not isinstance(base_name, str) or _resolve_preset(base_name) is None:
            raise ConfigError(f"{where}: key 'base' must name a preset ({', '.join(preset_names())}), "
                              f"got {base_name!r}")
        base_path = preset_dir() / f"{_resolve_preset(base_name)}.yaml"
        base = _read_yaml(base_path, f"preset {base_name}")
        base.pop("sources", None)
        over = {k: v for k, v in data.items() if k != "base"}
        if "name" not in over:
            raise ConfigError(f"{where}: key 'name' is required (also with 'base')")
        data = _merge(base, over)
    for key in data:
        if key not in _TOP_KEYS:
            raise _unknown(where, key, _TOP_KEYS)
    for key in _REQUIRED:
        if key not in data or data[key] is None:
            raise ConfigError(f"{where}: missing required key {key!r}")
    for key, kind in _TOP_KEYS.items():
        if key not in data or data[key] is None:
            continue
        value = data[key]
        if kind == "str" and not isinstance(value, str):
            raise ConfigError(f"{where}: key {key!r} must be a string, got {brief(value)}")
        if kind == "map" and not isinstance(value, dict):
            raise ConfigError(f"{where}: key {key!r} must be a mapping, got {brief(value)}")
        if kind == "list" and not isinstance(value, list):
            raise ConfigError(f"{where}: key {key!r} must be a list, got {brief(value)}")

    sm_count = _number(where, "sm_count", data["sm_count"], integer=True)
    tflops = {}
    for key, value in data["tensor_tflops"].items():
        if key not in TFLOPS_KEYS:
            raise _unknown(where, key, TFLOPS_KEYS, "tensor_tflops.")
        number = _number(where, f"tensor_tflops.{key}", value, allow_none=True)
        if number is not None:
            tflops[key] = number
    if not any(tflops.get(k) for k in ("bf16", "fp16")):
        raise ConfigError(f"{where}: key 'tensor_tflops' needs at least 'bf16' or 'fp16' (dense TFLOP/s)")
    if "fp32" not in tflops:
        raise ConfigError(f"{where}: missing required key 'tensor_tflops.fp32' (dense fp32 TFLOP/s)")
    hbm = _number(where, "hbm_bandwidth_gbps", data["hbm_bandwidth_gbps"])

    scaleup = {}
    for key, value in (data.get("scaleup") or {}).items():
        if key not in _SCALEUP_KEYS:
            raise _unknown(where, key, _SCALEUP_KEYS, "scaleup.")
        if _SCALEUP_KEYS[key] == "str":
            if not isinstance(value, str):
                raise ConfigError(f"{where}: key 'scaleup.{key}' must be a string, got {brief(value)}")
            if key == "topology" and value not in SCALEUP_TOPOLOGIES:
                raise ConfigError(f"{where}: key 'scaleup.topology' must be one of {', '.join(SCALEUP_TOPOLOGIES)}, "
                                  f"got {brief(value)}")
            scaleup[key] = value
        else:
            scaleup[key] = _number(where, f"scaleup.{key}", value, integer=_SCALEUP_KEYS[key] == "int",
                                   allow_none=True)

    if scaleup.get("topology") == "pairwise" and not scaleup.get("pcie_gbps"):
        raise ConfigError(f"{where}: 'scaleup.topology: pairwise' needs 'scaleup.pcie_gbps' (GB/s per direction of the "
                          "PCIe link between the bridged pairs)")

    fit = fitted_parameters()["families"] if fit is None else fit
    calibration = data["calibration"]
    if not isinstance(calibration, str) or calibration not in fit:
        raise ConfigError(f"{where}: key 'calibration' must be one of the fitted GPU families "
                          f"({', '.join(sorted(fit))}), got {calibration!r}")
    status = data.get("calibration_status") or "unstated"
    if status not in CALIBRATION_STATUSES + ("unstated",):
        raise ConfigError(f"{where}: key 'calibration_status' must be one of {', '.join(CALIBRATION_STATUSES)}, "
                          f"got {brief(status)}")
    params = dict(fit[calibration]["params"])
    attention = fit[calibration].get("attention_efficiency", 0.5)
    fp8_scale = fit[calibration].get("fp8_gemm_scale", 1.0)
    fp4_scale = mxfp8_scale = None
    for key, value in (data.get("efficiency") or {}).items():
        if key not in EFFICIENCY_KEYS:
            raise _unknown(where, key, EFFICIENCY_KEYS, "efficiency.")
        upper = 1.0 if key in ("compute_efficiency", "hbm_efficiency", "attention_efficiency") else None
        positive = key not in ("tile_penalty", "k_overhead", "launch_us")
        number = _number(where, f"efficiency.{key}", value, positive=positive, upper=upper)
        if upper == 1.0:  # a fraction of a peak: a millionth of it is legal but warned about (astra_sim.limits)
            check_number(where, "utilisation", number, label=f"efficiency.{key}")
        if not positive and number < 0:
            raise ConfigError(f"{where}: key 'efficiency.{key}' must be >= 0, got {brief(value)}")
        if key == "overlap_exponent" and number < 1:
            raise ConfigError(f"{where}: key 'efficiency.overlap_exponent' must be >= 1, got {brief(value)}")
        if key == "attention_efficiency":
            attention = number
        elif key == "fp8_gemm_scale":
            fp8_scale = number
        elif key == "fp4_gemm_scale":
            fp4_scale = number
        elif key == "mxfp8_gemm_scale":
            mxfp8_scale = number
        else:
            params[key] = number

    tiles = DEFAULT_TILES
    if data.get("gemm_tiles") is not None:
        tiles = []
        for i, tile in enumerate(data["gemm_tiles"]):
            ok = isinstance(tile, list) and len(tile) in (2, 3, 4) and all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in tile)
            if not ok:
                raise ConfigError(f"{where}: key 'gemm_tiles[{i}]' must be [tile_m, tile_n], "
                                  f"[tile_m, tile_n, ctas_per_sm] or [tile_m, tile_n, ctas_per_sm, sms_per_tile] "
                                  f"of positive integers, got {tile!r}")
            tiles.append((tile[0], tile[1], tile[2] if len(tile) > 2 else 1) + tuple(tile[3:]))
        if not tiles:
            raise ConfigError(f"{where}: key 'gemm_tiles' must not be empty")
        tiles = tuple(tiles)
    schedule = data.get("gemm_schedule", DATA_PARALLEL)
    if schedule not in SCHEDULES:
        raise ConfigError(f"{where}: key 'gemm_schedule' must be one of {', '.join(SCHEDULES)}, got {brief(schedule)}")

    block_scaled = []
    for i, fmt in enumerate(data.get("block_scaled") or []):
        if fmt not in BLOCK_SCALED:
            raise ConfigError(f"{where}: key 'block_scaled[{i}]' must be one of {', '.join(BLOCK_SCALED)}, "
                              f"got {brief(fmt)}")
        if BLOCK_SCALED[fmt][0] not in tflops:
            raise ConfigError(f"{where}: key 'block_scaled' lists {fmt}, which runs at tensor_tflops."
                              f"{BLOCK_SCALED[fmt][0]}: give that rate")
        block_scaled.append(fmt)

    sources = data.get("sources") or {}
    for key, value in sources.items():
        if not isinstance(value, str):
            raise ConfigError(f"{where}: key 'sources.{key}' must be a string (where the value comes from)")

    def opt(key, integer=False):
        return _number(where, key, data.get(key), integer=integer, allow_none=True)

    from astra_gpu_model.power_clock import SUSTAINED_GEMM

    measured = {silicon for silicon, _ in SUSTAINED_GEMM}
    for key in ("sustained_gemm", "sustained_gemm_cap"):
        value = data.get(key)
        if value is not None and value not in measured:
            raise ConfigError(f"{where}: key '{key}' must name a GPU with a published sustained GEMM rate "
                              f"({', '.join(sorted(measured))}) or be null, got {brief(value)}")
    sustained, sustained_cap = data.get("sustained_gemm"), data.get("sustained_gemm_cap")
    if sustained is not None and sustained_cap is not None:
        raise ConfigError(f"{where}: keys 'sustained_gemm' (a burst fit, scaled) and 'sustained_gemm_cap' (a fit "
                          "capped at the sustained rate) exclude each other: set the other to null")

    spec = GpuSpec(
        name=data["name"], sm_count=sm_count, tensor_tflops=tflops, hbm_bandwidth_gbps=hbm,
        calibration=calibration, gemm=GemmParams.from_dict(params, where), attention_efficiency=attention,
        fp8_gemm_scale=fp8_scale, fp4_gemm_scale=fp4_scale, mxfp8_gemm_scale=mxfp8_scale,
        block_scaled=tuple(block_scaled), gemm_tiles=tiles, gemm_schedule=schedule,
        vendor=data.get("vendor") or "",
        architecture=data.get("architecture") or "",
        boost_clock_mhz=opt("boost_clock_mhz"), hbm_capacity_gb=opt("hbm_capacity_gb"),
        l2_cache_mb=opt("l2_cache_mb"), last_level_cache_mb=opt("last_level_cache_mb"), scaleup=scaleup,
        copy_engines=opt("copy_engines", integer=True), tdp_w=opt("tdp_w"), sustained_gemm=sustained,
        sustained_gemm_cap=sustained_cap,
        calibration_status=status, path=path, raw=data,
    )
    if sustained_cap is None:
        return spec
    from astra_gpu_model.power_clock import cap_reference_tflops

    return replace(spec, sustained_cap_tflops=cap_reference_tflops(spec))


__all__ = ["GpuSpec", "load_gpu", "load_gpu_file", "preset_names", "fitted_parameters", "DTYPE_BYTES",
           "DEFAULT_GPU", "PRESET_ALIASES", "CALIBRATION_STATUSES", "BLOCK_SCALED"]
