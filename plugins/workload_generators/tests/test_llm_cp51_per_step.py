"""PyTorch's context parallelism (``--cp-rotate allgather --cp-compile``, torchtitan's CP) at CP 2, 4 and 8 with the
rank's share ``q`` held fixed, as torchtitan's Llama 3.1 8B CP rows hold it (32k tokens a rank at every CP degree).

Why (issue 36, session 51): measured, each non-causal ring step of those rows costs the same at CP 4 and CP 8 and
less at CP 2. These tests pin what the source gives per step, so that any term added for the gap has to be a new,
sourced one: in ``_templated_ring_attention`` and ``_templated_ring_attention_backward`` (pytorch/pytorch
``torch/distributed/tensor/experimental/_attention.py`` at 0123248a; the same ring code at f2127dbd) nothing a step
does depends on the CP degree once ``q`` is fixed. Only the number of steps and the all-gathered buffer (CP x the
rank's K/V) grow with it. The counts are PyTorch's own: its ``test_ring_attention_custom_transformer`` (pytorch/pytorch
``test/distributed/tensor/test_attention.py`` at 01df9461) expects, with the all-gather rotater, one
``all_gather_into_tensor`` a layer in the forward, and one more plus ``world_size`` ``all_to_all_single`` (the dK/dV
permutes) a layer in the backward. Full activation checkpointing adds one forward, so one more all-gather."""

from __future__ import annotations

import pytest

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

ops = pytest.importorskip("astra_gpu_model.ops")

L, H, HEADS, KV, Q = 2, 256, 8, 4, 64  # Q: the tokens a rank holds, at every CP degree
D = H // HEADS
FWD, BWD = "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward"


def _rank0(tmp_path, cp):
    dims = model_dims(layers=L, hidden=H, heads=HEADS, kv_heads=KV, ffn_hidden=512, vocab=1000, seq_len=Q * cp,
                      gated=True)
    cfg = LlmConfig(framework="fsdp2", zero=3, recompute=True, cp=cp, cp_rotate="allgather", cp_compile=True)
    generate_llm(dims, cfg, tmp_path / f"cp{cp}")
    return read_rank_nodes(tmp_path / f"cp{cp}", 0)


def _cost(node):
    info = ops.classify(node.name, *ops.node_io(node))
    return info.flops, info.nbytes


def _step_nodes(nodes, lab, j):
    """The compute nodes of ring step ``j`` of the pass labelled ``lab``: the SDPA call and its merges or
    accumulations, as ``{label suffix: (FLOPs, bytes)}``."""
    prefix = f"{lab}.cp{j}"
    return {n.attrs["label"][len(prefix):] or n.name: _cost(n) for n in nodes
            if n.attrs.get("label", "").startswith(prefix)}


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_collectives_per_layer_are_pytorchs(tmp_path, cp):
    nodes = _rank0(tmp_path, cp)
    for layer in range(L):
        gathers = [n.name for n in nodes if n.name.startswith("cp_kv_ag.") and f".l{layer}." in n.name]
        assert sorted(gathers) == sorted(f"cp_kv_ag.{p}.l{layer}.mb0.attn" + (".bwd" if p == "bwd" else "")
                                         for p in ("fwd", "recompute", "bwd"))
        permutes = [n for n in nodes if n.name.startswith(f"cp_send.bwd.l{layer}.mb0.attn.dkv.")]
        assert len(permutes) == cp  # world_size all_to_all_single a layer
        # each permute moves the rank's dK and dV in fp32: 2 x q x heads x d x 4 bytes, whatever the CP degree
        assert {n.attrs["comm_size"] for n in permutes} == {Q * HEADS * 2 * D * 4}
    # the all-gather's input is the rank's K and V at the query heads (torchtitan's repeat_kv), bf16
    assert {n.attrs["comm_size"] for n in nodes if n.name.startswith("cp_kv_ag.")} == {Q * HEADS * 2 * D * 2}


def test_a_ring_step_costs_the_same_at_every_cp_degree(tmp_path):
    """Step 1 (a non-causal step) and step 0 (causal, the rank's own head-tail chunks) trace the same nodes with the
    same FLOPs and bytes at CP 2, 4 and 8; by hand, step 1's forward is all q queries against q/2 keys:
    4 x q x q/2 x d x heads FLOPs, its backward 2.5 times that."""
    steps = {}
    for cp in (2, 4, 8):
        nodes = _rank0(tmp_path, cp)
        steps[cp] = {lab: [_step_nodes(nodes, lab, j) for j in (0, 1)]
                     for lab in ("fwd.l1.mb0.attn", "recompute.l1.mb0.attn", "bwd.l1.mb0.attn")}
        for lab in ("fwd.l1.mb0.attn", "bwd.l1.mb0.attn"):  # every later step is step 1's twin
            for j in range(2, cp):
                assert _step_nodes(nodes, lab, j) == steps[cp][lab][1]
    assert steps[2] == steps[4] == steps[8]
    fwd = 4 * Q * (Q // 2) * D * HEADS
    assert steps[8]["fwd.l1.mb0.attn"][1][FWD][0] == fwd
    assert steps[8]["bwd.l1.mb0.attn"][1][BWD][0] == 2.5 * fwd
