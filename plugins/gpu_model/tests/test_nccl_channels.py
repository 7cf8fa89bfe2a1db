"""A communicator's CTA cap (the trace node's ``comm_sms``: NCCL_MAX_CTAS / ``maxCTAs``) limits its NCCL bandwidth:
one channel runs on one CTA, and NCCL's model takes a collective's bandwidth as channels x a channel's bandwidth
(src/graph/tuning.cc: ``bw = bw / comm->nChannels * info->nChannels``, NVIDIA/nccl v2.18.3-1)."""

from __future__ import annotations

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import WorkloadError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_gpu_model.nccl import (NVLS, RING, SIMPLE, collective_time_us, config_for_gpu, cta_share, predict)

GIB = 1 << 30


def _ring_only_h100():
    """NCCL's own (uncalibrated) model of 8 H100 on NVSwitch with NVLS off: a ring all-reduce at 1 GiB."""
    return config_for_gpu("H100-SXM5-80GB", calibrated=False, nvls=False)


@pytest.mark.parametrize("ctas, factor", [(None, 1), (16, 1), (32, 1), (8, 2), (4, 4), (0, 1)])
def test_ring_all_reduce_of_1_gib_on_8_h100_at_16_8_4_channels(ctas, factor):
    """Hand-computed: bwIntra = 18 links x 20.6 GB/s (NCCL's sm90 NVLink) = 370.8 GB/s busBw on 16 channels, i.e.
    23.175 GB/s a channel; algBw = busBw x 8 / 14 (2 (n - 1) steps); Simple latency 8.4 + 14 x 3.4 = 56.0 us.
    8 CTAs carry 8 x 23.175 = 185.4 GB/s busBw, 4 carry 92.7; 0 (a copy engine) and caps >= 16 change nothing."""
    cfg = _ring_only_h100()
    assert cfg.channels == 16
    t_us, algo, proto = collective_time_us("all_reduce", GIB, 8, cfg, ctas=ctas)
    assert (algo, proto) == (RING, SIMPLE)
    per_channel_gbps = 18 * 20.6 / 16
    channels = 16 // factor
    bus_gbps = channels * per_channel_gbps
    alg_gbps = bus_gbps * 8 / 14
    expected_us = (8.4 + 14 * 3.4) + GIB / (alg_gbps * 1e3)
    assert t_us == pytest.approx(expected_us, rel=1e-9)
    # the numbers themselves, for the record: 5123.5 us at 16 CTAs, 10191.0 at 8, 20326.0 at 4
    assert t_us == pytest.approx({1: 5123.5, 2: 10191.0, 4: 20326.0}[factor], abs=0.5)


def test_the_calibrated_time_slows_only_its_bandwidth_part():
    """With the fitted calibration the latency and overhead stay; the bandwidth part (fitted factor up to 64 MB, the
    peak statement's past it) is divided by the CTA share."""
    cfg = config_for_gpu("H100-SXM5-80GB", nvls=False)
    full = collective_time_us("all_reduce", GIB, 8, cfg)[0]
    half = collective_time_us("all_reduce", GIB, 8, cfg, ctas=8)[0]
    cal = cfg.correction()
    lat = next(c[3] for c in predict("all_reduce", GIB, 8, cfg) if c[1:3] == (RING, SIMPLE))
    fixed_us = cal.overhead_us + cal.latency_scale * lat
    assert half - fixed_us == pytest.approx(2 * (full - fixed_us), rel=1e-9)


def test_nccls_choice_is_made_on_the_uncapped_channels():
    """NCCL tunes once, at init, from the search's channels (maxCTAs does not change them), so a cap never changes
    the algorithm or protocol; NVLS's bandwidth has no channel term in NCCL's model and stays."""
    cfg = config_for_gpu("H100-SXM5-80GB")
    for k in range(10, 31, 2):
        assert collective_time_us("all_reduce", 1 << k, 8, cfg, ctas=2)[1:] == collective_time_us(
            "all_reduce", 1 << k, 8, cfg)[1:]
    t, algo, _ = collective_time_us("all_reduce", GIB, 8, cfg, ctas=4)
    assert algo == NVLS and t == collective_time_us("all_reduce", GIB, 8, cfg)[0]
    assert cta_share(NVLS, cfg, 4) == 1.0
    # all-to-all is send/receive: maxCTAs does not cap its CTAs (NVIDIA/nccl#2421)
    for nodes in (1, 2):
        assert collective_time_us("all_to_all", GIB, 16 if nodes == 2 else 8, cfg, nodes, ctas=2) == \
            collective_time_us("all_to_all", GIB, 16 if nodes == 2 else 8, cfg, nodes)


def test_across_nodes_ring_and_tree_scale_with_the_cap():
    """2 x 8 H200, 400 Gb/s NICs, NVLS off (NCCL_NVLS_ENABLE=0: else NVLSTree, which no CTA cap scales, wins at this
    size): the all-reduce NCCL picks (ring or tree) keeps ctas / 16 of its bandwidth."""
    cfg = config_for_gpu("H200-SXM", calibrated=False, nvls=False)
    size = 256 << 20
    best = predict("all_reduce", size, 16, cfg, nodes=2)[0]
    full = collective_time_us("all_reduce", size, 16, cfg, 2)
    capped = collective_time_us("all_reduce", size, 16, cfg, 2, ctas=8)
    assert full[1:] == capped[1:] == best[1:3]
    assert capped[0] == pytest.approx(best[3] + 2 * best[4], rel=1e-9)


def _run(tmp_path, attrs, npus=8, size=256 << 20):
    tmp_path.mkdir(parents=True, exist_ok=True)
    sys_path = write_system_config(tmp_path / "sys.json", algorithm="nccl", preferred_dataset_splits=1)
    net = write_network_config(tmp_path / "net.yml", ("Switch",), (npus,), (450.0,), (500.0,))
    nodes = [make_node(1, "ag", T.COMM_COLL_NODE,
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_GATHER, "comm_size": size // npus, **attrs})]
    for rank in range(npus):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    return simulate(str(tmp_path / "t"), sys_path, net, plugins=["network_analytical", "gpu_model"],
                    compute_model="gpu", options={"gpu": "H100-SXM5-80GB"})


def test_a_run_prices_the_collective_with_its_nodes_comm_sms(tmp_path):
    """The run path: an all-gather node with ``comm_sms`` 4 is timed by the NCCL model at 4 of 16 channels."""
    size = 256 << 20
    cfg = config_for_gpu("H100-SXM5-80GB")
    times = {}
    for sms in (None, 4):
        report = _run(tmp_path / str(sms), {} if sms is None else {"comm_sms": sms}, size=size)
        times[sms] = report.max_finish_ns
        assert times[sms] == pytest.approx(collective_time_us("all_gather", size, 8, cfg, ctas=sms)[0] * 1000,
                                           rel=0.01, abs=20_000)
    assert times[4] > 3 * times[None]


def test_a_bad_comm_sms_attribute_names_the_node(tmp_path):
    with pytest.raises(WorkloadError, match="comm_sms"):
        _run(tmp_path, {"comm_sms": -3})
