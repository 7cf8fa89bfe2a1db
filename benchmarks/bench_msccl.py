"""Benchmark: MSCCL-IR XML collectives through the whole simulator (parse, load, run).

The target: the 8-rank allpairs all-reduce (1336 steps, allreduce_allpairs_8gpu_LL.xml) on 64 MiB
simulates in under 2 s. Also prints the ring XML against the native ring and the allpairs/ring
ratio by size.

    python benchmarks/bench_msccl.py [--samples DIR] [--repeat N] [--collectives K]

``--collectives K`` runs K all-reduces back to back per rank (a longer workload, same algorithm).
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_sim_testing import find_shared_dir, system_config, write_network_config

MIB = 1 << 20


def run(workdir, xml, size, topology="FullyConnected", npus=8, native=None, collectives=1, **kwargs):
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    system = system_config(preferred_dataset_splits=1)
    if native:
        system["all-reduce-implementation"] = [native]
    else:
        system["all-reduce-implementation-custom"] = [str(xml)]
    (workdir / "sys.json").write_text(json.dumps(system))
    net = write_network_config(workdir / "net.yml", (topology,), (npus,), (50.0,), (500.0,))
    nodes = [
        make_node(i + 1, f"ar{i}", T.COMM_COLL_NODE, data_deps=[i] if i else [],
                  attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})
        for i in range(collectives)
    ]
    for rank in range(npus):
        write_et(str(workdir / f"t.{rank}.et"), make_metadata(), nodes)
    kwargs.setdefault("plugins", ["network_analytical", "network_congestion", "collectives_msccl"])
    started = time.perf_counter()
    report = simulate(str(workdir / "t"), str(workdir / "sys.json"), net, **kwargs)
    return report, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = find_shared_dir()
    parser.add_argument("--samples", default=str(default / "samples" / "msccl") if default else None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--collectives", type=int, default=1)
    args = parser.parse_args()
    if not args.samples:
        parser.error("shared/samples/msccl not found; pass --samples")
    samples = Path(args.samples)
    allpairs = samples / "allreduce_allpairs_8gpu_LL.xml"
    ring = samples / "allreduce_ring_8gpu_1ch_LL128.xml"
    with tempfile.TemporaryDirectory() as tmp:
        best = None
        for i in range(args.repeat):
            report, wall = run(Path(tmp) / f"ap{i}", allpairs, 64 * MIB, collectives=args.collectives)
            best = wall if best is None else min(best, wall)
            print(f"allpairs all-reduce 8 ranks, 1336 steps, 64 MiB x{args.collectives}: "
                  f"wall {wall:.3f} s, simulated {report.max_finish_ns} ns")
        print(f"best wall time {best:.3f} s (target < 2 s): {'OK' if best < 2.0 else 'TOO SLOW'}")

        print("\nring XML vs native ring (Ring-8, 50 GB/s, 500 ns, preferred-dataset-splits 1)")
        print(f"{'size':>8} {'xml ns':>12} {'native ns':>12} {'diff':>8}")
        for size in (MIB, 16 * MIB, 256 * MIB, 1024 * MIB):
            xml, _ = run(Path(tmp) / f"rx{size}", ring, size, topology="Ring")
            nat, _ = run(Path(tmp) / f"rn{size}", None, size, topology="Ring", native="ring")
            a, b = xml.max_finish_ns, nat.max_finish_ns
            print(f"{size // MIB:>5} MiB {a:>12} {b:>12} {100 * (a - b) / b:>7.3f}%")

        print("\nallpairs / ring time (FullyConnected-8 analytical; Switch-8 congestion + msccl_protocol)")
        for size in (8 << 10, 64 << 10, 256 << 10, MIB, 16 * MIB):
            fc = [run(Path(tmp) / f"f{n}{size}", x, size)[0].max_finish_ns for n, x in (("a", allpairs), ("r", ring))]
            sw = [run(Path(tmp) / f"s{n}{size}", x, size, topology="Switch", network_backend="congestion",
                      options={"msccl_protocol": True})[0].max_finish_ns for n, x in (("a", allpairs), ("r", ring))]
            print(f"{size >> 10:>8} KiB  FC {fc[0] / fc[1]:.2f}   Switch+congestion+protocol {sw[0] / sw[1]:.2f}")


if __name__ == "__main__":
    main()
