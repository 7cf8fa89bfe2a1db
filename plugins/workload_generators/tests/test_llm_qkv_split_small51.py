"""Megatron-Core's QKV split in a training step (issue 36; :mod:`astra_workload_generators.llm.rope`): the grouped
query's ``reshape`` copy, Transformer Engine's copy of the value once RoPE has written new queries and keys
(``get_qkv_layout``'s ``.contiguous()``), and ``SplitAlongDim``'s ``torch.cat`` of dQ, dK, dV in the backward.
Bytes by hand on one small layer."""

from __future__ import annotations

import pytest

from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.config import ROPE_KERNELS

#: one layer, hidden 256, 8 query heads of 32; one micro-batch of 2 x 128 tokens (b = 2, s = 128), bf16
B, S, D = 2, 128, 32


def _split(tmp_path, name, heads=8, kv_heads=4, rotary=True, **kw):
    dims = model_dims(layers=1, hidden=256, heads=heads, kv_heads=kv_heads, ffn_hidden=512, vocab=1000, seq_len=S,
                      gated=True, rotary=rotary)
    cfg = dict(dp=2, micro_batches=1, micro_batch_size=B, zero=1)
    cfg.update(kw)
    generate_llm(dims, LlmConfig(**cfg), tmp_path / name)
    nodes = read_rank_nodes(tmp_path / name, 0)
    return {n.attrs["label"]: n for n in nodes if ".qkv_split." in n.attrs.get("label", "")}, nodes


def test_grouped_query_rotary_step_by_hand(tmp_path):
    split, nodes = _split(tmp_path, "gqa")
    q, kv = B * S * 8 * D * 2, B * S * 4 * D * 2  # the query's and one of K / V's bytes: 131,072 and 65,536
    assert split["fwd.l0.mb0.qkv_split.q"].attrs["tensor_size"] == 2 * q == 262_144  # reshape: read + write
    assert split["fwd.l0.mb0.qkv_split.v"].attrs["tensor_size"] == 2 * kv == 131_072  # TE's .contiguous()
    assert split["bwd.l0.mb0.qkv_split.bwd"].attrs["tensor_size"] == 2 * (q + 2 * kv) == 524_288  # the cat
    assert split["fwd.l0.mb0.qkv_split.q"].name == "aten::copy_"
    assert split["bwd.l0.mb0.qkv_split.bwd"].name == "aten::cat"
    order = [n.attrs.get("label") for n in nodes]
    # forward: QKV GEMM, the reshape, RoPE on Q and K, the value's copy, attention; backward: RoPE's backward, the
    # cat, then the QKV GEMMs' input gradient
    fwd = [order.index(f"fwd.l0.mb0.{x}") for x in ("qkv", "qkv_split.q", "rope.q.rotate", "rope.k.rotate",
                                                     "qkv_split.v", "attn")]
    assert fwd == sorted(fwd)
    bwd = [order.index(f"bwd.l0.mb0.{x}") for x in ("rope.k.rotate.bwd", "qkv_split.bwd", "qkv.dgrad")]
    assert bwd == sorted(bwd)


def test_what_each_attention_layout_copies(tmp_path):
    # multi-head attention, rotary: the query's reshape is a view; the value and the cat remain
    mha, _ = _split(tmp_path, "mha", kv_heads=8)
    assert sorted(mha) == ["bwd.l0.mb0.qkv_split.bwd", "fwd.l0.mb0.qkv_split.v"]
    # multi-head, not rotary (GPT-3's learned positions): Q, K, V stay views of one sbh3d buffer both ways
    plain, _ = _split(tmp_path, "plain", kv_heads=8, rotary=False)
    assert plain == {}
    # grouped, not rotary: the reshape's copy, and the cat (dQ is not in the split's storage); no value copy
    gqa, _ = _split(tmp_path, "gqa_plain", rotary=False)
    assert sorted(gqa) == ["bwd.l0.mb0.qkv_split.bwd", "fwd.l0.mb0.qkv_split.q"]
    # one KV head (MQA): the query's reshape is a view
    mqa, _ = _split(tmp_path, "mqa", kv_heads=1)
    assert sorted(mqa) == ["bwd.l0.mb0.qkv_split.bwd", "fwd.l0.mb0.qkv_split.v"]


def test_not_outside_megatron_training(tmp_path):
    fsdp, _ = _split(tmp_path, "fsdp", zero=3, framework="fsdp2")  # torchtitan: its own attention
    assert fsdp == {}
    bare, _ = _split(tmp_path, "bare", elementwise=False)  # no memory-bound nodes
    assert bare == {}


def test_full_recompute_reruns_the_forward_copies(tmp_path):
    split, _ = _split(tmp_path, "ac", recompute=True)
    assert {"recompute.l0.mb0.qkv_split.q", "recompute.l0.mb0.qkv_split.v"} <= set(split)


@pytest.mark.skipif("fused-qkv" not in ROPE_KERNELS, reason="--rope fused-qkv is not a choice of config.ROPE_KERNELS yet")
def test_fused_qkv_rope_makes_no_copy(tmp_path):
    # TE's apply_fused_qkv_rotary_pos_emb (Megatron's fused_single_qkv_rope): one kernel each way over the whole QKV
    # output (8 + 2 x 4 heads of 32): read it and the fp32 frequencies (128 x 32 x 4 B), write Q, K, V
    split, nodes = _split(tmp_path, "fused", rope="fused-qkv")
    assert split == {}
    qkv = B * S * 16 * D * 2  # 262,144
    by_label = {n.attrs.get("label"): n for n in nodes}
    assert by_label["fwd.l0.mb0.rope.qkv.rotate"].attrs["tensor_size"] == 2 * qkv + S * D * 4 == 540_672
    assert by_label["bwd.l0.mb0.rope.qkv.rotate.bwd"].attrs["tensor_size"] == 540_672


def test_context_parallel_cat_waits_for_dk_dv_to_come_home(tmp_path):
    # CP 2: the cat joins the final dK and dV, so it comes after the ring's receives, and the QKV GEMMs after it
    split, nodes = _split(tmp_path, "cp", cp=2, dp=1)
    cat = split["bwd.l0.mb0.qkv_split.bwd"]
    recvs = [n.id for n in nodes if n.name.startswith("cp_recv.bwd.l0.mb0.dkv")]
    assert recvs and set(recvs) <= _ancestors(nodes, cat.id)
    dgrad = next(n for n in nodes if n.attrs.get("label") == "bwd.l0.mb0.qkv.dgrad")
    assert cat.id in _ancestors(nodes, dgrad.id)


def _ancestors(nodes, node_id):
    """Every node ``node_id`` waits for, through data and control dependencies."""
    by_id = {n.id: n for n in nodes}
    seen, todo = set(), [node_id]
    while todo:
        node = by_id[todo.pop()]
        for dep in [*node.data_deps, *(getattr(node, "ctrl_deps", None) or [])]:
            if dep not in seen and dep in by_id:
                seen.add(dep)
                todo.append(dep)
    return seen
