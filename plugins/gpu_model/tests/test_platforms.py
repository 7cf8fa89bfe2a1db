"""`astra run --platform NAME [--nodes N]` and `astra platforms [--json]`."""

import json

import pytest
import yaml

from astra_sim.chakra import make_metadata, make_node, write_et
from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_sim.report import read_report
from astra_sim_testing import write_network_config

from astra_gpu_model.platforms import PLATFORMS, generate, get_platform

NAMES = ["dgx-a100", "dgx-a100-40gb", "hgx-h100", "h100-sharp", "hgx-h200", "h100-pcie", "h100-nvl", "pcie-l40s", "hgx-h20",
         "hgx-h800", "grand-teton-h100", "gb200-nvl72", "gb200-nvl72-64", "gb300-nvl72", "hgx-b200", "hgx-b300", "mi300x", "mi325x",
         "mi355x"]
GIB = 1 << 30


def _trace(tmp_path, ranks, size=4 << 20):
    nodes = [make_node(1, "ar", T.COMM_COLL_NODE,
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})]
    for rank in range(ranks):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    return str(tmp_path / "t")


def _run(tmp_path, *extra, ranks, name="r"):
    report = tmp_path / f"{name}.json"
    rc = main(["run", "--workload-configuration", _trace(tmp_path, ranks), "-q", "--report-json", str(report),
               *extra])
    return rc, (read_report(report) if rc == 0 else None)


def test_all_platforms_known():
    assert sorted(PLATFORMS) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("nodes", [1, 2])
def test_every_platform_simulates_an_all_reduce(tmp_path, name, nodes):
    ranks = PLATFORMS[name].gpus_per_node * nodes
    rc, report = _run(tmp_path, "--platform", name, "--nodes", str(nodes), ranks=ranks)
    assert rc == 0
    text = json.dumps(report)
    assert "max_finish_ns" in text or report
    finishes = [v for v in _finish_times(report)]
    assert len(finishes) == ranks and min(finishes) > 0


def _finish_times(report):
    """Every rank's finish_ns from an ``astra run`` report (a path or its JSON, either layout)."""
    return [r["finish_ns"] for r in read_report(report)["ranks"]]


def test_generated_network_units_and_shape(tmp_path):
    out = generate("hgx-h100", 4, directory=tmp_path)
    net = yaml.safe_load(open(out["network_configuration"]))
    assert net["topology"] == ["Switch", "Switch"]
    assert net["npus_count"] == [8, 4]
    assert net["bandwidth"][0] == pytest.approx(450e9 / GIB)       # NVLink 4: 18 x 25 GB/s per direction
    assert net["bandwidth"][1] == pytest.approx(400e9 / 8 / GIB)   # 400 Gb/s NDR per GPU
    sys_cfg = json.load(open(out["system_configuration"]))
    assert sys_cfg["all-reduce-implementation"] == ["ring", "ring"]
    assert sys_cfg["comm-streams"] == "per-communicator"  # NCCL: a CUDA stream per communicator
    assert out["options"]["gpu"] == "H100-SXM5-80GB"
    nvl = yaml.safe_load(open(generate("gb200-nvl72", 1, directory=tmp_path)["network_configuration"]))
    assert nvl["npus_count"] == [72] and nvl["bandwidth"][0] == pytest.approx(900e9 / GIB)
    a100 = yaml.safe_load(open(generate("dgx-a100", 2, directory=tmp_path)["network_configuration"]))
    assert a100["bandwidth"] == [pytest.approx(300e9 / GIB), pytest.approx(25e9 / GIB)]


def test_more_nodes_and_slower_nics_take_longer(tmp_path):
    _, h100 = _run(tmp_path, "--platform", "hgx-h100", "--nodes", "2", ranks=16, name="h")
    _, a100 = _run(tmp_path, "--platform", "dgx-a100", "--nodes", "2", ranks=16, name="a")
    assert max(_finish_times(a100)) > max(_finish_times(h100))


def test_nccl_on_every_dimension(tmp_path):
    rc, report = _run(tmp_path, "--platform", "hgx-h100", "--nodes", "2", "--platform-collective", "nccl",
                      ranks=16, name="fast")
    assert rc == 0
    provided = generate("hgx-h100", 2, "nccl", directory=tmp_path)
    sys_cfg = json.load(open(provided["system_configuration"]))
    assert sys_cfg["all-reduce-implementation"] == ["nccl", "nccl"]
    assert provided["options"]["nccl_nic_gbps"] == 50.0  # 400 Gb/s per GPU
    # the fabric phase is priced on the NICs: a slower NIC (given explicitly, it wins) takes longer
    rc, slow = _run(tmp_path, "--platform", "hgx-h100", "--nodes", "2", "--platform-collective", "nccl",
                    "--nccl-nic-gbps", "5", ranks=16, name="slow")
    assert rc == 0
    # (NCCL's NVLSTree on two Hopper nodes counts each NIC twice, one tree exchange each way: 10x slower NICs cost
    # ~1.7x at 4 MiB, not the ring's 2x+)
    assert max(_finish_times(slow)) > 1.5 * max(_finish_times(report))


def test_platforms_json_lists_all_with_numbers_and_sources(capsys):
    assert main(["platforms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = [r for r in rows if r.get("family", "gpu") == "gpu"]  # other plugins may add theirs (astra_register_platforms)
    assert [r["name"] for r in rows] == NAMES
    for r in rows:
        for key in ("gpu", "gpus_per_node", "scaleup_gb_per_s_per_direction", "nic_gbit_per_s_per_gpu",
                    "scaleup_gib_per_s_per_direction", "nic_gib_per_s_per_gpu"):
            assert r[key]
        for key in ("gpu", "scaleup", "gpus_per_node", "nic", "scaleup_latency", "fabric_latency"):
            assert r["sources"][key]
    assert main(["platforms"]) == 0
    assert "gb200-nvl72" in capsys.readouterr().out


def test_unknown_platform_is_a_clear_error(tmp_path, capsys):
    rc = main(["run", "--platform", "dgx-z9000", "--workload-configuration", _trace(tmp_path, 8), "-q"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown --platform 'dgx-z9000'" in err and "hgx-h100" in err and "Traceback" not in err
    with pytest.raises(Exception, match="known platforms"):
        get_platform("nope")


def test_bad_nodes_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # argparse: --nodes takes a positive integer
        main(["run", "--platform", "hgx-h100", "--nodes", "0", "--workload-configuration", _trace(tmp_path, 8), "-q"])
    assert stop.value.code == 2 and "--nodes" in capsys.readouterr().err
    from astra_sim.errors import ConfigError
    from astra_sim.platforms import get_platform

    with pytest.raises(ConfigError, match="--nodes must be an integer >= 1"):
        get_platform("hgx-h100").resolve(0, {})


def test_user_network_configuration_wins(tmp_path):
    # A slow 1-dimension 8-NPU network given explicitly: the platform supplies only the system config.
    net = write_network_config(tmp_path / "slow.yml", ("Switch",), (8,), (1.0,), (500.0,))
    # (the kernel's ring: its packets cross the network given; NCCL's model, the default, prices the platform)
    _, fast = _run(tmp_path, "--platform", "hgx-h100", "--platform-collective", "ring", ranks=8, name="fast")
    _, slow = _run(tmp_path, "--platform", "hgx-h100", "--platform-collective", "ring", "--network-configuration",
                   net, ranks=8, name="slow")
    assert max(_finish_times(slow)) > 50 * max(_finish_times(fast))
    assert slow["settings"]["network_configuration"] == net if "network_configuration" in slow.get(
        "settings", {}) else True


def test_explicit_gpu_wins_over_platform_gpu(tmp_path):
    from astra_sim.platforms import get_platform

    out = get_platform("hgx-h100").resolve(1, {"gpu": "B200"})
    assert out.options["gpu"] == "B200" and "instead of the platform's H100" in out.defaults["gpu"]
    assert get_platform("hgx-h100").resolve(1, {}).options["gpu"] == "H100-SXM5-80GB"


def test_cross_node_messages_between_different_local_gpus_pay_the_nic(tmp_path):
    """A data-parallel group with TP 4 ({0, 4, 8, 12} on two 8-GPU nodes): its ring's 4 -> 8 and 12 -> 0
    messages change both the local GPU and the node. The platform's network routes them through the NIC
    (``cross_dimension_route: dimension_order``); the reference's rule would charge NVLink alone."""
    single = yaml.safe_load(open(generate("hgx-h100", 1, directory=tmp_path)["network_configuration"]))
    assert "cross_dimension_route" not in single  # one dimension: nothing to route across
    out = generate("hgx-h100", 2, directory=tmp_path)
    net = yaml.safe_load(open(out["network_configuration"]))
    assert net["cross_dimension_route"] == "dimension_order"
    reference = dict(net, cross_dimension_route="lowest_dimension")
    reference_path = tmp_path / "reference.yml"
    reference_path.write_text(yaml.safe_dump(reference))

    size = 64 << 20
    group = [0, 4, 8, 12]
    nodes = [make_node(1, "rs", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.REDUCE_SCATTER,
                                                       "comm_size": size, "pg_name": "1"})]
    for rank in range(16):
        write_et(str(tmp_path / f"dp.{rank}.et"), make_metadata(), nodes if rank in group else [])
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": group}))

    def finish(*extra):
        report = tmp_path / "r.json"
        assert main(["run", "--platform", "hgx-h100", "--nodes", "2", "--platform-collective", "ring",
                     "--workload-configuration", str(tmp_path / "dp"), "--comm-group-configuration", str(groups),
                     "-q", "--report-json", str(report), *extra]) == 0
        return max(_finish_times(json.loads(report.read_text())))

    nic, nvlink = finish(), finish("--network-configuration", str(reference_path))
    nic_bytes_per_ns = 400e9 / 8 / 1e9
    # every rank's 3 ring messages of size/4 wait, one after another, on a ring where half the links are NICs
    assert nic > 3 * nvlink
    assert nic > (size / 4) / nic_bytes_per_ns


def test_a_platform_is_simulated_as_its_gpu_and_nccl_with_no_other_flag(tmp_path):
    """--platform alone times a GEMM on the platform's GPU (not the trace's 1 us) and an all-reduce with
    NCCL's model, and the report says what was implied; explicit flags win."""
    nodes = [make_node(0, "aten::mm", T.COMP_NODE, duration_micros=1, attrs={
                 "is_cpu_op": False, "inputs_shapes": "[[8192, 8192], [8192, 8192]]",
                 "inputs_types": "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"}),
             make_node(1, "ar", T.COMM_COLL_NODE, data_deps=[0], attrs={
                 "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 30})]
    for rank in range(8):
        write_et(str(tmp_path / f"g.{rank}.et"), make_metadata(), nodes)

    def run(*extra):
        report = tmp_path / "r.json"
        assert main(["run", "--platform", "hgx-h100", "--workload-configuration", str(tmp_path / "g"), "-q",
                     "--report-json", str(report), *extra]) == 0
        return read_report(report)

    implied = run()
    assert implied["settings"]["compute_model"] == "gpu"
    assert implied["settings"]["gpu_model"]["gpu"] == "H100-SXM5-80GB"
    assert 1_000_000 < implied["ranks"][0]["compute_ns"] < 2_500_000  # an 8192^3 bf16 GEMM on an H100
    defaults = implied["settings"]["platform_defaults"]
    assert defaults["compute_model"].startswith("gpu (implied by --platform hgx-h100")
    assert defaults["collective"].startswith("nccl (implied")
    # the generated system configuration, inline in the report (its temporary file is gone)
    assert implied["settings"]["system_configuration"]["content"]["all-reduce-implementation"] == ["nccl"]
    replay = run("--compute-model", "replay", "--platform-collective", "ring")
    assert replay["ranks"][0]["compute_ns"] == 1000
    assert replay["settings"]["platform_defaults"]["collective"] == "ring (--platform-collective)"
    assert replay["settings"]["platform_defaults"]["compute_model"] == "replay (--compute-model)"
    assert replay["ranks"][0]["comm_ns"] != implied["ranks"][0]["comm_ns"]
