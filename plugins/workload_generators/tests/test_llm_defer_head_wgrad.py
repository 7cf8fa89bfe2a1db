"""``--defer-embedding-wgrad-compute`` (issue 36): Megatron's deferral of the LM head's weight-gradient GEMMs (and
their sequence-parallel re-gathers) to the pipeline drain (``drain_embedding_wgrad_compute``, Megatron-LM
core_r0.14.0), and the multi-token-prediction heads' sequence-parallel communication (the same ``output_layer``);
by hand, on a 2-layer model at PP 2."""

from __future__ import annotations

import pytest

from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.layout import rank_of

# h 256, vocab 1000, micro-batches of 2 sequences of 128 tokens: the head's input is 256 rows
SMALL = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
             rms_norm=True)
SHARE = 128 * 256 * 2  # each TP rank's 128 rows of the head's input: 65,536 B of the 131,072 B gathered


def _last(tmp_path, name="t", dims=None, **cfg):
    cfg = LlmConfig(**{"micro_batches": 4, "micro_batch_size": 2, "pp": 2, "dropout": False, **cfg})
    generate_llm(model_dims(**(dims or SMALL)), cfg, tmp_path / name)
    nodes = read_rank_nodes(tmp_path / name, rank_of(cfg, 0, 0, 1))
    return nodes, {n.name: n for n in nodes}, {n.attrs.get("label"): n for n in nodes if n.attrs.get("label")}


def test_all_wgrads_in_the_drain_with_pipelined_gathers(tmp_path):
    """Limit 0 (all): no re-gather and no wgrad in the micro-batches' backwards; after the stage's last backward
    node: gather 0 on the chain, then for each call i the next call's gather (after the previous wgrad and the
    previous gather, off the chain) and wgrad i waiting for its own gather; 65,536 B each rank; the optimizer
    after the last wgrad."""
    nodes, names, labels = _last(tmp_path, tp=2, sequence_parallel=True, defer_embedding_wgrad=True)
    wgrads = [labels[f"bwd.head.mb{mb}.wgrad"] for mb in range(4)]
    gathers = [names[f"tp_ag.bwd.head.mb{mb}.head_in.regather"] for mb in range(4)]
    last_layer_bwd = max(n.id for n in nodes if n.attrs.get("label", "").startswith("bwd.l"))
    assert all(g.id > last_layer_bwd for g in gathers) and all(w.id > last_layer_bwd for w in wgrads)
    for g in gathers:
        assert g.attrs["comm_type"] == T.ALL_GATHER and g.attrs["comm_size"] == SHARE
    assert gathers[0].data_deps == [last_layer_bwd] and wgrads[0].data_deps == [gathers[0].id]
    for i in range(1, 4):
        assert wgrads[i].data_deps == [wgrads[i - 1].id, gathers[i].id]
        assert set(gathers[i].data_deps) == {wgrads[i - 2].id if i > 1 else gathers[0].id, gathers[i - 1].id}
    # then the optimizer's part of the step (with SP, first the norms' gradient all-reduce over TP)
    assert wgrads[3].id in names["tp_ar.norm_grads"].data_deps
    # the reduce-scatter of the input gradient stays in each micro-batch's backward, after its dgrad
    for mb in range(4):
        assert names[f"tp_rs.bwd.head.mb{mb}.head_in"].data_deps == [labels[f"bwd.head.mb{mb}.dgrad"].id]


def test_limit_defers_the_first_calls_only(tmp_path):
    """``--wgrad-deferral-limit 2``: micro-batches 0 and 1 deferred, 2 and 3 compute theirs in place (re-gather
    before the dgrad, wgrad right after it)."""
    nodes, names, labels = _last(tmp_path, tp=2, sequence_parallel=True, defer_embedding_wgrad=True,
                                 wgrad_deferral_limit=2)
    last_layer_bwd = max(n.id for n in nodes if n.attrs.get("label", "").startswith("bwd.l"))
    for mb in range(4):
        wgrad, dgrad = labels[f"bwd.head.mb{mb}.wgrad"], labels[f"bwd.head.mb{mb}.dgrad"]
        gather = names[f"tp_ag.bwd.head.mb{mb}.head_in.regather"]
        if mb < 2:
            assert wgrad.id > last_layer_bwd and gather.id > last_layer_bwd
        else:
            assert gather.id < dgrad.id < wgrad.id < last_layer_bwd and gather.id in wgrad.data_deps


def test_same_work_without_sp_and_off_by_default(tmp_path):
    """TP 1: the drain is the four wgrad GEMMs, no gathers; the step's GEMM FLOPs are the same as without the
    deferral, and the default (off) keeps each wgrad right after its dgrad."""
    nodes, names, labels = _last(tmp_path, "on", defer_embedding_wgrad=True)
    assert not [n for n in names if n.startswith("tp_")]
    last_layer_bwd = max(n.id for n in nodes if n.attrs.get("label", "").startswith("bwd.l"))
    assert all(labels[f"bwd.head.mb{mb}.wgrad"].id > last_layer_bwd for mb in range(4))
    off, _, off_labels = _last(tmp_path, "off")
    assert all(off_labels[f"bwd.head.mb{mb}.wgrad"].id == off_labels[f"bwd.head.mb{mb}.dgrad"].id + 1
               for mb in range(4))

    def flops(ns):
        return sum(n.attrs.get("num_ops", 0) for n in ns if n.type == T.COMP_NODE)
    assert flops(nodes) == flops(off)


@pytest.mark.parametrize("cfg", [dict(pp=1), dict(framework="fsdp2", zero=3, dp=2), dict(wgrad_deferral_limit=2,
                                                                                          defer_embedding_wgrad=False)])
def test_refused_where_megatron_refuses_or_meaningless(tmp_path, cfg):
    with pytest.raises(ConfigError):
        _last(tmp_path, **{"defer_embedding_wgrad": True, **cfg})


def test_mtp_head_gathers_scatters_and_defers(tmp_path):
    """An MTP module's head is the same column-parallel ``output_layer``: with SP its forward gathers its 256 rows
    (65,536 B each rank) before the GEMM, its backward reduce-scatters the dgrad (131,072 B) and re-gathers the
    input for the wgrad; with the deferral its wgrad joins the drain too (5 calls per micro-batch pair: 8 here)."""
    dims = dict(SMALL, mtp_layers=1)
    nodes, names, labels = _last(tmp_path, "mtp", dims=dims, tp=2, sequence_parallel=True, micro_batches=2)
    ag, head = names["tp_ag.fwd.mtp0.mb0.head.head_in"], labels["fwd.mtp0.mb0.head"]
    assert ag.attrs["comm_size"] == SHARE and ag.id in head.data_deps
    rs, dgrad = names["tp_rs.bwd.mtp0.mb0.head.head_in"], labels["bwd.mtp0.mb0.head.dgrad"]
    assert rs.attrs["comm_type"] == T.REDUCE_SCATTER and rs.attrs["comm_size"] == 2 * SHARE
    assert rs.data_deps == [dgrad.id]
    rg = names["tp_ag.bwd.mtp0.mb0.head.head_in.regather"]
    assert rg.id < dgrad.id and rg.id in labels["bwd.mtp0.mb0.head.wgrad"].data_deps
    # the MTP layer's backward (its first node, the SP gather of its output gradient) waits for the scatter
    after = names["tp_ag.bwd.l2.mb0.mlp_out"]
    assert after.id == labels["bwd.mtp0.mb0.head.wgrad"].id + 1 and rs.id in after.data_deps
    nodes, _, labels = _last(tmp_path, "mtpd", dims=dims, tp=2, sequence_parallel=True, micro_batches=2,
                             defer_embedding_wgrad=True)
    last_layer_bwd = max(n.id for n in nodes if n.attrs.get("label", "").startswith("bwd.l"))
    for site in ("head.mb0", "mtp0.mb0.head", "head.mb1", "mtp0.mb1.head"):
        assert labels[f"bwd.{site}.wgrad"].id > last_layer_bwd


def test_memory_keeps_the_deferred_inputs_and_logit_gradients():
    """The last stage's buffers grow by each deferred call's input (SP: 128 rows x 256 x 2 B = 65,536 B) and its
    logits' gradient (256 rows x 1024 / 2 x 2 B = 262,144 B: Megatron pads the vocabulary 1000 to a multiple of
    128 x TP 2): 4 calls = 1,310,720 B; limit 2: half; the first stage and the default (off): nothing."""
    from astra_workload_generators.llm.memory import stage_memory

    dims = model_dims(**SMALL)
    base = dict(micro_batches=4, micro_batch_size=2, pp=2, tp=2, sequence_parallel=True, dropout=False)

    def buffers(stage, **kw):
        return stage_memory(dims, LlmConfig(**base, **kw), stage).buffers
    assert buffers(1, defer_embedding_wgrad=True) - buffers(1) == 4 * (65_536 + 262_144) == 1_310_720
    assert buffers(1, defer_embedding_wgrad=True, wgrad_deferral_limit=2) - buffers(1) == 2 * 327_680
    assert buffers(0, defer_embedding_wgrad=True) == buffers(0)
