"""The LM head's sequence-parallel communication (issue 36): with sequence parallelism at TP > 1 the head (a
column-parallel linear, vocab split over TP) all-gathers the final norm's s/TP rows over TP before its GEMM; its
backward re-gathers them for the weight gradient (Megatron) and reduce-scatters the input gradient; by hand."""

from __future__ import annotations

import json

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.layout import rank_of

# h 256, vocab 1000, sequences of 128 tokens; micro-batches of 2 sequences: the head's input is 2 x 128 = 256 rows
SMALL = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
             rms_norm=True)
GATHERED = 256 * 256 * 2  # all 256 rows x h 256 x 2 B (bf16): 131,072 B, the gathered input / the scattered gradient


def _gen(tmp_path, stage=0, name="t", **cfg):
    cfg = LlmConfig(**{"micro_batches": 2, "micro_batch_size": 2, "tp": 2, "sequence_parallel": True, **cfg})
    generate_llm(model_dims(**SMALL), cfg, tmp_path / name)
    groups = json.loads((tmp_path / f"{name}.groups.json").read_text())
    rank = rank_of(cfg, 0, 0, stage)
    return cfg, groups, rank, read_rank_nodes(tmp_path / name, rank)


def _head_comms(nodes):
    return {n.name: n for n in nodes if n.type == T.COMM_COLL_NODE and ".head." in n.name}


def _by_label(nodes, label):
    return next(n for n in nodes if n.attrs.get("label") == label)


def test_megatron_gather_regather_and_reduce_scatter_by_hand(tmp_path):
    """PP 2, TP 2: the first stage has none; the last stage, per micro-batch: the forward all-gather (each TP rank
    contributes its 128 rows: 128 x 256 x 2 = 65,536 B; 131,072 B gathered) between the final norm and the head
    GEMM; the backward re-gather (the same bytes) launched before the dgrad GEMM, waited on by the wgrad GEMM; the
    reduce-scatter of the dgrad's 131,072 B after the dgrad, beside the wgrad, waited on by the final norm's backward.
    All on the TP communicator of the rank's stage."""
    _, _, _, first = _gen(tmp_path, 0, "first", pp=2)
    assert _head_comms(first) == {}
    _, groups, rank, nodes = _gen(tmp_path, 1, "last", pp=2)
    comms = _head_comms(nodes)
    assert sorted(comms) == sorted(f"{k}.mb{mb}.head_in{r}" for mb in (0, 1) for k, r in (
        ("tp_ag.fwd.head", ""), ("tp_ag.bwd.head", ".regather"), ("tp_rs.bwd.head", "")))
    tp_group = sorted({rank, rank + 1})  # TP is the fastest-varying index
    for node in comms.values():
        assert sorted(groups[node.attrs["pg_name"]]) == tp_group
    ag, rg, rs = (comms["tp_ag.fwd.head.mb0.head_in"], comms["tp_ag.bwd.head.mb0.head_in.regather"],
                  comms["tp_rs.bwd.head.mb0.head_in"])
    assert ag.attrs["comm_type"] == rg.attrs["comm_type"] == T.ALL_GATHER
    assert ag.attrs["comm_size"] == rg.attrs["comm_size"] == GATHERED // 2 == 65_536  # each rank's contribution
    assert rs.attrs["comm_type"] == T.REDUCE_SCATTER and rs.attrs["comm_size"] == GATHERED == 131_072
    # forward: final norm -> gather -> head GEMM (all 256 rows)
    norm, head = _by_label(nodes, "fwd.final_norm.mb0.ln"), _by_label(nodes, "fwd.head.mb0")
    assert norm.id in ag.data_deps and ag.id in head.data_deps
    assert json.loads(head.inputs_shapes)[0] == [256, 256]
    # backward: re-gather before the dgrad, the wgrad waits on it; the reduce-scatter after the dgrad, and the final
    # norm's backward waits on it (and on the wgrad, the chain)
    dgrad, wgrad = _by_label(nodes, "bwd.head.mb0.dgrad"), _by_label(nodes, "bwd.head.mb0.wgrad")
    bnorm = _by_label(nodes, "bwd.final_norm.mb0.ln")
    assert rg.id < dgrad.id and rg.id in wgrad.data_deps
    assert rs.data_deps == [dgrad.id] and rs.id < wgrad.id
    assert rs.id in bnorm.data_deps and wgrad.id in bnorm.data_deps


def test_without_sequence_parallelism_megatron_only_all_reduces_the_input_gradient(tmp_path):
    """No gather or re-gather without SP; Megatron's output layer (``allreduce_dgrad``) all-reduces the whole input
    gradient after the dgrad, once a micro-batch (timed in test_async_tp_allreduce.py)."""
    _, _, _, nodes = _gen(tmp_path, sequence_parallel=False)
    comms = _head_comms(nodes)
    assert sorted(comms) == ["tp_ar.bwd.head.mb0.head_in", "tp_ar.bwd.head.mb1.head_in"]
    assert all(c.attrs["comm_type"] == T.ALL_REDUCE and c.attrs["comm_size"] == GATHERED for c in comms.values())


def test_torchtitan_gathers_and_scatters_without_a_regather(tmp_path):
    """torchtitan (``--framework fsdp2``): ``ColwiseParallel(input_layouts=Shard(1))`` on the output gathers the
    SequenceParallel norm's shard; DTensor's autograd keeps the gathered input for the weight gradient (no
    re-gather); the input gradient is reduce-scattered back to Shard(1)."""
    _, _, _, nodes = _gen(tmp_path, framework="fsdp2", zero=3, dp=2, micro_batches=1)
    comms = _head_comms(nodes)
    assert sorted(comms) == ["tp_ag.fwd.head.mb0.head_in", "tp_rs.bwd.head.mb0.head_in"]
    assert comms["tp_ag.fwd.head.mb0.head_in"].attrs["comm_size"] == GATHERED // 2


def test_tp_comm_overlap_fp8_leaves_the_head_a_bf16_nccl_gather(tmp_path):
    """Megatron's ``output_layer`` is not a Transformer Engine module: with ``--tp-comm-overlap`` and FP8 GEMMs its
    gathers stay NCCL all-gathers in bf16 (2 B an element, not userbuffers' FP8 byte), counted as TP
    communication for ``--comm-sms``, with no userbuffers ring messages."""
    _, _, _, nodes = _gen(tmp_path, tp_comm_overlap=True, gemm_dtype="fp8", micro_batches=1,
                          comm_sms=(("tp", 8),))
    comms = _head_comms(nodes)
    assert sorted(comms) == ["tp_ag.bwd.head.mb0.head_in.regather", "tp_ag.fwd.head.mb0.head_in",
                             "tp_rs.bwd.head.mb0.head_in"]
    assert {n.attrs["comm_size"] for n in comms.values() if n.attrs["comm_type"] == T.ALL_GATHER} == {65_536}
    assert {n.attrs.get("comm_sms") for n in comms.values()} == {8}
    assert not any(".head" in n.name for n in nodes if n.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE))


def test_frozen_head_has_no_regather(tmp_path):
    """LoRA: the head's weight is frozen, no weight gradient, so nothing to re-gather its input for."""
    _, _, _, nodes = _gen(tmp_path, lora_rank=8, lora_targets=("qkv",), micro_batches=1)
    assert sorted(_head_comms(nodes)) == ["tp_ag.fwd.head.mb0.head_in", "tp_rs.bwd.head.mb0.head_in"]
