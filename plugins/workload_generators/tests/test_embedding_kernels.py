"""Megatron's memory-bound kernels around the embedding (issue 36), by hand: the ids' mask and the out-of-shard rows'
zeros at TP > 1, the learned positions' lookup and add, the ``[b s h] -> [s b h]`` copy, the SP shard's clone and
the embedding dropout, and their backward counterparts, on the first stage, once a micro-batch, in a Megatron
training step with the memory-bound nodes on only (NVIDIA/Megatron-LM core_r0.14.0, see stage.py)."""

from __future__ import annotations

import pytest

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# h 256, vocab 1000, sequences of 128 tokens, micro-batches of 2 sequences: n = 256 rows, bf16
GPT = dict(layers=2, hidden=256, heads=8, ffn_hidden=1024, vocab=1000, seq_len=128)
ROTARY = dict(GPT, kv_heads=4, ffn_hidden=512, gated=True, rms_norm=True, rotary=True)
ROWS = 256 * 256 * 2  # 131,072 B: the micro-batch's b x s x h output
KERNEL = "fwd.embedding.mb1."  # (the second micro-batch's: each micro-batch has its own)


def _nodes(tmp_path, dims=GPT, **cfg):
    cfg = LlmConfig(**{"micro_batches": 2, "micro_batch_size": 2, "tp": 2, **cfg})
    generate_llm(model_dims(**dims), cfg, tmp_path / "t")
    return read_rank_nodes(tmp_path / "t", 0)


def _kernels(nodes, prefix):
    """{label suffix: tensor_size} of the nodes labelled ``prefix...``, in trace order."""
    return {n.attrs["label"][len(prefix):]: n.attrs["tensor_size"] for n in nodes
            if n.attrs.get("label", "").startswith(prefix)}


def test_tp2_learned_positions_forward_and_backward(tmp_path):
    """TP 2, no SP, GPT (learned positions). Forward: the ids' mask (six small kernels on 256 int64 ids), the
    lookup, the nonzero of the 256-byte mask and the zeros written into the 128 rows outside this rank's shard
    (128 x 256 x 2 = 65,536 B), the all-reduce, the positions' lookup (256 ids read, 2 x 131,072 B) and add
    (3 x 131,072 B), the transpose's copy (2 x 131,072 B) and the dropout (read and write 131,072 B). Backward: the
    dropout's, the positions' contiguous copy and weight gradient, the mask's clone and zeros, the word
    embedding's contiguous copy, in that order before the lookup's weight gradient."""
    nodes = _nodes(tmp_path)
    fwd = _kernels(nodes, KERNEL)
    assert list(fwd) == ["input_mask.lt", "input_mask.ge", "input_mask.or", "input_mask.clone", "input_mask.sub",
                         "input_mask.zero", "output_mask.nonzero", "output_mask.rows", "positions", "positions.add",
                         "transpose", "dropout"]
    assert fwd["output_mask.nonzero"] == 2 * 256 and fwd["output_mask.rows"] == 65_536
    assert fwd["positions"] == 256 * 8 + 2 * ROWS and fwd["positions.add"] == 3 * ROWS
    assert fwd["transpose"] == fwd["dropout"] == 2 * ROWS
    labels = [n.attrs.get("label", n.name) for n in nodes]
    order = [labels.index(f"fwd.embedding.mb1.{k}") for k in ("output_mask.rows", "positions", "transpose")]
    assert order[0] < labels.index("tp_ar.fwd.embedding.mb1") < order[1] < order[2] < labels.index(
        "fwd.l0.mb1.ln1.ln")
    bwd = _kernels(nodes, "bwd.embedding.mb1.")
    assert list(bwd) == ["dropout", "positions.contiguous", "positions", "output_mask.clone", "output_mask.rows",
                         "contiguous"]
    assert bwd["positions.contiguous"] == bwd["contiguous"] == bwd["output_mask.clone"] == 2 * ROWS
    assert bwd["output_mask.rows"] == 65_536 and bwd["positions"] == 2 * ROWS
    assert labels.index("bwd.embedding.mb1.contiguous") < labels.index("bwd.embedding.mb1")


def test_sp_rotary_transposes_before_the_reduce_scatter_and_clones_the_shard(tmp_path):
    """TP 2 with SP, rotary: ``reduce_scatter_embeddings``: the copy before the reduce-scatter; after it the clone
    of this rank's 128 rows (2 x 65,536 B) and the dropout on them; no positions. Backward: the dropout's on the
    128 rows before the gradient's all-gather."""
    nodes = _nodes(tmp_path, ROTARY, sequence_parallel=True)
    fwd = _kernels(nodes, KERNEL)
    assert list(fwd)[6:] == ["output_mask.nonzero", "output_mask.rows", "transpose", "sp_clone", "dropout"]
    assert fwd["sp_clone"] == fwd["dropout"] == ROWS and fwd["transpose"] == 2 * ROWS
    labels = [n.attrs.get("label", n.name) for n in nodes]
    assert labels.index(KERNEL + "transpose") < labels.index("tp_rs.fwd.embedding.mb1") < labels.index(
        KERNEL + "sp_clone")
    assert labels.index("bwd.embedding.mb1.dropout") < labels.index("tp_ag.bwd.embedding.mb1") < labels.index(
        "bwd.embedding.mb1.contiguous")


def test_tp1_has_no_masks_and_no_dropout_without_dropout(tmp_path):
    """TP 1: no masks (the whole table); --no-dropout: no dropout, forward or backward."""
    nodes = _nodes(tmp_path, tp=1, dropout=False)
    assert list(_kernels(nodes, KERNEL)) == ["positions", "positions.add", "transpose"]
    assert list(_kernels(nodes, "bwd.embedding.mb1.")) == ["positions.contiguous", "positions", "contiguous"]


def test_lora_keeps_the_forward_kernels_only(tmp_path):
    """A frozen (LoRA) embedding: the forward's kernels, no backward (autograd does not reach it)."""
    nodes = _nodes(tmp_path, lora_rank=4, lora_targets=("qkv",))
    assert "transpose" in _kernels(nodes, KERNEL) and not _kernels(nodes, "bwd.embedding.mb1.")


@pytest.mark.parametrize("cfg", [dict(framework="fsdp2", zero=3, sequence_parallel=True),
                                 dict(framework="deepspeed", zero=3, tp=1), dict(mode="prefill"),
                                 dict(elementwise=False)])
def test_other_frameworks_inference_and_no_elementwise_emit_none(tmp_path, cfg):
    nodes = _nodes(tmp_path, **cfg)
    assert not _kernels(nodes, "fwd.embedding.mb0.") and not _kernels(nodes, "bwd.embedding.mb0.")
