"""The ``torus`` collective of the TPU platforms: the scaling book's cost rule, worked by hand.

Rule (jax-ml/scaling-book ``sharding.md`` at 0819a7d): an AllGather costs bytes / (bidirectional ICI bandwidth x
axes), an AllReduce twice that, an AllToAll a quarter, and at least hop latency x sum(axis sizes) / 2."""

from __future__ import annotations

import json

import pytest
from astra_compute_systolic.platforms import PRESETS, generate, get_preset
from astra_compute_systolic.torus import group_axes, torus_time_ns
from astra_sim import simulate
from astra_sim.cli import main
from astra_sim.system.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
)
from astra_sim_testing import all_reduce_trace

GIB = 1 << 30


@pytest.mark.parametrize("members, axes", [
    ([0, 1, 2, 3], [4]),                   # along axis 0 of a 4x4 (ids: axis 0 fastest)
    ([0, 4, 8, 12], [4]),                  # along axis 1
    (list(range(16)), [4, 4]),             # the whole slice
    ([0, 5], [2, 2]),                      # a diagonal pair differs on both axes
    ([3], []),                             # one chip spans nothing
])
def test_group_axes_on_a_4x4(members, axes):
    assert group_axes(members, [4, 4]) == axes


def test_all_gather_on_a_full_v6e_pod_by_hand():
    # 1 GiB a chip over 16 x 16: a chip receives 255 GiB = 273,804,165,120 B; 2 axes x 2 directions x 100 GB/s =
    # 400 B/ns (Google's 'All-reduce bandwidth per Pod 102.4 TB/s' / 256 chips): 684,510,412.8 ns
    assert torus_time_ns(ALL_GATHER, GIB, [16, 16], 100.0, 500.0) == pytest.approx(684_510_412.8)


@pytest.mark.parametrize("com_type, expected_ns", [
    (REDUCE_SCATTER, 4_687_500.0),   # 1e9 x 15/16 = 937,500,000 B at 2 x 100 = 200 B/ns
    (ALL_REDUCE, 9_375_000.0),       # twice the bytes
    (ALL_TO_ALL, 1_171_875.0),       # a quarter of the all-gather's bytes
])
def test_one_axis_by_hand(com_type, expected_ns):
    assert torus_time_ns(com_type, 1_000_000_000, [16], 100.0, 500.0) == pytest.approx(expected_ns)


def test_small_collectives_are_latency_bound():
    # 1 KiB: the bandwidth term is tiny; 16 + 16 chips, half of them hops each way: 16 x 500 ns = 8,000 ns
    assert torus_time_ns(ALL_REDUCE, 1024, [16, 16], 100.0, 500.0) == 8_000.0
    assert torus_time_ns(ALL_GATHER, 1024, [], 100.0, 500.0) == 0.0


def test_the_presets_hop_is_the_scaling_books_microsecond():
    # sharding.md at 0819a7d: "This is typically around 1us"; no longer an assumption of the presets
    for preset in PRESETS.values():
        n = preset.numbers()
        assert preset.ici_hop_latency_ns == 1000.0 and "scaling-book" in n["sources"]["ici_latency"]
        assert "ici_latency" not in n["assumptions"]
    v6e = get_preset("tpu-v6e")
    assert generate(v6e, 1)["options"]["tpu_ici_hop_ns"] == 1000.0
    # 1 KiB over the full pod: 16 + 16 chips, half of them hops each way: 16 x 1,000 ns
    assert torus_time_ns(ALL_REDUCE, 1024, [16, 16], v6e.ici_gbps_per_link, v6e.ici_hop_latency_ns) == 16_000.0


def test_googles_v6e_256_psum_by_hand():
    """The check case tpu-recipes-v6e-256-psum-606m: a 17408 x 17408 bf16 all-reduce over the 16 x 16 pod.
    2 x 606,076,928 B x 255/256 = 1,207,418,880 B at 2 axes x 2 directions x 100 GB/s = 400 B/ns (Google's
    'All-reduce bandwidth per Pod 102.4 TB/s' over 256 chips): 3,018,547.2 ns; the latency term, 16 us, is under
    it. Google measured 5.121 ms (235.76 GB/s of bus bandwidth, 59 % of its own pod figure)."""
    v6e = get_preset("tpu-v6e")
    assert 256 * 4 * v6e.ici_gbps_per_link == 102_400          # GB/s: the page's all-reduce bandwidth per pod
    ns = torus_time_ns(ALL_REDUCE, 606_076_928, [16, 16], v6e.ici_gbps_per_link, v6e.ici_hop_latency_ns)
    assert ns == pytest.approx(3_018_547.2)


def test_v6e_ici_is_timed_at_its_measured_payload_rate():
    """The same psum at the measured payload rate (marin-community/marin#6736: a v6e-8 ppermute, 'bytes / 86.8
    GB/s'): 1,207,418,880 B at 2 axes x 2 directions x 86.8 = 347.2 B/ns = 3,477,588.94 ns (-32.1 % against the
    measured 5.121 ms, from -41.1 % at the nominal 400 B/ns). The platform hands the torus rule that rate, the
    generated network's rings carry it (86.8e9 / 2**30 = 80.838799 GiB/s), and the nominal figure stays in the
    platform's numbers."""
    v6e = get_preset("tpu-v6e")
    assert v6e.ici_link_gbps == 86.8 and v6e.ici_gbps_per_link == 100.0
    assert generate(v6e, 1)["options"]["tpu_ici_gbps_per_link"] == 86.8
    ns = torus_time_ns(ALL_REDUCE, 606_076_928, [16, 16], v6e.ici_link_gbps, v6e.ici_hop_latency_ns)
    assert ns == pytest.approx(3_477_588.94, abs=0.01)
    assert "bandwidth: [ 80.838799, 80.838799 ]" in generate(v6e, 1)["network_configuration"].text
    n = v6e.numbers()
    assert n["scaleup_gb_per_s_per_direction"] == 100.0 and n["ici_payload_gb_per_s_per_direction"] == 86.8
    assert "marin-community/marin#6736" in n["sources"]["ici_payload"]
    # a preset with no published payload measurement keeps its nominal link rate
    assert get_preset("tpu-v4").ici_link_gbps == 50.0


def test_one_slice_uses_torus_and_several_slices_keep_the_ring():
    one = json.loads(generate("tpu-v6e", 1)["system_configuration"].text)
    assert one["all-gather-implementation"] == ["torus", "torus"]
    two = json.loads(generate("tpu-v5p", 2, "4x4x4")["system_configuration"].text)
    assert two["all-gather-implementation"] == ["ring"] * 4
    assert generate("tpu-v6e", 1)["options"]["tpu_ici_gbps_per_link"] == 86.8   # the measured payload rate


def test_an_all_reduce_on_a_v6e_4x4_runs_at_the_rule(tmp_path):
    # 64 MiB over 16 chips on 2 axes: 2 x 67,108,864 x 15/16 = 125,829,120 B at 2 x 2 x 86.8 = 347.2 B/ns (the
    # measured payload rate) = 362,411.06 ns; the kernel splits it into 4 chunks run one after the other (the system
    # config's preferred-dataset-splits), each timed alone
    prefix = all_reduce_trace(tmp_path, 16, 64 << 20)
    report = simulate(workload=prefix, platform="tpu-v6e", tpu_topology="4x4")
    assert report.max_finish_ns == pytest.approx(362_411.06, abs=100)
    assert report.settings["platform_defaults"]["collective"].startswith("torus (implied by --platform tpu-v6e")


def test_torus_without_a_tpu_platform_is_a_clear_error(tmp_path, capsys):
    files = generate("tpu-v6e", 1, "4x4", directory=tmp_path)
    prefix = all_reduce_trace(tmp_path, 16, 1 << 20)
    code = main(["run", "--workload-configuration", prefix, "--system-configuration", files["system_configuration"],
                 "--network-configuration", files["network_configuration"], "-q"])
    assert code != 0
    assert "torus collective needs --platform tpu-*" in capsys.readouterr().err
