"""What in-switch reduction at the leaf, the spine, or both does to a GPT-3 175B step on 1024 H100.

    python examples/in_switch/run.py [--micro-batches 8] [--out DIR]

Writes the network and the four system configurations next to this file (``configs/``), generates the
workload (``astra workload llm``, TP 8, PP 8, DP 16, sequence parallel) into ``--out`` (a temporary folder by
default), runs ``astra run`` once per placement of ``inSwitch`` and prints the step times. About a minute on
two cores (each run simulates 8 ranks, folded).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from astra_sim.cli import main
from astra_sim.testing import system_config

HERE = Path(__file__).resolve().parent

#: 128 nodes of 8 H100: dimension 0 the NVSwitch (450 GB/s = 419.1 GiB/s per direction), dimension 1 the leaf
#: switches (16 nodes per leaf and rail), dimension 2 the spine (8 leaves per rail), 400 Gb/s NICs
#: (50 GB/s = 46.57 GiB/s). Latencies per hop: NVSwitch 250 ns, leaf 500 ns, spine 1000 ns (assumptions).
NETWORK = """\
# 1024 H100: NVSwitch x leaf x spine, a two-tier rail-optimised fabric (examples/in_switch/README.md)
topology: [ Switch, Switch, Switch ]
npus_count: [ 8, 16, 8 ]
bandwidth: [ 419.1, 46.57, 46.57 ]
latency: [ 250.0, 500.0, 1000.0 ]
cross_dimension_route: dimension_order
# each switch may reduce (the default); inSwitch in the system configuration decides where it does
switch_reduction: [ true, true, true ]
"""

#: where inSwitch runs: the algorithm per dimension (NVSwitch, leaf, spine)
PLACEMENTS = {
    "none": ["ring", "ring", "ring"],
    "leaf": ["ring", "inSwitch", "ring"],
    "spine": ["ring", "ring", "inSwitch"],
    "both": ["ring", "inSwitch", "inSwitch"],
}


def write_configs(directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "network.yml").write_text(NETWORK)
    for name, impl in PLACEMENTS.items():
        config = system_config(3, "ring", local_mem_bw=3350, peak_perf=989)
        for key in ("all-reduce", "all-gather", "reduce-scatter"):
            config[f"{key}-implementation"] = impl
        config["comm-streams"] = "per-communicator"
        (directory / f"system_{name}.json").write_text(json.dumps(config, indent=1) + "\n")


def main_(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--out", default=None, help="folder for the workload and reports (default: a temporary one)")
    args = parser.parse_args(argv)
    configs = HERE / "configs"
    write_configs(configs)
    out = Path(args.out or tempfile.mkdtemp(prefix="astra-in-switch-"))
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / "gpt3"
    rc = main(["workload", "llm", "--preset", "gpt3-175b", "--tp", "8", "--pp", "8", "--dp", "16",
               "--micro-batches", str(args.micro_batches), "--sequence-parallel", "-o", str(prefix)])
    if rc:
        return rc
    times = {}
    for name in PLACEMENTS:
        report = out / f"report_{name}.json"
        rc = main(["run", "--workload-configuration", str(prefix),
                   "--comm-group-configuration", f"{prefix}.groups.json",
                   "--system-configuration", str(configs / f"system_{name}.json"),
                   "--network-configuration", str(configs / "network.yml"),
                   "--compute-model", "gpu", "--gpu", "H100-SXM5-80GB", "-q", "--report-json", str(report)])
        if rc:
            return rc
        times[name] = max(r["finish_ns"] for r in json.loads(report.read_text())["ranks"])
    base = times["none"]
    print("inSwitch at | step time (s) | vs none")
    for name, ns in times.items():
        print(f"{name:11} | {ns / 1e9:13.4f} | {100 * (ns - base) / base:+.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
