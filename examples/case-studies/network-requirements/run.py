"""How much scale-out bandwidth a GPT-3 175B training step can use: the step time against the NIC bandwidth.

    .venv/bin/python examples/case-studies/network-requirements/run.py [--small] [--out DIR]

GPT-3 175B (96 layers), TP 8 x PP 8 x DP 16 on 1024 H100 (the ``hgx-h100`` platform: NVSwitch in the node, a
rail-optimised non-blocking fat tree across nodes, NCCL's collectives, the GPU compute model), 8 micro-batches,
sequence parallel; the NIC bandwidth per GPU from 50 Gb/s to 3.2 Tb/s: one sweep, about a minute on 2 cores.
``--small`` cuts the model to 16 layers and the sweep to the points the headline needs (about 20 s). The
headline is the step at 400 Gb/s (today's ConnectX-7) over the step at 1.6 Tb/s: what 4x the scale-out
bandwidth buys.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from casestudy import check, draw, ms, parse_args, step_ns, sweep  # noqa: E402

#: NIC bandwidth per GPU and direction, GB/s: 50 Gb/s ... 3.2 Tb/s (6.25 ... 400 GB/s)
NIC_GBPS = [6.25, 12.5, 25, 50, 100, 200, 400]
SMALL_NIC_GBPS = [12.5, 50, 200]
TODAY, FAST = 50, 200  # GB/s: 400 Gb/s (ConnectX-7, the hgx-h100 platform's NIC) and 1.6 Tb/s


def spec(small):
    model = {"preset": "gpt3-175b", "tp": 8, "pp": 8, "dp": 16, "micro-batches": 8, "sequence-parallel": True}
    if small:
        model["layers"] = 16
    return {"workload": {"llm": model},
            "run": {"platform": "hgx-h100", "compute-model": "gpu", "platform-collective": "nccl"},
            "axes": {"grid": {"platform.nic_gbps": SMALL_NIC_GBPS if small else NIC_GBPS}}}


def main_(argv=None):
    args = parse_args(argv, __doc__)
    axes, rows = sweep(spec(args.small), args.out, "network_requirements", args.jobs)
    title = f"GPT-3 175B{' (16 layers)' if args.small else ''}, 1024 H100: step time against NIC GB/s"
    draw(axes, rows, args.out / "figure.png", title)
    points = SMALL_NIC_GBPS if args.small else NIC_GBPS
    steps = {nic: step_ns(rows, {"platform.nic_gbps": nic}) for nic in points}
    print(f"{'NIC (Gb/s)':>10} {'step (ms)':>10} {'vs the row above':>22}")
    previous = None
    for nic in points:
        gain = "" if previous is None else f"{(steps[previous] / steps[nic] - 1) * 100:.1f} % faster"
        print(f"{nic * 8:>10g} {ms(steps[nic]):>10} {gain:>22}")
        previous = nic
    print(f"results and figure in {args.out}")
    return check(HERE, args.small, steps[TODAY] / steps[FAST], args.out)


if __name__ == "__main__":
    raise SystemExit(main_())
