"""Each job's workload on disk, and the one combined workload of several placed jobs.

A job's workload is a generator spec (``llm:`` the options of ``astra workload llm``, ``micro:`` those of
``astra workload micro``) or Chakra traces (``chakra: PREFIX``, per-rank files or a compact workload, with
``comm_groups: GROUPS.json`` when its traces name groups the prefix does not carry).

The combined workload runs every placed job at once on the cluster's network: job ``j``'s rank ``r`` becomes
cluster GPU ``place[r]``; its sends and receives name cluster GPUs; each of its communicator groups becomes a
new group of the mapped members, and its collectives on the default (all-rank) group run on a group of its own
GPUs. GPUs no job holds get an empty trace."""

from __future__ import annotations

import copy
import json
import os

from astra_sim.errors import ConfigError

#: ``pg_name`` values that mean the default all-NPU group (as the kernel's workload layer reads them)
DEFAULT_PG_NAMES = ("", "0", None, 0)


class JobWorkload:
    """A job's traces: ``prefix`` (per-rank files or a compact workload), ``ranks``, ``comm_groups`` (a path or
    None) and ``summary`` (the generator's, or None)."""

    def __init__(self, prefix, ranks, comm_groups=None, summary=None):
        self.prefix = prefix
        self.ranks = ranks
        self.comm_groups = comm_groups
        self.summary = summary


def materialize(job, folder, base_dir, platform=None, run=None) -> JobWorkload:
    """Write (generators) or find (Chakra) ``job``'s workload; ``folder``: where generated traces go;
    ``base_dir``: what relative Chakra prefixes are relative to; ``platform``: the cluster's registered platform,
    which an LLM job is generated for (its GPU's kernels, or those of the GPU a ``gpu`` in the cluster's ``run``
    options puts in its place) unless the job names one."""
    from astra_sim.spec import workload_ranks

    kind, value = job.workload_kind, job.workload
    where = f"jobs.{job.name}.workload.{kind}"
    prefix = os.path.join(folder, job.name, "trace")
    if kind == "llm":
        from astra_workload_generators.llm import LlmSpec, generate_llm_workload

        spec = LlmSpec.from_mapping(value, where=where).for_platform(platform, run)
        summary = generate_llm_workload(spec, prefix)
        workload = JobWorkload(prefix, summary["npus"], _groups_of(prefix, None), summary)
    elif kind == "micro":
        from astra_workload_generators import generate_micro

        options = dict(value)
        options.setdefault("npus", job.gpus)
        summary = generate_micro(prefix, **options)
        workload = JobWorkload(prefix, summary["npus"], None, summary)
    else:
        prefix = value["prefix"]
        if not os.path.isabs(prefix):
            prefix = os.path.join(base_dir, prefix)
        ranks = workload_ranks(prefix)
        if ranks is None:
            raise ConfigError(f"{where}.prefix: no Chakra traces at {prefix!r} (expected {prefix}.0.et ... or "
                              f"{prefix}.workload.json)")
        groups = value.get("comm_groups")
        if groups is not None and not os.path.isabs(groups):
            groups = os.path.join(base_dir, groups)
        workload = JobWorkload(prefix, ranks, _groups_of(prefix, groups))
    if workload.ranks != job.gpus:
        raise ConfigError(f"jobs.{job.name}: gpus is {job.gpus} but its workload has {workload.ranks} ranks")
    return workload


def workload_key(job):
    """What makes two jobs' workloads the same: their generator options or traces, and their GPUs."""
    return json.dumps([job.workload_kind, job.workload, job.gpus], sort_keys=True, default=str)


def _groups_of(prefix, given):
    """The groups file of a workload: ``given``, else a compact workload's own, else ``PREFIX.groups.json``."""
    from astra_workload_compact import is_compact, read_compact_workload

    if given is not None:
        return given
    if is_compact(prefix):
        return read_compact_workload(prefix).comm_groups
    path = f"{prefix}.groups.json"
    return path if os.path.isfile(path) else None


class _RankReader:
    """A job's rank traces (``nodes(rank)``) and their metadata, each distinct file parsed once."""

    def __init__(self, workload):
        from astra_workload_compact import Relabeller, is_compact, read_compact_workload

        self.prefix = workload.prefix
        self.compact = read_compact_workload(self.prefix) if is_compact(self.prefix) else None
        self._traces = {}
        if self.compact is not None:
            groups = _read_groups(self.compact.comm_groups)
            self._relabeller = Relabeller(self.compact.symmetry, groups, self.compact.path)

    def _read(self, path):
        from astra_sim.chakra import read_et

        trace = self._traces.get(path)
        if trace is None:
            trace = self._traces[path] = read_et(path)
        return trace

    def trace(self, rank):
        """``(metadata, nodes)`` of ``rank``."""
        if self.compact is None:
            trace = self._read(f"{self.prefix}.{rank}.et")
            return trace.metadata, trace.nodes
        symmetry = self.compact.symmetry
        trace = self._read(self.compact.traces[symmetry.representative(rank)])
        return trace.metadata, self._relabeller.nodes_for(trace.nodes, symmetry.offsets(rank))


def _read_groups(path):
    from astra_sim.config import parse_comm_groups

    return (parse_comm_groups(path) or {}) if path else {}


def write_combined(prefix, total_gpus, placed):
    """Write the combined workload of ``placed`` (``[(JobWorkload, [cluster GPU per job rank])]``) for a
    cluster of ``total_gpus`` GPUs: ``PREFIX.<gpu>.et`` for every GPU and ``PREFIX.groups.json`` (each written
    atomically). Returns ``{"prefix", "comm_groups", "groups": [{job group id: cluster group id} per job],
    "worlds": [the cluster group of each job's default group, None for a job on every GPU]}``."""
    from astra_sim.chakra import make_metadata, write_et
    from astra_sim.chakra import types as T

    rank_of = {}  # cluster GPU -> (job index, job rank)
    for index, (_workload, gpus) in enumerate(placed):
        for rank, gpu in enumerate(gpus):
            if not 0 <= gpu < total_gpus:
                raise ConfigError(f"placement: GPU {gpu} is not in the cluster (GPUs 0..{total_gpus - 1})")
            if gpu in rank_of:
                raise ConfigError(f"placement: GPU {gpu} is given twice")
            rank_of[gpu] = (index, rank)
    groups_out, maps, worlds = {}, [], []
    next_id = 1
    for workload, gpus in placed:
        mapping = {}
        for group_id, members in sorted(_read_groups(workload.comm_groups).items()):
            if any(not 0 <= m < len(gpus) for m in members):
                raise ConfigError(f"{workload.comm_groups}: group {group_id} names ranks outside 0..{len(gpus) - 1}")
            mapping[group_id] = next_id
            groups_out[next_id] = [gpus[m] for m in members]
            next_id += 1
        if len(gpus) == total_gpus:
            worlds.append(None)  # the job holds every GPU: its default group is the cluster's
        else:
            worlds.append(next_id)
            groups_out[next_id] = list(gpus)
            next_id += 1
        maps.append(mapping)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    readers = [_RankReader(workload) for workload, _ in placed]
    empty = make_metadata()
    for gpu in range(total_gpus):
        if gpu not in rank_of:
            write_et(f"{prefix}.{gpu}.et", empty, [])
            continue
        index, rank = rank_of[gpu]
        metadata, nodes = readers[index].trace(rank)
        gpus = placed[index][1]
        out = [_moved(node, gpus, maps[index], worlds[index], T) for node in nodes]
        write_et(f"{prefix}.{gpu}.et", metadata, out)
    groups_path = f"{prefix}.groups.json"
    from astra_sim.safeio import write_text_atomic

    write_text_atomic(groups_path, json.dumps({str(k): v for k, v in groups_out.items()}))
    return {"prefix": prefix, "comm_groups": groups_path, "groups": maps, "worlds": worlds}


def _moved(node, gpus, mapping, world, T):
    """``node`` as it runs on the cluster: peers are cluster GPUs, groups are cluster groups."""
    if node.type == T.METADATA_NODE and node.inputs_values:
        raise ConfigError(f"{node.path}: node {node.id} declares PyTorch process groups (a METADATA node); "
                          "astra cluster needs the groups in a groups file (comm_groups:)")
    attrs = node.attrs
    is_comm = node.type in (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE)
    if not is_comm and "comm_src" not in attrs and "comm_dst" not in attrs:
        return node
    new = copy.copy(node)
    new.attrs = dict(attrs)
    for key in ("comm_src", "comm_dst"):
        value = attrs.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(gpus):
                raise ConfigError(f"{node.path}: node {node.id}: {key} {value} is not a rank of the job "
                                  f"(0..{len(gpus) - 1})")
            new.set_attr(key, gpus[value])
    if node.type == T.COMM_COLL_NODE:
        pg = attrs.get("pg_name")
        if pg in DEFAULT_PG_NAMES:
            if world is not None:
                new.set_attr("pg_name", str(world))
        else:
            try:
                image = mapping[int(pg)]
            except (TypeError, ValueError, KeyError):
                raise ConfigError(f"{node.path}: node {node.id}: pg_name {pg!r} is not a group of the job's "
                                  "groups file") from None
            new.set_attr("pg_name", str(image) if isinstance(pg, str) else image)
    return new
