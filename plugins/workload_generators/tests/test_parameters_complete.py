"""Every weight a model has is a parameter (issue 36): the linear layers' biases, LayerNorm's biases, the learned
position table and Qwen3's query/key norms, counted once (``model.model_parameters``, which ``--summary`` reports and
whose per-rank split the gradient reductions, ZeRO units, optimizer and memory read), and MTP's column-parallel
``eh_proj``; each term by hand."""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.hf import load_hf_config
from astra_workload_generators.llm.model import (bias_widths, layer_norm_parameters, layer_shards, model_parameters,
                                                 mtp_parameters, mtp_shards, parameter_count, total_parameters)
from astra_workload_generators.llm.summary import params_total


def _shipped(name):
    return model_dims(base=load_hf_config(name)[0])


def test_gpt2_is_its_published_124_439_808():
    """GPT-2 small (openai-community/gpt2): per layer c_attn 768 x 2304 + 2304, c_proj 768 x 768 + 768, c_fc 768 x
    3072 + 3072, mlp c_proj 3072 x 768 + 768, ln_1 / ln_2 weight and bias; wte 50257 x 768 (tied to the head), wpe
    1024 x 768, ln_f: 124,439,808, the checkpoint's count."""
    dims = _shipped("gpt2")
    parts = model_parameters(dims)
    assert parts["biases"] == 12 * (2304 + 768 + 3072 + 768) == 82_944
    assert parts["norms"] == (2 * 12 + 1) * 2 * 768 == 38_400
    assert parts["position_embedding"] == 1024 * 768 and parts["embedding"] == 0  # (tied: the head's matrix)
    assert total_parameters(dims) == params_total(dims) == 124_439_808


def test_gpt3_175b_with_biases_is_the_papers_175_0b():
    """GPT-3 175B (Brown et al. 2020, Table 2.1: 175.0B): 12 L h^2 + V h (tied) + 2048 h positions + 9 h biases a
    layer (QKV 3h, projection h, FC1 4h, FC2 h) + LayerNorms' weight and bias (2L + 1 of them) = 174.60B, 0.23 % under
    the paper's rounded figure (which 12 L h^2 = 173.9B alone is 0.6 % under)."""
    dims = _shipped("gpt3-175b")
    h, L = 12288, 96
    assert bias_widths(dims) == (3 * h + 4 * h, 2 * h, 0, 0)
    parts = model_parameters(dims)
    assert parts == {"matmul": L * 12 * h * h + 50257 * h, "embedding": 0, "position_embedding": 2048 * h,
                     "norms": (2 * L + 1) * 2 * h, "biases": L * 9 * h}
    assert abs(total_parameters(dims) / 175.0e9 - 1) < 0.0025
    # the --preset (untied embedding, as the preset always was) counts the same biases and positions
    preset = model_parameters(model_dims("gpt3-175b"))
    assert preset["biases"] == L * 9 * h and preset["position_embedding"] == 2048 * h


def test_qwen3_layer_has_its_q_and_k_norms():
    """Qwen3-8B (Qwen3Attention's q_norm / k_norm: RMSNorm over head_dim 128, one weight each): 2 x 4096 + 2 x 128
    norm weights a layer; no biases, no position table. Total 36 x (QKV 4096 x 6144 + O 4096^2 + FFN 3 x 4096 x 12288
    + 8448) + 2 x 151936 x 4096 (untied) + 4096 = 8,190,735,360 (the card's 8.2B)."""
    dims = _shipped("qwen3-8b")
    assert dims.qk_norm and layer_norm_parameters(dims) == 2 * 4096 + 2 * 128
    assert bias_widths(dims) == (0, 0, 0, 0) and model_parameters(dims)["position_embedding"] == 0
    layer = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128
    assert total_parameters(dims) == 36 * layer + 2 * 151936 * 4096 + 4096 == 8_190_735_360
    # a Qwen3-MoE layer has them too; Llama does not
    assert layer_norm_parameters(_shipped("qwen3-30b-a3b")) == 2 * 2048 + 2 * 128
    assert layer_norm_parameters(_shipped("llama3-8b")) == 2 * 4096


def test_qwen2_has_q_k_v_biases_only():
    """Qwen2-7B (Qwen2Attention: q/k/v_proj bias=True, o_proj bias=False; an MLP without biases): 3584 + 2 x 512 a
    layer, 28 layers: 129,024."""
    dims = _shipped("qwen2-7b")
    assert bias_widths(dims) == (3584 + 2 * 512, 0, 0, 0)
    assert model_parameters(dims)["biases"] == 28 * 4608 == 129_024


def test_layernorm_has_a_bias_rmsnorm_not():
    """GPT-NeoX-20B (nn.LayerNorm): (2 x 44 + 1) x 2 x 6144 norm elements; Llama 3 8B (RMSNorm): (2 x 32 + 1) x
    4096."""
    assert model_parameters(_shipped("gpt-neox-20b"))["norms"] == 89 * 2 * 6144
    assert model_parameters(_shipped("llama3-8b"))["norms"] == 65 * 4096


def test_gpt_oss_counts_its_attention_and_expert_biases():
    """GPT-OSS-120B: q/k/v/o biases (64 x 64 + 2 x 8 x 64 + 2880 a layer) and each of 128 experts' gate_up (2 x 2880)
    and down (2880) biases, 36 layers: 40,101,120 (the card's 116.83B total then within 0.01 %)."""
    dims = _shipped("gpt-oss-120b")
    assert bias_widths(dims) == (4096 + 1024, 2880, 2 * 2880, 2880)
    assert model_parameters(dims)["biases"] == 36 * (5120 + 2880 + 128 * 3 * 2880) == 40_101_120
    assert abs(total_parameters(dims) / 116.83e9 - 1) < 1e-4


def test_per_rank_shards_split_column_biases_and_keep_row_biases_whole():
    """TP 2 on a GPT-style layer (h 64, FFN 256): the matmul weights / 2, QKV's 192 and FC1's 256 bias / 2, the
    projection's and FC2's 64 whole; a gated model (no biases) keeps the matmul half alone."""
    gpt = model_dims(layers=2, hidden=64, heads=4, vocab=128, seq_len=32, gated=False)
    matmul = 4 * 64 * 64 + 2 * 64 * 256
    assert layer_shards(gpt, LlmConfig(tp=2), False) == (matmul // 2 + (192 + 256) // 2 + 2 * 64, 0)
    llama = model_dims(layers=2, hidden=64, heads=4, vocab=128, seq_len=32, gated=True, ffn_hidden=128, rotary=True)
    assert layer_shards(llama, LlmConfig(tp=2), False) == ((4 * 64 * 64 + 3 * 64 * 128) // 2, 0)


def test_sp_all_reduces_the_row_parallel_biases_with_the_norms(tmp_path):
    """Sequence parallelism at TP 2, 2 layers h 64: Megatron marks the row-parallel biases ``sequence_parallel``
    like the norms, so the TP all-reduce before the optimizer carries, per layer, the two LayerNorms (4 x 64) and the
    projection's and FC2's biases (2 x 64), plus the final LayerNorm (2 x 64): 896 fp32 gradients."""
    dims = model_dims(layers=2, hidden=64, heads=4, vocab=128, seq_len=32, gated=False)
    cfg = LlmConfig(tp=2, dp=2, sequence_parallel=True, micro_batches=1, micro_batch_size=1, dropout=False)
    generate_llm(dims, cfg, tmp_path / "t")
    by = {n.name: n for n in read_rank_nodes(tmp_path / "t", 0)}
    assert by["tp_ar.norm_grads"].attrs["comm_size"] == (2 * (4 * 64 + 2 * 64) + 2 * 64) * 4


def test_mtp_eh_proj_is_column_parallel(tmp_path):
    """Megatron-Core's MTP ``eh_proj`` (2h -> h, no bias) is a column-parallel linear: h/TP outputs per rank, then
    gathered over TP along the last dimension; with sequence parallelism its [s/TP, 2h] input is all-gathered first
    and the gradient of its scattered output is all-gathered in the backward, its input gradient reduce-scattered.
    TP 2, h 64, 32 tokens of bf16: GEMM 32 x 128 x 32; input gather 32 x 128 x 2 B = 8,192 B whole, output gather
    32 x 64 x 2 B = 4,096 B whole (each rank's share half), input-gradient reduce-scatter 8,192 B."""
    dims = model_dims(layers=2, hidden=64, heads=4, vocab=128, seq_len=32, gated=True, ffn_hidden=128, rotary=True,
                      rms_norm=True, mtp_layers=1)
    cfg = LlmConfig(tp=2, sequence_parallel=True, micro_batches=1, micro_batch_size=1, dropout=False)
    layer = layer_shards(dims, cfg, False)[0]
    assert mtp_shards(dims, cfg) == (layer + 2 * 64 * 64 // 2, 0)
    assert mtp_parameters(dims) == 2 * layer + 2 * 64 * 64 + layer_norm_parameters(dims) + 3 * 64
    generate_llm(dims, cfg, tmp_path / "t")
    nodes = read_rank_nodes(tmp_path / "t", 0)
    by = {n.attrs.get("label", n.name): n for n in nodes}
    assert "fwd.mtp0.mb0.eh_proj" in by and "bwd.mtp0.mb0.eh_proj.wgrad" in by
    colls = {n.name: n.attrs for n in nodes if n.type == T.COMM_COLL_NODE and "eh_proj" in n.name}
    assert {k: (v["comm_type"], v["comm_size"]) for k, v in colls.items()} == {
        "tp_ag.fwd.mtp0.mb0.eh_proj_in": (T.ALL_GATHER, 8192 // 2),
        "tp_ag.fwd.mtp0.mb0.eh_proj_out": (T.ALL_GATHER, 4096 // 2),
        "tp_ag.bwd.mtp0.mb0.eh_proj_out_grad": (T.ALL_GATHER, 4096 // 2),
        "tp_rs.bwd.mtp0.mb0.eh_proj_in": (T.REDUCE_SCATTER, 8192)}


def test_the_flops_rule_keeps_matmul_weights_only():
    """6 P tokens counts the matmul weights: the biases, norms and tables are in the total, not in P."""
    dims = _shipped("gpt2")
    assert model_parameters(dims)["matmul"] == parameter_count(dims) == 12 * (4 * 768 * 768 + 2 * 768 * 3072) \
        + 50257 * 768


def test_qk_norms_run_before_the_rotation(tmp_path):
    """A Qwen3-style layer (qk_norm, RMSNorm, rotary) at TP 2, 1 x 32 tokens, 4 heads of 16 (2 key heads), bf16: after
    the QKV GEMM one RMSNorm over this rank's 32 x 2 query rows of 16 and one over its 32 x 1 key rows, read and
    written with the 16-wide weight (2,048 + 32 and 1,024 + 32 B), then RoPE; in the backward RoPE's first, then the
    key's and the query's norm backward (gradient, input and output rows, fp32 rstd, weight)."""
    dims = model_dims(layers=1, hidden=64, heads=4, kv_heads=2, ffn_hidden=128, vocab=128, seq_len=32, gated=True,
                      rotary=True, rms_norm=True, qk_norm=True)
    generate_llm(dims, LlmConfig(tp=2, micro_batches=1, micro_batch_size=1, dropout=False), tmp_path / "t")
    nodes = read_rank_nodes(tmp_path / "t", 0)
    labels = [n.attrs.get("label", n.name) for n in nodes]
    by = dict(zip(labels, nodes))
    q, k = by["fwd.l0.mb0.q_norm"], by["fwd.l0.mb0.k_norm"]
    assert (q.name, q.attrs["tensor_size"], k.attrs["tensor_size"]) == ("aten::_fused_rms_norm", 2 * 2048 + 32,
                                                                        2 * 1024 + 32)
    assert labels.index("fwd.l0.mb0.qkv") < labels.index("fwd.l0.mb0.q_norm") < labels.index("fwd.l0.mb0.k_norm") \
        < labels.index("fwd.l0.mb0.rope.q.rotate")
    kb, qb = by["bwd.l0.mb0.k_norm"], by["bwd.l0.mb0.q_norm"]
    assert (qb.name, qb.attrs["tensor_size"]) == ("aten::_fused_rms_norm_backward", 3 * 2048 + 64 * 4 + 32)
    assert labels.index("bwd.l0.mb0.rope.q.rotate.bwd") < labels.index("bwd.l0.mb0.k_norm") < \
        labels.index("bwd.l0.mb0.q_norm")
    assert kb.attrs["tensor_size"] == 3 * 1024 + 32 * 4 + 32
    # without qk_norm: none
    generate_llm(model_dims(**{**dims.__dict__, "qk_norm": False}), LlmConfig(tp=2, micro_batches=1,
                 micro_batch_size=1, dropout=False), tmp_path / "n")
    plain = [n.attrs.get("label", "") for n in read_rank_nodes(tmp_path / "n", 0)]
    assert not [label for label in plain if label.endswith(("q_norm", "k_norm"))]
