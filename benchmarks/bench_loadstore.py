"""Wall time of the load-store collective model (astra_gpu_model.loadstore) for 1 GiB on 8 H100s,
plus the table against the kernel's ring (8 NPUs, one Switch, 450 GB/s per direction, 500 ns,
preferred-dataset-splits 1).

    .venv/bin/python benchmarks/bench_loadstore.py [--no-table]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from astra_gpu_model.loadstore import DIRECT, NVLS, ONESHOT, TWOSHOT, _TIME_CACHE, collective_time_ns, config_for_gpu


def _ring_us(size, npus=8):
    from astra_sim.chakra import make_metadata, make_node, types as T, write_et
    from astra_sim.simulation import simulate
    from astra_sim_testing import write_network_config, write_system_config

    d = Path(tempfile.mkdtemp())
    sp = write_system_config(d / "sys.json", algorithm="ring", preferred_dataset_splits=1)
    net = write_network_config(d / "net.yml", ("Switch",), (npus,), (450.0,), (500.0,))
    nodes = [make_node(1, "c", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                        "comm_size": size})]
    for r in range(npus):
        write_et(str(d / f"t.{r}.et"), make_metadata(), nodes)
    return simulate(str(d / "t"), sp, net).max_finish_ns / 1000.0


def main():
    cfg = config_for_gpu("H100-SXM5-80GB")
    print(f"config: {cfg}")
    for algo, coll in ((ONESHOT, "all_reduce"), (TWOSHOT, "all_reduce"), (NVLS, "all_reduce"),
                       (DIRECT, "all_gather"), (DIRECT, "reduce_scatter")):
        _TIME_CACHE.clear()
        start = time.perf_counter()
        t = collective_time_ns(algo, coll, 1 << 30, 8, cfg)
        wall = time.perf_counter() - start
        print(f"{algo:11s} {coll:15s} 1 GiB x 8 GPUs: simulated {t / 1e6:9.3f} ms, wall {wall:6.3f} s")
    if "--no-table" in sys.argv:
        return
    print(f"\n{'size':>10s} {'ring us':>9s} {'oneshot':>9s} {'twoshot':>9s} {'nvls':>9s}  fastest")
    for k in range(13, 31):
        s = 1 << k
        row = {"ring": _ring_us(s)}
        for algo in (ONESHOT, TWOSHOT, NVLS):
            row[algo] = collective_time_ns(algo, "all_reduce", s, 8, cfg) / 1000.0
        best = min(row, key=row.get)
        print(f"{s:>10d} {row['ring']:9.2f} {row[ONESHOT]:9.2f} {row[TWOSHOT]:9.2f} {row[NVLS]:9.2f}  {best}")

    def first(a, b):  # smallest size (4 KiB steps) from which b is faster than a
        lo, hi = 4096, 1 << 30
        fa = (lambda s: _ring_us(s)) if a == "ring" else (lambda s: collective_time_ns(a, "all_reduce", s, 8, cfg) / 1e3)
        fb = (lambda s: _ring_us(s)) if b == "ring" else (lambda s: collective_time_ns(b, "all_reduce", s, 8, cfg) / 1e3)
        while hi - lo > 4096:
            mid = (lo + hi) // 2 // 4096 * 4096
            lo, hi = (lo, mid) if fb(mid) < fa(mid) else (mid, hi)
        return hi
    print(f"\ncrossover one-shot -> ring:     ring faster from {first(ONESHOT, 'ring')} B")
    print(f"crossover one-shot -> two-shot: two-shot faster from {first(ONESHOT, TWOSHOT)} B")


if __name__ == "__main__":
    main()
