"""Congestion control on the packet tier: TCP, DCTCP and DCQCN for a data-parallel all-reduce under incast.

    .venv/bin/python examples/case-studies/ns3-congestion-control/run.py [--small] [--out DIR]

ASTRA-sim's own ns-3 example machine, widened from 8 to 12 NPUs on one switch (400 Gbps links of 0.5 us, the
ECN maps and 32 MB switch buffer of its ``config.txt``): NPUs 0-7 run a 4 MiB ring all-reduce (the
data-parallel step's communication, one communicator group); NPUs 8-11 are another job's, and in the
``incast`` scenario each sends 4 MiB to NPU 0 at the same moment (a 4-to-1 incast on the port the ring's
traffic into NPU 0 also needs); in ``quiet`` they send nothing. Under plain TCP (``CC_MODE 0``), DCTCP (8)
and, quiet only, DCQCN (1, with ``config.txt``'s parameters; ``SCENARIOS`` says why not under incast) on the
``ns3`` backend; every message's flow completion time comes from ``--ns3-fct-file``. Full: 5 points (about a
minute of CPU on 2 cores, most of it ns-3's import in each worker; minutes of wall time on a loaded machine);
``--small``: the incast under TCP and DCTCP, in one worker (about 20 s of CPU). The headline is the
all-reduce's time under incast with TCP over its time with DCTCP, the all-reduce's time being when its last
message was delivered (README.md sets it beside the paper's "little impact").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from casestudy import check, draw, parse_args, sweep  # noqa: E402

from astra_sim.safeio import write_text_atomic  # noqa: E402

from astra_sim.chakra import make_metadata, make_node, types as T, write_et  # noqa: E402

REQUIRES = ["ns3"]  # Python packages the study needs beyond the kernel (the test skips it without them)
GROUP = list(range(8))  # the data-parallel group: NPUs 0-7
SENDERS = [8, 9, 10, 11]  # the other job's NPUs, the incast's sources
NPUS = len(GROUP) + len(SENDERS)
ALL_REDUCE_BYTES = INCAST_BYTES = 4 << 20
#: astra-sim/astra-network-ns3 scratch/topology/8_nodes_1_switch_topology.txt (NPUs on one switch, 400 Gbps,
#: 0.0005 ms), with 12 NPUs instead of 8; the switch is node 12
TOPOLOGY = f"{NPUS + 1} 1 {NPUS}\n{NPUS}\n" + "".join(f"{NPUS} {npu} 400Gbps 0.0005ms 0\n" for npu in range(NPUS))
#: the keys of astra-sim/astra-network-ns3 scratch/config/config.txt this backend models (its 400 Gbps ECN
#: entries: K_min 800 KB, K_max 3200 KB, P_max 0.2; DCQCN's timers and rates), CC_MODE set per point
CONFIG = ("PACKET_PAYLOAD_SIZE 1000\nENABLE_QCN 1\nBUFFER_SIZE 32\nSIMULATOR_STOP_TIME 10\nEWMA_GAIN 0.00390625\n"
          "KMAX_MAP 1 400000000000 3200\nKMIN_MAP 1 400000000000 800\nPMAX_MAP 1 400000000000 0.2\n")
DCQCN = ("ALPHA_RESUME_INTERVAL 1\nRATE_DECREASE_INTERVAL 4\nCLAMP_TARGET_RATE 0\nRP_TIMER 900\n"
         "FAST_RECOVERY_TIMES 1\nRATE_AI 50Mb/s\nRATE_HAI 100Mb/s\nMIN_RATE 100Mb/s\n")
CC_MODES = {"tcp": 0, "dctcp": 8, "dcqcn": 1}
#: the congestion controls each scenario runs: DCQCN cannot run the incast here (its rate cuts, one CNP per pair
#: per 50 us, are too slow for 4 x 400 Gbps into one port: a packet is dropped within 25 us with the 32 MB
#: buffer, 108 us with 128 MB, and without PFC, which mainline ns-3 lacks, a DCQCN drop is fatal)
SCENARIOS = {"quiet": ["tcp", "dctcp", "dcqcn"], "incast": ["tcp", "dctcp"]}


def traces(out, scenario):
    """One step's Chakra traces: the group's all-reduce (communicator ``1``) and, under ``incast``, the other
    job's sends to NPU 0 and NPU 0's receives of them; the prefix."""
    folder = out / scenario
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(NPUS):
        nodes = []
        if rank in GROUP:
            nodes.append(make_node(1, "all_reduce", T.COMM_COLL_NODE, attrs={
                "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": ALL_REDUCE_BYTES, "pg_name": "1"}))
        if scenario == "incast" and rank == 0:
            nodes += [make_node(2 + i, f"recv_{src}", T.COMM_RECV_NODE, attrs={
                "is_cpu_op": False, "comm_src": src, "comm_dst": 0, "comm_size": INCAST_BYTES, "comm_tag": 7})
                for i, src in enumerate(SENDERS)]
        if scenario == "incast" and rank in SENDERS:
            nodes.append(make_node(1, "send", T.COMM_SEND_NODE, attrs={
                "is_cpu_op": False, "comm_src": rank, "comm_dst": 0, "comm_size": INCAST_BYTES, "comm_tag": 7}))
        if not nodes:  # a rank with nothing to do this step
            nodes.append(make_node(1, "idle", T.COMP_NODE, duration_micros=0, attrs={"is_cpu_op": False}))
        write_et(folder / f"step.{rank}.et", make_metadata(), nodes)
    return str(folder / "step")


def machine(out):
    """Write the topology, one network config per congestion control (DCQCN's keys only in DCQCN's: the others
    would name them as ignored), the logical topology, the communicator group and the system; the configs."""
    write_text_atomic(out / "topology.txt", TOPOLOGY)
    networks = {}
    for name, mode in CC_MODES.items():
        networks[name] = out / f"network_{name}.txt"
        keys = CONFIG + (DCQCN if name == "dcqcn" else "")
        write_text_atomic(networks[name], f"TOPOLOGY_FILE {out / 'topology.txt'}\nCC_MODE {mode}\n{keys}")
    write_text_atomic(out / "logical_topology.json", json.dumps({"logical-dims": [str(NPUS)]}) + "\n")
    write_text_atomic(out / "groups.json", json.dumps({"1": GROUP}) + "\n")
    system = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
              "preferred-dataset-splits": 1, "collective-optimization": "baseline", "local-mem-bw": 1600,
              **{f"{kind}-implementation": ["ring"] for kind in ("all-reduce", "all-gather", "reduce-scatter",
                                                                  "all-to-all")}}
    write_text_atomic(out / "system.json", json.dumps(system, indent=1) + "\n")
    return networks


def spec(out, scenario, modes):
    """The scenario's sweep: per congestion control its network config and its own flow-completion file."""
    networks = machine(out)
    zipped = {"run.network-configuration": [str(networks[cc]) for cc in modes],
              "run.ns3-fct-file": [str(out / f"fct_{scenario}_{cc}.txt") for cc in modes]}
    return {"workload": {"trace": traces(out, scenario)},
            "run": {"system-configuration": str(out / "system.json"), "network-backend": "ns3",
                    "logical-topology-configuration": str(out / "logical_topology.json"),
                    "comm-group-configuration": str(out / "groups.json"),
                    "network-configuration": zipped["run.network-configuration"][0]},
            "axes": {"zip": zipped}}


def flows(path):
    """``(size, start_ns, fct_ns)`` of every message in an ``fct.txt`` (columns 5, 6 and 7)."""
    return [tuple(int(v) for v in line.split()[4:7]) for line in Path(path).read_text().splitlines() if line.strip()]


def all_reduce_ns(messages):
    """When the all-reduce's last message was delivered: its messages are the ones not of the incast's size
    (a ring step moves ``ALL_REDUCE_BYTES / 8``)."""
    return max(start + fct for size, start, fct in messages if size != INCAST_BYTES)


def percentile(values, fraction):
    """The nearest-rank percentile of ``values``."""
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(fraction * len(values) + 0.5)) - 1))]


def main_(argv=None):
    args = parse_args(argv, __doc__)
    scenarios = {"incast": SCENARIOS["incast"]} if args.small else SCENARIOS
    jobs = 1 if args.small else args.jobs  # a worker pays ns-3's import (~10 s): two points run in one
    rows, step = [], {}
    for scenario, modes in scenarios.items():
        _, done = sweep(spec(args.out, scenario, modes), args.out, f"congestion_control_{scenario}", jobs)
        for row in done:
            cc = Path(row["run.network-configuration"]).stem.removeprefix("network_")
            row.update(scenario=scenario, cc=cc)
            step[scenario, cc] = int(row["step_ns"])
        rows += done
    draw(["scenario", "cc"], rows, args.out / "figure.png",
         "4 MiB all-reduce on 8 of 12 NPUs, ns-3: step per scenario and CC")
    print("4 MiB ring all-reduce on NPUs 0-7 (ns-3), times in us: the step (every rank), the all-reduce, the")
    print("flow completion times of its messages (p50, p99) and of the incast's (max)")
    print(f"{'scenario':>8} {'cc':>6} {'step':>8} {'all-reduce':>10} {'ring p50':>9} {'ring p99':>9} "
          f"{'incast max':>10}")
    reduce = {}
    for scenario, modes in scenarios.items():
        for cc in modes:
            messages = flows(args.out / f"fct_{scenario}_{cc}.txt")
            ring = [fct for size, _, fct in messages if size != INCAST_BYTES]
            incast = [fct for size, _, fct in messages if size == INCAST_BYTES]
            reduce[scenario, cc] = all_reduce_ns(messages)
            print(f"{scenario:>8} {cc:>6} {step[scenario, cc] / 1e3:>8.1f} {reduce[scenario, cc] / 1e3:>10.1f} "
                  f"{percentile(ring, 0.5) / 1e3:>9.1f} {percentile(ring, 0.99) / 1e3:>9.1f} "
                  f"{(max(incast) / 1e3 if incast else 0):>10.1f}")
    print(f"results and figures in {args.out}")
    return check(HERE, args.small, reduce["incast", "tcp"] / reduce["incast", "dctcp"], args.out)


if __name__ == "__main__":
    raise SystemExit(main_())
