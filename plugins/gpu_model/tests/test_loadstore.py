"""Load-store collectives (ls_oneshot, ls_twoshot, nvls, ls_direct): cache-line model, batching, whole runs."""

from __future__ import annotations

import time

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_gpu_model.loadstore import (
    DIRECT, FS_PER_NS, NVLS, ONESHOT, TWOSHOT, LoadStoreConfig, collective_time_fs, collective_time_ns,
    config_for_gpu, phase_all_gpus, phase_batched, phase_line_by_line,
)

H100 = config_for_gpu("H100-SXM5-80GB")


def _run(tmp_path, algo, size, npus=8, coll=T.ALL_REDUCE, **kwargs):
    """The comparison setup: 8 NPUs on one Switch, 450 GB/s per direction, 500 ns, splits 1."""
    sys_path = write_system_config(tmp_path / f"{algo}.json", algorithm=algo, preferred_dataset_splits=1)
    net = write_network_config(tmp_path / "net.yml", ("Switch",), (npus,), (450.0,), (500.0,))
    nodes = [make_node(1, "c", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": coll, "comm_size": size})]
    prefix = tmp_path / f"{algo}_{size}"
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    return simulate(str(prefix), sys_path, net, **kwargs)


def test_h100_parameters_from_preset():
    assert H100.link_gbps == 450.0 and H100.nvls and H100.hbm_gbps == 3350.0
    assert not config_for_gpu("A100-SXM4-80GB").nvls
    # Little's law: 128 lines x 128 B / (4 x 250 ns + one line time)
    assert H100.per_sm_gbps() == pytest.approx(128 * 128 / (1000 + 128 / 450), rel=1e-9)
    with pytest.raises(ValueError):
        LoadStoreConfig(line_bytes=96)


@pytest.mark.parametrize("line", [64, 128])
@pytest.mark.parametrize("cfg_kw", [dict(), dict(sms=3, outstanding=5), dict(sms=7, outstanding=1, hop_ns=10.0)])
@pytest.mark.parametrize("size", [1, 1000, 8 << 10, 100_000])
def test_batched_equals_line_by_line(line, cfg_kw, size):
    cfg = LoadStoreConfig(line_bytes=line, **cfg_kw)
    for algo, coll in ((ONESHOT, "all_reduce"), (TWOSHOT, "all_reduce"), (NVLS, "all_reduce"),
                       (DIRECT, "all_gather"), (DIRECT, "reduce_scatter")):
        for n in (2, 8):
            a = collective_time_fs(algo, coll, size, n, cfg, phase_batched)
            b = collective_time_fs(algo, coll, size, n, cfg, phase_line_by_line)
            assert a == b, (algo, coll, n)


@pytest.mark.parametrize("cfg_kw", [dict(), dict(sms=3, outstanding=5), dict(line_bytes=64, sms=7, outstanding=1, hop_ns=10.0)])
def test_representative_gpu_equals_all_gpus_with_receive_ports(cfg_kw):
    """The symmetry argument: simulating every GPU's send and receive port line by line gives the
    representative-GPU time exactly (receive ports never queue under the rotating peer pattern)."""
    cfg = LoadStoreConfig(**cfg_kw)
    for n in (2, 4, 8):
        for ops in (1, 7, 100, 2000):
            assert phase_all_gpus(n, ops, cfg) == phase_batched(0, ops, 1, cfg.round_trip_fs, cfg), (n, ops)


def test_phase_bounds_littles_law_and_link():
    cfg = LoadStoreConfig(sms=2, outstanding=4, hop_ns=1000.0)
    lines = 4000
    t = phase_batched(0, lines, 1, cfg.round_trip_fs, cfg) / FS_PER_NS
    # latency-bound: 2 SMs x 4 lines per round trip
    assert t == pytest.approx(lines / 8 * (cfg.round_trip_fs / FS_PER_NS + 4 * cfg.line_fs / FS_PER_NS), rel=0.01)
    fat = LoadStoreConfig(sms=64, outstanding=512)
    t = phase_batched(0, lines * 100, 1, fat.round_trip_fs, fat) / FS_PER_NS
    assert t == pytest.approx(lines * 100 * 128 / 450.0, rel=0.01)  # link-bound


SMALL = [8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10]


def test_oneshot_beats_ring_for_small_and_crossovers(tmp_path):
    ring = {s: _run(tmp_path, "ring", s).max_finish_ns for s in SMALL + [1 << 20, 2 << 20, 4 << 20]}
    one = {s: _run(tmp_path, ONESHOT, s).max_finish_ns for s in ring}
    for s in SMALL:
        assert one[s] < ring[s] / 2, s
    assert one[1 << 20] < ring[1 << 20]
    assert ring[2 << 20] < one[2 << 20] and ring[4 << 20] < one[4 << 20]  # crossover 1..2 MB
    two = {s: collective_time_ns(TWOSHOT, "all_reduce", s, 8, H100) for s in (64 << 10, 128 << 10)}
    assert one[64 << 10] < two[64 << 10] and two[128 << 10] < one[128 << 10]  # one-/two-shot crossover


def test_nvls_beats_twoshot_for_large_on_h100(tmp_path):
    for s in (16 << 20, 256 << 20):
        nvls = _run(tmp_path, NVLS, s).max_finish_ns
        two = _run(tmp_path, TWOSHOT, s).max_finish_ns
        assert nvls < 0.75 * two
    big = 256 << 20  # bandwidth bound: per GPU (n+1)/n x S vs 2(n-1)/n x S on a 450 GB/s port
    assert collective_time_ns(NVLS, "all_reduce", big, 8, H100) == pytest.approx(big * 9 / 8 / 450, rel=0.01)
    assert collective_time_ns(TWOSHOT, "all_reduce", big, 8, H100) == pytest.approx(big * 14 / 8 / 450, rel=0.01)
    with pytest.raises(ValueError):
        collective_time_ns(NVLS, "all_reduce", 1 << 20, 8, config_for_gpu("A100-SXM4-80GB"))


def test_direct_all_gather_reduce_scatter_in_a_run(tmp_path):
    size = 4 << 20
    ag = _run(tmp_path, DIRECT, size, coll=T.ALL_GATHER).max_finish_ns
    assert ag == pytest.approx(collective_time_ns(DIRECT, "all_gather", size, 8, H100), abs=2)
    rs = _run(tmp_path, DIRECT, size, coll=T.REDUCE_SCATTER).max_finish_ns
    assert rs == pytest.approx(collective_time_ns(DIRECT, "reduce_scatter", size, 8, H100), abs=2)
    assert rs < ag  # reduce-scatter moves 1/n of what all-gather (of the same input) moves
    a100 = _run(tmp_path, ONESHOT, size, options={"gpu": "A100-SXM4-80GB"}).max_finish_ns
    assert a100 > _run(tmp_path, ONESHOT, size).max_finish_ns  # 300 vs 450 GB/s


def test_one_gib_is_fast():
    start = time.perf_counter()
    t = collective_time_ns(ONESHOT, "all_reduce", 1 << 30, 8, H100)
    assert time.perf_counter() - start < 5.0
    assert t == pytest.approx(7 * (1 << 30) / 450, rel=0.01)


def test_run_options_override_line_and_sms(tmp_path):
    size = 256 << 10
    cfg = config_for_gpu("H100-SXM5-80GB", line_bytes=64, sms=4)
    report = _run(tmp_path, ONESHOT, size, options={"ls_line_bytes": 64, "ls_sms": 4})
    assert report.max_finish_ns == pytest.approx(collective_time_ns(ONESHOT, "all_reduce", size, 8, cfg), abs=2)
    assert report.max_finish_ns > _run(tmp_path, ONESHOT, size).max_finish_ns  # fewer SMs: latency-bound
