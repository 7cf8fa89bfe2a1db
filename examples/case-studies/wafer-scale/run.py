"""Scale-out vs wafer-scale: a GPT-style and a DLRM-style step on 256 NPUs, against the off-node bandwidth.

    .venv/bin/python examples/case-studies/wafer-scale/run.py [--small] [--out DIR]

The same 256 H100-class NPUs (the ``hgx-h100`` platform's GPU compute model) on two networks:

* **scale-out**: nodes of 8 NPUs on a switch at NVLink's 450 GB/s per NPU and direction, nodes joined by a
  switch through one NIC per NPU (``Switch 8 x Switch 32``);
* **wafer-scale**: wafers of 4 x 4 NPUs on a 2-D on-wafer mesh (``Ring 4 x Ring 4``) at 1 TB/s per link (a Tesla
  D1 die's 4 TB/s of off-chip bandwidth over its four edges), wafers joined by a switch through the same
  off-wafer bandwidth per NPU as the scale-out NIC (``Ring 4 x Ring 4 x Switch 16``).

The axis is that off-node (off-wafer) bandwidth per NPU, 100 Gb/s to 1.6 Tb/s. The models: GPT-3 175B (TP 8 x
PP 8 x DP 4, 8 micro-batches; analytical backend) and DLRM (MLPerf's Criteo Terabyte configuration: data-parallel
MLPs, embeddings sharded over every NPU, their pooled vectors exchanged by all-to-all; flow backend). Full: 96
layers, 10 + 10 points (about 8 minutes on 2 shared cores: on the wafer's rings the symmetric-rank fold is
abandoned, so all 256 ranks are simulated); ``--small``: GPT-3 cut to 8 layers at the two ends of the axis (about 20 s).
The headline is the GPT-style step on scale-out over the step on wafer-scale at the lowest off-node bandwidth
(README.md sets it beside the paper's "up to around 2.51x").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from casestudy import check, draw, ms, parse_args, sweep  # noqa: E402

from astra_sim.safeio import write_text_atomic  # noqa: E402

NPUS = 256  # ASSUMPTION: the paper's NPU count could not be read; 256 keeps the unfolded wafer runs short
GIB_PER_GB = 1e9 / (1 << 30)  # the analytical YAML takes GiB/s (2^30 bytes per s)
#: scale-up inside a node: NVLink 4, 450 GB/s per GPU and direction (NVIDIA H100 SXM datasheet; the hgx-h100
#: platform's own figure, `astra platforms`)
NVLINK_GBPS = 450
#: on-wafer link: Tesla's D1 die has "10tbps of on-chip bandwidth/4tbps of off-chip bandwidth" and a training
#: tile of 25 of them "36tbps of off-tile bandwidth" (Tesla AI Day 2021, as tesmanian.com reports it: "Tesla
#: Unveils Powerfull Dojo D1 Chip & 'training tiles' During AI Day"); semiwiki.com's Tesla Dojo chip wiki: "I/O
#: Bandwidth 4 TB/s (mesh edge-to-edge)", "25 D1 chips in a 5x5 mesh grid". ASSUMPTION: the 4 TB/s is split
#: evenly over the die's four mesh edges, 1 TB/s per link and direction.
ON_WAFER_LINK_GBPS = 1000
WAFER_SIDE = 4  # ASSUMPTION: 4 x 4 NPUs per wafer (Dojo's tile is 5 x 5; 16 keeps power-of-two layouts whole)
NODE_NPUS = 8
#: latencies per hop, ns (ASSUMPTIONS, orders of magnitude: a die-to-die hop, an NVSwitch hop, a NIC + switch)
ON_WAFER_LATENCY_NS, NVLINK_LATENCY_NS, OFF_NODE_LATENCY_NS = 50, 250, 1000
#: the axis: off-node bandwidth per NPU and direction, GB/s: 100 Gb/s ... 1.6 Tb/s (400 Gb/s is ConnectX-7's)
OFF_NODE_GBPS = [12.5, 25, 50, 100, 200]
SYSTEMS = ("scale-out", "wafer-scale")
#: the backend per model. GPT-3's collectives are rings (and its pipeline point-to-point): the analytical
#: backend, the fidelity of the paper's own "analytical performance estimates" (its abstract), and the only one
#: fast enough for 96 layers on 256 unfolded wafer ranks. DLRM's all-to-all is direct on a switch, and the
#: analytical backend gives each of its messages the whole link (21x too fast here): the flow backend shares a
#: link among the messages crossing it (max-min fair), and its rings take the analytical backend's times.
BACKENDS = {"gpt": "analytical", "dlrm": "flow"}

#: GPT-3 175B (the generator's gpt3-175b preset: 96 layers, hidden 12288, 96 heads, sequence 2048), the layout of
#: examples/case-studies/network-requirements with DP 4 instead of 16 (TP 8 x PP 8 x DP 4 = 256)
GPT = {"preset": "gpt3-175b", "tp": 8, "pp": 8, "dp": 4, "micro-batches": 8, "sequence-parallel": True}
SMALL_LAYERS = 8

#: DLRM, MLPerf's Criteo Terabyte run (facebookresearch/dlrm, bench/run_and_time.sh at 6d75c84d: --arch-sparse-
#: feature-size=128 --arch-mlp-bot="13-512-256-128" --arch-mlp-top="1024-1024-512-256-1", 26 embedding tables
#: in --arch-embedding-size, --mini-batch-size=2048, fp32). dlrm_s_pytorch.py puts the interaction's output
#: (27 * 26 / 2 pairwise dots + the 128 dense features = 479) in front of the top MLP.
DLRM_TABLES, DLRM_DIM, DLRM_BATCH, FP32_BYTES = 26, 128, 2048, 4  # ASSUMPTION: 2048 samples per NPU (weak scaling)
DLRM_BOTTOM = [13, 512, 256, 128]
DLRM_TOP = [(DLRM_TABLES + 1) * DLRM_TABLES // 2 + DLRM_DIM, 1024, 1024, 512, 256, 1]


def network(system, off_node_gbps):
    """The analytical network YAML of ``system`` with ``off_node_gbps`` per NPU across nodes / wafers; a message
    between nodes (wafers) pays every dimension it crosses (``dimension_order``, as the ``--platform`` networks)."""
    off = round(off_node_gbps * GIB_PER_GB, 3)
    if system == "scale-out":
        config = {"topology": ["Switch", "Switch"], "npus_count": [NODE_NPUS, NPUS // NODE_NPUS],
                  "bandwidth": [round(NVLINK_GBPS * GIB_PER_GB, 3), off],
                  "latency": [NVLINK_LATENCY_NS, OFF_NODE_LATENCY_NS]}
    else:
        wafer = round(ON_WAFER_LINK_GBPS * GIB_PER_GB, 3)
        config = {"topology": ["Ring", "Ring", "Switch"],
                  "npus_count": [WAFER_SIDE, WAFER_SIDE, NPUS // WAFER_SIDE ** 2],
                  "bandwidth": [wafer, wafer, off], "latency": [ON_WAFER_LATENCY_NS, ON_WAFER_LATENCY_NS,
                                                                 OFF_NODE_LATENCY_NS]}
    return dict(config, cross_dimension_route="dimension_order")


def system(topology):
    """The hgx-h100 platform's system JSON (``get_platform(...).resolve``: its chunking, scheduling and reduction
    rate) with one algorithm per dimension of ``topology`` (the platform's own lists two dimensions, and a
    collective would stay inside a wafer's two): ring for the reductions and gathers; for the all-to-all, ring
    on the on-wafer mesh (neighbours only) and direct on a switch (NCCL's all-to-all: a send to every peer)."""
    from astra_sim import get_platform

    setup = get_platform("hgx-h100").resolve(NPUS // NODE_NPUS, {"platform_collective": "ring"})
    config = json.loads(setup.system_configuration.text)
    for key in [k for k in config if k.endswith("-implementation")]:
        config[key] = ["ring"] * len(topology)
    config["all-to-all-implementation"] = ["direct" if kind == "Switch" else "ring" for kind in topology]
    return config


def machine_files(out, points):
    """One network YAML per (system, GB/s) point, named ``<system>_<GB/s>.yml``, and one system JSON per system;
    the network paths and ``{system: its system JSON's path}``."""
    networks, systems = [], {}
    for name in SYSTEMS:
        path = out / f"system_{name}.json"
        write_text_atomic(path, json.dumps(system(network(name, 1)["topology"]), indent=1) + "\n")
        systems[name] = str(path)
    for name, gbps in points:
        path = out / f"{name}_{gbps:g}.yml"
        write_text_atomic(path, "".join(f"{k}: {json.dumps(v)}\n" for k, v in network(name, gbps).items()))
        networks.append(str(path))
    return networks, systems


def _mm(name, m, k, n, deps):
    """An fp32 GEMM node ([m, k] x [k, n]) the GPU compute model times from its shapes."""
    return {"name": f"aten::mm.{name}", "type": "comp", "data_deps": deps,
            "attrs": {"inputs.shapes": json.dumps([[m, k], [k, n]]),
                      "inputs.types": "['Tensor(float)', 'Tensor(float)']"}}


def dlrm_graph(batch=DLRM_BATCH):
    """One NPU's DLRM step as an ``astra workload micro --graph`` spec, the hybrid parallelism of the DLRM paper
    (Naumov et al., arXiv 1906.00091): the embeddings are sharded over all NPUs, so the pooled embedding vectors
    of each NPU's samples come to it by an all-to-all (forward) and their gradients go back by another
    (backward); the bottom and top MLPs are data-parallel, their weight gradients summed by one all-reduce after
    the backward (ASSUMPTION: one gradient bucket). The lookups and the pairwise-dot interaction are left out
    (memory-bound, microseconds: the same on both systems)."""
    feature_bytes = batch * DLRM_TABLES * DLRM_DIM * FP32_BYTES
    nodes = [{"name": "a2a_fwd", "type": "all_to_all", "size": feature_bytes}]

    def forward(prefix, widths, deps):
        for i, (k, n) in enumerate(zip(widths, widths[1:])):
            nodes.append(_mm(f"{prefix}_fwd{i}", batch, k, n, deps))
            deps = [nodes[-1]["name"]]
        return deps

    def backward(prefix, widths, deps):
        for i in reversed(range(len(widths) - 1)):
            k, n = widths[i], widths[i + 1]
            nodes.append(_mm(f"{prefix}_wgrad{i}", k, batch, n, deps))  # dW = x^T . dy
            nodes.append(_mm(f"{prefix}_dgrad{i}", batch, n, k, deps))  # dx = dy . W^T
            deps = [nodes[-1]["name"]]
        return deps

    bottom = forward("bottom", DLRM_BOTTOM, [])
    top = forward("top", DLRM_TOP, bottom + ["a2a_fwd"])
    top_grad = backward("top", DLRM_TOP, top)
    nodes.append({"name": "a2a_bwd", "type": "all_to_all", "size": feature_bytes, "data_deps": top_grad})
    bottom_grad = backward("bottom", DLRM_BOTTOM, top_grad)
    wgrads = [n["name"] for n in nodes if "_wgrad" in n["name"]]
    nodes.append({"name": "allreduce_mlp", "type": "all_reduce", "size": mlp_params() * FP32_BYTES,
                  "data_deps": sorted(set(wgrads + bottom_grad))})
    return {"nodes": nodes}


def mlp_params():
    """The bottom and top MLPs' weights and biases (2,368,897 with MLPerf's widths)."""
    return sum(k * n + n for widths in (DLRM_BOTTOM, DLRM_TOP) for k, n in zip(widths, widths[1:]))


def spec(out, model, networks, systems, small):
    """The sweep of ``model`` ("gpt" or "dlrm") over ``networks`` (each zipped with its system's JSON); every
    point the same NPUs and compute (the GPU compute model without its comm/compute contention, so that only the
    network differs)."""
    import yaml

    run = {"platform": "hgx-h100", "compute-model": "gpu", "gpu-contention-model": "off",
           "network-backend": BACKENDS[model]}
    if model == "gpt":
        workload = {"llm": dict(GPT, layers=SMALL_LAYERS) if small else dict(GPT)}
    else:
        graph = out / "dlrm.yaml"
        write_text_atomic(graph, yaml.safe_dump(dlrm_graph(), sort_keys=False))
        workload = {"micro": {"graph": str(graph), "npus": NPUS}}
    paired = [systems[Path(path).stem.rsplit("_", 1)[0]] for path in networks]
    return {"workload": workload, "run": run,
            "axes": {"zip": {"run.network-configuration": networks, "run.system-configuration": paired}}}


def labelled(rows):
    """The rows with the network file split into the figure's axes: system and off-node GB/s per NPU."""
    out = []
    for row in rows:
        system, gbps = Path(row["run.network-configuration"]).stem.rsplit("_", 1)
        out.append(dict(row, system=system, off_node_gbps=gbps))
    return out


def main_(argv=None):
    args = parse_args(argv, __doc__)
    bandwidths = [OFF_NODE_GBPS[0], OFF_NODE_GBPS[-1]] if args.small else OFF_NODE_GBPS
    networks, systems = machine_files(args.out, [(s, b) for s in SYSTEMS for b in bandwidths])
    models = ["gpt"] if args.small else ["gpt", "dlrm"]
    steps = {}
    for model in models:
        model_spec = spec(args.out, model, networks, systems, args.small)
        rows = labelled(sweep(model_spec, args.out, f"wafer_scale_{model}", args.jobs)[1])
        name = "GPT-3 175B" + (f" ({SMALL_LAYERS} layers)" if args.small else "") if model == "gpt" else "DLRM"
        draw(["system", "off_node_gbps"], rows, args.out / ("figure.png" if model == "gpt" else "figure-dlrm.png"),
             f"{name}, {NPUS} NPUs: step by off-node GB/s per NPU")
        for row in rows:
            steps[model, row["system"], float(row["off_node_gbps"])] = int(row["step_ns"])
    print(f"{'model':>5} {'off-node Gb/s':>13} {'scale-out (ms)':>15} {'wafer-scale (ms)':>17} {'scale-out/wafer':>16}")
    for model in models:
        for gbps in bandwidths:
            out_ns, wafer_ns = steps[model, "scale-out", gbps], steps[model, "wafer-scale", gbps]
            print(f"{model:>5} {gbps * 8:>13g} {ms(out_ns):>15} {ms(wafer_ns):>17} {out_ns / wafer_ns:>15.2f}x")
    print(f"results and figures in {args.out}")
    low = bandwidths[0]
    return check(HERE, args.small, steps["gpt", "scale-out", low] / steps["gpt", "wafer-scale", low], args.out)


if __name__ == "__main__":
    raise SystemExit(main_())
