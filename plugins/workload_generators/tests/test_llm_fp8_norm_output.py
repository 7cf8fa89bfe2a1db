"""Transformer Engine's norm before the QKV and dense FC1 GEMMs (``LayerNormLinear``) writes their FP8 input itself
under delayed scaling (1 B an element, listed as the norm's last argument); under current scaling it writes
``--dtype`` with the amax fused and the cast reads it once (TE v2.7+); other frameworks' norms are unchanged."""

from __future__ import annotations

from astra_gpu_model.ops import classify
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
             rms_norm=True)
N, H = 128, 256  # tokens (one sequence of 128, TP 1) and hidden width
BF16_NORM = 2 * N * H * 2 + H * 2  # RMSNorm: read x and the weight, write the output, all bf16
FP8_NORM = N * H * 2 + H * 2 + N * H  # the same with the output written as FP8


def _nodes(tmp_path, name, **cfg):
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, micro_batches=1, gemm_dtype="fp8", **cfg), tmp_path / name)
    return {n.attrs["label"]: n for n in read_rank_nodes(tmp_path / name, 0) if "label" in n.attrs}


def _size(nodes, label):
    return nodes[label].attrs["tensor_size"]


def test_delayed_scaling_norms_write_the_fp8_gemm_input(tmp_path):
    nodes = _nodes(tmp_path, "delayed")
    for label in ("fwd.l0.mb0.ln1.ln", "fwd.l0.mb0.ln2.ln"):
        assert _size(nodes, label) == FP8_NORM
        node = nodes[label]  # the gpu model counts the same bytes from the node's shapes and types
        assert classify(node.name, node.inputs_shapes, node.inputs_types, "").nbytes == FP8_NORM
    assert _size(nodes, "fwd.final_norm.mb0.ln") == BF16_NORM  # (before the bf16 LM head)
    assert not [label for label in nodes if label.endswith(("qkv.fp8_cast", "fc1.fp8_cast"))]


def test_current_scaling_norms_write_bf16_and_their_cast_reads_it_once(tmp_path):
    nodes = _nodes(tmp_path, "current", fp8_recipe="current")
    assert _size(nodes, "fwd.l0.mb0.ln1.ln") == _size(nodes, "fwd.l0.mb0.ln2.ln") == BF16_NORM
    assert _size(nodes, "fwd.l0.mb0.qkv.fp8_cast") == N * H * (2 + 2)  # read once; FP8 + its transpose (Hopper)


def test_another_frameworks_norm_keeps_its_bf16_output(tmp_path):
    nodes = _nodes(tmp_path, "fsdp2", zero=3)
    assert _size(nodes, "fwd.l0.mb0.ln1.ln") == _size(nodes, "fwd.l0.mb0.ln2.ln") == BF16_NORM
