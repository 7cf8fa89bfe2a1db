"""``astra workload llm --cuda-graphs``: each layer's forward and backward is one CUDA graph (node attribute
``cuda_graph``), launched once by astra run's host model, and the graphs' pools add 20 % to the activations."""

from __future__ import annotations

import re

from astra_sim import simulate
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.memory import peak_memory
from astra_workload_generators.llm.memory_terms import CUDA_GRAPH_ACTIVATION_FRACTION

LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)


def _nodes(tmp_path, name, **kw):
    cfg = LlmConfig(**{"tp": 2, "micro_batches": 2, **kw})
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return tmp_path / name, read_rank_nodes(tmp_path / name, 0)


def test_every_layer_pass_is_one_graph_numbered_in_trace_order(tmp_path):
    _, nodes = _nodes(tmp_path, "g", cuda_graphs=True)
    graphs = {}
    for node in nodes:
        label = node.attrs.get("label") or node.name
        if "cuda_graph" in node.attrs:
            # the layer pass a node belongs to (its TP collectives are labelled tp_ar.fwd.l0.mb0...)
            graphs.setdefault(node.attrs["cuda_graph"], set()).add(re.search(r"(fwd|bwd)\.l\d+\.mb\d+", label)[0])
    # 2 layers x 2 micro-batches x (forward, backward): 8 graphs, each one layer pass of one micro-batch
    assert sorted(graphs) == list(range(1, 9))
    assert all(len(passes) == 1 for passes in graphs.values()), graphs
    assert {next(iter(p)) for p in graphs.values()} == {f"{d}.l{layer}.mb{mb}" for d in ("fwd", "bwd")
                                                        for layer in (0, 1) for mb in (0, 1)}
    ids = [n.attrs["cuda_graph"] for n in nodes if "cuda_graph" in n.attrs]
    assert ids == sorted(ids)  # in emission order: the host model launches a graph when a later one starts
    # the loss, the embedding and the optimizer stay outside any graph
    assert any("head" in (n.attrs.get("label") or "") and "cuda_graph" not in n.attrs for n in nodes)


def test_without_the_flag_no_node_is_graphed(tmp_path):
    _, nodes = _nodes(tmp_path, "e")
    assert not any("cuda_graph" in n.attrs for n in nodes)


def test_the_graphs_keep_a_fifth_more_activation_memory():
    dims = model_dims(**LLAMA)
    eager = peak_memory(dims, LlmConfig(tp=2, micro_batches=2))
    graphed = peak_memory(dims, LlmConfig(tp=2, micro_batches=2, cuda_graphs=True))
    assert CUDA_GRAPH_ACTIVATION_FRACTION == 0.20
    assert graphed.activations == eager.activations + int(0.20 * eager.activations)
    assert (graphed.weights, graphed.optimizer) == (eager.weights, eager.optimizer)


def test_a_launch_bound_step_is_faster_with_graphs_and_the_same_without_a_host(tmp_path):
    eager, _ = _nodes(tmp_path, "e", micro_batches=1)
    graphed, _ = _nodes(tmp_path, "g", micro_batches=1, cuda_graphs=True)
    run = dict(platform="hgx-h100", nodes=1)
    host = {"host_launch_us": 20}
    assert simulate(workload=str(graphed), **run, **host).max_finish_ns < \
        simulate(workload=str(eager), **run, **host).max_finish_ns
    assert simulate(workload=str(graphed), **run, host_launch_us=0).max_finish_ns == \
        simulate(workload=str(eager), **run, host_launch_us=0).max_finish_ns
