"""The kernel's own plugin: Chakra traces, replay/roofline compute, no remote memory.

The native collective algorithms are the collectives_native plugin (plugins/collectives_native)."""

from __future__ import annotations

import hashlib
import os

from astra_sim import hookimpl
from astra_sim.compute import ReplayModel, RooflineModel
from astra_sim.errors import WorkloadError
from astra_sim.workload.compact import is_compact, read_compact_workload


class _ParsedTraces:
    """Parsed trace files kept between runs of one process (a sweep runs many points on one workload):
    ``(path, size, mtime) -> nodes``, least recently used first out, at most ``MAX_NODES`` nodes held.
    Runs only read nodes, never change them."""

    MAX_NODES = 1_000_000

    def __init__(self):
        from collections import OrderedDict

        self._entries = OrderedDict()
        self._nodes = 0
        self.hits = 0

    @staticmethod
    def key(path):
        try:
            info = os.stat(path)
        except OSError:
            return None
        return (os.path.realpath(path), info.st_size, info.st_mtime_ns)

    def get(self, key):
        nodes = self._entries.get(key) if key is not None else None
        if nodes is not None:
            self._entries.move_to_end(key)
            self.hits += 1
        return nodes

    def put(self, key, nodes):
        if key is None or len(nodes) > self.MAX_NODES:
            return
        self._entries[key] = nodes
        self._nodes += len(nodes)
        while self._nodes > self.MAX_NODES:
            _, old = self._entries.popitem(last=False)
            self._nodes -= len(old)


PARSED_TRACES = _ParsedTraces()


class ChakraFormat:
    """Chakra ET protobuf traces: rank r reads ``<prefix>.<r>.et``.

    One instance serves one simulation (the registry is built per run)."""

    def __init__(self):
        self._last_read = None  # (path, bytes) read by rank_digest, parsed by the load_rank that follows
        self._shared_nodes = {}  # serialized node -> EtNode, across the ranks of the workload (parse_et)

    def matches(self, prefix):
        return os.path.exists(f"{prefix}.0.et") or is_compact(prefix)

    def compact(self, prefix):
        """The compact workload ``PREFIX.workload.json`` (each distinct trace once and a rank map), or None
        when the workload is per-rank files."""
        return read_compact_workload(prefix) if is_compact(prefix) else None

    def load_trace(self, path):
        """The nodes of one trace file (a compact workload's class trace)."""
        from astra_sim.chakra import ChakraError, parse_et

        if not os.path.exists(path):
            raise WorkloadError(f"workload file {path} does not exist")
        key = PARSED_TRACES.key(path)
        cached = PARSED_TRACES.get(key)
        if cached is not None:
            return cached
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            trace = parse_et(data, path, keep_raw=False, shared=self._shared_nodes)
        except ChakraError as exc:
            raise WorkloadError(str(exc)) from None
        except OSError as exc:
            raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if trace.metadata is None and not trace.nodes:
            raise WorkloadError(f"{path}: the file is empty (no GlobalMetadata, no nodes)")
        PARSED_TRACES.put(key, trace.nodes)
        return trace.nodes

    def rank_digest(self, prefix, rank):
        """``(path, hash of the file's bytes)``: ranks whose files are byte-identical share one parse.
        The bytes are kept for ``load_rank`` of the same file, so each file is read once."""
        path = f"{prefix}.{rank}.et"
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None  # load_rank reports it
        self._last_read = (path, data)
        return path, hashlib.sha256(data).digest()

    def ranks_beyond(self, prefix, npus):
        """How many rank files follow the network's last rank (``<prefix>.<npus>.et``, ...)."""
        count = 0
        while os.path.exists(f"{prefix}.{npus + count}.et"):
            count += 1
        return count

    def load_rank(self, prefix, rank):
        from astra_sim.chakra import ChakraError, parse_et, read_et

        path = f"{prefix}.{rank}.et"
        last, self._last_read = self._last_read, None
        try:
            if last is not None and last[0] == path:
                trace = parse_et(last[1], path, keep_raw=False, shared=self._shared_nodes)
            elif not os.path.exists(path):
                raise WorkloadError(f"workload file {path} does not exist (rank {rank} of the network)")
            else:
                trace = read_et(path, keep_raw=False)
        except ChakraError as exc:
            raise WorkloadError(str(exc)) from None
        if trace.metadata is None and not trace.nodes:
            raise WorkloadError(f"{path}: the file is empty (no GlobalMetadata, no nodes)")
        return path, trace.nodes


@hookimpl
def astra_register_workload_formats(registry):
    registry.workload_format("chakra", ChakraFormat(),
                             "Chakra ET protobuf, <prefix>.<rank>.et or a compact <prefix>.workload.json")


@hookimpl
def astra_register_compute_models(registry):
    registry.compute_model("replay", ReplayModel, "duration_micros from the trace")
    registry.compute_model("roofline", RooflineModel, "num_ops / min(bw x intensity, peak)")


class NoRemoteMemory:
    """Used when no remote-memory plugin is installed: MEM nodes are an error."""

    foldable = True

    def __init__(self, context):
        pass

    def issue(self, rank, is_store, size_bytes, fn, arg):
        from astra_sim.errors import ConfigError

        raise ConfigError(
            "MEM_LOAD/MEM_STORE nodes need a remote-memory backend (install the memory_analytical plugin)"
        )


@hookimpl
def astra_register_memory_backends(registry):
    registry.memory_backend("none", NoRemoteMemory, "no remote memory: MEM nodes are an error")
