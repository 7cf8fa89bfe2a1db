"""NCCL's treeCorrectionFactor stops below 512 MiB (issue 36).

ncclTopoGetAlgoTime (src/graph/tuning.cc) multiplies a tree all-reduce's bandwidth by
``treeCorrectionFactor[protocol][logSize]`` only for ``logSize = log2i(nBytes >> 6) < 23``: NVIDIA/nccl v2.26.2-1
line 538, master 5067397 line 640, and every tag read in between (v2.18.1-1 ... v2.29.7-1). So index 22 (256 MiB to
512 MiB) is the last one the tree reads; master's 24th entry is read only by NVLSTree (Blackwell on x86)."""

import pytest

from astra_gpu_model import nccl, nccl_tuning
from astra_gpu_model.nccl import SIMPLE, TREE, config_for_gpu, predict

SIZE_512M = 1 << 29


def _tree_simple(n_bytes, tuning=nccl_tuning.MASTER):
    # a balanced tree graph (no x0.85 of NCCL_TOPO_PATTERN_TREE: test_tree_pattern_nccl52.py), this file's subject
    # being the correction factor alone
    cfg = config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0, calibrated=False, tuning=tuning, tree_pattern="balanced")
    return next(c for c in predict("all_reduce", n_bytes, 16, cfg, nodes=2) if c[1:3] == (TREE, SIMPLE))


@pytest.mark.parametrize("tuning", [nccl_tuning.MASTER, nccl_tuning.V2_26])
def test_tree_correction_applies_below_512_mib_only(tuning):
    """16 H100 on 2 nodes (8 NDR NICs each), tree Simple: bus min(0.92 x min(18 x 20.6, 8 x 50) = 341.14, 8 search
    channels x perChMaxTreeBw[2 nodes] 41.4 = 331.2) = 331.2, algBw 331.2 / 2 = 165.6 GB/s.
    * 512 MiB - 64 B: (2^29 - 64) >> 6 = 2^23 - 1, log2i 22 < 23: x treeCorrectionFactor[Simple][22] 0.9 = 149.04 GB/s,
      536,870,848 B / 149.04 GB/s = 3602.19 us;
    * 512 MiB: 2^29 >> 6 = 2^23, log2i 23: no factor, 536,870,912 B / 165.6 GB/s = 3241.97 us (the model's former
      ``< 24`` read index 23, Simple 0.9: 3602.19 us)."""
    below = _tree_simple(SIZE_512M - 64, tuning)
    at = _tree_simple(SIZE_512M, tuning)
    assert below[4] == pytest.approx((SIZE_512M - 64) / (1000 * 165.6 * 0.9))
    assert below[4] == pytest.approx(3602.19, abs=0.01)
    assert at[4] == pytest.approx(SIZE_512M / (1000 * 165.6))
    assert at[4] == pytest.approx(3241.97, abs=0.01)


def test_the_bound_is_nccls_log2i():
    # 63 B: nBytes >> 6 = 0, log2Down(0) = -1 (src/include/bitops.h v2.26.2-1): no factor; 64 B: index 0 (Simple 0.9)
    assert nccl.TREE_CORRECTION_SIZES == 23
    assert _tree_simple(63)[4] == pytest.approx(63 / (1000 * 165.6))
    assert _tree_simple(64)[4] == pytest.approx(64 / (1000 * 165.6 * 0.9))
