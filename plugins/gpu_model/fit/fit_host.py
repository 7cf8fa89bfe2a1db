"""Fit the host model (``astra run --host-launch-us / --host-sync-us``) on the measured layer steps.

``calibration/nvidia-h200-*/layer.csv`` has eleven transformer-layer configurations (four layers, forward and
backward, one GPU) timed end to end in eager PyTorch, and ``layer_kernels.csv.gz`` every kernel of one such
step with its measured duration. Replaying each step's kernels in order on one stream, with the host
launching kernel ``k`` at ``k x L`` and the GPU adding 1 µs between dependent kernels (``launch.csv``: back to
back kernels as a CUDA graph), gives a step time; ``L`` is the smallest per-kernel host time that brings
every configuration within 5 % of its measured step. Only configurations of short kernels constrain it (the
others are GPU-bound at any ``L`` below about 40 µs), so it is a property of the measuring host's PyTorch
(Python, the autograd engine, the caching allocator per kernel), not of the GPU.

The host's wait after a point-to-point transfer is ``torch.cuda.synchronize()``'s round trip minus one op's
dispatch (``launch.csv``: synchronize_after_tiny - host_dispatch_tiny_add).

    .venv/bin/python plugins/gpu_model/fit/fit_host.py     # writes src/astra_gpu_model/data/host_launch.json
"""

from __future__ import annotations

import csv
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "calibration" / "nvidia-h200-2026-11-26"
OUT = HERE.parent / "src" / "astra_gpu_model" / "data" / "host_launch.json"
GPU_GAP_US = 1.0
TOLERANCE = 0.05


def step_us(kernels, launch_us):
    """One stream: kernel k starts at max(its launch, the previous kernel's end + the GPU gap)."""
    end = 0.0
    for k, duration in enumerate(kernels):
        start = max(k * launch_us, end + GPU_GAP_US) if k else 0.0
        end = start + duration
    return end


def fit(data=DATA):
    kernels = defaultdict(list)
    for row in csv.DictReader(gzip.open(data / "layer_kernels.csv.gz", "rt")):
        kernels[row["config"]].append((float(row["start_us"]), float(row["dur_us"])))
    steps = {row["config"]: float(row["time_us"]) for row in csv.DictReader(open(data / "layer.csv"))
             if row["mode"] == "eager"}
    ordered = {c: [d for _, d in sorted(k)] for c, k in kernels.items()}
    for tenth in range(0, 1000):
        launch = tenth / 10
        errors = {c: step_us(ordered[c], launch) / steps[c] - 1 for c in ordered}
        if all(e > -TOLERANCE for e in errors.values()):
            break
    launch_rows = {r["test"]: float(r["value_us"]) for r in csv.DictReader(open(data / "launch.csv"))}
    sync = launch_rows["synchronize_after_tiny"] - launch_rows["host_dispatch_tiny_add"]
    return launch, sync, errors


def main():
    launch, sync, errors = fit()
    OUT.write_text(json.dumps({
        "generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_host.py (from the repository root)",
        "data": "calibration/nvidia-h200-2026-11-26/layer.csv, layer_kernels.csv.gz, launch.csv",
        "host": "the measuring machine: Firecracker VM, 16 vCPUs, eager PyTorch 2.11 (one tiny op: 7.5 us)",
        "host_launch_us": launch, "host_sync_us": round(sync, 1),
        "step_error_by_config": {c: round(e, 4) for c, e in sorted(errors.items())},
    }, indent=1) + "\n")
    print(f"host_launch_us {launch}  host_sync_us {sync:.1f}")
    for c, e in sorted(errors.items()):
        print(f"  {c:20s} {100 * e:+.1f} %")
    print(f"median {100 * statistics.median(errors.values()):+.1f} %")


if __name__ == "__main__":
    main()
