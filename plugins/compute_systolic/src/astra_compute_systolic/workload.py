"""ASTRA-sim 1.0's workload generator (``gen_astrasim_workload_input.py``) without running SCALE-sim.

The generator (astra-sim branch ASTRA-sim-1.0, scripts/workload_generator) reads a CSV of layer GEMMs
``name,m,n,k[,parallelism]``, splits each over NPUs and packages by the parallelism, runs SCALE-sim on the
forward pass, the input gradient and the weight gradient, and writes an ASTRA-sim 1.0 text workload. This
module writes the same file from the cycle model. Its rules, as the generator applies them:

* GEMM per pass, as SCALE-sim topology rows ``(ifmap_h, ifmap_w, 1, ifmap_w, 1, filters)``, i.e.
  ``M x K`` times ``K x N``: forward ``(m', k, n')``, input gradient ``(m', n', k)``, weight gradient
  ``(k, m', n')``, with ``m'``, ``n'`` the batch and output dimensions split by the parallelism
  (``int(x / parts)``: Python true division, truncated, as the generator computes it);
* communication per pass: DATA all-reduces the weight gradient; MODEL all-gathers the forward output and
  reduce-scatters the input gradient; the hybrids split the same between and within packages;
* the cycles are column 2 of SCALE-sim's COMPUTE_REPORT.csv taken as text after the comma, so they carry
  a leading space (``' 2555'``), which the file keeps;
* line 1 is the parallelism, line 2 the number of layers, then one tab-separated line of 13 columns per
  layer (the last one the layer's parallelism, for every type), and no final newline.

One more rule is the generator's bug, kept only with ``same_report=True`` (``--exact-generator``): SCALE-sim
v2 writes every run's report to the same file, and the generator reads it after all three runs, so all
three passes get the weight gradient's cycles.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.safeio import read_text

from astra_compute_systolic.cycles import compute_cycles
from astra_compute_systolic.geometry import Layer

PARALLELISMS = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_CUSTOMIZED")
LAYER_PARALLELISMS = PARALLELISMS[:4]
UPDATE_TIME = 100   # the generator's "delay for 1KB communication size" column


@dataclass(frozen=True)
class MnkLayer:
    name: str
    m: int
    n: int
    k: int
    parallelism: str
    line: int


@dataclass(frozen=True)
class Split:
    """NPUs, packages and the data type size (bytes) of a generated workload."""

    npus: int
    packages: int = 1
    datatype_size: int = 2

    def __post_init__(self):
        for key, value, flag in (("npus", self.npus, "--npus"), ("packages", self.packages, "--packages"),
                                 ("datatype_size", self.datatype_size, "--datatype-size")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{flag} must be a positive integer, got {value!r}")
        if self.npus % self.packages:
            raise ConfigError(f"--npus {self.npus} is not a multiple of --packages {self.packages} (the generator "
                              "requires NPUs per package x packages = NPUs)")

    @property
    def per_package(self) -> int:
        return self.npus // self.packages


def read_mnk(path, parallel) -> list:
    """The generator's MNK CSV: a header line, then ``name,m,n,k`` (``,parallelism`` for HYBRID_CUSTOMIZED,
    where it is required; otherwise a fifth column is replaced by ``parallel``)."""
    if parallel not in PARALLELISMS:
        raise ConfigError(f"--parallel must be one of {', '.join(PARALLELISMS)}, got {parallel!r}")
    lines = io.StringIO(read_text(path, "MNK"), newline=None).readlines()  # as a text-mode file reads them
    layers = []
    for lineno, raw in enumerate(lines[1:], start=2):
        cols = raw.strip("\n").strip(" ").split(",")
        if cols == [""]:
            raise WorkloadError(f"{path}:{lineno}: empty line (the generator stops on it); expected name,m,n,k")
        if parallel == "HYBRID_CUSTOMIZED":
            if len(cols) != 5:
                raise WorkloadError(f"{path}:{lineno}: HYBRID_CUSTOMIZED needs 5 columns name,m,n,k,parallelism, "
                                    f"got {len(cols)}")
        elif len(cols) == 4:
            cols.append(parallel)
        elif len(cols) == 5:
            cols[-1] = parallel
        else:
            raise WorkloadError(f"{path}:{lineno}: expected 4 columns name,m,n,k (or 5 with a parallelism), "
                                f"got {len(cols)}")
        dims = []
        for col, key in zip(cols[1:4], "mnk"):
            try:
                value = int(col)
            except ValueError:
                raise WorkloadError(f"{path}:{lineno}: {key} must be an integer, got {col!r}") from None
            if value < 1:
                raise WorkloadError(f"{path}:{lineno}: {key} must be >= 1, got {value}")
            dims.append(value)
        policy = cols[4].strip() if parallel == "HYBRID_CUSTOMIZED" else cols[4]
        if policy not in LAYER_PARALLELISMS:
            raise WorkloadError(f"{path}:{lineno}: layer parallelism {cols[4]!r} must be one of "
                                f"{', '.join(LAYER_PARALLELISMS)}")
        layers.append(MnkLayer(cols[0], *dims, policy, lineno))
    if not layers:
        raise WorkloadError(f"{path}: no layer lines after the header")
    return layers


def _div(a: int, b: int) -> int:
    return int(a / b)   # the generator's int(x / y): float division, truncated


def pass_gemms(layer: MnkLayer, split: Split):
    """``(M, N, K)`` of the forward, input-gradient and weight-gradient GEMMs one NPU runs."""
    p, pp = split.packages, split.per_package
    m, n = {
        "DATA": (_div(layer.m, split.npus), layer.n),
        "MODEL": (layer.m, _div(layer.n, split.npus)),
        "HYBRID_DATA_MODEL": (_div(layer.m, p), _div(layer.n, pp)),
        "HYBRID_MODEL_DATA": (_div(layer.m, pp), _div(layer.n, p)),
    }[layer.parallelism]
    return (m, n, layer.k), (m, layer.k, n), (layer.k, n, m)


def pass_comms(layer: MnkLayer, split: Split):
    """``[(type, bytes)] * 3`` for forward, input gradient, weight gradient."""
    d, m, n, k = split.datatype_size, layer.m, layer.n, layer.k
    p, pp, npus = split.packages, split.per_package, split.npus
    if layer.parallelism == "DATA":
        return [("NONE", 0), ("NONE", 0), ("ALLREDUCE", n * k * d)]
    if layer.parallelism == "MODEL":
        return [("ALLGATHER", _div(m * n * d, npus)), ("REDUCESCATTER", m * k * d), ("NONE", 0)]
    if layer.parallelism == "HYBRID_DATA_MODEL":
        return [("ALLGATHER", _div(m * n * d, npus)), ("REDUCESCATTER", _div(m * k * d, p)),
                ("ALLREDUCE", _div(k * n * d, pp))]
    return [("ALLGATHER", _div(m * n * d, npus)), ("REDUCESCATTER", _div(m * k * d, pp)),
            ("ALLREDUCE", _div(n * k * d, p))]


def report_cycles(gemm, config, version) -> int:
    """Column 2 of SCALE-sim's COMPUTE_REPORT.csv for a GEMM (2021: Total Cycles; 3.0.0: with prefetch)."""
    m, n, k = gemm
    if min(m, n, k) < 1:
        raise WorkloadError(f"a pass GEMM of {m} x {n} x {k} has an empty dimension (SCALE-sim cannot run it): "
                            "a dimension is smaller than the NPUs it is split over")
    r = compute_cycles(Layer.gemm(m, n, k), config, version)
    if r.total_cycles < 1:
        raise WorkloadError(f"a {m} x {n} x {k} GEMM takes 0 cycles on a {config.rows}x{config.cols} array: "
                            "SCALE-sim divides by it and stops")
    return r.total_cycles if version == "2021" else r.total_cycles_with_prefetch


def generate(layers, config, split: Split, parallel, *, version="2021", same_report=False) -> str:
    """The workload text, byte for byte the generator's (no final newline)."""
    rows = []
    for layer in layers:
        gemms = pass_gemms(layer, split)
        where = f"layer {layer.name!r} (line {layer.line})"
        try:
            cycles = [report_cycles(g, config, version) for g in gemms]
        except WorkloadError as exc:
            raise WorkloadError(f"{where}: {exc}") from None
        if same_report:
            cycles = [cycles[2]] * 3
        fields = [layer.name, "-1"]
        for c, (word, size) in zip(cycles, pass_comms(layer, split)):
            fields += [f" {c}", word, str(size)]
        fields += [str(UPDATE_TIME), layer.parallelism]
        rows.append("\t".join(fields))
    return parallel + "\n" + str(len(rows)) + "".join("\n" + row for row in rows)


def write_workload(mnk_path, config, split: Split, parallel, output, *, version="2021", same_report=False,
                   chakra=False, npus_per_dim=None):
    """Write the text workload to ``output`` (or, with ``chakra``, Chakra traces ``output.<rank>.et``)."""
    from astra_sim.safeio import write_text_atomic

    layers = read_mnk(mnk_path, parallel)
    text = generate(layers, config, split, parallel, version=version, same_report=same_report)
    if not chakra:
        write_text_atomic(output, text)
        return {"layers": len(layers), "path": str(output)}
    from astra_sim.generated import private_folder
    from astra_workload_generators.text import convert_text

    with private_folder("astra-systolic-") as tmp:  # named by this process: a SIGKILLed run's is reclaimed
        path = os.path.join(tmp, os.path.basename(str(output)) + ".txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        summary = convert_text(path, str(output), split.npus, npus_per_dim=npus_per_dim)
    summary["path"] = f"{output}.0.et"
    return summary
