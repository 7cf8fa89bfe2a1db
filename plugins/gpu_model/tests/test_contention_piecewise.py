"""A kernel issued beside communication is slowed only while that communication runs (contention.py: piecewise),
where the communication's end is fixed when the kernel is issued (NCCL's timed phases); otherwise for its whole
duration (a collective of packets, a send)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from astra_sim.chakra import make_node, types as T
from astra_sim.simulation import simulate
from astra_sim_testing import write_case

from astra_gpu_model.contention import contended_gpu, measured_slowdown, piecewise
from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import classify

PLUGINS = ["network_analytical", "gpu_model"]
BF16_PAIR = "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"
SHAPES = "[[8192, 8192], [8192, 8192]]"
NCCL = {"algorithm": "nccl", "preferred_dataset_splits": 1, "comm_streams": "per-communicator"}


def mm(node_id, deps=()):
    return make_node(node_id, "aten::mm", T.COMP_NODE, data_deps=list(deps), duration_micros=7,
                     attrs={"is_cpu_op": False, "inputs_shapes": SHAPES, "inputs_types": BF16_PAIR})


def all_reduce(node_id, size, **attrs):
    return make_node(node_id, "ar", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size, **attrs})


def run(tmp_path, nodes, name, system=NCCL, comm_groups=None, **options):
    prefix, sys_path, network = write_case(tmp_path, nodes, 2, name, **system)
    groups = None
    if comm_groups is not None:
        groups = tmp_path / "groups.json"
        groups.write_text(json.dumps(comm_groups))
        groups = str(groups)
    return simulate(prefix, sys_path, network, None, groups, plugins=PLUGINS, compute_model="gpu",
                    options={"gpu_contention": True, "gpu_comm_hbm_share": 0.2, **options})


def mm_ns(comm_sms=0, share=0.0):
    """The 8192^3 GEMM's time on the whole H100, or on what ``comm_sms`` SMs and ``share`` of HBM leave."""
    h100 = load_gpu("H100")
    model = GpuComputeModel(None, "H100")
    if comm_sms:
        model.gpu = contended_gpu(h100, comm_sms, share)
    return max(1, math.ceil(model.op_seconds(classify("aten::mm", SHAPES, BF16_PAIR, "")) * 1e9))


def half_up(x):
    return math.floor(x + Fraction(1, 2))


def test_piecewise_by_hand():
    # 1000 ns alone, 2000 ns slowed; slowed for the first 500 ns: a quarter done, the rest 750 ns at full rate
    assert piecewise(0, [((2000,), 500), ((1000,), None)]) == [((2000,), 0, 500), ((1000,), 500, 1250)]
    # the kernel ends before the collective does: the slowed duration, as before
    assert piecewise(10, [((2000,), 5000), ((1000,), None)]) == [((2000,), 10, 2010)]
    # three states: 1/3 of the work in 100 ns at 300, 1/4 in 100 ns at 400, the rest (5/12 of 120) = 50 ns
    assert piecewise(0, [((300,), 100), ((400,), 200), ((120,), None)])[-1] == ((120,), 200, 250)
    # rounding of the last piece: halves up (1/3 of 3 done; 2/3 x 2 = 1.33 -> 1; 2/3 x 4 = 2.67 -> 3)
    assert piecewise(0, [((3,), 1), ((2,), None)])[-1][2] == 2
    assert piecewise(0, [((3,), 1), ((4,), None)])[-1][2] == 4
    with pytest.raises(ValueError):
        piecewise(0, [((3,), 1)])


def test_long_gemm_beside_a_short_nccl_all_reduce(tmp_path):
    """Overlap at the contended rate, the rest at the full rate: duration = e + (1 - e / slowed) x alone."""
    alone, slowed = mm_ns(), mm_ns(32, 0.2)
    report = run(tmp_path, [all_reduce(0, 64 << 20), mm(1)], "short")
    end = report.ranks[0].comm_ns  # the all-reduce and the GEMM both start at 0
    assert 0 < end < slowed // 4
    expected = end + half_up((1 - Fraction(end, slowed)) * alone)
    assert report.ranks[0].compute_ns == expected
    assert alone < expected < slowed
    u = report.stats["gpu_utilization"][0]
    assert u["contended_compute_ns"] == end and u["compute_ns"] == expected
    assert [row[:4] for row in u["timeline"]] == [[0, end, 100, 32], [end, expected, 132, 0]]
    # the same all-reduce as packets (ring): its end is not known at the GEMM's issue, the old rule holds
    ring = run(tmp_path, [all_reduce(0, 64 << 20), mm(1)], "ring", system={})
    assert ring.ranks[0].comm_ns < slowed
    assert ring.ranks[0].compute_ns == slowed
    assert ring.stats["gpu_utilization"][0]["contended_compute_ns"] == slowed
    # whichever of the two is issued first in the nanosecond
    swapped = run(tmp_path, [mm(0), all_reduce(1, 64 << 20)], "swapped")
    assert swapped.ranks[0].compute_ns == expected


def test_measured_model_is_piecewise_too(tmp_path):
    alone = mm_ns()
    slowed = int(round(alone * measured_slowdown("compute", 32 / 132)))
    report = run(tmp_path, [all_reduce(0, 64 << 20), mm(1)], "measured", gpu_contention_model="measured")
    end = report.ranks[0].comm_ns
    assert 0 < end < slowed
    assert report.ranks[0].compute_ns == end + half_up((1 - Fraction(end, slowed)) * alone)


def test_collectives_ending_at_different_times(tmp_path):
    """Two all-reduces on two communicators (16 and 32 SMs) end at e1 < e2: the GEMM runs on 132 - 48 SMs until
    e1, on 132 - 32 until e2, then on the whole GPU."""
    nodes = [all_reduce(0, 16 << 20, pg_name="1", comm_sms=16), all_reduce(1, 64 << 20, pg_name="2", comm_sms=32),
             mm(2)]
    report = run(tmp_path, nodes, "two", comm_groups={"1": [0, 1], "2": [0, 1]})
    alone_report = run(tmp_path, [all_reduce(0, 16 << 20, pg_name="1", comm_sms=16)], "e1",
                       comm_groups={"1": [0, 1]})
    e1 = alone_report.ranks[0].comm_ns
    e2 = run(tmp_path, [all_reduce(0, 64 << 20, pg_name="2", comm_sms=32)], "e2",
             comm_groups={"2": [0, 1]}).ranks[0].comm_ns
    assert 0 < e1 < e2
    both, second, alone = mm_ns(48, 0.2), mm_ns(32, 0.2), mm_ns()
    assert e2 < both
    done = Fraction(e1, both) + Fraction(e2 - e1, second)
    expected = e2 + half_up((1 - done) * alone)
    assert report.ranks[0].compute_ns == expected
    rows = [row[:4] for row in report.stats["gpu_utilization"][0]["timeline"]]
    assert rows == [[0, e1, 84, 48], [e1, e2, 100, 32], [e2, expected, 132, 0]]
    assert report.stats["gpu_utilization"][0]["contended_compute_ns"] == e2


def test_a_send_keeps_the_old_rule(tmp_path):
    """A send's end is not known at the GEMM's issue: the GEMM stays slowed for its whole duration, while the
    collective beside it counts only until it ends."""
    send = make_node(1, "send", T.COMM_SEND_NODE,
                     attrs={"is_cpu_op": False, "comm_src": 0, "comm_dst": 1, "comm_size": 1 << 20, "comm_tag": 7})
    recv = make_node(1, "recv", T.COMM_RECV_NODE,
                     attrs={"is_cpu_op": False, "comm_src": 0, "comm_dst": 1, "comm_size": 1 << 20, "comm_tag": 7})
    from astra_sim.chakra import make_metadata, write_et

    prefix, sys_path, network = write_case(tmp_path, [], 2, "send", **NCCL)
    write_et(f"{prefix}.0.et", make_metadata(), [all_reduce(0, 64 << 20), send, mm(2)])
    write_et(f"{prefix}.1.et", make_metadata(), [all_reduce(0, 64 << 20), recv])
    report = simulate(prefix, sys_path, network, plugins=PLUGINS, compute_model="gpu",
                      options={"gpu_contention": True, "gpu_comm_hbm_share": 0.2})
    ar = run(tmp_path, [all_reduce(0, 64 << 20)], "ar-alone").ranks[0].comm_ns
    assert 0 < ar < mm_ns(64, 0.2)
    # 32 SMs each until the all-reduce ends, then the send's 32 for the rest of the GEMM, though it ended long before
    expected = ar + half_up((1 - Fraction(ar, mm_ns(64, 0.2))) * mm_ns(32, 0.2))
    assert report.ranks[0].compute_ns == expected
    rows = [row[:4] for row in report.stats["gpu_utilization"][0]["timeline"]]
    assert rows[0] == [0, rows[0][1], 68, 64] and rows[-1][2] == 100


def test_a_wrapped_model_reads_the_ends_too():
    """A compute model wrapping the gpu model (astra-cluster's slowed ranks forward its attributes) still gets the
    run's collective ends at the run's start."""
    from types import SimpleNamespace

    from astra_gpu_model.contention import Contention
    from astra_gpu_model.plugin import astra_run_start

    contention = Contention(load_gpu("H100"))
    wrapper = SimpleNamespace(contention=contention)
    def ends(rank, node_id):
        return 7

    astra_run_start(SimpleNamespace(options={}, compute_model=wrapper, collective_end_ns=ends))
    assert contention._end_of is ends
    astra_run_start(SimpleNamespace(options={}, compute_model=SimpleNamespace(contention=None)))  # nothing to bind
