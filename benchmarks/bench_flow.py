"""Benchmark of the ``flow`` network backend: an all-to-all on a 2-tier Clos of 16 DGX-H100.

The fabric mirrors shared/samples/infragraph/generated/infra-clos-2tier-radix16-dgxh100.yaml,
simplified to one switch per role: 16 hosts x 8 GPUs; in each host every GPU has a 450 GB/s
(per direction) link to an NVSwitch-like host switch and a 400 Gb/s (50 GB/s) NIC link to the
host's leaf switch; 16 leaves, each with one 800 Gb/s (100 GB/s) uplink to each of 8 spines.
Latencies: 100 ns per NVLink, 500 ns per NIC or leaf-spine link, 100 ns per leaf/spine switch.
(Bandwidths in the graph's unit, GB = 2^30 bytes, as the analytical backend counts them.)

The workload: one all-to-all of 64 MiB per rank over the 128 ranks (one logical dimension),
system config = ``astra_sim_testing.system_config(algorithm=...)`` (4 chunks, 1 active chunk).
Target: under 60 s on the 2-core development machine.

    python benchmarks/bench_flow.py [--algorithm direct] [--size-mib 64] [--ecmp hash|split]
                                    [--uplink-gbps 100] [--infragraph PATH]

``--infragraph examples/infragraph/clos_dgx_h100/network.yaml`` runs the same workload on the
InfraGraph model of that fabric (every component a node: NVSwitch chips, PCIe, NICs, switch ports).

Prints wall time, simulated time, messages/flows per second, rate recomputations and peak RSS.

    python benchmarks/bench_flow.py --fold GPUS [GPUS ...] [--repeat 3] [--nodes-per-leaf 16]

compares a folded run with ``--no-fold`` instead (issue 37): one all-reduce of ``--size-mib`` (default 64 MiB) per
rank, ring per dimension, on a 2-tier rail fabric (``--fabric rail:nodes_per_leaf=16``: 8 GPUs per host on an
NVSwitch at 450 GB/s, each GPU on its rail's leaf at 50 GB/s, leaves under spines) with ``--flow-ecmp split``;
each run is a fresh ``astra run`` process, alternated, the minimum wall time of ``--repeat`` kept. Checks that
the reports' finish times, breakdown and per-link statistics are identical.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

from astra_sim.chakra import make_metadata, make_node, types as T
from astra_sim.simulation import Simulation
from astra_sim_testing import system_config

from astra_network_congestion.flow import FlowNetwork
from astra_network_congestion.graph import NPU, SWITCH, NetworkGraph

BUDGET_S = 60.0


def dgx_clos(hosts=16, gpus=8, spines=8, nvlink_gbps=450.0, nic_gbps=50.0, uplink_gbps=100.0,
             nvlink_ns=100.0, link_ns=500.0, switch_ns=100.0):
    graph = NetworkGraph(source=f"bench: {hosts}x{gpus} DGX Clos, {spines} spines")
    for s in range(spines):
        graph.add_node(f"spine{s}", SWITCH, switch_ns)
    ranks = []
    for h in range(hosts):
        graph.add_node(f"leaf{h}", SWITCH, switch_ns)
        graph.add_node(f"host{h}.nvsw", SWITCH)
        for s in range(spines):
            graph.add_link(f"leaf{h}", f"spine{s}", uplink_gbps, link_ns, name="tier_1_link")
        for g in range(gpus):
            name = f"host{h}.gpu{g}"
            graph.add_node(name, NPU)
            graph.add_link(name, f"host{h}.nvsw", nvlink_gbps, nvlink_ns, name="nvlink")
            graph.add_link(name, f"leaf{h}", nic_gbps, link_ns, name="tier_0_link")
            ranks.append(name)
    graph.set_ranks(ranks)
    return graph


def write_workload(folder, ranks, size, algorithm):
    os.makedirs(folder, exist_ok=True)
    system = os.path.join(folder, "system.json")
    with open(system, "w") as handle:
        json.dump(system_config(algorithm=algorithm), handle)
    network = os.path.join(folder, "network.txt")  # not read: the graph is given directly
    with open(network, "w") as handle:
        handle.write("flow benchmark graph\n")
    from astra_sim.chakra import encode_et

    node = make_node(0, "all_to_all", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_TO_ALL, "comm_size": size})
    data = encode_et(make_metadata(), [node])
    prefix = os.path.join(folder, "a2a")
    for rank in range(ranks):
        with open(f"{prefix}.{rank}.et", "wb") as handle:
            handle.write(data)
    return prefix, system, network


def fold_compare(gpus_list, repeat, size_mib, nodes_per_leaf):
    """Folded vs --no-fold wall times of an all-reduce on a rail fat tree (see the module docstring)."""
    import subprocess

    astra = os.path.join(os.path.dirname(sys.executable), "astra")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in gpus_list:
            folder = os.path.join(tmp, str(gpus))
            os.makedirs(folder)
            prefix = os.path.join(folder, "w")
            subprocess.run([astra, "workload", "micro", "--collective", "all_reduce", "--npus", str(gpus), "--size",
                            f"{int(size_mib)}MiB", "-o", prefix], check=True, capture_output=True)
            system = os.path.join(folder, "sys.json")
            config = system_config(2, "ring")
            with open(system, "w") as handle:
                json.dump(config, handle)
            network = os.path.join(folder, "net.yml")
            with open(network, "w") as handle:
                handle.write(f"topology: [ Switch, Switch ]\nnpus_count: [ 8, {gpus // 8} ]\n"
                             "bandwidth: [ 450.0, 50.0 ]\nlatency: [ 100.0, 500.0 ]\n")
            base = [astra, "run", "--workload-configuration", prefix, "--system-configuration", system,
                    "--network-configuration", network, "--network-backend", "flow", "--flow-ecmp", "split",
                    "--fabric", f"rail:nodes_per_leaf={nodes_per_leaf}", "-q"]
            walls = {"folded": [], "unfolded": []}
            reports = {}
            for _ in range(repeat):
                for name, extra in (("folded", []), ("unfolded", ["--no-fold"])):
                    out = os.path.join(folder, f"{name}.json")
                    start = time.perf_counter()
                    subprocess.run(base + extra + ["-o", out], check=True, capture_output=True)
                    walls[name].append(time.perf_counter() - start)
                    with open(out) as handle:
                        reports[name] = json.load(handle)
            folded, unfolded = reports["folded"], reports["unfolded"]
            same = all(folded.get(key) == unfolded.get(key)
                       for key in ("summary", "network_stats", "ranks", "rank_classes", "breakdown"))
            fold = folded["settings"]["fold"]
            rows.append((gpus, fold.get("simulated_ranks"), min(walls["folded"]), min(walls["unfolded"]),
                         folded["stats"]["run_s"], unfolded["stats"]["run_s"], folded["summary"]["max_finish_ns"],
                         same))
            print(f"{gpus} GPUs: simulated {fold.get('simulated_ranks')} ranks folded; wall {min(walls['folded']):.2f} s "
                  f"folded vs {min(walls['unfolded']):.2f} s --no-fold (run {folded['stats']['run_s']:.2f} vs "
                  f"{unfolded['stats']['run_s']:.2f} s); finish {folded['summary']['max_finish_ns']:,} ns; "
                  f"reports identical: {same}", flush=True)
    return 0 if all(row[-1] for row in rows) else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fold", type=int, nargs="+", metavar="GPUS",
                        help="compare folded and --no-fold runs of an all-reduce on a rail fat tree of GPUS GPUs")
    parser.add_argument("--repeat", type=int, default=3, help="with --fold: runs of each, the minimum kept")
    parser.add_argument("--nodes-per-leaf", type=int, default=16, help="with --fold: hosts per rail leaf")
    parser.add_argument("--algorithm", default="direct", help="all-to-all implementation (default direct)")
    parser.add_argument("--size-mib", type=float, default=64.0, help="all-to-all size per rank (MiB)")
    parser.add_argument("--ecmp", default="hash", choices=["hash", "split"])
    parser.add_argument("--infragraph", default=None,
                        help="use this InfraGraph infrastructure or wrapper YAML instead (one logical dimension)")
    parser.add_argument("--uplink-gbps", type=float, default=100.0,
                        help="leaf-spine bandwidth in GB/s (default 100 = 800 Gb/s; 25 makes the fabric 2:1 oversubscribed)")
    parser.add_argument("--top", type=int, default=5, help="bottleneck links to print")
    args = parser.parse_args()
    if args.fold:
        return fold_compare(args.fold, args.repeat, args.size_mib, args.nodes_per_leaf)

    if args.infragraph:
        from astra_network_congestion.infragraph import load_infragraph

        graph = load_infragraph(args.infragraph).network
        graph.npus_per_dim = [len(graph.rank_node)]  # one logical dimension of every rank
    else:
        graph = dgx_clos(uplink_gbps=args.uplink_gbps)

    def factory(cls, context):
        return cls(graph, context.engine, ecmp=args.ecmp)

    original = FlowNetwork.__dict__["from_context"]
    FlowNetwork.from_context = classmethod(factory)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            size = int(args.size_mib * (1 << 20))
            ranks = len(graph.rank_node)
            prefix, system, network = write_workload(tmp, ranks, size, args.algorithm)
            start = time.perf_counter()
            sim = Simulation(prefix, system, network, network_backend="flow")
            report = sim.run()
            wall = time.perf_counter() - start
    finally:
        FlowNetwork.from_context = original
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    net = sim.network
    nstats = report.network_stats
    verdict = "OK" if wall <= BUDGET_S else "TOO SLOW"
    print(f"flow all-to-all ({args.algorithm}, {args.size_mib:g} MiB/rank, ecmp {args.ecmp}) on "
          f"{net.graph.describe()}")
    print(f"  {len(report.ranks)} ranks, simulated {report.max_finish_ns:,} ns; wall {wall:.2f} s "
          f"(run {report.stats['run_s']:.2f} s); {net.messages:,} messages, {net.flows_started:,} flows "
          f"= {net.flows_started / wall:,.0f} flows/s; {net.recomputations:,} rate recomputations "
          f"({net.flows_rated:,} flow rates); {report.stats['events']:,} events; peak RSS {peak_mib:.0f} MiB; "
          f"budget {BUDGET_S:.0f} s: {verdict}")
    for row in nstats["bottleneck"][: args.top]:
        print(f"  bottleneck {row['src']} -> {row['dst']}: {row['bytes']:,} bytes, busy {row['busy_ns']:,} ns, "
              f"saturated {row['saturated_ns']:,} ns, up to {row['max_concurrent_flows']} flows")
    return 0 if wall <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
