#!/usr/bin/env python3
"""Fit the ``nccl`` collective's measured-time calibration on Vidur's all-reduce sweeps.

Regenerate the checked-in fit (from the repository root):

    .venv/bin/python plugins/gpu_model/fit/fit_nccl.py \\
        --out plugins/gpu_model/src/astra_gpu_model/data/nccl_fit.json

(the data is ``shared/calibration/vidur_measured_all_reduce_*.csv``, found beside the repository or via
$ASTRA_SHARED_DIR, and, for AMD Instinct's ``cdna3``, the published MI300X RCCL sweep in
``astra_gpu_model/data/published_rccl_all_reduce_mi300x.csv``). It prints the error tables that README.md shows.

Method. Every single-node row from 2 KB to 64 MB is one point. NCCL's own model (no calibration) picks
the (algo, proto) pair and gives its two terms, ``lat`` and ``nBytes/algBw``. Per architecture the model

    time = overhead_us + latency_scale * lat + (nBytes/algBw) * inv_efficiency[link/algo/proto]

is linear in its parameters; they minimise the sum of ``|predicted - measured| / measured`` (iteratively
reweighted least squares, numpy only). A negative overhead is not physical: it is then fixed at 0 and the
rest refitted. The script also reports two checks the fit does not see: fitting on a random half of the
sizes and scoring the other half, and (DGX files) fitting without the 8-GPU rows and scoring them; and the
a100_pairwise rows above 64 MB (up to 512 MB), which are never fitted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))  # run from a checkout without installing

from astra_gpu_model.calibration import VIDUR_ALL_REDUCE, find_calibration_dir, load_vidur_all_reduce  # noqa: E402
from astra_gpu_model.nccl import (  # noqa: E402
    CALIBRATION_ARCH, NcclCalibration, beyond_fit_efficiency, collective_time_us, config_for_gpu, predict,
)

FIT_MAX_BYTES = 64 << 20
#: RCCL on 8 MI300X (issue 40): the published sweep the ``cdna3`` calibration is fitted on (its source in the file).
RCCL_MI300X = HERE.parents[1] / "src" / "astra_gpu_model" / "data" / "published_rccl_all_reduce_mi300x.csv"
FIT_MIN_BYTES = 2 << 10  # as Vidur's rows: smaller sizes are latency noise


def points(cal_dir, max_bytes=FIT_MAX_BYTES, min_bytes=0):
    """Rows as dicts: file, arch, n, size, measured, lat, bw, key (link/algo/proto)."""
    out = []
    for stem, (preset, topology) in VIDUR_ALL_REDUCE.items():
        raw = config_for_gpu(preset, topology=topology, calibrated=False)
        for n, size, measured in load_vidur_all_reduce(cal_dir / f"vidur_measured_all_reduce_{stem}.csv",
                                                       max_bytes=max_bytes):
            if size <= min_bytes:
                continue
            _, algo, proto, lat, bw = predict("all_reduce", size, n, raw)[0]
            out.append(dict(file=stem, preset=preset, topology=topology, arch=CALIBRATION_ARCH[raw.arch], n=n,
                            size=size, measured=measured, lat=lat, bw=bw, key=f"{raw.link(n)}/{algo}/{proto}"))
    return out


def rccl_points(path=RCCL_MI300X, max_bytes=FIT_MAX_BYTES, min_bytes=FIT_MIN_BYTES):
    """The published MI300X sweep's rows as :func:`points` gives Vidur's: 8 GPUs, one node (MSCCL's all-pairs
    all-reduce has its own factors: RCCL's ring and the all-pairs kernels are different code)."""
    import csv

    raw = config_for_gpu("MI300X", calibrated=False)
    with open(path) as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    out = []
    for row in rows:
        size, measured = int(row["size_bytes"]), float(row["time_us"])
        if not min_bytes <= size <= max_bytes:
            continue
        _, algo, proto, lat, bw = predict("all_reduce", size, 8, raw)[0]
        out.append(dict(file="rccl_mi300x", preset="MI300X", topology="nvswitch", arch="cdna3", n=8, size=size,
                        measured=measured, lat=lat, bw=bw, key=f"{raw.link(8)}/{algo}/{proto}"))
    return out


def _irls(A, y, iters=80):
    """Minimise sum |A x - y| / y."""
    w = 1.0 / y
    x = None
    for _ in range(iters):
        x, *_ = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)
        rel = np.abs(A @ x - y) / y
        w = 1.0 / (y * np.maximum(rel, 1e-4))
    return x


def fit_arch(rows):
    keys = sorted({r["key"] for r in rows})
    y = np.array([r["measured"] for r in rows])
    A = np.zeros((len(rows), 2 + len(keys)))
    for i, r in enumerate(rows):
        A[i, 0] = 1.0
        A[i, 1] = r["lat"]
        A[i, 2 + keys.index(r["key"])] = r["bw"]
    x = _irls(A, y)
    if x[0] < 0:
        x = np.concatenate([[0.0], _irls(A[:, 1:], y)])
    return NcclCalibration(float(x[0]), float(x[1]), {k: float(1.0 / v) for k, v in zip(keys, x[2:])})


def fit(rows):
    return {arch: fit_arch([r for r in rows if r["arch"] == arch]) for arch in sorted({r["arch"] for r in rows})}


def errors(calibration, rows):
    """Relative errors of the full model (choice + calibrated time) on ``rows``."""
    out = []
    configs = {}
    for r in rows:
        key = (r["preset"], r["topology"], r["arch"])
        if key not in configs:
            configs[key] = config_for_gpu(r["preset"], topology=r["topology"], calibration=calibration[r["arch"]])
        cfg = configs[key]
        t = collective_time_us("all_reduce", r["size"], r["n"], cfg)[0]
        out.append((t - r["measured"]) / r["measured"])
    return out


def table(calibration, rows, title):
    lines = [f"### {title}", "", "| file | n | rows | median abs err | median signed | < 1 MB | ≥ 1 MB |",
             "|---|---|---|---|---|---|---|"]
    for stem in VIDUR_ALL_REDUCE:
        sel = [r for r in rows if r["file"] == stem]
        if not sel:
            continue
        for n in sorted({r["n"] for r in sel}) + ["all"]:
            part = sel if n == "all" else [r for r in sel if r["n"] == n]
            err = errors(calibration, part)
            small = [abs(e) for e, r in zip(err, part) if r["size"] < 1 << 20]
            large = [abs(e) for e, r in zip(err, part) if r["size"] >= 1 << 20]
            med = lambda v: f"{100 * statistics.median(v):.1f}%" if v else "-"  # noqa: E731
            name = f"**{stem}**" if n == "all" else stem
            lines.append(f"| {name} | {n} | {len(part)} | {med([abs(e) for e in err])} | "
                         f"{100 * statistics.median(err):+.1f}% | {med(small)} | {med(large)} |")
    return "\n".join(lines) + "\n"


def multinode_rows(cal_dir):
    """a100_dgx rows with num_nodes > 1: {(gpus, gpus_per_node): [(size, measured_us)]}."""
    out = {}
    for row in load_vidur_all_reduce(cal_dir / "vidur_measured_all_reduce_a100_dgx.csv", single_node=False,
                                     with_layout=True):
        n, ppn, nodes, size, measured = row
        if nodes > 1:
            out.setdefault((n, ppn), []).append((size, measured))
    return out


def multinode_errors(rows, n, ppn, node_nic_gbps):
    """Relative errors of the model on ``rows`` of one layout, NICs giving ``node_nic_gbps`` per node."""
    cfg = config_for_gpu("A100-SXM4-80GB", nic_gbps=node_nic_gbps / ppn)
    return [(collective_time_us("all_reduce", size, n, cfg, n // ppn)[0] - m) / m for size, m in rows]


def multinode_table(cal_dir):
    """Vidur's fabric is undocumented: per layout, the node NIC bandwidth that fits best (one number for
    ~1000 rows), and the error left; the fitted bandwidths themselves show what the fabric did."""
    lines = ["### Multi-node rows (a100_dgx, 2 nodes): node NIC bandwidth fitted per layout", "",
             "| GPUs | GPUs/node | rows | fitted node NIC GB/s | median abs err | median signed |",
             "|---|---|---|---|---|---|"]
    for (n, ppn), rows in sorted(multinode_rows(cal_dir).items()):
        best = min((statistics.median(abs(e) for e in multinode_errors(rows, n, ppn, bw)), bw)
                   for bw in (0.25 * k for k in range(8, 161)))
        err = multinode_errors(rows, n, ppn, best[1])
        lines.append(f"| {n} | {ppn} | {len(rows)} | {best[1]:g} | {100 * best[0]:.1f}% | "
                     f"{100 * statistics.median(err):+.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--calibration-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="write the fit here (JSON)")
    args = ap.parse_args(argv)
    cal_dir = args.calibration_dir or find_calibration_dir(HERE)
    if cal_dir is None:
        sys.exit("fit_nccl.py: shared/calibration not found (set ASTRA_SHARED_DIR or pass --calibration-dir)")
    rows = points(cal_dir)
    calibration = fit(rows)
    print(table(calibration, rows, "Fitted model on the fitting rows (single node, 2 KB - 64 MB)"))

    rng = random.Random(1)
    sizes = sorted({r["size"] for r in rows})
    half = set(rng.sample(sizes, len(sizes) // 2))
    cal_half = fit([r for r in rows if r["size"] in half])
    print(table(cal_half, [r for r in rows if r["size"] not in half], "Fitted on a random half of the sizes, "
                "scored on the other half"))
    held = lambda r: r["file"].endswith("_dgx") and r["n"] == 8  # noqa: E731
    cal_no8 = fit([r for r in rows if not held(r)])
    print(table(cal_no8, [r for r in rows if held(r)], "Fitted without the 8-GPU DGX rows, scored on them"))
    big = points(cal_dir, max_bytes=None, min_bytes=FIT_MAX_BYTES)
    print(table(calibration, big, "Rows above 64 MB (never fitted)"))
    print(multinode_table(cal_dir))

    rccl = rccl_points()
    calibration["cdna3"] = fit_arch(rccl)
    err = errors(calibration, rccl)
    print(f"### RCCL on 8 MI300X (hisohara/ai-scripts, {len(rccl)} rows, 2 KB - 64 MB): median abs err "
          f"{100 * statistics.median(abs(e) for e in err):.1f}%, max {100 * max(abs(e) for e in err):.1f}%\n")

    beyond = beyond_fit_efficiency()
    print("Past 64 MB on NVSwitch (factor on NCCL's algBw from the published peak):", beyond)
    if args.out:
        payload = {
            "generated_by": ".venv/bin/python plugins/gpu_model/fit/fit_nccl.py --out "
                            "plugins/gpu_model/src/astra_gpu_model/data/nccl_fit.json (from the repository root)",
            "fitting_data": [f"vidur_measured_all_reduce_{s}.csv" for s in VIDUR_ALL_REDUCE]
            + [f"astra_gpu_model/data/{RCCL_MI300X.name} (cdna3: hisohara/ai-scripts rccl-smoketest, 8 MI300X)"],
            "rows": "num_nodes == 1, 2 KB <= size_bytes <= 64 MB, time_ms_median (cdna3: time_us, out-of-place)",
            "objective": "sum |predicted - measured| / measured",
            "beyond_fit": {"fitted_max_bytes": FIT_MAX_BYTES, "source": "astra_gpu_model.nccl.PEAK_STATEMENTS: "
                           "NVIDIA/nccl-tests#212 (S. Jeaugey): ring 370 GB/s, NVLS all-reduce 480 GB/s bus bandwidth "
                           "on 8 H100, and the ring's 370/450 share of the line rate on A100's 300 GB/s NVLink 3; "
                           "GTC 2024 S62129: NVLS 480 GB/s; Blackwell NVLS on 8 GPUs: NVIDIA/nccl#1807 (8 B200, "
                           "830 GB/s) and lixueduan.com (8 GB200 over MNNVL, 811 GB/s); MI300X (cdna3) ring: hisohara/ai-scripts "
                           "rccl-smoketest's 8 GiB row, 315.69 GB/s",
                           "efficiency": beyond},
            "architectures": {
                arch: {"overhead_us": round(c.overhead_us, 4), "latency_scale": round(c.latency_scale, 5),
                       "efficiency": {k: round(v, 5) for k, v in c.efficiency.items()}}
                for arch, c in calibration.items()
            },
        }
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
