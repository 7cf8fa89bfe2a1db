"""Sliding-window layers mark their band: ``attention_window`` on the forward and backward flash attention nodes of
a local layer (the window's keys a query sees), none on the global layers, on a decode step's single query or on a
model without a window; the mark changes no FLOP count."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# 2 layers, every other one local (Gemma's window_pattern 2: layer 0 local, layer 1 global), window 32 of 128 tokens
SMALL = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
FWD, BWD = "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward"


def _attention(tmp_path, name, dims, **kw):
    cfg = LlmConfig(**{"dp": 1, "micro_batches": 1, "attention_kernel": "fa3", **kw})
    generate_llm(model_dims(**dims), cfg, tmp_path / name)
    return {n.attrs["label"]: n for n in read_rank_nodes(tmp_path / name, 0) if n.name in (FWD, BWD)}


def test_local_layers_mark_their_band_forward_and_backward(tmp_path):
    nodes = _attention(tmp_path, "w", dict(SMALL, window=32, window_pattern=2))
    assert set(nodes) == {"fwd.l0.mb0.attn", "fwd.l1.mb0.attn", "bwd.l0.mb0.attn", "bwd.l1.mb0.attn"}
    for label in ("fwd.l0.mb0.attn", "bwd.l0.mb0.attn"):
        node = nodes[label]
        assert node.attrs["attention_window"] == 32 and node.attrs["attention_kernel"] == "fa3"
    for label in ("fwd.l1.mb0.attn", "bwd.l1.mb0.attn"):
        assert "attention_window" not in nodes[label].attrs
    # FLOPs: the local layer's q x w block as before (2 x 128 x 32 x (32 + 32) x 8 heads), the backward 2x that
    assert nodes["fwd.l0.mb0.attn"].attrs["num_ops"] == 2 * 128 * 32 * 64 * 8
    assert nodes["bwd.l0.mb0.attn"].attrs["num_ops"] == 4 * 128 * 32 * 64 * 8


def test_no_window_no_attribute_and_decode_unmarked(tmp_path):
    plain = _attention(tmp_path, "p", SMALL)
    assert plain and not any("attention_window" in n.attrs for n in plain.values())
    # decode: one query against the window's keys is the block itself
    decode = _attention(tmp_path, "d", dict(SMALL, window=32), mode="decode", prompt_len=96)
    assert decode and not any("attention_window" in n.attrs for n in decode.values())
