"""Transformer Engine quantizes a linear layer's weight held in --dtype once a step, on the first micro-batch's
forward (Megatron-Core passes ``is_first_microbatch``; TE caches the quantized workspace for the others): one
memory-bound node before each first-micro-batch forward GEMM, its bytes those of an input's cast of the same shape.
Nothing with --fp8-params (FP8 weights), in inference, or outside a Megatron step (FSDP2/torchtitan: torchao casts
each weight at every forward, --fp8-recipe tensorwise)."""

from __future__ import annotations

from collections import Counter

from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

#: one layer, hidden 256, 8 heads of 32 with 4 KV heads (QKV 256 x 512), SwiGLU FFN 512 (FC1 256 x 1024)
LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
#: the four linear weights (rows = output features, cols = K): QKV, projection, FC1 (gate and up), FC2
WEIGHTS = {"qkv": (512, 256), "proj": (256, 256), "fc1": (1024, 256), "fc2": (256, 512)}


def _weight_nodes(tmp_path, name, **kw):
    cfg = dict(dp=2, micro_batches=3, zero=1)
    cfg.update(kw)
    generate_llm(model_dims(**LLAMA), LlmConfig(**cfg), tmp_path / name)
    nodes = read_rank_nodes(tmp_path / name, 0)
    return nodes, {n.attrs["label"]: n for n in nodes if ".weight." in n.attrs.get("label", "")}


def test_fp8_delayed_casts_each_weight_once_a_step_before_its_first_gemm(tmp_path):
    nodes, weights = _weight_nodes(tmp_path, "delayed", gemm_dtype="fp8")
    # one cast + transpose per weight, on micro-batch 0 only (3 micro-batches)
    assert sorted(weights) == sorted(f"fwd.l0.mb0.{w}.weight.fp8_cast" for w in WEIGHTS)
    for w, (rows, cols) in WEIGHTS.items():
        node = weights[f"fwd.l0.mb0.{w}.weight.fp8_cast"]
        assert node.name == "transformer_engine::cast_transpose" and node.attrs["num_ops"] == 0
        # bf16 read once (delayed scaling), FP8 and its transpose written: 2 + 1 + 1 bytes per element
        assert node.attrs["tensor_size"] == rows * cols * (2 + 1 + 1)
        gemm = next(n for n in nodes if n.attrs.get("label") == f"fwd.l0.mb0.{w}")
        assert node.id in gemm.data_deps  # the GEMM waits for its weight
    assert weights["fwd.l0.mb0.qkv.weight.fp8_cast"].attrs["tensor_size"] == 524_288  # 512 x 256 x 4


def test_fp8_current_scaling_reads_the_weight_twice_and_fp8_params_need_no_cast(tmp_path):
    _, current = _weight_nodes(tmp_path, "current", gemm_dtype="fp8", fp8_recipe="current")
    # its own amax first: 2 x 2 + 1 + 1 bytes per element; FC2's 256 x 512 weight: 786,432 bytes
    assert current["fwd.l0.mb0.fc2.weight.fp8_cast"].attrs["tensor_size"] == 256 * 512 * 6 == 786_432
    _, held = _weight_nodes(tmp_path, "held", gemm_dtype="fp8", fp8_recipe="current", fp8_params=True)
    assert held == {}


def test_nvfp4_quantizes_each_weight_row_and_column_wise(tmp_path):
    _, weights = _weight_nodes(tmp_path, "fp4", gemm_dtype="fp4")
    assert len(weights) == 4
    node = weights["fwd.l0.mb0.fc1.weight.quantize"]
    assert node.name == "transformer_engine::quantize"
    # 1024 x 256 bf16, read twice (the per-tensor amax, then the quantization), written twice (row- and column-
    # wise) as E2M1 pairs (131,072 bytes) with one E4M3 scale per 16 (16,384): 1,048,576 + 2 x 147,456
    assert node.attrs["tensor_size"] == 2 * 2 * 1024 * 256 + 2 * (1024 * 256 // 2 + 1024 * 256 // 16) == 1_343_488


def test_mxfp8_weights_held_in_mxfp8_are_not_quantized_again(tmp_path):
    _, weights = _weight_nodes(tmp_path, "mx", gemm_dtype="mxfp8")
    # read once, written twice as E4M3 with one E8M0 scale per 32: 2 + 2 x (1 + 1/32) bytes per element
    assert weights["fwd.l0.mb0.proj.weight.quantize"].attrs["tensor_size"] == 256 * 256 * 2 + 2 * (256 * 256 + 2048)
    _, held = _weight_nodes(tmp_path, "mxheld", gemm_dtype="mxfp8", fp8_params=True)
    assert held == {}


def test_tp_overlap_chunks_share_one_weight_cast(tmp_path):
    _, weights = _weight_nodes(tmp_path, "overlap", gemm_dtype="fp8", tp=2, dp=1, sequence_parallel=True,
                               tp_comm_overlap=True)
    # the QKV GEMM runs in two TP chunks (.c0, .c1): its weight (this TP rank's 256 x 256 half) is cast once
    assert Counter(label.split(".")[3] for label in weights) == {w: 1 for w in WEIGHTS}
    assert weights["fwd.l0.mb0.qkv.weight.fp8_cast"].attrs["tensor_size"] == 256 * 256 * 4


def test_no_weight_quantization_in_inference_or_outside_megatron(tmp_path):
    assert _weight_nodes(tmp_path, "bf16")[1] == {}
    # an FSDP2 step under TE's recipes: no TE weight workspace (torchao's own casts: test_llm_fp8_tensorwise.py)
    assert _weight_nodes(tmp_path, "fsdp2", gemm_dtype="fp8", zero=3, framework="fsdp2", fp8_recipe="delayed")[1] == {}
    assert _weight_nodes(tmp_path, "zero3", gemm_dtype="fp8", zero=3, fp8_recipe="current")[1] == {}
    # its default, torchao's tensorwise: each weight cast at every micro-batch's forward (3 here), 6 B an element
    _, torchao = _weight_nodes(tmp_path, "tensorwise", gemm_dtype="fp8", zero=3)
    assert sorted(torchao) == sorted(f"fwd.l0.mb{mb}.{w}.weight.fp8_cast" for mb in range(3) for w in WEIGHTS)
    assert {n.attrs["tensor_size"] for label, n in torchao.items() if ".qkv." in label} == {512 * 256 * 6}
    assert _weight_nodes(tmp_path, "noew", gemm_dtype="fp8", elementwise=False)[1] == {}
    assert _weight_nodes(tmp_path, "prefill", gemm_dtype="fp4", mode="prefill", dp=1, zero=0,
                         micro_batches=1)[1] == {}
