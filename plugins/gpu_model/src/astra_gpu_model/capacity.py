"""Does every rank fit its GPU's HBM? The workload generator's per-rank memory estimate (GlobalMetadata
attributes ``memory_<part>_bytes`` of ``astra workload llm``'s traces) against the GPU's ``hbm_capacity_gb``.

A rank that needs more is an error naming the rank, its estimate by part and the GPU (``--allow-oom`` makes it
a warning); the report's ``settings.memory`` keeps the numbers. Traces without an estimate are not checked.
"""

from __future__ import annotations

import os

from astra_sim.errors import InfeasibleError

PARTS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "workspace")


def _trace_paths(run):
    """{rank: trace file} for the ranks whose estimate stands for others' too (compact: class traces)."""
    compact = run.compact
    if compact is not None:
        return dict(compact.traces)
    prefix = run.workload_prefix
    return {rank: f"{prefix}.{rank}.et" for rank in range(run.total_npus) if os.path.exists(f"{prefix}.{rank}.et")}


def rank_estimates(run):
    """{rank: {part: bytes, "peak": bytes}} of the traces that carry an estimate (a compact workload's class
    representatives; every rank of per-rank files)."""
    from astra_sim.chakra import ChakraError, read_metadata

    if run.workload_format_name != "chakra":
        return {}
    out = {}
    for rank, path in _trace_paths(run).items():
        try:
            attrs = read_metadata(path)
        except ChakraError:
            continue  # the workload layer reports unreadable traces
        peak = attrs.get("memory_peak_bytes")
        if isinstance(peak, int):
            out[rank] = {"peak": peak, **{p: attrs.get(f"memory_{p}_bytes", 0) for p in PARTS}}
    return out


def check(run, gpu, allow_oom, warn):
    """The memory summary for the report; raises :class:`InfeasibleError` when a rank does not fit (unless
    ``allow_oom``, then ``warn`` says so). ``run``: the hooks' read-only run (:class:`astra_sim.run.view.RunView`)."""
    estimates = rank_estimates(run)
    if not estimates or gpu.hbm_capacity_gb is None:
        return None
    capacity = int(gpu.hbm_capacity_gb * 1e9)
    peak_rank = max(estimates, key=lambda r: (estimates[r]["peak"], -r))
    peak = estimates[peak_rank]
    over = sorted(r for r, e in estimates.items() if e["peak"] > capacity)
    compact = run.compact
    summary = {"gpu": gpu.name, "hbm_capacity_bytes": capacity, "peak_bytes": peak["peak"], "peak_rank": peak_rank,
               "peak_breakdown_bytes": {p: peak[p] for p in PARTS}, "fits": not over,
               "source": "GlobalMetadata memory_*_bytes (the generator's estimate)"}
    if compact is not None:
        summary["classes"] = {str(r): e["peak"] for r, e in sorted(estimates.items())}
    if over:
        parts = ", ".join(f"{p.replace('_', ' ')} {peak[p] / 1e9:.1f}" for p in PARTS if peak[p])
        which = (f"rank {peak_rank}" + (" (and the ranks of its class)" if compact is not None else "")
                 + (f" and {len(over) - 1} more" if len(over) > 1 else ""))
        message = (f"out of memory: {which} needs an estimated {peak['peak'] / 1e9:.1f} GB of HBM ({parts} GB) "
                   f"but the {gpu.name} has {capacity / 1e9:.0f} GB; use more parallelism, ZeRO or "
                   "recomputation, or --allow-oom to simulate it anyway")
        if not allow_oom:
            raise InfeasibleError(message)
        warn(message)
    return summary
