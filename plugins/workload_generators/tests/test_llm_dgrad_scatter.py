"""The layers' sequence-parallel reduce-scatter of the QKV / FC1 input gradient (issue 36): Megatron launches it
asynchronously right after the input-gradient GEMM, before the weight-gradient GEMM, and waits for it after
(``LinearWithGradAccumulationAndAsyncCommunication.backward``, Megatron-LM core_r0.14.0; Transformer Engine's
``_Linear`` / ``_LayerNormLinear`` likewise); by hand, on a 2-layer model at TP 2."""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# h 256, sequences of 128 tokens, micro-batches of 2: each layer's input gradient is 256 rows x 256 x 2 B
SMALL = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
             rms_norm=True)
GRAD_BYTES = 256 * 256 * 2  # 131,072 B reduce-scattered (each rank keeps its 128 rows)


def _nodes(tmp_path, **cfg):
    cfg = LlmConfig(**{"micro_batches": 1, "micro_batch_size": 2, "tp": 2, "sequence_parallel": True,
                       "dropout": False, **cfg})
    generate_llm(model_dims(**SMALL), cfg, tmp_path / "t")
    nodes = read_rank_nodes(tmp_path / "t", 0)
    return {n.attrs.get("label", n.name): n for n in nodes}, {n.name: n for n in nodes}


def test_megatron_scatter_runs_beside_the_wgrad_and_the_norm_waits(tmp_path):
    """For FC1 and QKV of layer 1: the reduce-scatter (131,072 B over TP) depends on the dgrad GEMM only; the wgrad
    GEMM does not wait for it (it runs beside it); the norm's backward waits for it and for the wgrad (the chain)."""
    labels, names = _nodes(tmp_path)
    for site, gemm, norm in (("mlp_in", "fc1", "ln2"), ("attn_in", "qkv", "ln1")):
        rs = names[f"tp_rs.bwd.l1.mb0.{site}"]
        assert rs.attrs["comm_type"] == T.REDUCE_SCATTER and rs.attrs["comm_size"] == GRAD_BYTES
        dgrad, wgrad = labels[f"bwd.l1.mb0.{gemm}.dgrad"], labels[f"bwd.l1.mb0.{gemm}.wgrad"]
        bnorm = labels[f"bwd.l1.mb0.{norm}.ln"]
        assert rs.data_deps == [dgrad.id]
        assert dgrad.id < rs.id < wgrad.id and rs.id not in wgrad.data_deps
        assert rs.id in bnorm.data_deps and wgrad.id in bnorm.data_deps


def test_without_elementwise_nodes_the_next_gemm_waits(tmp_path):
    """No norm to wait: the next node on the compute chain waits for the scatter (FC1's: the projection's
    gradient gather's successor chain; QKV's of layer 1: layer 0's first backward node)."""
    labels, names = _nodes(tmp_path, elementwise=False)
    rs = names["tp_rs.bwd.l1.mb0.attn_in"]
    waiting = [n for n in labels.values() if rs.id in n.data_deps]
    assert waiting and min(n.id for n in waiting) > labels["bwd.l1.mb0.qkv.wgrad"].id


def test_torchtitan_keeps_the_reduction_after_the_wgrad_and_non_sp_all_reduces_beside_it(tmp_path):
    """Autograd (torchtitan's DTensor) reduces after the matmul's backward: on the chain after the wgrad GEMM.
    Without SP Megatron all-reduces the input gradient asynchronously, beside the wgrad GEMM, as it reduce-scatters
    it with SP (``allreduce_dgrad``; timed by hand in test_async_tp_allreduce.py)."""
    labels, names = _nodes(tmp_path, framework="fsdp2", zero=3, dp=2)
    assert labels["bwd.l1.mb0.fc1.wgrad"].id in names["tp_rs.bwd.l1.mb0.mlp_in"].data_deps
    labels, names = _nodes(tmp_path, sequence_parallel=False)
    ar = names["tp_ar.bwd.l1.mb0.mlp_in"]
    assert ar.data_deps == [labels["bwd.l1.mb0.fc1.dgrad"].id] and ar.id not in labels["bwd.l1.mb0.fc1.wgrad"].data_deps
