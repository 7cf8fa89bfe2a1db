"""Reading Kineto traces (the profiler's device/host timeline) for the PyTorch converter."""

from __future__ import annotations

from astra_sim.errors import ConfigError

from .pytorch_host import _load_json, _short

_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def load_kineto_trace(path, *, with_info=False):
    """Read a Kineto trace; returns (GPU events, cpu_op events by External id), plus its ``distributedInfo`` dict
    ({} if none) when ``with_info``."""
    data = _load_json(path, "Kineto trace")
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise ConfigError(f"{path}: not a Kineto trace (expected an object with a 'traceEvents' list)")
    gpu, cpu_ops = [], {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise ConfigError(f"{path}: traceEvents[{i}]: expected an object, got {type(ev).__name__}")
        cat = ev.get("cat")
        if cat not in _GPU_CATS and cat != "cpu_op":
            continue
        where = f"traceEvents[{i}] ({_short(ev.get('name'))!r})"
        args = ev.get("args", {})
        if not isinstance(args, dict):
            raise ConfigError(f"{path}: {where}: 'args' must be an object")
        ext = args.get("External id")
        if cat == "cpu_op":
            if ext is not None:
                cpu_ops.setdefault(ext, ev)
            continue
        dur = ev.get("dur")
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or dur < 0:
            raise ConfigError(f"{path}: {where}: GPU event needs a duration 'dur' >= 0 (µs), got {dur!r}")
        if not isinstance(ev.get("name"), str):
            raise ConfigError(f"{path}: {where}: GPU event needs a string 'name'")
        if ext is None:
            raise ConfigError(f"{path}: {where}: GPU event has no args 'External id' to find its launching op")
        gpu.append((i, ev))
    if with_info:
        info = data.get("distributedInfo")
        return gpu, cpu_ops, info if isinstance(info, dict) else {}
    return gpu, cpu_ops

