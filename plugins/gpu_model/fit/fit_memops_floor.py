"""Fit the fixed time of small memory-bound kernels on Hopper from the measured H200 memops (``calibration/nvidia-h200-*``).

The gpu model times a memory-bound kernel as ``floor + bytes / rate``. The floor was the GEMM fit's ``launch_us``
(4.33 us on the H100: the intercept of Vidur's cuBLAS GEMMs), used for every small kernel. The H200's own
measurements (``memops.csv``: each op replayed in a CUDA graph, ``inner`` kernels back to back) time the ops at
16 tokens, where the bytes are a few hundred KB: an add 1.33 us, a mul 1.24, a silu 1.84, an RMSNorm 4.51, a
LayerNorm 6.63 (forward, hidden 4096). Those are a kernel's time plus the GPU's idle time before the next kernel of
the graph, which the gpu model adds apart in graph steps (``model.GRAPH_KERNEL_GAP_NS``). So an op's floor is

    floor = median over hidden 4096 / 5120 / 12288 of (time at 16 tokens - gap - bytes / the op's rate)

with ``bytes`` as the gpu model counts them for the ATen op the generator writes and the op's rate as
``data/memops_fit.json`` gives it (else ``hbm_efficiency`` x the H200's HBM). An ATen op with no measured row takes
the median of the measured floors (``default_us``). The floors hold for every Hopper GPU (the same SMs, clock and
front end as the H200: ASSUMPTION for the H100 SXM / PCIe / NVL, H800 and H20).

    .venv/bin/python plugins/gpu_model/fit/fit_memops_floor.py [--data DIR] [--out FILE]

writes ``src/astra_gpu_model/data/memops_floor.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GRAPH_KERNEL_GAP_NS, memory_op_rates
from astra_gpu_model.ops import classify

from fit_memops import DEFAULT_DATA, _aten  # the measured op -> the ATen ops the generator writes

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "src" / "astra_gpu_model" / "data" / "memops_floor.json"
TOKENS = 16  # the smallest measured size (65-200 K elements a tensor)
MEASURED_ON = "H200-SXM"


def fit(data_dir):
    rates, _ = memory_op_rates()
    gpu = load_gpu(MEASURED_ON)
    hbm = gpu.gemm.hbm_efficiency * gpu.hbm_bytes_per_s
    samples = {}
    for r in csv.DictReader(open(Path(data_dir) / "memops.csv")):
        if not r["status"].startswith("ok") or r["timing"] != "graph" or r["tokens"] != str(TOKENS):
            continue
        spec = _aten(r["op"], r["pass"], int(r["tokens"]), int(r["hidden"]))
        if spec is None:
            continue
        names, shapes, types = spec
        op = classify(names[0], str(shapes), str(types), "", "bf16")
        for name in names:
            rate = min(rates.get(name.split("::", 1)[1], hbm), hbm)
            floor_us = float(r["time_us"]) - GRAPH_KERNEL_GAP_NS * 1e-3 - op.nbytes / rate * 1e6
            samples.setdefault(name.split("::", 1)[1], []).append(floor_us)
    floors = {name: statistics.median(v) for name, v in sorted(samples.items())}
    return floors, {name: len(v) for name, v in samples.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    floors, counts = fit(args.data)
    default = statistics.median(floors.values())
    out = {
        "generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_memops_floor.py (from the repository root)",
        "data": str(Path(args.data).relative_to(HERE.parent)) + "/memops.csv",
        "architecture": "hopper",
        "method": f"median over the hidden sizes of (time at {TOKENS} tokens in a CUDA graph - the "
                  f"{GRAPH_KERNEL_GAP_NS} ns kernel gap - bytes / the op's rate)",
        "floors_us": {name: round(v, 3) for name, v in floors.items()},
        "default_us": round(default, 3),
        "rows": counts,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for name, v in floors.items():
        print(f"{name:40s} {v:6.2f} us  ({counts[name]} rows)")
    print(f"default (median) {default:.2f} us")


if __name__ == "__main__":
    main()
