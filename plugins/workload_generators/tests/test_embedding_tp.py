"""The embedding's communication (issue 36), by hand: the vocabulary-parallel embedding's output reduced over TP
once a micro-batch on the first stage (Megatron: an all-reduce, or with sequence parallelism and no learned
positions a reduce-scatter; torchtitan: a reduce-scatter), the gradient's all-gather in the backward with sequence
parallelism, and the tied word-embedding gradient's all-reduce between the first and the last stage."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.layout import rank_of

# h 256, vocab 1000, sequences of 128 tokens, micro-batches of 2 sequences: 256 rows of the residual stream
ROTARY = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
              rms_norm=True, rotary=True)
ROWS_BYTES = 2 * 128 * 256 * 2  # b 2 x s 128 x h 256 x 2 B (bf16) = 131,072 B: the whole embedding output


def _gen(tmp_path, dims=ROTARY, stage=0, name="t", **cfg):
    cfg = LlmConfig(**{"micro_batches": 2, "micro_batch_size": 2, "tp": 2, **cfg})
    generate_llm(model_dims(**dims), cfg, tmp_path / name)
    groups = json.loads((tmp_path / f"{name}.groups.json").read_text())
    rank = rank_of(cfg, 0, 0, stage)
    return groups, rank, read_rank_nodes(tmp_path / name, rank)


def _emb_comms(nodes):
    return {n.name: n for n in nodes
            if n.type == T.COMM_COLL_NODE and n.name.startswith("tp_") and ".embedding." in n.name}


def _by_label(nodes, label):
    return next(n for n in nodes if n.attrs.get("label") == label)


def _first_node(nodes, prefix):
    return next(n for n in nodes if n.attrs.get("label", "").startswith(prefix))


def _reaches(nodes, a, b):
    """Whether ``b`` waits for ``a`` through data dependencies (Megatron's memory-bound kernels around the
    embedding, test_embedding_kernels.py, sit between the collective and its neighbours)."""
    by_id = {n.id: n for n in nodes}
    todo, seen = list(b.data_deps), set()
    while todo:
        i = todo.pop()
        if i == a.id:
            return True
        if i not in seen:
            seen.add(i)
            todo.extend(by_id[i].data_deps)
    return False


def test_megatron_all_reduces_the_embedding_output_without_sp(tmp_path):
    """TP 2, no SP: one all-reduce of the whole 131,072 B output per micro-batch, on the TP group, after the lookup
    and before the first layer's first node (its norm); nothing in the backward (the all-reduce's is the identity)."""
    groups, rank, nodes = _gen(tmp_path)
    comms = _emb_comms(nodes)
    assert sorted(comms) == ["tp_ar.fwd.embedding.mb0", "tp_ar.fwd.embedding.mb1"]
    for mb in (0, 1):
        ar = comms[f"tp_ar.fwd.embedding.mb{mb}"]
        assert ar.attrs["comm_type"] == T.ALL_REDUCE and ar.attrs["comm_size"] == ROWS_BYTES
        assert sorted(groups[ar.attrs["pg_name"]]) == [rank, rank + 1]
        lookup, ln1 = _by_label(nodes, f"fwd.embedding.mb{mb}"), _first_node(nodes, f"fwd.l0.mb{mb}.")
        assert _reaches(nodes, lookup, ar) and _reaches(nodes, ar, ln1)
        assert ar.data_deps == [_by_label(nodes, f"fwd.embedding.mb{mb}.output_mask.rows").id]


def test_megatron_reduce_scatters_with_sp_and_gathers_the_gradient(tmp_path):
    """TP 2 with SP, rotary (no learned positions): Megatron's ``reduce_scatter_embeddings``: a reduce-scatter of the
    131,072 B output (each rank keeps 65,536 B) per micro-batch; in the backward the gradient's all-gather (each rank
    contributes its 65,536 B) after the first layer's backward, before the embedding's weight gradient."""
    groups, rank, nodes = _gen(tmp_path, sequence_parallel=True)
    comms = _emb_comms(nodes)
    assert sorted(comms) == sorted(f"{k}.mb{mb}" for mb in (0, 1)
                                   for k in ("tp_rs.fwd.embedding", "tp_ag.bwd.embedding"))
    rs, ag = comms["tp_rs.fwd.embedding.mb1"], comms["tp_ag.bwd.embedding.mb1"]
    assert rs.attrs["comm_type"] == T.REDUCE_SCATTER and rs.attrs["comm_size"] == ROWS_BYTES
    assert ag.attrs["comm_type"] == T.ALL_GATHER and ag.attrs["comm_size"] == ROWS_BYTES // 2 == 65_536
    assert sorted(groups[rs.attrs["pg_name"]]) == sorted(groups[ag.attrs["pg_name"]]) == [rank, rank + 1]
    assert _reaches(nodes, rs, _first_node(nodes, "fwd.l0.mb1."))
    wgrad = _by_label(nodes, "bwd.embedding.mb1")
    assert _reaches(nodes, _by_label(nodes, "bwd.l0.mb1.ln1.residual"), ag) and _reaches(nodes, ag, wgrad)


def test_learned_positions_with_sp_all_reduce_then_gather(tmp_path):
    """Learned absolute positions (Megatron-LM's default) with SP: ``LanguageModelEmbedding`` keeps the all-reduce
    (``reduce_scatter_embeddings`` off), splits the sum along the sequence without communication, and the split's
    backward all-gathers the gradient."""
    dims = dict(ROTARY, rotary=False)
    _, _, nodes = _gen(tmp_path, dims, sequence_parallel=True)
    assert sorted(_emb_comms(nodes)) == sorted(f"{k}.mb{mb}" for mb in (0, 1)
                                               for k in ("tp_ar.fwd.embedding", "tp_ag.bwd.embedding"))


def test_first_stage_only_and_none_at_tp1(tmp_path):
    """PP 2: the last stage has none (once per micro-batch on the first); TP 1: none anywhere."""
    _, _, last = _gen(tmp_path, stage=1, name="last", pp=2)
    assert _emb_comms(last) == {}
    _, _, first = _gen(tmp_path, stage=0, name="first", pp=2)
    assert sorted(_emb_comms(first)) == ["tp_ar.fwd.embedding.mb0", "tp_ar.fwd.embedding.mb1"]
    _, _, nodes = _gen(tmp_path, name="tp1", tp=1, dp=2, sequence_parallel=False)
    assert _emb_comms(nodes) == {}


@pytest.mark.parametrize("sp", [True, False])
def test_torchtitan_reduce_scatters_with_sp_only(tmp_path, sp):
    """torchtitan's ``RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))``: with SP a reduce-scatter
    forward and an all-gather backward; without SP (not a torchtitan layout) nothing, as before."""
    _, _, nodes = _gen(tmp_path, framework="fsdp2", zero=3, dp=2, sequence_parallel=sp)
    comms = _emb_comms(nodes)
    if sp:
        assert sorted(comms) == sorted(f"{k}.mb{mb}" for mb in (0, 1)
                                       for k in ("tp_rs.fwd.embedding", "tp_ag.bwd.embedding"))
        assert comms["tp_rs.fwd.embedding.mb0"].attrs["comm_size"] == ROWS_BYTES
    else:
        assert comms == {}


def test_deepspeed_and_replicated_inference_have_none(tmp_path):
    """DeepSpeed's ZeRO step (no TP of its own) and a serving step whose engine keeps the table whole
    (--inference-embedding replicated) are unchanged; vLLM's default all-reduce: test_tied_embeddings.py."""
    _, _, nodes = _gen(tmp_path, name="ds", framework="deepspeed", zero=3, dp=2, sequence_parallel=True)
    assert _emb_comms(nodes) == {}
    _, _, nodes = _gen(tmp_path, name="inf", mode="prefill", micro_batches=1, inference_embedding="replicated")
    assert _emb_comms(nodes) == {}


def test_tied_embedding_gradient_all_reduced_between_first_and_last_stage(tmp_path):
    """Tied embeddings at PP 2, TP 2, DP 2: after the DP reductions, one all-reduce of the word embedding's whole
    fp32 main gradient, vocab/TP 512 x h 256 x 4 B = 524,288 B (Megatron pads 1000 to 1024), over the embedding group {first-stage rank,
    last-stage rank} of its pipeline, on the compute chain before the optimizer's gradient norm; on both ends,
    once a step. Untied: no group and no all-reduce."""
    tied = dict(ROTARY, tied_embeddings=True)
    for stage in (0, 1):
        groups, rank, nodes = _gen(tmp_path, tied, stage=stage, name=f"s{stage}", pp=2, dp=2, zero=1)
        ar = [n for n in nodes if n.name.startswith("emb_ar.")]
        assert [n.name for n in ar] == ["emb_ar.word_embedding_grads"]
        ar = ar[0]
        assert ar.attrs["comm_type"] == T.ALL_REDUCE and ar.attrs["comm_size"] == 512 * 256 * 4 == 524_288
        cfg = LlmConfig(micro_batches=2, micro_batch_size=2, tp=2, pp=2, dp=2)
        assert sorted(groups[ar.attrs["pg_name"]]) == [rank_of(cfg, 0, 0, 0), rank_of(cfg, 0, 0, 1)]
        syncs = {n.id for n in nodes if n.name.startswith("dp_rs.")}
        assert syncs and syncs <= set(ar.data_deps)
        assert ar.id in _by_label(nodes, "optimizer.clip.norm").data_deps
    roles = json.loads((tmp_path / "s0.groups.roles.json").read_text())
    assert sorted(roles.values()).count("emb") == 4  # one per (TP, DP) pair
    groups, _, nodes = _gen(tmp_path, stage=0, name="untied", pp=2, dp=2, zero=1)
    assert not [n for n in nodes if n.name.startswith("emb_ar.")]
    assert "emb" not in json.loads((tmp_path / "untied.groups.roles.json").read_text()).values()
