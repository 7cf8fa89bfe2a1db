"""Generates the benchmark workloads (Chakra traces and configs) into a folder.

Nothing generated is checked in; every benchmark calls this first.
"""

from __future__ import annotations

import json
import os

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim_testing import system_config

SYSTEM = system_config(dims=3)  # ring on every dimension, 4 chunks, localBWAware


def _network(path, npus):
    with open(path, "w") as handle:
        handle.write(
            "topology: [ Ring, FullyConnected, Switch ]\n"
            f"npus_count: [ {npus[0]}, {npus[1]}, {npus[2]} ]\n"
            "bandwidth: [ 200.0, 100.0, 50.0 ]  # GB/s\n"
            "latency: [ 500.0, 500.0, 1000.0 ]  # ns\n"
        )


def _common(folder, npus):
    os.makedirs(folder, exist_ok=True)
    system = os.path.join(folder, "system.json")
    with open(system, "w") as handle:
        json.dump(SYSTEM, handle, indent=1)
    network = os.path.join(folder, "network.yml")
    _network(network, npus)
    memory = os.path.join(folder, "memory.json")
    with open(memory, "w") as handle:
        json.dump({"memory-type": "NO_MEMORY_EXPANSION"}, handle)
    return system, network, memory


def _write_all(prefix, ranks, nodes, compact=False):
    """Every rank runs the same graph (the usual data-parallel case): one file per rank, or (``compact``)
    one trace and a manifest whose symmetry relates every rank (astra_workload_compact)."""
    from astra_sim.chakra import encode_et
    from astra_folding.symmetry import BlockShift
    from astra_workload_compact import write_compact_workload

    data = encode_et(make_metadata(), nodes)
    if compact:
        write_compact_workload(prefix, ranks, [BlockShift(1, ranks, ranks)], [(0, data)],
                               generator="benchmarks/workloads.py")
        return
    for rank in range(ranks):
        with open(f"{prefix}.{rank}.et", "wb") as handle:
            handle.write(data)


def all_reduce(folder, npus=(8, 8, 64), size=1 << 30, compact=False):
    """One all-reduce of ``size`` bytes on every rank."""
    system, network, memory = _common(folder, npus)
    prefix = os.path.join(folder, "allreduce")
    node = make_node(0, "all_reduce", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})
    ranks = npus[0] * npus[1] * npus[2]
    _write_all(prefix, ranks, [node], compact)
    return prefix, system, network, memory


def data_parallel_training(folder, npus=(8, 8, 16), layers=20, compute_us=50, grad_bytes=16 << 20, compact=False):
    """A training step: forward layers, then backward layers each followed by its gradient all-reduce."""
    system, network, memory = _common(folder, npus)
    prefix = os.path.join(folder, "dp_training")
    nodes = []
    next_id = 0
    previous = None
    for layer in range(layers):
        deps = [] if previous is None else [previous]
        nodes.append(make_node(next_id, f"fwd_{layer}", T.COMP_NODE, data_deps=deps,
                               duration_micros=compute_us, attrs={"is_cpu_op": False}))
        previous = next_id
        next_id += 1
    for layer in reversed(range(layers)):
        nodes.append(make_node(next_id, f"bwd_{layer}", T.COMP_NODE, data_deps=[previous],
                               duration_micros=compute_us, attrs={"is_cpu_op": False}))
        backward = next_id
        next_id += 1
        nodes.append(make_node(next_id, f"allreduce_{layer}", T.COMM_COLL_NODE, data_deps=[backward],
                               attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": grad_bytes}))
        next_id += 1
        previous = backward
    ranks = npus[0] * npus[1] * npus[2]
    _write_all(prefix, ranks, nodes, compact)
    return prefix, system, network, memory


def ready_queue(folder, npus=(8, 4, 2), messages=2000, message_bytes=64 << 10):
    """Every rank has ``messages`` sends to its ring neighbour and as many receives
    from the other one, all dependency-free at time 0: thousands of ready nodes
    queue behind each rank's one communication slot (what pipelined TP-overlap
    rings look like)."""
    system, network, memory = _common(folder, npus)
    prefix = os.path.join(folder, "ready_queue")
    ranks = npus[0] * npus[1] * npus[2]
    for rank in range(ranks):
        nodes = []
        for i in range(messages):
            nodes.append(make_node(i, f"send_{i}", T.COMM_SEND_NODE,
                                   attrs={"comm_dst": (rank + 1) % ranks, "comm_size": message_bytes, "comm_tag": i}))
            nodes.append(make_node(messages + i, f"recv_{i}", T.COMM_RECV_NODE,
                                   attrs={"comm_src": (rank - 1) % ranks, "comm_size": message_bytes, "comm_tag": i}))
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    return prefix, system, network, memory
