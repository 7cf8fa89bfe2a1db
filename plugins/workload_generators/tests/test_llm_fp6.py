"""``astra workload llm --gemm-dtype mxfp6``: MXFP6 linear-layer GEMMs (OCP MX v1.0: 6-bit E2M3 elements, an E8M0
scale per 32), stored 6 bits an element (four in three bytes along K), their input quantization, the weights'
bytes, and with the gpu model an MI355X step faster than MXFP8 by the GEMMs' share (MXFP6 runs at its FP4 rate)
and a refusal on a GPU without it. Every expected number is computed here by hand."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import read_metadata
from astra_sim.cli import main
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.blockscale import FORMATS
from astra_workload_generators.llm.memory import stage_memory
from astra_workload_generators.llm.model import layer_shards

LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
N, H = 2 * 128, 256  # tokens of one micro-batch (micro-batch size 2), hidden
FP6, E8M0 = "Tensor(float6_e2m3fn_x4)", "Tensor(c10::Float8_e8m0fnu)"


def _nodes(tmp_path, **kw):
    cfg = dict(micro_batch_size=2, dtype="bf16", gemm_dtype="mxfp6")
    cfg.update(kw)
    generate_llm(model_dims(**LLAMA), LlmConfig(**cfg), tmp_path / "t")
    return read_rank_nodes(tmp_path / "t", 0)


def _by_label(nodes, label):
    return next(n for n in nodes if n.attrs.get("label") == label)


def test_format_bytes():
    fmt = FORMATS["mxfp6"]
    assert (fmt.block, fmt.element_bits, fmt.packing) == (32, 6, 4)
    # 64 x 96: 6,144 elements at 6 bits = 4,608 bytes, and 64 x 3 scale bytes
    assert fmt.nbytes(64, 96) == 4608 + 192
    assert fmt.bytes_per_element() == (6 * 32 + 8, 8 * 32)  # 0.75 + 1/32 byte


def test_scaled_mm_node(tmp_path):
    nodes = _nodes(tmp_path)
    qkv = _by_label(nodes, "fwd.l0.mb0.qkv")
    n_qkv = H + 2 * 4 * 32
    assert qkv.name == "aten::_scaled_mm"
    assert qkv.inputs_shapes == f"[[{N}, {H // 4}], [{H // 4}, {n_qkv}], [{N}, {H // 32}], [{H // 32}, {n_qkv}]]"
    assert qkv.inputs_types == repr([FP6, FP6, E8M0, E8M0])
    assert qkv.attrs["num_ops"] == 2 * N * H * n_qkv
    # operands at 6 bits an element, one scale byte per 32, and a bf16 output
    operands = (N * H + H * n_qkv) * 6 // 8 + (N * H + H * n_qkv) // 32
    assert qkv.attrs["tensor_size"] == operands + 2 * N * n_qkv


def test_quantize_bytes(tmp_path):
    train = _by_label(_nodes(tmp_path / "a"), "fwd.l0.mb0.qkv.quantize")
    assert train.attrs["tensor_size"] == N * H * 2 + 2 * (N * H * 3 // 4 + N * H // 32)  # read bf16, two copies
    infer = _by_label(_nodes(tmp_path / "b", mode="prefill"), "fwd.l0.mb0.qkv.quantize")
    assert infer.attrs["tensor_size"] == N * H * 2 + N * H * 3 // 4 + N * H // 32


def test_weight_bytes_and_metadata(tmp_path):
    dims = model_dims(**LLAMA)
    linear = sum(layer_shards(dims, LlmConfig(mode="prefill"), False)[0] for _ in range(dims.layers))
    same, fp6 = (stage_memory(dims, LlmConfig(mode="prefill", gemm_dtype=g), 0) for g in ("same", "mxfp6"))
    assert same.weights - fp6.weights == 2 * linear - -(-linear * 25 // 32)  # 0.75 + 1/32 = 25/32 byte a weight
    generate_llm(dims, LlmConfig(gemm_dtype="mxfp6"), tmp_path / "m" / "t")
    assert read_metadata(next((tmp_path / "m").glob("t.class*.et")))["compute_dtype"] == "mxfp6"


# ---------------------------------------------------------------------- end to end, with the gpu model
BIG = ["--layers", "2", "--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--ffn-hidden", "28672",
       "--vocab", "1024", "--seq-len", "4096", "--dp", "8", "--micro-batch-size", "1", "--no-elementwise"]


def _run(tmp_path, gemm_dtype, platform):
    prefix = tmp_path / gemm_dtype / "w"
    assert main(["workload", "llm", *BIG, "--gemm-dtype", gemm_dtype, "-o", str(prefix)]) == 0
    out = tmp_path / gemm_dtype / "report.json"
    rc = main(["run", "--workload-configuration", str(prefix), "--platform", platform, "-q", "-o", str(out)])
    return rc, prefix, out


def test_end_to_end_mi355x_mxfp6_faster_than_mxfp8_by_the_gemm_share(tmp_path):
    pytest.importorskip("astra_gpu_model")
    from astra_gpu_model.gpu import load_gpu

    gemm = {}
    for gemm_dtype in ("mxfp8", "mxfp6"):
        rc, prefix, out = _run(tmp_path, gemm_dtype, "mi355x")
        assert rc == 0
        report = json.loads(out.read_text())
        gemm[gemm_dtype] = (report["breakdown"]["parts"]["compute:gemm"], report["summary"]["max_finish_ns"])
        scaled = sum(n.attrs["num_ops"] for n in read_rank_nodes(prefix, 0) if n.name == "aten::_scaled_mm")
    assert report["stats"]["throughput"]["dtype"] == "mxfp6"
    assert report["stats"]["throughput"]["peak_flop_per_s_per_gpu"] == pytest.approx(10066.3e12)
    # by hand: the scaled GEMMs' FLOPs at the same efficiency (MI355X: the FP8 GEMMs', an ASSUMPTION for both MX
    # formats) at 5,033.2 (FP8) against 10,066.3 TFLOP/s (AMD's MXFP6/MXFP4 rate); per-tile costs scale with the
    # rate too, so the saving is that or up to a quarter more
    mi = load_gpu("mi355x")
    eta = mi.gemm.compute_efficiency * mi.fp8_gemm_scale
    ideal_ns = scaled / (eta * 5033.2e12) * 1e9 - scaled / (eta * 10066.3e12) * 1e9
    saved_ns = gemm["mxfp8"][0] - gemm["mxfp6"][0]
    assert ideal_ns * 0.98 <= saved_ns <= 1.25 * ideal_ns
    assert gemm["mxfp6"][1] < gemm["mxfp8"][1] - 0.5 * saved_ns


def test_end_to_end_mxfp6_refused_on_h100(tmp_path, capsys):
    pytest.importorskip("astra_gpu_model")
    rc, _, _ = _run(tmp_path, "mxfp6", "hgx-h100")
    err = capsys.readouterr().err
    assert rc != 0
    line = next(x for x in err.splitlines() if "error" in x)
    assert "H100-SXM5-80GB has no mxfp6 GEMMs" in line and "--gemm-dtype mxfp6" in line
