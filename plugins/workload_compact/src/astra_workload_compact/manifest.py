"""The manifest of a compact workload, ``PREFIX.workload.json``: reading it (every problem a WorkloadError naming the
file and key) and writing it. The format is documented in ``docs/compact-workload.md`` and in this package's
docstring."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.limits import MAX_TOTAL_NPUS
from astra_sim.safeio import brief, load_json, write_bytes_atomic

# (the symmetry and the relabeller load when a manifest is read: every run asks whether its workload is compact)

FORMAT = "astra-sim-compact-workload"
VERSION = 1
MANIFEST_SUFFIX = ".workload.json"


def manifest_path(prefix):
    return f"{prefix}{MANIFEST_SUFFIX}"


@dataclass
class CompactWorkload:
    """A read manifest: ``traces`` maps each class representative to its trace file."""

    path: str
    npus: int
    symmetry: RankSymmetry
    traces: dict
    comm_groups: str | None

    def relabeller(self, groups):
        """The :class:`~astra_workload_compact.relabel.Relabeller` that turns a class trace into another rank's,
        with communicator ids mapped through ``groups`` (``{id: [NPU, ...]}``: the run's groups)."""
        from astra_workload_compact.relabel import Relabeller

        return Relabeller(self.symmetry, groups, self.path)


def is_compact(prefix):
    return os.path.isfile(manifest_path(prefix))


def read_compact_workload(prefix):
    """Read and check ``PREFIX.workload.json``; every problem is a WorkloadError naming the file and key."""
    from astra_folding.symmetry import BlockShift, RankSymmetry

    path = manifest_path(prefix)
    try:
        data = load_json(path, "compact workload manifest")
    except ConfigError as exc:
        raise WorkloadError(str(exc)) from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{path}: the manifest must be a JSON object")
    if data.get("format") != FORMAT:
        raise WorkloadError(f"{path}: key 'format' must be {FORMAT!r}, got {brief(data.get('format'))}")
    if data.get("version") != VERSION:
        raise WorkloadError(f"{path}: key 'version' must be {VERSION} (this astra-sim-py reads version {VERSION}), "
                            f"got {brief(data.get('version'))}")
    npus = _positive_int(path, "npus", data.get("npus"))
    if npus > MAX_TOTAL_NPUS:
        raise WorkloadError(f"{path}: key 'npus' must be at most {MAX_TOTAL_NPUS:,}, got {npus:,}")
    shifts = data.get("symmetry", [])
    if not isinstance(shifts, list):
        raise WorkloadError(f"{path}: key 'symmetry' must be a list of {{stride, radix, block}}, got {brief(shifts)}")
    parsed = []
    for i, item in enumerate(shifts):
        where = f"symmetry[{i}]"
        if not isinstance(item, dict) or set(item) != {"stride", "radix", "block"}:
            raise WorkloadError(f"{path}: key '{where}' must be an object with exactly stride, radix and block, "
                                f"got {brief(item)}")
        stride, radix, block = (_positive_int(path, f"{where}.{k}", item[k]) for k in ("stride", "radix", "block"))
        if radix % block:
            raise WorkloadError(f"{path}: key '{where}.block' ({block}) must divide radix ({radix})")
        if npus % (stride * radix):
            raise WorkloadError(f"{path}: key '{where}': the digit (rank // {stride}) % {radix} must cycle evenly "
                                f"over the {npus} NPUs (npus must be a multiple of stride x radix)")
        parsed.append(BlockShift(stride, radix, block))
    parsed.sort(key=lambda s: s.stride)
    for low, high in zip(parsed, parsed[1:]):
        if high.stride % (low.stride * low.radix):
            raise WorkloadError(f"{path}: key 'symmetry': digits overlap (stride {low.stride} radix {low.radix} "
                                f"and stride {high.stride}); each shift needs its own digit of the rank number")
    symmetry = RankSymmetry(parsed)
    classes = data.get("classes")
    if not isinstance(classes, list) or not classes:
        raise WorkloadError(f"{path}: key 'classes' must be a non-empty list of {{representative, trace}}")
    base = os.path.dirname(os.path.abspath(path))
    traces = {}
    for i, item in enumerate(classes):
        where = f"classes[{i}]"
        if not isinstance(item, dict) or set(item) != {"representative", "trace"}:
            raise WorkloadError(f"{path}: key '{where}' must be an object with exactly representative and trace, "
                                f"got {brief(item)}")
        rep = item["representative"]
        if isinstance(rep, bool) or not isinstance(rep, int) or not 0 <= rep < npus:
            raise WorkloadError(f"{path}: key '{where}.representative' must be a rank 0..{npus - 1}, got {brief(rep)}")
        if not symmetry.is_representative(rep):
            raise WorkloadError(f"{path}: key '{where}.representative': rank {rep} is not the smallest rank of its "
                                f"class (that is rank {symmetry.representative(rep)})")
        if rep in traces:
            raise WorkloadError(f"{path}: key '{where}.representative': rank {rep} is listed twice")
        trace = item["trace"]
        if not isinstance(trace, str) or not trace:
            raise WorkloadError(f"{path}: key '{where}.trace' must be a file name, got {brief(trace)}")
        traces[rep] = trace if os.path.isabs(trace) else os.path.join(base, trace)
    wanted = npus // symmetry.order
    if len(traces) != wanted:
        missing = next(r for r in range(npus) if symmetry.is_representative(r) and r not in traces)
        raise WorkloadError(f"{path}: key 'classes' lists {len(traces)} classes but the symmetry makes {wanted} "
                            f"(no trace for the class of rank {missing})")
    groups = data.get("comm_groups")
    if groups is not None:
        if not isinstance(groups, str) or not groups:
            raise WorkloadError(f"{path}: key 'comm_groups' must be a file name, got {brief(groups)}")
        groups = groups if os.path.isabs(groups) else os.path.join(base, groups)
    unknown = sorted(set(data) - {"format", "version", "npus", "symmetry", "classes", "comm_groups", "generator"})
    if unknown:
        raise WorkloadError(f"{path}: unknown key {brief(unknown[0])}; allowed: format, version, npus, symmetry, "
                            "classes, comm_groups, generator")
    return CompactWorkload(path, npus, symmetry, traces, groups)


def _positive_int(path, key, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise WorkloadError(f"{path}: key {key!r} must be a positive integer, got {brief(value)}")
    return value


def write_compact_workload(prefix, npus, symmetry, classes, *, comm_groups=None, generator=None):
    """Write ``PREFIX.class<i>.et`` (one per class) and ``PREFIX.workload.json``.

    ``symmetry``: :class:`BlockShift` s; ``classes``: ``(representative rank, trace bytes)`` in order;
    ``comm_groups``: the groups file the traces refer to. Each file is written under a temporary name and
    renamed, so a killed run leaves no half-written file. Returns the manifest's path."""
    prefix = str(prefix)
    base = os.path.dirname(os.path.abspath(prefix))
    entries = []
    for i, (rep, data) in enumerate(classes):
        name = f"{prefix}.class{i}.et"
        write_bytes_atomic(name, data)
        entries.append({"representative": rep, "trace": os.path.relpath(os.path.abspath(name), base)})
    manifest = {"format": FORMAT, "version": VERSION, "npus": npus,
                "symmetry": [s.describe() for s in symmetry], "classes": entries}
    if comm_groups is not None:
        manifest["comm_groups"] = os.path.relpath(os.path.abspath(comm_groups), base)
    if generator is not None:
        manifest["generator"] = generator
    path = manifest_path(prefix)
    write_bytes_atomic(path, (json.dumps(manifest, indent=1) + "\n").encode())
    return path


def roles_path(groups_path):
    """The role names of a groups file live beside it: ``X.groups.json`` -> ``X.groups.roles.json``."""
    path = str(groups_path)
    return (path[:-5] if path.endswith(".json") else path) + ".roles.json"
