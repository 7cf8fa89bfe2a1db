"""PyTorch's context parallel (``--cp-rotate allgather --cp-compile``, torchtitan's CP) at a fixed per-rank
sequence: every ring step after the first is the same work at CP 2 and CP 4, as in the source.

Source (issue 36, helper cpring): ``torch/distributed/tensor/experimental/_attention.py`` of the torch 2.6 era
(search-index copy 106942014; the table's torch is 1963fc8): ``_templated_ring_attention`` and its backward run
one flash call per step on the rank's ``q`` queries against ``q/2`` received keys (``i <= rank``; or ``q/2`` x
``q`` for ``i > rank``), whatever the CP degree; ``_SDPAMerger`` merges the step's block into the fp32 output;
the backward accumulates dK/dV (``_partial_update``) and dQ in fp32 and permutes the fp32 dK/dV buffer
(``_AllToAllRotater``) every step; ``_AllGatherRotater`` gathers the K/V once per pass (``chunk(size)[rank - i]``
later is a view). The only term that grows with the CP degree at a fixed ``q`` is that gather's output (CP x the
rank's K/V). Numbers below by hand from the shapes (D = 32, 8 query heads after ``repeat_kv``, q = 64, b = 1)."""

from __future__ import annotations

import json

import pytest

from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

ops = pytest.importorskip("astra_gpu_model.ops")

HEADS, D, Q = 8, 32, 64  # hidden 256 / 8 heads; q: the rank's tokens at every CP degree
FWD, BWD = "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Rank 0's nodes at CP 2 and CP 4, one layer, the sequence CP x Q (so Q tokens a rank in both)."""
    out = {}
    for cp in (2, 4):
        dims = model_dims(layers=1, hidden=HEADS * D, heads=HEADS, kv_heads=4, ffn_hidden=512, vocab=1000,
                          seq_len=Q * cp, gated=True)
        cfg = LlmConfig(cp=cp, framework="fsdp2", zero=3, recompute=True, cp_rotate="allgather", cp_compile=True)
        path = tmp_path_factory.mktemp(f"cp{cp}") / "w"
        generate_llm(dims, cfg, path)
        groups = json.loads(path.with_suffix(".groups.json").read_text())
        out[cp] = read_rank_nodes(path, 0), groups
    return out


def _step(nodes, lab, j):
    """(op, HBM bytes, FLOPs, comm bytes) of every node of ring step ``j`` of pass ``lab``."""
    rows = []
    for n in nodes:
        label = n.attrs.get("label", n.name)
        if not (label.startswith(f"{lab}.cp{j}") or n.name.startswith(f"cp_send.{lab}.dkv.{j}")
                or n.name.startswith(f"cp_recv.{lab}.dkv.{j}")):
            continue
        if "comm_size" in n.attrs:
            rows.append((n.name.rsplit(".", 1)[0].split(".")[0], 0, 0, n.attrs["comm_size"]))
        else:
            c = ops.classify(n.name, *ops.node_io(n))
            rows.append((n.name, c.nbytes, c.flops, 0))
    return sorted(rows)


def test_every_later_step_is_cp2s_step(traces):
    """Forward, recomputation and backward: steps 1..CP-1 at CP 4 each equal CP 2's step 1, node for node."""
    cp2, cp4 = traces[2][0], traces[4][0]
    for lab in ("fwd.l0.mb0.attn", "recompute.l0.mb0.attn", "bwd.l0.mb0.attn"):
        ref = _step(cp2, lab, 1)
        assert ref and all(_step(cp4, lab, j) == ref for j in (1, 2, 3)), lab
        assert not _step(cp2, lab, 2) and not _step(cp4, lab, 4)
        assert _step(cp4, lab, 0) == _step(cp2, lab, 0)  # the causal local step as well


def test_later_step_by_hand(traces):
    """One step after the first: non-causal flash of 4 b q (q/2) D h FLOPs (forward q/2 x q, CP index 0's; backward
    q x q/2, the last rank's: 2.5x), the fused fp32 merge, the fp32 dK/dV accumulation and its permute, the dQ
    accumulation."""
    out, lse, kv = HEADS * Q * D, HEADS * Q, HEADS * Q * 2 * D
    nodes = traces[4][0]
    fwd = dict((r[0], r) for r in _step(nodes, "fwd.l0.mb0.attn", 2))
    assert fwd[FWD][2] == 4 * Q * (Q // 2) * D * HEADS == 2_097_152
    # the forward is CP index 0's (i > rank): q/2 queries and all q keys, values read, q/2 outputs written
    assert fwd[FWD][1] == 2 * (out // 2 + kv) + 2 * (out // 2) == 98_304  # as many bytes as the last rank's
    merges = [r for r in _step(nodes, "fwd.l0.mb0.attn", 2) if r[0] == "aten::sub"]
    # read fp32 out, the bf16 half block, both half LSEs, write fp32 out (the cat fused in); the LSE's kernel reads
    # the whole LSE and the block's half and writes the whole LSE
    assert sorted(r[1] for r in merges) == [(lse + lse // 2 + lse) * 4, out * 4 + out + lse * 4 + out * 4] \
        == [5_120, 149_504]
    bwd = _step(nodes, "bwd.l0.mb0.attn", 2)
    (flash,) = [r for r in bwd if r[0] == BWD]
    assert flash[2] == 2.5 * fwd[FWD][2]
    (acc,) = [r for r in bwd if r[0] == "aten::copy_"]  # received fp32 dK/dV + this step's bf16 half -> the cat
    assert acc[1] == kv * 4 * 2 + HEADS * (Q // 2) * 2 * D * 2 == 294_912
    (dq,) = [r for r in bwd if r[0] == "aten::add_"]
    assert dq[1] == out * 4 * 2 + out * 2 == 163_840
    assert sorted(r[3] for r in bwd if r[3]) == [kv * 4, kv * 4]  # the fp32 dK/dV buffer sent on and received


def test_only_the_gather_grows_with_cp(traces):
    """Per pass, the K/V all-gather is the one node whose work depends on the CP degree: each rank puts in its own
    K/V (b q h 2D bf16, the comm_size) and gets CP x that back, over a CP-rank group."""
    for cp, (nodes, groups) in traces.items():
        for lab in ("fwd.l0.mb0.attn", "recompute.l0.mb0.attn", "bwd.l0.mb0.attn.bwd"):
            (gather,) = [n for n in nodes if n.name == f"cp_kv_ag.{lab}"]
            assert gather.attrs["comm_size"] == HEADS * Q * 2 * D * 2
            assert len(groups[gather.attrs["pg_name"]]) == cp  # gathered: cp x 65,536 B
