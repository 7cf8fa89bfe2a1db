"""The ``nccl`` collective implementation: NCCL's tuning model vs Vidur's measured all-reduce."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_sim_testing import find_shared_dir, load_script, write_network_config, write_system_config

from astra_gpu_model.calibration import VIDUR_ALL_REDUCE, load_vidur_all_reduce
from astra_gpu_model.nccl import NVLS, RING, TREE, LL, LL128, SIMPLE, collective_time_us, config_for_gpu, predict

SHARED = find_shared_dir()
CAL = SHARED / "calibration" if SHARED else None
needs_data = pytest.mark.skipif(CAL is None or not (CAL / "vidur_measured_all_reduce_a100_dgx.csv").exists(),
                                reason="shared calibration data not available")

FIT_SCRIPT = Path(__file__).resolve().parents[1] / "fit" / "fit_nccl.py"
FIT_JSON = Path(__file__).resolve().parents[1] / "src" / "astra_gpu_model" / "data" / "nccl_fit.json"


def _fit_module():
    """``fit/fit_nccl.py`` imported as a module (it is a script, not part of the package)."""
    return load_script(FIT_SCRIPT)


def _errors(name, max_bytes=64 << 20, min_bytes=0):
    """Per GPU count: |model - time_ms_median| / time_ms_median on single-node rows."""
    preset, topology = VIDUR_ALL_REDUCE[name]
    cfg = config_for_gpu(preset, topology=topology)
    out = defaultdict(list)
    for n, size, measured in load_vidur_all_reduce(CAL / f"vidur_measured_all_reduce_{name}.csv", max_bytes):
        if size > min_bytes:
            model = collective_time_us("all_reduce", size, n, cfg)[0]
            out[n].append(abs(model - measured) / measured)
    return out


@needs_data
@pytest.mark.parametrize("name", sorted(VIDUR_ALL_REDUCE))
def test_all_reduce_time_vs_vidur_within_15_percent(name):
    """The issue's bar is 15 % per file; the fit reaches <= 7.2 % pooled and <= 9.4 % for every GPU count."""
    per_n = _errors(name)
    assert sorted(per_n) == ([2, 4] if "pairwise" in name else [2, 4, 8])
    pooled = [e for errs in per_n.values() for e in errs]
    assert statistics.median(pooled) <= 0.08
    for n, errs in per_n.items():
        assert statistics.median(errs) <= 0.10, (name, n)


@needs_data
def test_sizes_above_the_fitted_range():
    """a100_pairwise goes to 512 MB; the fit stops at 64 MB."""
    per_n = _errors("a100_pairwise_nvlink", max_bytes=None, min_bytes=64 << 20)
    assert sum(map(len, per_n.values())) > 2000
    for errs in per_n.values():
        assert statistics.median(errs) <= 0.05


@needs_data
def test_checked_in_fit_is_what_the_script_writes(tmp_path):
    out = tmp_path / "fit.json"
    subprocess.run([sys.executable, str(FIT_SCRIPT), "--calibration-dir", str(CAL), "--out", str(out)],
                   check=True, capture_output=True)
    assert json.loads(out.read_text())["architectures"] == json.loads(FIT_JSON.read_text())["architectures"]


@needs_data
def test_held_out_checks_of_the_fit():
    """Fitting on half the sizes scores the other half as well; so does leaving the 8-GPU rows out."""
    fit_nccl = _fit_module()
    rows = fit_nccl.points(CAL)
    sizes = sorted({r["size"] for r in rows})
    half = set(sizes[::2])
    cal = fit_nccl.fit([r for r in rows if r["size"] in half])
    for name in VIDUR_ALL_REDUCE:
        held = [r for r in rows if r["size"] not in half and r["file"] == name]
        assert statistics.median(abs(e) for e in fit_nccl.errors(cal, held)) <= 0.10, name
    no8 = fit_nccl.fit([r for r in rows if not (r["file"].endswith("_dgx") and r["n"] == 8)])
    for name in ("a100_dgx", "h100_dgx"):
        held = [r for r in rows if r["file"] == name and r["n"] == 8]
        assert statistics.median(abs(e) for e in fit_nccl.errors(no8, held)) <= 0.16, name


def test_uncalibrated_is_nccls_own_model_and_calibration_only_retimes():
    raw = config_for_gpu("H100-SXM5-80GB", calibrated=False)
    cal = config_for_gpu("H100-SXM5-80GB")
    for k in range(10, 29):
        t, algo, proto, lat, bw = predict("all_reduce", 1 << k, 8, raw)[0]
        assert collective_time_us("all_reduce", 1 << k, 8, raw) == (t, algo, proto)
        assert collective_time_us("all_reduce", 1 << k, 8, cal)[1:] == (algo, proto)  # same choice
    # ring Simple on 8 H100 at 64 MiB: nBytes / (busBw 18 links x 20.6 GB/s x n/nsteps)
    t, algo, proto, lat, bw = next(c for c in predict("all_reduce", 64 << 20, 8, raw) if c[1:3] == (RING, SIMPLE))
    assert bw == pytest.approx((64 << 20) / (1000 * 450 * 20.6 / 25 * 8 / 14))
    assert lat == pytest.approx(8.4 + 14 * 3.4)


def test_calibration_fallback_for_unfitted_pairs():
    from astra_gpu_model.nccl import NcclCalibration

    cal = NcclCalibration(1.0, 1.0, {"nvswitch/ring/LL": 0.5, "nvswitch/ring/Simple": 0.7, "pcie/ring/Simple": 1.0})
    assert cal.efficiency_for("nvswitch", "ring", "LL") == 0.5
    assert cal.efficiency_for("nvswitch", "tree", "LL") == pytest.approx(0.6)  # mean of the link's factors
    assert cal.efficiency_for("bridge", "ring", "LL") == pytest.approx(2.2 / 3)  # no bridge factor: all


@pytest.mark.parametrize("gpu", ["A100-SXM4-80GB", "H100-SXM5-80GB"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_protocol_choice_follows_size(gpu, n):
    cfg = config_for_gpu(gpu)
    small = collective_time_us("all_reduce", 4096, n, cfg)
    assert small[2] == LL
    large = collective_time_us("all_reduce", 256 << 20, n, cfg)
    assert large[2] in (LL128, SIMPLE)
    protos = [collective_time_us("all_reduce", 1 << k, n, cfg)[2] for k in range(10, 29)]
    # LL first, then never back to LL once the bandwidth protocols take over
    assert LL not in protos[protos.index(next(p for p in protos if p != LL)):]


def test_nvls_only_on_hopper_nvswitch_and_tree_never_wins_in_one_node():
    for n in (2, 4, 8):
        for k in range(10, 29):
            a100 = collective_time_us("all_reduce", 1 << k, n, config_for_gpu("A100-SXM4-80GB"))
            assert a100[1] == RING  # Ampere: no NVLS; one node: tree loses to ring
            h100 = collective_time_us("all_reduce", 1 << k, n, config_for_gpu("H100-SXM5-80GB"))
            assert h100[1] in (RING, NVLS)
            pair = collective_time_us("all_reduce", 1 << k, n, config_for_gpu("H100-SXM5-80GB", topology="pairwise"))
            assert pair[1] == RING
    h8 = config_for_gpu("H100-SXM5-80GB")
    assert collective_time_us("all_reduce", 4096, 8, h8)[1] == RING
    assert collective_time_us("all_reduce", 256 << 20, 8, h8)[1] == NVLS
    assert collective_time_us("all_reduce", 256 << 20, 8, config_for_gpu("H100-SXM5-80GB", nvls=False))[1] == RING
    assert any(c[1] == TREE for c in predict("all_reduce", 1 << 20, 8, h8))  # tree is a candidate


def test_other_collectives_and_monotonic():
    cfg = config_for_gpu("H100-SXM5-80GB")
    for coll in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        picks = [collective_time_us(coll, 1 << k, 8, cfg) for k in range(10, 28)]
        for (t0, *pick0), (t1, *pick1) in zip(picks, picks[1:]):
            # the calibration re-times NCCL's choice: at a switch of algo/proto the doubled size may be a
            # little faster (as measured: H100 8 GPUs, 1 MiB ring/LL 42.5 us, 2 MiB NVLS 39.3 us)
            assert t1 >= (t0 if pick0 == pick1 else 0.9 * t0), (coll, t0, pick0, t1, pick1)
    assert collective_time_us("all_reduce", 1 << 20, 1, cfg)[0] == 0.0


def _run(tmp_path, size, npus=8, **kwargs):
    sys_path = write_system_config(tmp_path / "sys.json", algorithm="nccl", preferred_dataset_splits=1)
    net = write_network_config(tmp_path / "net.yml", ("Switch",), (npus,), (450.0,), (500.0,))
    nodes = [make_node(1, "ar", T.COMM_COLL_NODE,
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})]
    for rank in range(npus):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    return simulate(str(tmp_path / "t"), sys_path, net, **kwargs)


@pytest.mark.parametrize("gpu", [None, "A100-SXM4-80GB"])
def test_whole_simulation_uses_the_model(tmp_path, gpu):
    size = 16 << 20
    kwargs = {"options": {"gpu": gpu}} if gpu else {}
    report = _run(tmp_path, size, **kwargs)
    expected_us = collective_time_us("all_reduce", size, 8, config_for_gpu(gpu))[0]
    assert report.max_finish_ns == pytest.approx(expected_us * 1000, rel=0.05, abs=20_000)


# ------------------------------------------------------------------------------ across nodes
def test_multi_node_formulas():
    cfg = config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0, calibrated=False)
    cands = {c[1:3]: c for c in predict("all_reduce", 1 << 20, 16, cfg, nodes=2)}
    assert (NVLS, SIMPLE) not in cands  # NVLS alone is single-node
    # ring LL: base 6.6 + (nsteps - nInter) * max(intra 0.6, netOverhead 1) + nInter * net 2.7; nInter = 2
    assert cands[(RING, LL)][3] == pytest.approx(6.6 + (30 - 2) * 1.0 + 2 * 2.7)
    # ring Simple: the net latency once (IB's plugin latency is 0: nccl.NET_PLUGIN_LATENCY_US), netOverhead x3,
    # then x1.4 (Hopper, large enough)
    assert cands[(RING, SIMPLE)][3] == pytest.approx((8.4 + 28 * max(3.4, 3.0) + 2 * 14.0) * 1.4)
    # tree LL128: base 14 + 2 * ((ppn - 1) * 1.25 + log2(2) * 8.5)
    assert cands[(TREE, LL128)][3] == pytest.approx(14.0 + 2 * (7 * 1.25 + 8.5))
    # bandwidth: bus = min(NVLink 370.8, 8 NICs x 50) -> ring Simple algBw = 370.8 * 16 / 30
    assert cands[(RING, SIMPLE)][4] == pytest.approx((1 << 20) / (1000 * 450 * 20.6 / 25 * 16 / 30))
    # one GPU per node: the ring crosses one NIC
    one = {c[1:3]: c for c in predict("all_reduce", 1 << 20, 4, cfg, nodes=4)}
    assert one[(RING, SIMPLE)][4] == pytest.approx((1 << 20) / (1000 * 50.0 * 4 / 6))
    # tree wins somewhere across nodes, never within one
    picks = {collective_time_us("all_reduce", 1 << k, 64, cfg, nodes=8)[1] for k in range(10, 30)}
    assert TREE in picks


#: Vidur's multi-node fabric is undocumented; the node NIC bandwidths below are the ones that fit each layout
#: best (fit/fit_nccl.py prints them). With one number per ~1000 rows, what is tested is the rest of the model:
#: latencies, protocol choice and the shape over 2 KB - 64 MB.
MULTINODE_NIC = {(2, 1): (6.0, 0.03), (4, 2): (6.25, 0.08), (8, 4): (21.0, 0.05)}


@needs_data
def test_multi_node_rows_with_their_fitted_nic_bandwidth():
    fit_nccl = _fit_module()
    rows = fit_nccl.multinode_rows(CAL)
    assert sorted(rows) == [(2, 1), (4, 2), (8, 4), (16, 8)]
    for (n, ppn), (nic, bound) in MULTINODE_NIC.items():
        errs = fit_nccl.multinode_errors(rows[(n, ppn)], n, ppn, nic)
        assert statistics.median(abs(e) for e in errs) <= bound, (n, ppn)


def test_simulation_counts_the_nodes_a_collective_spans(tmp_path):
    """16 ranks, 8 per scale-up domain: NCCL across 2 nodes, priced on the NICs (--nccl-nic-gbps)."""
    size = 64 << 20
    sys_path = write_system_config(tmp_path / "sys.json", algorithm="nccl", preferred_dataset_splits=1, dims=2)
    net = write_network_config(tmp_path / "net.yml", ("Switch", "Switch"), (8, 2), (450.0, 50.0), (500.0, 500.0))
    nodes = [make_node(1, "ar", T.COMM_COLL_NODE,
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})]
    for rank in range(16):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    times = {}
    for nic in (50.0, 5.0):
        report = simulate(str(tmp_path / "t"), sys_path, net, options={"nccl_nic_gbps": nic})
        times[nic] = report.max_finish_ns
        cfg = config_for_gpu(None, nic_gbps=nic)
        assert times[nic] == pytest.approx(collective_time_us("all_reduce", size, 16, cfg, nodes=2)[0] * 1000,
                                           rel=0.01, abs=20_000)
    assert times[5.0] > 3 * times[50.0]


def test_communicator_group_across_nodes(tmp_path):
    """Group {0, 8}: one GPU on each of two nodes (a DP rail); group {0..3}: inside one node."""
    size = 16 << 20
    sys_path = write_system_config(tmp_path / "sys.json", algorithm="nccl", preferred_dataset_splits=1, dims=2)
    net = write_network_config(tmp_path / "net.yml", ("Switch", "Switch"), (8, 2), (450.0, 50.0), (500.0, 500.0))
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 8], "2": [0, 1, 2, 3]}))
    for group, members in (("1", [0, 8]), ("2", [0, 1, 2, 3])):
        for rank in range(16):
            nodes = [make_node(1, "ar", T.COMM_COLL_NODE, attrs={
                "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size, "pg_name": group})]
            if rank not in members:
                nodes = [make_node(1, "c", T.COMP_NODE, duration_micros=1)]
            write_et(str(tmp_path / f"g{group}.{rank}.et"), make_metadata(), nodes)
        report = simulate(str(tmp_path / f"g{group}"), sys_path, net, comm_groups=str(groups))
        spanned = 2 if group == "1" else 1
        expected = collective_time_us("all_reduce", size, len(members), config_for_gpu(None), nodes=spanned)[0]
        assert report.ranks[0].finish_ns == pytest.approx(expected * 1000, rel=0.01, abs=20_000), group


def test_past_the_fitted_sizes_nvswitch_bandwidth_ramps_to_the_published_peaks():
    """Fitted up to 64 MB; past it each byte costs what NVIDIA's stated peaks say (nccl-tests#212: ring
    370 GB/s, NVLS all-reduce 480 GB/s bus bandwidth on 8 H100, not reached at 256 MB)."""
    h8 = config_for_gpu("H100-SXM5-80GB")
    cal = h8.correction()
    limit = cal.fitted_max_bytes
    # Continuous at the fitted limit, the fitted line below it.
    below = collective_time_us("all_reduce", limit, 8, h8)[0]
    above = collective_time_us("all_reduce", limit + 8, 8, h8)[0]
    assert 0 <= above - below < 0.01

    def busbw(coll, size):
        t_us, algo, proto = collective_time_us(coll, size, 8, h8)
        factor = 2 * 7 / 8 if coll == "all_reduce" else 7 / 8
        return size * factor / (t_us * 1e3), algo

    bw_8g, algo = busbw("all_reduce", 8 << 30)
    assert algo == NVLS and bw_8g == pytest.approx(480, rel=0.02)
    bw_256m, _ = busbw("all_reduce", 256 << 20)
    assert bw_256m < 0.93 * 480  # "256M is too small to reach peak bandwidth"
    bw_ag, algo = busbw("all_gather", 8 << 30)
    assert algo == RING and bw_ag == pytest.approx(370, rel=0.02)
    times = [collective_time_us("all_reduce", s << 20, 8, h8)[0] for s in (32, 64, 128, 512, 2048)]
    assert times == sorted(times)


def test_ampere_past_64_mb_costs_the_simple_protocols_share_of_nvlink():
    # Past the fitted 64 MB each byte of an 8-A100 ring all-reduce costs NVIDIA's Simple-protocol share of the line
    # rate (370 / 450, nccl-tests#212) on NVLink 3's 300 GB/s: 246.7 GB/s of bus bandwidth (it extrapolated the
    # 64 MB line before, ~167 GB/s at 8 GiB).
    a8 = config_for_gpu("A100-SXM4-80GB")
    t4, algo, proto = collective_time_us("all_reduce", 4 << 30, 8, a8)
    t8, _, _ = collective_time_us("all_reduce", 8 << 30, 8, a8)
    assert (algo, proto) == ("ring", "Simple")
    assert (4 << 30) * 2 * 7 / 8 / ((t8 - t4) * 1e3) == pytest.approx(246.7, rel=1e-4)
    # up to 64 MB the fitted line holds
    cal = a8.correction()
    t1, algo, proto = collective_time_us("all_reduce", 64 << 20, 8, a8)
    lat, bw = next((c[3], c[4]) for c in predict("all_reduce", 64 << 20, 8, a8) if c[1:3] == (algo, proto))
    assert t1 == pytest.approx(cal.overhead_us + cal.latency_scale * lat + bw / cal.efficiency_for("nvswitch", algo, proto))
