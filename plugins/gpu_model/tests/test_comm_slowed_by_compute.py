"""A timed NCCL collective that starts while a compute kernel of its rank runs has its bandwidth part slowed until
that kernel ends (contention.py: ``Contention.slowed_collective_ns``; ``--gpu-contention-model measured`` only)."""

from __future__ import annotations

import csv
import math
import statistics
from fractions import Fraction
from pathlib import Path

from astra_sim.chakra import make_node, types as T

from astra_gpu_model.contention import COMM_SLOWDOWN_BESIDE_COMPUTE
from astra_gpu_model.nccl import ALL_GATHER, config_for_options, latency_us

from astra_sim.simulation import simulate
from astra_sim_testing import write_case

PLUGINS = ["network_analytical", "gpu_model"]
NCCL = {"algorithm": "nccl", "preferred_dataset_splits": 1, "comm_streams": "per-communicator"}
BF16_PAIR = "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"

CSV = Path(__file__).resolve().parents[1] / "calibration" / "nvidia-h200-2026-11-26" / "interference.csv"
F = COMM_SLOWDOWN_BESIDE_COMPUTE


def mm(node_id):
    return make_node(node_id, "aten::mm", T.COMP_NODE, duration_micros=7,
                     attrs={"is_cpu_op": False, "inputs_shapes": "[[8192, 8192], [8192, 8192]]",
                            "inputs_types": BF16_PAIR})


def run(tmp_path, nodes, name, **options):
    prefix, sys_path, network = write_case(tmp_path, nodes, 2, name, **NCCL)
    return simulate(prefix, sys_path, network, plugins=PLUGINS, compute_model="gpu",
                    options={"gpu_contention": True, "gpu_comm_hbm_share": 0.2, **options})


def all_gather(node_id, size, deps=()):
    return make_node(node_id, "ag", T.COMM_COLL_NODE, data_deps=list(deps),
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_GATHER, "comm_size": size})


def half_up(x):
    return math.floor(x + Fraction(1, 2))


def test_factor_is_the_median_of_the_stream_rows():
    with open(CSV) as handle:
        rows = [r for r in csv.DictReader(handle) if r["comm_kind"] == "stream" and r["overlap_ok"] == "True"]
    assert len(rows) == 47
    assert F == Fraction(statistics.median(float(r["comm_slowdown"]) for r in rows)).limit_denominator(100000)


def _case(tmp_path, size, mode):
    """A small all-gather and a GEMM issued at 0 (the GEMM is timed at the end of that ns: the first all-gather is
    not slowed), then an all-gather of ``size`` that starts when the first ends, while the GEMM runs."""
    first = 1 << 20
    report = run(tmp_path, [all_gather(0, first), mm(1), all_gather(2, size, deps=[0])], f"{mode}-{size}",
                 gpu_contention_model=mode)
    t1 = run(tmp_path, [all_gather(0, first)], f"a-{mode}").ranks[0].comm_ns
    t2 = run(tmp_path, [all_gather(0, size)], f"b-{mode}-{size}").ranks[0].comm_ns
    return report, t1, t2


def _bandwidth_ns(total, size):
    # NCCL's nBytes of an all-gather: the gathered output (2 ranks)
    lat = latency_us(ALL_GATHER, 2 * size, 2, config_for_options({"gpu": "H100-SXM5-80GB"}), 1)
    return total - min(total, int(round(lat * 1000.0)))


def test_an_all_gather_inside_a_gemm_is_slowed_by_the_whole_factor(tmp_path):
    size = 4 << 20
    report, t1, t2 = _case(tmp_path, size, "measured")
    gemm_end = report.ranks[0].compute_ns  # issued at 0
    b = _bandwidth_ns(t2, size)
    slowed = t2 + (F - 1) * b
    assert 0 < b < t2 and t1 + slowed < gemm_end  # all of it beside the GEMM
    assert report.ranks[0].comm_ns == t1 + half_up(slowed)
    assert report.ranks[0].comm_ns > t1 + t2


def test_an_all_gather_outlasting_the_gemm(tmp_path):
    """Slowed until the GEMM ends (window w), the rest at full speed: w + t2 x (1 - w / slowed)."""
    size = 512 << 20
    report, t1, t2 = _case(tmp_path, size, "measured")
    gemm_end = report.ranks[0].compute_ns
    w = gemm_end - t1
    slowed = t2 + (F - 1) * _bandwidth_ns(t2, size)
    assert 0 < w < slowed
    assert report.ranks[0].comm_ns == t1 + half_up(w + t2 * (1 - Fraction(w) / slowed))
    assert t1 + t2 < report.ranks[0].comm_ns < t1 + half_up(slowed)


def test_nothing_running_or_off_or_sm_hbm_keeps_the_time(tmp_path):
    size = 4 << 20
    # nothing runs when the second all-gather starts: no GEMM
    alone = run(tmp_path, [all_gather(0, 1 << 20), all_gather(1, size, deps=[0])], "none",
                gpu_contention_model="measured")
    t1 = run(tmp_path, [all_gather(0, 1 << 20)], "t1").ranks[0].comm_ns
    t2 = run(tmp_path, [all_gather(0, size)], "t2").ranks[0].comm_ns
    assert alone.ranks[0].comm_ns == t1 + t2
    # a GEMM issued in the same ns as the collective is not seen by it (timed at the end of the ns)
    same = run(tmp_path, [mm(0), all_gather(1, size)], "same", gpu_contention_model="measured")
    assert same.ranks[0].comm_ns == t2
    for mode in ("off", "sm-hbm"):
        report, a, b = _case(tmp_path, size, mode)
        assert report.ranks[0].comm_ns == a + b


def test_whether_a_kernel_runs_is_asked_once_per_collective(tmp_path, monkeypatch):
    """The measured model's one test of "a compute kernel of this rank runs now" (``compute_busy_until``) is asked
    once per timed collective, by NCCL's collective, which hands its answer to ``slowed_collective_ns`` (the two
    had each asked it)."""
    from astra_gpu_model.contention import Contention
    from astra_gpu_model.nccl import NcclCollective

    calls = {"busy": 0, "timed": 0, "slowed": 0}
    busy, timed, slowed = Contention.compute_busy_until, NcclCollective.duration_ns, Contention.slowed_collective_ns

    def counted(name, method):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return method(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(Contention, "compute_busy_until", counted("busy", busy))
    monkeypatch.setattr(NcclCollective, "duration_ns", counted("timed", timed))
    monkeypatch.setattr(Contention, "slowed_collective_ns", counted("slowed", slowed))
    report, t1, t2 = _case(tmp_path, 4 << 20, "measured")
    assert report.ranks[0].comm_ns > t1 + t2  # the second all-gather was slowed
    assert calls["slowed"] >= 1 and calls["busy"] == calls["timed"]
