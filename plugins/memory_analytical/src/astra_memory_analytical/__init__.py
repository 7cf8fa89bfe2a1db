"""Analytical remote-memory backend for astra-sim-py (the reference's ``AnalyticalRemoteMemory``)."""

from astra_memory_analytical.model import (
    MEMORY_TYPES,
    AnalyticalRemoteMemory,
    MemoryConfig,
    parse_memory_config,
)

__all__ = ["MEMORY_TYPES", "AnalyticalRemoteMemory", "MemoryConfig", "parse_memory_config"]
