"""The plugin's one hook: the ``compact`` workload format (``PREFIX.workload.json``), registered as a third-party
format would be. The kernel reads a compact workload through the format's ``compact(prefix)`` and ``load_trace(path)``
(:class:`astra_sim.api.CompactWorkload`): each class trace parsed once, every rank's relabelled from its class's."""

from __future__ import annotations

import os

from astra_sim import hookimpl
from astra_sim.errors import WorkloadError

from astra_workload_compact.manifest import is_compact, read_compact_workload


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


class CompactFormat:
    """A compact workload: ``PREFIX.workload.json`` and one Chakra ET trace per class of ranks.

    One instance serves one simulation (the registry is built per run)."""

    def __init__(self):
        self._shared_nodes = {}  # serialized node -> EtNode, across the class traces (parse_et)

    def matches(self, prefix):
        return is_compact(prefix)

    def ranks(self, prefix):
        """The workload's ranks (the manifest's ``npus``)."""
        return read_compact_workload(prefix).npus

    def compact(self, prefix):
        """The manifest read and checked (:class:`astra_workload_compact.manifest.CompactWorkload`)."""
        return read_compact_workload(prefix)

    def load_trace(self, path):
        """The nodes of one class trace (a Chakra ET file), parsed once per process while it is unchanged; a trace
        this process generated and holds (:mod:`astra_workload_compact.memory`) is not parsed at all."""
        from astra_sim.chakra import ChakraError, parse_et

        from astra_workload_compact.memory import held_nodes  # (held traces: only a compact workload has them)

        if not os.path.exists(path):
            raise WorkloadError(f"workload file {path} does not exist")
        key = PARSED_TRACES.key(path)
        cached = PARSED_TRACES.get(key)
        if cached is not None:
            return cached
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            held = held_nodes(data, path)
            if held is not None:  # generated in this process and held: the nodes as parsing would give them
                return held
            trace = parse_et(data, path, keep_raw=False, shared=self._shared_nodes)
        except ChakraError as exc:
            raise WorkloadError(str(exc)) from None
        except OSError as exc:
            raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if trace.metadata is None and not trace.nodes:
            raise WorkloadError(f"{path}: the file is empty (no GlobalMetadata, no nodes)")
        PARSED_TRACES.put(key, trace.nodes)
        return trace.nodes

    def load_rank(self, prefix, rank):
        """``(path, nodes)`` of one rank: its class trace relabelled with the manifest's groups (a run reads the class
        traces through ``compact`` and ``load_trace`` instead)."""
        from astra_workload_compact.expand import read_rank_nodes  # (loads only when a rank's nodes are read)

        nodes = read_rank_nodes(prefix, rank)  # a rank out of range is a WorkloadError naming the manifest
        compact = read_compact_workload(prefix)
        return f"{compact.traces[compact.symmetry.representative(rank)]} (as rank {rank})", nodes


@hookimpl
def astra_register_workload_formats(registry):
    registry.workload_format("compact", CompactFormat(),
                             "compact Chakra ET: <prefix>.workload.json, each distinct trace once and a rank map")
