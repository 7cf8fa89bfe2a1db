"""``--nccl-nvls off``: NCCL_NVLS_ENABLE=0, which takes NVLS and NVLSTree out of NCCL's choice (issue 36).

NCCL (src/transport/nvls.cc, NVIDIA/nccl v2.26.2-1 lines 147-171) leaves ``comm->nvlsSupport = 0`` when
NCCL_NVLS_ENABLE is 0, and its cost table then skips both algorithms (src/enqueue.cc updateCollCostTable: ``if ((a ==
NCCL_ALGO_NVLS || a == NCCL_ALGO_NVLS_TREE) && nvlsSupport != 1 && info->func != ncclFuncAllGather) continue;``).
CoreWeave's 20-rack GB200 sweep ran so (coreweave/nccl-tests 5ceab10, slurm/nccl-test-distributed-gb200-nvl72-
enroot.slurm: ``export NCCL_NVLS_ENABLE=0``)."""

import pytest

from astra_gpu_model import nccl, nccl_tuning

H100 = "H100-SXM5-80GB"
MIB = 1 << 20


def test_the_option_reaches_the_config():
    assert nccl.config_for_options({"gpu": H100}).nvls is True
    assert nccl.config_for_options({"gpu": H100, "nccl_nvls": "on"}).nvls is True
    off = nccl.config_for_options({"gpu": H100, "nccl_nvls": "off", "nccl_version": "2.26.2"})
    assert off.nvls is False and off.tuning == nccl_tuning.V2_26


def test_nvls_off_leaves_ring_and_tree():
    """2 x 8 H100, 32 MiB, NCCL 2.26's pick. With NVLS: NVLSTree, 53 + 33,554,432 / 266.7e3 = 178.8 us. Without:
    ring LL128, bus min(0.92 x 8 x 48 = 353.28, 8 x 36.7 = 293.6) = 293.6, algBw 293.6 x 16/30 = 156.59 GB/s:
    214.28 us, latency 14 + 28 x 1.9 + 2 x 4.0 = 75.2 us; 289.48 us (tree LL128 302.5 is next)."""
    on = nccl.config_for_gpu(H100, calibrated=False, tuning=nccl_tuning.V2_26)
    off = nccl.config_for_options({"gpu": H100, "nccl_nvls": "off", "nccl_version": "2.26.2"})
    from dataclasses import replace

    off = replace(off, calibrated=False)
    assert nccl.predict("all_reduce", 32 * MIB, 16, on, 2)[0][1] == nccl.NVLS_TREE
    cands = nccl.predict("all_reduce", 32 * MIB, 16, off, 2)
    assert all(c[1] not in (nccl.NVLS, nccl.NVLS_TREE) for c in cands)
    assert cands[0][1:3] == (nccl.RING, nccl.LL128)
    assert cands[0][0] == pytest.approx(75.2 + 32 * MIB / (1000 * 293.6 * 16 / 30))
    # one node: NVLS goes too, a ring runs
    assert all(c[1] != nccl.NVLS for c in nccl.predict("all_reduce", 32 * MIB, 8, off, 1))
