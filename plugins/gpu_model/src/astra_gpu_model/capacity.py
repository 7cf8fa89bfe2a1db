"""Does every rank fit its GPU's HBM? The workload generator's per-rank memory estimate (GlobalMetadata
attributes ``memory_<part>_bytes`` of ``astra workload llm``'s traces) against the GPU's ``hbm_capacity_gb``.

A rank over its HBM by more than the estimate's stated uncertainty (``UNCERTAINTY``, docs/memory.md) is an error
naming the rank, its estimate by part, the largest part and the one change of the workload's flags that would
make it fit (the generator lists the candidate changes with their peaks in ``memory_fixes``); ``--allow-oom``
makes it a warning. A near miss, over by less than the uncertainty, is a warning. The report's
``settings.memory`` keeps the numbers and the margin, and its ``summary_line`` (the peak with its parts, the
capacity and the margin) is printed after the run. Traces without an estimate are not checked.
"""

from __future__ import annotations

import json
import os

from astra_sim.errors import InfeasibleError

#: the parts of an estimate (older traces carry the first six only: workspace held buffers, reserve and context)
PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "buffers", "gemm_workspace",
         "reserve", "context", "workspace")
#: the estimate's stated uncertainty (the generator's memory.UNCERTAINTY, read here without importing it)
UNCERTAINTY = 0.10


def _trace_paths(run):
    """{rank: trace file} for the ranks whose estimate stands for others' too (compact: class traces)."""
    compact = run.compact
    if compact is not None:
        return dict(compact.traces)
    prefix = run.workload_prefix
    return {rank: f"{prefix}.{rank}.et" for rank in range(run.total_npus) if os.path.exists(f"{prefix}.{rank}.et")}


def _parts(attrs):
    """{part: bytes} of one trace's attributes; ``workspace`` only where the finer parts are absent."""
    parts = {p: attrs.get(f"memory_{p}_bytes", 0) for p in PARTS if p != "workspace"}
    if "memory_context_bytes" not in attrs:
        parts["workspace"] = attrs.get("memory_workspace_bytes", 0)
    return {p: v for p, v in parts.items() if isinstance(v, int)}


def _fixes(attrs):
    """[(flags, peak bytes)] of ``memory_fixes`` (the generator's candidate changes), [] when absent or bad."""
    try:
        return [(str(flags), int(peak)) for flags, peak in json.loads(attrs.get("memory_fixes") or "[]")]
    except (TypeError, ValueError):
        return []


def rank_estimates(run):
    """{rank: {part: bytes, "peak": bytes, "fixes": [(flags, peak)]}} of the traces that carry an estimate (a
    compact workload's class representatives; every rank of per-rank files)."""
    from astra_sim.chakra import ChakraError, read_metadata

    if run.compact is None and run.workload_format_name != "chakra":  # Chakra files, per rank or per class
        return {}
    out = {}
    for rank, path in _trace_paths(run).items():
        try:
            attrs = read_metadata(path)
        except ChakraError:
            continue  # the workload layer reports unreadable traces
        peak = attrs.get("memory_peak_bytes")
        if isinstance(peak, int):
            out[rank] = {"peak": peak, **_parts(attrs), "fixes": _fixes(attrs)}
    return out


def _gb(value):
    return f"{value / 1e9:.1f}"


def check(run, gpu, allow_oom, warn):
    """The memory summary for the report; raises :class:`InfeasibleError` when a rank does not fit by more than
    the uncertainty (unless ``allow_oom``, then ``warn`` says so); a near miss is a warning. ``run``: the hooks'
    read-only run (:class:`astra_sim.run.view.RunView`)."""
    estimates = rank_estimates(run)
    if not estimates or gpu.hbm_capacity_gb is None:
        return None
    capacity = gpu.hbm_capacity_bytes
    limit = int(capacity * (1 + UNCERTAINTY))
    peak_rank = max(estimates, key=lambda r: (estimates[r]["peak"], -r))
    peak = estimates[peak_rank]
    parts = {p: v for p, v in peak.items() if p not in ("peak", "fixes")}
    over = sorted(r for r, e in estimates.items() if e["peak"] > capacity)
    refused = sorted(r for r in over if estimates[r]["peak"] > limit)
    compact = run.compact
    summary = {"gpu": gpu.name, "hbm_capacity_bytes": capacity, "peak_bytes": peak["peak"], "peak_rank": peak_rank,
               "margin_bytes": capacity - peak["peak"], "peak_breakdown_bytes": parts, "fits": not over,
               "near_miss": bool(over) and not refused, "uncertainty": UNCERTAINTY,
               "source": "GlobalMetadata memory_*_bytes (the generator's estimate)"}
    if compact is not None:
        summary["classes"] = {str(r): e["peak"] for r, e in sorted(estimates.items())}
    listed = ", ".join(f"{p.replace('_', ' ')} {_gb(v)}" for p, v in parts.items() if v)
    margin = capacity - peak["peak"]
    summary["summary_line"] = (f"memory: {_gb(peak['peak'])} GB per GPU at the peak (rank {peak_rank}: {listed} GB) of "
                               f"the {gpu.name}'s {capacity / 1e9:.1f} GB: "
                               + (f"{_gb(margin)} GB to spare" if margin >= 0 else f"{_gb(-margin)} GB over"))
    if not over:
        return summary
    largest = max(parts, key=parts.get).replace("_", " ")
    which = (f"rank {peak_rank}" + (" (and the ranks of its class)" if compact is not None else "")
             + (f" and {len(over) - 1} more" if len(over) > 1 else ""))
    needs = (f"{which} needs an estimated {_gb(peak['peak'])} GB of HBM ({listed} GB; largest: {largest}) but the "
             f"{gpu.name} has {capacity / 1e9:.1f} GB ({gpu.hbm_capacity_gb:g} GiB)")
    if not refused:
        warn(f"near miss: {needs}, within the estimate's {UNCERTAINTY:.0%} uncertainty: it may or may not fit")
        return summary
    fix = next(((flags, p) for flags, p in peak["fixes"] if p <= capacity), None)
    if fix:
        advice = f"`{fix[0]}` would make it fit (estimated {_gb(fix[1])} GB)"
        summary["fix"] = {"flags": fix[0], "peak_bytes": fix[1]}
    else:
        advice = "no single change of recomputation, ZeRO, micro-batch or TP/PP makes it fit: add GPUs"
    message = (f"out of memory: {needs}; {advice}; or --allow-oom to simulate it anyway")
    if not allow_oom:
        raise InfeasibleError(message)
    warn(message)
    return summary
