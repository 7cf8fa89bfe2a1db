"""The reference's analytical remote memory (``extern/remote_memory_backend/analytical``).

One request (a MEM_LOAD or MEM_STORE node) of ``size`` bytes takes

    runtime_ns = remote_mem_latency + trunc(double(size) / remote_mem_bw)

where the reference stores both ``remote-mem-latency`` and ``remote-mem-bw`` as
``uint64_t`` (so a fractional JSON value is truncated when read). Loads and
stores cost the same. Who waits for whom depends on ``memory-type``:

* ``PER_NPU_MEMORY_EXPANSION``: no shared state; every request starts at once.
  (Within one NPU the workload layer's hardware-resource check already lets
  only one non-CPU MEM node run at a time.)
* ``PER_NODE_MEMORY_EXPANSION``: one FIFO server per node of
  ``num-npus-per-node`` consecutive NPUs (node = rank // num-npus-per-node).
* ``MEMORY_POOL``: one FIFO server for every NPU.
* ``NO_MEMORY_EXPANSION``: any request is an error.

When a served request completes, the requester's callback runs first and the
server then starts the next queued request, both at the completion tick (so a
request issued by that callback queues behind those already waiting), exactly
as in the reference.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from astra_sim.errors import ConfigError
from astra_sim.limits import LIMITS, check_number

NO_MEMORY_EXPANSION = "NO_MEMORY_EXPANSION"
PER_NPU_MEMORY_EXPANSION = "PER_NPU_MEMORY_EXPANSION"
PER_NODE_MEMORY_EXPANSION = "PER_NODE_MEMORY_EXPANSION"
MEMORY_POOL = "MEMORY_POOL"

#: Accepted values of ``memory-type``.
MEMORY_TYPES = (NO_MEMORY_EXPANSION, PER_NPU_MEMORY_EXPANSION, PER_NODE_MEMORY_EXPANSION, MEMORY_POOL)

#: Keys the reference reads.
KNOWN_KEYS = ("memory-type", "remote-mem-latency", "remote-mem-bw", "num-nodes", "num-npus-per-node")

_NO_FILE = "<no --remote-memory-configuration given>"


@dataclass(frozen=True)
class MemoryConfig:
    """A parsed remote-memory configuration (values as the reference holds them)."""

    path: str
    memory_type: str
    latency_ns: int = 0
    bandwidth_bytes_per_ns: int = 0
    num_nodes: int = 0
    num_npus_per_node: int = 0

    def runtime_ns(self, size_bytes):
        """Duration of one request: latency + trunc(size / bandwidth), integer ns."""
        return self.latency_ns + int(float(size_bytes) / float(self.bandwidth_bytes_per_ns))


def _where(path):
    return path if path is not None else _NO_FILE


def _truncated_number(where, data, key, memory_type, unit, warn, *, minimum):
    """A number the reference stores as uint64 (fractional JSON values truncated)."""
    if key not in data:
        raise ConfigError(
            f"{where}: key {key!r} is missing; memory-type {memory_type} needs it ({unit})"
        )
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: key {key!r} must be a number ({unit}), got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: key {key!r} must be a finite number ({unit}), got {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: key {key!r} must be >= {minimum} ({unit}), got {value!r}")
    limit = LIMITS[key]
    if value > limit.high:  # what no memory can have
        raise ConfigError(f"{where}: key {key!r} must be {limit.describe()}, got {value!r}")
    truncated = int(value)
    if truncated < minimum:
        if truncated != value:
            raise ConfigError(
                f"{where}: key {key!r} must be >= {minimum} ({unit}), got {value!r}: the reference "
                f"stores it as an integer, so {value!r} would become {truncated}"
            )
        raise ConfigError(f"{where}: key {key!r} must be >= {minimum} ({unit}), got {value!r}")
    if truncated != value:
        warn(
            f"{where}: {key!r} = {value!r} is truncated to {truncated} ({unit}): the reference "
            "stores it as an integer"
        )
    return truncated


def _positive_int(where, data, key, memory_type):
    if key not in data:
        raise ConfigError(f"{where}: key {key!r} is missing; memory-type {memory_type} needs it (a positive integer)")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: key {key!r} must be a positive integer, got {value!r}")
    return check_number(where, key, value)


def parse_memory_config(data, path=None, total_npus=0, warn=print):
    """Check the remote-memory JSON (already loaded as ``data``) and return a :class:`MemoryConfig`.

    ``path`` names the file in messages (None: no file was given, so the
    kernel's default ``NO_MEMORY_EXPANSION`` applies); ``total_npus`` (if > 0)
    is checked against ``num-nodes x num-npus-per-node``.
    """
    where = _where(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the remote-memory configuration must be a JSON object")
    for key in data:
        if key not in KNOWN_KEYS:
            warn(f"{where}: key {key!r} is ignored by the analytical remote memory (known: {', '.join(KNOWN_KEYS)})")
    if "memory-type" not in data:
        raise ConfigError(f"{where}: key 'memory-type' is missing; expected one of {', '.join(MEMORY_TYPES)}")
    memory_type = data["memory-type"]
    if memory_type not in MEMORY_TYPES:
        raise ConfigError(
            f"{where}: unknown memory-type {memory_type!r}; expected one of {', '.join(MEMORY_TYPES)}"
        )
    if memory_type == NO_MEMORY_EXPANSION:
        return MemoryConfig(path=where, memory_type=memory_type)
    latency = _truncated_number(where, data, "remote-mem-latency", memory_type, "ns", warn, minimum=0)
    bandwidth = _truncated_number(
        where, data, "remote-mem-bw", memory_type, "bytes/ns, i.e. decimal GB/s", warn, minimum=1
    )
    num_nodes = num_npus_per_node = 0
    if memory_type == PER_NODE_MEMORY_EXPANSION:
        num_nodes = _positive_int(where, data, "num-nodes", memory_type)
        num_npus_per_node = _positive_int(where, data, "num-npus-per-node", memory_type)
        if total_npus and num_nodes * num_npus_per_node != total_npus:
            raise ConfigError(
                f"{where}: num-nodes x num-npus-per-node = {num_nodes} x {num_npus_per_node} = "
                f"{num_nodes * num_npus_per_node}, but the network has {total_npus} NPUs; they must be equal"
            )
    return MemoryConfig(
        path=where,
        memory_type=memory_type,
        latency_ns=latency,
        bandwidth_bytes_per_ns=bandwidth,
        num_nodes=num_nodes,
        num_npus_per_node=num_npus_per_node,
    )


class AnalyticalRemoteMemory:
    """The ``analytical`` memory backend (see the module docstring for the model)."""

    def __init__(self, config: MemoryConfig, engine, schedule_for_rank=None):
        self.config = config
        self.engine = engine
        self.memory_type = config.memory_type
        self._runtime_ns = config.runtime_ns
        if config.memory_type == PER_NODE_MEMORY_EXPANSION:
            servers = config.num_nodes
        elif config.memory_type == MEMORY_POOL:
            servers = 1
        else:
            servers = 0
        self._busy = [False] * servers
        self._queues = [deque() for _ in range(servers)]
        # The reference books completions on the requesting rank's system
        # layer (batched per tick); standalone use falls back to the engine.
        self._schedule_for_rank = schedule_for_rank
        self.requests = 0
        self.bytes = 0

    @property
    def foldable(self):
        """Whether every NPU's accesses are independent of the others' (no server shared between NPUs)."""
        return self.memory_type in (NO_MEMORY_EXPANSION, PER_NPU_MEMORY_EXPANSION)

    @classmethod
    def from_context(cls, context):
        config = parse_memory_config(
            context.memory_config, context.memory_config_path, context.total_npus, context.warn
        )
        return cls(config, context.engine, context.schedule_for_rank)

    def _schedule(self, rank, fn, arg, delay_ns):
        if self._schedule_for_rank is not None:
            self._schedule_for_rank(rank, delay_ns, fn, arg)
        else:
            self.engine.schedule(delay_ns, fn, arg)

    def issue(self, rank, is_store, size_bytes, fn, arg):
        """Start (or queue) one access; ``fn(arg)`` runs when it completes."""
        memory_type = self.memory_type
        if memory_type == PER_NPU_MEMORY_EXPANSION:
            self.requests += 1
            self.bytes += size_bytes
            self._schedule(rank, fn, arg, self._runtime_ns(size_bytes))
            return
        if memory_type == NO_MEMORY_EXPANSION:
            raise ConfigError(
                f"memory-type NO_MEMORY_EXPANSION in {self.config.path} does not support MEM_LOAD/MEM_STORE "
                "nodes; use PER_NPU_MEMORY_EXPANSION, PER_NODE_MEMORY_EXPANSION or MEMORY_POOL (with "
                "remote-mem-latency and remote-mem-bw) in --remote-memory-configuration"
            )
        self.requests += 1
        self.bytes += size_bytes
        server = rank // self.config.num_npus_per_node if memory_type == PER_NODE_MEMORY_EXPANSION else 0
        if self._busy[server]:
            self._queues[server].append((rank, size_bytes, fn, arg))
        else:
            self._start(server, rank, size_bytes, fn, arg)

    def _start(self, server, rank, size_bytes, fn, arg):
        runtime = self._runtime_ns(size_bytes)
        # Requester first, then the server moves on (same tick, this order).
        self._schedule(rank, fn, arg, runtime)
        self._schedule(rank, self._served, server, runtime)
        self._busy[server] = True

    def _served(self, server):
        queue = self._queues[server]
        if queue:
            self._start(server, *queue.popleft())
        else:
            self._busy[server] = False

    def describe(self):
        """Settings for reports (units in the keys)."""
        c = self.config
        out = {"memory_type": c.memory_type, "configuration": c.path}
        if c.memory_type != NO_MEMORY_EXPANSION:
            out["latency_ns"] = c.latency_ns
            out["bandwidth_bytes_per_ns"] = c.bandwidth_bytes_per_ns
        if c.memory_type == PER_NODE_MEMORY_EXPANSION:
            out["num_nodes"] = c.num_nodes
            out["num_npus_per_node"] = c.num_npus_per_node
        return out
