"""Decode attention's measured floor and rate, and the Hopper memory-bound kernel floors (issue 36)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from astra_gpu_model.attention import decode_params
from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GpuComputeModel, memory_op_floors
from astra_gpu_model.ops import classify

FIT = Path(__file__).resolve().parents[1] / "fit"
SDPA = "aten::_scaled_dot_product_flash_attention"


def _decode_op(batch, kv_len, q_heads=32, kv_heads=8, head_dim=128, queries=1):
    shapes = (f"[[{batch}, {q_heads}, {queries}, {head_dim}], [{batch}, {kv_heads}, {kv_len}, {head_dim}], "
              f"[{batch}, {kv_heads}, {kv_len}, {head_dim}]]")
    return classify(SDPA, shapes, None, "[[], [], [], 0.0, False, False]", "bf16", False)


def test_decode_attention_a100_by_hand():
    # fitted on Vidur's FlashInfer rows: floor 14.821 us, 78.73 % of 2,039 GB/s = 1,605.3 GB/s.
    # batch 8, 416 keys, 32/8 heads of 128, bf16: bytes = 2 x 8 x 128 x (2 x 32 + 2 x 8 x 416) = 2,048 x 6,720
    # = 13,762,560 -> 14.821 + 13,762,560 / 1,605,324.7 B/us = 14.821 + 8.573 = 23.394 us (before: 2.3445 +
    # 13.76 MB at 74.54 % of HBM = 2.3445 + 9.055 = 11.40 us; Vidur measured 21 us at 8 sequences of 448 keys)
    model = GpuComputeModel(gpu="A100-SXM4-80GB")
    op = _decode_op(8, 416)
    assert op.nbytes == 13_762_560 and op.seq_q == 1
    floor_s, rate = decode_params(model.gpu)
    assert floor_s == pytest.approx(14.821e-6) and rate == pytest.approx(0.7873 * 2039e9)
    assert model.op_seconds(op) * 1e6 == pytest.approx(14.821 + 13_762_560 / (0.7873 * 2039e3), rel=1e-9)
    assert model.op_seconds(op) * 1e6 == pytest.approx(23.394, abs=0.001)


def test_decode_attention_h100_by_hand_and_prefill_unchanged():
    # H100 SXM (FA2 paged decode, onnxruntime #21414): floor 16.502 us, 80.13 % of 3,352 GB/s.
    # 70B at TP 4: 16/2 heads, batch 24, 500 keys: bytes = 2 x 24 x 128 x (2 x 16 + 2 x 2 x 500) = 12,484,608
    # -> 16.502 + 12,484,608 / (0.8013 x 3,352,000 B/us) = 16.502 + 4.648 = 21.15 us
    model = GpuComputeModel(gpu="H100-SXM5-80GB")
    hbm = load_gpu("H100-SXM5-80GB").hbm_bytes_per_s
    op = _decode_op(24, 500, 16, 2)
    assert op.nbytes == 12_484_608
    assert model.op_seconds(op) == pytest.approx(16.502e-6 + 12_484_608 / (0.8013 * hbm), rel=1e-9)
    # two queries a sequence (not a decode step): the general attention model, no decode floor
    two = _decode_op(24, 500, 16, 2, queries=2)
    assert model.op_seconds(two) < 16.502e-6


def test_decode_attention_elsewhere_unchanged():
    # no measurement on Blackwell: the general model (launch + max(compute, bytes at hbm_efficiency x HBM))
    assert decode_params(load_gpu("B200")) is None
    model = GpuComputeModel(gpu="B200")
    assert model.op_seconds(_decode_op(8, 416)) < 10e-6


def test_decode_fit_reproduces_its_json(tmp_path):
    # the shipped fit is what the script computes from the shipped rows
    out = tmp_path / "fit.json"
    subprocess.run([sys.executable, str(FIT / "fit_decode_attention.py"), "--out", str(out)], check=True,
                   capture_output=True)
    shipped = json.loads((FIT.parent / "src" / "astra_gpu_model" / "data" / "decode_attention_fit.json").read_text())
    assert json.loads(out.read_text())["gpus"] == shipped["gpus"]


def test_hopper_memory_floor_by_hand():
    # H200 in a CUDA graph, 16 x 4096 bf16 add: 1.328 us measured. Floor = 1.328 - 0.376 (the graph's kernel gap)
    # - 393,216 B / the add's rate (0.089 us) = 0.863 us; the shipped median over three hidden sizes is 0.793 us.
    floors = memory_op_floors()
    assert floors["floors_us"]["add"] == pytest.approx(0.793, abs=0.001)
    assert floors["floors_us"]["native_layer_norm"] == pytest.approx(6.92, abs=0.005)
    h100 = GpuComputeModel(gpu="H100-SXM5-80GB")
    add = classify("aten::add", "[[16, 4096], [16, 4096]]", None, "", "bf16", False)
    rate = h100._memory_rate("add", h100.gpu.gemm.hbm_efficiency * h100.gpu.hbm_bytes_per_s)
    # H100: floor 0.793 us (was launch_us 4.3348) + 393,216 B at its rate
    assert h100.op_seconds(add) == pytest.approx(0.793e-6 + add.nbytes / rate, rel=1e-6)
    # an op with no measured row: the median floor
    div = classify("aten::div_", "[[16, 4096], [16, 1]]", None, "", "bf16", False)
    assert h100._memory_floor("div_", 1.0) == pytest.approx(floors["default_us"] * 1e-6)
    assert h100.op_seconds(div) == pytest.approx(floors["default_us"] * 1e-6 + div.nbytes
                                                 / h100._memory_rate("div_", h100.gpu.gemm.hbm_efficiency
                                                                     * h100.gpu.hbm_bytes_per_s), rel=1e-6)


def test_a100_memory_floor_unchanged():
    # not Hopper: the GEMM fit's launch_us (2.344505 us) as before
    a100 = GpuComputeModel(gpu="A100-SXM4-80GB")
    add = classify("aten::add", "[[16, 4096], [16, 4096]]", None, "", "bf16", False)
    rate = a100._memory_rate("add", a100.gpu.gemm.hbm_efficiency * a100.gpu.hbm_bytes_per_s)
    assert a100.op_seconds(add) == pytest.approx(2.344505e-6 + add.nbytes / rate, rel=1e-6)


def test_large_memory_op_moves_by_the_floor_only():
    # a training-sized add (16384 x 4096 bf16, 402.7 MB moved) changes by the floor difference alone on H100:
    # 4.3348 - 0.793 = 3.542 us of about 100 us
    h100 = GpuComputeModel(gpu="H100-SXM5-80GB")
    add = classify("aten::add", "[[16384, 4096], [16384, 4096]]", None, "", "bf16", False)
    rate = h100._memory_rate("add", h100.gpu.gemm.hbm_efficiency * h100.gpu.hbm_bytes_per_s)
    before = h100.gpu.gemm.launch_us * 1e-6 + add.nbytes / rate
    assert before - h100.op_seconds(add) == pytest.approx((h100.gpu.gemm.launch_us - 0.793) * 1e-6, rel=1e-6)


def test_memops_floor_fit_reproduces_its_json(tmp_path):
    # the shipped floors are what the script computes from the shipped H200 measurements
    out = tmp_path / "floor.json"
    subprocess.run([sys.executable, str(FIT / "fit_memops_floor.py"), "--out", str(out)], check=True,
                   capture_output=True, cwd=FIT)
    shipped = json.loads((FIT.parent / "src" / "astra_gpu_model" / "data" / "memops_floor.json").read_text())
    got = json.loads(out.read_text())
    assert got["floors_us"] == shipped["floors_us"] and got["default_us"] == shipped["default_us"]
