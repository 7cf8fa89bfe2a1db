"""Benchmark of the packet-level ``ns3`` backend: a 1 MiB ring all-reduce on 16 NPUs behind two switches.

NPUs 0-7 hang off switch 16, NPUs 8-15 off switch 17 (100 Gbps, 1 us links), the switches are joined by a
400 Gbps link; DCTCP with RED/ECN (ASTRA-sim's K_min/K_max/P_max values). The ring all-reduce is one
logical dimension of 16. Budget (issue 27): under 60 s on the project's 2-core machine, ns-3's import
included. Prints the wall time of each phase, the simulated time, and packets simulated per second of wall
time (packets = every transmission on every link, data and ACKs).

    python benchmarks/bench_ns3.py [--size-bytes N] [--cc-mode 8|0]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_sim_testing import write_system_config


def write_inputs(folder, cc_mode):
    links = [(16, h) for h in range(8)] + [(17, h) for h in range(8, 16)]
    lines = ["18 2 17", "16 17"] + [f"{s} {h} 100Gbps 0.001ms 0" for s, h in links] + ["16 17 400Gbps 0.001ms 0"]
    (folder / "topo.txt").write_text("\n".join(lines) + "\n")
    cfg = folder / "network_cfg.txt"
    cfg.write_text(
        f"TOPOLOGY_FILE {folder / 'topo.txt'}\nPACKET_PAYLOAD_SIZE 1000\nCC_MODE {cc_mode}\nENABLE_QCN 1\n"
        "BUFFER_SIZE 32\nKMIN_MAP 2 100000000000 400 400000000000 800\n"
        "KMAX_MAP 2 100000000000 1600 400000000000 3200\nPMAX_MAP 2 100000000000 0.2 400000000000 0.2\n"
    )
    return str(cfg)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-bytes", type=int, default=1 << 20)
    parser.add_argument("--cc-mode", type=int, default=8)
    args = parser.parse_args()
    start = time.perf_counter()
    from astra_network_ns3.backend import load_glue

    load_glue()
    loaded = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cfg = write_inputs(folder, args.cc_mode)
        node = make_node(1, "ar", T.COMM_COLL_NODE,
                         attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": args.size_bytes})
        prefix = str(folder / "ar")
        for rank in range(16):
            write_et(f"{prefix}.{rank}.et", make_metadata(), [node])
        system = write_system_config(folder / "sys.json")
        report = simulate(prefix, system, cfg, network_backend="ns3")
        done = time.perf_counter()
        again = simulate(prefix, system, cfg, network_backend="ns3")  # the glue's methods compiled now
        warm = time.perf_counter() - done
    stats = report.network_stats
    sim_wall = done - loaded
    finish = max(r.finish_ns for r in report.ranks)
    assert [r.finish_ns for r in again.ranks] == [r.finish_ns for r in report.ranks], "runs must repeat exactly"
    print(f"ns-3 import + glue compile: {loaded - start:.1f} s")
    print(f"simulation: {sim_wall:.1f} s wall (first run in the process, cppyy compiling the glue's methods as "
          f"they are first called; {warm:.1f} s when run again) for {finish / 1e3:.1f} us simulated "
          f"({stats['messages']} messages, {stats['slices']} slices)")
    print(f"packets simulated: {stats['packets_sent']} ({stats['packets_sent'] / sim_wall:,.0f} packets/s of wall "
          f"time; {stats['packets_sent'] / warm:,.0f} when run again); ECN marks {stats['ecn_marks']}, "
          f"drops {stats['drops']}")
    total = done - start
    print(f"total (import + first run): {total:.1f} s (budget 60 s): {'OK' if total < 60 else 'OVER BUDGET'}")


if __name__ == "__main__":
    main()
