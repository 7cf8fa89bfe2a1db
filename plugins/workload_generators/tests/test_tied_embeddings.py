"""Tied embeddings as the frameworks hold them (issue 36), by hand: at PP 1 the LM head is the embedding's own
weight, so its gradient is reduced once, updated once and sharded once (Megatron, DeepSpeed ZeRO-3, FSDP2), while
DeepSpeed still gathers it again for the head's module; the --tie-embeddings flag; and the serving step's embedding
all-reduce at TP > 1 (vLLM's VocabParallelEmbedding), absent with --inference-embedding replicated."""

from __future__ import annotations

import pytest

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.spec import LlmSpec

# h 256, vocab 1000 (Megatron pads it to 1024, a multiple of 128 x TP 2: 512 rows a rank), RMSNorm (the final
# norm: 256 weights), sequences of 128 tokens
DIMS = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
            rms_norm=True, rotary=True)
TABLE = 512 * 256  # padded vocab/TP x h = 131,072 elements: the word embedding's shard on one TP rank
FINAL = 256        # the final RMSNorm's weights (with the head's unit)
ADAM_BYTES = 28    # .zero.ADAM_BYTES_PER_PARAM: the optimizer node's bytes per parameter


def _nodes(tmp_path, name, tied, **cfg):
    cfg = LlmConfig(**{"micro_batches": 2, "micro_batch_size": 2, "tp": 2, "dp": 2, **cfg})
    generate_llm(model_dims(**DIMS, tied_embeddings=tied), cfg, tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _size(nodes, name):
    return next(n.attrs["comm_size"] for n in nodes if n.name == name)


def _adam_params(nodes):
    return next(n.attrs["tensor_size"] for n in nodes if n.attrs.get("label") == "optimizer.adam") // ADAM_BYTES


def test_megatron_pp1_tied_head_is_reduced_and_updated_once(tmp_path):
    """Megatron, PP 1, TP 2, DP 2, ZeRO 0, bf16: untied, the head's DP all-reduce carries its 131,072-element
    shard and the final norm, (131,072 + 256) x 2 B = 262,656 B; tied, only the final norm's 256 x 2 = 512 B (the
    shared weight's gradient goes with the embedding's unit, whose all-reduce is the same 262,144 B in both);
    Adam updates 131,072 parameters fewer."""
    untied, tied = _nodes(tmp_path, "u", False), _nodes(tmp_path, "t", True)
    assert _size(untied, "dp_ar.head") == (TABLE + FINAL) * 2 == 262_656
    assert _size(tied, "dp_ar.head") == FINAL * 2 == 512
    assert _size(untied, "dp_ar.embedding") == _size(tied, "dp_ar.embedding") == TABLE * 2
    assert _adam_params(untied) - _adam_params(tied) == TABLE
    # the forward and backward compute are the same: the head's GEMMs still use the (shared) weight
    compute = lambda nodes: [n.name for n in nodes if n.type != T.COMM_COLL_NODE]  # noqa: E731
    assert compute(untied) == compute(tied)


def test_megatron_pp2_tied_keeps_a_copy_on_each_end(tmp_path):
    """At PP 2 the last stage keeps its own copy (summed by the embedding group's all-reduce): its head reduction
    still carries the table."""
    cfg = LlmConfig(micro_batches=2, micro_batch_size=2, tp=2, dp=2, pp=2)
    generate_llm(model_dims(**DIMS, tied_embeddings=True), cfg, tmp_path / "pp2")
    from astra_workload_generators.llm.layout import rank_of
    last = read_rank_nodes(tmp_path / "pp2", rank_of(cfg, 0, 0, 1))
    assert _size(last, "dp_ar.head") == (TABLE + FINAL) * 2


def test_deepspeed_zero3_tied_reduces_once_but_gathers_for_the_head(tmp_path):
    """DeepSpeed ZeRO-3 (TP 1, DP 2, fp16; its norms persistent, so the head's unit is the table alone): tied, the
    head's backward puts no gradient in the bucket (no ds_ipg_copy.head; the one gradient of the shared weight goes
    with the embedding's), the bucket is 1000 x 256 = 256,000 elements (512,000 B) smaller and Adam's partition
    128,000 smaller (256,000 / DP 2); the head's module still all-gathers the table, forward and backward: 512,000 B
    each, the trace's all-gather size being each rank's 256,000 B shard (released after the embedding: beyond
    stage3_max_reuse_distance in a real model)."""
    kw = dict(framework="deepspeed", zero=3, tp=1, dtype="fp16")
    untied, tied = _nodes(tmp_path, "u", False, **kw), _nodes(tmp_path, "t", True, **kw)
    labels = lambda nodes: {n.attrs.get("label") for n in nodes}  # noqa: E731
    assert "ds_ipg_copy.head" in labels(untied) and "ds_ipg_copy.head" not in labels(tied)
    buckets = lambda nodes: sum(n.attrs["comm_size"] for n in nodes if n.name.startswith("dp_rs.ds_bucket"))  # noqa
    assert buckets(untied) - buckets(tied) == 1000 * 256 * 2 == 512_000
    assert _adam_params(untied) - _adam_params(tied) == 1000 * 256 // 2
    for phase in ("fwd", "bwd"):
        assert _size(tied, f"dp_ag.head.{phase}") == _size(untied, f"dp_ag.head.{phase}") == 512_000 // 2
        assert _size(tied, f"dp_ag.embedding.{phase}") == _size(untied, f"dp_ag.embedding.{phase}")


def test_fsdp2_root_holds_the_tied_weight_once(tmp_path):
    """torchtitan's FSDP2 root (embedding, final norm, head; TP 1, DP 2, bf16): tied, the root's gather and its
    fp32 reduce-scatter carry the 256,000-element table once: 1,024,000 B less reduced, 512,000 B less gathered
    (each rank's shard, 256,000 B, as the trace's all-gather size counts it)."""
    kw = dict(framework="fsdp2", zero=3, tp=1)
    untied, tied = _nodes(tmp_path, "u", False, **kw), _nodes(tmp_path, "t", True, **kw)
    assert _size(untied, "dp_rs.root") - _size(tied, "dp_rs.root") == 1000 * 256 * 4
    assert _size(untied, "dp_ag.root.fwd") - _size(tied, "dp_ag.root.fwd") == 1000 * 256 * 2 // 2
    assert not [n for n in tied if n.name.startswith("dp_ag.head")]


def test_untied_and_inference_unchanged_by_the_tie(tmp_path):
    """A tied model's serving step reduces and updates nothing: the same trace as untied."""
    kw = dict(mode="prefill", micro_batches=1, tp=1, dp=1)
    untied, tied = _nodes(tmp_path, "u", False, **kw), _nodes(tmp_path, "t", True, **kw)
    assert [(n.name, n.attrs) for n in untied] == [(n.name, n.attrs) for n in tied]


@pytest.mark.parametrize("words, tied", [
    (["--preset", "gpt3-175b"], True),  # GPT-3 ties, as its config file of the same name (model.PRESETS)
    (["--preset", "gpt3-175b", "--no-tie-embeddings"], False),
    (["--model", "gpt2"], True),
    (["--model", "gpt2", "--untie-embeddings-and-output-weights"], False),
    (["--model", "gpt2", "--no-tie-embeddings"], False),
    (["--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000", "--seq-len", "128"], False),
    (["--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000", "--seq-len", "128",
      "--tie-embeddings"], True),
])
def test_the_flag_overrides_the_models_default(words, tied):
    dims, _ = LlmSpec.from_argv(words).resolve(on_warning=lambda line: None)
    assert dims.tied_embeddings is tied


def test_the_flag_in_a_mapping():
    spec = LlmSpec.from_mapping({"preset": "gpt3-175b", "tie_embeddings": False})
    assert spec.resolve()[0].tied_embeddings is False
    assert LlmSpec.from_mapping({"model": "gpt2", "tie-embeddings": False}).resolve(
        on_warning=lambda line: None)[0].tied_embeddings is False


def _emb(nodes):
    return [n for n in nodes if n.type == T.COMM_COLL_NODE and ".embedding." in n.name]


@pytest.mark.parametrize("mode, extra, tokens", [
    ("decode", dict(batch_size=8, prompt_len=64), 8),                       # 8 sequences, one token each
    ("prefill", dict(batch_size=1, prompt_len=96), 96),                     # one prompt of 96 tokens
    ("mixed", dict(batch_size=4, prompt_len=64, prefill_chunk=32), 4 + 32),  # 4 decodes and a 32-token chunk
])
def test_serving_step_all_reduces_the_embedding_output_at_tp2(tmp_path, mode, extra, tokens):
    """vLLM's VocabParallelEmbedding at TP 2: one all-reduce of the step's tokens x h 256 x 2 B (bf16) on the TP
    group, the step's first node (a serving step emits no lookup kernel), which the first layer's first node waits
    for; none with --inference-embedding replicated."""
    kw = dict(mode=mode, micro_batches=1, dp=1, logits="last", inference_elementwise=True, **extra)
    mbs = kw.pop("batch_size")
    nodes = _nodes(tmp_path, mode, False, micro_batch_size=mbs, **kw)
    (ar,) = _emb(nodes)
    assert ar.attrs["comm_type"] == T.ALL_REDUCE and ar.attrs["comm_size"] == tokens * 256 * 2
    first = next(n for n in nodes if n.attrs.get("label", "").startswith("fwd.l0.mb0."))
    assert ar.data_deps == [] and ar.id in first.data_deps and ar.name == "tp_ar.fwd.embedding.mb0"
    rep = _nodes(tmp_path, f"{mode}_rep", False, micro_batch_size=mbs, inference_embedding="replicated", **kw)
    assert _emb(rep) == []


def test_serving_step_none_at_tp1_and_bad_choice(tmp_path):
    nodes = _nodes(tmp_path, "tp1", False, mode="decode", micro_batch_size=4, prompt_len=64, tp=1, dp=1,
                   micro_batches=1)
    assert _emb(nodes) == []
    from astra_sim.errors import ConfigError
    with pytest.raises(ConfigError, match="--inference-embedding"):
        LlmSpec(preset="gpt3-175b", inference_embedding="sharded").resolve()


def test_astra_serve_passes_embedding_replicated_only():
    """``astra serve --embedding replicated`` reaches the generator as ``inference_embedding``; the default adds
    nothing to the model options (the layouts of vLLM-like runs keep their keys)."""
    serving = pytest.importorskip("astra_serving.spec")
    from astra_serving.deployment import model_options

    base = {"model": "llama3-8b", "platform": "hgx-h100", "tp": 4, "qps": 1.0}
    assert "inference_embedding" not in model_options(serving.ServeSpec.from_mapping(base))
    spec = serving.ServeSpec.from_mapping({**base, "embedding": "replicated"})
    assert model_options(spec)["inference_embedding"] == "replicated"
