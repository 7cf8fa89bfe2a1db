"""What in-switch reduction at the leaf, the spine, or both does to a GPT-3 175B step on 1024 H100.

    python examples/in_switch/run.py [--micro-batches 8] [--out DIR]

Writes the two fabrics' networks and the four system configurations next to this file (``configs/``), generates
the workload (``astra workload llm``, TP 8, PP 8, DP 16, sequence parallel) into ``--out`` (a temporary folder by
default), runs ``astra run`` once per fabric and placement of ``inSwitch`` and prints the step times and the
exposed in-switch communication of the slowest rank. A few minutes on two cores (each run simulates 8 ranks,
folded). ``--small`` runs the same questions on 128 GPUs and 4 layers (seconds; tests/test_in_switch_example.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

try:
    import astra_sim  # noqa: F401
except ImportError:  # run outside the project's environment: say how to run it, not a traceback
    raise SystemExit(f"{__file__}: astra-sim-py is not installed in this Python; run `make install`, then "
                     f".venv/bin/python {__file__}") from None

from astra_sim.cli import main
from astra_sim.config import default_system_config as system_config
from astra_sim.report import read_report

HERE = Path(__file__).resolve().parent
GPUS_PER_NODE = 8

#: nodes of 8 H100: dimension 0 the NVSwitch (450 GB/s = 419.1 GiB/s per direction), dimension 1 the nodes under
#: one leaf switch (per rail), dimension 2 the leaves under the spine (per rail), 400 Gb/s NICs (50 GB/s =
#: 46.57 GiB/s). Latencies per hop: NVSwitch 250 ns, leaf 500 ns, spine 1000 ns (assumptions).
NETWORK = """\
# {nodes} nodes of 8 H100: NVSwitch x leaf ({per_leaf} nodes per leaf and rail) x spine ({leaves} leaves per rail),
# a two-tier rail-optimised fabric (examples/in_switch/README.md)
topology: [ Switch, Switch, Switch ]
npus_count: [ 8, {per_leaf}, {leaves} ]
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


def fabrics(nodes, dp):
    """``{name: (nodes per leaf, leaves)}``: leaves as wide as a data-parallel group (its all-reduce stays in
    one leaf), and leaves a quarter of that (the group spans four leaves: leaf and spine)."""
    return {"dp-in-leaf": (dp, nodes // dp), "dp-across-spine": (dp // 4, nodes * 4 // dp)}


def write_configs(directory, nodes=128, dp=16):
    directory.mkdir(parents=True, exist_ok=True)
    for name, (per_leaf, leaves) in fabrics(nodes, dp).items():
        text = NETWORK.format(nodes=nodes, per_leaf=per_leaf, leaves=leaves)
        (directory / f"network_{name}.yml").write_text(text)
    for name, impl in PLACEMENTS.items():
        config = system_config(3, "ring", local_mem_bw=3350, peak_perf=989)
        for key in ("all-reduce", "all-gather", "reduce-scatter"):
            config[f"{key}-implementation"] = impl
        config["comm-streams"] = "per-communicator"
        (directory / f"system_{name}.json").write_text(json.dumps(config, indent=1) + "\n")


def main_(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--small", action="store_true",
                        help="128 GPUs (TP 8, PP 2, DP 8), 4 layers, 2 micro-batches: the same questions in seconds")
    parser.add_argument("--out", default=None, help="folder for the workload and reports (default: a temporary one)")
    parser.add_argument("--json", default=None, help="also write the step times (ns) and parts here")
    args = parser.parse_args(argv)
    tp, pp, dp, extra = 8, 8, 16, []
    micro = args.micro_batches
    if args.small:
        pp, dp, micro, extra = 2, 8, 2, ["--layers", "4"]
    nodes = tp * pp * dp // GPUS_PER_NODE
    out = Path(args.out or tempfile.mkdtemp(prefix="astra-in-switch-"))
    out.mkdir(parents=True, exist_ok=True)
    configs = HERE / "configs" if not args.small else out / "configs"
    write_configs(configs, nodes, dp)
    prefix = out / "gpt3"
    rc = main(["workload", "llm", "--preset", "gpt3-175b", "--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
               "--micro-batches", str(micro), "--sequence-parallel", "-o", str(prefix), *extra])
    if rc:
        return rc
    results = {}
    for fabric in fabrics(nodes, dp):
        for name in PLACEMENTS:
            report = out / f"report_{fabric}_{name}.json"
            rc = main(["run", "--workload-configuration", str(prefix),
                       "--comm-group-configuration", f"{prefix}.groups.json",
                       "--system-configuration", str(configs / f"system_{name}.json"),
                       "--network-configuration", str(configs / f"network_{fabric}.yml"),
                       "--compute-model", "gpu", "--gpu", "H100-SXM5-80GB", "-q", "--report-json", str(report)])
            if rc:
                return rc
            data = read_report(report)  # astra run writes the compact layout; this gives every rank
            parts = data["breakdown"]["parts"]
            results[f"{fabric}/{name}"] = {
                "step_ns": max(r["finish_ns"] for r in data["ranks"]),
                "exposed_dp_ns": parts.get("exposed:dp", 0),
                "exposed_in_switch_dp_ns": parts.get("exposed_in_switch:dp", 0),
                "warnings": data.get("warnings", []),
            }
    print("fabric          | inSwitch at | step time (s) | vs none | exposed dp / in-switch (ms)")
    for key, row in results.items():
        fabric, name = key.split("/")
        base = results[f"{fabric}/none"]["step_ns"]
        print(f"{fabric:15} | {name:11} | {row['step_ns'] / 1e9:13.4f} | {100 * (row['step_ns'] - base) / base:+6.1f} % |"
              f" {row['exposed_dp_ns'] / 1e6:.2f} / {row['exposed_in_switch_dp_ns'] / 1e6:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
