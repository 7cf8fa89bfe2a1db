"""The GPU measurement scripts' shared pieces: the device, the timing of one op (CUDA-graph replays on
rotating buffers larger than L2), the CSV rows, the time budget and the log. Used by ``measure_gpu.py``,
``measure_kernels.py`` and ``measure_gpu_sustained.py`` (run as scripts from this directory, which Python puts on
the import path)."""

import csv
import math
import os
import platform
import subprocess
import sys
import time

import torch


DEV = "cuda" if torch.cuda.is_available() else "cpu"
CUDA = DEV == "cuda"
START = time.perf_counter()
LOG_LINES = []


def log(*args):
    line = f"[{time.perf_counter() - START:7.1f}s] " + " ".join(str(a) for a in args)
    print(line, flush=True)
    LOG_LINES.append(line)


def sync():
    if CUDA:
        torch.cuda.synchronize()


class Budget:
    """A section's share of the run: ``left()`` is False once its seconds, or the run's, are spent."""

    def __init__(self, seconds, run_deadline):
        self.end = min(time.perf_counter() + seconds, run_deadline)

    def left(self):
        return time.perf_counter() < self.end


class Rows:
    """A CSV written row by row (flushed), so a run killed at its limit keeps what it measured."""

    def __init__(self, path, fields):
        self.fields = fields
        self.f = open(path, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=fields, extrasaction="ignore")
        self.w.writeheader()
        self.n = 0

    def add(self, **row):
        self.w.writerow({k: _fmt(row.get(k, "")) for k in self.fields})
        self.f.flush()
        self.n += 1

    def close(self):
        self.f.close()


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


# ----------------------------------------------------------------------------------------------- timing


def cuda_events():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def elapsed_s(fn, inner):
    """Seconds for ``inner`` calls of fn(i), timed with events (CUDA) or the host clock (CPU)."""
    if CUDA:
        e0, e1 = cuda_events()
        e0.record()
        for i in range(inner):
            fn(i)
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e-3
    t0 = time.perf_counter()
    for i in range(inner):
        fn(i)
    return time.perf_counter() - t0


def time_op(fn, target_s=2e-3, repeats=5, max_inner=200, use_graph=True):
    """Median seconds per call of ``fn(i)`` (i rotates buffers), and how it was timed.

    CUDA graph replay of ``inner`` calls when it captures (GPU time, no host launch cost), else eager with
    events (``eager``: the host may be the bottleneck for kernels of a few µs)."""
    fn(0)
    sync()
    single = elapsed_s(fn, 1)
    inner = int(max(2, min(max_inner, math.ceil(target_s / max(single, 1e-6)))))
    if CUDA and use_graph:
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for i in range(2):
                    fn(i)
            torch.cuda.current_stream().wait_stream(side)
            sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(inner):
                    fn(i)
            graph.replay()
            sync()
            times = []
            for _ in range(repeats):
                e0, e1 = cuda_events()
                e0.record()
                graph.replay()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1) * 1e-3 / inner)
            del graph
            times.sort()
            return times[len(times) // 2], "graph", inner, (times[-1] - times[0]) / times[len(times) // 2]
        except Exception as exc:  # noqa: BLE001 - any capture failure falls back to eager timing
            log("  graph capture failed, eager:", type(exc).__name__, str(exc)[:120])
            sync()
    times = sorted(elapsed_s(fn, inner) / inner for _ in range(repeats))
    return times[len(times) // 2], "eager", inner, (times[-1] - times[0]) / times[len(times) // 2]


def n_buffers(bytes_per_set, l2_bytes, cap=8):
    """Input sets to rotate so that one pass over them is at least 3x L2 (cold operands, as in training)."""
    return int(max(1, min(cap, math.ceil(3 * l2_bytes / max(bytes_per_set, 1)))))


# ----------------------------------------------------------------------------------------------- device


def run_command(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except Exception as exc:  # noqa: BLE001
        return f"unavailable: {exc}"


def device_info():
    info = {
        "host": platform.node(), "python": sys.version.split()[0], "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if CUDA:
        p = torch.cuda.get_device_properties(0)
        info.update({
            "name": p.name, "sm_count": p.multi_processor_count, "total_memory_bytes": p.total_memory,
            "compute_capability": f"{p.major}.{p.minor}",
            "l2_cache_bytes": getattr(p, "L2_cache_size", None),
            "cudnn": torch.backends.cudnn.version(),
            "cublas": _cublas_version(),
        })
        info["nvidia_smi"] = run_command(["nvidia-smi", "--query-gpu=name,driver_version,pstate,clocks.sm,clocks.mem,"
                                   "clocks.max.sm,clocks.max.mem,power.limit,power.draw,temperature.gpu,"
                                   "ecc.mode.current", "--format=csv"]).strip()
        info["nvidia_smi_q_clocks"] = run_command(["nvidia-smi", "-q", "-d", "CLOCK,POWER,PERFORMANCE"])[:6000]
    else:
        info.update({"name": "cpu (dry run)", "sm_count": 8, "l2_cache_bytes": 4 << 20})
    return info


def _cublas_version():
    try:
        import ctypes
        import glob
        for path in glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cublas", "lib",
                                           "libcublas.so*")) + ["libcublas.so"]:
            try:
                lib = ctypes.CDLL(path)
                v = ctypes.c_int()
                lib.cublasGetProperty(0, ctypes.byref(v))
                major = v.value
                lib.cublasGetProperty(1, ctypes.byref(v))
                minor = v.value
                lib.cublasGetProperty(2, ctypes.byref(v))
                return f"{major}.{minor}.{v.value}"
            except OSError:
                continue
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"
    return "unknown"


# ----------------------------------------------------------------------------------------------- GEMMs

#: name: (hidden, ffn, heads, kv_heads, head_dim, gated FFN), and the TP degrees measured.
