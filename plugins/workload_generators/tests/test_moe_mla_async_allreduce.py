"""Megatron's asynchronous non-SP input-gradient all-reduce in multi-head latent attention (issue 36, .mla): at TP > 1
without sequence parallelism Megatron-Core's Transformer Engine spec builds MLA's up-projections (``linear_q_up_proj``,
``linear_kv_up_proj``; ``linear_q_proj`` without ``q_lora_rank``) as ``TEColumnParallelLinear``, which all-reduce
their input gradient (the latent) after their dgrad GEMM, beside their wgrad, and its down-projections as
``TELinear(parallel_mode='duplicated')``, with no TP communication: so no all-reduce of the hidden state's gradient
(core_r0.14.0 ``gpt_layer_specs.py`` 123-147, ``multi_latent_attention.py`` 367-431). Sequence parallelism,
torchtitan and ``--no-async-tensor-model-parallel-allreduce`` as the module docstring says. MoE layers: nothing to
change, Megatron-Core refuses them in training at TP > 1 without sequence parallelism (``moe_layer.py`` 258-262;
EP > 1 with TP > 1 without it already in ``model_parallel_config.py`` 388-393). By hand on one-layer steps at TP 2,
one simulated on a 2-NPU analytical ring."""

from __future__ import annotations

import types

from astra_sim import hookimpl
from astra_sim.chakra import types as T
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# h 256, 4 heads of 48 (16 rotary), values 32, latents q 96 and kv 64; 2 sequences of 128 tokens: n = 256 rows
MLA = dict(layers=1, hidden=256, heads=4, kv_heads=4, head_size=48, rope_dim=16, v_head_dim=32, kv_lora_rank=64,
           q_lora_rank=96, ffn_hidden=512, vocab=1024, seq_len=128, gated=True, rms_norm=True)


def _step(tmp_path, name, dims=MLA, simulate_it=False, **cfg):
    cfg = LlmConfig(**{"micro_batches": 1, "micro_batch_size": 2, "tp": 2, "dropout": False, "elementwise": False,
                       **cfg})
    prefix = tmp_path / name
    generate_llm(model_dims(**dims), cfg, prefix)
    nodes = {n.attrs.get("label", n.name): n for n in read_rank_nodes(prefix, 0)}
    if not simulate_it:
        return nodes, None
    spans = {}
    probe = types.ModuleType("mla_ar_spans")
    probe.astra_run_start = hookimpl(lambda run: run.add_node_observer(
        lambda rank, node, start, end: spans.__setitem__(node.id, (start, end)) if rank == 0 else None))
    simulate(str(prefix), write_system_config(tmp_path / f"{name}.sys.json", dims=1),
             write_network_config(tmp_path / f"{name}.net.yml", npus=(2,)), None, f"{prefix}.groups.json",
             plugins=["network_analytical", "workload_generators"], extra_plugins=[probe], breakdown=False)
    return nodes, spans


def test_up_projections_all_reduce_their_latents_beside_the_wgrad(tmp_path):
    """kv_b's input gradient 256 x 64 x 2 B = 32,768 B, q_b's 256 x 96 x 2 B = 49,152 B, each hanging on its dgrad
    only; the down-projection's dgrad after waits for the wgrad and the all-reduce; no all-reduce of the hidden
    state's 256 x 256 gradient. Simulated: each starts at its dgrad's end, and the next GEMM at the later of the
    wgrad's and the all-reduce's ends."""
    nodes, spans = _step(tmp_path, "a", simulate_it=True)
    lab = "bwd.l0.mb0"
    assert f"tp_ar.{lab}.attn_in" not in nodes
    for up, down, size in (("kv_b", "kv_a", 256 * 64 * 2), ("q_b", "q_a", 256 * 96 * 2)):
        ar = nodes[f"tp_ar.{lab}.{up}_in"]
        dgrad, wgrad = nodes[f"{lab}.{up}.dgrad"], nodes[f"{lab}.{up}.wgrad"]
        assert ar.attrs["comm_type"] == T.ALL_REDUCE and ar.attrs["comm_size"] == size
        assert ar.data_deps == [dgrad.id] and wgrad.data_deps == [dgrad.id]
        nxt = nodes[f"{lab}.{down}.dgrad"]
        assert set(nxt.data_deps) == {wgrad.id, ar.id}
        assert spans[ar.id][0] == spans[dgrad.id][1] == spans[wgrad.id][0]
        assert spans[nxt.id][0] == max(spans[wgrad.id][1], spans[ar.id][1])
    # the down-projections are whole on each rank: no TP collective hangs on their GEMMs
    downs = {nodes[f"{lab}.{d}.{g}"].id for d in ("q_a", "kv_a") for g in ("dgrad", "wgrad")}
    assert not [k for k, n in nodes.items() if k.startswith("tp_") and downs & set(n.data_deps)]


def test_without_q_lora_rank_the_query_projection_reduces_the_hidden_gradient(tmp_path):
    """DeepSeek-V2-Lite's form: ``linear_q_proj`` (column-parallel on the hidden state): its 256 x 256 x 2 B =
    131,072 B all-reduce beside its wgrad; kv_b's latent as above."""
    nodes, _ = _step(tmp_path, "q", dims=dict(MLA, q_lora_rank=0))
    lab = "bwd.l0.mb0"
    ar = nodes[f"tp_ar.{lab}.q_in"]
    assert ar.attrs["comm_size"] == 256 * 256 * 2 and ar.data_deps == [nodes[f"{lab}.q.dgrad"].id]
    assert nodes[f"tp_ar.{lab}.kv_b_in"].attrs["comm_size"] == 256 * 64 * 2
    assert f"tp_ar.{lab}.attn_in" not in nodes


def test_other_layouts_keep_one_reduction_of_the_hidden_gradient(tmp_path):
    """--no-async-tensor-model-parallel-allreduce: the latents' all-reduces on the chain after each wgrad; sequence
    parallelism and torchtitan (FSDP2): the hidden state's reduce-scatter / all-reduce after the projections, as
    before; TP 1: none."""
    lab = "bwd.l0.mb0"
    nodes, _ = _step(tmp_path, "n", async_tp_allreduce=False)
    for up, down in (("kv_b", "kv_a"), ("q_b", "q_a")):
        ar = nodes[f"tp_ar.{lab}.{up}_in"]
        assert ar.data_deps == [nodes[f"{lab}.{up}.wgrad"].id]
        assert nodes[f"{lab}.{down}.dgrad"].data_deps == [ar.id]
    nodes, _ = _step(tmp_path, "s", sequence_parallel=True)
    assert nodes[f"tp_rs.{lab}.attn_in"].attrs["comm_size"] == 256 * 256 * 2
    assert not [k for k in nodes if k.endswith(("q_b_in", "kv_b_in"))]
    nodes, _ = _step(tmp_path, "f", framework="fsdp2", zero=3, dp=2)
    assert nodes[f"tp_ar.{lab}.attn_in"].data_deps == [nodes[f"{lab}.q_a.wgrad"].id]
    assert not [k for k in nodes if k.endswith(("q_b_in", "kv_b_in"))]
    nodes, _ = _step(tmp_path, "t1", tp=1)
    assert not [k for k in nodes if k.startswith("tp_")]
