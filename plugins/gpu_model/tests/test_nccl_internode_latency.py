"""NCCL across nodes on Hopper: the network step's latency per protocol and the NVLSTree candidate. Every expected
value is computed by hand from NCCL's constants (src/graph/tuning.cc, NVIDIA/nccl 5067397) as ``nccl.py`` names
them."""

from __future__ import annotations

import pytest

from astra_gpu_model import nccl
from astra_gpu_model.nccl import (
    ALL_REDUCE, LL, NVLS_TREE, RING, SIMPLE, TREE, collective_time_us, config_for_gpu, predict,
)

GIB = 1 << 30
MIB = 1 << 20


def _raw_h100(**kw):
    return config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0, calibrated=False, **kw)


def _cands(size, n, nodes, cfg=None):
    return {c[1:3]: c for c in predict(ALL_REDUCE, size, n, cfg or _raw_h100(), nodes=nodes)}


def test_simple_pays_the_network_latency_once():
    """2 nodes x 8 H100, 1 MiB. NCCL: interLat = hwLatencies[NET] + latencyInter (+ latencyInter again for Simple),
    and InfiniBand's latencyInter is 0: Simple's network step costs 14 us once, not twice.
    Ring Simple: 8.4 + (30 - 2) x max(3.4, 3 x 1.0) + 2 x 14.0 = 131.6, x 1.4 (Hopper's plateau: 1 MiB / (16 x 16)
    >= 64) = 184.24 (the model's former doubling gave 223.44).
    Tree Simple: 8.4 + 2 x ((8 - 1) x 4.0 + log2(2) x 14.0) = 92.4 (former: 120.4)."""
    c = _cands(MIB, 16, 2)
    assert nccl.NET_PLUGIN_LATENCY_US == 0.0
    assert c[(RING, SIMPLE)][3] == pytest.approx(131.6 * 1.4)
    assert c[(TREE, SIMPLE)][3] == pytest.approx(92.4)


def test_a_plugin_latency_counts_once_and_twice_for_simple(monkeypatch):
    """A network plugin reporting 2 us: LL's network step 2.7 + 2 = 4.7, Simple's 14 + 2 x 2 = 18 (ring, 2 nodes:
    2 network steps). Ring LL: 6.6 + 28 x max(0.6, 1.0) + 2 x 4.7 = 44.0; ring Simple: (8.4 + 28 x 3.4 + 2 x 18) x
    1.4 = 195.44."""
    monkeypatch.setattr(nccl, "NET_PLUGIN_LATENCY_US", 2.0)
    c = _cands(MIB, 16, 2)
    assert c[(RING, LL)][3] == pytest.approx(44.0)
    assert c[(RING, SIMPLE)][3] == pytest.approx((8.4 + 28 * 3.4 + 36.0) * 1.4)


def test_hopper_nvls_tree_terms_on_two_and_four_nodes():
    """NCCL's NVLSTree on 8 H100 per node with 8 x 50 GB/s NICs.
    2 nodes: latency 25 (NVLink NVLSTree) + 2 x log2(2) x 20.9 (NET NVLSTree) = 66.8; bus = min(NVLS 370.8 x 0.85 x
    15/16 x 2 = 590.99, NICs 8 x 50 x 2 (two nodes) = 800, 8 NVLS channels (one per head) x 57.7 = 461.6) = 461.6;
    algBw = bus x 16/30.
    4 nodes: latency 25 + 2 x 2 x 20.9 = 108.6; bus = min(590.99, 8 x 50 = 400, 8 x 45.5 = 364) = 364; algBw = bus x
    32/62."""
    two = _cands(8 * GIB, 16, 2)[(NVLS_TREE, SIMPLE)]
    assert two[3] == pytest.approx(66.8)
    assert two[4] == pytest.approx(8 * GIB / (1000 * 461.6 * 16 / 30))
    four = _cands(8 * GIB, 32, 4)[(NVLS_TREE, SIMPLE)]
    assert four[3] == pytest.approx(108.6)
    assert four[4] == pytest.approx(8 * GIB / (1000 * 364.0 * 32 / 62))


def test_hopper_picks_nvls_tree_for_large_sizes_and_tree_ll_for_small():
    """NCCL's own choice on 2 nodes: NVLSTree at 8 GiB (27,253 us against the ring's bus min(370.8, 400): 43,436 us),
    tree LL at 1 KiB (latency 6.8 + 2 x (7 x 0.6 + 5.0) = 25.2 us, the lowest)."""
    assert predict(ALL_REDUCE, 8 * GIB, 16, _raw_h100(), nodes=2)[0][1] == NVLS_TREE
    small = predict(ALL_REDUCE, 1024, 16, _raw_h100(), nodes=2)[0]
    assert small[1:3] == (TREE, LL)
    assert small[3] == pytest.approx(6.8 + 2 * (7 * 0.6 + 5.0))


def test_calibrated_two_node_h100_reaches_the_nvls_peak():
    """Calibrated, 2 nodes, 8 GiB: NVLSTree past 64 MB at NCCL's own cap, 8 NVLS channels x perChMaxNVLSTreeBw 57.7 =
    461.6 GB/s busbw (under the NVLS peak, 480, and the NICs, 8 x 50 x 0.96 x 2 = 768), the first 64 MB at NVLS's
    fitted factor (370.8 x 0.85 x 15/16 x 2 x 0.59263 = 350.2, below the cap), plus the latency: 455-462 GB/s
    (measured 468 on NVIDIA/nccl-tests#309). Without the candidate the ring gave 369 GB/s."""
    t, algo, proto = collective_time_us(ALL_REDUCE, 8 * GIB, 16, config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0), 2)
    assert (algo, proto) == (NVLS_TREE, SIMPLE)
    busbw = 8 * GIB * 2 * 15 / 16 / (t * 1e3)
    assert 455.0 < busbw < 461.6
