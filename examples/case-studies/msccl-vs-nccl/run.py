"""MSCCL-IR all-reduce algorithms against NCCL's, on an 8 x H100 NVSwitch node and on a 72-GPU NVL72 domain.

    .venv/bin/python examples/case-studies/msccl-vs-nccl/run.py [--small] [--out DIR]

An all-reduce from 64 KiB to 64 MiB, timed six ways: NCCL's cost model (plugins/gpu_model, calibrated on
nccl-tests), the kernel's native ring, NCCL's ring written as MSCCL-IR, the all-pairs algorithm of the MSCCLang
paper written as MSCCL-IR (both run by plugins/collectives_msccl, with their protocols' wire overhead:
``--msccl-protocol``), and the load-store ``nvls`` and ``ls_oneshot`` kernels (plugins/gpu_model, cache-line
granularity). The network is one NVSwitch domain, the platform's scale-up bandwidth and hop latency, on the
``flow`` backend (max-min fair sharing of each GPU's port). Two sweeps (8 and 72 GPUs), about 2 minutes on 2
cores. ``--small`` runs the 8-GPU node at three sizes (64 KiB, 1 MiB, 16 MiB; about 10 s). The headline is NCCL's ring
(as MSCCL-IR) over all-pairs at 1 MiB on 8 x H100: the same executor, backend and costs, only the algorithm
differs (README.md says why it is not the paper's 1.9x). ``figure.png`` is the 8-GPU sweep,
``figure-nvl72.png`` the 72-GPU one (log time axis).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from algorithms import allpairs_allreduce_xml, ring_allreduce_xml  # noqa: E402
from casestudy import check, draw, parse_args, step_ns, sweep  # noqa: E402

from astra_sim.platforms import get_platform  # noqa: E402
from astra_sim.safeio import write_text_atomic  # noqa: E402

#: the two scale-up domains: platform name (its GPU, scale-up bandwidth, hop latency and HBM bandwidth, with
#: their sources: ``astra platforms --json``) and the GPUs of one domain
DOMAINS = {"h100x8": ("hgx-h100", 8), "nvl72": ("gb200-nvl72", 72)}
SIZES = ["64KiB", "256KiB", "1MiB", "4MiB", "16MiB", "64MiB"]
SMALL_SIZES = ["64KiB", "1MiB", "16MiB"]
HEADLINE_SIZE = "1MiB"
#: system configuration name -> (the native implementation, the MSCCL-IR program or None)
ALGORITHMS = {"nccl": ("nccl", None), "native_ring": ("ring", None), "msccl_ring": ("ring", "ring"),
              "msccl_allpairs": ("ring", "allpairs"), "nvls": ("nvls", None), "ls_oneshot": ("ls_oneshot", None)}
AXIS = "run.system-configuration"


def machine(out, domain):
    """Write the domain's network, its two MSCCL-IR programs and one system JSON per algorithm; their paths."""
    platform, npus = DOMAINS[domain]
    facts = get_platform(platform).describe(1)
    folder = out / domain
    folder.mkdir(parents=True, exist_ok=True)
    network = folder / "network.yml"
    write_text_atomic(network, f"topology: [Switch]\nnpus_count: [{npus}]\n"
                               f"bandwidth: [{facts['scaleup_gib_per_s_per_direction']}]\n"
                               f"latency: [{facts['scaleup_hop_latency_ns']}]\n")
    programs = {"ring": ring_allreduce_xml(npus), "allpairs": allpairs_allreduce_xml(npus)}
    for name, text in programs.items():
        write_text_atomic(folder / f"{name}_{npus}gpu.xml", text)
    systems = []
    for name, (native, program) in ALGORITHMS.items():
        system = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
                  "preferred-dataset-splits": 1, "collective-optimization": "baseline",
                  "local-mem-bw": facts["hbm_bandwidth_gbps"],  # the MSCCL reductions' cost: the GPU's HBM
                  "all-reduce-implementation": [native],
                  **{f"{kind}-implementation": ["ring"] for kind in ("all-gather", "reduce-scatter", "all-to-all")}}
        if program:
            system["all-reduce-implementation-custom"] = [str(folder / f"{program}_{npus}gpu.xml")]
        path = folder / f"{name}.json"
        write_text_atomic(path, json.dumps(system, indent=1) + "\n")
        systems.append(str(path))
    return facts, network, systems


def spec(out, domain, sizes):
    facts, network, systems = machine(out, domain)
    return {"workload": {"micro": {"collective": "all_reduce", "size": sizes[0], "npus": DOMAINS[domain][1]}},
            "run": {"system-configuration": systems[0], "network-configuration": str(network),
                    "network-backend": "flow", "gpu": facts["gpu"], "msccl-protocol": True},
            "axes": {"grid": {"workload.micro.size": sizes, AXIS: systems}}}


def short(rows):
    """The rows with each system configuration named by its algorithm (the figure's legend)."""
    return [dict(row, **{AXIS: Path(row[AXIS]).stem}) for row in rows]


def main_(argv=None):
    args = parse_args(argv, __doc__)
    domains = ["h100x8"] if args.small else list(DOMAINS)
    sizes = SMALL_SIZES if args.small else SIZES
    headline = None
    for domain in domains:
        axes, rows = sweep(spec(args.out, domain, sizes), args.out, f"msccl_{domain}", args.jobs)
        rows = short(rows)
        name = "figure.png" if domain == "h100x8" else f"figure-{domain}.png"
        draw(axes, rows, args.out / name, f"all-reduce on {domain}: time per algorithm and size", log=True)
        print(f"{domain}: all-reduce time (us), flow backend")
        print(f"{'size':>8} " + " ".join(f"{a:>15}" for a in ALGORITHMS))
        times = {}
        for size in sizes:
            times[size] = {a: step_ns(rows, {"workload.micro.size": size, AXIS: a}) for a in ALGORITHMS}
            print(f"{size:>8} " + " ".join(f"{times[size][a] / 1e3:>15.2f}" for a in ALGORITHMS))
        if domain == "h100x8":
            at = times[HEADLINE_SIZE]
            headline = at["msccl_ring"] / at["msccl_allpairs"]
    print(f"results and figures in {args.out}")
    return check(HERE, args.small, headline, args.out)


if __name__ == "__main__":
    raise SystemExit(main_())
