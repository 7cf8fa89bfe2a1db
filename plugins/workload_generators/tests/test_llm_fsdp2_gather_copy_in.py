"""FSDP2 under torchtitan (``--framework fsdp2``, ``llm.zero``): before each unit's all-gather this rank's fp32
shard cast into a flat bf16 buffer and copied into its slice of the gather's output, on a side stream
(``fsdp2_gather_copy_in``); the embedding and the LM head as one root unit, gathered once and reduce-scattered at
the backward's end, the root and the last block not gathered again for the backward (``_fsdp2_root``); by hand. A
plain ``--zero 3`` and DeepSpeed keep their own gathers."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)


def _by_label(tmp_path, name, **kw):
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=3, **kw), tmp_path / name)
    return {n.attrs.get("label", n.name): n for n in read_rank_nodes(tmp_path / name, 0)}


def test_each_gather_first_casts_and_copies_this_ranks_shard(tmp_path):
    # one layer: 256 x (256 + 128 + 128 + 256) + 3 x 256 x 512 = 589,824 matmul parameters and its two LayerNorms'
    # weights and biases (4 x 256): 590,848; over DP 2 a shard of 295,424. The cast reads the fp32 shard and
    # writes bf16 (295,424 x (4 + 2) = 1,772,544 B), the copy-in reads and writes bf16 (295,424 x (2 + 2) =
    # 1,181,696 B): 10 B a shard element per gather
    by = _by_label(tmp_path, "f", framework="fsdp2", micro_batches=2)
    for phase in ("fwd", "bwd"):  # (FSDP2 reshards after the forward: gathered again for the backward)
        cast, copy, gather = by[f"fsdp_ag_cast.l0.{phase}"], by[f"fsdp_ag_copy_in.l0.{phase}"], by[f"dp_ag.l0.{phase}"]
        assert (cast.name, cast.attrs["tensor_size"]) == ("aten::copy_", 1_772_544)
        assert (copy.name, copy.attrs["tensor_size"]) == ("aten::copy_", 1_181_696)
        # in order, the gather after its copy-in, the copy-in after the cast
        assert copy.id in gather.data_deps and cast.id in copy.data_deps
    # fp32 training (no mixed precision): the copy into the buffer only, 295,424 x (4 + 4) = 2,363,392 B
    fp32 = _by_label(tmp_path, "s", framework="fsdp2", dtype="fp32")
    assert "fsdp_ag_cast.l0.fwd" not in fp32
    assert fp32["fsdp_ag_copy_in.l0.fwd"].attrs["tensor_size"] == 2_363_392
    # without --framework fsdp2 (the generic ZeRO-3 step) and without the memory-bound nodes: none
    for name, kw in (("z", {}), ("d", {"framework": "deepspeed"}), ("n", {"framework": "fsdp2", "elementwise": False})):
        assert not [label for label in _by_label(tmp_path, name, **kw) if label.startswith("fsdp_ag_")]


def test_the_root_unit_is_gathered_once_and_reduced_at_the_backwards_end(tmp_path):
    # torchtitan's fully_shard(model): the embedding (1000 x 256 = 256,000, and the learned position table, 128 x
    # 256 = 32,768: no rotary flag), the final norm (LayerNorm's weight and bias, 512) and the LM head (256,000) form
    # the root, 545,280 parameters: one all-gather (each rank's bf16 share of 545,280 x 2 B over DP 2 = 545,280 B),
    # one copy-out (read and write 545,280 x 2 B = 2,181,120 B), one fp32 reduce-scatter (545,280 x 4 = 2,181,120 B)
    nodes = read_rank_nodes(_gen(tmp_path, "r", framework="fsdp2"), 0)
    by = {n.attrs.get("label", n.name): n for n in nodes}
    labels = [n.attrs.get("label", n.name) for n in nodes]
    assert by["dp_ag.root.fwd"].attrs["comm_size"] == 545_280
    assert by["fsdp_copy_out.root.fwd"].attrs["tensor_size"] == 2_181_120
    assert by["fsdp_ag_cast.root.fwd"].attrs["tensor_size"] == 272_640 * (4 + 2)  # (this rank's shard)
    assert by["dp_rs.root"].attrs["comm_size"] == 2_181_120
    # nothing of the root gathered or reduced apart, and the reduce-scatter after the embedding's backward
    assert not [x for x in labels if x.startswith(("dp_ag.embedding", "dp_ag.head", "dp_rs.embedding", "dp_rs.head"))]
    assert labels.index("bwd.embedding.mb0") < labels.index("dp_rs.root")
    # the backward gathers the first block again, not the last (kept unsharded after the forward) nor the root
    assert "dp_ag.l0.bwd" in by and "dp_ag.l1.bwd" not in by and "dp_ag.root.bwd" not in by
    # with pipeline stages (torchtitan's PP wrapping is not this), and in the generic ZeRO-3 step: units apart
    for name, kw in (("p", {"framework": "fsdp2", "pp": 2, "micro_batches": 2}), ("z", {})):
        labels = [n.attrs.get("label", n.name) for n in read_rank_nodes(_gen(tmp_path, name, **kw), 0)]
        assert not [x for x in labels if ".root" in x] and [x for x in labels if x.startswith("dp_ag.embedding")]


def _gen(tmp_path, name, **kw):
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=3, **kw), tmp_path / name)
    return tmp_path / name
