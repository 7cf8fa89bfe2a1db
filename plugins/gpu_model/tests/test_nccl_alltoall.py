"""NCCL's all-to-all across nodes: each GPU's off-node share through its own NIC, not a ring over the node's NICs.

Hand-computed against NVIDIA/nccl-tests#130 and #267 (S. Jeaugey, A. Laddy, NVIDIA): a multi-node all-to-all runs
at one NIC's rate; on 2 nodes half the traffic is off-node, so busbw is about twice the NIC's rate.
"""

import pytest

from astra_gpu_model.nccl import (
    ALL_TO_ALL, HW_LAT, NIC_EFFICIENCY, P2P, RING, SIMPLE, alltoall_across_nodes_us, collective_time_us,
    config_for_gpu,
)

MIB = 1 << 20
GIB = 1 << 30
NET_LAT_US = 14.0  # NCCL's hwLat net ring Simple, tuning.cc


def _h100(**kw):
    return config_for_gpu("H100-SXM5-80GB", **kw)


def test_constants_the_hand_figures_use():
    assert HW_LAT["net"][RING][2] == NET_LAT_US
    assert NIC_EFFICIENCY == pytest.approx(0.96)
    assert _h100().nic_gbps == 50.0  # 400 Gb/s per GPU


def test_two_nodes_of_eight_send_half_the_buffer_through_one_nic():
    """Qwen3's 128 MiB on 2 x 8 H100: 64 MiB off-node per GPU at 50 x 0.96 = 48 GB/s is 1398.10 us, plus 14 us;
    NCCL's uncorrected constants (no fitted overhead)."""
    cfg = _h100(calibrated=False)
    t, algo, proto = collective_time_us(ALL_TO_ALL, 128 * MIB, 16, cfg, nodes=2)
    assert (algo, proto) == (P2P, SIMPLE)
    assert t == pytest.approx(14.0 + 67108864 / 48_000.0)  # 1412.10 us
    assert t == pytest.approx(1412.101, abs=1e-3)


def test_calibrated_adds_the_fitted_overhead_once():
    cfg = _h100()
    overhead = cfg.correction().overhead_us
    t, algo, _ = collective_time_us(ALL_TO_ALL, 128 * MIB, 16, cfg, nodes=2)
    assert algo == P2P
    assert t == pytest.approx(overhead + 14.0 + 67108864 / 48_000.0)


def test_crossing_nodes_is_slower_than_staying_in_one():
    """The symptom (docs/validation.md): 2 nodes came out faster than one (0.445 against 0.474 ms)."""
    cfg = _h100()
    one_node = collective_time_us(ALL_TO_ALL, 128 * MIB, 8, cfg, nodes=1)[0]
    two_nodes = collective_time_us(ALL_TO_ALL, 128 * MIB, 16, cfg, nodes=2)[0]
    assert two_nodes > 2.5 * one_node


def test_busbw_on_two_nodes_is_about_twice_one_nic():
    """#130: 'On 2 nodes, 50% of the traffic is inter-node so you should see BusBW = 2x network bandwidth per GPU'.
    8 GiB: algbw = 8 GiB / (8 GiB / 2 / 48 GB/s + 14 us) = 95.998 GB/s, busbw = x 15/16 = 89.998."""
    cfg = _h100(calibrated=False)
    t = collective_time_us(ALL_TO_ALL, 8 * GIB, 16, cfg, nodes=2)[0]
    algbw = 8 * GIB / (t * 1e3)
    assert algbw == pytest.approx(8 * GIB / (8 * GIB / 2 / 48_000.0 + 14.0) / 1e3)
    assert algbw * 15 / 16 == pytest.approx(90.0, rel=1e-3)


def test_busbw_falls_towards_one_nic_with_more_nodes():
    """#130: 'it will go down to 1x the network bandwidth per GPU (general formula is N/(N-1)x)': 8 nodes of 8,
    7/8 of the buffer off-node, algbw = 48 x 8/7 = 54.86 GB/s at large sizes."""
    cfg = _h100(calibrated=False)
    t = collective_time_us(ALL_TO_ALL, 64 * GIB, 64, cfg, nodes=8)[0]
    assert 64 * GIB / (t * 1e3) == pytest.approx(48.0 * 8 / 7, rel=1e-3)


def test_one_rank_per_node_is_the_nic_alone():
    cfg = _h100(calibrated=False)
    t = collective_time_us(ALL_TO_ALL, 64 * MIB, 4, cfg, nodes=4)[0]
    assert t == pytest.approx(14.0 + 64 * MIB * 3 / 4 / 48_000.0)
    assert alltoall_across_nodes_us(64 * MIB, 4, cfg, 4)[0] == 0.0  # nothing stays on the node


def test_the_nic_is_one_gpus_not_the_nodes_sum():
    """Halving the per-GPU NIC (--nccl-nic-gbps 25) doubles the off-node time; eight GPUs' NICs never add up."""
    full = _h100(calibrated=False)
    half = _h100(calibrated=False, nic_gbps=25.0)
    off_full = alltoall_across_nodes_us(1 * GIB, 16, full, 2)[1] - NET_LAT_US
    off_half = alltoall_across_nodes_us(1 * GIB, 16, half, 2)[1] - NET_LAT_US
    assert off_half == pytest.approx(2 * off_full)
    assert off_full == pytest.approx(GIB / 2 / 48_000.0)


def test_on_node_part_is_the_one_node_all_to_all_of_the_nodes_share():
    """With a NIC far faster than NVLink the on-node part sets the time: the one-node all-to-all of 8 ranks on the
    node's 8/16 of the buffer (per-peer chunks unchanged)."""
    cfg = _h100(nic_gbps=1e6)
    on, off = alltoall_across_nodes_us(128 * MIB, 16, cfg, 2)
    assert on == collective_time_us(ALL_TO_ALL, 64 * MIB, 8, cfg, nodes=1)[0]
    assert on > off
    assert collective_time_us(ALL_TO_ALL, 128 * MIB, 16, cfg, nodes=2)[0] == on


def test_uneven_nodes_take_the_emptiest_nodes_off_node_share():
    """10 ranks on 3 nodes (4, 3, 3): a GPU on a 3-rank node sends 7/10 of its buffer off-node."""
    cfg = _h100(calibrated=False)
    off = alltoall_across_nodes_us(100 * MIB, 10, cfg, 3)[1]
    assert off == pytest.approx(14.0 + 100 * MIB * 7 / 10 / 48_000.0)


def test_one_node_keeps_its_ring_time():
    """128 MiB on 8 H100: the ring's calibrated terms over 7/8 of the buffer (test_a2a_one_node.py): 0.4164 ms
    (0.4743 ms before the rank's own eighth stopped crossing NVLink)."""
    cfg = _h100()
    t, algo, _ = collective_time_us(ALL_TO_ALL, 128 * MIB, 8, cfg, nodes=1)
    assert algo != P2P
    assert t == pytest.approx(416.4, abs=0.5)


def test_monotonic_in_size_across_nodes():
    cfg = _h100()
    times = [collective_time_us(ALL_TO_ALL, 1 << k, 16, cfg, nodes=2)[0] for k in range(10, 32)]
    assert all(b >= a for a, b in zip(times, times[1:]))


def test_the_nic_rate_is_the_scale_out_models_effective_rate_for_one_nic():
    """With --scale-out the run's NCCL NIC rate is the line rate under load (scale_out.ScaleOut.nccl_gb_per_s); the
    all-to-all's off-node part then runs at the kind's effective rate per GPU (achievable x under load): RoCE's ECMP
    past one leaf, 400 x 0.96 x 0.60 Gb/s = 28.8 GB/s."""
    from astra_gpu_model.scale_out import scale_out

    so = scale_out("roce", 128, 400.0)
    assert so.at_scale
    cfg = _h100(calibrated=False, nic_gbps=so.nccl_gb_per_s())
    off = alltoall_across_nodes_us(GIB, 16, cfg, 2)[1] - NET_LAT_US
    assert so.effective_gbit_per_s() / 8 == pytest.approx(28.8)
    assert off == pytest.approx(GIB / 2 / (28.8 * 1000.0))


def test_a_whole_simulation_times_the_all_to_all_across_two_nodes(tmp_path):
    """16 ranks on a (8, 2) network: the nccl collective sees 2 nodes and waits the per-NIC time."""
    from astra_sim.chakra import make_metadata, make_node, types as T, write_et
    from astra_sim.simulation import simulate
    from astra_sim_testing import write_network_config, write_system_config

    size = 128 * MIB
    sys_path = write_system_config(tmp_path / "sys.json", algorithm="nccl", preferred_dataset_splits=1)
    net = write_network_config(tmp_path / "net.yml", ("Switch", "Switch"), (8, 2), (450.0, 50.0), (500.0, 2000.0))
    nodes = [make_node(1, "a2a", T.COMM_COLL_NODE,
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_TO_ALL, "comm_size": size})]
    for rank in range(16):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    report = simulate(str(tmp_path / "t"), sys_path, net, options={"nccl_nic_gbps": 50.0})
    expected_us = collective_time_us(ALL_TO_ALL, size, 16, config_for_gpu(None), nodes=2)[0]
    assert expected_us == pytest.approx(1414.4, abs=0.5)  # 64 MiB at 48 GB/s + 14 us + the fitted overhead
    assert report.max_finish_ns == pytest.approx(expected_us * 1000, rel=0.05, abs=20_000)
