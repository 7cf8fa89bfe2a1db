"""The norms' parameters (issue 36): counted in the gradient synchronisation, the ZeRO / FSDP units and the memory
estimate, whole on every TP rank; with sequence parallelism Megatron all-reduces their gradients over TP before the
optimizer (``finalize_model_grads``); by hand, on a 2-layer h 256 model."""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.memory import stage_memory
from astra_workload_generators.llm.model import layer_norm_parameters, norm_weights

SMALL = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
             rms_norm=True)
# a layer's matmul weights: QKV 256 x (256 + 2 x 4 x 32) + proj 256 x 256 + FFN 3 x 256 x 512 = 589,824
LAYER = 256 * 512 + 256 * 256 + 3 * 256 * 512


def test_norm_counts_by_hand():
    rms, ln = model_dims(**SMALL), model_dims(**dict(SMALL, rms_norm=False))
    assert (norm_weights(rms), norm_weights(ln)) == (256, 512)  # RMSNorm: weight; LayerNorm: weight and bias
    assert (layer_norm_parameters(rms), layer_norm_parameters(ln)) == (512, 1024)
    mla = model_dims(**dict(SMALL, q_lora_rank=64, kv_lora_rank=32, rope_dim=16, v_head_dim=32, head_size=48,
                                  kv_heads=8))
    assert layer_norm_parameters(mla) == 512 + 64 + 32  # and the latent query / key-value RMSNorms


def _nodes(tmp_path, **cfg):
    cfg = LlmConfig(**{"micro_batches": 1, "micro_batch_size": 2, "dropout": False, **cfg})
    generate_llm(model_dims(**SMALL), cfg, tmp_path / "t")
    nodes = read_rank_nodes(tmp_path / "t", 0)
    return {n.name: n for n in nodes}, {n.attrs.get("label"): n for n in nodes if n.attrs.get("label")}


def test_dp_all_reduce_carries_the_norms(tmp_path):
    """DP 2, TP 2: a layer's all-reduce is its TP shard of the matmul weights plus its two whole RMSNorm weights,
    (589,824 / 2 + 512) x 2 B = 590,848 B; the LM head's unit carries the final norm, (1024 / 2 x 256 + 256) x 2 B (Megatron pads the vocabulary 1000 to a
    multiple of 128 x TP 2)."""
    names, _ = _nodes(tmp_path, dp=2, tp=2)
    assert names["dp_ar.l0"].attrs["comm_size"] == (LAYER // 2 + 512) * 2 == 590_848
    assert names["dp_ar.head"].attrs["comm_size"] == (512 * 256 + 256) * 2 == 262_656


def test_sp_all_reduces_the_norm_grads_over_tp_before_the_optimizer(tmp_path):
    """SP at TP 2: one all-reduce over TP of the stage's norm gradients in fp32, 2 layers x 512 + 256 = 1,280
    elements = 5,120 B (2,560 B with --grad-buffer same), after the DP reductions, before the gradient norm;
    none without SP."""
    names, labels = _nodes(tmp_path, dp=2, tp=2, sequence_parallel=True)
    ar = names["tp_ar.norm_grads"]
    assert ar.attrs["comm_type"] == T.ALL_REDUCE and ar.attrs["comm_size"] == 1280 * 4 == 5120
    assert {names["dp_ar.l0"].id, names["dp_ar.head"].id} <= set(ar.data_deps)
    assert ar.id in labels["optimizer.clip.norm"].data_deps
    names, _ = _nodes(tmp_path, dp=2, tp=2, sequence_parallel=True, grad_buffer="same")
    assert names["tp_ar.norm_grads"].attrs["comm_size"] == 2560
    names, _ = _nodes(tmp_path, dp=2, tp=2)
    assert "tp_ar.norm_grads" not in names


def test_memory_counts_the_norms(tmp_path):
    """Megatron, no parallelism: bf16 weights of every parameter, the 2 x 2 x 256 layer norms and the final 256
    included, and (no rotary flag: Megatron's default learned absolute positions) the 128 x 256 position table:
    (2 x 589,824 + 2 x 1024 x 256 + 1,280 + 32,768) x 2 B (Megatron pads the vocabulary 1000 to 1024)."""
    m = stage_memory(model_dims(**SMALL), LlmConfig(micro_batch_size=2, dropout=False), 0)
    assert m.weights == (2 * LAYER + 2 * 1024 * 256 + 1280 + 128 * 256) * 2
