"""NCCL 2.26's choice across nodes (``--nccl-version``), hand-computed from NVIDIA/nccl v2.26.2-1's tuning.cc/search.cc."""

import pytest

from astra_gpu_model import nccl, nccl_tuning
from astra_sim.errors import ConfigError

H100 = "H100-SXM5-80GB"
SM90 = nccl_tuning.SPEEDS_INTER_226["sm90"]


def test_versions():
    assert nccl_tuning.tuning_for_version(None) == nccl_tuning.MASTER
    assert nccl_tuning.tuning_for_version("2.26.2") == nccl_tuning.V2_26
    assert nccl_tuning.tuning_for_version("v2.26.6-1") == nccl_tuning.V2_26
    with pytest.raises(ConfigError):
        nccl_tuning.tuning_for_version("2.27.3")


def test_nvls_graph_h100_eight_nics():
    # NVL 18 x 20.6 = 370.8 GB/s, path min(NIC 50, PCIe Gen5 48) = 48. (n + 1) x speed <= 370.8: 48 -> 6 channels,
    # 45 -> 7 (more: kept), 42 -> 7, 40 -> 8 = every GPU (perfect, stop). Pass 2: bwInter 40 -> 42 -> 45 -> 48.
    assert nccl_tuning.nvls_graph(SM90, 8, 50.0, 48.0, 370.8) == (8, 40.0, 48.0)


def test_nvls_graph_nvl72():
    # 72 GPUs, NVL 18 x 40.0 = 720: 48 -> 14, 45 -> 15, 42 -> 16, 40 -> 17, 30 -> 23, 24 -> 29, 22 -> 31, 20 -> 35,
    # capped at 32 (NCCL_MAX_NVLS_ARITY): perfect at 20. Pass 2 raises bwInter to 40 (not below 2 x 20).
    assert nccl_tuning.nvls_graph(SM90, 72, 50.0, 48.0, 720.0) == (32, 20.0, 40.0)


def test_nvls_tree_terms_hopper():
    # 4 nodes: 25 + 2 x log2i(4) x 14 = 81 us; 8 x min(40, 48 / 2) x 5/6 = 160 GB/s.
    lat, alg = nccl_tuning.nvls_tree_terms("hopper", 8, 4, 50.0, 48.0, 370.8)
    assert lat == pytest.approx(81.0)
    assert alg == pytest.approx(160.0)
    # 2 nodes: 25 + 2 x 14 = 53 us; 8 x min(40, 48) x 5/6 = 266.67 GB/s.
    lat, alg = nccl_tuning.nvls_tree_terms("hopper", 8, 2, 50.0, 48.0, 370.8)
    assert lat == pytest.approx(53.0)
    assert alg == pytest.approx(8 * 40 * 5 / 6)


def test_pick_by_2_26_timed_by_master():
    # 4 x 8 H100, 4 MiB. NCCL 2.26: NVLSTree 81 + 4194304 / 160e3 = 107.2 us beats tree LL128 (110.7 us, the same
    # terms in both releases): NVLSTree runs. Master's model picks tree LL128 (its NVLSTree: 108.6 us latency).
    raw = nccl.config_for_gpu(H100, calibrated=False, tuning=nccl_tuning.V2_26)
    top = nccl.predict("all_reduce", 4 << 20, 32, raw, 4)[0]
    assert top[1:3] == (nccl.NVLS_TREE, nccl.SIMPLE)
    assert top[0] == pytest.approx(81.0 + (4 << 20) / 160e3)
    master = nccl.config_for_gpu(H100)
    assert nccl.collective_time_us("all_reduce", 4 << 20, 32, master, 4)[1] == nccl.TREE
    cfg = nccl.config_for_gpu(H100, tuning=nccl_tuning.V2_26)
    t_us, algo, proto = nccl.collective_time_us("all_reduce", 4 << 20, 32, cfg, 4)
    assert (algo, proto) == (nccl.NVLS_TREE, nccl.SIMPLE)
    cal = cfg.correction()
    # the latency it is timed with is master's: 25 + 2 x 2 x 20.9 = 108.6 us, calibrated
    assert nccl.latency_us("all_reduce", 4 << 20, 32, cfg, 4) == pytest.approx(cal.overhead_us + cal.latency_scale * 108.6)
    assert t_us > nccl.collective_time_us("all_reduce", 4 << 20, 32, master, 4)[0]


def test_one_node_and_default_unchanged():
    cfg = nccl.config_for_gpu(H100, tuning=nccl_tuning.V2_26)
    master = nccl.config_for_gpu(H100)
    for size in (1 << 10, 1 << 20, 1 << 30):
        assert nccl.collective_time_us("all_reduce", size, 8, cfg, 1) == nccl.collective_time_us("all_reduce", size, 8,
                                                                                                  master, 1)
    assert nccl.config_for_options({}).tuning == nccl_tuning.MASTER
    assert nccl.config_for_options({"nccl_version": "2.26.2"}).tuning == nccl_tuning.V2_26


def test_blackwell_caps_2_26():
    caps = nccl_tuning.caps(nccl.ARCH["blackwell"], "blackwell", nccl_tuning.V2_26, 2)
    assert caps["ring_ll128"] == (73.4, 73.4, 73.4)
    assert caps["tree_ll128"][2] == pytest.approx(58.0)
    assert caps["link"] == 40.0
    assert nccl_tuning.caps(nccl.ARCH["blackwell"], "blackwell", nccl_tuning.V2_26, 1) is nccl.ARCH["blackwell"]


def test_size_channels():
    from astra_gpu_model.nccl_graph import size_channels

    # tree LL: 512 threads x 8 B a channel: 8 KiB < 3 x 4096 -> 2 channels; 64 KiB = 16 x 4096 -> all 16; 1 KiB -> 1.
    assert size_channels("tree", "LL", 8192, 16, 16) == 2
    assert size_channels("tree", "LL", 65536, 16, 16) == 16
    assert size_channels("tree", "LL", 1024, 16, 16) == 1
    # ring LL's threshold is per rank: 16 ranks, 512 KiB < 9 x 512 x 8 x 16 -> 8; ring Simple 512 x 64: 256 KiB -> 8.
    assert size_channels("ring", "LL", 512 << 10, 16, 16) == 8
    assert size_channels("ring", "Simple", 256 << 10, 16, 16) == 8
    # LL128 640 x 8: 512 KiB keeps 16; NVLSTree is not a ring or tree: its channels are the NVLS CTAs
    assert size_channels("tree", "LL128", 512 << 10, 16, 16) == 16
    assert size_channels("nvls_tree", "Simple", 1024, 16, 16) == 16


def test_small_allreduce_across_nodes_runs_on_fewer_channels():
    # 2 x 8 H100, 8 KiB: tree LL, its bus bandwidth min(min(0.92 x 370.8, 8 x 41.4) / 3.8, llMax 39) = 39 GB/s, x0.85
    # (the 8-rail node's NCCL_TOPO_PATTERN_TREE graph, nccl_graph.tree_pattern) = 33.15, algBw 16.575 x treeCorrection
    # LL[7] 0.7 = 11.6025 GB/s: 0.7061 us on NCCL's 16 channels, 8 x that on the 2 it runs.
    cfg = nccl.config_for_gpu(H100)
    _, algo, proto, lat, bw_us = nccl.predict("all_reduce", 8192, 16, cfg, 2)[0]
    assert (algo, proto) == (nccl.TREE, nccl.LL)
    assert bw_us == pytest.approx(8192 / 11602.5)
    cal = cfg.correction()
    t_us = nccl.collective_time_us("all_reduce", 8192, 16, cfg, 2)[0]
    assert t_us == pytest.approx(cal.overhead_us + cal.latency_scale * lat + 8 * bw_us)
    # one node keeps the calibrated time (the fit's sweeps ran on NCCL's own channels)
    one = nccl.predict("all_reduce", 8192, 8, cfg, 1)[0]
    eff = cal.efficiency_for("nvswitch", one[1], one[2])
    assert nccl.collective_time_us("all_reduce", 8192, 8, cfg, 1)[0] == pytest.approx(
        cal.overhead_us + cal.latency_scale * one[3] + one[4] / eff)
