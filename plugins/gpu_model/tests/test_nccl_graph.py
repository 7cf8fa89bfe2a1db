"""NCCL's search channels across nodes (astra_gpu_model.nccl_graph) and the tuning terms that count them (issue 36).

Every expected value is worked out by hand from NCCL's src/graph/search.cc and src/graph/tuning.cc (NVIDIA/nccl master
5067397, the same terms at v2.26.2-1)."""

import pytest

from astra_gpu_model.nccl import LL, LL128, NVLS_TREE, SIMPLE, TREE, config_for_gpu, nvls_tree_bus, predict
from astra_gpu_model.nccl_graph import ring_graph, search_speed

MIB = 1 << 20


def test_search_speed_is_the_first_array_entry_the_path_allows():
    # sm90 array 48, 45, 42, 40, 30, 24, ...: a 50 GB/s NIC behind 48 GB/s of PCIe Gen5 -> 48; 25 GB/s (HDR) -> 24
    assert search_speed("hopper", min(50.0, 48.0)) == 48.0
    assert search_speed("hopper", 25.0) == 24.0
    # the generic array (Ampere) 48, 30, 28, 24, ...: HDR behind PCIe Gen4 (24) -> 24
    assert search_speed("ampere", min(25.0, 24.0)) == 24.0
    # sm100 starts at 96: an 800 Gb/s NIC (100 GB/s) behind a 100 GB/s path -> 96
    assert search_speed("blackwell", 100.0) == 96.0


def test_ring_graph_by_hand():
    # 8 H100, 8 x 400 Gb/s NICs, PCIe Gen5: speed 48, floor(48 / 48) = 1 channel per NIC -> 8; NVLink allows
    # floor(370.8 / (48 x 7/8)) = floor(8.83) = 8; no duplication (SM > 80, 48 < 50, 8 > 4 channels): (8, 48)
    assert ring_graph("hopper", 8, 50.0, 48.0, 18 * 20.6) == (8, 48.0)
    # 8 A100, 8 x HDR (25 GB/s), PCIe Gen4 (24): speed 24, 8 channels; no duplication (24 < 25): (8, 24)
    assert ring_graph("ampere", 8, 25.0, 24.0, 12 * 20.0) == (8, 24.0)
    # GB200 NVL72 with a NIC per GPU: 72 NICs would carry 72 channels (32 at most), NVLink floor(721.8 / (48 x 71/72))
    # = floor(15.25) = 15 channels: (15, 48)
    assert ring_graph("blackwell", 72, 50.0, 48.0, 18 * 40.1) == (15, 48.0)
    # one GPU per node (a DP rail) on Hopper: 1 channel at 48, duplicated (only 1 <= 4 channels): (2, 24)
    assert ring_graph("hopper", 1, 50.0, 48.0, 18 * 20.6) == (2, 24.0)
    # Blackwell with 100 GB/s NICs and paths: speed 96, NVLink floor(721.8 / (96 x 7/8)) = 8 channels, 96 >= 50 so
    # duplicated: (16, 48)
    assert ring_graph("blackwell", 8, 100.0, 100.0, 18 * 40.1) == (16, 48.0)


def _raw_h100(tree_pattern=None):
    return config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0, calibrated=False, tree_pattern=tree_pattern)


def test_tree_caps_count_the_search_channels_on_four_nodes():
    """32 H100 on 4 nodes, 4 MiB, tree LL128: bus = min(0.92 x min(370.8, 400) = 341.14, 8 channels x perChMaxTreeBw
    36.0 = 288) = 288, then min(288 x 120/128 = 270, 8 x perChMaxTreeLL128Bw 29.0 = 232) = 232; no x0.85 on a
    balanced tree graph (``tree_pattern="balanced"``; the default 8-rail node's x0.85: test_tree_pattern_nccl52.py);
    algBw 232 / 2 = 116, x treeCorrectionFactor[LL128][log2(4 MiB / 64) = 16] = 0.8 -> 92.8 GB/s; 4,194,304 B /
    92.8 GB/s = 45.197 us. Latency 14 + 2 x (7 x 1.25 + log2(4) x 8.5) = 65.5 us.
    (With the communicator's 16 channels the caps were 576 and 464, the bus 0.85 x 347.6 = 295.5: 35.5 us.)"""
    cfg = _raw_h100("balanced")
    c = {x[1:3]: x for x in predict("all_reduce", 4 * MIB, 32, cfg, nodes=4)}
    assert c[(TREE, LL128)][4] == pytest.approx(4 * MIB / (1000 * 116.0 * 0.8))
    assert c[(TREE, LL128)][3] == pytest.approx(65.5)
    assert predict("all_reduce", 4 * MIB, 32, cfg, nodes=4)[0][1:3] == (TREE, LL128)


def test_tree_ll_takes_the_tree_cap_first_and_the_pattern_factor_after_it():
    """16 H100 on 2 nodes, 64 KiB, tree LL: min(0.92 x 370.8 = 341.14, 8 x 41.4 = 331.2) = 331.2, then min(331.2 / 3.8
    = 87.16, llMaxBw 39.0 (Intel, 2 nodes)) = 39.0; algBw 19.5 x treeCorrectionFactor[LL][log2(1024) = 10] = 0.6 ->
    11.7 GB/s: 65,536 / 11.7 = 5.6014 us on a balanced tree graph; on the 8-rail node's NCCL_TOPO_PATTERN_TREE graph
    (the default, nccl_graph.tree_pattern) x0.85 after the caps: 9.945 GB/s, 6.590 us."""
    c = {x[1:3]: x for x in predict("all_reduce", 64 << 10, 16, _raw_h100("balanced"), nodes=2)}
    assert c[(TREE, LL)][4] == pytest.approx((64 << 10) / (1000 * 39.0 / 2 * 0.6))
    c = {x[1:3]: x for x in predict("all_reduce", 64 << 10, 16, _raw_h100(), nodes=2)}
    assert c[(TREE, LL)][4] == pytest.approx((64 << 10) / (1000 * 39.0 * 0.85 / 2 * 0.6))
    assert c[(TREE, LL)][4] == pytest.approx(6.590, abs=0.001)


def test_one_gpu_per_node_keeps_the_tree_pattern_factor():
    """4 H100 on 4 nodes (one per node: NCCL_TOPO_PATTERN_TREE), 1 MiB, tree Simple: bus = min(0.92 x 50 = 46, 2 search
    channels x 36.0 = 72) = 46, x0.85 = 39.1; algBw 19.55 x treeCorrectionFactor[Simple][log2(16384) = 14] = 0.5 ->
    9.775 GB/s: 1,048,576 / 9.775 = 107.27 us."""
    c = {x[1:3]: x for x in predict("all_reduce", MIB, 4, _raw_h100(), nodes=4)}
    assert c[(TREE, SIMPLE)][4] == pytest.approx(MIB / (1000 * 46 * 0.85 / 2 * 0.5))


def test_nvls_tree_cap_counts_one_channel_per_head():
    """8 H100 per node, 50 GB/s NICs: NVLSTree's cap is 8 heads x perChMaxNVLSTreeBw, 8 x 45.5 = 364 on 4 nodes (the
    NICs 400, NVLS 590.99) and 8 x 57.7 = 461.6 on 2 (NICs 800): NVIDIA/nccl-tests#309 measured 365 and 468 GB/s at
    8 GiB. NCCL's own choice on 4 nodes at 8 GiB is then the ring (Simple, algBw min(370.8, 400) x 32/62 = 191.4,
    against NVLSTree's 364 x 32/62 = 187.9)."""
    cfg = _raw_h100()
    bw = 18 * 20.6
    assert nvls_tree_bus(cfg, bw, 8, 4) == pytest.approx(364.0)
    assert nvls_tree_bus(cfg, bw, 8, 2) == pytest.approx(461.6)
    best = predict("all_reduce", 8 << 30, 32, cfg, nodes=4)
    assert best[0][1:3] == ("ring", SIMPLE)
    assert best[1][1:3] == (NVLS_TREE, SIMPLE)


def test_ring_bus_is_nccls_channels_times_speed():
    # tuning.cc (v2.26.2-1 lines 250-253): busBw = nChannels x bw; the ring graph of 8 H100 with 8 NDR NICs: 8 x 48
    from astra_gpu_model.nccl_graph import ring_bus

    assert ring_bus(*ring_graph("hopper", 8, 50.0, 48.0, 18 * 20.6)) == pytest.approx(384.0)
    assert ring_bus(*ring_graph("ampere", 8, 25.0, 24.0, 12 * 20.0)) == pytest.approx(192.0)


def test_release_pick_ranks_the_ring_by_nccls_own_bus_bandwidth():
    """32 H100 on 4 nodes, 256 MiB, NCCL 2.26's pick. Ring Simple as 2.26 ranks it: latency (8.4 + 56 x max(3.4, 3 x 1.0)
    + 6 x 14) x 1.4 (the ring's plateau) = 395.92 us; algBw 8 x 48 x 32/62 = 198.19 GB/s: 268,435,456 / 198.19e3 =
    1354.42 -> 1750.34 us. NVLSTree (2.26): 25 + 2 x 2 x 14 = 81 us + 268,435,456 / (8 x min(40, 48/2) x 5/6 = 160e3) =
    1758.72 us. So 2.26 runs the ring (with the NVLink bound 370.8 the ring was 1798.5 and NVLSTree won). Master's pick
    does not change (its NVLSTree is 1537.4 us), nor the ring's own time: the pick is timed with master's terms."""
    from dataclasses import replace

    from astra_gpu_model import nccl, nccl_tuning

    raw = config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0, calibrated=False, tuning=nccl_tuning.V2_26)
    cands = {c[1:3]: c for c in predict("all_reduce", 256 * MIB, 32, raw, nodes=4)}
    ring = cands[("ring", SIMPLE)]
    assert ring[3] == pytest.approx((8.4 + 56 * 3.4 + 6 * 14.0) * 1.4)
    assert ring[4] == pytest.approx(256 * MIB / (1000 * 8 * 48.0 * 32 / 62))
    assert ring[0] == pytest.approx(1750.34, abs=0.01)
    assert cands[(NVLS_TREE, SIMPLE)][0] == pytest.approx(81.0 + 256 * MIB / 160e3)
    assert predict("all_reduce", 256 * MIB, 32, raw, nodes=4)[0][1:3] == ("ring", SIMPLE)
    master = replace(raw, tuning=nccl_tuning.MASTER)
    assert predict("all_reduce", 256 * MIB, 32, master, nodes=4)[0][1:3] == (NVLS_TREE, SIMPLE)
    timed = nccl.collective_time_us("all_reduce", 256 * MIB, 32, replace(raw, calibrated=True), 4)
    ring_master = {c[1:3]: c for c in predict("all_reduce", 256 * MIB, 32, master, nodes=4)}[("ring", SIMPLE)]
    cal = replace(raw, calibrated=True).correction()
    assert timed[1:] == ("ring", SIMPLE)
    assert timed[0] == pytest.approx(cal.overhead_us + cal.latency_scale * ring_master[3] + ring_master[4])
