"""NCCL's PAT all-gather / reduce-scatter (NCCL 2.23+) in the NCCL cost model: chosen only at one rank per node, with
tuning.cc's terms. Every expected number is worked out by hand from tuning.cc's constants (nccl.py cites them)."""

import json
import math

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_gpu_model.nccl import (
    ALL_GATHER, ALL_REDUCE, LL, LL128, PAT, REDUCE_SCATTER, RING, SIMPLE, collective_time_us, config_for_gpu, predict,
)

MIB, GIB = 1 << 20, 1 << 30


def h100(**kw):
    """H100 with one 400 Gb/s NIC per GPU (50 GB/s per direction), Intel hosts: the model's defaults."""
    return config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0, **kw)


def candidates(coll, size, n, cfg, nodes):
    return {c[1:3]: c for c in predict(coll, size, n, cfg, nodes)}


# 64 nodes of one GPU each, NCCL's own (uncalibrated) terms:
#   PAT latency  8 + log2(64) x 14 / 3.5 + 64 x 2.8 = 8 + 24 + 179.2 = 211.2 µs  (net tree Simple 14 µs, once: IB's
#                plugin latency is 0, nccl.NET_PLUGIN_LATENCY_US)
#   PAT algBw    50 x 0.75 = 37.5 GB/s
#   ring LL      6.6 + 63 x 5.0 = 321.6 µs,   algBw min(llMax 20.4, 50 / 2) x 64 / 63
#   ring LL128   14 + 63 x 8.5 = 549.5 µs,    algBw min(0.92 x 50, 16 x 36.7) x 64 / 63
#   ring Simple  8.4 + 63 x 14 = 890.4 µs,    algBw 50 x 64 / 63
PAT_LAT = 8.0 + 6 * 14.0 / 3.5 + 64 * 2.8
PAT_BW = 50.0 * 0.75
RING_LL = (6.6 + 63 * 5.0, 20.4 * 64 / 63)
RING_LL128 = (14.0 + 63 * 8.5, 46.0 * 64 / 63)
RING_SIMPLE = (8.4 + 63 * 14.0, 50.0 * 64 / 63)


def by_hand(lat_bw, size):
    lat, bw = lat_bw
    return lat + size / (1000.0 * bw)


@pytest.mark.parametrize("coll", [ALL_GATHER, REDUCE_SCATTER])
def test_small_size_at_one_gpu_per_node_picks_pat(coll):
    """1 MiB over 64 nodes: PAT 211.2 + 27.96 = 239.2 µs beats the ring's best, LL at 321.6 + 50.6 = 372.2 µs."""
    cfg = h100(calibrated=False)
    best = predict(coll, MIB, 64, cfg, nodes=64)[0]
    assert best[1:3] == (PAT, SIMPLE)
    assert best[3] == pytest.approx(PAT_LAT)
    assert best[4] == pytest.approx(MIB / (1000.0 * PAT_BW))
    assert best[0] == pytest.approx(239.16, abs=0.01)
    cands = candidates(coll, MIB, 64, cfg, 64)
    assert cands[(RING, LL)][0] == pytest.approx(by_hand(RING_LL, MIB))
    assert cands[(RING, LL)][0] == pytest.approx(372.2, abs=0.1)


@pytest.mark.parametrize("coll", [ALL_GATHER, REDUCE_SCATTER])
def test_large_size_at_one_gpu_per_node_goes_back_to_the_ring(coll):
    """1 GiB over 64 nodes: ring Simple 890.4 + 21139.3 = 22029.7 µs against PAT's 211.2 + 28633.1 = 28844.3 µs
    (PAT keeps 0.75 of the bus bandwidth, the ring gets 64/63 of it)."""
    cfg = h100(calibrated=False)
    best = predict(coll, GIB, 64, cfg, nodes=64)[0]
    assert best[1:3] == (RING, SIMPLE)
    assert best[0] == pytest.approx(by_hand(RING_SIMPLE, GIB))
    assert best[0] == pytest.approx(22029.7, abs=0.1)
    assert candidates(coll, GIB, 64, cfg, 64)[(PAT, SIMPLE)][0] == pytest.approx(28844.3, abs=0.1)


def test_the_size_limit_is_where_the_ring_catches_up():
    """At 64 nodes the ring's LL128 overtakes PAT at (549.5 - 211.2) / (1/37.5 - 1/46.73) bytes ≈ 64.2 MB: PAT at
    32 MiB, ring LL128 at 64 MiB. The limit grows with the node count (512 nodes: PAT still at 512 MiB)."""
    cfg = h100(calibrated=False)
    limit = (RING_LL128[0] - PAT_LAT) / (1 / (1000.0 * PAT_BW) - 1 / (1000.0 * RING_LL128[1]))
    assert limit == pytest.approx(64.2e6, rel=0.01)
    assert 32 * MIB < limit < 64 * MIB
    assert predict(ALL_GATHER, 32 * MIB, 64, cfg, nodes=64)[0][1:3] == (PAT, SIMPLE)
    assert predict(ALL_GATHER, 64 * MIB, 64, cfg, nodes=64)[0][1:3] == (RING, LL128)
    assert predict(ALL_GATHER, 512 * MIB, 512, cfg, nodes=512)[0][1] == PAT
    # two nodes: log2 steps save nothing (one network step either way), the ring wins at every size
    assert all(predict(ALL_GATHER, 1 << k, 2, cfg, nodes=2)[0][1] == RING for k in range(6, 34))


def test_calibrated_time_is_the_network_path_time():
    """The chosen PAT is timed like every pair across nodes: the architecture's overhead and latency scale, the
    network's efficiency 1.0 (not measured): overhead + scale x 211.2 + 27.96 µs."""
    cfg = h100()
    cal = cfg.correction()
    t_us, algo, proto = collective_time_us(REDUCE_SCATTER, MIB, 64, cfg, nodes=64)
    assert (algo, proto) == (PAT, SIMPLE)
    assert t_us == pytest.approx(cal.overhead_us + cal.latency_scale * PAT_LAT + MIB / (1000.0 * PAT_BW))


@pytest.mark.parametrize("size", [MIB, GIB])
def test_no_pat_with_eight_gpus_per_node(size):
    """64 GPUs on 8 nodes of 8: NCCL disables PAT (nNodes != nRanks); the choice and time are what they were
    without PAT."""
    with_pat, without = h100(), h100(pat=False)
    for coll in (ALL_GATHER, REDUCE_SCATTER):
        assert all(c[1] != PAT for c in predict(coll, size, 64, with_pat, nodes=8))
        assert collective_time_us(coll, size, 64, with_pat, nodes=8) == collective_time_us(coll, size, 64, without,
                                                                                             nodes=8)


def test_pat_only_for_all_gather_and_reduce_scatter_of_nccl_2_23():
    """Not for all-reduce, not on one node, not with pat=False (NCCL < 2.23 or NCCL_PAT_ENABLE=0), not on RCCL
    (its PAT_ENABLE defaults to 0). Turning it off leaves every other candidate as it was."""
    cfg = h100(calibrated=False)
    assert all(c[1] != PAT for c in predict(ALL_REDUCE, MIB, 64, cfg, nodes=64))
    assert all(c[1] != PAT for c in predict(ALL_GATHER, MIB, 8, cfg, nodes=1))
    off = predict(ALL_GATHER, MIB, 64, h100(calibrated=False, pat=False), nodes=64)
    assert off == [c for c in predict(ALL_GATHER, MIB, 64, cfg, nodes=64) if c[1] != PAT]
    assert off[0][1:3] == (RING, LL)
    mi = config_for_gpu("MI300X", nic_gbps=50.0)
    assert not mi.pat
    assert all(c[1] != PAT for c in predict(ALL_GATHER, MIB, 64, mi, nodes=64))


def test_log2_is_nccls_integer_log2():
    """tuning.cc's log2i floors: 48 nodes pay 5 log steps, like 32."""
    cfg = h100(calibrated=False)
    lat48 = candidates(ALL_GATHER, MIB, 48, cfg, 48)[(PAT, SIMPLE)][3]
    assert lat48 == pytest.approx(8.0 + math.floor(math.log2(48)) * 4.0 + 48 * 2.8)


def test_simulation_picks_pat_for_a_rail_group(tmp_path):
    """64 NPUs, 2 per scale-up domain; communicator group {0, 2, ..., 62}: one rank on each of 32 nodes (a
    data-parallel rail). Its 1 MiB reduce-scatter takes PAT's time, not the ring's."""
    size = MIB
    sys_path = write_system_config(tmp_path / "sys.json", algorithm="nccl", preferred_dataset_splits=1, dims=2)
    net = write_network_config(tmp_path / "net.yml", ("Switch", "Switch"), (2, 32), (450.0, 50.0), (500.0, 500.0))
    members = list(range(0, 64, 2))
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": members}))
    for rank in range(64):
        nodes = [make_node(1, "rs", T.COMM_COLL_NODE, attrs={
            "is_cpu_op": False, "comm_type": T.REDUCE_SCATTER, "comm_size": size, "pg_name": "1"})]
        if rank not in members:
            nodes = [make_node(1, "c", T.COMP_NODE, duration_micros=1)]
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    report = simulate(str(tmp_path / "t"), sys_path, net, comm_groups=str(groups))
    pat_us, algo, _ = collective_time_us(REDUCE_SCATTER, size, 32, config_for_gpu(None), nodes=32)
    ring_us = collective_time_us(REDUCE_SCATTER, size, 32, config_for_gpu(None, pat=False), nodes=32)[0]
    assert algo == PAT and ring_us > 1.2 * pat_us
    assert report.ranks[0].finish_ns == pytest.approx(pat_us * 1000, abs=1_000)
