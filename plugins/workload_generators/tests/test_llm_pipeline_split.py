"""The pipeline split counting the embedding and the loss as layers (Megatron-LM's
account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split): layer counts per virtual stage
computed by hand from Megatron's rule, the traces and the memory estimate following them, and the refusal without
the options."""

from __future__ import annotations

import re

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, model_dims
from astra_workload_generators.llm.memory import stage_memory
from astra_workload_generators.llm.model import layer_norm_parameters, layer_shards, padded_vocab
from astra_workload_generators.llm.spec import LlmSpec
from astra_workload_generators.llm.split import stage_layers

SMALL = dict(layers=7, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)


def _counts(layers, **cfg):
    return [len(r) for r in stage_layers(layers, LlmConfig(**cfg))]


def test_megatron_rule_by_hand():
    # Llama-3.1 405B: (126 + 1 + 1) / (8 x 8) = 2 slots per virtual stage; the first gives one to the embedding,
    # the last one to the loss
    both = dict(pp=8, virtual_stages=8, micro_batches=8, pipeline_embedding_layer=True, pipeline_loss_layer=True)
    assert _counts(126, **both) == [1] + [2] * 62 + [1]
    # 7 + 1 = 8 over PP 4: 2 each, the first one fewer (embedding only), or the last (loss only)
    assert _counts(7, pp=4, pipeline_embedding_layer=True) == [1, 2, 2, 2]
    assert _counts(7, pp=4, pipeline_loss_layer=True) == [2, 2, 2, 1]
    # 30 + 2 = 32 over PP 4: 8 each, 7 on the first and last stage
    assert _counts(30, pp=4, pipeline_embedding_layer=True, pipeline_loss_layer=True) == [7, 8, 8, 7]
    # without the options: the even split; ranges contiguous and complete either way
    assert _counts(8, pp=2, virtual_stages=2, micro_batches=2) == [2, 2, 2, 2]
    ranges = stage_layers(126, LlmConfig(**both))
    assert [i for r in ranges for i in r] == list(range(126))


def test_refusal_without_the_options_names_them():
    with pytest.raises(ConfigError, match=r"layers 126 are not divisible by --pp 8 \(--pipeline-embedding-layer "
                       r"--pipeline-loss-layer"):
        LlmSpec(model="llama3.1-405b", pp=8, virtual_stages=8, micro_batches=8).resolve()
    with pytest.raises(ConfigError, match=r"layers 7 \+ embedding 1 = 8 are not divisible by --pp x "
                       r"--virtual-stages 16"):
        LlmSpec(**SMALL, pp=8, virtual_stages=2, micro_batches=8, pipeline_embedding_layer=True).resolve()
    # 6 + 2 = 8 over 8 virtual stages: the first and last would hold the embedding / loss only
    with pytest.raises(ConfigError, match="leaves a virtual stage without a transformer layer"):
        LlmSpec(**dict(SMALL, layers=6), pp=8, micro_batches=8, pipeline_embedding_layer=True,
                pipeline_loss_layer=True).resolve()


def _layers_in_trace(prefix, rank):
    return {int(m.group(1)) for n in read_rank_nodes(prefix, rank)
            if (m := re.match(r"fwd\.l(\d+)\.mb0\.", n.attrs.get("label", "")))}


def test_405b_pp8_vp8_generates_with_the_split(tmp_path):
    prefix = tmp_path / "w"
    assert main(["workload", "llm", "--model", "llama3.1-405b", "--pp", "8", "--virtual-stages", "8",
                 "--micro-batches", "8", "--seq-len", "256", "--no-elementwise", "--pipeline-embedding-layer",
                 "--pipeline-loss-layer", "-o", str(prefix)]) == 0
    # pipeline rank p holds virtual stages p, p + 8, ...; virtual stage 0 holds layer 0 only, v >= 1 layers
    # 2v - 1 and 2v (the last, 63: layer 125 only), by hand from the rule above
    for p in range(8):
        expected = set()
        for v in range(p, 64, 8):
            expected |= {0} if v == 0 else ({125} if v == 63 else {2 * v - 1, 2 * v})
        assert _layers_in_trace(prefix, p) == expected


def test_memory_follows_the_split():
    dims = model_dims(**SMALL)
    cfg = LlmConfig(pp=4, micro_batches=4, pipeline_embedding_layer=True)
    first, second = stage_memory(dims, cfg, 0), stage_memory(dims, cfg, 1)
    layer = sum(layer_shards(dims, cfg, False)) + layer_norm_parameters(dims)  # (its norms' weights too)
    embedding = padded_vocab(dims, 1, 128) * 256 + 128 * 256  # (and the learned position table: no rotary flag)
    # stage 0: embedding + 1 layer; stage 1: 2 layers (bf16 weights, 2 B each)
    assert first.weights == 2 * (embedding + layer)
    assert second.weights == 2 * (2 * layer)
