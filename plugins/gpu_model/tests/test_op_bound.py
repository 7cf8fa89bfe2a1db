"""The gpu model's public accessors for the energy plugin: ``node_op`` and ``op_bound`` (what bounds an op's time)."""

from __future__ import annotations

import pytest

from astra_sim.chakra import make_node, types as T
from astra_gpu_model.gemm import gemm_time_s
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import Op


@pytest.fixture(scope="module")
def h200():
    return GpuComputeModel(gpu="H200-SXM")


def _gemm(m, n=8192, k=8192, dtype="bf16"):
    return Op("gemm", "aten::mm", dtype, m=m, n=n, k=k)


def test_decode_gemm_streams_its_weights(h200):
    """M 1 x 8192 x 8192 bf16: its HBM time (the 128 MiB of weights, plus the vectors and split-K partials) bounds it;
    its FLOPs are 2 M N K, and its time is op_seconds' (the same configuration)."""
    bound = h200.op_bound(_gemm(1))
    assert bound.bound == "memory" and bound.memory_s > bound.compute_s
    assert bound.flops == 2.0 * 8192 * 8192
    params = h200.gpu.gemm_params("bf16")
    assert bound.memory_s == pytest.approx(bound.hbm_bytes / (params.hbm_efficiency * h200.gpu.hbm_bytes_per_s))
    seconds, info = gemm_time_s(1, 8192, 8192, 1, peak_flops=h200.gpu.peak_flops("bf16") * h200._sustained_factor("bf16"),
                                sm_count=h200.gpu.sm_count, hbm_bytes_per_s=h200.gpu.hbm_bytes_per_s, in_bytes=2,
                                out_bytes=2, params=params, tiles=h200.gpu.gemm_tiles,
                                schedule=h200.gpu.gemm_schedule, detail=True)
    assert h200.op_seconds(_gemm(1)) == seconds
    assert (bound.compute_s, bound.memory_s) == (info["compute_s"], info["memory_s"])
    split = info["split_k"]  # the model splits K here: each split writes and reads back an fp32 partial M x N
    assert bound.hbm_bytes == pytest.approx((1 * 8192 + 8192 * 8192) * 2 + 8192 * 2 + 8.0 * split * 8192, rel=1e-9)


def test_large_gemm_is_compute_bound_and_memory_op_memory_bound(h200):
    assert h200.op_bound(_gemm(4096)).bound == "compute"
    add = Op("memory", "add", "bf16", nbytes=3 * 2 ** 21)
    bound = h200.op_bound(add)
    assert bound.bound == "memory" and bound.hbm_bytes == 3 * 2 ** 21 and bound.flops == 0.0
    # two experts of 8 tokens: no split-K in the grouped kernel, so 64 full-K tiles on 132 SMs outlast the stream
    grouped = h200.op_bound(_gemm(16, 4096, 4096), grouped=("m", (8, 8)))
    assert grouped.bound == "compute" and grouped.hbm_bytes == pytest.approx(2 * (8 * 4096 * 2 + 4096 * 4096 * 2 + 8 * 4096 * 2))
    assert h200.op_bound(Op("none", "aten::view")) is None
    assert h200.op_bound(Op("attention", "aten::_scaled_dot_product_flash_attention", flops=1e9, nbytes=1e6)) is None


def test_clock_ratio_moves_the_tensor_time_only(h200):
    """Under a power limit's clock (set_clock_ratios) the tensor time nearly doubles at half the clock (the model may
    then pick another split of K, whose partials add HBM bytes)."""
    model = GpuComputeModel(gpu="H200-SXM")
    before = model.op_bound(_gemm(4096))
    model.set_clock_ratios({"gemm": 0.5})
    after = model.op_bound(_gemm(4096))
    assert after.bound == before.bound == "compute" and 1.9 * before.compute_s < after.compute_s <= 2 * before.compute_s


def test_node_op_is_the_op_the_node_is_timed_by(h200):
    node = make_node(1, "aten::mm", T.COMP_NODE, attrs={"inputs.shapes": "[[16, 8192], [8192, 8192]]",
                                                         "inputs.types": "['Tensor(c10::BFloat16)', "
                                                                         "'Tensor(c10::BFloat16)']"})
    op = h200.node_op(node, 0)
    assert (op.kind, op.m, op.n, op.k) == ("gemm", 16, 8192, 8192)
    assert h200.node_op(make_node(2, "some_kernel", T.COMP_NODE), 0) is None
