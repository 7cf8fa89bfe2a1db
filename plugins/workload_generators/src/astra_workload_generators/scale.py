"""Replicating a data-parallel trace to another number of NPUs.

A trace is replicable when every rank's file is the same graph: same nodes in the same order with the same
types, names, durations, attributes (values and wire kinds) and dependencies, and the same GlobalMetadata. Node
ids may differ between ranks by a constant offset per rank (Chakra's text converter and generator run one id
counter across the rank files); that offset pattern is continued for the new ranks, so scaling a Chakra-converted
trace gives exactly the files the converter writes for the new size.

Not replicable (a clear error naming the rank and node): ranks that differ, point-to-point nodes (their peers
are rank-specific), communicator groups (``pg_name`` other than "" / "0", or process groups in a METADATA node's
inputs), which name specific ranks.
"""

from __future__ import annotations

import os
import re

from astra_sim.chakra import ChakraError, parse_et, types as T
from astra_sim.chakra.attrs import attrs_from_proto
from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.safeio import write_bytes_atomic

from .common import ensure_parent

__all__ = ["rank_files", "check_replicable", "scale_trace", "canonical_nodes"]


def rank_files(prefix, npus=None):
    """The files ``<prefix>.<r>.et``: r < ``npus`` when given, else every consecutive one from 0."""
    paths = []
    r = 0
    while npus is None or r < npus:
        path = f"{prefix}.{r}.et"
        if not os.path.isfile(path):
            if npus is not None:
                raise WorkloadError(f"{path} does not exist (--from-npus {npus} expects ranks 0..{npus - 1})")
            break
        paths.append(path)
        r += 1
    if not paths:
        raise WorkloadError(f"no trace at {prefix!r}: expected {prefix}.0.et, {prefix}.1.et, ...")
    return paths


def _read(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        trace = parse_et(data, path)
    except ChakraError as exc:
        raise WorkloadError(str(exc)) from None
    if trace.metadata is None:
        raise WorkloadError(f"{path}: the file is empty (no GlobalMetadata)")
    return data, trace


def canonical_nodes(nodes, *, names=True, drop_attrs=(), sort_deps=False):
    """A comparable form of a rank's nodes that does not depend on the id numbering: each node as (type, name,
    duration, inputs, attributes with kinds, data-dep positions, ctrl-dep positions), where a dependency is the
    position of the parent in the file (an absent parent stays as ``('absent', id - first id)``)."""
    position = {}
    for i, node in enumerate(nodes):
        position.setdefault(node.id, i)
    first = nodes[0].id if nodes else 0

    def dep(d):
        return position[d] if d in position else ("absent", d - first)

    out = []
    for node in nodes:
        kinds = dict(node._kinds or ())
        attrs = tuple((k, v, kinds.get(k)) for k, v in node.attrs.items() if k not in drop_attrs)
        data = [dep(d) for d in node.data_deps]
        ctrl = [dep(d) for d in node.ctrl_deps]
        if sort_deps:
            data, ctrl = sorted(data, key=repr), sorted(ctrl, key=repr)
        out.append((node.type, node.name if names else None, node.duration_micros, node.inputs_values, attrs,
                    tuple(data), tuple(ctrl)))
    return out


_FIELDS = ("type", "name", "duration_micros", "inputs.values", "attributes", "data_deps", "ctrl_deps")


def _rank_specific(path, rank, node):
    """Why ``node`` cannot be copied to another rank, or None."""
    if node.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE):
        peers = ", ".join(f"{k}={node.attrs[k]}" for k in ("comm_src", "comm_dst") if k in node.attrs)
        return (f"it is a {T.node_type_name(node.type)}{' (' + peers + ')' if peers else ''}: point-to-point "
                "peers are rank-specific")
    for key in ("comm_src", "comm_dst"):
        if key in node.attrs:
            return f"it has a rank-specific {key}={node.attrs[key]!r}"
    pg = node.attrs.get("pg_name")
    if pg not in (None, "", "0"):
        return f"it uses communicator group pg_name={pg!r}, whose ranks do not scale with the trace"
    if node.type == T.METADATA_NODE and node.inputs_values:
        return "it is a METADATA node declaring process groups (specific ranks)"
    return None


def check_replicable(prefix, npus=None):
    """Read every rank and check they are the same graph. Returns (paths, datas, traces, id_step) where
    ``id_step`` is the id offset from one rank to the next (0 when every rank has the same ids), or None when
    the ranks' ids follow no single offset (they are then all given rank 0's)."""
    paths = rank_files(prefix, npus)
    datas, traces = [], []
    for path in paths:
        data, trace = _read(path)
        datas.append(data)
        traces.append(trace)
    base = traces[0]
    for node in base.nodes:
        why = _rank_specific(paths[0], 0, node)
        if why:
            raise WorkloadError(f"{paths[0]}: not replicable: node {node.id} ({node.name!r}) of rank 0: {why}")
    base_meta = (base.metadata.version, attrs_from_proto(base.metadata.attr))
    base_canon = canonical_nodes(base.nodes)
    offsets = [0]
    for r in range(1, len(traces)):
        trace = traces[r]
        meta = (trace.metadata.version, attrs_from_proto(trace.metadata.attr))
        if meta != base_meta:
            raise WorkloadError(f"{paths[r]}: not replicable: rank {r}'s GlobalMetadata differs from rank 0's "
                                f"(version {meta[0]!r} vs {base_meta[0]!r}, attributes "
                                f"{sorted(meta[1][0])} vs {sorted(base_meta[1][0])})")
        if len(trace.nodes) != len(base.nodes):
            raise WorkloadError(f"{paths[r]}: not replicable: rank {r} has {len(trace.nodes)} nodes, rank 0 has "
                                f"{len(base.nodes)}")
        canon = canonical_nodes(trace.nodes)
        for pos, (a, b) in enumerate(zip(base_canon, canon)):
            if a != b:
                field = next(f for f, x, y in zip(_FIELDS, a, b) if x != y)
                n0, nr = base.nodes[pos], trace.nodes[pos]
                x, y = a[_FIELDS.index(field)], b[_FIELDS.index(field)]
                if field == "attributes":
                    x, y = _attr_diff(x, y)
                raise WorkloadError(
                    f"{paths[r]}: not replicable: rank {r} differs from rank 0 at node #{pos} (rank {r}: id "
                    f"{nr.id} {nr.name!r}; rank 0: id {n0.id} {n0.name!r}): {field} {y!r} vs {x!r} on rank 0")
        offsets.append(trace.nodes[0].id - base.nodes[0].id if trace.nodes else 0)
        if any(nr.id - n0.id != offsets[-1] for n0, nr in zip(base.nodes, trace.nodes)):
            offsets[-1] = None
    step = offsets[1] if len(offsets) > 1 else 0
    if step is None or any(o is None or o != r * step for r, o in enumerate(offsets)):
        step = None
    return paths, datas, traces, step


def _attr_diff(a, b):
    da = {k: (v, kind) for k, v, kind in a}
    db = {k: (v, kind) for k, v, kind in b}
    for key in list(da) + [k for k in db if k not in da]:
        if da.get(key) != db.get(key):
            return {key: da.get(key)}, {key: db.get(key)}
    return a, b  # same attributes in another order


def scale_trace(prefix, to_npus, out, *, from_npus=None, keep_names=False):
    """Write ``<out>.<r>.et`` for r < ``to_npus`` from the replicable trace ``prefix``. Node names containing
    ``<N>npus`` (ASTRA-sim's microbenchmark names) get the new count unless ``keep_names``. Returns a summary."""
    if not isinstance(to_npus, int) or to_npus < 1:
        raise ConfigError(f"--to-npus must be a positive integer, got {to_npus!r}")
    paths, datas, traces, step = check_replicable(prefix, from_npus)
    n = len(paths)
    pattern = re.compile(rf"(?<![0-9]){n}npus")
    base = traces[0]
    rename = not keep_names and any(pattern.search(node.name) for node in base.nodes)
    ensure_parent(out)
    written = []
    for s in range(to_npus):
        path = f"{out}.{s}.et"
        offset = (step or 0) * s
        if not offset and not rename:
            data = datas[0]
        else:
            trace = parse_et(datas[0], paths[0])
            for node in trace.nodes:
                node.id += offset
                node.data_deps = [d + offset for d in node.data_deps]
                node.ctrl_deps = [d + offset for d in node.ctrl_deps]
                if rename:
                    node.name = pattern.sub(f"{to_npus}npus", node.name)
            from astra_sim.chakra import encode_et

            data = encode_et(trace.metadata, trace.nodes)
        write_bytes_atomic(path, data)  # an OSError (a full disk): astra workload scale keeps the set elsewhere
        written.append(path)
    return {"from_npus": n, "to_npus": to_npus, "nodes_per_rank": len(base.nodes), "id_step": step,
            "renamed": rename, "paths": written}
