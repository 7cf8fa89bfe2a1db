"""Differential testing against a locally built reference ASTRA-sim (not part of the test suite).

Generates random cases (topologies, algorithms per dimension, collective types and sizes, chunking,
queues, injection scale, rendezvous, communicator groups, compute/communication mixes, send/recv),
runs each through astra-sim-py and through the reference binary, and compares every rank's finish
time and exposed communication. The reference is never part of this repository: point
``--reference`` at a script that runs it and prints its ``sys[i] finished, ...`` lines.

    python tools/difftest.py --reference /path/to/run_reference.sh --cases 200 --seed 1

``--backend congestion`` compares the ``congestion`` backend with the reference's congestion-aware
binaries: mode ``aware`` (official, 1-D only) for 1-dimensional networks, ``aware_md`` (the
multi-dimensional branch) otherwise and for a 1-D 2-NPU Ring, on which the official binary aborts.

Building the reference (done 2026-11-30 on this 2-core Debian 12 machine, about 7 min; never inside the repo):

* Sources: astra-sim/astra-sim at 518bd513ae110428cd62eb60efc0f3993fd53c70 (the semantics this project follows)
  with its submodules under ``extern/`` at their pinned commits: fmt 7e73566, remote_memory_backend/analytical
  (astra-sim/astra-memory-analytical) 641cce8; and yaml-cpp (jbeder/yaml-cpp) a83cd31, which the top
  CMakeLists.txt fetches with FetchContent. Three pins were not in the snapshots at hand, so their nearest
  versions were used: graph_frontend/chakra (pinned astra-sim/chakra 0e3cd40) at 90630caa992a, the pin one update
  earlier (astra-sim 41fbd27; taken from the EricDinging/chakra_fix fork, which holds it: ``git archive
  90630caa992a schema src``); network_backend/analytical (pinned e8c5119) at 599a0473a9a7, the previous pin
  (e8c5119 only moved yaml-cpp up to astra-sim), with its ``add_subdirectory(.../extern/yaml-cpp yaml-cpp)``
  wrapped in ``if (NOT TARGET yaml-cpp) ... endif ()``; spdlog (pinned 63f0875) at 62302019 (1.13.0). ns-3,
  csg-htsim and googletest are not needed.
* Packages: Debian's g++ 12, cmake 3.25 and ``apt-get install protobuf-compiler libprotobuf-dev`` (3.21.12).
* Build::

      cd astra-sim/extern/graph_frontend/chakra/schema/protobuf && protoc et_def.proto --proto_path=. --cpp_out=.
      mkdir astra-sim/build/astra_analytical/build && cd astra-sim/build/astra_analytical/build
      cmake .. -DBUILDTARGET=all -DFETCHCONTENT_SOURCE_DIR_YAML-CPP=/path/to/yaml-cpp \
            -DFETCHCONTENT_FULLY_DISCONNECTED=ON
      nice -n 10 make -j2

  The binaries land in ``astra-sim/build/astra_analytical/build/bin/``: ``AstraSim_Analytical_Congestion_Unaware``
  and ``AstraSim_Analytical_Congestion_Aware`` (official, 1-D). ``aware_md`` needs network_backend/analytical's
  unmerged branch ``will/congestion-multidim`` (a035d9e, March 2024, older than the frontend above): not built.
* ``--reference`` script: ``run_reference.sh MODE FLAGS...`` runs the binary for MODE (``unaware``, ``aware``;
  exit 2 for a mode it lacks) with the flags as given, under ``timeout "${REF_TIMEOUT:-60}"``, printing
  ``TIMEOUT`` when it fires and exiting with the binary's status. Run from a scratch folder: the reference writes
  ``log/`` into its working directory.
* Checked with this build: ``--cases 15 --seed 7`` 12 same, 0 different (3 the reference crashed or hung on);
  ``--backend congestion --cases 30 --seed 3`` 9 same, 0 different (the rest need ``aware_md``).
  ``benchmarks/bench_reference.py`` times this build beside astra-sim-py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import AstraError
from astra_sim.simulation import simulate

LINE = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (-?\d+) cycles")
COLLECTIVES = {"all_reduce": T.ALL_REDUCE, "all_gather": T.ALL_GATHER,
               "reduce_scatter": T.REDUCE_SCATTER, "all_to_all": T.ALL_TO_ALL}


def random_case(rng, folder):
    """Write one random case into ``folder``; return (prefix, system, network, memory, groups, flags)."""
    dims = rng.choice([1, 1, 2, 2, 3])
    topology = [rng.choice(["Ring", "FullyConnected", "Switch"]) for _ in range(dims)]
    npus = [rng.choice([2, 4, 4, 8]) for _ in range(dims)]
    while _prod(npus) > 64:
        npus[rng.randrange(dims)] = 2
    total = _prod(npus)
    bandwidth = [rng.choice([25.0, 50.0, 100.0, 200.0]) for _ in range(dims)]
    latency = [rng.choice([0.0, 100.0, 500.0, 936.25, 1000.0]) for _ in range(dims)]
    network = os.path.join(folder, "network.yml")
    with open(network, "w") as handle:
        handle.write(f"topology: [ {', '.join(topology)} ]\nnpus_count: {npus}\n"
                     f"bandwidth: {bandwidth}\nlatency: {latency}\n")
    algos = ["ring", "direct", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect",
             "oneHalvingDoubling", "direct2"]
    impl = {}
    for key in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        ndims = rng.randint(1, dims)
        first = rng.choice(algos)
        if first.startswith("one"):
            impl[key] = [first]
        else:
            impl[key] = [rng.choice([a for a in algos if not a.startswith("one")]) for _ in range(ndims)]
        if key == "all-to-all":
            impl[key] = [a.replace("halvingDoubling", "ring") for a in impl[key]]
    system = {
        "scheduling-policy": rng.choice(["LIFO", "FIFO", "EXPLICIT"]),
        "endpoint-delay": rng.choice([1, 10, 10, 50]),
        "active-chunks-per-dimension": rng.choice([1, 1, 2, 4]),
        "preferred-dataset-splits": rng.choice([1, 2, 4, 4, 8]),
        "collective-optimization": rng.choice(["baseline", "localBWAware"]),
        "local-mem-bw": rng.choice([50, 1600, 3350]),
        **{f"{k}-implementation": v for k, v in impl.items()},
    }
    if rng.random() < 0.2:
        system.update({"roofline-enabled": 1, "peak-perf": rng.choice([100, 900])})
    if rng.random() < 0.05:
        system["replay-only"] = 1
    system_path = os.path.join(folder, "system.json")
    with open(system_path, "w") as handle:
        json.dump(system, handle)
    memory = os.path.join(folder, "memory.json")
    memory_type = rng.choice(["NO_MEMORY_EXPANSION", "PER_NPU_MEMORY_EXPANSION", "PER_NODE_MEMORY_EXPANSION",
                              "MEMORY_POOL"])
    memory_config = {"memory-type": memory_type, "remote-mem-latency": rng.choice([0, 1000]),
                     "remote-mem-bw": rng.choice([10, 100])}
    if memory_type == "PER_NODE_MEMORY_EXPANSION":
        per_node = npus[0]
        memory_config.update({"num-nodes": total // per_node, "num-npus-per-node": per_node})
    with open(memory, "w") as handle:
        json.dump(memory_config, handle)
    groups_path = None
    groups = {}
    if total >= 4 and rng.random() < 0.25:
        half = total // 2
        members = list(range(total))
        rng.shuffle(members)
        groups = {"1": sorted(members[:half]), "2": sorted(members[half:])}
        groups_path = os.path.join(folder, "groups.json")
        with open(groups_path, "w") as handle:
            json.dump(groups, handle)
    # Workload: the same random program on every rank (ids, deps, sizes).
    shape = rng.choice(["single", "chain", "overlap", "mixed", "p2p", "concurrent", "memory", "dims"])
    if memory_type == "NO_MEMORY_EXPANSION" and shape == "memory":
        shape = "single"
    prefix = os.path.join(folder, "t")
    seed = rng.randrange(1 << 30)
    for rank in range(total):
        # Same seed on every rank: the same program, with rank-specific peers and groups.
        nodes = _workload(random.Random(seed), shape, rank, total, groups)
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    flags = {"num_queues_per_dim": rng.choice([1, 1, 2]), "injection_scale": rng.choice([1.0, 1.0, 2.0]),
             "rendezvous": rng.random() < 0.15}
    return prefix, system_path, network, memory, groups_path, flags, {"npus": npus, "topology": topology,
                                                                      "system": system, "shape": shape}


def _workload(rng, shape, rank, total, groups):
    nodes = []

    def coll(node_id, deps, kind=None, size=None, pg=None, involved=None):
        kind = kind or rng.choice(list(COLLECTIVES))
        size = size or rng.choice([1024, 65536, 1 << 20, 1000003, 16 << 20])
        attrs = {"is_cpu_op": False, "comm_type": COLLECTIVES[kind], "comm_size": size,
                 "comm_priority": rng.randrange(4)}
        if pg is not None:
            attrs["pg_name"] = pg
        if involved is not None:
            attrs["involved_dim"] = involved
        return make_node(node_id, f"{kind}_{node_id}", T.COMM_COLL_NODE, data_deps=deps, attrs=attrs)

    def comp(node_id, deps, us, cpu=False):
        attrs = {"is_cpu_op": cpu, "num_ops": rng.choice([0, 10**6, 10**9]),
                 "tensor_size": rng.choice([0, 4096, 10**6])}
        return make_node(node_id, f"comp_{node_id}", T.COMP_NODE, data_deps=deps, duration_micros=us,
                         attrs=attrs)

    if shape == "single":
        nodes.append(coll(0, []))
    elif shape == "chain":
        for i in range(3):
            nodes.append(coll(i, [i - 1] if i else []))
    elif shape == "overlap":
        nodes.append(comp(0, [], rng.choice([0, 5, 50])))
        nodes.append(coll(1, []))
        nodes.append(comp(2, [0], 20))
        nodes.append(coll(3, [1, 2]))
    elif shape == "mixed":
        pg = None
        if groups:
            pg = "1" if rank in groups["1"] else "2"
        nodes.append(coll(0, [], pg=pg))
        nodes.append(comp(1, [], 10))
        nodes.append(coll(2, [1]))
        nodes.append(coll(3, [0], pg=pg))
    elif shape == "concurrent":
        # Independent collectives: they serialize on the comm slot and share queues.
        for i in range(4):
            nodes.append(coll(i, []))
        nodes.append(comp(4, [], 30, cpu=True))
        nodes.append(comp(5, [4], 30))
    elif shape == "memory":
        size = rng.choice([4096, 1 << 20])
        nodes.append(make_node(0, "load", T.MEM_LOAD_NODE, attrs={"is_cpu_op": False, "tensor_size": size}))
        nodes.append(comp(1, [0], 15))
        nodes.append(make_node(2, "store", T.MEM_STORE_NODE, data_deps=[1],
                               attrs={"is_cpu_op": False, "tensor_size": size}))
        nodes.append(coll(3, [0]))
    elif shape == "dims":
        for i in range(3):
            involved = [rng.random() < 0.6 for _ in range(rng.choice([1, 2, 3, 4]))]
            nodes.append(coll(i, [i - 1] if i else [], involved=involved))
    else:  # p2p ring shift plus a collective
        size = rng.choice([4096, 1 << 20])
        nodes.append(make_node(0, "send", T.COMM_SEND_NODE, attrs={
            "is_cpu_op": False, "comm_src": rank, "comm_dst": (rank + 1) % total, "comm_size": size, "comm_tag": 7}))
        nodes.append(make_node(1, "recv", T.COMM_RECV_NODE, attrs={
            "is_cpu_op": False, "comm_src": (rank - 1) % total, "comm_dst": rank, "comm_size": size, "comm_tag": 7}))
        nodes.append(coll(2, [0, 1]))
    return nodes


def _prod(values):
    out = 1
    for v in values:
        out *= v
    return out


def reference_mode(backend, info):
    """The run_reference.sh mode that models ``backend`` on the case's network."""
    if backend == "analytical":
        return "unaware"
    if len(info["npus"]) == 1 and not (info["topology"][0] == "Ring" and info["npus"][0] == 2):
        return "aware"
    # Multi-dimensional, or a 2-NPU Ring (the official aware binary aborts on it, quirk 13).
    return "aware_md"


def run_ours(prefix, system, network, memory, groups, flags, backend="analytical"):
    try:
        report = simulate(prefix, system, network, memory, groups, network_backend=backend, **flags)
    except AstraError as exc:
        return ("error", type(exc).__name__, str(exc).splitlines()[0])
    # Exposed communication compared as the reference prints it (unsigned 64-bit).
    return {r.rank: (r.finish_ns, r.exposed_comm_ns % (1 << 64)) for r in report.ranks}


def run_reference(script, prefix, system, network, memory, groups, flags, timeout, expected_ranks, mode="unaware"):
    args = [script, mode, f"--workload-configuration={prefix}", f"--system-configuration={system}",
            f"--network-configuration={network}", f"--remote-memory-configuration={memory}",
            f"--num-queues-per-dim={flags['num_queues_per_dim']}",
            f"--injection-scale={flags['injection_scale']}",
            f"--rendezvous-protocol={'true' if flags['rendezvous'] else 'false'}"]
    if groups:
        args.append(f"--comm-group-configuration={groups}")
    env = dict(os.environ, REF_TIMEOUT=str(timeout))
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    out = {}
    for line in proc.stdout.splitlines():
        match = LINE.search(line)
        if match:
            out[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
    if proc.returncode != 0 or "TIMEOUT" in proc.stdout:
        return ("ref-failed", proc.returncode, proc.stdout[-200:] + proc.stderr[-200:], out)
    if len(out) != expected_ranks:
        # Exit 0 without a result for every rank: the reference hung (it drops
        # its event queue and exits when nothing is left).
        return ("ref-failed", "no result for some ranks", "", out)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="script: run_reference.sh unaware <flags>")
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--keep", help="folder to keep mismatching cases in")
    parser.add_argument("--backend", choices=["analytical", "congestion"], default="analytical",
                        help="network backend to compare: analytical (reference mode unaware) or congestion "
                             "(reference mode aware for 1-D networks, aware_md otherwise)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    same = differ = skipped = 0
    for index in range(args.cases):
        folder = tempfile.mkdtemp(prefix=f"difftest{index}_")
        prefix, system, network, memory, groups, flags, info = random_case(rng, folder)
        ours = run_ours(prefix, system, network, memory, groups, flags, args.backend)
        mode = reference_mode(args.backend, info)
        info["reference_mode"] = mode
        ref = run_reference(args.reference, prefix, system, network, memory, groups, flags, args.timeout,
                            _prod(info["npus"]), mode)
        if isinstance(ref, tuple):
            # The reference did not produce a full result: we must have produced one or a clear error,
            # and agree on every rank it did report.
            partial = ref[3] if len(ref) > 3 else {}
            if partial and isinstance(ours, dict) and any(ours.get(r) != v for r, v in partial.items()):
                differ += 1
                print(f"case {index}: MISMATCH on the ranks the reference reported before failing "
                      f"{info} flags={flags} dir={folder}")
                continue
            skipped += 1
            print(f"case {index}: reference failed ({ref[1]}); ours: {ours if isinstance(ours, tuple) else 'result'} "
                  f"| {info['topology']} {info['npus']} {info['shape']} flags={flags} dir={folder}")
            continue
        if ours == ref:
            same += 1
        else:
            differ += 1
            print(f"case {index}: MISMATCH {info} flags={flags} dir={folder}")
            if isinstance(ours, dict):
                diffs = [(r, ours.get(r), ref.get(r)) for r in sorted(set(ours) | set(ref)) if ours.get(r) != ref.get(r)]
                print("   rank, ours, reference:", diffs[:6])
            else:
                print("   ours:", ours)
    print(f"{same} same, {differ} different, {skipped} where the reference gave no result")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
