"""NCCL's all-to-all inside one NVSwitch node: grouped sends to every peer (issue 36).

Hand-computed against NVIDIA's sources: a rank's part for itself is a copy inside the GPU (``selfSend`` in
``addP2pToPlan``, src/enqueue.cc at NVIDIA/nccl 5067397), so (n - 1) / n of the buffer crosses NVLink, which is what
nccl-tests' busBw counts (busBw = algBw x (n - 1) / n, S. Jeaugey, NVIDIA/nccl-tests#130); a send takes LL up to
NCCL_P2P_LL_THRESHOLD (16 KiB) per peer, else Simple, never LL128 (same file); and on H100 the non-all-reduce
operations show "an effective NVLink bandwidth of 370GB/s" as busBw (S. Jeaugey, NVIDIA/nccl-tests#212).
"""

import pytest

from astra_gpu_model.nccl import (
    ALL_TO_ALL, LL, P2P_LL_THRESHOLD, SIMPLE, alltoall_protocol, collective_time_us, config_for_gpu,
)

MIB = 1 << 20
GIB = 1 << 30
#: NCCL's bwIntra on H100: 18 links x 20.6 GB/s (450 GB/s per direction x 20.6 / 25)
H100_BW_INTRA = 370.8
#: baseLatencies[RING][Simple] + 7 x hwLatencies[NVLINK][RING][Simple] (tuning.cc), µs
SIMPLE_LAT_8 = 8.4 + 7 * 3.4


def _h100(**kw):
    return config_for_gpu("H100-SXM5-80GB", **kw)


def test_the_protocol_is_the_send_receive_rule():
    assert P2P_LL_THRESHOLD == 16384
    assert alltoall_protocol(8 * 16384, 8) == LL  # 16 KiB a peer
    assert alltoall_protocol(8 * 16384 + 8, 8) == SIMPLE  # 16385 B a peer
    assert alltoall_protocol(8 * MIB, 8) == SIMPLE  # 1 MiB a peer: Simple, not the ring's LL128
    for size, proto in ((8 * 16384, LL), (8 * MIB, SIMPLE), (94_400_000, SIMPLE)):
        assert collective_time_us(ALL_TO_ALL, size, 8, _h100())[2] == proto


def test_seven_eighths_cross_nvlink_uncalibrated():
    """4 GiB on 8 H100, NCCL's own constants: 4 GiB x 7/8 at 370.8 GB/s is 10135.10 µs, plus 32.2 µs of latency;
    the busbw nccl-tests would print is NCCL's 370.8 exactly."""
    t, _, proto = collective_time_us(ALL_TO_ALL, 4 * GIB, 8, _h100(calibrated=False))
    assert proto == SIMPLE
    bw_us = 4 * GIB * 7 / 8 / (H100_BW_INTRA * 1e3)
    assert bw_us == pytest.approx(10135.10, abs=0.01)
    assert t == pytest.approx(SIMPLE_LAT_8 + bw_us)
    assert 4 * GIB * 7 / 8 / ((t - SIMPLE_LAT_8) * 1e3) == pytest.approx(H100_BW_INTRA)


def test_large_busbw_is_the_maintainers_370():
    """#212: 370 GB/s busBw for non-all-reduce operations at large sizes. 8 GiB: the calibrated busbw is within 1 %."""
    t = collective_time_us(ALL_TO_ALL, 8 * GIB, 8, _h100())[0]
    assert 8 * GIB * 7 / 8 / (t * 1e3) == pytest.approx(370.0, rel=0.01)


def test_gpt_oss_dispatch_by_hand():
    """The GPT-OSS 120B EP-8 dispatch, 94.4 MB a rank: 94.4e6 x 7/8 / 370.8 GB/s = 222.76 µs of NCCL's bandwidth term;
    the first 64 MiB of it (158.36 µs) at the fitted ring Simple factor 0.71584, the rest (64.40 µs) at #212's
    0.99784; latency 2.3225 + 1.06154 x 32.2 = 36.50 µs. 322.26 µs (366.6 µs before: busbw 225 -> 256 GB/s)."""
    cal = _h100().correction()
    assert (cal.overhead_us, cal.latency_scale) == pytest.approx((2.3225, 1.06154))
    assert cal.efficiency_for("nvswitch", "ring", SIMPLE) == pytest.approx(0.71584)
    assert cal.beyond_fit["nvswitch/ring/Simple"] == pytest.approx(0.99784)
    bw_us = 94_400_000 * 7 / 8 / (H100_BW_INTRA * 1e3)
    head = bw_us * (64 * MIB) / 94_400_000
    expected = 2.3225 + 1.06154 * SIMPLE_LAT_8 + head / 0.71584 + (bw_us - head) / 0.99784
    assert expected == pytest.approx(322.26, abs=0.01)
    assert collective_time_us(ALL_TO_ALL, 94_400_000, 8, _h100())[0] == pytest.approx(expected, rel=1e-4)


def test_two_ranks_send_half():
    """2 ranks: half the buffer is the rank's own; 1 GiB / 2 at 370.8 GB/s + 8.4 + 3.4 µs."""
    t = collective_time_us(ALL_TO_ALL, GIB, 2, _h100(calibrated=False))[0]
    assert t == pytest.approx(8.4 + 3.4 + GIB / 2 / (H100_BW_INTRA * 1e3))
