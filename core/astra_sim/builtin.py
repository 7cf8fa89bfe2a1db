"""The kernel's own plugin: Chakra traces, replay/roofline compute, no remote memory (the native collectives are
plugins/collectives_native's)."""

from __future__ import annotations

import hashlib
import os

from astra_sim import hookimpl
from astra_sim.compute import ReplayModel, RooflineModel
from astra_sim.errors import ConfigError, WorkloadError


class ChakraFormat:
    """Chakra ET protobuf traces: rank r reads ``<prefix>.<r>.et``."""

    def __init__(self):
        self._last_read = None  # (path, bytes) read by rank_digest, parsed by the load_rank that follows
        self._shared_nodes = {}  # serialized node -> EtNode, across the ranks of the workload (parse_et)

    def matches(self, prefix):
        return os.path.exists(f"{prefix}.0.et")

    def ranks(self, prefix):
        """How many rank files there are (``<prefix>.0.et``, ``<prefix>.1.et``, ... counted)."""
        return self.ranks_beyond(prefix, 0) or None

    def rank_digest(self, prefix, rank):
        """``(path, key)``: byte-identical ranks share one parse; the key is a trace's bytes up to 4 KiB (cheaper than
        a hash, and held only while the ranks are read), a larger one's sha256; the bytes are kept for ``load_rank``."""
        path = f"{prefix}.{rank}.et"
        try:
            fd = os.open(path, os.O_RDONLY)  # (os-level reads: 4 system calls a small file, where open() makes 7)
            try:
                data = b"".join(iter(lambda: os.read(fd, 1 << 16), b""))
            finally:
                os.close(fd)
        except OSError:
            return None  # load_rank reports it
        self._last_read = (path, data)
        return path, data if len(data) <= 4096 else hashlib.sha256(data).digest()

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
    registry.workload_format("chakra", ChakraFormat(), "Chakra ET protobuf, <prefix>.<rank>.et")


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
        raise ConfigError(
            "MEM_LOAD/MEM_STORE nodes need a remote-memory backend (install the memory_analytical plugin)"
        )


@hookimpl
def astra_register_memory_backends(registry):
    registry.memory_backend("none", NoRemoteMemory, "no remote memory: MEM nodes are an error")
