"""Transformer Engine's ring attention (``AttnFuncWithCPAndKVP2P``, ``--cp-rotate ring``) merges the CP steps' partial
outputs (LSE and output corrections) and accumulates their dQ, dK, dV in memory-bound kernels of its own (TE v2.8
``attention/dot_product_attention/context_parallel.py``): their nodes and bytes by hand."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# 128 tokens over CP 2: each rank holds q = 64; 8 query heads and 4 KV heads of 32
LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
OUT = 1 * 8 * 64 * 32  # the rank's attention output: 16,384 elements
LSE = 1 * 8 * 64  # its log-sum-exp: 512 fp32 values
KV_STEP0, KV_STEP1 = 1 * 4 * 64 * 32, 1 * 4 * 32 * 32  # dK (or dV) of step 0 (64 keys) and step 1 (half: 32 keys)


def _nodes(tmp_path, name="t", **kw):
    cfg = LlmConfig(**{"dp": 1, "micro_batches": 1, "cp": 2, **kw})
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return {n.attrs.get("label") or n.name: n for n in read_rank_nodes(tmp_path / name, 0)}


def _size(node):
    return node.attrs["tensor_size"]


def test_bf16_output_corrections_and_gradient_accumulations_by_hand(tmp_path):
    nodes = _nodes(tmp_path)
    f = "fwd.l0.mb0.attn"
    # step 0: out = out_0 * exp(lse_0 - lse): reads out_0 (bf16) and two LSEs (fp32), writes out (bf16)
    assert nodes[f + ".cp0.out_correction"].name == "aten::mul"
    assert _size(nodes[f + ".cp0.out_correction"]) == OUT * 2 + 2 * LSE * 4 + OUT * 2  # 69,632
    # step 1: out.add_(out_1 * exp(lse_1 - lse)): reads out, out_1, two LSEs, writes out
    assert _size(nodes[f + ".cp1.out_correction"]) == 2 * OUT * 2 + 2 * LSE * 4 + OUT * 2  # 102,400
    # the LSE merge of step 1 (read both, write the running one); none at step 0
    assert _size(nodes[f + ".cp1.lse_correction"]) == 3 * LSE * 4  # 6,144
    assert f + ".cp0.lse_correction" not in nodes
    assert f + ".out_to_dtype" not in nodes and f + ".cp0.out_to_f32" not in nodes  # bf16: out.to(bf16) is a no-op
    # the corrections run after both steps' attention
    assert nodes[f + ".cp1"].id < nodes[f + ".cp0.out_correction"].id < nodes[f + ".cp1.out_correction"].id
    b = "bwd.l0.mb0.attn"
    # step 0 copies dQ (64 queries x 8 heads x 32) and dK, dV of the 64 own keys: read the source, write the buffer
    assert _size(nodes[b + ".cp0.dq_accumulate"]) == 2 * OUT * 2  # 65,536
    assert nodes[b + ".cp0.dk_accumulate"].name == "aten::copy_"
    assert _size(nodes[b + ".cp0.dk_accumulate"]) == _size(nodes[b + ".cp0.dv_accumulate"]) == 2 * KV_STEP0 * 2
    # step 1 adds: read both, write the buffer; dK/dV of the half chunk it attended (32 keys)
    assert nodes[b + ".cp1.dq_accumulate"].name == "aten::add_"
    assert _size(nodes[b + ".cp1.dq_accumulate"]) == 3 * OUT * 2  # 98,304
    assert _size(nodes[b + ".cp1.dk_accumulate"]) == 3 * KV_STEP1 * 2  # 24,576
    # the dK/dV ring sends after step 1's accumulation
    send = next(n for label, n in nodes.items() if label.startswith("cp_send.bwd.l0.mb0.dkv"))
    assert nodes[b + ".cp1.dv_accumulate"].id in send.data_deps


def test_fp8_attention_merges_and_accumulates_in_fp32(tmp_path):
    nodes = _nodes(tmp_path, attention_dtype="fp8", gemm_dtype="fp8", fp8_recipe="current")
    f = "fwd.l0.mb0.attn"
    # current scaling: each step's FP8 output (1 B) converted .to(float32) (4 B)
    assert _size(nodes[f + ".cp0.out_to_f32"]) == _size(nodes[f + ".cp1.out_to_f32"]) == OUT * (1 + 4)  # 81,920
    assert _size(nodes[f + ".cp0.out_correction"]) == OUT * 4 + 2 * LSE * 4 + OUT * 4  # 135,168
    assert _size(nodes[f + ".cp1.out_correction"]) == 3 * OUT * 4 + 2 * LSE * 4  # 200,704
    assert _size(nodes[f + ".out_to_dtype"]) == OUT * (2 + 4)  # out.to(bf16): 98,304
    b = "bwd.l0.mb0.attn"
    # fp32 buffers, every step added (TE zeroes the dK/dV buffer; dQ is overwritten: counted as an add)
    assert nodes[b + ".cp0.dq_accumulate"].name == "aten::add_"
    assert _size(nodes[b + ".cp0.dq_accumulate"]) == 3 * OUT * 4  # 196,608
    assert _size(nodes[b + ".cp1.dk_accumulate"]) == 3 * KV_STEP1 * 4  # 49,152
    assert _size(nodes["bwd.l0.mb0.attn.dq_to_dtype"]) == OUT * (2 + 4)
    assert _size(nodes["bwd.l0.mb0.attn.dkv_to_dtype"]) == 4 * 64 * (32 + 32) * (2 + 4)  # 98,304


def test_no_merges_without_context_parallelism_in_inference_or_under_pytorch_cp(tmp_path):
    def merges(nodes):
        return [label for label in nodes if ".attn." in label and ("correction" in label or "_accumulate" in label)]

    assert merges(_nodes(tmp_path, "cp1", cp=1)) == []
    assert merges(_nodes(tmp_path, "prefill", mode="prefill", prompt_len=128)) == []
    torch_cp = _nodes(tmp_path, "fsdp2", framework="fsdp2", zero=3)  # PyTorch's ring: its own merges (.torch_cp)
    assert not any("correction" in label for label in torch_cp if ".attn." in label)
