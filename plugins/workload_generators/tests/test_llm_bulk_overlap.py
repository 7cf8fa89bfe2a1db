"""Transformer Engine's bulk userbuffers overlaps in a Megatron step with ``--tp-comm-overlap`` (issue 36): the
sequence-parallel re-gather of the QKV / FC1 input (``qkv_dgrad`` / ``fc1_dgrad``) starts with the dgrad GEMM, after
the output gradient's cast; the main stream waits for it right after launching that GEMM, so the bulk reduce-scatter
of the input gradient (``qkv_wgrad`` / ``fc1_wgrad``), launched with the wgrad GEMM, starts when the gather is over
(NVIDIA/TransformerEngine v2.1 ``comm_gemm_overlap.cpp`` ``CommOverlapBase::bulk_overlap`` 251-299,
``layernorm_mlp.py`` 779-875, ``layernorm_linear.py`` 504-660). By hand on a one-layer step at TP 2, simulated on a
2-NPU analytical ring with GEMMs at the 1 us floor (each gather outlasts its dgrad GEMM)."""

from __future__ import annotations

import types

import pytest

from astra_sim import hookimpl
from astra_sim.chakra import types as T
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# one layer, h 256, FFN 512 (gated), 2 sequences of 128 tokens: n = 256 rows, 128 kept per TP rank
ONE_LAYER = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
                 rms_norm=True)
GATHERED_BYTES = 256 * 256 * 1  # the LayerNorm output, FP8 (TE's all-gather buffers are uint8): 65,536 B
GRAD_BYTES = 256 * 256 * 2  # the input gradient in --dtype (bf16): 131,072 B reduce-scattered
# NeMo 25.02's userbuffers_fp8_b200_h12288_tp4_mbs1_seqlen2048 (recipes/tp_overlap_configs/userbuffers.py, v2.2.0)
SMS = (("qkv_dgrad", 4), ("qkv_wgrad", 16), ("fc1_dgrad", 2), ("fc1_wgrad", 8))


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """Rank 0's nodes by label and each node's ``(start, end)`` ns by id."""
    tmp = tmp_path_factory.mktemp("bulk")
    cfg = LlmConfig(micro_batches=1, micro_batch_size=2, tp=2, dropout=False, sequence_parallel=True,
                    tp_comm_overlap=True, gemm_dtype="fp8", dtype="bf16", comm_sms=SMS)
    prefix = tmp / "w"
    generate_llm(model_dims(**ONE_LAYER), cfg, prefix)
    nodes = {n.attrs.get("label", n.name): n for n in read_rank_nodes(prefix, 0)}
    spans = {}
    probe = types.ModuleType("bulk_spans")
    probe.astra_run_start = hookimpl(lambda run: run.add_node_observer(
        lambda rank, node, start, end: spans.__setitem__(node.id, (start, end)) if rank == 0 else None))
    simulate(str(prefix), write_system_config(tmp / "sys.json", dims=1), write_network_config(tmp / "net.yml",
             npus=(2,)), None, f"{prefix}.groups.json", plugins=["network_analytical", "workload_generators"],
             extra_plugins=[probe], breakdown=False)
    return nodes, spans


SITES = (("mlp_in", "fc1", 2, 8), ("attn_in", "qkv", 4, 16))


def test_the_nodes_and_their_dependencies(step):
    """The gather hangs on the node just before the dgrad GEMM (QKV: the output gradient's FP8 cast, which TE's
    grad_output_preprocess runs first); the dgrad GEMM does not wait for it, the wgrad GEMM does; the reduce-scatter
    waits for the gather and for the chain's node before the wgrad, and the wgrad does not wait for it."""
    nodes, _ = step
    for site, gemm, ag_sms, rs_sms in SITES:
        ag, rs = nodes[f"tp_ag.bwd.l0.mb0.{site}.regather"], nodes[f"tp_rs.bwd.l0.mb0.{site}"]
        dgrad, wgrad = nodes[f"bwd.l0.mb0.{gemm}.dgrad"], nodes[f"bwd.l0.mb0.{gemm}.wgrad"]
        assert ag.attrs["comm_type"] == T.ALL_GATHER and ag.attrs["comm_size"] == GATHERED_BYTES // 2
        assert rs.attrs["comm_type"] == T.REDUCE_SCATTER and rs.attrs["comm_size"] == GRAD_BYTES
        assert (ag.attrs["comm_sms"], rs.attrs["comm_sms"]) == (ag_sms, rs_sms)
        assert ag.id < dgrad.id < rs.id < wgrad.id
        assert ag.id not in dgrad.data_deps and ag.data_deps == [n for n in dgrad.data_deps if n != ag.id]
        assert ag.id in wgrad.data_deps and rs.id not in wgrad.data_deps
        assert set(rs.data_deps) == {ag.id, rs.id - 1}  # (its chain node: the dgrad, or Hopper's FP8 transpose)
    cast = nodes["bwd.l0.mb0.qkv.dgrad.fp8_cast"]
    assert nodes["tp_ag.bwd.l0.mb0.attn_in.regather"].data_deps == [cast.id]


def test_the_scatter_starts_when_the_gather_ends(step):
    """By hand: the gather starts with the dgrad GEMM (1 us) and outlasts it; Hopper's FP8 transpose of the gathered
    input (H100, the default GPU) starts at the gather's end, and the wgrad GEMM and the reduce-scatter both start at
    the transpose's end, not at the dgrad's (where the reduce-scatter started before)."""
    nodes, spans = step
    for site, gemm, _, _ in SITES:
        ag = spans[nodes[f"tp_ag.bwd.l0.mb0.{site}.regather"].id]
        rs = spans[nodes[f"tp_rs.bwd.l0.mb0.{site}"].id]
        dgrad = spans[nodes[f"bwd.l0.mb0.{gemm}.dgrad"].id]
        transpose = spans[nodes[f"bwd.l0.mb0.{gemm}.wgrad.fp8_transpose"].id]
        wgrad = spans[nodes[f"bwd.l0.mb0.{gemm}.wgrad"].id]
        assert ag[0] == dgrad[0] and dgrad[1] - dgrad[0] == 1_000 and ag[1] > dgrad[1]
        assert transpose[0] == ag[1] and rs[0] == transpose[1] == wgrad[0]
