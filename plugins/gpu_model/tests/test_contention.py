"""--gpu-contention: a GEMM overlapping a collective runs on fewer SMs and less HBM bandwidth."""

from __future__ import annotations

import json
import math

import pytest

from astra_sim.chakra import make_node, types as T
from astra_sim.cli import main as astra_main
from astra_sim.errors import ConfigError
from astra_sim.report import read_report
from astra_sim.simulation import simulate
from astra_sim_testing import write_case

from astra_gpu_model.contention import Contention, contended_gpu, default_hbm_share
from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import classify

PLUGINS = ["network_analytical", "gpu_model"]
BF16_PAIR = "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"
SHAPES = "[[8192, 8192], [8192, 8192]]"


def mm(node_id, deps=()):
    return make_node(node_id, "aten::mm", T.COMP_NODE, data_deps=list(deps), duration_micros=7,
                     attrs={"is_cpu_op": False, "inputs_shapes": SHAPES, "inputs_types": BF16_PAIR})


def all_reduce(node_id, size=1 << 30):
    return make_node(node_id, "ar", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})


def run(tmp_path, nodes, name, npus=2, **options):
    prefix, system, network = write_case(tmp_path, nodes, npus, name)
    return simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu", options=options)


def mm_alone_ns(gpu="H100"):
    op = classify("aten::mm", SHAPES, BF16_PAIR, "")
    return max(1, math.ceil(GpuComputeModel(None, gpu).op_seconds(op) * 1e9))


def test_gemm_overlapping_an_all_reduce_is_slower_than_alone(tmp_path):
    alone = run(tmp_path, [mm(0)], "alone", gpu_contention=True)
    alone_ns = alone.ranks[0].compute_ns
    assert alone_ns == mm_alone_ns()
    assert alone.stats["gpu_utilization"][0]["contended_compute_ns"] == 0

    # all-reduce id 0 is issued first (ready nodes issue in id order), then the independent GEMM
    report = run(tmp_path, [all_reduce(0), mm(1)], "overlap", gpu_contention=True)
    overlapped_ns = report.ranks[0].compute_ns
    comm_ns = report.ranks[0].comm_ns
    assert comm_ns > overlapped_ns  # the all-reduce covers the whole GEMM
    # 132 - 32 = 100 SMs and 73% of HBM: clearly slower, but not more than the SM ratio allows + waves
    assert overlapped_ns > 1.2 * alone_ns
    assert overlapped_ns < 2.0 * alone_ns
    h100 = load_gpu("H100")
    slowed = contended_gpu(h100, 32, default_hbm_share(h100))
    op = classify("aten::mm", SHAPES, BF16_PAIR, "")
    model = GpuComputeModel(None, "H100")
    model.gpu = slowed
    assert overlapped_ns == max(1, math.ceil(model.op_seconds(op) * 1e9))

    # the utilisation summary
    util = report.stats["gpu_utilization"]
    assert set(util) == {0, 1}
    u = util[0]
    assert 0.0 < u["sm_busy_fraction"] <= 1.0
    assert 0.0 < u["hbm_busy_fraction"] <= 1.0
    assert u["contended_compute_ns"] == overlapped_ns == u["compute_ns"]
    timeline = u["timeline"]
    assert timeline[0][:4] == [0, overlapped_ns, 100, 32]
    assert timeline[-1][:4] == [overlapped_ns, report.ranks[0].finish_ns, 0, 32]
    assert 0.27 < timeline[0][4] <= 1.0 and timeline[-1][4] == pytest.approx(0.2687, abs=1e-3)
    assert all(a < b for a, b, *_ in timeline)
    expected_sm = (132 * overlapped_ns + 32 * (report.ranks[0].finish_ns - overlapped_ns)) / (
        132 * report.ranks[0].finish_ns)
    assert u["sm_busy_fraction"] == pytest.approx(expected_sm, abs=1e-3)
    assert report.settings["gpu_model"]["contention"] == {
        "model": "sm-hbm", "comm_sms": 32, "comm_hbm_share": 0.2687, "compute_sms_during_comm": 100}
    json.dumps(report.stats["gpu_utilization"])  # serialisable

    # fewer comm SMs -> less slowdown; contention off -> overlap is free (as before)
    fewer = run(tmp_path, [all_reduce(0), mm(1)], "fewer", gpu_contention=True, gpu_comm_sms=16,
                gpu_comm_hbm_share=0.1)
    assert alone_ns < fewer.ranks[0].compute_ns < overlapped_ns
    off = run(tmp_path, [all_reduce(0), mm(1)], "off")
    assert off.ranks[0].compute_ns == alone_ns
    assert "gpu_utilization" not in off.stats and "contention" not in off.settings["gpu_model"]


def test_gemm_issued_with_the_collective_is_slowed_whichever_issues_first(tmp_path):
    # the decision waits for the end of the nanosecond: the order of one nanosecond's events does not decide it
    first = run(tmp_path, [mm(0), all_reduce(1)], "gemm-first", gpu_contention=True)
    second = run(tmp_path, [all_reduce(0), mm(1)], "gemm-second", gpu_contention=True)
    assert first.ranks[0].compute_ns == second.ranks[0].compute_ns > mm_alone_ns()
    timeline = first.stats["gpu_utilization"][0]["timeline"]
    assert timeline[0][2:4] == [100, 32]  # the GEMM on the SMs the collective leaves


def test_gemm_after_the_collective_is_not_slowed(tmp_path):
    report = run(tmp_path, [all_reduce(0, 1 << 20), mm(1, deps=[0])], "after", gpu_contention=True)
    assert report.ranks[0].compute_ns == mm_alone_ns()
    assert report.stats["gpu_utilization"][0]["contended_compute_ns"] == 0


def test_options_are_checked():
    gpu = load_gpu("H100")
    with pytest.raises(ConfigError):
        Contention(gpu, comm_sms=-1)
    with pytest.raises(ConfigError):
        Contention(gpu, hbm_share=1.0)
    assert Contention(gpu, comm_sms=1000).comm_sms == gpu.sm_count - 1
    assert Contention.from_options(gpu, None, {}) is None
    assert Contention.from_options(gpu, None, {"gpu_contention": "false"}) is None
    assert default_hbm_share(gpu) == pytest.approx(2 * 450 / 3350)


def test_cli_options(tmp_path):
    prefix, system, network = write_case(tmp_path, [all_reduce(0), mm(1)])
    out = tmp_path / "report.json"
    args = ["run", "-p", "network_analytical", "-p", "gpu_model", "--workload-configuration", prefix,
            "--system-configuration", system, "--network-configuration", network, "--compute-model", "gpu",
            "-q", "--report-json", str(out), "--gpu-contention", "--gpu-comm-sms", "24"]
    assert astra_main(args) == 0
    data = read_report(out)
    assert data["settings"]["gpu_model"]["contention"]["comm_sms"] == 24
    util = data["stats"]["gpu_utilization"]["0"]
    assert util["timeline"][0][2:4] == [108, 24]


def test_a_collective_on_its_own_communicator_stream_still_contends(tmp_path):
    """comm-streams per-communicator: a group's collective runs in a slot of its own; the GEMM beside it is
    still slowed (the rank's communication count includes every stream)."""
    grouped = make_node(0, "ar", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                          "comm_size": 1 << 30, "pg_name": "1"})
    prefix, system, network = write_case(tmp_path, [grouped, mm(1)], comm_streams="per-communicator")
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 1]}))
    report = simulate(str(prefix), system, network, None, str(groups), plugins=PLUGINS, compute_model="gpu",
                      options={"gpu_contention": True})
    assert report.ranks[0].comm_ns > report.ranks[0].compute_ns
    assert report.ranks[0].compute_ns > 1.2 * mm_alone_ns()
    assert report.stats["gpu_utilization"][0]["contended_compute_ns"] > 0


def contended_mm_ns(comm_sms):
    h100 = load_gpu("H100")
    model = GpuComputeModel(None, "H100")
    model.gpu = contended_gpu(h100, comm_sms, default_hbm_share(h100))
    return max(1, math.ceil(model.op_seconds(classify("aten::mm", SHAPES, BF16_PAIR, "")) * 1e9))


def test_a_collective_takes_the_sms_its_node_names(tmp_path):
    """``comm_sms`` on the node (e.g. NCCL_MAX_CTAS of its communicator) overrides --gpu-comm-sms; 0 is a
    copy-engine transfer, which still takes its HBM share."""
    for sms in (8, 0):
        ar = all_reduce(0)
        ar.attrs["comm_sms"] = sms
        report = run(tmp_path, [ar, mm(1)], f"sms{sms}", gpu_contention=True)
        assert report.ranks[0].compute_ns == contended_mm_ns(sms)
        util = report.stats["gpu_utilization"][0]
        assert util["timeline"][0][2:4] == [132 - sms, sms]
        assert util["contended_compute_ns"] == util["compute_ns"] == report.ranks[0].compute_ns  # 0 SMs too
    assert mm_alone_ns() < contended_mm_ns(0) < contended_mm_ns(8) < contended_mm_ns(32)


def test_concurrent_collectives_add_their_sms(tmp_path):
    """Two communicators' collectives on their own streams: the GEMM issued beside both loses both's SMs."""
    nodes = []
    for node_id, (group, sms) in enumerate((("1", 8), ("2", 16))):
        nodes.append(make_node(node_id, f"ar{group}", T.COMM_COLL_NODE, attrs={
            "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 30, "pg_name": group,
            "comm_sms": sms}))
    nodes.append(mm(2))
    prefix, system, network = write_case(tmp_path, nodes, comm_streams="per-communicator")
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 1], "2": [0, 1]}))
    report = simulate(str(prefix), system, network, None, str(groups), plugins=PLUGINS, compute_model="gpu",
                      options={"gpu_contention": True})
    assert report.ranks[0].compute_ns == contended_mm_ns(24)
    assert report.stats["gpu_utilization"][0]["timeline"][0][2:4] == [108, 24]


@pytest.mark.parametrize("bad", [-1, "8", 2.5, True])
def test_a_bad_comm_sms_attribute_names_the_node(tmp_path, bad):
    ar = all_reduce(0)
    ar.attrs["comm_sms"] = bad
    with pytest.raises(Exception, match=r"node 0 \('ar'\).*'comm_sms' must be an integer >= 0"):
        run(tmp_path, [ar, mm(1)], "bad", gpu_contention=True)


def _context(nodes_in_flight, **options):
    from types import SimpleNamespace

    return SimpleNamespace(engine=None, options=options, npus_per_dim=[8, 2], total_npus=16,
                           comm_groups={1: list(range(8)), 2: [0, 8]},
                           comm_nodes_in_flight=lambda rank: nodes_in_flight, comm_in_flight=None)


def _send(dst, sms=None):
    attrs = {"is_cpu_op": False, "comm_dst": dst, "comm_size": 1 << 20, "comm_tag": 1}
    if sms is not None:
        attrs["comm_sms"] = sms
    return make_node(9, "send", T.COMM_SEND_NODE, attrs=attrs)


def _coll(pg):
    attrs = {"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20, "comm_sms": 8}
    if pg is not None:
        attrs["pg_name"] = pg
    return make_node(8, "ar", T.COMM_COLL_NODE, attrs=attrs)


def test_hbm_share_per_transfer_follows_the_link_it_uses():
    """With a NIC rate known (a --platform sets nccl_nic_gbps), a transfer takes 2 x its link's rate of HBM:
    NVLink inside the rank's node (npus_per_dim[0] NPUs), the NIC when it leaves it."""
    gpu = load_gpu("H100")
    nvlink, nic = 2 * 450 / 3350, 2 * 50 / 3350
    cases = [
        ([_send(3)], 32, nvlink),             # same node (0..7)
        ([_send(9)], 32, nic),                # another node
        ([_coll(None)], 8, nic),              # the world group spans both nodes
        ([_coll("1")], 8, nvlink),            # group 1: NPUs 0..7
        ([_coll("2")], 8, nic),               # group 2: NPUs 0 and 8
        ([_coll("7")], 8, nvlink),            # not in the group file (declared in the trace): taken as one node
        ([_send(9, sms=0), _coll("2")], 8, 2 * nic),      # shares add up
        ([_send(3), _send(4), _coll("1")], 72, 0.5),      # capped
    ]
    for nodes, sms, share in cases:
        c = Contention(gpu, _context(nodes, nccl_nic_gbps=50.0))
        assert c.per_transfer
        got_sms, got_share = c.busy(0)
        assert got_sms == sms and got_share == pytest.approx(share, abs=1e-4), [n.name for n in nodes]
    assert Contention(gpu, _context([], nccl_nic_gbps=50.0)).busy(0) is None
    # an explicit --gpu-comm-hbm-share, or no NIC rate: one fixed share whatever the transfers
    fixed = Contention(gpu, _context([_send(9)], nccl_nic_gbps=50.0), hbm_share=0.2)
    assert not fixed.per_transfer and fixed.busy(0) == (32, 0.2)
    default = Contention(gpu, _context([_send(9)]))
    assert not default.per_transfer and default.busy(0) == (32, pytest.approx(nvlink))
    d = Contention(gpu, _context([], nccl_nic_gbps=50.0)).describe()
    assert d["comm_hbm_share"] == "per transfer" and d["hbm_share_nic"] == pytest.approx(nic, abs=1e-4)


def test_platform_runs_charge_a_cross_node_transfer_less_hbm(tmp_path):
    """End to end on the hgx-h100 platform (2 nodes): a memory-bound kernel issued beside a cross-node send
    loses less HBM bandwidth than one beside a send inside the node."""
    from astra_sim.chakra import write_et, make_metadata

    add = "[[8192, 8192], [8192, 8192]]"
    times = {}
    for name, peer in (("intra", 1), ("inter", 8)):
        prefix = tmp_path / name / "t"
        prefix.parent.mkdir()
        for rank in range(16):
            nodes = []
            if rank == 0:
                nodes = [make_node(0, "send", T.COMM_SEND_NODE, attrs={
                    "is_cpu_op": False, "comm_dst": peer, "comm_size": 1 << 30, "comm_tag": 5, "comm_sms": 0}),
                    make_node(1, "aten::add", T.COMP_NODE, attrs={
                        "is_cpu_op": False, "inputs_shapes": add, "inputs_types": BF16_PAIR})]
            elif rank == peer:
                nodes = [make_node(0, "recv", T.COMM_RECV_NODE, attrs={
                    "is_cpu_op": False, "comm_src": 0, "comm_size": 1 << 30, "comm_tag": 5})]
            write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
        report_path = tmp_path / name / "r.json"
        assert astra_main(["run", "-p", "network_analytical", "-p", "gpu_model", "--platform", "hgx-h100",
                           "--nodes", "2", "--workload-configuration", str(prefix), "--compute-model", "gpu",
                           "-q", "--gpu-contention", "--report-json", str(report_path)]) == 0
        data = read_report(report_path)
        times[name] = data["ranks"][0]["compute_ns"]
        assert data["settings"]["gpu_model"]["contention"]["comm_hbm_share"] == "per transfer"
    alone = run(tmp_path, [make_node(0, "aten::add", T.COMP_NODE, attrs={
        "is_cpu_op": False, "inputs_shapes": add, "inputs_types": BF16_PAIR})], "alone").ranks[0].compute_ns
    assert alone < times["inter"] < times["intra"]


def test_a_gemm_with_an_sm_margin_runs_on_the_other_sms(tmp_path):
    """``sm_margin`` (Transformer Engine's set_sm_margin): the GEMM was launched on sm_count - margin SMs, so it
    is slowed by the margin even with no transfer running, keeps the margin when a smaller transfer runs beside
    it (the transfer uses the SMs it left free), and loses more SMs to a larger one. HBM is only shared while a
    transfer runs."""
    def mm_margin(node_id, margin):
        node = mm(node_id)
        node.attrs["sm_margin"] = margin
        return node

    h100 = load_gpu("H100")
    alone = run(tmp_path, [mm_margin(0, 24)], "m_alone", gpu_contention=True)
    model = GpuComputeModel(None, "H100")
    model.gpu = contended_gpu(h100, 24, 0.0)
    op = classify("aten::mm", SHAPES, BF16_PAIR, "")
    assert alone.ranks[0].compute_ns == max(1, math.ceil(model.op_seconds(op) * 1e9)) > mm_alone_ns()
    assert alone.stats["gpu_utilization"][0]["timeline"][0][2:4] == [108, 0]  # 108 SMs computing, none sending
    for sms, expected in ((8, contended_mm_ns(24)), (32, contended_mm_ns(32))):
        ar = all_reduce(0)
        ar.attrs["comm_sms"] = sms
        report = run(tmp_path, [ar, mm_margin(1, 24)], f"m{sms}", gpu_contention=True)
        assert report.ranks[0].compute_ns == expected
    # without --gpu-contention the margin is not applied (as no contention is)
    assert run(tmp_path, [mm_margin(0, 24)], "m_off").ranks[0].compute_ns == mm_alone_ns()
    with pytest.raises(Exception, match=r"compute node 0 \('aten::mm'\) of rank 0: attribute 'sm_margin' must be "
                                        r"an integer from 0 to 131"):
        run(tmp_path, [mm_margin(0, 132)], "m_bad", gpu_contention=True)


def test_measured_contention_slows_by_the_measured_factors(tmp_path):
    """--gpu-contention-model measured: a GEMM beside a 32-SM all-reduce takes the measured compute slowdown
    for 32 of 132 SMs; an add the (smaller) memory-bound one; a GEMM launched leaving 32 SMs free only the
    carve-out's cost (Transformer Engine's sm_margin)."""
    from astra_gpu_model.contention import measured_slowdown

    options = dict(gpu_contention=True, gpu_contention_model="measured")
    alone = run(tmp_path, [mm(0)], "alone", **options).ranks[0].compute_ns
    beside = run(tmp_path, [all_reduce(0), mm(1)], "beside", **options).ranks[0].compute_ns
    factor = measured_slowdown("compute", 32 / 132)
    assert 1.3 < factor < 1.7
    assert beside == round(alone * factor)
    add = make_node(1, "aten::add", T.COMP_NODE, attrs={
        "is_cpu_op": False, "inputs_shapes": "[[268435456], [268435456]]", "inputs_types": BF16_PAIR})
    add_alone = run(tmp_path, [make_node(0, "aten::add", T.COMP_NODE, attrs=dict(add.attrs))], "add",
                    **options).ranks[0].compute_ns
    add_beside = run(tmp_path, [all_reduce(0), add], "add2", **options).ranks[0].compute_ns
    assert add_beside == round(add_alone * measured_slowdown("memory", 32 / 132))
    assert add_beside / add_alone < factor
    margin = make_node(1, "aten::mm", T.COMP_NODE, attrs={
        "is_cpu_op": False, "inputs_shapes": SHAPES, "inputs_types": BF16_PAIR, "sm_margin": 32})
    carved = run(tmp_path, [all_reduce(0), margin], "carved", **options).ranks[0].compute_ns
    assert carved == round(alone * measured_slowdown("carveout", 32 / 132)) < beside


def test_measured_slowdowns_grow_with_the_sms_taken():
    from astra_gpu_model.contention import measured_slowdown

    for kind in ("compute", "memory", "carveout"):
        values = [measured_slowdown(kind, f / 100) for f in range(0, 80)]
        assert values[0] == 1.0 and all(b >= a for a, b in zip(values, values[1:]))


def test_contention_model_off_frees_overlap_even_under_a_platform():
    from astra_sim.platforms import get_platform

    gpu = load_gpu("H100-SXM5-80GB")
    assert Contention.from_options(gpu, None, {"gpu_contention": True, "gpu_contention_model": "off"}) is None
    on = get_platform("hgx-h100").resolve(1, {})
    assert on.options["gpu_contention"] is True and on.options["gpu_contention_model"] == "measured"
    off = get_platform("hgx-h100").resolve(1, {"gpu_contention_model": "off"})
    assert not off.options.get("gpu_contention")
    assert off.defaults["contention"].startswith("off")
