"""Bias gradients reduced outside the GEMMs (issue 36, ``LayerOps.bias_grad``): one ``aten::sum`` per biased linear
layer in the backward where the framework runs one (Hugging Face's ``Conv1D`` under DeepSpeed, Megatron-LM's own
linears), none where Transformer Engine fuses it, for gated (bias-free) models, or in inference; and the emitter
counting a reduction's bytes as the gpu model does (its arguments, read once). Expected values by hand."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# GPT-2-style (biases): h 64, 4 heads, FFN 256, 32 tokens a sequence, 2 layers
GPT = dict(layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256, vocab=512, seq_len=32, gated=False)


def _nodes(tmp_path, dims=GPT, name="t", **kw):
    generate_llm(model_dims(**dims), LlmConfig(**kw), tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _sums(nodes):
    return {n.attrs["label"]: n for n in nodes if n.name == "aten::sum" and ".bias_grad" in n.attrs["label"]}


def test_deepspeed_gpt2_reduces_each_conv1d_bias_gradient(tmp_path):
    # --framework deepspeed, micro-batch 2 x 32 tokens = 64 rows, fp16 (2 B). Per layer and micro-batch four sums:
    # QKV [64, 192] -> [192]: (64 x 192 + 192) x 2 B = (12,288 + 192) x 2 = 24,960 B
    # proj [64, 64] -> [64]: (4,096 + 64) x 2 = 8,320 B; FC1 [64, 256] -> [256]: (16,384 + 256) x 2 = 33,280 B;
    # FC2 [64, 64] -> [64]: 8,320 B
    nodes = _nodes(tmp_path, dp=2, zero=3, framework="deepspeed", dtype="fp16", micro_batch_size=2)
    sums = _sums(nodes)
    assert len(sums) == 2 * 4  # two layers, one micro-batch
    assert {k: v.attrs["tensor_size"] for k, v in sums.items() if k.startswith("bwd.l0.mb0.")} == {
        "bwd.l0.mb0.qkv.bias_grad": 24_960, "bwd.l0.mb0.proj.bias_grad": 8_320,
        "bwd.l0.mb0.fc1.bias_grad": 33_280, "bwd.l0.mb0.fc2.bias_grad": 8_320}
    # each follows its layer's weight-gradient GEMM on the compute chain
    order = [n.attrs.get("label") for n in nodes if n.attrs.get("label", "").startswith("bwd.l0.mb0.")]
    assert order.index("bwd.l0.mb0.fc2.bias_grad") == order.index("bwd.l0.mb0.fc2.wgrad") + 1
    assert order.index("bwd.l0.mb0.qkv.bias_grad") == order.index("bwd.l0.mb0.qkv.wgrad") + 1


def test_megatron_local_linears_with_tp_and_sequence_parallelism(tmp_path):
    # Megatron-LM's own linears (bf16, no FP8, no TP overlap), TP 2 with SP, micro-batch 1 x 32 tokens:
    # QKV and FC1 reduce the gathered 32 rows of their TP shard: QKV [32, 96] -> (3,072 + 96) x 2 = 6,336 B,
    # FC1 [32, 128] -> (4,096 + 128) x 2 = 8,448 B; the projection and FC2 in the bias-dropout-add on the
    # residual stream's SP shard, 32 / 2 = 16 rows: [16, 64] -> (1,024 + 64) x 2 = 2,176 B
    nodes = _nodes(tmp_path, tp=2, sequence_parallel=True)
    sums = _sums(nodes)
    assert len(sums) == 2 * 4
    assert {k: v.attrs["tensor_size"] for k, v in sums.items() if k.startswith("bwd.l1.mb0.")} == {
        "bwd.l1.mb0.qkv.bias_grad": 6_336, "bwd.l1.mb0.proj.bias_grad": 2_176,
        "bwd.l1.mb0.fc1.bias_grad": 8_448, "bwd.l1.mb0.fc2.bias_grad": 2_176}


def test_none_where_fused_or_absent(tmp_path):
    # Transformer Engine (FP8: bgrad fused into the gradient's cast; --tp-comm-overlap: TE's linears, bgrad in the
    # wgrad GEMM's epilogue), a gated model (no biases), torchtitan (fsdp2), LoRA (frozen biases), inference
    gated = dict(GPT, gated=True)
    for i, kw in enumerate([dict(gemm_dtype="fp8"), dict(tp=2, sequence_parallel=True, tp_comm_overlap=True),
                            dict(dims=gated), dict(dp=2, zero=3), dict(lora_rank=4, lora_targets=("qkv",)),
                            dict(mode="prefill")]):
        dims = kw.pop("dims", GPT)
        assert _sums(_nodes(tmp_path, dims=dims, name=f"c{i}", **kw)) == {}, kw


def test_a_reductions_tensor_size_is_its_arguments_read_once(tmp_path):
    # --norm-kernel composite (fsdp2, gated), 1 x 32 tokens = 32 rows: the weight's gradient sum reads [32, 64]
    # bf16 once: 32 x 64 x 2 B = 4,096 B (it was 8,192: the input + an output as large as the input);
    # the mean reads [32, 64] fp32 once: 32 x 64 x 4 = 8,192 B (was 16,384)
    nodes = _nodes(tmp_path, dims=dict(GPT, gated=True), dp=2, zero=3, norm_kernel="composite")
    by = {n.attrs.get("label"): n for n in nodes}
    assert by["bwd.l0.mb0.ln1.ln.weight.wgrad.sum"].attrs["tensor_size"] == 4_096
    assert by["fwd.l0.mb0.ln1.ln.mean"].attrs["tensor_size"] == 8_192


def test_the_emitters_reductions_are_the_gpu_models():
    import pytest
    ops = pytest.importorskip("astra_gpu_model.ops")
    from astra_workload_generators.llm.emit import REDUCTIONS
    assert set(REDUCTIONS) == set(ops.REDUCTION_OPS)
