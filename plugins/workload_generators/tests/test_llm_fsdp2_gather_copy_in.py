"""FSDP2's all-gather copy-in (``--framework fsdp2``, ``llm.zero.fsdp2_gather_copy_in``): before each unit's
all-gather, this rank's fp32 shard cast into a flat bf16 buffer, then copied into its slice of the gather's output,
on a side stream; by hand. A plain ``--zero 3`` and DeepSpeed keep their own gathers."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)


def _by_label(tmp_path, name, **kw):
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=3, **kw), tmp_path / name)
    return {n.attrs.get("label", n.name): n for n in read_rank_nodes(tmp_path / name, 0)}


def test_each_gather_first_casts_and_copies_this_ranks_shard(tmp_path):
    # one layer: 256 x (256 + 128 + 128 + 256) + 3 x 256 x 512 = 589,824 parameters; over DP 2 a shard of 294,912.
    # The cast reads the fp32 shard and writes bf16 (294,912 x (4 + 2) = 1,769,472 B), the copy-in reads and
    # writes bf16 (294,912 x (2 + 2) = 1,179,648 B): 10 B a shard element per gather
    by = _by_label(tmp_path, "f", framework="fsdp2", micro_batches=2)
    for phase in ("fwd", "bwd"):  # (FSDP2 reshards after the forward: gathered again for the backward)
        cast, copy, gather = by[f"fsdp_ag_cast.l0.{phase}"], by[f"fsdp_ag_copy_in.l0.{phase}"], by[f"dp_ag.l0.{phase}"]
        assert (cast.name, cast.attrs["tensor_size"]) == ("aten::copy_", 1_769_472)
        assert (copy.name, copy.attrs["tensor_size"]) == ("aten::copy_", 1_179_648)
        # in order, the gather after its copy-in, the copy-in after the cast
        assert copy.id in gather.data_deps and cast.id in copy.data_deps
    # fp32 training (no mixed precision): the copy into the buffer only, 294,912 x (4 + 4) = 2,359,296 B
    fp32 = _by_label(tmp_path, "s", framework="fsdp2", dtype="fp32")
    assert "fsdp_ag_cast.l0.fwd" not in fp32
    assert fp32["fsdp_ag_copy_in.l0.fwd"].attrs["tensor_size"] == 2_359_296
    # without --framework fsdp2 (the generic ZeRO-3 step) and without the memory-bound nodes: none
    for name, kw in (("z", {}), ("d", {"framework": "deepspeed"}), ("n", {"framework": "fsdp2", "elementwise": False})):
        assert not [label for label in _by_label(tmp_path, name, **kw) if label.startswith("fsdp_ag_")]
