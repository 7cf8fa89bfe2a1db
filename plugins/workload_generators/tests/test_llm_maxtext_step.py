"""MaxText's step terms (``llm.maxtext_step``): ``--remat-policy minimal_flash`` runs a layer's element-wise forward
again before its backward, ``--iota-embed`` makes the embedding a one-hot matmul each way; by hand. Absent by
default, refused where they do not apply."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, LlmSpec, generate_llm, model_dims

# Llama-style: h 256, 8 query heads and 4 KV heads of 32, FFN 512 (gated), vocab 1000, one sequence of 128 tokens
LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
             rotary=True)


def _nodes(tmp_path, name, **kw):
    cfg = LlmConfig(**{"dp": 2, "zero": 3, "rope": "fused", "dropout": False, **kw})
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def test_minimal_flash_runs_the_layers_element_wise_forward_again_before_its_backward(tmp_path):
    nodes = _nodes(tmp_path, "r", remat_policy="minimal_flash")
    remat = [n for n in nodes if ".remat." in (n.attrs.get("label") or "") and n.attrs["label"].startswith("bwd.l0.")]
    # (bf16, 2 B) the pre-attention norm: reads x (128 x 256) and its weight and bias (256 each), writes 128 x 256:
    # (32,768 + 512) x 2 + 32,768 x 2 = 132,096 B; RoPE of Q (128 x 8 x 32 = 32,768) with the fp32 128 x 32
    # frequencies: 32,768 x 2 + 4,096 x 4 + 32,768 x 2 = 147,456 B, of K (16,384): 16,384 x 4 + 16,384 = 81,920 B;
    # the residual add: two 128 x 256 read, one written: 3 x 65,536 = 196,608 B; the post-attention norm as the
    # first; silu(wi_0) * wi_1: two 128 x 512 read, one written: 3 x 131,072 = 393,216 B
    assert [(n.attrs["label"].split(".remat.")[1], n.name, n.attrs["tensor_size"]) for n in remat] == [
        ("ln1.ln", "aten::native_layer_norm", 132_096), ("rope.q.rotate", "aten::mul", 147_456),
        ("rope.k.rotate", "aten::mul", 81_920), ("residual", "aten::add", 196_608),
        ("ln2.ln", "aten::native_layer_norm", 132_096), ("act", "aten::mul", 393_216)]
    # before the layer's backward: the first of them precedes every other node of bwd.l0
    labels = [n.attrs.get("label") or "" for n in nodes]
    first_bwd = next(i for i, x in enumerate(labels) if x.startswith("bwd.l0.") and ".remat." not in x)
    assert labels.index("bwd.l0.mb0.remat.ln1.ln") < first_bwd
    # no attention again (TE names its output and statistics 'context'), no GEMM again
    assert not [x for x in labels if x.startswith("recompute.")]
    assert sum(1 for x in labels if ".remat." in x) == 2 * 6  # both layers, six kernels each
    # the default: nothing recomputed
    assert not [n for n in _nodes(tmp_path, "p") if ".remat." in (n.attrs.get("label") or "")]


def test_the_iota_embedding_is_a_one_hot_matmul_each_way(tmp_path):
    by = {n.attrs.get("label"): n for n in _nodes(tmp_path, "i", iota_embed=True)}
    # the one-hot matrix: 128 tokens x 1000 in bf16, written: 256,000 B
    assert (by["fwd.embedding.mb0.one_hot"].name, by["fwd.embedding.mb0.one_hot"].attrs["tensor_size"]) == (
        "aten::zero_", 256_000)
    # [128, 1000] x [1000, 256] forward, [1000, 128] x [128, 256] backward: 2 x 128 x 1000 x 256 = 65,536,000 FLOPs
    fwd, bwd = by["fwd.embedding.mb0"], by["bwd.embedding.mb0.wgrad"]
    assert (fwd.name, fwd.attrs["num_ops"], bwd.name, bwd.attrs["num_ops"]) == (
        "aten::mm", 65_536_000, "aten::mm", 65_536_000)
    assert not [n for n in by.values() if n.name in ("aten::embedding", "aten::embedding_dense_backward")]
    # the default: the lookup and its scatter-add
    plain = {n.name for n in _nodes(tmp_path, "p")}
    assert {"aten::embedding", "aten::embedding_dense_backward"} <= plain


def test_the_flags_are_checked():
    base = ["--model", "llama2-7b", "--dp", "8", "--zero", "3"]
    assert LlmSpec.from_argv([*base, "--remat-policy", "minimal_flash", "--iota-embed"]).resolve(on_warning=print)
    for extra in (["--recompute"], ["--recompute-modules", "layernorm"], ["--mode", "decode"],
                  ["--attention", "unfused"]):
        with pytest.raises(ConfigError, match="--remat-policy minimal_flash is MaxText's"):
            LlmSpec.from_argv([*base, "--remat-policy", "minimal_flash", *extra]).resolve(on_warning=print)
    with pytest.raises(ConfigError, match="--remat-policy minimal_flash is MaxText's"):
        LlmSpec.from_argv(["--preset", "mixtral-8x7b", "--remat-policy", "minimal_flash"]).resolve(on_warning=print)
    with pytest.raises(ConfigError, match="--iota-embed is for --mode train"):
        LlmSpec.from_argv([*base, "--iota-embed", "--mode", "decode"]).resolve(on_warning=print)
    with pytest.raises(ConfigError, match="--remat-policy"):
        LlmSpec.from_argv([*base, "--remat-policy", "full"])
