"""A compute part's power from its kernels (astra_energy.utilisation), by hand: a memory-bound op at its achieved
share of the H200 copy's rate, the launch gap at idle, and a whole run's elementwise part."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from astra_sim.chakra import make_node, types as T
from astra_sim.simulation import simulate
from astra_sim_testing import write_case

from astra_energy.account import step_energy
from astra_energy.power import gpu_power
from astra_energy.utilisation import NodePower
from astra_gpu_model.ops import Op

CLASS_W = {"gemm": 700.0, "gemm_fp32": 525.0, "attention": 686.9, "memory": 572.0, "comm": 210.0, "idle": 81.9}
COPY = 4.246e12  # the H200's measured copy, bytes read + written per second (0.8846 of its 4.8 TB/s)


def model(op, gap_ns=0, hbm=4.8e12):
    return SimpleNamespace(kernel_gap_ns=gap_ns, gpu=SimpleNamespace(hbm_bytes_per_s=hbm),
                           _node_op=lambda node, rank: op)


def test_a_memory_bound_op_draws_its_share_of_the_copy():
    """2.123 GB in 1 ms is 2.123 TB/s, half the copy's rate: 81.9 + 0.5 x (572 - 81.9) = 326.95 W."""
    power = gpu_power("H200-SXM")
    assert power.copy_fraction_of_peak == pytest.approx(4.246 / 4.8)
    half = NodePower(model(Op(kind="memory", name="add", nbytes=COPY / 2 * 1e-3)), power, CLASS_W)
    assert half.watts(0, None, 1_000_000, "elementwise") == pytest.approx(326.95)
    # at or above the copy's rate: the whole memory class; decode attention is an HBM stream too
    full = NodePower(model(Op(kind="memory", name="add", nbytes=COPY * 2e-3)), power, CLASS_W)
    assert full.watts(0, None, 1_000_000, "elementwise") == pytest.approx(572.0)
    decode = Op(kind="attention", name="sdpa", nbytes=COPY / 4 * 1e-3, seq_q=1)
    assert NodePower(model(decode), power, CLASS_W).watts(0, None, 1_000_000, "attention") == \
        pytest.approx(81.9 + 0.25 * 490.1)
    # a prefill attention and a GEMM keep their class's power
    prefill = Op(kind="attention", name="sdpa", nbytes=1e6, seq_q=512)
    assert NodePower(model(prefill), power, CLASS_W).watts(0, None, 1_000_000, "attention") == pytest.approx(686.9)
    gemm = NodePower(model(Op(kind="gemm", name="mm", m=8, n=8, k=8)), power, CLASS_W)
    assert gemm.watts(0, None, 1_000_000, "gemm") == pytest.approx(700.0)
    # an H100 SXM5 (3.35 TB/s): the same 0.8846 of its own peak is the whole class (ASSUMPTION)
    h100 = NodePower(model(Op(kind="memory", name="add", nbytes=3.35e12 * 0.8846 * 1e-3 / 2), hbm=3.35e12),
                     gpu_power("H100-SXM5-80GB"), CLASS_W)
    assert h100.watts(0, None, 1_000_000, "elementwise") == pytest.approx(81.9 + 0.5 * 490.1, rel=1e-4)


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
