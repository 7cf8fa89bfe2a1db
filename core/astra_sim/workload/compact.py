"""The compact workload: each distinct trace once, plus a rank map (``PREFIX.workload.json``).

A job of thousands of ranks repeats a few traces: every data-parallel replica and every tensor-parallel
position does what the others do, with its own peers and communicators. Per-rank files would be tens of
gigabytes; the compact form stores one Chakra ET file per *class* of ranks and a manifest that says how
every rank's trace follows from its class's. ``astra run --workload-configuration PREFIX`` reads it as it
reads per-rank files (``PREFIX.<rank>.et``); ``astra workload expand PREFIX -o OUT`` writes the per-rank
files for tools that need them. The format is documented in ``docs/compact-workload.md``.

Manifest (JSON)::

    {"format": "astra-sim-compact-workload", "version": 1, "npus": 256,
     "symmetry": [{"stride": 1, "radix": 8, "block": 8}, {"stride": 8, "radix": 16, "block": 16}],
     "classes": [{"representative": 0, "trace": "g.class0.et"},
                 {"representative": 128, "trace": "g.class1.et"}],
     "comm_groups": "g.groups.json"}

``symmetry`` lists block shifts of the rank number (:class:`astra_sim.symmetry.BlockShift`): shift ``k``
moves the digit ``(rank // stride) % radix`` one place on, cyclically inside blocks of ``block``
consecutive values; the digits of different shifts do not overlap. Two ranks are in one class when shifts
map one to the other; the class's representative is its smallest rank (every shifted digit at its block's
start). ``classes`` gives each representative's trace (a path relative to the manifest). Rank ``q`` of the
class of ``r`` runs ``r``'s trace relabelled by the shifts ``h`` that map ``r`` to ``q``: every
``comm_src`` / ``comm_dst`` rank ``x`` becomes ``h(x)``, and every ``pg_name`` naming a communicator group
becomes the group whose members are ``h`` of its members (the first such group in id order, the second
for the second group with the same members, and so on). ``comm_groups``, optional, names the groups file
(relative to the manifest) the traces' ``pg_name`` s refer to; ``astra run`` uses it when no
``--comm-group-configuration`` is given.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from astra_sim.chakra import EtNode
from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.limits import MAX_TOTAL_NPUS
from astra_sim.safeio import brief, load_json, write_bytes_atomic
from astra_sim.symmetry import BlockShift, RankSymmetry, group_key

FORMAT = "astra-sim-compact-workload"
VERSION = 1
MANIFEST_SUFFIX = ".workload.json"
#: Attributes that name ranks or communicators: the ones a relabelling changes.
RANK_ATTRS = ("comm_src", "comm_dst")


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


def is_compact(prefix):
    return os.path.isfile(manifest_path(prefix))


def read_compact_workload(prefix):
    """Read and check ``PREFIX.workload.json``; every problem is a WorkloadError naming the file and key."""
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


class Relabeller:
    """Turns a class's trace into the trace of another member of the class (see the module docstring)."""

    def __init__(self, symmetry, groups, where):
        self.symmetry = symmetry
        self.groups = groups or {}
        self.where = where
        by_members = {}
        for group_id in sorted(self.groups):
            by_members.setdefault(group_key(self.groups[group_id], "set"), []).append(group_id)
        self._by_members = by_members
        self._images = {}
        self._cycles = {}  # (shift index, group id) -> (the group's cycle under that shift, its place in it)

    def group_image(self, group_id, offsets):
        """The id of the group holding the images of ``group_id``'s members under ``offsets``. The shifts of
        different digits commute, so the image is taken one digit at a time, along each group's cycle under
        that digit's shift (built once: a run's images cost its groups' members once per shift, not once per
        rank)."""
        key = (group_id, offsets)
        image = self._images.get(key)
        if image is None:
            image = group_id
            for index, steps in enumerate(offsets):
                if steps:
                    image = self._along_cycle(image, index, steps)
            self._images[key] = image
        return image

    def _along_cycle(self, group_id, index, steps):
        found = self._cycles.get((index, group_id))
        if found is None:
            one_step = tuple(1 if i == index else 0 for i in range(len(self.symmetry.shifts)))
            cycle = [group_id]
            while True:
                nxt = self._image_now(cycle[-1], one_step)
                if nxt == group_id:
                    break
                cycle.append(nxt)
            for position, member in enumerate(cycle):
                self._cycles[(index, member)] = (cycle, position)
            found = self._cycles[(index, group_id)]
        cycle, position = found
        return cycle[(position + steps) % len(cycle)]

    def _image_now(self, group_id, offsets):
        members = self.groups.get(group_id)
        if members is None:
            raise WorkloadError(f"{self.where}: pg_name {group_id} is not a communicator group of the run")
        moved = group_key([self.symmetry.moved(m, offsets) for m in members], "set")
        same = self._by_members[group_key(members, "set")]
        targets = self._by_members.get(moved)
        if targets is None or len(targets) != len(same):
            raise WorkloadError(f"{self.where}: communicator group {group_id}, relabelled for another rank of "
                                "its class, is not a communicator group (the groups file does not hold the "
                                "images of its members)")
        return targets[same.index(group_id)]

    def nodes_for(self, nodes, offsets):
        """The nodes of the rank at ``offsets`` from the representative (nodes without ranks are shared)."""
        if not any(offsets):
            return nodes
        moved = self.symmetry.moved
        out = []
        for node in nodes:
            attrs = node.attrs
            if "comm_src" not in attrs and "comm_dst" not in attrs and "pg_name" not in attrs:
                out.append(node)
                continue
            new_attrs = dict(attrs)
            for key in RANK_ATTRS:
                value = attrs.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    new_attrs[key] = moved(value, offsets)
            pg = attrs.get("pg_name")
            if pg not in (None, "", "0", 0):
                try:
                    group_id = int(pg)
                except (TypeError, ValueError):
                    group_id = None
                if group_id is not None:
                    image = self.group_image(group_id, offsets)
                    new_attrs["pg_name"] = str(image) if isinstance(pg, str) else image
            out.append(EtNode(node.id, node.name, node.type, node.ctrl_deps, node.data_deps, node.duration_micros,
                              node.inputs_values, new_attrs, node.path, node._kinds, None, node.inputs_shapes,
                              node.inputs_types))
        return out


def _load_groups(compact):
    if compact.comm_groups is None:
        return {}
    from astra_sim.config import parse_comm_groups

    return parse_comm_groups(compact.comm_groups) or {}


def read_rank_nodes(prefix, rank):
    """The nodes rank ``rank`` runs, from per-rank files (``PREFIX.<rank>.et``) or a compact workload."""
    from astra_sim.chakra import read_et

    if not is_compact(prefix):
        return read_et(f"{prefix}.{rank}.et").nodes
    compact = read_compact_workload(prefix)
    if not 0 <= rank < compact.npus:
        raise WorkloadError(f"{compact.path}: no rank {rank} (the workload has {compact.npus} NPUs)")
    rep = compact.symmetry.representative(rank)
    nodes = read_et(compact.traces[rep]).nodes
    relabeller = Relabeller(compact.symmetry, _load_groups(compact), compact.path)
    return relabeller.nodes_for(nodes, compact.symmetry.offsets(rank))


def roles_path(groups_path):
    """The role names of a groups file live beside it: ``X.groups.json`` -> ``X.groups.roles.json``."""
    path = str(groups_path)
    return (path[:-5] if path.endswith(".json") else path) + ".roles.json"


def expand_workload(prefix, out_prefix):
    """Write ``OUT.<rank>.et`` for every rank of the compact workload ``prefix`` (and ``OUT.groups.json``,
    with its roles file ``OUT.groups.roles.json`` when there is one,
    when it names a groups file); returns the number of files written."""
    from astra_sim.chakra import read_et
    from astra_sim.chakra.writer import encode_et

    compact = read_compact_workload(prefix)
    relabeller = Relabeller(compact.symmetry, _load_groups(compact), compact.path)
    folder = os.path.dirname(os.path.abspath(str(out_prefix)))
    os.makedirs(folder, exist_ok=True)
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


def workload_ranks(prefix):
    """How many ranks the workload at ``prefix`` has: a compact workload's ``npus``, else the per-rank Chakra files
    ``<prefix>.0.et``, ``<prefix>.1.et``, ... counted; None when neither is there (another format, or a typo: the
    run itself then says what is missing)."""
    if is_compact(prefix):
        return read_compact_workload(prefix).npus
    count = 0
    while os.path.exists(f"{prefix}.{count}.et"):
        count += 1
    return count or None
