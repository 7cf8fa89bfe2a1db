"""ASTRA-sim 1.0 text workloads: parser, Chakra graph builder, converter.

The format (reference dossier chakra-format.md section 9)::

    <TYPE> [header values]            line 1
    <L>                               line 2: number of layers
    <L layer lines of 12 columns>     13 for HYBRID_CUSTOMIZED (the layer's own parallelism)

Layer columns: name, reserved (-1), fwd compute, fwd comm type, fwd comm size, input-grad compute, ig comm type,
ig comm size, weight-grad compute, wg comm type, wg comm size, wg update time [, parallelism].

The graph of one rank follows Chakra's ``Text`` converter (mlcommons/chakra ``text_converter.py``) node for node
for the types it supports (MICRO, DATA, MODEL, HYBRID_DATA_MODEL, HYBRID_MODEL_DATA, HYBRID_DLRM(_ENHANCED)), and
extends the same templates to the types it rejects (HYBRID_TRANSFORMER, HYBRID_TRANSFORMER_FWD_IN_BCKWD,
HYBRID_CUSTOMIZED, DISTRIBUTED_INFERENCE) following ASTRA-sim 1.0's ``Workload::iterate_*`` loops.

Two output styles:

* ``astra-sim`` (default): every collective carries ``involved_dim`` (the ASTRA-sim 1.0 dimension mapping of the
  workload's parallelism, which Chakra's converter dropped in 2024), rank files each number their nodes from 0,
  and collectives that move nothing (type word NONE, 0 bytes, or no involved dimension) are left out, their
  dependants inheriting their dependencies (ASTRA-sim 1.0 issues no collective for them either).
* ``chakra``: exactly the bytes Chakra's converter writes (no involved_dim, one id counter running across the
  rank files, NONE and every unknown word become an ALL_REDUCE of the given size).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from astra_sim.chakra import make_metadata, make_node, types as T
from astra_sim.errors import ConfigError, WorkloadError

__all__ = [
    "PARALLELISM_TYPES", "CHAKRA_SUPPORTED", "CHAKRA_SCHEMA", "NUM_DIMS", "STYLES",
    "TextWorkload", "Layer", "parse_text", "parse_text_file", "looks_like_text_workload",
    "involved_dims", "model_parallel_boundary", "build_graph", "rank_nodes", "text_metadata", "convert_text",
]

PARALLELISM_TYPES = (
    "DATA", "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED",
    "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_CUSTOMIZED", "MICRO", "DISTRIBUTED_INFERENCE",
)
#: The types Chakra's Text converter accepts (it raises "Unsupported parallelism type" for the others).
CHAKRA_SUPPORTED = (
    "MICRO", "DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED",
)
#: Per-layer parallelism a HYBRID_CUSTOMIZED line may name (ASTRA-sim 1.0 decodes any TYPE name, but the
#: transformer ones need a model-parallel group the per-layer column cannot give).
CUSTOMIZED_LAYER_TYPES = (
    "DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED", "MICRO",
    "DISTRIBUTED_INFERENCE",
)
CHAKRA_SCHEMA = "1.0.2-chakra.1.0.0"
#: ASTRA-sim 1.0 describes involved dimensions with 10-entry vectors.
NUM_DIMS = 10
STYLES = ("astra-sim", "chakra")

COMM_WORDS = {"ALLREDUCE": T.ALL_REDUCE, "ALLTOALL": T.ALL_TO_ALL, "ALLGATHER": T.ALL_GATHER,
              "REDUCESCATTER": T.REDUCE_SCATTER}
NONE_WORD = "NONE"
#: ASTRA-sim 1.0 parses this word, but its Layer has no collective for it ("no known collective operation").
ARA_WORD = "ALLREDUCEALLTOALL"
_KNOWN_WORDS = tuple(COMM_WORDS) + (NONE_WORD, ARA_WORD)

COLUMNS = (
    "layer name", "reserved", "fwd compute time", "fwd comm type", "fwd comm size", "input-grad compute time",
    "input-grad comm type", "input-grad comm size", "weight-grad compute time", "weight-grad comm type",
    "weight-grad comm size", "weight-grad update time", "layer parallelism",
)


# ---------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------

@dataclass
class Comm:
    word: str
    size: int
    line: int
    column: int  # 1-based column of the type word

    @property
    def where(self):
        return f"column {self.column} ({COLUMNS[self.column - 1]})"


@dataclass
class Layer:
    index: int
    name: str
    line: int
    fwd_compute: int
    fwd: Comm
    ig_compute: int
    ig: Comm
    wg_compute: int
    wg: Comm
    update_time: int
    policy: str | None = None  # HYBRID_CUSTOMIZED only


@dataclass
class TextWorkload:
    path: str
    text: str  # the file with universal newlines (what Chakra stores as the `input_file` attribute)
    parallelism: str
    layers: list
    last_bottom_layer: int | None = None  # HYBRID_DLRM(_ENHANCED)
    model_parallel_group: int | None = None  # HYBRID_TRANSFORMER*
    checkpoints: list = field(default_factory=list)  # HYBRID_TRANSFORMER_FWD_IN_BCKWD
    checkpoint_initiates: list = field(default_factory=list)

    @property
    def num_layers(self):
        return len(self.layers)

    @property
    def is_transformer(self):
        return self.parallelism in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD")


def _err(path, line, message):
    return WorkloadError(f"{path}:{line}: {message}" if line else f"{path}: {message}")


def _int(path, line, token, what, minimum=0):
    try:
        value = int(token, 10)
    except ValueError:
        raise _err(path, line, f"{what}: expected an integer, got {token!r}") from None
    if minimum is not None and value < minimum:
        raise _err(path, line, f"{what}: expected an integer >= {minimum}, got {token!r}")
    return value


def _scaled(value, scale):
    return value if scale == 1 else int(value * scale)


def _read_text(path):
    from astra_sim.safeio import MAX_CONFIG_BYTES

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such workload file") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the workload file: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise WorkloadError(f"{path}: a text workload larger than the {MAX_CONFIG_BYTES:,} bytes accepted")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not a text workload (not UTF-8 text: {exc.reason} at byte {exc.start})") \
            from None
    # Python's universal newlines, as Chakra's converter reads the file for its `input_file` attribute.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def looks_like_text_workload(path) -> bool:
    """Cheap test for workload-format detection: an existing ``.txt`` file whose first token is a parallelism
    type, or whose second line is a lone integer (so that a misspelt type still reaches the parser and its
    clear error)."""
    path = os.fspath(path)
    if not path.lower().endswith(".txt") or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    lines = head.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    tokens = lines[0].split()
    if tokens and tokens[0] in PARALLELISM_TYPES:
        return True
    return len(lines) > 1 and lines[1].strip().isdigit()


def parse_text_file(path, *, compute_scale=1, comm_scale=1) -> TextWorkload:
    """Read and check an ASTRA-sim 1.0 text workload. Errors are :class:`WorkloadError` naming file and line."""
    path = os.fspath(path)
    return parse_text(_read_text(path), path, compute_scale=compute_scale, comm_scale=comm_scale)


def parse_text(text, path="<text>", *, compute_scale=1, comm_scale=1) -> TextWorkload:
    """Parse the text of a workload (see :func:`parse_text_file`). ``compute_scale``/``comm_scale`` multiply the
    compute times and communication sizes (ASTRA-sim 1.0's ``--compute-scale``/``--comm-scale``)."""
    for what, scale in (("compute scale", compute_scale), ("comm scale", comm_scale)):
        if not isinstance(scale, (int, float)) or scale < 0:
            raise ConfigError(f"{what} must be a number >= 0, got {scale!r}")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    header = lines[0].split() if lines else []
    if not header:
        raise _err(path, 1, f"empty first line; expected the parallelism type, one of {', '.join(PARALLELISM_TYPES)}")
    kind = header[0]
    if kind not in PARALLELISM_TYPES:
        raise _err(path, 1, f"unknown parallelism type {kind!r}; expected one of {', '.join(PARALLELISM_TYPES)}")
    workload = TextWorkload(path, text, kind, [])
    _parse_header(workload, header[1:], path)

    if len(lines) < 2 or not lines[1].split():
        raise _err(path, 2, "expected the number of layers alone on line 2")
    count_tokens = lines[1].split()
    if len(count_tokens) != 1:
        raise _err(path, 2, f"expected the number of layers alone on line 2, got {lines[1].strip()!r}")
    num_layers = _int(path, 2, count_tokens[0], "number of layers", minimum=1)

    ncols = 13 if kind == "HYBRID_CUSTOMIZED" else 12
    layers = workload.layers
    for lineno, line in enumerate(lines[2:], start=3):
        tokens = line.split()
        if not tokens:
            continue  # blank lines (and the trailing newline) are ignored
        if len(layers) == num_layers:
            raise _err(path, lineno, f"unexpected layer line {tokens[0]!r}: line 2 declares {num_layers} "
                                     f"layer(s) and they end at line {layers[-1].line}")
        if ncols == 12 and len(tokens) == 13 and tokens[12] == kind:
            # ASTRA-sim 1.0's own generator (gen_astrasim_workload_input.py) writes the layer's parallelism as a
            # 13th column for every type; it repeats the type, so it is read as a comment here (ASTRA-sim 1.0's
            # C++ reader would take it for the next layer's name).
            tokens = tokens[:12]
        if len(tokens) != ncols:
            expected = ", ".join(COLUMNS[:ncols])
            raise _err(path, lineno, f"layer {tokens[0]!r} has {len(tokens)} columns, expected {ncols} "
                                     f"({expected})")
        layers.append(_parse_layer(path, lineno, len(layers), tokens, kind, compute_scale, comm_scale))
    if len(layers) != num_layers:
        raise _err(path, 2, f"declares {num_layers} layer(s) but {len(layers)} layer line(s) follow")
    _check_workload(workload)
    return workload


def _parse_header(workload, extra, path):
    kind = workload.parallelism
    if kind in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        if len(extra) != 1:
            raise _err(path, 1, f"{kind} takes one value after the type, the index of the last bottom-MLP layer "
                                f"(e.g. '{kind} 4'), got {len(extra)} value(s)")
        workload.last_bottom_layer = _int(path, 1, extra[0], "last bottom layer", minimum=0)
        return
    if kind in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"):
        usage = ("model_parallel_NPU_group: <g>" if kind == "HYBRID_TRANSFORMER" else
                 "model_parallel_NPU_group: <g> checkpoints: <n> <layer>*n checkpoint_initiates: <m> <layer>*m")
        tokens = list(extra)

        def label(expected):
            if not tokens:
                raise _err(path, 1, f"{kind} header ends early: expected '{kind} {usage}'")
            token = tokens.pop(0)
            if token.lower() != expected.lower():
                raise _err(path, 1, f"{kind} header: expected {expected!r}, got {token!r} (the header is "
                                    f"'{kind} {usage}'; extended headers such as SimAI's 'ep: pp: ...' are not "
                                    "ASTRA-sim 1.0's format)")

        def number(what, minimum=0):
            if not tokens:
                raise _err(path, 1, f"{kind} header ends early: expected {what} ('{kind} {usage}')")
            return _int(path, 1, tokens.pop(0), what, minimum=minimum)

        label("model_parallel_NPU_group:")
        workload.model_parallel_group = number("model_parallel_NPU_group", minimum=1)
        if kind == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
            label("checkpoints:")
            workload.checkpoints = [number("a checkpoint layer index") for _ in range(number("checkpoint count"))]
            label("checkpoint_initiates:")
            workload.checkpoint_initiates = [
                number("a checkpoint_initiates layer index") for _ in range(number("checkpoint_initiates count"))
            ]
        if tokens:
            raise _err(path, 1, f"unexpected {tokens[0]!r} after the {kind} header ('{kind} {usage}')")
        return
    if extra:
        raise _err(path, 1, f"unexpected {extra[0]!r} after {kind} (only HYBRID_DLRM*, HYBRID_TRANSFORMER* take "
                            "header values; the number of layers goes alone on line 2)")


def _parse_layer(path, lineno, index, tok, kind, compute_scale, comm_scale):
    def num(col):  # col is 1-based
        return _int(path, lineno, tok[col - 1], f"column {col} ({COLUMNS[col - 1]}) of layer {tok[0]!r}")

    def comm(col):
        word = tok[col - 1]
        if word not in _KNOWN_WORDS:
            raise _err(path, lineno, f"column {col} ({COLUMNS[col - 1]}) of layer {tok[0]!r}: unknown "
                                     f"communication type {word!r}; expected one of {', '.join(_KNOWN_WORDS)}")
        return Comm(word, _scaled(num(col + 1), comm_scale), lineno, col)

    _int(path, lineno, tok[1], f"column 2 ({COLUMNS[1]}) of layer {tok[0]!r}", minimum=None)
    layer = Layer(
        index=index, name=tok[0], line=lineno,
        fwd_compute=_scaled(num(3), compute_scale), fwd=comm(4),
        ig_compute=_scaled(num(6), compute_scale), ig=comm(7),
        wg_compute=_scaled(num(9), compute_scale), wg=comm(10),
        update_time=num(12),
    )
    if kind == "HYBRID_CUSTOMIZED":
        policy = tok[12]
        if policy not in CUSTOMIZED_LAYER_TYPES:
            hint = (" (the transformer policies need a model_parallel_NPU_group, which a layer line cannot give)"
                    if policy in PARALLELISM_TYPES else "")
            raise _err(path, lineno, f"column 13 ({COLUMNS[12]}) of layer {tok[0]!r}: {policy!r} cannot be a "
                                     f"layer's parallelism{hint}; expected one of {', '.join(CUSTOMIZED_LAYER_TYPES)}")
        layer.policy = policy
    return layer


def _check_workload(w):
    path, n = w.path, w.num_layers
    if w.parallelism in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        b = w.last_bottom_layer
        if not 1 <= b <= n - 1:
            raise _err(path, 1, f"last bottom layer {b} must be between 1 and {n - 1} (the layer count - 1): "
                                "layer 0 is the embedding whose all-to-all that layer waits for")
        if w.layers[0].fwd.word != "ALLTOALL":
            raise _err(path, w.layers[0].line,
                       f"{w.parallelism}: layer 0 ({w.layers[0].name!r}) must have an ALLTOALL forward "
                       f"communication (the embedding exchange layer {b} waits for), got {w.layers[0].fwd.word!r}")
    if w.parallelism == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
        for what, values in (("checkpoints", w.checkpoints), ("checkpoint_initiates", w.checkpoint_initiates)):
            for v in values:
                if v >= n:
                    raise _err(path, 1, f"{what} names layer {v}, but there are {n} layers (0..{n - 1})")
        for i in w.checkpoint_initiates:
            if not any(c <= i for c in w.checkpoints):
                raise _err(path, 1, f"checkpoint_initiates names layer {i} but no checkpoint layer is at or below "
                                    f"it (checkpoints: {w.checkpoints or 'none'}); the recomputation would have "
                                    "nowhere to start")


# ---------------------------------------------------------------------------------------------------------
# Dimension mapping (ASTRA-sim 1.0 Workload::decode_involved_dimensions)
# ---------------------------------------------------------------------------------------------------------

_ALL = (True,) * NUM_DIMS
_NONE = (False,) * NUM_DIMS
_DIM0 = (True,) + (False,) * (NUM_DIMS - 1)
_DIMS1_9 = (False,) + (True,) * (NUM_DIMS - 1)


def involved_dims(policy, boundary=None):
    """``{'fwd': dims, 'ig': dims, 'wg': dims}`` (10-entry bool tuples) for a parallelism policy.

    For the transformer policies ``boundary`` is the last network dimension of the model-parallel group
    (:func:`model_parallel_boundary`); None leaves them as the strings ``'model'``/``'data'`` to be resolved
    once the network is known."""
    if policy == "ALL":
        return {"fwd": _ALL, "ig": _ALL, "wg": _ALL}
    if policy in ("DATA", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED", "MICRO"):
        return {"fwd": _NONE, "ig": _NONE, "wg": _ALL}
    if policy in ("MODEL", "DISTRIBUTED_INFERENCE"):
        return {"fwd": _ALL, "ig": _ALL, "wg": _NONE}
    if policy == "HYBRID_MODEL_DATA":
        return {"fwd": _DIMS1_9, "ig": _DIMS1_9, "wg": _DIM0}
    if policy == "HYBRID_DATA_MODEL":
        return {"fwd": _DIM0, "ig": _DIM0, "wg": _DIMS1_9}
    if policy in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"):
        if boundary is None:
            return {"fwd": "model", "ig": "model", "wg": "data"}
        model, data = _split_dims(boundary)
        return {"fwd": model, "ig": model, "wg": data}
    raise ValueError(f"no dimension mapping for {policy!r}")


def _split_dims(boundary):
    model = tuple(i <= boundary for i in range(NUM_DIMS))
    return model, tuple(not m for m in model)


def model_parallel_boundary(group, npus_per_dim, path="<workload>"):
    """ASTRA-sim 1.0's ``Sys::break_dimension``: the last dimension of the model-parallel group of ``group``
    consecutive NPUs (dimension 0 varies fastest), -1 for a group of 1. A group that ends inside a dimension
    (ASTRA-sim 1.0 then splits that dimension into two logical ones) or exceeds the network is an error."""
    if group == 1:
        return -1
    product = 1
    for dim, count in enumerate(npus_per_dim):
        if product * count < group:
            product *= count
        elif product * count == group:
            return dim
        else:
            if group % product == 0 and count % (group // product) == 0:
                first = group // product
                split = list(npus_per_dim[:dim]) + [first, count // first] + list(npus_per_dim[dim + 1:])
                raise _err(path, 1, f"model_parallel_NPU_group {group} ends inside network dimension {dim} "
                                    f"({count} NPUs) of {list(npus_per_dim)}; ASTRA-sim 1.0 splits that dimension "
                                    f"into two logical ones, which involved_dim cannot express: describe the "
                                    f"network as {split} NPUs per dimension instead")
            raise _err(path, 1, f"model_parallel_NPU_group {group} does not fit the network's NPUs per dimension "
                                f"{list(npus_per_dim)}: it must be a product of leading dimensions")
    total = product
    raise _err(path, 1, f"model_parallel_NPU_group {group} is larger than the network ({total} NPUs, "
                        f"{list(npus_per_dim)} per dimension)")


# ---------------------------------------------------------------------------------------------------------
# Graph
# ---------------------------------------------------------------------------------------------------------

class GNode:
    """A node of the abstract per-rank graph (before ids are given)."""

    __slots__ = ("name", "type", "duration", "word", "size", "dims", "deps", "comm", "index", "elided",
                 "resolved")

    def __init__(self, name, type_, deps, duration=0, word=None, size=0, dims=None, comm=None):
        self.name = name
        self.type = type_
        self.deps = [d for d in deps if d is not None]
        self.duration = duration
        self.word = word
        self.size = size
        self.dims = dims  # 10-tuple of bool, or 'model'/'data' (unresolved transformer dims)
        self.comm = comm  # the Comm it came from (for error messages)
        self.index = None
        self.elided = False
        self.resolved = None

    def __repr__(self):
        return f"GNode({self.name!r})"

    @property
    def moves_nothing(self):
        """A collective ASTRA-sim 1.0 would not issue: type NONE, 0 bytes, or no involved dimension."""
        if self.type != T.COMM_COLL_NODE:
            return False
        return self.word == NONE_WORD or self.size == 0 or (isinstance(self.dims, tuple) and not any(self.dims))


class _Builder:
    def __init__(self, workload, boundary, style):
        self.w = workload
        self.boundary = boundary
        self.style = style
        self.nodes = []
        policy = workload.parallelism
        if policy in ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD") and workload.model_parallel_group == 1:
            self.boundary = -1  # known without the network
        self._dims = {}
        for layer in workload.layers:
            if policy == "HYBRID_CUSTOMIZED":
                p = layer.policy
            elif policy in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED") and layer.index == 0:
                p = "ALL"
            else:
                p = policy
            self._dims[layer.index] = involved_dims(p, self.boundary)

    def add(self, node):
        self.nodes.append(node)
        return node

    def comp(self, layer, phase, duration, deps):
        return self.add(GNode(f"COMP_NODE_{layer.name}_{phase}", T.COMP_NODE, deps, duration=duration))

    def comm(self, layer, phase, deps, *, name=None, dims_layer=None):
        """The collective of ``layer``'s ``phase`` ('fwd', 'ig', 'wg') column."""
        c = getattr(layer, phase)
        if c.word == ARA_WORD and self.style != "chakra":
            raise _err(self.w.path, c.line,
                       f"{c.where} of layer {layer.name!r}: {ARA_WORD} has no Chakra / ASTRA-sim 2 collective "
                       f"(ASTRA-sim 1.0 itself stops with 'no known collective operation'); use ALLREDUCE or "
                       f"ALLTOALL, or --style chakra, which writes it as an ALL_REDUCE like Chakra's converter")
        dims = self._dims[(layer if dims_layer is None else dims_layer).index][phase]
        base = layer.name if name is None else name
        return self.add(GNode(f"COMM_COLL_NODE_{base}_{c.word}", T.COMM_COLL_NODE, deps, word=c.word,
                              size=c.size, dims=dims, comm=c))


def build_graph(workload, *, num_passes=1, boundary=None, style="astra-sim"):
    """The abstract graph of one rank (the same for every rank), in Chakra's creation order."""
    if not isinstance(num_passes, int) or num_passes < 1:
        raise ConfigError(f"--num-passes must be a positive integer, got {num_passes!r}")
    b = _Builder(workload, boundary, style)
    builder = _GRAPHS[workload.parallelism]
    builder(b, workload.layers, num_passes)
    return b.nodes


def _micro(b, layers, passes):
    for _ in range(passes):
        for layer in layers:
            b.comm(layer, "wg", [])


def _data(b, layers, passes):
    n = len(layers)
    wgc_prev = {}
    for _ in range(passes):
        fwd = {}
        for i, layer in enumerate(layers):
            fwd[i] = b.comp(layer, "FWD", layer.fwd_compute, [fwd.get(i - 1), wgc_prev.get(i)])
        last_fwd = fwd[n - 1]
        ig = {}
        wgc = {}
        for i in range(n - 1, -1, -1):
            layer = layers[i]
            wg = b.comp(layer, "BWD_WG", layer.wg_compute, [last_fwd] if i == n - 1 else [ig[i + 1]])
            wgc[i] = b.comm(layer, "wg", [wg])
            if i != 0:
                ig[i] = b.comp(layer, "BWD_IG", layer.ig_compute, [wg])
        wgc_prev = wgc


def _model(b, layers, passes):
    n = len(layers)
    wg_prev = {}
    for _ in range(passes):
        fwdc = {}
        for i, layer in enumerate(layers):
            f = b.comp(layer, "FWD", layer.fwd_compute, [fwdc.get(i - 1), wg_prev.get(i)])
            fwdc[i] = b.comm(layer, "fwd", [f])
        last = fwdc[n - 1]
        igc = {}
        wg = {}
        for i in range(n - 1, -1, -1):
            layer = layers[i]
            ig = b.comp(layer, "BWD_IG", layer.ig_compute, [last] if i == n - 1 else [wg[i + 1], igc[i + 1]])
            if i != 0:
                igc[i] = b.comm(layer, "ig", [ig])
            wg[i] = b.comp(layer, "BWD_WG", layer.wg_compute, [ig])
        wg_prev = wg


def _hybrid(b, layers, passes, *, ig_infix="", ig_comm_on_first=False, recompute=None):
    """HYBRID_DATA_MODEL / HYBRID_MODEL_DATA (Chakra), and with the same template HYBRID_CUSTOMIZED and the
    transformer types: FWD, FWDcomm per layer; backward IG, IGcomm, WG, WGcomm per layer."""
    n = len(layers)
    wgc_prev = {}
    igc0_prev = None
    for _ in range(passes):
        fwdc = {}
        for i, layer in enumerate(layers):
            deps = [wgc_prev.get(i), fwdc.get(i - 1)]
            if i == 0:
                deps.append(igc0_prev)
            f = b.comp(layer, "FWD", layer.fwd_compute, deps)
            fwdc[i] = b.comm(layer, "fwd", [f])
        last = fwdc[n - 1]
        igc = {}
        wg = {}
        wgc = {}
        for i in range(n - 1, -1, -1):
            layer = layers[i]
            deps = [last] if i == n - 1 else [wg[i + 1], igc[i + 1]]
            if recompute and i in recompute:
                # Forward-in-backward: recompute the forward pass from the checkpoint below layer i.
                for k in range(recompute[i], i):
                    rf = b.comp(layers[k], "FWD_RECOMPUTE", layers[k].fwd_compute, deps)
                    deps = [b.comm(layers[k], "fwd", [rf], name=f"{layers[k].name}_FWD_RECOMPUTE")]
            ig = b.comp(layer, "BWD_IG", layer.ig_compute, deps)
            if i != 0 or ig_comm_on_first:
                igc[i] = b.comm(layer, "ig", [ig], name=layer.name + ig_infix)
            wg[i] = b.comp(layer, "BWD_WG", layer.wg_compute, [ig])
            wgc[i] = b.comm(layer, "wg", [wg[i]])
        wgc_prev = wgc
        igc0_prev = igc.get(0)


def _hybrid_data_model(b, layers, passes):
    _hybrid(b, layers, passes, ig_infix="_IG_COMM_")


def _hybrid_model_data(b, layers, passes):
    _hybrid(b, layers, passes)


def _transformer(b, layers, passes):
    _hybrid(b, layers, passes, ig_comm_on_first=True)


def _transformer_fwd_in_bckwd(b, layers, passes):
    w = b.w
    recompute = {i: max(c for c in w.checkpoints if c <= i) for i in w.checkpoint_initiates}
    _hybrid(b, layers, passes, ig_comm_on_first=True, recompute=recompute)


def _dlrm(b, layers, passes):
    n = len(layers)
    last_bottom = b.w.last_bottom_layer
    wgc_prev = {}
    wg_prev = {}
    for _ in range(passes):
        fwd = {}
        fwdc = {}
        for i, layer in enumerate(layers):
            deps = [wgc_prev[i] if i in wgc_prev else wg_prev.get(i), fwd.get(i - 1)]
            if i == last_bottom:
                deps.append(fwdc[0])
            fwd[i] = b.comp(layer, "FWD", layer.fwd_compute, deps)
            if layer.fwd.word == "ALLTOALL":
                fwdc[i] = b.comm(layer, "fwd", [fwd[i]])
        last_fwd = fwd[n - 1]
        ig = {}
        igc0 = None
        wg = {}
        wgc = {}
        for i in range(n - 1, -1, -1):
            layer = layers[i]
            deps = [last_fwd] if i == n - 1 else [ig.get(i + 1), igc0 if i == 0 else None]
            wg[i] = b.comp(layer, "BWD_WG", layer.wg_compute, deps)
            if layer.wg.word != NONE_WORD:
                wgc[i] = b.comm(layer, "wg", [wg[i]])
            ig_node = None
            if i != 0:
                ig_node = ig[i] = b.comp(layer, "BWD_IG", layer.ig_compute, [wg[i]])
            if i == last_bottom + 1:
                igc0 = b.comm(layers[0], "ig", [ig_node])
        wgc_prev = wgc
        wg_prev = wg


def _distributed_inference(b, layers, passes):
    n = len(layers)
    prev_last = None
    for _ in range(passes):
        fwdc = {}
        for i, layer in enumerate(layers):
            f = b.comp(layer, "FWD", layer.fwd_compute, [fwdc[i - 1] if i else prev_last])
            fwdc[i] = b.comm(layer, "fwd", [f])
        prev_last = fwdc[n - 1]


def _customized(b, layers, passes):
    _hybrid(b, layers, passes)


_GRAPHS = {
    "MICRO": _micro,
    "DATA": _data,
    "MODEL": _model,
    "HYBRID_DATA_MODEL": _hybrid_data_model,
    "HYBRID_MODEL_DATA": _hybrid_model_data,
    "HYBRID_DLRM": _dlrm,
    "HYBRID_DLRM_ENHANCED": _dlrm,
    "HYBRID_TRANSFORMER": _transformer,
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": _transformer_fwd_in_bckwd,
    "HYBRID_CUSTOMIZED": _customized,
    "DISTRIBUTED_INFERENCE": _distributed_inference,
}


def finalize(nodes, *, elide=True):
    """Drop the collectives that move nothing (when ``elide``), rewire their dependants to their parents, and
    number the kept nodes in order. Returns the kept nodes."""
    kept = []
    for node in nodes:
        deps = []
        seen = set()
        for d in node.deps:
            for r in (d.resolved if d.elided else (d,)):
                if id(r) not in seen:
                    seen.add(id(r))
                    deps.append(r)
        node.resolved = deps
        if elide and node.moves_nothing:
            node.elided = True
            continue
        node.index = len(kept)
        kept.append(node)
    return kept


def rank_nodes(graph, *, style="astra-sim", first_id=0):
    """Chakra nodes (EtNode) of one rank from a finalized graph, ids from ``first_id``. Returns (nodes,
    pending) where ``pending`` lists (node, 'model'|'data') whose involved_dim awaits the network."""
    out = []
    pending = []
    for g in graph:
        deps = [first_id + d.index for d in g.resolved]
        name = g.name
        if g.type == T.COMP_NODE:
            out.append(make_node(first_id + g.index, name, T.COMP_NODE, data_deps=deps, duration_micros=g.duration))
            continue
        attrs = {"comm_type": COMM_WORDS.get(g.word, T.ALL_REDUCE), "comm_size": g.size}
        if style != "chakra":
            if isinstance(g.dims, tuple):
                attrs["involved_dim"] = list(g.dims)
        node = make_node(first_id + g.index, name, T.COMM_COLL_NODE, data_deps=deps, attrs=attrs)
        if style != "chakra" and not isinstance(g.dims, tuple):
            pending.append((node, g.dims))
        out.append(node)
    return out, pending


def text_metadata(workload, schema=CHAKRA_SCHEMA):
    """The GlobalMetadata Chakra's converter writes: no version; attrs ``schema`` and ``input_file``."""
    return make_metadata(version="", attrs={"schema": schema, "input_file": workload.text})


def convert_text(path, prefix, npus, *, num_passes=1, style="astra-sim", npus_per_dim=None, compute_scale=1,
                 comm_scale=1, keep_empty_comms=False, first_id=0, schema=CHAKRA_SCHEMA):
    """Convert a text workload into ``<prefix>.<r>.et`` for r in 0..npus-1. Returns a summary dict."""
    from .common import write_rank_files

    if style not in STYLES:
        raise ConfigError(f"--style must be one of {', '.join(STYLES)}, got {style!r}")
    if not isinstance(npus, int) or npus < 1:
        raise ConfigError(f"--npus must be a positive integer, got {npus!r}")
    if npus_per_dim is None:
        npus_per_dim = [npus]
    else:
        npus_per_dim = [int(x) for x in npus_per_dim]
        product = 1
        for x in npus_per_dim:
            if x < 1:
                raise ConfigError(f"--dims: every dimension needs at least 1 NPU, got {npus_per_dim}")
            product *= x
        if product != npus:
            raise ConfigError(f"--dims {npus_per_dim} multiply to {product} NPUs, but --npus is {npus}")
    workload = parse_text_file(path, compute_scale=compute_scale, comm_scale=comm_scale)
    boundary = None
    if workload.is_transformer and style != "chakra":
        boundary = model_parallel_boundary(workload.model_parallel_group, npus_per_dim, workload.path)
    graph = build_graph(workload, num_passes=num_passes, boundary=boundary, style=style)
    elide = style != "chakra" and not keep_empty_comms
    kept = finalize(graph, elide=elide)
    if not kept:
        raise WorkloadError(f"{workload.path}: the workload has no node left (every collective moves nothing and "
                            "there is no compute)")
    metadata = text_metadata(workload, schema)
    per_rank = []
    for rank in range(npus):
        base = first_id + rank * len(kept) if style == "chakra" else first_id
        nodes, _ = rank_nodes(kept, style=style, first_id=base)
        per_rank.append(nodes)
    paths = write_rank_files(prefix, metadata, per_rank)
    return {
        "parallelism": workload.parallelism,
        "layers": workload.num_layers,
        "passes": num_passes,
        "nodes_per_rank": len(kept),
        "left_out": len(graph) - len(kept),
        "boundary": boundary,
        "paths": paths,
    }
