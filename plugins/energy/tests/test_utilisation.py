"""A compute part's power from its kernels (astra_energy.utilisation), by hand: a memory-bound op at its achieved
share of the H200 copy's rate, a memory-bound GEMM at that plus its share of the GEMM class (the H200's run-4 rows),
the launch gap at idle, and a whole run's elementwise part."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from astra_sim.chakra import make_node, types as T
from astra_sim.simulation import simulate
from astra_sim_testing import write_case

from astra_energy.account import step_energy
from astra_energy.power import gpu_power
from astra_energy.utilisation import NodePower
from astra_gpu_model.model import OpBound
from astra_gpu_model.ops import Op

CLASS_W = {"gemm": 700.0, "gemm_fp32": 525.0, "attention": 686.9, "memory": 572.0, "comm": 210.0, "idle": 81.9}
COPY = 4.246e12  # the H200's measured copy, bytes read + written per second (0.8846 of its 4.8 TB/s)


PEAK = {"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "fp32": 67e12}  # the H200's dense peaks
GEMM_RATE = 662.6e12  # the GEMM class's settled bf16 rate (0.6697 of the peak)


def model(op, gap_ns=0, hbm=4.8e12, bound=None, clock=1.0):
    return SimpleNamespace(kernel_gap_ns=gap_ns, gpu=SimpleNamespace(hbm_bytes_per_s=hbm, peak_flops=PEAK.get),
                           node_op=lambda node, rank: op, op_bound=lambda op: bound, default_dtype="bf16",
                           clock_ratios={"gemm": clock})


def test_a_memory_bound_op_draws_its_share_of_the_copy():
    """2.123 GB in 1 ms is 2.123 TB/s, half the copy's rate: 81.9 + 0.5 x (572 - 81.9) = 326.95 W."""
    power = gpu_power("H200-SXM")
    assert power.copy_fraction_of_peak == pytest.approx(4.246 / 4.8)
    half = NodePower(model(Op(kind="memory", name="add", nbytes=COPY / 2 * 1e-3)), power, CLASS_W)
    assert half.watts(0, None, 1_000_000, "elementwise") == pytest.approx(326.95)
    # at or above the copy's rate: the whole memory class; decode attention is an HBM stream too
    full = NodePower(model(Op(kind="memory", name="add", nbytes=COPY * 2e-3)), power, CLASS_W)
    assert full.watts(0, None, 1_000_000, "elementwise") == pytest.approx(572.0)
    # decode attention, a prefill attention and a compute-bound GEMM keep their class's power (the H200's flash
    # decode rows draw the 700 W cap at 2.3-3.6 TB/s: not a low-power stream)
    decode = Op(kind="attention", name="sdpa", nbytes=COPY / 4 * 1e-3, seq_q=1)
    assert NodePower(model(decode), power, CLASS_W).watts(0, None, 1_000_000, "attention") == pytest.approx(686.9)
    prefill = Op(kind="attention", name="sdpa", nbytes=1e6, seq_q=512)
    assert NodePower(model(prefill), power, CLASS_W).watts(0, None, 1_000_000, "attention") == pytest.approx(686.9)
    compute = OpBound("compute", 1e-3, 1e-4, 1e6, 1e12)
    gemm = NodePower(model(Op(kind="gemm", name="mm", m=8, n=8, k=8), bound=compute), power, CLASS_W)
    assert gemm.watts(0, None, 1_000_000, "gemm") == pytest.approx(700.0)
    # an H100 SXM5 (3.35 TB/s): the same 0.8846 of its own peak is the whole class (ASSUMPTION)
    h100 = NodePower(model(Op(kind="memory", name="add", nbytes=3.35e12 * 0.8846 * 1e-3 / 2), hbm=3.35e12),
                     gpu_power("H100-SXM5-80GB"), CLASS_W)
    assert h100.watts(0, None, 1_000_000, "elementwise") == pytest.approx(81.9 + 0.5 * 490.1, rel=1e-4)


#: the H200's run-4 GEMMs (M x 8192 x 8192 bf16): settled TFLOP/s and W (device-run4.json), NVML reason
RUN4 = {1: (3.8258, 535.6, "0x0"), 16: (61.876, 586.7, "0x0"), 64: (221.98, 695.2, "0x4"), 128: (417.39, 694.2, "0x4")}


@pytest.mark.parametrize("m", sorted(RUN4))
def test_a_memory_bound_gemm_draws_its_bandwidth_plus_its_tensor_share(m):
    """A GEMM the gpu model times by its HBM traffic draws idle + 490.1 W x its share of the copy's rate + 618.1 W
    (700 W class at the limit - idle) x its share of the GEMM class's 662.6 TFLOP/s, at most the class: at the H200's
    measured rates M 1: 527.6 W (535.6 measured), 16: 587.5 (586.7), 64: 695.2 (695.2), 128: 700 (694.2, capped)."""
    tflops, measured_w, _ = RUN4[m]
    flops, nbytes = 2.0 * m * 8192 * 8192, 2.0 * (m * 8192 + 8192 * 8192 + m * 8192)
    seconds = flops / (tflops * 1e12)
    ns = 1_000_000  # a node of 1 ms at the measured rates: bytes and FLOPs scaled by 1 ms over one call
    bound = OpBound("memory", 0.0, 1e-3, nbytes / seconds * 1e-3, flops / seconds * 1e-3)
    node_power = NodePower(model(Op(kind="gemm", name="mm", m=m, n=8192, k=8192), bound=bound),
                           gpu_power("H200-SXM"), CLASS_W)
    expected = 81.9 + min(618.1, 490.1 * nbytes / seconds / COPY + 618.1 * tflops * 1e12 / GEMM_RATE)
    got = node_power.watts(0, None, ns, "gemm")
    assert got == pytest.approx(expected, rel=1e-3)
    assert got == pytest.approx(measured_w, rel=0.016)  # within 1.6 % of the measured settled power
    # the larger of the two shares alone (no sum) would miss M 16 by -9.7 % and M 64 by -30 %
    assert abs(81.9 + 490.1 * nbytes / seconds / COPY - measured_w) / measured_w > (0.09 if m > 1 else 0.02)
    # an fp32 GEMM (no measured class rate) keeps the class
    fp32 = NodePower(model(Op(kind="gemm", name="mm", dtype="fp32", m=m, n=8192, k=8192), bound=bound),
                     gpu_power("H200-SXM"), CLASS_W)
    assert fp32.watts(0, None, ns, "gemm") == pytest.approx(700.0)
    # under a limit the class's rate and power fall together: half the clock, the class at 350 W
    slow = NodePower(model(Op(kind="gemm", name="mm", m=m, n=8192, k=8192), bound=bound, clock=0.5),
                     gpu_power("H200-SXM"), dict(CLASS_W, gemm=350.0))
    share = tflops * 1e12 / (GEMM_RATE * 0.5)
    assert slow.watts(0, None, ns, "gemm") == pytest.approx(
        81.9 + min(268.1, 490.1 * nbytes / seconds / COPY + 268.1 * share), rel=1e-3)


def test_the_launch_gap_idles_and_gpus_without_a_copy_measurement_keep_their_class():
    """A 376 ns gap in a 1,000 ns GEMM node: 0.624 x 700 + 0.376 x 81.9 = 467.6 W."""
    gemm = Op(kind="gemm", name="mm", m=8, n=8, k=8)
    a100 = NodePower(model(gemm, gap_ns=376), gpu_power("A100-SXM4-80GB"), CLASS_W)
    assert a100.watts(0, None, 1_000, "gemm") == pytest.approx(0.624 * 700 + 0.376 * 81.9)
    assert not NodePower(model(gemm), gpu_power("A100-SXM4-80GB"), CLASS_W).active
    # a memory-bound op's bandwidth counts over its busy time: 0.4246 MB in 624 ns is 0.16 of the copy's rate
    add = Op(kind="memory", name="add", nbytes=COPY * 624e-9 * 0.16)
    h200 = NodePower(model(add, gap_ns=376), gpu_power("H200-SXM"), CLASS_W)
    assert h200.watts(0, None, 1_000, "elementwise") == pytest.approx(81.9 + 0.624 * 0.16 * 490.1)


def test_own_part_power_in_the_step():
    """Ranks sharing one parts dict but not one part power are computed apart: 1 ms of elementwise at 326.95 W."""
    parts = {"compute:elementwise": 1_000_000}
    mw = {cls: int(w * 1000) for cls, w in CLASS_W.items()}
    out = step_energy([(parts, 1_000_000), (parts, 1_000_000)], 1_000_000, mw, own_mw={1: {"compute:elementwise":
                                                                                              326_950}})
    assert out["by_part_mj"]["compute:elementwise"] == 572 + 327
    assert (out["max_rank_energy_mj"], out["min_rank_energy_mj"], out["peak_mw_gpu"]) == (572, 327, 572_000)


@pytest.mark.parametrize("n, saturated", [(2 ** 20, False), (64 * 2 ** 20, True)])
def test_a_run_charges_an_add_by_its_bandwidth(tmp_path, n, saturated):
    """One bf16 aten::add of two n-element tensors on the H200 (3 x 2n bytes moved): its step energy is the idle
    power over the node plus 490.1 W x the bytes over the copy's rate (115.4 pJ a byte), capped at the class's 572 W:
    at 64 Mi elements the gpu model moves them at 4.39 TB/s, 3 % faster than the measured copy (the whole class);
    at 1 Mi the kernel's fixed time keeps it well below."""
    node = make_node(0, "aten::add", T.COMP_NODE, duration_micros=1, attrs={
        "is_cpu_op": False, "inputs_shapes": f"[[{n}], [{n}], []]",
        "inputs_types": "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)', 'Scalar']"})
    prefix, system, network = write_case(tmp_path, [node])
    report = simulate(prefix, system, network, plugins=["network_analytical", "gpu_model", "energy"],
                      compute_model="gpu", options={"gpu": "H200-SXM"})
    e = report.stats["energy"]
    ns = report.ranks[0].breakdown["parts"]["compute:elementwise"]
    nbytes = 3 * n * 2
    expected_w = 81.9 + 490.1 * min(1.0, nbytes / (ns * 1e-9) / COPY)
    assert (expected_w == pytest.approx(572.0)) == saturated and expected_w > 100
    assert e["by_part_mj"]["compute:elementwise"] == pytest.approx(len(report.ranks) * expected_w * ns / 1e6, abs=2)
