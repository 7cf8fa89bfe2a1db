"""Collectives on the new machines (issue 40): NCCL on Blackwell (NVLink 5's link rate, the NVLS peak fitted on
Blackwell statements, NVLSTree across nodes) and RCCL's MSCCL all-pairs all-reduce on AMD Instinct. Every expected
value is computed by hand from the constants named in ``nccl.py``."""

from __future__ import annotations

import pytest

from astra_gpu_model import nccl
from astra_gpu_model.nccl import (
    ALL_REDUCE, NIC_EFFICIENCY, NVLS, NVLS_TREE, RING, SIMPLE, collective_time_us, config_for_gpu, intra_bandwidth,
    load_calibration, nvls_tree_bus, predict,
)

GIB = 1 << 30


def _busbw(size, n, t_us):
    """nccl-tests' all-reduce bus bandwidth (GB/s) of a ``t_us`` run."""
    return size * 2 * (n - 1) / n / (t_us * 1e3)


def test_blackwell_nvlink_is_nccls_721_8():
    """18 NVLink 5 links of 50 GB/s per direction at NCCL's 40.1 GB/s each: 721.8 GB/s, the maxBw NCCL logs on 8 B200
    (NVIDIA/nccl#1807). Hopper keeps 18 x 20.6 = 370.8 (its 25 GB/s links)."""
    assert intra_bandwidth(config_for_gpu("B200"), "nvswitch") == pytest.approx(18 * 40.1)
    assert intra_bandwidth(config_for_gpu("H100-SXM5-80GB"), "nvswitch") == pytest.approx(18 * 20.6)


def test_blackwell_nvls_peak_is_the_mean_of_its_statements():
    """8 B200, 8 GiB: the NVLS bus bandwidth is the mean of NVIDIA/nccl#1807 (830) and lixueduan.com (811), less the
    first 64 MB at the borrowed Hopper factor and the latency (under 1 %)."""
    peaks = nccl.peak_busbw()["blackwell"][1]
    assert peaks[(NVLS, SIMPLE)] == pytest.approx((830.0 + 811.0) / 2)
    cfg = config_for_gpu("B200")
    t, algo, proto = collective_time_us(ALL_REDUCE, 8 * GIB, 8, cfg)
    assert (algo, proto) == (NVLS, SIMPLE)
    assert _busbw(8 * GIB, 8, t) == pytest.approx(820.5, rel=0.01)
    assert _busbw(8 * GIB, 8, t) < 820.5  # the slower first 64 MB and the latency only take away


def test_blackwell_factor_is_its_own_and_hopper_unchanged():
    """Blackwell's factor past 64 MB: 820.5 / NCCL's NVLS bus bandwidth (721.8 x 0.74 x 15/16 x 2); Hopper's stays
    480 / (370.8 x 0.85 x 15/16 x 2)."""
    cal = load_calibration()
    raw_blackwell = 18 * 40.1 * 0.74 * 15 / 16 * 2
    raw_hopper = 18 * 20.6 * 0.85 * 15 / 16 * 2
    assert cal["blackwell"].beyond_fit["nvswitch/nvls/Simple"] == pytest.approx(820.5 / raw_blackwell, abs=1e-4)
    assert cal["hopper"].beyond_fit["nvswitch/nvls/Simple"] == pytest.approx(480.0 / raw_hopper, abs=1e-4)
    # Up to 64 MB Blackwell borrows Hopper's fit (no published Blackwell sweep).
    assert cal["blackwell"].efficiency == cal["hopper"].efficiency
    assert cal["blackwell"].overhead_us == cal["hopper"].overhead_us


def test_nvls_tree_bus_by_hand():
    """2 HGX B200 nodes, 8 x 400 Gb/s: NCCL's NVLSTree is the least of NVLS (1001.5), the heads' NICs twice
    (8 x 50 x 2 = 800) and 8 NVLS channels (one per head) x 96 = 768; calibrated: NVLS at its peak (820.5), the NICs
    at 24/25 (768), the cap 768."""
    cfg = config_for_gpu("B200")
    bw = intra_bandwidth(cfg, "nvswitch")
    assert nvls_tree_bus(cfg, bw, 8, 2) == pytest.approx(768.0)
    factor = load_calibration()["blackwell"].beyond_fit["nvswitch/nvls/Simple"]
    assert nvls_tree_bus(cfg, bw, 8, 2, factor, NIC_EFFICIENCY) == pytest.approx(768.0)
    # More than 2 nodes: the heads' NICs once, not twice (8 x 50 = 400 raw).
    assert nvls_tree_bus(cfg, bw, 8, 4) == pytest.approx(400.0)
    # A 72-GPU rack: at most 32 heads (NCCL_MAX_NVLS_ARITY), 32 x 50 x 2 = 3200; NVLS binds (721.8 x 0.74 x 15/16 x 2).
    assert nvls_tree_bus(cfg, bw, 72, 2) == pytest.approx(721.8 * 0.74 * 15 / 16 * 2)


def test_nvls_tree_time_by_hand():
    """16 B200 on 2 nodes, 8 GiB: overhead + latency_scale x (25 + 2 log2(2) x 20.9) µs, the first 64 MB at NVLS's
    fitted factor (borrowed from Hopper: 1001.5 x 0.59263 = 593.5 GB/s, under the NICs' 768) and the rest at the
    NICs' 768 GB/s (NVLS's peak, 820.5, is above it); algBw = bus x 16/30."""
    cfg = config_for_gpu("B200")
    cal = load_calibration()["blackwell"]
    size = 8 * GIB
    t, algo, proto = collective_time_us(ALL_REDUCE, size, 16, cfg, nodes=2)
    assert (algo, proto) == (NVLS_TREE, SIMPLE)
    nvls_raw = 18 * 40.1 * 0.74 * 15 / 16 * 2
    head_bus = nvls_raw * cal.efficiency["nvswitch/nvls/Simple"]
    assert head_bus == pytest.approx(593.5, abs=0.1)
    head = 64 << 20
    expected = (cal.overhead_us + cal.latency_scale * (25.0 + 2 * 20.9) + head / (1000.0 * head_bus * 16 / 30)
                + (size - head) / (1000.0 * 768.0 * 16 / 30))
    assert t == pytest.approx(expected)
    assert _busbw(size, 16, t) == pytest.approx(768.0, rel=0.01)  # less the latency and the slower first 64 MB


def test_nvls_tree_only_across_nodes():
    """NVLSTree is a candidate across nodes on Hopper and Blackwell (test_nccl_internode_latency.py has Hopper's
    terms); one node never offers it, nor do other collectives, nor does Ampere."""
    h100 = config_for_gpu("H100-SXM5-80GB", calibrated=False)
    assert any(c[1] == NVLS_TREE for c in predict(ALL_REDUCE, 8 * GIB, 16, h100, nodes=2))
    assert all(c[1] != NVLS_TREE for c in predict(ALL_REDUCE, 8 * GIB, 8, h100))
    a100 = config_for_gpu("A100-SXM4-80GB", calibrated=False)
    assert all(c[1] != NVLS_TREE for c in predict(ALL_REDUCE, 8 * GIB, 16, a100, nodes=2))
    b200 = config_for_gpu("B200", calibrated=False)
    assert all(c[1] != NVLS_TREE for c in predict(ALL_REDUCE, 8 * GIB, 8, b200))
    assert all(c[1] != NVLS_TREE for c in predict("all_gather", 8 * GIB, 16, b200, nodes=2))
    assert predict(ALL_REDUCE, 8 * GIB, 16, b200, nodes=2)[0][1] == NVLS_TREE


def test_gb200_racks_pick_nvls_and_nvls_tree():
    """One NVL72 rack is one NVLink domain: NVLS; two racks: NVLSTree, NVLS-bound (32 heads' NICs carry 3,072 GB/s)."""
    cfg = config_for_gpu("B200")
    assert collective_time_us(ALL_REDUCE, 8 * GIB, 72, cfg)[1] == NVLS
    t, algo, _ = collective_time_us(ALL_REDUCE, 16 * GIB, 144, cfg, nodes=2)
    assert algo == NVLS_TREE
    assert _busbw(16 * GIB, 144, t) == pytest.approx(820.5, rel=0.005)


def test_blackwell_ring_uses_nvlink5_rate():
    """NCCL's raw ring on 8 B200 at a large size: bus bandwidth 721.8 (its bwIntra), no longer twice that."""
    raw = config_for_gpu("B200", calibrated=False)
    ring = next(c for c in predict(ALL_REDUCE, 8 * GIB, 8, raw) if c[1] == RING and c[2] == SIMPLE)
    assert _busbw(8 * GIB, 8, ring[4]) == pytest.approx(721.8)


# --- RCCL on AMD Instinct (8-GPU Infinity Fabric mesh): MSCCL's all-pairs all-reduce up to 16 MiB ----------------

def test_msccl_allpairs_time_by_hand():
    """8 MI300X, 1 MiB: RCCL's MSCCL all-pairs (Simple window 512 KiB - 11 MiB): the ring's Simple bandwidth (the
    equivalent switch, 7 x 64 GB/s at NCCL's 20/25 per link: 358.4 GB/s bus, algBw x 8/14) at the all-pairs
    factor of the cdna3 fit, and two steps of latency (8.4 + 2 x 3.4 µs) instead of fourteen."""
    from astra_gpu_model.nccl import MSCCL_ALLPAIRS

    cfg = config_for_gpu("MI300X")
    cal = cfg.correction()
    size = 1 << 20
    t, algo, proto = collective_time_us(ALL_REDUCE, size, 8, cfg)
    assert (algo, proto) == (MSCCL_ALLPAIRS, SIMPLE)
    bw_us = size / (1000.0 * 7 * 64 * 20 / 25 * 8 / 14)
    expected = (cal.overhead_us + cal.latency_scale * (8.4 + 2 * 3.4)
                + bw_us / cal.efficiency["nvswitch/msccl_allpairs/Simple"])
    assert t == pytest.approx(expected)


@pytest.mark.parametrize("size, algo", [(64 << 10, "msccl_allpairs"), (12 << 20, RING), (64 << 20, RING)])
def test_msccl_allpairs_windows(size, algo):
    """LL up to 512 KiB, Simple 512 KiB - 11 MiB and 14 - 16 MiB; RCCL's own ring between and above."""
    assert collective_time_us(ALL_REDUCE, size, 8, config_for_gpu("MI300X"))[1] == algo


def test_msccl_allpairs_only_on_one_amd_node_of_eight():
    """Not on NVIDIA, not on 4 GPUs, not across nodes, not for all-gather."""
    assert collective_time_us(ALL_REDUCE, 1 << 20, 8, config_for_gpu("H100-SXM5-80GB"))[1] != "msccl_allpairs"
    mi = config_for_gpu("MI300X")
    assert collective_time_us(ALL_REDUCE, 1 << 20, 4, mi)[1] != "msccl_allpairs"
    assert collective_time_us(ALL_REDUCE, 1 << 20, 16, mi, nodes=2)[1] != "msccl_allpairs"
    assert collective_time_us("all_gather", 1 << 20, 8, mi)[1] != "msccl_allpairs"


def test_mi300x_8mib_against_a_published_run_not_in_the_registry():
    """crickett-hpe/hpc-ai-envs pull request #30 (rccl-tests develop:83d38d9, one process with 8 MI300X): 8 MiB
    out-of-place all-reduce in 91.10 µs (161.14 GB/s bus bandwidth). Nothing was fitted on it (the cdna3 fit is
    hisohara/ai-scripts' sweep, 84.78 µs at 8 MiB): within 10 %."""
    t = collective_time_us(ALL_REDUCE, 8 << 20, 8, config_for_gpu("MI300X"))[0]
    assert abs(t - 91.10) / 91.10 < 0.10


def test_cdna3_calibration_is_fitted_on_the_published_mi300x_sweep():
    """AMD Instinct has its own calibration (``cdna3``), not Ampere's; past 64 MB its ring reaches the sweep's 8 GiB
    bus bandwidth, 315.69 GB/s (hisohara/ai-scripts rccl-smoketest), and the rows past 64 MB it was not fitted on
    come back within 1 %."""
    import csv

    cfg = config_for_gpu("MI300X")
    assert cfg.arch == "cdna3" and config_for_gpu("MI355X").arch == "cdna3"
    cal = load_calibration()
    assert cal["cdna3"].overhead_us != cal["ampere"].overhead_us
    assert nccl.peak_busbw()["cdna3"][1] == {(RING, SIMPLE): 315.69}
    path = nccl.__file__.replace("nccl.py", "data/published_rccl_all_reduce_mi300x.csv")
    with open(path) as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    past = [(int(r["size_bytes"]), float(r["time_us"])) for r in rows if 64 << 20 < int(r["size_bytes"]) < 8 * GIB]
    assert len(past) == 6
    for size, measured in past:
        t, algo, _ = collective_time_us(ALL_REDUCE, size, 8, cfg)
        assert algo == RING and abs(t - measured) / measured < 0.01, (size, t, measured)
