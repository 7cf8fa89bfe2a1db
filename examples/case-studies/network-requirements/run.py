"""How much scale-out bandwidth a GPT-3 175B training step can use: the step time against the NIC bandwidth.

    .venv/bin/python examples/case-studies/network-requirements/run.py [--small] [--out DIR]

GPT-3 175B (96 layers), TP 8 x PP 8 x DP 16 on 1024 H100 (the ``hgx-h100`` platform: NVSwitch in the node, a
rail-optimised non-blocking fat tree across nodes, NCCL's collectives, the GPU compute model), 8 micro-batches,
sequence parallel; the NIC bandwidth per GPU from 50 Gb/s to 3.2 Tb/s (about 35 s on 2 cores). Then the
oversubscription of a 2-tier fat tree (examples/infragraph/clos_dgx_h100 at 1:1, 2:1, 4:1, flow backend, 128 GPUs;
about 2.5 minutes). ``--small`` runs the first sweep only, with 16 layers and the points the headline needs
(about 10 s). The
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


#: the fat tree of the oversubscription sweep: 16 DGX H100 under 8 leaves and 8 spines, 800 Gb/s leaf-spine links
#: (examples/infragraph/clos_dgx_h100: non-blocking); an o:1 tree gets 800 / o Gb/s per leaf-spine link
CLOS = HERE.parents[1] / "infragraph" / "clos_dgx_h100"
OVERSUBSCRIPTION = [1, 2, 4]


def oversubscribed_networks(out):
    """The Clos's InfraGraph copied into ``out`` once per oversubscription, its leaf-spine links slowed; the
    network wrappers' paths made absolute (a sweep point reads its network from a private folder)."""
    import yaml

    from astra_sim.safeio import load_yaml, write_text_atomic

    infra = load_yaml(CLOS / "infrastructure.yaml", "the Clos example's infrastructure")
    wrapper = load_yaml(CLOS / "network.yaml", "the Clos example's network")
    (link,) = [link for link in infra["links"] if link["name"] == "leaf_spine"]
    full = link["physical"]["bandwidth"]["gigabits_per_second"]
    paths = []
    for ratio in OVERSUBSCRIPTION:
        link["physical"]["bandwidth"]["gigabits_per_second"] = full / ratio
        write_text_atomic(out / f"clos_{ratio}to1.yaml", yaml.safe_dump(infra, sort_keys=False))
        network = dict(wrapper, infrastructure=str(out / f"clos_{ratio}to1.yaml"),
                       annotations=str(CLOS / wrapper["annotations"]))
        write_text_atomic(out / f"network_{ratio}to1.yaml", yaml.safe_dump(network, sort_keys=False))
        paths.append(str(out / f"network_{ratio}to1.yaml"))
    return paths


def oversubscription_spec(networks):
    """GPT-3 175B cut to 8 layers, TP 8 x DP 16 on the Clos's 128 GPUs, the flow backend; the kernel's ring
    collectives (NCCL's model times collectives without the fabric, so it would not see the spine)."""
    return {"workload": {"llm": {"preset": "gpt3-175b", "layers": 8, "tp": 8, "dp": 16, "micro-batches": 4,
                                 "sequence-parallel": True}},
            "run": {"platform": "hgx-h100", "compute-model": "gpu", "network-backend": "flow",
                    "platform-collective": "ring"},
            "axes": {"grid": {"run.network-configuration": networks}}}


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
    if not args.small:
        networks = oversubscribed_networks(args.out)
        axes, rows = sweep(oversubscription_spec(networks), args.out, "oversubscription", args.jobs)
        draw(axes, rows, args.out / "figure-oversubscription.png",
             "GPT-3 175B (8 layers), 128 H100 on a 2-tier Clos: 1:1, 2:1, 4:1")
        print(f"{'leaf:spine':>10} {'step (ms)':>10}")
        for ratio, path in zip(OVERSUBSCRIPTION, networks):
            print(f"{f'{ratio}:1':>10} {ms(step_ns(rows, {'run.network-configuration': path})):>10}")
    print(f"results and figures in {args.out}")
    return check(HERE, args.small, steps[TODAY] / steps[FAST], args.out)


if __name__ == "__main__":
    raise SystemExit(main_())
