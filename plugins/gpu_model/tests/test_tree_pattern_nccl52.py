"""NCCL's tree graph pattern across nodes and its x0.85 (issue 36, session 52).

NCCL's search (src/graph/search.cc ncclTopoCompute, NVIDIA/nccl v2.26.2-1 l. 1053-1057, master 5067397 l. 1215-1218)
falls back from a balanced tree to NCCL_TOPO_PATTERN_TREE on sm90+ where no second GPU reaches a NIC at the first
path type; tuning.cc then takes ``busBw *= .85`` for every tree protocol (v2.26.2-1 l. 261, master l. 336). An 8-rail
Hopper/Blackwell node (one NIC per GPU, each on its own PCIe switch) is that case. Hand-computed values below."""

import pytest

from astra_gpu_model import nccl, nccl_graph, nccl_tuning
from astra_gpu_model.nccl import LL128, NVLS_TREE, SIMPLE, TREE, config_for_gpu, config_for_options, predict

H100 = "H100-SXM5-80GB"
KIB = 1024


def test_pattern_by_architecture_node_and_override():
    tp = nccl_graph.tree_pattern
    assert tp("hopper", 8, 2, "nvswitch") == "tree"  # sm90 fallback, 8-rail node
    assert tp("blackwell", 8, 4, "nvswitch") == "tree"  # ccMin >= 90 includes sm100
    assert tp("ampere", 8, 2, "nvswitch") == "balanced"  # no fallback before sm90
    assert tp("hopper", 4, 2, "pcie") == "balanced"  # not an NVSwitch node
    assert tp("hopper", 8, 2, "nvswitch", override="balanced") == "balanced"  # two GPUs per NIC switch, as stated
    assert tp("ampere", 1, 4, "nvswitch") == "tree"  # one GPU per node: "if (ngpus == 1)", any architecture
    assert tp("ampere", 1, 4, "nvswitch", override="balanced") == "tree"
    assert tp("hopper", 8, 1, "nvswitch") is None  # one node: no tree graph across nodes to read


def _tree_ll128(cfg, n_bytes, n, nodes):
    return next(c for c in predict("all_reduce", n_bytes, n, cfg, nodes) if c[1:3] == (TREE, LL128))


def test_tree_ll128_on_two_hopper_nodes_takes_the_factor():
    """16 H100 on 2 nodes (8 x 400 Gb/s NICs), 512 KiB, tree LL128: bus min(0.92 x 370.8 = 341.14, 8 x 41.4 = 331.2)
    = 331.2, min(331.2 x 120/128 = 310.5, 8 x 36.7 = 293.6) = 293.6, x0.85 = 249.56; algBw 124.78 x
    treeCorrectionFactor[LL128][log2(8192) = 13] 0.6 = 74.868 GB/s: 524,288 B / 74.868 GB/s = 7.0028 us; balanced:
    88.08 GB/s, 5.9524 us. Latency 14 + 2 x (7 x 1.25 + 8.5) = 48.5 us either way."""
    raw = config_for_gpu(H100, nic_gbps=50.0, calibrated=False)
    tree = _tree_ll128(raw, 512 * KIB, 16, 2)
    assert tree[4] == pytest.approx(512 * KIB / (1000 * 293.6 * 0.85 / 2 * 0.6))
    assert tree[4] == pytest.approx(7.0028, abs=1e-4)
    assert tree[3] == pytest.approx(48.5)
    balanced = _tree_ll128(config_for_gpu(H100, nic_gbps=50.0, calibrated=False, tree_pattern="balanced"),
                           512 * KIB, 16, 2)
    assert balanced[4] == pytest.approx(5.9524, abs=1e-4)


def test_nccl_226_picks_nvls_tree_at_512_kib_on_two_nodes():
    """NCCL 2.26's choice on 2 x 8 H100 at 512 KiB: NVLSTree 25 + 2 x 14 = 53 us + 524,288 B / (8 x min(40, 48) x
    5/6 = 266.67 GB/s) = 54.966 us against tree LL128 48.5 + 7.003 = 55.503 us (balanced: 54.452, the tree wins by
    0.5 us). The measured point (NVIDIA/nccl-tests#309, 77.69 us) sits above the measured 1 MiB (71.93 us)."""
    cfg = config_for_gpu(H100, nic_gbps=50.0, calibrated=False, tuning=nccl_tuning.V2_26)
    cands = {c[1:3]: c for c in predict("all_reduce", 512 * KIB, 16, cfg, 2)}
    assert cands[(NVLS_TREE, SIMPLE)][0] == pytest.approx(53.0 + 512 * KIB / (1000 * 8 * 40 * 5 / 6))
    assert cands[(TREE, LL128)][0] == pytest.approx(48.5 + 7.0028, abs=1e-4)
    assert predict("all_reduce", 512 * KIB, 16, cfg, 2)[0][1:3] == (NVLS_TREE, SIMPLE)
    balanced = config_for_gpu(H100, nic_gbps=50.0, calibrated=False, tuning=nccl_tuning.V2_26, tree_pattern="balanced")
    assert predict("all_reduce", 512 * KIB, 16, balanced, 2)[0][1:3] == (TREE, LL128)


def test_ampere_across_nodes_keeps_the_balanced_tree():
    """8 A100 per node, 2 nodes, 64 KiB, tree LL: no x0.85 (no fallback before sm90); the same with or without the
    override."""
    a100 = config_for_gpu("A100-SXM4-80GB", nic_gbps=25.0, calibrated=False)
    said = config_for_gpu("A100-SXM4-80GB", nic_gbps=25.0, calibrated=False, tree_pattern="balanced")
    assert predict("all_reduce", 64 * KIB, 16, a100, 2) == predict("all_reduce", 64 * KIB, 16, said, 2)


def test_one_node_is_unchanged():
    cfg = config_for_gpu(H100, calibrated=False)
    said = config_for_gpu(H100, calibrated=False, tree_pattern="balanced")
    for size in (8 * KIB, 512 * KIB, 64 << 20):
        assert predict("all_reduce", size, 8, cfg, 1) == predict("all_reduce", size, 8, said, 1)


def test_the_option_sets_the_pattern_and_refuses_other_names():
    assert config_for_options({"gpu": H100}).tree_pattern is None
    assert config_for_options({"gpu": H100, "nccl_tree_pattern": "balanced"}).tree_pattern == "balanced"
    from astra_sim.errors import ConfigError

    with pytest.raises(ConfigError, match="nccl_tree_pattern"):
        config_for_options({"gpu": H100, "nccl_tree_pattern": "split"})
    assert nccl.TREE_PATTERNS == ("balanced", "tree")


def test_an_nvl72_rack_keeps_the_balanced_tree():
    """A 72-GPU NVLink domain (GB200 NVL72, Grace superchips: two GPUs share each Grace's NICs) is not an HGX board:
    balanced, no x0.85; an 8-GPU Blackwell board takes it."""
    assert nccl_graph.tree_pattern("blackwell", 72, 20, "nvswitch") == "balanced"
    assert nccl_graph.tree_pattern("blackwell", 64, 2, "nvswitch") == "balanced"
    assert nccl_graph.tree_pattern("blackwell", 8, 2, "nvswitch") == "tree"


def test_the_run_flag_reaches_the_model():
    """``astra run --nccl-tree-pattern balanced``: the run's option, so its NCCL config's pattern."""
    import argparse

    parser = argparse.ArgumentParser()
    nccl_tuning.add_env_arguments(parser)
    args = parser.parse_args(["--nccl-tree-pattern", "balanced"])
    assert config_for_options({"gpu": H100, **vars(args)}).tree_pattern == "balanced"
    assert config_for_options({"gpu": H100, **vars(parser.parse_args([]))}).tree_pattern is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--nccl-tree-pattern", "split"])
