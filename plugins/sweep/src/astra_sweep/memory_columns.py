"""The memory columns of sweep and search rows: the peak per rank with its parts, the device's capacity and the
margin, so that a results table says how close each point is to its GPU's memory (docs/memory.md).

Both the sweep (from ``astra run``'s ``settings.memory``, the gpu compute model's check of the traces' estimate)
and the search (from the estimate it filters layouts with) write the same columns, all integer bytes:
``peak_mem_bytes``, ``mem_capacity_bytes``, ``mem_margin_bytes`` (capacity - peak: negative when over) and one
``mem_<part>_bytes`` per part of the estimate (``mem_weights_bytes``, ``mem_activations_bytes``, ...).
"""

from __future__ import annotations

#: the column of the peak (kept under its older name)
PEAK = "peak_mem_bytes"


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def report_memory_columns(memory) -> dict:
    """The columns of ``astra run``'s ``settings.memory`` (``peak_bytes``, ``hbm_capacity_bytes``,
    ``peak_breakdown_bytes``); {} when the run checked no memory."""
    if not isinstance(memory, dict) or not _int(memory.get("peak_bytes")):
        return {}
    row = {PEAK: memory["peak_bytes"]}
    capacity = memory.get("hbm_capacity_bytes")
    if _int(capacity):
        row["mem_capacity_bytes"] = capacity
        row["mem_margin_bytes"] = capacity - memory["peak_bytes"]
    for part, value in sorted((memory.get("peak_breakdown_bytes") or {}).items()):
        if _int(value):
            row[f"mem_{part}_bytes"] = value
    return row


def estimate_columns(estimate, capacity: int | None) -> dict:
    """The columns of a :class:`astra_workload_generators.llm.memory.MemoryEstimate` (the peak is its ``total``,
    what ``astra run`` checks) against ``capacity`` bytes (None: no capacity or margin)."""
    row = {PEAK: estimate.total}
    if capacity is not None:
        row["mem_capacity_bytes"] = int(capacity)
        row["mem_margin_bytes"] = int(capacity) - estimate.total
    for part, value in estimate.parts().items():
        row[f"mem_{part}_bytes"] = value
    return row
