"""Expert weights in remote memory: the MoE blocks' exposed time against the memory's bandwidth, per memory model.

    .venv/bin/python examples/case-studies/disaggregated-memory-moe/run.py [--small] [--out DIR]

The MoE blocks of DeepSeek-V3 (58 MoE layers, 256 routed experts of 7168 x 2048, 8 routed per token) trained
with expert parallelism on 64 H100 (8 nodes of 8, the ``hgx-h100`` platform, the GPU compute model): each GPU
holds 4 experts per layer, and their weights live in remote memory. Every layer streams its experts' weights in
before its forward and again before its backward (double-buffered: the next layer's load runs while this one
computes) and writes its weight gradients back. The remote memory is the memory backend ``analytical``'s
three expansions at the same bandwidth per GPU: ``PER_NPU`` (one device per GPU), ``PER_NODE`` (one device of
8x the bandwidth per node of 8) and ``MEMORY_POOL`` (one device of 64x for all 64 GPUs), from 16 to 256 GB/s
per GPU; ``NO_MEMORY_EXPANSION`` is the same step with the weights in HBM (no loads). The exposed time is a
step's time minus that one's. Full: 58 layers, 16 points (about 2 minutes on 2 cores); ``--small``: 4 layers,
the memory pool at the two bandwidths of the headline (about 10 s). The headline is the pool's exposed time at
32 GB/s per GPU over its exposed time at 64 GB/s per GPU (README.md says why it is not the paper's 4.6x).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from casestudy import check, draw, ms, parse_args, sweep  # noqa: E402

from astra_sim.errors import ConfigError  # noqa: E402
from astra_sim.safeio import write_text_atomic  # noqa: E402

#: DeepSeek-V3 (DeepSeek-V3 Technical Report, arXiv 2412.19437, section 4.2 "Hyper-Parameters"): hidden size
#: 7168, 61 layers of which the first 3 are dense (58 MoE layers), 256 routed experts of intermediate size 2048,
#: 8 routed experts per token, sequences of 4K tokens in pre-training
HIDDEN, EXPERT_FFN, MOE_LAYERS, EXPERTS, TOP_K, SEQUENCE = 7168, 2048, 58, 256, 8, 4096
GPUS, GPUS_PER_NODE = 64, 8  # expert parallelism over 8 hgx-h100 nodes: 4 experts per GPU and layer
BF16_BYTES = 2
REMOTE_LATENCY_NS = 1000  # ASSUMPTION: a CXL-attached memory's request latency, order of magnitude
#: remote-memory bandwidth per GPU, GB/s (bytes/ns, as the memory JSON takes it); 64 GB/s is about one PCIe 5.0 /
#: CXL 2.0 x16 link's per direction (PCI-SIG PCIe 5.0: 32 GT/s x 16 lanes, 128b/130b)
BANDWIDTHS = [16, 32, 48, 64, 80, 96, 128, 256]
SLOW, FAST = 32, 64  # the headline's two bandwidths
MODELS = {"per_npu": "PER_NPU_MEMORY_EXPANSION", "per_node": "PER_NODE_MEMORY_EXPANSION", "pool": "MEMORY_POOL"}
SHARERS = {"per_npu": 1, "per_node": GPUS_PER_NODE, "pool": GPUS}  # GPUs sharing one memory device


def expert_shapes():
    """(experts per GPU, tokens per expert, bytes of one layer's local expert weights); balanced routing
    (ASSUMPTION): every GPU's experts get ``SEQUENCE x TOP_K / experts per GPU`` tokens each."""
    local = EXPERTS // GPUS
    tokens = SEQUENCE * TOP_K // local
    weights = local * 3 * HIDDEN * EXPERT_FFN * BF16_BYTES  # gate, up and down projections
    return local, tokens, weights


def _bmm(name, a, b, deps):
    """A batched GEMM node the GPU compute model times from its shapes (one batch entry per local expert)."""
    return {"name": f"aten::bmm.{name}", "type": "comp", "data_deps": deps,
            "attrs": {"inputs.shapes": json.dumps([a, b]),
                      "inputs.types": "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"}}


def moe_graph(layers, remote):
    """One rank's step over the MoE blocks as an ``astra workload micro --graph`` spec: per layer the experts'
    forward GEMMs, in reverse the backward's data- and weight-gradient GEMMs; with ``remote``, a load of the
    layer's weights before each pass (after the previous load, and once the layer two before has computed:
    two layers' weights in HBM at a time; the backward's first layer is still resident) and a store of its
    weight gradients after the backward."""
    local, t, weights = expert_shapes()
    h, f = HIDDEN, EXPERT_FFN
    order = [("fwd", layer) for layer in range(layers)] + [("bwd", layer) for layer in reversed(range(layers))]
    nodes = []
    last = []  # the previous computation (the step runs its layers in order)
    done = []  # the computation of each position of ``order``
    previous_load = []
    for pos, (phase, layer) in enumerate(order):
        deps = list(last)
        resident = phase == "bwd" and layer == layers - 1  # the last layer's weights are still in HBM
        if remote and not resident:
            load = f"load_{phase}{layer}"
            nodes.append({"name": load, "type": "mem_load", "size": weights,
                          "data_deps": previous_load + (done[pos - 2:pos - 1] if pos >= 2 else [])})
            previous_load = [load]
            deps.append(load)
        tag = f"{phase}{layer}"
        if phase == "fwd":
            nodes.append(_bmm(f"gate_up_{tag}", [local, t, h], [local, h, 2 * f], deps))
            nodes.append(_bmm(f"down_{tag}", [local, t, f], [local, f, h], [f"aten::bmm.gate_up_{tag}"]))
            last = [f"aten::bmm.down_{tag}"]
        else:
            nodes.append(_bmm(f"down_dgrad_{tag}", [local, t, h], [local, h, f], deps))
            nodes.append(_bmm(f"down_wgrad_{tag}", [local, f, t], [local, t, h], [f"aten::bmm.down_dgrad_{tag}"]))
            nodes.append(_bmm(f"gate_up_dgrad_{tag}", [local, t, 2 * f], [local, 2 * f, h],
                              [f"aten::bmm.down_wgrad_{tag}"]))
            nodes.append(_bmm(f"gate_up_wgrad_{tag}", [local, h, t], [local, t, 2 * f],
                              [f"aten::bmm.gate_up_dgrad_{tag}"]))
            last = [f"aten::bmm.gate_up_wgrad_{tag}"]
            if remote:
                nodes.append({"name": f"store_{tag}", "type": "mem_store", "size": weights, "data_deps": last})
        done.append(last[0])
    return {"nodes": nodes}


def memory_file(out, model, gbps):
    """The remote-memory JSON of ``model`` at ``gbps`` per GPU (a shared device gets the sum of its GPUs')."""
    memory = {"memory-type": MODELS[model], "remote-mem-latency": REMOTE_LATENCY_NS,
              "remote-mem-bw": gbps * SHARERS[model]}
    if model == "per_node":
        memory.update({"num-nodes": GPUS // GPUS_PER_NODE, "num-npus-per-node": GPUS_PER_NODE})
    path = out / f"{model}_{gbps}.json"
    write_text_atomic(path, json.dumps(memory, indent=1) + "\n")
    return str(path)


def spec(out, layers, remote, memories=None):
    import yaml

    graph = out / f"moe_{layers}layers_{'remote' if remote else 'hbm'}.yaml"
    write_text_atomic(graph, yaml.safe_dump(moe_graph(layers, remote), sort_keys=False))
    run = {"platform": "hgx-h100", "compute-model": "gpu", "gpu-contention-model": "off"}
    result = {"workload": {"micro": {"graph": str(graph), "npus": GPUS}}, "run": run}
    if memories:
        run["remote-memory-configuration"] = memories[0]
        result["axes"] = {"grid": {"run.remote-memory-configuration": memories}}
    return result


def labelled(rows):
    """The rows with the memory file split into the figure's two axes: memory model and GB/s per GPU."""
    out = []
    for row in rows:
        model, gbps = Path(row["run.remote-memory-configuration"]).stem.rsplit("_", 1)
        out.append(dict(row, memory=model, gbps_per_gpu=gbps))
    return out


def main_(argv=None):
    args = parse_args(argv, __doc__)
    layers = 4 if args.small else MOE_LAYERS
    points = [("pool", SLOW), ("pool", FAST)] if args.small else [(m, b) for m in MODELS for b in BANDWIDTHS]
    memories = [memory_file(args.out, model, gbps) for model, gbps in points]
    _, base = sweep(spec(args.out, layers, remote=False), args.out, "moe_hbm", args.jobs)
    (hbm,) = [int(row["step_ns"]) for row in base]
    _, rows = sweep(spec(args.out, layers, remote=True, memories=memories), args.out, "moe_remote", args.jobs)
    rows = labelled(rows)
    draw(["memory", "gbps_per_gpu"], rows, args.out / "figure.png",
         f"DeepSeek-V3 MoE blocks ({layers} layers), 64 H100: step time per remote memory and GB/s per GPU")
    step = {(row["memory"], int(row["gbps_per_gpu"])): int(row["step_ns"]) for row in rows}
    if any(step[point] < hbm for point in step):
        raise ConfigError("case study: a step with remote memory is shorter than with the weights in HBM")
    print(f"weights in HBM (NO_MEMORY_EXPANSION): step {ms(hbm)} ms")
    print(f"{'memory':>9} {'GB/s per GPU':>13} {'step (ms)':>10} {'exposed (ms)':>13}")
    for model, gbps in points:
        print(f"{model:>9} {gbps:>13} {ms(step[model, gbps]):>10} {ms(step[model, gbps] - hbm):>13}")
    print(f"results and figures in {args.out}")
    exposed_slow, exposed_fast = step["pool", SLOW] - hbm, step["pool", FAST] - hbm
    return check(HERE, args.small, exposed_slow / max(exposed_fast, 1), args.out)


if __name__ == "__main__":
    raise SystemExit(main_())
