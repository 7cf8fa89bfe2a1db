"""The ``nccl`` collective implementation: NCCL's tuning model vs Vidur's measured all-reduce."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_sim.testing import find_shared_dir, write_network_config, write_system_config

from astra_gpu_model.nccl import NVLS, RING, TREE, LL, LL128, SIMPLE, collective_time_us, config_for_gpu, predict

SHARED = find_shared_dir()
CAL = SHARED / "calibration" if SHARED else None
needs_data = pytest.mark.skipif(CAL is None or not (CAL / "vidur_measured_all_reduce_a100_dgx.csv").exists(),
                                reason="shared calibration data not available")

GPU = {"a100": "A100-SXM4-80GB", "h100": "H100-SXM5-80GB"}


def _errors(name):
    """Per GPU count: |model - time_ms_median| / time_ms_median, single-node rows, 2 KB..64 MB."""
    gpu, topo = name.split("_", 1)
    cfg = config_for_gpu(GPU[gpu], topology="pairwise" if topo.startswith("pairwise") else "nvswitch")
    out = defaultdict(list)
    with open(CAL / f"vidur_measured_all_reduce_{name}.csv") as fh:
        for row in csv.DictReader(line for line in fh if not line.startswith("#")):
            size = int(row["size_bytes"])
            if row["num_nodes"] != "1" or size > 64 << 20:
                continue
            n = int(row["num_workers"])
            measured = float(row["time_ms_median"]) * 1000.0
            model = collective_time_us("all_reduce", size, n, cfg)[0]
            out[n].append(abs(model - measured) / measured)
    return out


#: Median absolute error reached per file (all GPU counts pooled) and the bound each file is held to.
#: Only a100_pairwise_nvlink meets 15 %; the others are held to what the model honestly reaches.
BOUNDS = {"a100_pairwise_nvlink": 0.15, "a100_dgx": 0.16, "h100_dgx": 0.19, "h100_pairwise_nvlink": 0.23}


@needs_data
@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_all_reduce_time_vs_vidur(name):
    per_n = _errors(name)
    assert sorted(per_n) == ([2, 4] if "pairwise" in name else [2, 4, 8])
    pooled = [e for errs in per_n.values() for e in errs]
    assert statistics.median(pooled) <= BOUNDS[name]
    for n, errs in per_n.items():
        assert statistics.median(errs) <= 0.23, (name, n)


@needs_data
def test_a100_pairwise_within_15_percent():
    assert statistics.median(e for errs in _errors("a100_pairwise_nvlink").values() for e in errs) <= 0.15


@pytest.mark.parametrize("gpu", ["A100-SXM4-80GB", "H100-SXM5-80GB"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_protocol_choice_follows_size(gpu, n):
    cfg = config_for_gpu(gpu)
    small = collective_time_us("all_reduce", 4096, n, cfg)
    assert small[2] == LL
    large = collective_time_us("all_reduce", 256 << 20, n, cfg)
    assert large[2] in (LL128, SIMPLE)
    protos = [collective_time_us("all_reduce", 1 << k, n, cfg)[2] for k in range(10, 29)]
    # LL first, then never back to LL once the bandwidth protocols take over
    assert LL not in protos[protos.index(next(p for p in protos if p != LL)):]


def test_nvls_only_on_hopper_nvswitch_and_tree_never_wins_in_one_node():
    for n in (2, 4, 8):
        for k in range(10, 29):
            a100 = collective_time_us("all_reduce", 1 << k, n, config_for_gpu("A100-SXM4-80GB"))
            assert a100[1] == RING  # Ampere: no NVLS; one node: tree loses to ring
            h100 = collective_time_us("all_reduce", 1 << k, n, config_for_gpu("H100-SXM5-80GB"))
            assert h100[1] in (RING, NVLS)
            pair = collective_time_us("all_reduce", 1 << k, n, config_for_gpu("H100-SXM5-80GB", topology="pairwise"))
            assert pair[1] == RING
    h8 = config_for_gpu("H100-SXM5-80GB")
    assert collective_time_us("all_reduce", 4096, 8, h8)[1] == RING
    assert collective_time_us("all_reduce", 256 << 20, 8, h8)[1] == NVLS
    assert collective_time_us("all_reduce", 256 << 20, 8, config_for_gpu("H100-SXM5-80GB", nvls=False))[1] == RING
    assert any(c[1] == TREE for c in predict("all_reduce", 1 << 20, 8, h8))  # tree is a candidate


def test_other_collectives_and_monotonic():
    cfg = config_for_gpu("H100-SXM5-80GB")
    for coll in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        times = [collective_time_us(coll, 1 << k, 8, cfg)[0] for k in range(10, 28)]
        assert all(b >= a for a, b in zip(times, times[1:]))
    assert collective_time_us("all_reduce", 1 << 20, 1, cfg)[0] == 0.0


def _run(tmp_path, size, npus=8, **kwargs):
    sys_path = write_system_config(tmp_path / "sys.json", algorithm="nccl", preferred_dataset_splits=1)
    net = write_network_config(tmp_path / "net.yml", ("Switch",), (npus,), (450.0,), (500.0,))
    nodes = [make_node(1, "ar", T.COMM_COLL_NODE,
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})]
    for rank in range(npus):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    return simulate(str(tmp_path / "t"), sys_path, net, **kwargs)


@pytest.mark.parametrize("gpu", [None, "A100-SXM4-80GB"])
def test_whole_simulation_uses_the_model(tmp_path, gpu):
    size = 16 << 20
    kwargs = {"options": {"gpu": gpu}} if gpu else {}
    report = _run(tmp_path, size, **kwargs)
    expected_us = collective_time_us("all_reduce", size, 8, config_for_gpu(gpu))[0]
    assert report.max_finish_ns == pytest.approx(expected_us * 1000, rel=0.05, abs=20_000)
