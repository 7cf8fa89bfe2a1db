"""``astra workload llm --gemm-dtype fp4 | mxfp8 | mxfp4``: block-scaled linear-layer GEMMs, the quantization of
their inputs, the weights' bytes, and (with the gpu model) a B200 step that is faster than FP8 by the linear
GEMMs' share, and a refusal on a GPU without them. Every expected number is computed here by hand."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.memory import stage_memory
from astra_workload_generators.llm.model import layer_shards

LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
N, H = 2 * 128, 256  # tokens of one micro-batch (micro-batch size 2), hidden


def _nodes(tmp_path, gemm_dtype, **kw):
    cfg = dict(micro_batch_size=2, dtype="bf16", gemm_dtype=gemm_dtype)
    cfg.update(kw)
    generate_llm(model_dims(**LLAMA), LlmConfig(**cfg), tmp_path / gemm_dtype / "t")
    return read_rank_nodes(tmp_path / gemm_dtype / "t", 0)


def _by_label(nodes, label):
    return next(n for n in nodes if n.attrs.get("label") == label)


def test_gemm_dtype_choices():
    cfg = LlmConfig(gemm_dtype="fp6")
    with pytest.raises(ConfigError, match="--gemm-dtype must be one of same, fp8, fp4, mxfp8, mxfp6, mxfp4"):
        generate_llm(model_dims(**LLAMA), cfg, "/nonexistent/never-written", write=False)


@pytest.mark.parametrize("gemm_dtype, elem_type, scale_type, block, packed", [
    ("fp4", "Tensor(c10::Float4_e2m1fn_x2)", "Tensor(c10::Float8_e4m3fn)", 16, 2),
    ("mxfp8", "Tensor(c10::Float8_e4m3fn)", "Tensor(c10::Float8_e8m0fnu)", 32, 1),
    ("mxfp4", "Tensor(c10::Float4_e2m1fn_x2)", "Tensor(c10::Float8_e8m0fnu)", 32, 2),
])
def test_scaled_mm_node(tmp_path, gemm_dtype, elem_type, scale_type, block, packed):
    nodes = _nodes(tmp_path, gemm_dtype)
    qkv = _by_label(nodes, "fwd.l0.mb0.qkv")
    n_qkv = H + 2 * 4 * 32  # 8 query heads of 32 + 2 x 4 KV heads of 32
    assert qkv.name == "aten::_scaled_mm"
    assert qkv.inputs_shapes == f"[[{N}, {H // packed}], [{H // packed}, {n_qkv}], [{N}, {H // block}], " \
                                f"[{H // block}, {n_qkv}]]"
    assert qkv.inputs_types == repr([elem_type, elem_type, scale_type, scale_type])
    assert qkv.attrs["num_ops"] == 2 * N * H * n_qkv
    # operands (elements at 8 / packed bits, one scale byte per block) + a bf16 output
    operands = (N * H + H * n_qkv) // packed + (N * H + H * n_qkv) // block
    assert qkv.attrs["tensor_size"] == operands + 2 * N * n_qkv
    # the LM head and attention stay in --dtype; no FP8 casts, amax reductions or updates
    assert _by_label(nodes, "fwd.head.mb0").name == "aten::mm"
    names = Counter(n.name for n in nodes)
    assert not any(name.startswith("transformer_engine::") and name != "transformer_engine::quantize"
                   for name in names)
    assert not any(n.type == T.COMM_COLL_NODE and "amax" in n.name for n in nodes)


@pytest.mark.parametrize("gemm_dtype, reads, per_elem", [("fp4", 2, 0.5 + 1 / 16), ("mxfp8", 1, 1 + 1 / 32),
                                                          ("mxfp4", 1, 0.5 + 1 / 32)])
def test_quantize_bytes(tmp_path, gemm_dtype, reads, per_elem):
    """Training: the input read in bf16 (NVFP4: twice, its amax first), written twice (row- and column-wise) with
    one scale byte per block; forward and data-gradient GEMMs quantize, weight-gradient GEMMs do not."""
    nodes = _nodes(tmp_path, gemm_dtype)
    q = _by_label(nodes, "fwd.l0.mb0.qkv.quantize")
    assert q.name == "transformer_engine::quantize" and q.attrs["num_ops"] == 0
    assert q.attrs["tensor_size"] == reads * N * H * 2 + 2 * round(N * H * per_elem)
    fc2 = _by_label(nodes, "fwd.l0.mb0.fc2.quantize")  # the SwiGLU output, N x ffn
    assert fc2.attrs["tensor_size"] == reads * N * 512 * 2 + 2 * round(N * 512 * per_elem)
    dgrad = _by_label(nodes, "bwd.l0.mb0.fc2.dgrad.quantize")  # the output gradient, N x hidden
    assert dgrad.attrs["tensor_size"] == reads * N * H * 2 + 2 * round(N * H * per_elem)
    labels = {n.attrs.get("label") for n in nodes}
    assert not any(label and label.endswith("wgrad.quantize") for label in labels)
    # the quantization precedes its GEMM on the compute chain
    gemm = _by_label(nodes, "fwd.l0.mb0.qkv")
    assert q.id in gemm.data_deps
    # per layer: 4 forward (qkv, proj, fc1, fc2) + 4 data-gradient quantizations, and the 4 bf16 weights' once a
    # step (test_small_weight_quantize.py)
    assert Counter(n.name for n in nodes)["transformer_engine::quantize"] == (8 + 4) * LLAMA["layers"]


def test_tp_overlap_chunks_quantize_their_rows(tmp_path):
    """--tp-comm-overlap: each GEMM chunk quantizes its own TP row chunk as it arrives; weight gradients none."""
    nodes = _nodes(tmp_path, "mxfp8", tp=2, sequence_parallel=True, tp_comm_overlap=True)
    q = _by_label(nodes, "fwd.l0.mb0.qkv.c1.quantize")
    assert q.attrs["tensor_size"] == (N // 2) * H * 2 + 2 * ((N // 2) * H + (N // 2) * (H // 32))
    labels = [n.attrs.get("label") or "" for n in nodes if n.name == "transformer_engine::quantize"]
    assert labels and not any(".wgrad" in label for label in labels)


def test_inference_quantizes_once(tmp_path):
    nodes = _nodes(tmp_path, "mxfp4", mode="prefill")
    q = _by_label(nodes, "fwd.l0.mb0.qkv.quantize")
    assert q.attrs["tensor_size"] == N * H * 2 + N * H // 2 + N * H // 32


def test_fp8_and_same_have_no_quantize(tmp_path):
    for gemm_dtype in ("same", "fp8"):
        assert not any(n.name == "transformer_engine::quantize" for n in _nodes(tmp_path, gemm_dtype))


def _linear_params(dims, cfg):
    return sum(layer_shards(dims, cfg, False)[0] for _ in range(dims.layers))


def test_weight_bytes():
    dims = model_dims(**LLAMA)
    # inference: the linear layers' weights held in the format only (NVFP4: 9/16 byte per weight, bf16: 2)
    same, fp4 = (stage_memory(dims, LlmConfig(mode="prefill", gemm_dtype=g), 0) for g in ("same", "fp4"))
    linear = _linear_params(dims, LlmConfig(mode="prefill"))
    assert linear == 2 * (256 * (256 + 2 * 128) + 256 * 256 + 3 * 256 * 512)  # qkv, proj, gated ffn (3 matrices)
    assert same.weights - fp4.weights == 2 * linear - -(-linear * 9 // 16)
    mx8 = stage_memory(dims, LlmConfig(mode="prefill", gemm_dtype="mxfp8"), 0)
    assert same.weights - mx8.weights == 2 * linear - -(-linear * 33 // 32)
    # training (Megatron): the --dtype weights plus two quantized copies (row- and column-wise)
    same, mx4 = (stage_memory(dims, LlmConfig(gemm_dtype=g), 0) for g in ("same", "mxfp4"))
    assert mx4.weights - same.weights == 2 * -(-linear * 17 // 32)


def test_compute_dtype_metadata(tmp_path):
    from astra_sim.chakra import read_metadata

    for gemm_dtype, name in (("fp4", "nvfp4"), ("mxfp8", "mxfp8"), ("mxfp4", "mxfp4"), ("fp8", "fp8"),
                             ("same", "bf16")):
        generate_llm(model_dims(**LLAMA), LlmConfig(gemm_dtype=gemm_dtype), tmp_path / gemm_dtype / "t")
        trace = next((tmp_path / gemm_dtype).glob("t.class*.et"))
        assert read_metadata(trace)["compute_dtype"] == name


# ---------------------------------------------------------------------- end to end, with the gpu model
#: a model whose linear GEMMs are large and compute bound on a B200, so their time is FLOPs / rate
BIG = ["--layers", "2", "--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--ffn-hidden", "28672",
       "--vocab", "1024", "--seq-len", "4096", "--dp", "8", "--micro-batch-size", "1", "--no-elementwise"]


def _run(tmp_path, gemm_dtype, platform="hgx-b200"):
    prefix = tmp_path / gemm_dtype / "w"
    assert main(["workload", "llm", *BIG, "--gemm-dtype", gemm_dtype, "-o", str(prefix)]) == 0
    out = tmp_path / gemm_dtype / "report.json"
    rc = main(["run", "--workload-configuration", str(prefix), "--platform", platform, "-q", "-o", str(out)])
    return rc, prefix, out


def test_end_to_end_fp4_faster_than_fp8_by_the_gemm_share(tmp_path):
    pytest.importorskip("astra_gpu_model")
    from astra_gpu_model.gpu import load_gpu

    gemm = {}
    for gemm_dtype in ("fp8", "fp4"):
        rc, prefix, out = _run(tmp_path, gemm_dtype)
        assert rc == 0
        report = json.loads(out.read_text())
        gemm[gemm_dtype] = (report["breakdown"]["parts"]["compute:gemm"], report["summary"]["max_finish_ns"])
        nodes = read_rank_nodes(prefix, 0)
        scaled = sum(n.attrs["num_ops"] for n in nodes if n.name == "aten::_scaled_mm")
    assert report["stats"]["throughput"]["dtype"] == "nvfp4"
    assert report["stats"]["throughput"]["peak_flop_per_s_per_gpu"] == 9000e12  # the datasheet's dense FP4
    # by hand: the linear GEMMs' FLOPs at the FP8 efficiency (0.8175 x 0.973 = 0.795) of 4,500 TFLOP/s against the
    # FP4 one (0.8175 x 0.7544 = 0.617, fitted to pytorch/ao#2427's B200 NVFP4 matmuls) of 9,000 (the datasheet's
    # dense FP8 and FP4); the model's per-tile costs (K overhead, wave quantisation) scale with the rate too, so the
    # saving is that or up to a quarter more
    b200 = load_gpu("b200")
    eta8 = b200.gemm.compute_efficiency * b200.fp8_gemm_scale
    eta4 = b200.gemm.compute_efficiency * b200.fp4_gemm_scale
    ideal_ns = scaled / (eta8 * 4500e12) * 1e9 - scaled / (eta4 * 9000e12) * 1e9
    saved_ns = gemm["fp8"][0] - gemm["fp4"][0]
    assert ideal_ns <= saved_ns <= 1.25 * ideal_ns
    assert saved_ns <= gemm["fp8"][0] / 2  # FP4 saves at most half of what the GEMMs took in FP8
    assert gemm["fp4"][1] < gemm["fp8"][1] - 0.5 * saved_ns  # and the step is faster by most of it


def test_end_to_end_fp4_refused_on_h100(tmp_path, capsys):
    pytest.importorskip("astra_gpu_model")
    rc, _, _ = _run(tmp_path, "fp4", platform="hgx-h100")
    err = capsys.readouterr().err
    assert rc != 0
    line = next(x for x in err.splitlines() if "error" in x)
    assert "H100-SXM5-80GB has no nvfp4 GEMMs" in line and "--gemm-dtype fp4" in line
