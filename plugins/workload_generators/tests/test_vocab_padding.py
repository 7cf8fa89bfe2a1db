"""The vocabulary as each framework pads it (issue 36, ``model.vocab_padding``): Megatron-LM and NeMo 2 pad it to a
multiple of ``--make-vocab-size-divisible-by`` (128) x TP (Megatron-LM core_r0.14.0 ``_vocab_size_with_padding``,
NeMo v2.2.0 ``get_vocab_size``); torchtitan, DeepSpeed's Hugging Face models and MaxText use it as it is (a TP
rank's shard: the largest, ``ceil(vocab / TP)``); inference pads to a multiple of TP, as before. By hand, and on
one-layer steps: the LM head's GEMM, the cross entropy's logits, the embedding table and the memory estimate."""

from __future__ import annotations

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import (LlmConfig, check_config, generate_llm, model_dims, padded_vocab,
                                           stage_memory, vocab_padding, vocab_shard)

ONE_LAYER = dict(layers=1, hidden=64, heads=4, kv_heads=4, ffn_hidden=128, seq_len=32, gated=True, rms_norm=True,
                 rotary=True)


def _dims(vocab):
    return model_dims(vocab=vocab, **ONE_LAYER)


@pytest.mark.parametrize("vocab,tp,padded", [
    (50257, 1, 50304), (50257, 2, 50432), (50257, 4, 50688), (50257, 8, 51200),  # GPT-2's BPE: 393 x 128, ...
    (128256, 1, 128256), (128256, 2, 128256), (128256, 4, 128512), (128256, 8, 129024),  # Llama 3: 1002 x 128
    (256000, 8, 256000), (51200, 8, 51200), (50688, 4, 50688),  # Nemotron-4's; padded ones stay themselves
])
def test_megatron_pads_to_128_times_tp_by_hand(vocab, tp, padded):
    cfg = LlmConfig(tp=tp)
    assert vocab_padding(cfg) == 128 * tp
    assert padded_vocab(_dims(vocab), tp, vocab_padding(cfg)) == padded
    assert vocab_shard(_dims(vocab), tp, vocab_padding(cfg)) * tp == padded


def test_each_framework_and_mode_has_its_rule():
    dims = _dims(50257)
    assert vocab_padding(LlmConfig(tp=8, make_vocab_size_divisible_by=1)) == 8  # Megatron, --make-vocab-... 1
    assert vocab_padding(LlmConfig(tp=2, dp=2, zero=1)) == 256  # the distributed optimizer: Megatron
    for cfg in (LlmConfig(tp=8, dp=2, zero=3), LlmConfig(tp=8, framework="fsdp2"),
                LlmConfig(tp=8, dp=2, zero=2), LlmConfig(tp=8, framework="deepspeed")):
        assert vocab_padding(cfg) == 1
        # torchtitan: nn.Linear(dim, 50257) as DTensor Shard(0) over 8: torch.chunk's 6283-row shards (the last 6276)
        assert padded_vocab(dims, 8, 1) == 50257 and vocab_shard(dims, 8, 1) == 6283
    for mode in ("prefill", "decode"):
        cfg = LlmConfig(tp=8, mode=mode)
        assert vocab_padding(cfg) == 8 and vocab_shard(dims, 8, vocab_padding(cfg)) == 6283  # 50264 / 8
    assert padded_vocab(dims, 8) == 50264  # no step: a multiple of TP, the rule before


def test_the_head_the_loss_and_the_table_use_the_padded_shard(tmp_path):
    """Vocabulary 1000 at TP 2: Megatron's step holds 1024 / 2 = 512 rows a rank (the LM head's GEMM, the cross
    entropy's logits, the embedding lookup's table); with --make-vocab-size-divisible-by 1 and under FSDP2 500."""
    def shapes(name, **kw):
        cfg = LlmConfig(**{"tp": 2, "micro_batches": 1, "micro_batch_size": 2, "dropout": False, **kw})
        generate_llm(_dims(1000), cfg, tmp_path / name)
        nodes = {n.attrs.get("label", n.name): n for n in read_rank_nodes(tmp_path / name, 0)}
        return (nodes["fwd.head.mb0"].inputs_shapes, nodes["fwd.head.mb0.cross_entropy"].inputs_shapes
                if "fwd.head.mb0.cross_entropy" in nodes else None, nodes["fwd.embedding.mb0"].inputs_shapes)
    n = 2 * 32
    head, loss, table = shapes("m")
    assert head == f"[[{n}, 64], [64, 512]]" and loss == f"[[{n}, 512]]" and table.startswith("[[512, 64]")
    head, loss, table = shapes("m1", make_vocab_size_divisible_by=1)
    assert head == f"[[{n}, 64], [64, 500]]" and loss == f"[[{n}, 500]]" and table.startswith("[[500, 64]")
    head, _, table = shapes("f", framework="fsdp2", zero=3, dp=2)
    assert head == f"[[{n}, 64], [64, 500]]" and table.startswith("[[500, 64]")


def test_memory_counts_the_padded_rows():
    """Megatron at TP 1, bf16, untied: the embedding and the LM head each gain (1024 - 1000) x 64 weights, 2 B
    each; the fp32 logits of the loss (Megatron: 4 + 2 bytes an element of tokens x vocab) grow with them."""
    dims = _dims(1000)
    padded = stage_memory(dims, LlmConfig(micro_batch_size=2, dropout=False), 0)
    plain = stage_memory(dims, LlmConfig(micro_batch_size=2, dropout=False, make_vocab_size_divisible_by=1), 0)
    assert padded.weights - plain.weights == 2 * 24 * 64 * 2
    assert padded.logits * 1000 == plain.logits * 1024


def test_the_flag_is_megatron_training_only(tmp_path):
    for kw in (dict(framework="fsdp2", zero=3, dp=2), dict(zero=2, dp=2), dict(mode="prefill")):
        with pytest.raises(ConfigError, match="--make-vocab-size-divisible-by"):
            check_config(_dims(1000), LlmConfig(make_vocab_size_divisible_by=64, **kw))
    with pytest.raises(ConfigError, match="positive"):
        check_config(_dims(1000), LlmConfig(make_vocab_size_divisible_by=0))
    args = ["workload", "llm", "--layers", "1", "--hidden", "64", "--heads", "4", "--vocab", "1000", "--seq-len",
            "32", "--tp", "2", "--make-vocab-size-divisible-by", "1", "-o", str(tmp_path / "c")]
    assert main(args) == 0
    nodes = {n.attrs.get("label", n.name): n for n in read_rank_nodes(tmp_path / "c", 0)}
    assert nodes["fwd.head.mb0"].inputs_shapes == "[[32, 64], [64, 500]]"
