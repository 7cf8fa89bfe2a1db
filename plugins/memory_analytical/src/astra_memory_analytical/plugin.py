"""Registers the ``analytical`` remote-memory backend."""

from astra_sim import hookimpl

from astra_memory_analytical.model import AnalyticalRemoteMemory


@hookimpl
def astra_register_memory_backends(registry):
    registry.memory_backend(
        "analytical",
        AnalyticalRemoteMemory.from_context,
        "remote memory: per-NPU, per-node (FIFO per node) or pooled (one FIFO) expansion; "
        "latency + size / bandwidth per request (the reference's analytical model)",
    )
