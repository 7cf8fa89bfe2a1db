"""Regenerates the InfraGraph examples in examples/infragraph/ (they are checked in; this is their source).

    .venv/bin/python examples/infragraph/generate.py            # rewrites the examples in place
    .venv/bin/python examples/infragraph/generate.py OUT_DIR    # writes them under OUT_DIR instead

Every example folder gets:

* ``infrastructure.yaml``: an InfraGraph Infrastructure (current schema, built as Python objects of
  the PyPI ``infragraph`` package and serialised by it), with physical bandwidth and latency on
  every link;
* ``infrastructure.rank-annotation.yaml``: an InfraGraph Annotation giving every GPU/NPU its
  ``rank`` (host-major: rank = host * 8 + local GPU; x-fastest on the torus);
* ``network.yaml``: our wrapper (infrastructure, annotations, logical_dims, switch latencies),
  the file to pass as ``--network-configuration``;
* ``system.json``: the reference's usual system configuration (``astra_sim.config.default_system_config``)
  with ``ring`` all-reduce and ``direct`` all-to-all on each logical dimension;
* ``trace/ar_a2a.<rank>.et``: one all-reduce, then one all-to-all, per rank (Chakra ET).

The devices are written by hand rather than taken from ``infragraph.blueprints``: the blueprints
(e.g. ``NvidiaDGX``) carry no link bandwidths and wire CPUs, PCIe switches and NICs together, which
gives shortest-path routing detours through the host. Here a DGX H100 is its 8 GPUs, 4 NVSwitch
chips and 8 ConnectX-7 NICs.
"""

from __future__ import annotations

import json
import os
import sys

from infragraph import Annotation, Infrastructure

try:
    import astra_sim  # noqa: F401
except ImportError:  # run outside the project's environment: say how to run it, not a traceback
    raise SystemExit(f"{__file__}: astra-sim-py is not installed in this Python; run `make install`, then "
                     f".venv/bin/python {__file__}") from None

from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
from astra_sim.config import default_system_config as system_config

HERE = os.path.dirname(os.path.abspath(__file__))

# Physical parameters (per direction).
NVLINK4_GBYTES = 25  # one NVLink 4 link: 25 GB/s per direction; an H100 SXM has 18 (450 GB/s)
NVLINK_LATENCY_NS = 150
NVSWITCH_LATENCY_NS = 100
PCIE_GEN5_X16_GBYTES = 64
PCIE_LATENCY_NS = 250
NIC_GBITS = 400  # ConnectX-7
NIC_LATENCY_NS = 500  # NIC + cable
UPLINK_GBITS = 800  # two 400G cables leaf -> spine, bundled (a networkx graph has no parallel edges)
FABRIC_SWITCH_LATENCY_NS = 500
ICI_GBYTES = 50
ICI_LATENCY_NS = 500

ALL_REDUCE_BYTES = 16 << 20
ALL_TO_ALL_BYTES = 4 << 20


def _gbytes(value, latency_ns):
    return {"bandwidth": {"choice": "gigabytes_per_second", "gigabytes_per_second": value},
            "latency": {"choice": "ns", "ns": latency_ns}}


def _gbits(value, latency_ns):
    return {"bandwidth": {"choice": "gigabits_per_second", "gigabits_per_second": value},
            "latency": {"choice": "ns", "ns": latency_ns}}


def dgx_h100_device():
    """8 H100 (xpu), 4 NVSwitch chips, 8 ConnectX-7 NICs. Each GPU's 18 NVLinks go 5/4/4/5 to the
    four NVSwitches (450 GB/s per direction in all); GPU i reaches NIC i over PCIe Gen5 x16."""
    return {
        "name": "dgx_h100",
        "description": "NVIDIA DGX H100: 8 H100 SXM5, 4 NVSwitch (NVLink 4), 8 ConnectX-7 400G",
        "components": [
            {"name": "gpu", "choice": "xpu", "count": 8, "description": "NVIDIA H100 SXM5"},
            {"name": "nvsw", "choice": "switch", "count": 4, "description": "NVSwitch (3rd gen)"},
            {"name": "nic", "choice": "nic", "count": 8, "description": "ConnectX-7 400 Gb/s"},
        ],
        "links": [
            {"name": "nvlink_x5", "description": "5 NVLink 4 links", **_phys("nvlink_x5")},
            {"name": "nvlink_x4", "description": "4 NVLink 4 links", **_phys("nvlink_x4")},
            {"name": "pcie", "description": "PCIe Gen5 x16", **_phys("pcie")},
        ],
        "edges": [
            {"ep1": {"component": "gpu"}, "ep2": {"component": f"nvsw[{k}]"}, "scheme": "many2many",
             "link": "nvlink_x5" if k in (0, 3) else "nvlink_x4"}
            for k in range(4)
        ] + [{"ep1": {"component": "gpu[0:8]"}, "ep2": {"component": "nic[0:8]"}, "scheme": "one2one", "link": "pcie"}],
    }


def _phys(link):
    table = {
        "nvlink_x5": _gbytes(5 * NVLINK4_GBYTES, NVLINK_LATENCY_NS),
        "nvlink_x4": _gbytes(4 * NVLINK4_GBYTES, NVLINK_LATENCY_NS),
        "pcie": _gbytes(PCIE_GEN5_X16_GBYTES, PCIE_LATENCY_NS),
    }
    return {"physical": table[link]}


def switch_device(name, description):
    return {"name": name, "description": description,
            "components": [{"name": "asic", "choice": "switch", "count": 1}], "links": [], "edges": []}


def single_dgx():
    return {
        "name": "dgx-h100",
        "description": "one DGX H100 (8 GPUs behind 4 NVSwitch chips)",
        "devices": [dgx_h100_device()],
        "instances": [{"name": "dgx", "device": "dgx_h100", "count": 1}],
        "links": [], "edges": [],
    }


def clos(rail_optimised):
    """16 DGX H100 (128 GPUs), 8 leaf and 8 spine switches, non-blocking. ToR style: leaf k serves
    every NIC of DGX 2k and 2k+1. Rail-optimised: leaf r (rail r) serves NIC r of every DGX."""
    edges = []
    if rail_optimised:
        for rail in range(8):
            edges.append({"ep1": {"instance": "dgx[0:16]", "component": f"nic[{rail}]"},
                          "ep2": {"instance": f"leaf[{rail}]", "component": "asic[0]"},
                          "scheme": "many2many", "link": "nic_leaf"})
    else:
        for leaf in range(8):
            edges.append({"ep1": {"instance": f"dgx[{2 * leaf}:{2 * leaf + 2}]", "component": "nic[0:8]"},
                          "ep2": {"instance": f"leaf[{leaf}]", "component": "asic[0]"},
                          "scheme": "many2many", "link": "nic_leaf"})
    edges.append({"ep1": {"instance": "leaf[0:8]", "component": "asic[0]"},
                  "ep2": {"instance": "spine[0:8]", "component": "asic[0]"},
                  "scheme": "many2many", "link": "leaf_spine"})
    kind = "rail-optimised" if rail_optimised else "ToR"
    return {
        "name": f"clos-16x-dgx-h100-{'rail' if rail_optimised else 'tor'}",
        "description": f"2-tier Clos ({kind}) of 16 DGX H100: 128 GPUs, 8 leaves, 8 spines, 400G NICs, 800G uplinks",
        "devices": [dgx_h100_device(),
                    switch_device("leaf_switch", "leaf switch: 16 x 400G down, 8 x 800G up"),
                    switch_device("spine_switch", "spine switch: 8 x 800G down")],
        "links": [
            {"name": "nic_leaf", "description": "400G NIC to leaf", "physical": _gbits(NIC_GBITS, NIC_LATENCY_NS)},
            {"name": "leaf_spine", "description": "2 x 400G leaf to spine",
             "physical": _gbits(UPLINK_GBITS, NIC_LATENCY_NS)},
        ],
        "instances": [
            {"name": "dgx", "device": "dgx_h100", "count": 16},
            {"name": "leaf", "device": "leaf_switch", "count": 8},
            {"name": "spine", "device": "spine_switch", "count": 8},
        ],
        "edges": edges,
    }


def torus_4x4x4():
    """64 NPUs, chip i at (x, y, z) = (i % 4, i // 4 % 4, i // 16), each linked to its six
    neighbours with wrap-around (ICI-like links)."""
    edges = []

    def add(a, b):
        edges.append({"ep1": {"component": f"chip[{a}]"}, "ep2": {"component": f"chip[{b}]"},
                      "scheme": "one2one", "link": "ici"})

    for x in range(4):  # x: stride 1; chip[x::4] -> chip[x+1::4]
        add(f"{x}:64:4", f"{(x + 1) % 4}:64:4")
    for z in range(4):  # y: stride 4 within each z plane
        for y in range(4):
            a = 16 * z + 4 * y
            b = 16 * z + 4 * ((y + 1) % 4)
            add(f"{a}:{a + 4}", f"{b}:{b + 4}")
    for z in range(4):  # z: stride 16
        a, b = 16 * z, 16 * ((z + 1) % 4)
        add(f"{a}:{a + 16}", f"{b}:{b + 16}")
    return {
        "name": "torus-4x4x4",
        "description": "64 NPUs in a 4x4x4 torus (wrap-around in every dimension)",
        "devices": [{
            "name": "torus_4x4x4",
            "description": "64 NPUs, 6 ICI links each",
            "components": [{"name": "chip", "choice": "xpu", "count": 64, "description": "NPU"}],
            "links": [{"name": "ici", "description": "inter-chip link",
                       "physical": _gbytes(ICI_GBYTES, ICI_LATENCY_NS)}],
            "edges": edges,
        }],
        "instances": [{"name": "pod", "device": "torus_4x4x4", "count": 1}],
        "links": [], "edges": [],
    }


def rank_annotation(node_names):
    annotation = Annotation()
    for rank, name in enumerate(node_names):
        node = annotation.nodes.add(name=name)
        node.attributes.add(attribute="rank", value=str(rank))
    return annotation.serialize(encoding="yaml")


def trace_nodes():
    return [
        make_node(0, "all_reduce", T.COMM_COLL_NODE,
                  attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": ALL_REDUCE_BYTES}),
        make_node(1, "all_to_all", T.COMM_COLL_NODE, data_deps=[0],
                  attrs={"is_cpu_op": False, "comm_type": T.ALL_TO_ALL, "comm_size": ALL_TO_ALL_BYTES}),
    ]


EXAMPLES = {
    # folder: (infrastructure, rank nodes, logical dims, switch latencies, comment)
    "dgx_h100": (
        single_dgx(), [f"dgx.0.gpu.{g}" for g in range(8)], [8],
        {"nvsw": NVSWITCH_LATENCY_NS},
        "One DGX H100: 8 GPUs behind 4 NVSwitch chips; one logical dimension of 8.",
    ),
    "clos_dgx_h100": (
        clos(False), [f"dgx.{n}.gpu.{g}" for n in range(16) for g in range(8)], [8, 16],
        {"nvsw": NVSWITCH_LATENCY_NS, "leaf": FABRIC_SWITCH_LATENCY_NS, "spine": FABRIC_SWITCH_LATENCY_NS},
        "16 DGX H100 on a 2-tier Clos (leaf k serves DGX 2k and 2k+1). Logical dims [8, 16]: "
        "dim 0 = the 8 GPUs of a DGX (NVSwitch), dim 1 = the 16 GPUs with the same local index.",
    ),
    "clos_dgx_h100_rail": (
        clos(True), [f"dgx.{n}.gpu.{g}" for n in range(16) for g in range(8)], [8, 16],
        {"nvsw": NVSWITCH_LATENCY_NS, "leaf": FABRIC_SWITCH_LATENCY_NS, "spine": FABRIC_SWITCH_LATENCY_NS},
        "16 DGX H100 on a rail-optimised 2-tier Clos (leaf r = rail r serves NIC r of every DGX). "
        "Logical dims [8, 16]: dim 1 groups are exactly the rails, so they never cross a spine.",
    ),
    "torus_4x4x4": (
        torus_4x4x4(), [f"pod.0.chip.{i}" for i in range(64)], [4, 4, 4],
        None,
        "64 NPUs in a 4x4x4 torus, chip i at (i % 4, i // 4 % 4, i // 16); logical dims [4, 4, 4] "
        "put each ring of the torus in its own dimension.",
    ),
}


def write_example(root, folder, infra, rank_nodes, dims, switch_latency, comment):
    out = os.path.join(root, folder)
    os.makedirs(os.path.join(out, "trace"), exist_ok=True)
    infrastructure = Infrastructure().deserialize(infra)  # validates against the schema
    with open(os.path.join(out, "infrastructure.yaml"), "w", encoding="utf-8") as handle:
        handle.write(f"# Generated by examples/infragraph/generate.py: {infra['description']}\n")
        handle.write(infrastructure.serialize(encoding="yaml"))
    with open(os.path.join(out, "infrastructure.rank-annotation.yaml"), "w", encoding="utf-8") as handle:
        handle.write("# Generated by examples/infragraph/generate.py: rank r runs on the r-th listed node\n")
        handle.write(rank_annotation(rank_nodes))
    wrapper = [
        "# Generated by examples/infragraph/generate.py.",
        f"# {comment}",
        "infrastructure: infrastructure.yaml",
        "annotations: infrastructure.rank-annotation.yaml",
        f"logical_dims: [{', '.join(map(str, dims))}]",
    ]
    if switch_latency:
        wrapper.append("switch_latency_ns: {" + ", ".join(f"{k}: {v}" for k, v in switch_latency.items()) + "}")
    with open(os.path.join(out, "network.yaml"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(wrapper) + "\n")
    config = system_config(dims=len(dims), algorithm="ring")
    config["all-to-all-implementation"] = ["direct"] * len(dims)
    with open(os.path.join(out, "system.json"), "w", encoding="utf-8") as handle:
        handle.write("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in config.items()) + "\n}\n")
    data = encode_et(make_metadata(), trace_nodes())
    for rank in range(len(rank_nodes)):
        with open(os.path.join(out, "trace", f"ar_a2a.{rank}.et"), "wb") as handle:
            handle.write(data)


def main(argv):
    root = argv[1] if len(argv) > 1 else HERE
    for folder, spec in EXAMPLES.items():
        write_example(root, folder, *spec)
        print(f"wrote {os.path.join(root, folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
