"""A Megatron training step's weight-gradient GEMMs write their parameter's ``main_grad`` (gradient-accumulation
fusion): Transformer Engine's linears write it on the first micro-batch and accumulate into it after (C read and
written, cuBLAS beta = 1), Megatron's LM head accumulates on every one; other frameworks' steps are unchanged."""

from __future__ import annotations

from astra_gpu_model.ops import classify
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1024, seq_len=128, gated=True,
             rms_norm=True)
H, N, QKV, V = 256, 128, 512, 1024  # hidden, tokens, QKV width, vocabulary: the QKV wgrad is [256, 128] x [128, 512]


def _wgrads(tmp_path, name, **cfg):
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, micro_batches=2, **cfg), tmp_path / name)
    return {n.attrs["label"]: n for n in read_rank_nodes(tmp_path / name, 0)
            if n.attrs.get("label", "").endswith(".wgrad") and n.name.startswith("aten::")}


def _out_bytes(node):
    return classify(node.name, node.inputs_shapes, node.inputs_types, "").out_bytes


def test_te_linears_write_main_grad_then_accumulate_into_it(tmp_path):
    nodes = _wgrads(tmp_path, "bf16")
    first, later = nodes["bwd.l0.mb0.qkv.wgrad"], nodes["bwd.l0.mb1.qkv.wgrad"]
    assert (first.name, _out_bytes(first)) == ("aten::mm", 4)  # fp32 written, not read
    assert first.attrs["tensor_size"] == (H * N + N * QKV) * 2 + H * QKV * 4
    assert (later.name, _out_bytes(later)) == ("aten::addmm", 8)  # fp32 read and written
    assert later.attrs["tensor_size"] == (H * N + N * QKV) * 2 + H * QKV * 8
    assert later.inputs_shapes == f"[[{H}, {QKV}], [{H}, {N}], [{N}, {QKV}]]"
    # Megatron's own LM head: wgrad_gemm_accum_fp32 on every micro-batch
    head = nodes["bwd.head.mb0.wgrad"]
    assert (head.name, _out_bytes(head)) == ("aten::addmm", 8)
    assert head.attrs["tensor_size"] == (H * N + N * V) * 2 + H * V * 8


def test_fp8_and_bf16_buffers_and_recompute(tmp_path):
    fp8 = _wgrads(tmp_path, "fp8", gemm_dtype="fp8")
    assert [_out_bytes(fp8[f"bwd.l0.mb{k}.qkv.wgrad"]) for k in (0, 1)] == [4, 8]
    assert fp8["bwd.l0.mb1.qkv.wgrad"].attrs["tensor_size"] == H * N + N * QKV + H * QKV * 8  # 1-byte operands
    same = _wgrads(tmp_path, "same", grad_buffer="same")  # a bf16 main_grad: 2 B written, 2 + 2 accumulating
    assert [_out_bytes(same[f"bwd.l0.mb{k}.qkv.wgrad"]) for k in (0, 1)] == [2, 4]
    # full recomputation: the backward's forward passed is_first_microbatch False, so micro-batch 0 accumulates too
    recompute = _wgrads(tmp_path, "recompute", recompute=True)
    assert recompute["bwd.l0.mb0.qkv.wgrad"].name == "aten::addmm"


def test_another_frameworks_wgrads_are_unchanged(tmp_path):
    nodes = _wgrads(tmp_path, "fsdp2", zero=3)
    qkv = nodes["bwd.l0.mb1.qkv.wgrad"]
    assert (qkv.name, qkv.inputs_shapes, _out_bytes(qkv)) == ("aten::mm", f"[[{H}, {N}], [{N}, {QKV}]]", 2)

