"""NCCL's all-to-all inside one NVSwitch node: grouped sends to every peer (issue 36).

Hand-computed against NVIDIA's sources: a rank's part for itself is a copy inside the GPU (``selfSend`` in
``addP2pToPlan``, src/enqueue.cc at NVIDIA/nccl 5067397), so (n - 1) / n of the buffer crosses NVLink, which is what
nccl-tests' busBw counts (busBw = algBw x (n - 1) / n, S. Jeaugey, NVIDIA/nccl-tests#130); a send runs LL or Simple, never LL128 (same
file); and on H100 the non-all-reduce operations show "an effective NVLink bandwidth of 370GB/s" as busBw
(S. Jeaugey, NVIDIA/nccl-tests#212).
"""

import pytest

from astra_gpu_model.nccl import (
    ALL_TO_ALL, LL, P2P_LL_THRESHOLD, P2P_PROTOCOLS, SIMPLE, collective_time_us, config_for_gpu,
)

MIB = 1 << 20
GIB = 1 << 30
#: NCCL's bwIntra on H100: 18 links x 20.6 GB/s (450 GB/s per direction x 20.6 / 25)
H100_BW_INTRA = 370.8
#: baseLatencies[RING][Simple] + 7 x hwLatencies[NVLINK][RING][Simple] (tuning.cc), µs
SIMPLE_LAT_8 = 8.4 + 7 * 3.4


def _h100(**kw):
    return config_for_gpu("H100-SXM5-80GB", **kw)


def test_never_ll128():
    """NCCL's sends run LL or Simple, never LL128: at 16 MiB on 8 H100 (2 MiB a peer) the ring tuning's LL128 pick is
    gone, Simple's 91.8 µs runs; LL stays where it is the faster (128 KiB, 16 KiB a peer: NCCL's LL too)."""
    assert P2P_PROTOCOLS == (LL, SIMPLE) and P2P_LL_THRESHOLD == 16384
    cfg = _h100()
    protos = {collective_time_us(ALL_TO_ALL, 1 << k, 8, cfg)[2] for k in range(10, 34)}
    assert protos <= {LL, SIMPLE}
    assert collective_time_us(ALL_TO_ALL, 8 * P2P_LL_THRESHOLD, 8, cfg)[2] == LL
    assert collective_time_us(ALL_TO_ALL, 16 * MIB, 8, cfg)[1:] == ("ring", SIMPLE)
    assert collective_time_us(ALL_TO_ALL, 16 * MIB, 8, cfg)[0] == pytest.approx(91.8, abs=0.05)


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


def test_blackwell_borrows_hoppers_calibration():
    """8 B200 (no published all-to-all sweep: nccl.py's note): NCCL's Blackwell link, 900 x 40.1 / 50 = 721.8 GB/s,
    seven eighths of 256 MiB over it, at Hopper's fitted ring/Simple factor 0.71584 with its overhead 2.3225 us and
    latency scale 1.06154 on the ring's 8.4 + 7 x 3.4 us."""
    size = 256 * MIB
    time_us, algo, proto = collective_time_us(ALL_TO_ALL, size, 8, config_for_gpu("B200"))
    hand = 2.3225 + 1.06154 * SIMPLE_LAT_8 + size / (1000 * 721.8 * 8 / 7) / 0.71584
    assert (algo, proto) == ("ring", SIMPLE) and time_us == pytest.approx(hand, rel=1e-9)
