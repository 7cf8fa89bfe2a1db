"""SCALE-sim's files around a run: topology CSVs in (convolution or GEMM rows), COMPUTE_REPORT.csv out."""

from __future__ import annotations

from astra_sim.errors import ConfigError
from astra_sim.safeio import brief, read_text

from astra_compute_systolic.geometry import Layer

CONV_COLUMNS = ("IFMAP height", "IFMAP width", "filter height", "filter width", "channels", "num filter", "strides")
GEMM_COLUMNS = ("M", "N", "K")
#: Layers one topology file may make: a depthwise row is one layer per channel, and real networks have at most a
#: few thousand channels, so more is a typo (or a hostile file) that would take minutes and gigabytes to expand.
MAX_LAYERS = 100_000


def _fields(line):
    fields = [f.strip() for f in line.strip().split(",")]
    if fields and fields[-1] == "":
        fields.pop()  # SCALE-sim's rows end with a comma
    return fields


def read_topology(path, gemm=False) -> list:
    """Layers of a topology file. Conv rows: name, ifmap h, w, filter h, w, channels, filters, stride; a
    name containing 'DP' is depthwise, one layer per channel, as SCALE-sim reads it. GEMM rows: name, M, N, K."""
    lines = read_text(path, "topology").splitlines()
    columns = GEMM_COLUMNS if gemm else CONV_COLUMNS
    layers = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = _fields(line)
        if not fields:
            continue
        if len(fields) < 1 + len(columns):
            raise ConfigError(f"{path}:{lineno}: expected {1 + len(columns)} columns (name, "
                              f"{', '.join(columns)}), got {len(fields)}")
        values = []
        for text, column in zip(fields[1:1 + len(columns)], columns):
            try:
                value = int(text)
            except ValueError:
                raise ConfigError(f"{path}:{lineno}: column {column!r} must be an integer, got {brief(text)}") from None
            if value < 1:
                raise ConfigError(f"{path}:{lineno}: column {column!r} must be >= 1, got {brief(value)}")
            values.append(value)
        name = fields[0]
        try:
            if gemm:
                layers.append(Layer.gemm(*values, name=name))
            elif "DP" in name:
                h, w, fh, fw, ch, nf, s = values
                if len(layers) + ch > MAX_LAYERS:
                    raise ConfigError(f"{path}:{lineno}: column 'channels' ({ch:,}) of a depthwise row makes one layer "
                                      f"per channel: more than the {MAX_LAYERS:,} layers a topology may have")
                layers += [Layer(h, w, fh, fw, 1, nf, s, s, name=f"{name}Channel_{c}") for c in range(ch)]
            else:
                h, w, fh, fw, ch, nf, s = values
                layers.append(Layer(h, w, fh, fw, ch, nf, s, s, name=name))
        except ValueError as exc:
            raise ConfigError(f"{path}:{lineno}: {exc}") from None
    if not layers:
        raise ConfigError(f"{path}: no layer rows after the header")
    return layers


def report_text(layers, config, version) -> str:
    """COMPUTE_REPORT.csv as SCALE-sim (3.0.0 or the 2021 v2 code) writes it."""
    from astra_compute_systolic.cycles import compute_cycles

    if version == "3.0.0":
        lines = ["LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, Overall Util %, "
                 "Mapping Efficiency %, Compute Util %,"]
    else:
        lines = ["LayerID, Total Cycles, Stall Cycles, Overall Util %, Mapping Efficiency %, Compute Util %,"]
    for i, layer in enumerate(layers):
        r = compute_cycles(layer, config, version)
        if version == "3.0.0":
            lines.append(r.report_row(i))
        else:
            items = [r.total_cycles, r.stall_cycles, r.overall_util, r.mapping_efficiency, r.compute_util]
            lines.append(f"{i}, " + ", ".join(str(x) for x in items) + ",")
    return "\n".join(lines) + "\n"
