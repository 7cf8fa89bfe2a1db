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


#: whether an ``llm:`` job's workload is generated in memory (issue 37); False: written and parsed back (the same
#: combined traces, byte for byte; for the tests)
HOLD_LLM_WORKLOADS = True


class JobWorkload:
    """A job's traces: ``prefix`` (per-rank files or a compact workload), ``ranks``, ``comm_groups`` (a path or
    None) and ``summary`` (the generator's, or None). Its traces are read once, by the first combined workload that
    places it (they are not to change after)."""

    def __init__(self, prefix, ranks, comm_groups=None, summary=None):
        self.prefix = prefix
        self.ranks = ranks
        self.comm_groups = comm_groups
        self.summary = summary
        self.reader = None  # its _RankReader, made by the first write_combined that places it


def materialize(job, folder, base_dir, platform=None, run=None, hold=None) -> JobWorkload:
    """Write (generators) or find (Chakra) ``job``'s workload; ``folder``: where generated traces go;
    ``base_dir``: what relative Chakra prefixes are relative to; ``platform``: the cluster's registered platform,
    which an LLM job is generated for (its GPU's kernels, or those of the GPU a ``gpu`` in the cluster's ``run``
    options puts in its place) unless the job names one. ``hold``: whether an LLM job is held in memory rather than
    written (None: :data:`HOLD_LLM_WORKLOADS`; False where its traces are to be kept)."""
    from astra_sim.spec import workload_ranks

    kind, value = job.workload_kind, job.workload
    where = f"jobs.{job.name}.workload.{kind}"
    prefix = os.path.join(folder, job.name, "trace")
    if kind == "llm":
        from astra_workload_generators.llm import LlmSpec, generate_llm_workload

        spec = LlmSpec.from_mapping(value, where=where).for_platform(platform, run)
        # held in memory (issue 37): the combined workloads are written from its nodes in this process, with no
        # encode and parse of the job's own traces
        summary = generate_llm_workload(spec, prefix, in_memory=HOLD_LLM_WORKLOADS if hold is None else hold)
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
    """A job's rank traces (``trace(rank)``: metadata and nodes), each distinct file read once, and the frame
    (length prefix and body) ``write_et`` writes for each of their nodes, encoded once (``frame(node)``)."""

    def __init__(self, workload):
        from astra_workload_compact import Relabeller, is_compact, read_compact_workload

        self.prefix = workload.prefix
        self.compact = read_compact_workload(self.prefix) if is_compact(self.prefix) else None
        self._traces = {}
        self._frames = {}  # id(node) -> its frame, for the nodes of self._traces (kept alive there: ids stay theirs)
        if self.compact is not None:
            groups = _read_groups(self.compact.comm_groups)
            self._relabeller = Relabeller(self.compact.symmetry, groups, self.compact.path)

    def _read(self, path):
        trace = self._traces.get(path)
        if trace is None:
            trace = self._traces[path] = _read_trace(path)
            self._frames.update((id(node), None) for node in trace[1])
        return trace

    def trace(self, rank):
        """``(metadata, nodes)`` of ``rank``."""
        if self.compact is None:
            return self._read(f"{self.prefix}.{rank}.et")
        symmetry = self.compact.symmetry
        metadata, nodes = self._read(self.compact.traces[symmetry.representative(rank)])
        return metadata, self._relabeller.nodes_for(nodes, symmetry.offsets(rank))

    def frame(self, node):
        """The frame of ``node``: one of this job's own nodes (unchanged for the rank it runs on) encoded once,
        any other (a rank's or the cluster's relabelled copy) each time."""
        key = id(node)
        if key not in self._frames:
            return node_frame(node)
        found = self._frames[key]
        if found is None:
            found = self._frames[key] = node_frame(node)
        return found


def _read_trace(path):
    """``(GlobalMetadata, nodes)`` of a trace file: parsed with each node's bytes (``write_et`` writes an unchanged
    node as it was), or, for a trace this process generated and holds (an ``llm:`` job, issue 37), its held nodes
    (what parsing would give; the generator's encoding is canonical, so they are written the same) and the
    GlobalMetadata its file keeps."""
    from astra_sim.chakra import ChakraError, parse_et, read_et
    from astra_workload_compact import trace_nodes

    try:
        trace = read_et(path)
        return trace.metadata, trace.nodes
    except ChakraError:
        nodes = trace_nodes(path)  # held here; else the reader's error (or where the trace is held) again
    with open(path, "rb") as handle:
        data = handle.read()
    length, start = _varint(data)
    return parse_et(data[:start + length], path).metadata, nodes


def _varint(data):
    """``(value, position after it)`` of the varint that starts ``data`` (a frame's length prefix)."""
    value = shift = 0
    for i, byte in enumerate(data[:10]):
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i + 1
    raise ConfigError("a trace file's first frame has no valid length prefix")


_EMPTY_HEAD = []  # [(GlobalMetadata, its frame)] of the empty metadata node_frame encodes beside a node


def node_frame(node):
    """The frame (length prefix and body) :func:`astra_sim.chakra.write_et` writes for ``node``."""
    from astra_sim.chakra import encode_et, make_metadata

    if not _EMPTY_HEAD:
        empty = make_metadata()
        _EMPTY_HEAD.append((empty, encode_et(empty, [])))
    empty, head = _EMPTY_HEAD[0]
    return encode_et(empty, [node])[len(head):]


def _read_groups(path):
    from astra_sim.config import parse_comm_groups

    return (parse_comm_groups(path) or {}) if path else {}


def write_combined(prefix, total_gpus, placed):
    """Write the combined workload of ``placed`` (``[(JobWorkload, [cluster GPU per job rank])]``) for a
    cluster of ``total_gpus`` GPUs: ``PREFIX.<gpu>.et`` for every GPU and ``PREFIX.groups.json`` (each written
    atomically). Returns ``{"prefix", "comm_groups", "groups": [{job group id: cluster group id} per job],
    "worlds": [the cluster group of each job's default group, None for a job on every GPU]}``."""
    from astra_sim.chakra import ChakraError, encode_et, make_metadata, write_et
    from astra_sim.chakra import types as T
    from astra_sim.safeio import write_bytes_atomic

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
    readers = []
    for workload, _ in placed:
        if workload.reader is None:
            workload.reader = _RankReader(workload)
        readers.append(workload.reader)
    empty = make_metadata()
    for gpu in range(total_gpus):
        path = f"{prefix}.{gpu}.et"
        if gpu not in rank_of:
            write_et(path, empty, [])
            continue
        index, rank = rank_of[gpu]
        metadata, nodes = readers[index].trace(rank)
        gpus = placed[index][1]
        out = [_moved(node, gpus, maps[index], worlds[index], T) for node in nodes]
        if metadata is None:  # (an empty trace file: write_et's rules for it)
            write_et(path, metadata, out)
            continue
        # write_et's bytes, the job's own nodes framed once for every rank and step that runs them
        frame = readers[index].frame
        chunks = [encode_et(metadata, [])]
        chunks.extend(frame(node) for node in out)
        try:
            write_bytes_atomic(path, b"".join(chunks))
        except OSError as exc:
            raise ChakraError(f"{path}: cannot write Chakra ET file: {exc.strerror or exc}", path=path) from None
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
