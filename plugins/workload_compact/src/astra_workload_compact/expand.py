"""One rank's nodes from a compact workload (:func:`read_rank_nodes`), and every rank's as per-rank files
(:func:`expand_workload`, ``astra workload expand``)."""

from __future__ import annotations

import os

from astra_sim.errors import WorkloadError
from astra_sim.safeio import write_bytes_atomic

from astra_workload_compact.manifest import is_compact, read_compact_workload, roles_path
from astra_workload_compact.memory import ensure_written


def _load_groups(compact):
    if compact.comm_groups is None:
        return {}
    from astra_sim.config import parse_comm_groups

    return parse_comm_groups(compact.comm_groups) or {}


def read_rank_nodes(prefix, rank):
    """The nodes rank ``rank`` runs, from per-rank files (``PREFIX.<rank>.et``) or a compact workload (relabelled
    with the manifest's own groups file)."""
    from astra_sim.chakra import read_et

    if not is_compact(prefix):
        return read_et(f"{prefix}.{rank}.et").nodes
    compact = read_compact_workload(prefix)
    if not 0 <= rank < compact.npus:
        raise WorkloadError(f"{compact.path}: no rank {rank} (the workload has {compact.npus} NPUs)")
    rep = compact.symmetry.representative(rank)
    ensure_written(compact.traces[rep])  # (a trace held in memory: its file first)
    nodes = read_et(compact.traces[rep]).nodes
    return compact.relabeller(_load_groups(compact)).nodes_for(nodes, compact.symmetry.offsets(rank))


def expand_workload(prefix, out_prefix):
    """Write ``OUT.<rank>.et`` for every rank of the compact workload ``prefix`` (and, when it names a groups file,
    ``OUT.groups.json`` with its roles file ``OUT.groups.roles.json`` when there is one); returns the number of rank
    files written."""
    from astra_sim.chakra import read_et
    from astra_sim.chakra.writer import encode_et

    compact = read_compact_workload(prefix)
    relabeller = compact.relabeller(_load_groups(compact))
    folder = os.path.dirname(os.path.abspath(str(out_prefix)))
    os.makedirs(folder, exist_ok=True)
    for path in compact.traces.values():  # (traces held in memory: their files first)
        ensure_written(path)
    traces = {rep: read_et(path) for rep, path in compact.traces.items()}
    for rank in range(compact.npus):
        trace = traces[compact.symmetry.representative(rank)]
        nodes = relabeller.nodes_for(trace.nodes, compact.symmetry.offsets(rank))
        write_bytes_atomic(f"{out_prefix}.{rank}.et", encode_et(trace.metadata, nodes))
    if compact.comm_groups is not None:
        with open(compact.comm_groups, "rb") as handle:
            write_bytes_atomic(f"{out_prefix}.groups.json", handle.read())
        roles = roles_path(compact.comm_groups)
        if os.path.isfile(roles):  # the groups' role names (tp, dp, ...) travel with them
            with open(roles, "rb") as handle:
                write_bytes_atomic(roles_path(f"{out_prefix}.groups.json"), handle.read())
    return compact.npus
