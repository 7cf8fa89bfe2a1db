"""What a simulated LLM step achieved: MFU, HFU, model FLOP/s per GPU and tokens/s, from the step's own numbers
(the GlobalMetadata that ``astra workload llm`` writes: model and hardware FLOPs, tokens, sequences, dtype) and the
simulated step time, against the peak of the device the run used (its platform's, ``--gpu`` included)."""

from __future__ import annotations

import os


def step_metadata_of(run):
    """The step's attributes (``model_flops_per_step``, ...) from rank 0's trace, or None (another workload)."""
    from astra_sim.chakra import ChakraError, read_metadata

    if run.compact is None and run.workload_format_name != "chakra":  # Chakra files, per rank or per class
        return None
    compact = run.compact
    path = (compact.traces.get(0) if compact is not None else f"{run.workload_prefix}.0.et")
    if not path or not os.path.exists(path):
        return None
    try:
        attrs = read_metadata(path)
    except ChakraError:
        return None
    return attrs if isinstance(attrs.get("model_flops_per_step"), (int, float)) else None


def step_throughput(run, step_ns):
    """``stats.throughput`` of a run whose trace carries the step's numbers; None otherwise. MFU and HFU need the
    device's peak: a run on a registered platform has it."""
    attrs = step_metadata_of(run)
    if attrs is None or step_ns <= 0:
        return None
    seconds = step_ns / 1e9
    gpus = run.total_npus
    flops, hardware = float(attrs["model_flops_per_step"]), float(attrs.get("hardware_flops_per_step", 0.0))
    tokens = int(attrs.get("tokens_per_step", 0))
    out = {"model_flops_per_step": flops, "hardware_flops_per_step": hardware or flops, "tokens_per_step": tokens,
           "sequences_per_step": int(attrs.get("sequences_per_step", 0)), "dtype": attrs.get("compute_dtype", "bf16"),
           "mode": attrs.get("step_mode", "train"),
           "model_flop_per_s_per_gpu": flops / seconds / gpus, "tokens_per_s": tokens / seconds,
           "tokens_per_s_per_gpu": tokens / seconds / gpus}
    for key, name in (("model", "model_name"), ("layout", "layout")):  # what the step is (astra plot's titles)
        if isinstance(attrs.get(name), str):
            out[key] = attrs[name]
    peak = _peak_tflops(run, out["dtype"])
    if peak:
        out["peak_flop_per_s_per_gpu"] = peak * 1e12
        out["mfu"] = out["model_flop_per_s_per_gpu"] / out["peak_flop_per_s_per_gpu"]
        out["hfu"] = (hardware or flops) / seconds / gpus / out["peak_flop_per_s_per_gpu"]
    return out


def summary_line(t):
    """The throughput as ``astra run``'s summary shows it: model TFLOP/s per GPU, MFU (and HFU where the recompute
    makes it differ), tokens/s."""
    mfu = (f" = {100 * t['mfu']:.1f} % MFU of {t['peak_flop_per_s_per_gpu'] / 1e12:g} {t['dtype']} TFLOP/s"
           + (f", {100 * t['hfu']:.1f} % HFU" if abs(t["hfu"] - t["mfu"]) > 1e-9 else "") if "mfu" in t else "")
    return (f"model {t['model_flop_per_s_per_gpu'] / 1e12:.1f} TFLOP/s per GPU{mfu}; "
            f"{t['tokens_per_s']:,.0f} tokens/s ({t['tokens_per_s_per_gpu']:,.0f} per GPU), "
            f"{t['sequences_per_step']:,} sequences per step")


def _peak_tflops(run, dtype):
    from astra_sim.errors import AstraError
    from astra_sim.platforms import get_platform

    name = run.options.get("platform")
    if name is None:
        return None
    try:
        return get_platform(name).device_peak_tflops(dtype, dict(run.options))
    except AstraError:
        return None


#: the report's throughput numbers (astra_register_metrics)
METRICS = (
    ("model_flops_per_step", "flop", "the step's model FLOPs, every rank (6PT + attention; an inference step's "
     "forward)"),
    ("hardware_flops_per_step", "flop", "the FLOPs run, recomputation included"),
    ("tokens_per_step", "count", "tokens the step processes"),
    ("sequences_per_step", "count", "sequences (the global batch)"),
    ("model_flop_per_s_per_gpu", "flop_per_s", "model FLOPs per simulated second and GPU"),
    ("peak_flop_per_s_per_gpu", "flop_per_s", "the device's dense peak in the step's dtype"),
    ("tokens_per_s", "per_s", "tokens per simulated second"),
    ("tokens_per_s_per_gpu", "per_s", "tokens per simulated second and GPU"),
    ("mfu", "fraction", "model FLOPs utilisation: model FLOP/s per GPU over the peak"),
    ("hfu", "fraction", "hardware FLOPs utilisation (recomputation counted)"),
)
