"""--scale-out KIND: InfiniBand NDR/XDR, Spectrum-X and standard RoCE as data (scale_out.py), hand-computed on the
platform's generated network and NCCL's NIC rate, and end to end through `astra run`."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import all_reduce_trace

from astra_gpu_model.platforms import FABRIC_HOP_LATENCY_NS, get_platform
from astra_gpu_model.scale_out import KINDS, NIC_ACHIEVABLE, get_kind, native_kind, scale_out

GIB = 1 << 30


def _fabric_dimension(setup):
    """The generated network YAML's scale-out (last) bandwidth (GiB/s) and latency (ns per hop)."""
    lines = {line.split(":")[0]: line for line in setup.network_configuration.text.splitlines() if ":" in line}

    def last(key):
        return float(lines[key].split("[")[1].split("]")[0].split(",")[-1])

    return last("bandwidth"), last("latency")


def test_the_numbers_by_hand():
    # hgx-h100, 400 Gb/s NICs: NDR leaves of 64 / 2 = 32 nodes; 64 nodes span 2 leaves, 4 nodes one
    big = scale_out("ib-ndr", 64, 400.0)
    assert (big.nodes_per_leaf, big.at_scale, big.switches) == (32, True, 3)
    assert big.one_way_latency_ns() == 1000 + 3 * 330 and big.hop_latency_ns() == 995.0
    assert big.effective_gbit_per_s() == pytest.approx(400 * 0.96 * 0.95)  # 364.8
    assert big.nccl_gb_per_s() == pytest.approx(50 * 0.95)
    small = scale_out("ib-ndr", 4, 400.0)
    assert (small.at_scale, small.one_way_latency_ns(), small.effective_gbit_per_s()) == (False, 1330, 384.0)
    assert small.nccl_gb_per_s() == 50.0
    # Ethernet: a 51.2 Tb/s switch has 128 ports of 400G (64 nodes per leaf) or 64 of 800G (32)
    assert scale_out("roce", 64, 400.0).at_scale is False and scale_out("roce", 65, 400.0).at_scale is True
    assert scale_out("roce", 65, 400.0).effective_gbit_per_s() == pytest.approx(400 * 0.96 * 0.60)  # 230.4
    assert scale_out("spectrum-x", 65, 400.0).effective_gbit_per_s() == pytest.approx(364.8)
    assert scale_out("spectrum-x", 33, 800.0).nodes_per_leaf == 32
    # InfiniBand's generation fixes the rate: XDR is 800 Gb/s on any platform
    xdr = scale_out("ib-xdr", 4, 400.0)
    assert xdr.line_gbit_per_s == 800.0 and xdr.nodes_per_leaf == 72 and xdr.nccl_gb_per_s() == 100.0
    assert NIC_ACHIEVABLE == 0.96
    assert [scale_out(k, 2, 400.0).flow_ecmp() for k in ("ib-ndr", "spectrum-x", "roce")] == ["split", "split", "hash"]


def test_every_number_has_a_source_and_assumptions_say_so():
    for kind in KINDS.values():
        assert set(kind.sources) == {"line_gbit_per_s", "switch_latency_ns", "leaf_ports", "loaded_share"}
        assert all(text.strip() for text in kind.sources.values())
        info = scale_out(kind.name, 2, 800.0).numbers()
        for key in info["assumptions"]:
            assert info["sources"][key].startswith("ASSUMPTION"), key
        assert "endpoint_latency_ns" in info["assumptions"]
    # the published figures are not marked as assumptions
    assert "loaded_share" not in KINDS["spectrum-x"].assumptions()
    assert "loaded_share" not in KINDS["roce"].assumptions() and "95%" in KINDS["spectrum-x"].sources["loaded_share"]
    assert "switch_latency_ns" not in KINDS["ib-ndr"].assumptions()
    assert "loaded_share" in KINDS["ib-ndr"].assumptions() and "switch_latency_ns" in KINDS["spectrum-x"].assumptions()


def test_the_generated_network_and_nccl_rate():
    platform = get_platform("hgx-h100")
    plain = platform.resolve(64, {})
    assert _fabric_dimension(plain)[1] == FABRIC_HOP_LATENCY_NS and plain.options["nccl_nic_gbps"] == 50.0
    setup = platform.resolve(64, {"scale_out": "ib-ndr"})
    bandwidth, latency = _fabric_dimension(setup)
    assert bandwidth == round(364.8e9 / 8 / GIB, 6) and latency == 995.0
    assert setup.options["nccl_nic_gbps"] == pytest.approx(47.5)
    assert "ib-ndr" in setup.defaults["scale_out"] and "past one leaf of 32 nodes" in setup.defaults["scale_out"]
    roce = platform.resolve(128, {"scale_out": "roce"})
    assert _fabric_dimension(roce)[0] == round(230.4e9 / 8 / GIB, 6)
    assert roce.options["nccl_nic_gbps"] == pytest.approx(30.0)
    # an explicit --nccl-nic-gbps wins, and the defaults line says so
    given = platform.resolve(128, {"scale_out": "roce", "nccl_nic_gbps": 45.0})
    assert given.options["nccl_nic_gbps"] == 45.0 and "given wins" in given.defaults["scale_out"]


def test_with_a_fabric_the_routing_decides():
    """--fabric: the flow backend routes over leaves and spines, so the YAML keeps the achievable rate (no load
    factor) and ECMP or adaptive routing is the kind's --flow-ecmp; the kind's leaf size is the fabric's."""
    platform = get_platform("hgx-h100")
    roce = platform.resolve(128, {"scale_out": "roce", "fabric": "rail"})
    assert _fabric_dimension(roce)[0] == round(384e9 / 8 / GIB, 6)
    assert roce.options["flow_ecmp"] == "hash" and roce.options["fabric_defaults"]["nodes_per_leaf"] == 64
    assert roce.options["nccl_nic_gbps"] == pytest.approx(30.0)  # NCCL's model does not use the fabric
    ndr = platform.resolve(128, {"scale_out": "ib-ndr", "fabric": "rail"})
    assert ndr.options["flow_ecmp"] == "split" and ndr.options["fabric_defaults"]["nodes_per_leaf"] == 32
    assert ndr.options["fabric_defaults"]["scale_out"]["kind"] == "ib-ndr"
    assert platform.resolve(128, {"scale_out": "ib-ndr", "fabric": "rail", "flow_ecmp": "hash"}).options.get(
        "flow_ecmp") is None  # the user's own --flow-ecmp stays


def test_errors_are_one_line():
    platform = get_platform("hgx-h100")
    with pytest.raises(ConfigError, match="needs --nodes >= 2"):
        platform.resolve(1, {"scale_out": "roce"})
    with pytest.raises(ConfigError, match="unknown scale-out kind 'ethernet'; expected one of ib-ndr"):
        platform.resolve(2, {"scale_out": "ethernet"})
    with pytest.raises(ConfigError, match="no leaf switch recorded for 50 Gb/s"):
        get_platform("pcie-l40s").resolve(2, {"scale_out": "spectrum-x"})


def test_platforms_json_names_the_nics_kind():
    assert native_kind("ConnectX-7 NDR InfiniBand 400 Gb/s") == "ib-ndr"
    assert native_kind("ConnectX-8 XDR InfiniBand") == "ib-xdr" and native_kind("400 Gb/s RDMA") is None
    h100 = get_platform("hgx-h100").numbers(64)["scale_out"]
    assert h100["kind"] == "ib-ndr" and h100["numbers"]["at_scale"] and h100["choices"] == list(KINDS)
    assert get_platform("gb200-nvl72").numbers(2)["scale_out"]["kind"] is None
    json.dumps(h100)


def _send(tmp_path, size):
    """16 ranks (2 hgx-h100 nodes): rank 0 sends ``size`` bytes to rank 8, GPU 0 of the other node."""
    prefix = tmp_path / "p2p" / "t"
    prefix.parent.mkdir(parents=True)
    attrs = {"comm_size": size, "comm_tag": 0}
    for rank in range(16):
        nodes = []
        if rank == 0:
            nodes = [make_node(1, "send", T.COMM_SEND_NODE, attrs={**attrs, "comm_type": T.COMM_SEND_NODE,
                                                                    "comm_dst": 8})]
        elif rank == 8:
            nodes = [make_node(1, "recv", T.COMM_RECV_NODE, attrs={**attrs, "comm_type": T.COMM_RECV_NODE,
                                                                    "comm_src": 0})]
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    return str(prefix)


def test_a_send_across_nodes_pays_the_kinds_latency_and_rate(tmp_path):
    """1 MiB from node 0 to node 1 crosses the scale-out dimension once: two hops of its latency plus size over its
    bandwidth. Against the generic model (2 x 1000 ns, 400 Gb/s) by hand: ib-ndr on 2 nodes is 2 x 665 ns at
    384 Gb/s, ib-xdr 2 x 665 ns at 768 Gb/s (the host's launch and sync terms are the same and cancel)."""
    size = 1 << 20
    workload = _send(tmp_path, size)

    def finish(**options):
        return simulate(workload=workload, platform="hgx-h100", nodes=2, **options).max_finish_ns

    def wire_ns(gbit, hop_ns):
        return 2 * hop_ns + size / (round(gbit * 1e9 / 8 / GIB, 6) * GIB / 1e9)

    generic = finish()
    for kind, gbit in (("ib-ndr", 384.0), ("ib-xdr", 768.0), ("roce", 384.0)):
        expected = generic - wire_ns(400.0, 1000.0) + wire_ns(gbit, 665.0)
        assert abs(finish(scale_out=kind) - expected) <= 2, kind


def test_cli_end_to_end(tmp_path, capsys):
    workload = all_reduce_trace(tmp_path, 16, 1 << 20)
    out = tmp_path / "r.json"
    assert main(["run", "--platform", "hgx-h100", "--nodes", "2", "--scale-out", "spectrum-x",
                 "--workload-configuration", workload, "-o", str(out), "-q"]) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["platform_defaults"]["scale_out"].startswith("--scale-out spectrum-x: 400 Gb/s x 0.96")
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--platform", "hgx-h100", "--nodes", "2", "--scale-out", "infiniband",
              "--workload-configuration", workload])
    assert exit_.value.code != 0 and "--scale-out" in capsys.readouterr().err
    rc = main(["run", "--platform", "hgx-h100", "--nodes", "1", "--scale-out", "roce",
               "--workload-configuration", all_reduce_trace(tmp_path / "one", 8, 1 << 20), "-q"])
    assert rc != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--platform hgx-h100 needs --nodes >= 2 (one node has no scale-out fabric)")


@settings(max_examples=80, deadline=None)
@given(text=st.text(max_size=20))
def test_any_kind_name_is_a_kind_or_one_line_error(text):
    try:
        kind = get_kind(text)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--scale-out: unknown scale-out kind")
    else:
        assert kind.name == text.strip().lower() and kind.name in KINDS
