"""SCALE-sim's ``.cfg`` files, read as SCALE-sim reads them (``configparser``, the same sections and keys).

Only what the cycle model needs is required; every problem is one ``ConfigError`` naming the file and
the key. Two generations of files exist and both are accepted:

* SCALE-sim 2 (``scale-sim-v2``, what ASTRA-sim 1.0 ships): ``[general]``, ``[architecture_presets]``,
  ``[run_presets]``. In ``USER`` bandwidth mode every SRAM's backing interface gets ``Bandwidth``'s first
  value.
* SCALE-sim 3 (``scalesim`` 3.0.0 on PyPI) adds ``[layout]`` and ``[sparsity]``. In ``USER`` mode it reads
  the IFMAP and filter interfaces from ``[layout] IfmapSRAMBankBandwidth`` / ``FilterSRAMBankBandwidth``
  and only the OFMAP one from ``Bandwidth`` (single_layer_sim.py); a file with ``[layout]`` gets that.

``CALC`` mode (SCALE-sim's "estimate bandwidth") has fixed interfaces: 10 words/cycle for IFMAP and filter,
``ArrayWidth`` for OFMAP. A word is one byte, as in SCALE-sim (``word_size = 1``).
"""

from __future__ import annotations

import configparser
import io
from dataclasses import dataclass, field, replace

from astra_sim.errors import ConfigError
from astra_sim.safeio import brief, read_text

DATAFLOWS = ("os", "ws", "is")
DATAFLOW_NAMES = {"os": "output stationary", "ws": "weight stationary", "is": "input stationary"}
MODES = ("USER", "CALC")
#: Interface bandwidths SCALE-sim hard-codes in CALC mode (words per cycle) for the IFMAP and filter SRAMs.
CALC_READ_BANDWIDTH = 10

ARCH = "architecture_presets"
RUN = "run_presets"
LAYOUT = "layout"


@dataclass(frozen=True)
class SystolicConfig:
    """One accelerator: array, dataflow, SRAMs (KiB, one-byte words) and interface bandwidths (words/cycle)."""

    rows: int
    cols: int
    ifmap_sram_kb: int
    filter_sram_kb: int
    ofmap_sram_kb: int
    dataflow: str
    bandwidth_mode: str = "CALC"                 # USER: the file's bandwidths; CALC: SCALE-sim's estimate mode
    bandwidth: tuple = (10,)                     # [architecture_presets] Bandwidth (words/cycle)
    ifmap_bandwidth: int | None = None           # USER mode, [layout] IfmapSRAMBankBandwidth (SCALE-sim 3)
    filter_bandwidth: int | None = None          # USER mode, [layout] FilterSRAMBankBandwidth (SCALE-sim 3)
    run_name: str = "systolic"
    path: str = field(default="<config>", compare=False)

    def __post_init__(self):
        where = self.path
        for key, value in (("ArrayHeight", self.rows), ("ArrayWidth", self.cols),
                           ("IfmapSramSzkB", self.ifmap_sram_kb), ("FilterSramSzkB", self.filter_sram_kb),
                           ("OfmapSramSzkB", self.ofmap_sram_kb)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where}: key {key!r} must be a positive integer, got {value!r}")
        if self.dataflow not in DATAFLOWS:
            raise ConfigError(f"{where}: key 'Dataflow' must be one of os, ws, is, got {self.dataflow!r}")
        if self.bandwidth_mode not in MODES:
            raise ConfigError(f"{where}: key 'InterfaceBandwidth' must be USER or CALC, got {self.bandwidth_mode!r}")
        if self.bandwidth_mode == "USER":
            if not self.bandwidth or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.bandwidth):
                raise ConfigError(f"{where}: key 'Bandwidth' must be positive integers (words/cycle), "
                                  f"got {self.bandwidth!r}")
            for key, value in (("IfmapSRAMBankBandwidth", self.ifmap_bandwidth),
                               ("FilterSRAMBankBandwidth", self.filter_bandwidth)):
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                    raise ConfigError(f"{where}: key {key!r} must be a positive integer, got {value!r}")

    # ------------------------------------------------------------------ derived interface bandwidths
    @property
    def ifmap_read_bw(self) -> int:
        """Words per cycle the IFMAP SRAM fills at (SCALE-sim's backing-buffer bandwidth)."""
        if self.bandwidth_mode == "CALC":
            return CALC_READ_BANDWIDTH
        return self.ifmap_bandwidth if self.ifmap_bandwidth is not None else self.bandwidth[0]

    @property
    def filter_read_bw(self) -> int:
        if self.bandwidth_mode == "CALC":
            return CALC_READ_BANDWIDTH
        return self.filter_bandwidth if self.filter_bandwidth is not None else self.bandwidth[0]

    @property
    def ofmap_write_bw(self) -> int:
        return self.cols if self.bandwidth_mode == "CALC" else self.bandwidth[0]

    def with_(self, **changes) -> "SystolicConfig":
        return replace(self, **changes)

    def key(self) -> tuple:
        """What the cycle model depends on (memoisation key)."""
        return (self.rows, self.cols, self.ifmap_sram_kb, self.filter_sram_kb, self.ofmap_sram_kb, self.dataflow,
                self.bandwidth_mode, self.ifmap_read_bw, self.filter_read_bw, self.ofmap_write_bw)

    def describe(self) -> dict:
        return {
            "config": self.path, "array_rows": self.rows, "array_cols": self.cols, "dataflow": self.dataflow,
            "ifmap_sram_kib": self.ifmap_sram_kb, "filter_sram_kib": self.filter_sram_kb,
            "ofmap_sram_kib": self.ofmap_sram_kb, "interface_bandwidth_mode": self.bandwidth_mode,
            "ifmap_words_per_cycle": self.ifmap_read_bw, "filter_words_per_cycle": self.filter_read_bw,
            "ofmap_words_per_cycle": self.ofmap_write_bw,
        }


def _parser(path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser()  # SCALE-sim's own settings: ':' or '=', no inline comments
    text = read_text(path, "systolic config")  # bounded; missing, directory, not UTF-8: a ConfigError
    try:
        parser.read_file(io.StringIO(text, newline=None), source=str(path))
    except configparser.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{path}: not a SCALE-sim .cfg file: {first[:300]}") from None
    return parser


def _get(parser, path, section, key, required=True):
    if not parser.has_section(section):
        if not required:
            return None
        raise ConfigError(f"{path}: section [{section}] is missing (it holds key {key!r})")
    try:
        return parser.get(section, key, raw=True).strip()
    except configparser.NoOptionError:
        if not required:
            return None
        raise ConfigError(f"{path}: key {key!r} is missing from section [{section}]") from None


def _int(text, path, key, minimum=1):
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: key {key!r} must be an integer, got {brief(text)}") from None
    if value < minimum:
        raise ConfigError(f"{path}: key {key!r} must be >= {minimum}, got {brief(value)}")
    return value


def _flag(text, path, key):
    value = str(text).strip().lower()
    if value in ("true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0"):
        return False
    raise ConfigError(f"{path}: key {key!r} must be True or False, got {brief(text)}")


def load_config(path) -> SystolicConfig:
    """Read a SCALE-sim ``.cfg``; raise ``ConfigError`` naming the file and the key on any problem."""
    parser = _parser(path)
    path = str(path)
    run_name = _get(parser, path, "general", "run_name", required=False) or "systolic"
    mode = _get(parser, path, RUN, "InterfaceBandwidth")
    if mode.upper() not in MODES:
        raise ConfigError(f"{path}: key 'InterfaceBandwidth' must be USER or CALC, got {brief(mode)}")
    mode = mode.upper()
    ramulator = _get(parser, path, RUN, "UseRamulatorTrace", required=False)
    if ramulator is not None and _flag(ramulator, path, "UseRamulatorTrace"):
        raise ConfigError(f"{path}: key 'UseRamulatorTrace' is True: Ramulator DRAM traces are not modelled "
                          "(set it to False)")
    rows = _int(_get(parser, path, ARCH, "ArrayHeight"), path, "ArrayHeight")
    cols = _int(_get(parser, path, ARCH, "ArrayWidth"), path, "ArrayWidth")
    sizes = [_int(_get(parser, path, ARCH, key), path, key)
             for key in ("IfmapSramSzkB", "FilterSramSzkB", "OfmapSramSzkB")]
    dataflow = _get(parser, path, ARCH, "Dataflow")
    if dataflow.lower() not in DATAFLOWS:
        raise ConfigError(f"{path}: key 'Dataflow' must be one of os, ws, is, got {brief(dataflow)}")
    bandwidth = (10,)
    ifmap_bw = filter_bw = None
    if mode == "USER":
        text = _get(parser, path, ARCH, "Bandwidth")
        parts = [p.strip() for p in text.split(",")]
        bandwidth = tuple(_int(p, path, "Bandwidth") for p in parts)
        if parser.has_section(LAYOUT):  # SCALE-sim 3: per-SRAM interfaces, banks must divide them
            for key in ("IfmapCustomLayout", "FilterCustomLayout"):
                if _flag(_get(parser, path, LAYOUT, key), path, key):
                    raise ConfigError(f"{path}: key {key!r} is True: custom SRAM layouts are not modelled "
                                      "(set it to False)")
            ifmap_bw = _int(_get(parser, path, LAYOUT, "IfmapSRAMBankBandwidth"), path, "IfmapSRAMBankBandwidth")
            filter_bw = _int(_get(parser, path, LAYOUT, "FilterSRAMBankBandwidth"), path, "FilterSRAMBankBandwidth")
            for what, bw in (("Ifmap", ifmap_bw), ("Filter", filter_bw)):
                key = f"{what}SRAMBankNum"
                banks = _int(_get(parser, path, LAYOUT, key), path, key)
                if bw % banks:
                    raise ConfigError(f"{path}: key {key!r} ({brief(banks)}) must divide {what}SRAMBankBandwidth "
                                      f"({brief(bw)}), "
                                      "as SCALE-sim requires")
    sparsity = _get(parser, path, "sparsity", "SparsitySupport", required=False)
    if sparsity is not None and _flag(sparsity, path, "SparsitySupport"):
        raise ConfigError(f"{path}: key 'SparsitySupport' is true: sparse layers are not modelled (set it to false)")
    return SystolicConfig(rows, cols, *sizes, dataflow.lower(), mode, bandwidth, ifmap_bw, filter_bw,
                          run_name=run_name.strip('"'), path=path)


def write_config(config: SystolicConfig, path=None, style=3) -> str:
    """The ``.cfg`` text SCALE-sim (``style`` 3, with [layout] and [sparsity]; or 2) reads as ``config``."""
    bw = ",".join(str(b) for b in config.bandwidth)
    text = (
        f"[general]\nrun_name = {config.run_name}\n\n"
        f"[architecture_presets]\nArrayHeight:    {config.rows}\nArrayWidth:     {config.cols}\n"
        f"IfmapSramSzkB:    {config.ifmap_sram_kb}\nFilterSramSzkB:   {config.filter_sram_kb}\n"
        f"OfmapSramSzkB:    {config.ofmap_sram_kb}\nIfmapOffset:    0\nFilterOffset:   10000000\n"
        f"OfmapOffset:    20000000\nDataflow : {config.dataflow}\nBandwidth : {bw}\n"
    )
    if style == 2:
        text += "MemoryBanks: 1\n\n"
    else:
        ibw = config.ifmap_bandwidth if config.ifmap_bandwidth is not None else config.bandwidth[0]
        fbw = config.filter_bandwidth if config.filter_bandwidth is not None else config.bandwidth[0]
        text += ("ReadRequestBuffer: 32\nWriteRequestBuffer: 32\n\n"
                 f"[layout]\nIfmapCustomLayout: False\nIfmapSRAMBankBandwidth: {ibw}\nIfmapSRAMBankNum: 1\n"
                 f"IfmapSRAMBankPort: 2\nFilterCustomLayout: False\nFilterSRAMBankBandwidth: {fbw}\n"
                 "FilterSRAMBankNum: 1\nFilterSRAMBankPort: 2\n\n"
                 "[sparsity]\nSparsitySupport : false\nSparseRep : ellpack_block\nOptimizedMapping : false\n"
                 "BlockSize : 8\nRandomNumberGeneratorSeed : 40\n\n")
    text += f"[run_presets]\nInterfaceBandwidth: {config.bandwidth_mode}\n"
    if style != 2:
        text += "UseRamulatorTrace: False\n"
    if path is not None:
        from astra_sim.safeio import write_text_atomic

        write_text_atomic(path, text)
    return text
