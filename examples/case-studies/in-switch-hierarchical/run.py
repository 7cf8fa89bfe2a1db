"""In-switch all-reduce against ring and direct on a 2-D and a 3-D hierarchical network, on three backends.

    .venv/bin/python examples/case-studies/in-switch-hierarchical/run.py [--small] [--out DIR]

A 256 MiB all-reduce on 64 GPUs (8 per node under an NVSwitch, 400 Gb/s NICs to the scale-out switches), with
ring, direct, inSwitch on the scale-out dimensions only (SHARP) and inSwitch on every dimension (NVLS + SHARP),
on the analytical, congestion and flow backends: two sweeps (2-D: NVSwitch x leaf; 3-D: NVSwitch x leaf x
spine), about 30 s on 2 cores. ``--small`` runs the 2-D sweep only (about 15 s). The headline is the ring's time
over inSwitch-everywhere's on the 2-D network, analytical backend (README.md says why it is not 2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from casestudy import check, draw, ms, parse_args, step_ns, sweep  # noqa: E402

from astra_sim.safeio import write_text_atomic  # noqa: E402

#: per dimension: NVSwitch 450 GB/s per GPU and direction (H100 SXM datasheet) = 419.1 GiB/s; a 400 Gb/s NIC
#: (ConnectX-7) = 50 GB/s = 46.57 GiB/s per GPU on the leaf and the spine; hop latencies 250 / 500 / 1000 ns
#: (assumptions, as examples/in_switch)
NETWORKS = {
    "2d": {"topology": ["Switch", "Switch"], "npus_count": [8, 8], "bandwidth": [419.1, 46.57],
           "latency": [250.0, 500.0]},
    "3d": {"topology": ["Switch", "Switch", "Switch"], "npus_count": [8, 4, 2], "bandwidth": [419.1, 46.57, 46.57],
           "latency": [250.0, 500.0, 1000.0]},
}
BACKENDS = ["analytical", "congestion", "flow"]
SIZE = "256MiB"


def algorithms(dims):
    """The all-reduce implementation lists compared (one entry per dimension)."""
    return {"ring": ["ring"] * dims, "direct": ["direct"] * dims,
            "inSwitch scale-out": ["ring"] + ["inSwitch"] * (dims - 1), "inSwitch": ["inSwitch"] * dims}


def system(dims):
    """localBWAware (reduce-scatter in the node, all-reduce across, all-gather in the node), 16 chunks so the
    dimensions pipeline, a fast local memory (the NPU-side reductions do not set the time)."""
    return {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
            "preferred-dataset-splits": 16, "collective-optimization": "localBWAware", "local-mem-bw": 3350,
            **{f"{kind}-implementation": ["ring"] * dims for kind in ("all-reduce", "all-gather", "reduce-scatter",
                                                                       "all-to-all")}}


def spec(out, name):
    network = NETWORKS[name]
    dims = len(network["topology"])
    write_text_atomic(out / f"network_{name}.yml", "".join(f"{k}: {json.dumps(v)}\n" for k, v in network.items()))
    write_text_atomic(out / f"system_{name}.json", json.dumps(system(dims), indent=1) + "\n")
    return {"workload": {"micro": {"collective": "all_reduce", "size": SIZE, "npus": 64}},
            "run": {"system-configuration": str(out / f"system_{name}.json"),
                    "network-configuration": str(out / f"network_{name}.yml")},
            "axes": {"grid": {"run.network-backend": BACKENDS,  # the figure's groups; the algorithms its bars
                              "system.all-reduce-implementation": list(algorithms(dims).values())}}}


def main_(argv=None):
    args = parse_args(argv, __doc__)
    names = ["2d"] if args.small else ["2d", "3d"]
    print(f"{SIZE} all-reduce on 64 GPUs, time in ms")
    print(f"{'network':8} {'algorithm':20} " + " ".join(f"{b:>11}" for b in BACKENDS))
    headline = None
    for name in names:
        axes, rows = sweep(spec(args.out, name), args.out, f"in_switch_{name}", args.jobs)
        draw(axes, rows, args.out / f"figure_{name}.png", f"{SIZE} all-reduce, 64 GPUs, {name.upper()} network")
        dims = len(NETWORKS[name]["topology"])
        for label, impl in algorithms(dims).items():
            cells = [step_ns(rows, {"system.all-reduce-implementation": impl, "run.network-backend": backend})
                     for backend in BACKENDS]
            print(f"{name:8} {label:20} " + " ".join(f"{ms(t):>11}" for t in cells))
        if name == "2d":
            def t(impl):
                return step_ns(rows, {"system.all-reduce-implementation": impl, "run.network-backend": "analytical"})

            headline = t(algorithms(dims)["ring"]) / t(algorithms(dims)["inSwitch"])
    print(f"results and figures in {args.out}")
    return check(HERE, args.small, headline, args.out)


if __name__ == "__main__":
    raise SystemExit(main_())
