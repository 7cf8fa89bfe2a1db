"""InfraGraph inputs of the flow/congestion backends: loading, validation, ranks, logical dims,
the ``astra infragraph`` command and the examples in examples/infragraph/."""

from __future__ import annotations

import importlib.util
import json
import math
from types import SimpleNamespace

import pytest
import yaml

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.report import read_report
from astra_sim_testing import handwritten_infragraph, repo_root

from astra_network_congestion.graph import NPU, SWITCH
from astra_network_congestion.infragraph import (
    GIB, ROUTER_SUFFIX, is_infragraph_config, load_infragraph, load_network_graph, parse_bandwidth,
    parse_latency,
)
from astra_network_congestion.infragraph_analytical import to_analytical

ROOT = repo_root()
EXAMPLES = ROOT / "examples" / "infragraph"
EXAMPLE_DIMS = {"dgx_h100": [8], "clos_dgx_h100": [8, 16], "clos_dgx_h100_rail": [8, 16], "torus_4x4x4": [4, 4, 4]}
SAMPLES = [
    "infra-single-dgx-h100", "infra-single-tier-4x-server", "infra-clos-2tier-radix8-server",
    "infra-clos-2tier-radix16-dgxh100", "infra-ironwood-torus-rack",
]


def _write(path, data):
    path.write_text(yaml.safe_dump(data, sort_keys=False) if not isinstance(data, str) else data)
    return str(path)


def _sample_wrapper(shared_dir, tmp_path, name, **extra):
    """A wrapper that fills in what the blueprint samples leave out (most link bandwidths, all
    latencies); the sibling rank annotation is found next to the infrastructure."""
    folder = shared_dir / "samples" / "infragraph" / "generated"
    expanded = json.loads((folder / f"{name}.networkx.json").read_text())
    names = sorted({e["link"] for e in expanded["edges"]})
    wrapper = {
        "infrastructure": str(folder / f"{name}.yaml"),
        "default_link_latency_ns": 100,
        "links": {n: {"bandwidth": "100 Gb/s"} for n in names
                  if not any(e["link"] == n and "bandwidth" in e for e in expanded["edges"])},
        **extra,
    }
    return _write(tmp_path / f"{name}.wrapper.yaml", wrapper), expanded


def _context(raw=None, warnings=None):
    warn = (warnings.append if warnings is not None else (lambda message: None))
    return SimpleNamespace(system_config=SimpleNamespace(path="sys.json", raw=raw or {}), warn=warn)


def _complete_handwritten(shared_dir):
    """The handwritten sample with bandwidth and latency on every link (astra_sim_testing)."""
    infra = handwritten_infragraph(shared_dir)
    assert infra is not None, "the handwritten InfraGraph sample is missing"
    return infra


# ------------------------------------------------------------------ units


@pytest.mark.parametrize("text, bytes_per_s", [
    ("400 Gbps", 50e9), ("400 Gb/s", 50e9), ("450 GB/s", 450e9), ("64 GBps", 64e9), ("1 GiB/s", GIB),
    ("1.6 Tb/s", 200e9), ("32 GT/s", 4e9),
    ({"choice": "gigabits_per_second", "gigabits_per_second": 800}, 100e9),
    ({"choice": "gigabytes_per_second", "gigabytes_per_second": 3350}, 3350e9),
])
def test_bandwidth_units(text, bytes_per_s):
    assert parse_bandwidth(text, "here") == pytest.approx(bytes_per_s)


@pytest.mark.parametrize("text, ns", [("500 ns", 500), ("1 us", 1000), ("0.005 ms", 5000), (250, 250),
                                      ({"choice": "us", "us": 2}, 2000)])
def test_latency_units(text, ns):
    assert parse_latency(text, "here") == pytest.approx(ns)


@pytest.mark.parametrize("bad", ["400", 400, "400 furlongs", "-5 Gbps", "0 GB/s", {"choice": "gigabits_per_second"}])
def test_bad_bandwidth_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="here"):
        parse_bandwidth(bad, "here")


# ------------------------------------------------------------------ the shared samples


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_loads_like_its_networkx_expansion(shared_dir, tmp_path, name):
    wrapper, expanded = _sample_wrapper(shared_dir, tmp_path, name)
    model = load_infragraph(wrapper)
    network = model.network
    assert model.graph.number_of_nodes() == len(expanded["nodes"])
    assert model.graph.number_of_edges() == len(expanded["edges"])
    routers = len(model.routers)
    assert len(network.nodes) == len(expanded["nodes"]) + routers
    assert len(network.links) == 2 * (len(expanded["edges"]) + routers)
    # Ranks follow the sample's rank annotation (the sibling *.rank-annotation.yaml).
    ranked = {int(n["rank"]): n["id"] for n in expanded["nodes"] if "rank" in n}
    assert network.rank_node == [ranked[r] for r in range(len(ranked))]
    assert model.annotation_paths and model.annotation_paths[-1].endswith(f"{name}.rank-annotation.yaml")
    # NPUs are the xpus; everything else forwards.
    xpus = {n["id"] for n in expanded["nodes"] if n["type"] == "xpu"}
    assert {n for n, kind in network.nodes.items() if kind == NPU} == xpus
    assert network.npus_per_dim == [len(xpus)]
    # Every rank reaches every other (spot check), never through another NPU.
    last = network.total_npus - 1
    for path in network.shortest_paths(network.rank_node[0], network.rank_node[last]):
        assert all(network.nodes[network.links[i].dst] != NPU for i in path[:-1])


def test_blueprint_dgx_internals(shared_dir, tmp_path):
    wrapper, _ = _sample_wrapper(shared_dir, tmp_path, "infra-single-dgx-h100")
    network = load_network_graph(wrapper)
    assert network.nodes["dgx.0.nvsw.0"] == SWITCH  # the in-box NVSwitch forwards
    assert network.nodes["dgx.0.cpu.0"] == SWITCH
    assert network.nodes["dgx.0.pciesl.3"] == SWITCH  # custom pcie_slot
    assert network.nodes["dgx.0.cx7.0"] == SWITCH
    paths = network.shortest_paths("dgx.0.xpu.0", "dgx.0.xpu.5")
    assert len(paths) == 4  # one per NVSwitch
    assert {network.links[p[0]].dst for p in paths} == {f"dgx.0.nvsw.{k}" for k in range(4)}


def test_handwritten_sample_with_its_annotations(shared_dir, tmp_path):
    """The handwritten infrastructure: the sibling *.annotations.yaml (generic Annotation with
    device-level keys and ranks) is applied; GB/s and Gb/s convert to 2^30-byte GB/s."""
    folder = shared_dir / "samples" / "infragraph"
    wrapper = _write(tmp_path / "w.yaml", {
        "infrastructure": str(folder / "handwritten-2host-4xpu-tor.yaml"),
        "default_link_latency_ns": 10,
        "links": {"ic": {"bandwidth": "3.2 Tb/s", "latency": "0 ns"}},
    })
    model = load_infragraph(wrapper)
    network = model.network
    assert model.annotation_paths[0].endswith("handwritten-2host-4xpu-tor.annotations.yaml")
    assert network.rank_node == [f"host.{h}.xpu.{x}" for h in range(2) for x in range(4)]
    by_name = {}
    for link in network.links:
        by_name.setdefault(link.name, set()).add((link.bandwidth_bytes_per_ns, link.latency_ns))
    assert by_name["scaleup"] == {(450.0, 500.0)}  # 450 GB/s = 450 bytes/ns
    assert by_name["eth400"] == {(50.0, 1000.0)}  # 400 Gb/s = 50 bytes/ns
    assert by_name["hbmlink"] == {(3350.0, 10.0)}  # latency from default_link_latency_ns
    assert by_name["ic"] == {(400.0, 0.0)}
    # Scale-out path: xpu -> nic -> tor port -> asic -> port -> nic -> xpu.
    paths = network.shortest_paths("host.0.xpu.0", "host.1.xpu.0")
    assert [network.links[i].dst for i in paths[0]] == [
        "host.0.nic.0", "tor.0.port.0", "tor.0.asic.0", "tor.0.port.4", "host.1.nic.0", "host.1.xpu.0"]


# ------------------------------------------------------------------ bare infrastructures, ranks, dims


def test_bare_infrastructure_ranks_in_natural_order(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    infra["instances"] = [{"name": "host", "device": "host", "count": 1}]  # one host, no ToR
    infra["edges"] = []
    path = _write(tmp_path / "one-host.yaml", infra)
    assert is_infragraph_config(path)
    network = load_network_graph(path)
    assert network.rank_node == [f"host.0.xpu.{i}" for i in range(4)]
    assert network.npus_per_dim == [4]


def test_natural_order_sorts_numbers_numerically(tmp_path):
    physical = {"bandwidth": {"choice": "gigabits_per_second", "gigabits_per_second": 100},
                "latency": {"choice": "ns", "ns": 10}}
    box = {"name": "box", "components": [{"name": "xpu", "choice": "xpu", "count": 1},
                                         {"name": "nic", "choice": "nic", "count": 1}],
           "links": [{"name": "l", "physical": physical}],
           "edges": [{"ep1": {"component": "xpu[0]"}, "ep2": {"component": "nic[0]"}, "scheme": "one2one", "link": "l"}]}
    switch = {"name": "sw", "components": [{"name": "asic", "choice": "switch", "count": 1}], "links": [], "edges": []}
    infra = {
        "name": "many", "devices": [box, switch], "links": [{"name": "net", "physical": physical}],
        "instances": [{"name": "box", "device": "box", "count": 12}, {"name": "sw", "device": "sw", "count": 1}],
        "edges": [{"ep1": {"instance": "box[:]", "component": "nic[0]"},
                   "ep2": {"instance": "sw[0]", "component": "asic[0]"}, "scheme": "many2many", "link": "net"}],
    }
    network = load_network_graph(_write(tmp_path / "many.json", json.dumps(infra)))
    assert network.rank_node == [f"box.{i}.xpu.0" for i in range(12)]


def test_sibling_rank_annotation_sets_the_order(shared_dir, tmp_path):
    """Ranks from a sibling <stem>.rank-annotation.yaml, in the annotation's (reversed) order."""
    path = _write(tmp_path / "hw.yaml", _complete_handwritten(shared_dir))
    nodes = [f"host.{h}.xpu.{x}" for h in range(2) for x in range(4)][::-1]
    annotation = {"nodes": [{"name": n, "attributes": [{"attribute": "rank", "value": r}]}
                            for r, n in enumerate(nodes)]}
    _write(tmp_path / "hw.rank-annotation.yaml", annotation)
    assert load_network_graph(path).rank_node == nodes


def test_typed_sdk_rank_assignment(shared_dir, tmp_path):
    _write(tmp_path / "hw.yaml", _complete_handwritten(shared_dir))
    _write(tmp_path / "typed.yaml", {
        "rank_assignment": [{"rank_identifier": r, "npu_identifier": f"host.{r % 2}.xpu.{r // 2}"} for r in range(8)],
        "link_specifications": [{"link_name": "eth400", "link_bandwidth_gbps": 200, "link_latency_ms": 0.002}],
    })
    wrapper = _write(tmp_path / "w.yaml", {"infrastructure": "hw.yaml", "annotations": "typed.yaml"})
    network = load_network_graph(wrapper)
    assert network.rank_node[:3] == ["host.0.xpu.0", "host.1.xpu.0", "host.0.xpu.1"]
    eth = {(l.bandwidth_bytes_per_ns, l.latency_ns) for l in network.links if l.name == "eth400"}
    assert eth == {(25.0, 2000.0)}  # 200 Gb/s, 0.002 ms


def test_logical_dims_from_wrapper_system_config_or_default(shared_dir, tmp_path):
    infra = _write(tmp_path / "hw.yaml", _complete_handwritten(shared_dir))
    assert load_network_graph(infra).npus_per_dim == [8]
    assert load_network_graph(infra, _context({"logical-dims": [4, 2]})).npus_per_dim == [4, 2]
    assert load_network_graph(infra, _context({"logical-dims": "4x2"})).npus_per_dim == [4, 2]
    wrapper = _write(tmp_path / "w.yaml", {"infrastructure": "hw.yaml", "logical_dims": [4, 2]})
    assert load_network_graph(wrapper).npus_per_dim == [4, 2]
    assert load_network_graph(wrapper, _context({"logical-dims": [4, 2]})).npus_per_dim == [4, 2]
    with pytest.raises(ConfigError, match=r"disagree.*\[4, 2\].*\[2, 4\]"):
        load_network_graph(wrapper, _context({"logical-dims": [2, 4]}))


@pytest.mark.parametrize("dims, message", [
    ([3, 3], r"logical dims \[3, 3\] multiply to 9 but .* has 8 ranks"),
    ([8, 1], r"must each be >= 2"),
    ("eight", r"must be integers"),
])
def test_logical_dims_must_match_the_ranks(shared_dir, tmp_path, dims, message):
    _write(tmp_path / "hw.yaml", _complete_handwritten(shared_dir))
    wrapper = _write(tmp_path / "w.yaml", {"infrastructure": "hw.yaml", "logical_dims": dims})
    with pytest.raises(ConfigError, match=message) as info:
        load_network_graph(wrapper)
    assert "w.yaml" in str(info.value)


def test_switch_latency_by_component_and_routers(tmp_path):
    network = load_network_graph(EXAMPLES / "clos_dgx_h100_rail" / "network.yaml")
    assert network.switch_latency_ns["dgx.3.nvsw.1"] == 100
    assert network.switch_latency_ns["leaf.0.asic.0"] == 500
    assert "dgx.3.nic.1" not in network.switch_latency_ns
    torus = load_infragraph(EXAMPLES / "torus_4x4x4" / "network.yaml")
    assert len(torus.routers) == 64
    net = torus.network
    # chip 0 -> chip 2 (two hops along x) passes chip 1's router, not chip 1.
    path = net.shortest_paths("pod.0.chip.0", "pod.0.chip.2")[0]
    assert [net.links[i].dst for i in path] == [
        "pod.0.chip.0" + ROUTER_SUFFIX, "pod.0.chip.1" + ROUTER_SUFFIX, "pod.0.chip.2" + ROUTER_SUFFIX, "pod.0.chip.2"]
    injection = [l for l in net.out_links["pod.0.chip.0"]]
    assert len(injection) == 1 and injection[0].bandwidth_bytes_per_ns == pytest.approx(6 * 50.0)


# ------------------------------------------------------------------ malformed inputs


def _expect_error(tmp_path, infra, *fragments, annotation=None, wrapper=None):
    path = _write(tmp_path / "bad.yaml", infra)
    if annotation is not None:
        _write(tmp_path / "bad.rank-annotation.yaml", annotation)
    if wrapper is not None:
        path = _write(tmp_path / "bad-wrapper.yaml", {"infrastructure": "bad.yaml", **wrapper})
    with pytest.raises(ConfigError) as info:
        load_network_graph(path)
    message = str(info.value)
    assert "bad" in message  # names the file
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_unknown_device(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    infra["instances"][1]["device"] = "tor9000"
    _expect_error(tmp_path, infra, "instance 'tor' uses unknown device 'tor9000'", "host, tor")


def test_edge_with_an_undefined_link(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    infra["edges"][1]["link"] = "eth800"
    _expect_error(tmp_path, infra, "edges[1] uses link 'eth800', which the infrastructure does not define", "eth400")
    infra = _complete_handwritten(shared_dir)
    infra["devices"][0]["edges"][0]["link"] = "nvlink"
    _expect_error(tmp_path, infra, "device 'host'", "edges[0] uses link 'nvlink', which the device does not define")


def test_edge_with_an_unsupported_scheme(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    infra["edges"][1]["scheme"] = "ring"
    _expect_error(tmp_path, infra, "edges[1]: scheme 'ring' is not supported (use one2one or many2many)")
    infra = _complete_handwritten(shared_dir)
    infra["devices"][0]["edges"][0]["scheme"] = "ring"
    _expect_error(tmp_path, infra, "device 'host'", "edges[0]: scheme 'ring' is not supported")


def test_missing_link_disconnects_ranks(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    del infra["edges"][1]  # host 1 is no longer cabled to the ToR
    _expect_error(tmp_path, infra, "rank 4 (host.1.xpu.0) is not connected to rank 0")


def test_unknown_component_or_index(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    infra["edges"][0]["ep2"]["component"] = "prt[0:4]"
    _expect_error(tmp_path, infra, "device 'tor' has no component 'prt'")
    infra = _complete_handwritten(shared_dir)
    infra["edges"][1]["ep2"]["component"] = "port[4:12]"
    _expect_error(tmp_path, infra, "port[4:12]", "reaches past the 8")
    infra = _complete_handwritten(shared_dir)
    infra["edges"][1]["ep1"]["instance"] = "host[2]"
    _expect_error(tmp_path, infra, "instance 'host[2]'", "out of range")


def test_missing_bandwidth(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    del infra["devices"][0]["links"][0]["physical"]["bandwidth"]
    message = _expect_error(tmp_path, infra, "link 'scaleup' of device 'host' has no bandwidth", "host.0.xpu.0")
    assert "latency" not in message.split("has no bandwidth")[1].split(";")[0]


def test_missing_latency_unless_defaulted(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    del infra["links"][0]["physical"]["latency"]
    _expect_error(tmp_path, infra, "link 'eth400' (infrastructure level) has no latency", "default_link_latency_ns")
    path = _write(tmp_path / "w.yaml", {"infrastructure": "bad.yaml", "default_link_latency_ns": "1 us"})
    assert {l.latency_ns for l in load_network_graph(path).links if l.name == "eth400"} == {1000.0}


def test_no_ranks(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    infra["devices"][0]["components"][1]["choice"] = "memory"
    _expect_error(tmp_path, infra, "no ranks", "xpu", "node types present")


def test_bad_rank_annotations(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    twice = {"nodes": [{"name": "host[0]xpu[0]", "attributes": [{"attribute": "rank", "value": "0"}]},
                       {"name": "host[0]xpu[1]", "attributes": [{"attribute": "rank", "value": "0"}]}]}
    _expect_error(tmp_path, infra, "rank 0 is given to both", annotation=twice)
    gap = {"nodes": [{"name": "host[0]xpu[0]", "attributes": [{"attribute": "rank", "value": "1"}]}]}
    _expect_error(tmp_path, infra, "ranks must be 0..0", annotation=gap)
    unknown = {"nodes": [{"name": "host[5]xpu[0]", "attributes": [{"attribute": "rank", "value": "0"}]}]}
    _expect_error(tmp_path, infra, "cannot apply the annotation", annotation=unknown)


def test_bad_wrappers(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    _expect_error(tmp_path, infra, "unknown key(s) 'logical_dim'", wrapper={"logical_dim": [8]})
    _expect_error(tmp_path, infra, "links.nope: the infrastructure defines no link named 'nope'",
                  wrapper={"links": {"nope": {"bandwidth": "1 GB/s"}}})
    _expect_error(tmp_path, infra, "'asic9' match no node", wrapper={"switch_latency_ns": {"asic9": 5}})
    (tmp_path / "analytical.yaml").write_text("topology: [Ring]\nnpus_count: [4]\nbandwidth: [50]\nlatency: [500]\n")
    with pytest.raises(ConfigError, match="analytical network YAML"):
        load_network_graph(tmp_path / "analytical.yaml")
    assert not is_infragraph_config(tmp_path / "analytical.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        load_network_graph(tmp_path / "missing.yaml")


def test_invalid_schema_and_ring_scheme(shared_dir, tmp_path):
    infra = _complete_handwritten(shared_dir)
    infra["devices"][0]["components"][0]["choice"] = "gpu"
    _expect_error(tmp_path, infra, "not a valid InfraGraph infrastructure", "choice")
    infra = _complete_handwritten(shared_dir)
    infra["devices"][0]["edges"][0]["scheme"] = "ring"
    _expect_error(tmp_path, infra, "scheme 'ring' is not supported")
    infra = _complete_handwritten(shared_dir)
    infra["instnces"] = infra.pop("instances")
    _expect_error(tmp_path, infra, "unknown key(s) 'instnces'")


# ------------------------------------------------------------------ astra infragraph


def _cli(capsys, *args):
    capsys.readouterr()
    rc = main(["infragraph", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def _analytical(capsys, tmp_path, *args):
    out_path = tmp_path / "analytical.yaml"
    rc, out, err = _cli(capsys, *args, "--to-analytical", "-o", out_path)
    assert rc == 0, err
    from astra_network_analytical.model import parse_network_config

    config = parse_network_config(str(out_path))
    data = yaml.safe_load(out_path.read_text())
    assert list(config.npus_count) == data["npus_count"]
    return data, out_path.read_text()


def test_to_analytical_dgx_sample(shared_dir, tmp_path, capsys):
    wrapper, _ = _sample_wrapper(shared_dir, tmp_path, "infra-single-dgx-h100",
                                 links={"xpu_fabric": {"bandwidth": "112.5 GB/s", "latency": "150 ns"},
                                        "pcie": {"bandwidth": "64 GB/s"}, "cpu_fabric": {"bandwidth": "100 GB/s"}},
                                 switch_latency_ns={"nvsw": 100})
    data, text = _analytical(capsys, tmp_path, wrapper)
    assert data["topology"] == ["Switch"] and data["npus_count"] == [8]
    assert "cross_dimension_route" not in data  # one dimension: nothing to route across
    assert data["bandwidth"] == [pytest.approx(450e9 / GIB, abs=1e-5)]  # 4 NVSwitches x 112.5 GB/s
    assert data["latency"] == [pytest.approx((150 + 100 + 150) / 2)]
    assert "detected from the graph" in text


def test_to_analytical_clos_sample(shared_dir, tmp_path, capsys):
    links = {"xpu_fabric": {"bandwidth": "112.5 GB/s"}, "pcie": {"bandwidth": "64 GB/s"},
             "cpu_fabric": {"bandwidth": "100 GB/s"}, "ic": {"bandwidth": "6.4 Tb/s", "latency": 0}}
    wrapper, _ = _sample_wrapper(shared_dir, tmp_path, "infra-clos-2tier-radix16-dgxh100", logical_dims=[8, 16],
                                 links=links)
    data, _ = _analytical(capsys, tmp_path, wrapper)
    assert data["topology"] == ["Switch", "Switch"] and data["npus_count"] == [8, 16]
    assert data["bandwidth"][0] == pytest.approx(450e9 / GIB, abs=1e-5)
    assert data["bandwidth"][1] == pytest.approx(50e9 / GIB, abs=1e-5)  # the 400 Gb/s NIC link
    # xpu-pciesl-cx7-port-(asic)-port-spine port-(asic)-port-port-(asic)-port-cx7-pciesl-xpu: 8 links of 100 ns.
    assert data["latency"] == [100.0, 400.0]


def test_to_analytical_examples(capsys, tmp_path):
    data, _ = _analytical(capsys, tmp_path, EXAMPLES / "torus_4x4x4" / "infrastructure.yaml")
    assert data["topology"] == ["Ring"] * 3 and data["npus_count"] == [4, 4, 4]
    assert data["bandwidth"] == [pytest.approx(50e9 / GIB, abs=1e-5)] * 3 and data["latency"] == [500.0] * 3
    # several dimensions: messages crossing them are routed through each, as on the graph
    assert data["cross_dimension_route"] == "dimension_order"
    data, _ = _analytical(capsys, tmp_path, EXAMPLES / "clos_dgx_h100_rail" / "infrastructure.yaml")
    assert data["topology"] == ["Switch", "Switch"] and data["npus_count"] == [8, 16]
    data, text = _analytical(capsys, tmp_path, EXAMPLES / "clos_dgx_h100" / "infrastructure.yaml")
    assert data["npus_count"] == [8, 2, 8]  # GPUs of a DGX, the 2 DGXs of a leaf, the 8 leaves
    data, text = _analytical(capsys, tmp_path, EXAMPLES / "clos_dgx_h100" / "network.yaml")
    assert data["npus_count"] == [8, 16] and "latency varies" in text


def test_to_analytical_rejects_what_is_no_hierarchy(capsys):
    rc, out, err = _cli(capsys, EXAMPLES / "torus_4x4x4" / "network.yaml", "--to-analytical", "--logical-dims", "16,4")
    assert rc == 2 and not out
    assert "dimension 0 (16 NPUs" in err and "is not a Ring" in err


def test_summary(capsys):
    rc, out, _ = _cli(capsys, EXAMPLES / "clos_dgx_h100_rail" / "network.yaml", "--summary")
    assert rc == 0
    assert "nodes: 336" in out and "128 NPUs" in out and "832 cables" in out
    assert "nic_leaf" in out and "46.5661" in out and "logical dims: [8, 16]" in out
    assert "loadable by the flow/congestion backends: yes" in out
    rc, out, _ = _cli(capsys, EXAMPLES / "dgx_h100" / "network.yaml", "--summary", "--json")
    info = json.loads(out)
    assert info["npus"] == 8 and info["ranks"] == 8 and info["edges"] == 40 and info["loadable"]


def test_summary_output_writes_json_and_json_prints_it(tmp_path, capsys):
    """The CLI's vocabulary: -o writes a file (the summary as JSON, with its units; the text stays on stdout),
    --json prints JSON on stdout (also with -o)."""
    path = EXAMPLES / "dgx_h100" / "network.yaml"
    out_path = tmp_path / "summary.json"
    rc, out, _ = _cli(capsys, path, "--summary", "-o", str(out_path))
    assert rc == 0 and "nodes: " in out
    written = json.loads(out_path.read_text())
    assert written["units"] == {"time": "ns", "size": "bytes"} and written["npus"] == 8
    rc, out, _ = _cli(capsys, path, "--summary", "--json", "-o", str(tmp_path / "again.json"))
    assert rc == 0 and json.loads(out) == written == json.loads((tmp_path / "again.json").read_text())
    rc, out, err = _cli(capsys, path, "--to-analytical", "--json")
    assert rc == 2 and "--json is for --summary" in err


def test_summary_lists_what_is_missing(shared_dir, capsys):
    path = shared_dir / "samples" / "infragraph" / "generated" / "infra-single-dgx-h100.yaml"
    rc, out, _ = _cli(capsys, path, "--summary")
    assert rc == 0
    assert "loadable by the flow/congestion backends: no" in out
    assert "link 'xpu_fabric' of device 'dgx_h100' has no bandwidth and no latency" in out


# ------------------------------------------------------------------ examples


def _generator():
    spec = importlib.util.spec_from_file_location("infragraph_examples", EXAMPLES / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_examples_match_their_generator(tmp_path):
    assert _generator().main(["generate.py", str(tmp_path)]) == 0
    for folder in EXAMPLE_DIMS:
        for generated in sorted((tmp_path / folder).rglob("*")):
            if generated.is_file():
                checked_in = EXAMPLES / generated.relative_to(tmp_path)
                assert checked_in.read_bytes() == generated.read_bytes(), f"{checked_in} is stale: run generate.py"


@pytest.mark.parametrize("folder", list(EXAMPLE_DIMS))
def test_example_networks_load(folder):
    network = load_network_graph(EXAMPLES / folder / "network.yaml")
    assert network.npus_per_dim == EXAMPLE_DIMS[folder]
    assert network.total_npus == len(list((EXAMPLES / folder / "trace").glob("ar_a2a.*.et")))


def _flow_backend():
    try:
        import astra_network_congestion.flow  # noqa: F401
    except ImportError as exc:  # the flow backend is written in parallel
        pytest.skip(f"the flow backend is not importable yet: {exc}")


# (clos_dgx_h100 itself: README.md's "Real fabrics" block runs this very command, tests/test_docs_run.py runs the
# block; its rail-optimised twin has the same 128 GPUs and dimensions)
@pytest.mark.parametrize("folder", [
    "dgx_h100", "torus_4x4x4",
    pytest.param("clos_dgx_h100_rail", marks=pytest.mark.slow),
])
def test_examples_run_on_the_flow_backend(folder, tmp_path, capsys):
    _flow_backend()
    report_path = tmp_path / "report.json"
    rc = main([
        "run", "--network-backend", "flow", "-q",
        "--workload-configuration", str(EXAMPLES / folder / "trace" / "ar_a2a"),
        "--system-configuration", str(EXAMPLES / folder / "system.json"),
        "--network-configuration", str(EXAMPLES / folder / "network.yaml"),
        "--report-json", str(report_path),
    ])
    assert rc == 0, capsys.readouterr().err
    ranks = read_report(report_path)["ranks"]
    assert len(ranks) == math.prod(EXAMPLE_DIMS[folder])
    assert all(r["finish_ns"] > 0 and r["comm_ns"] > 0 for r in ranks)


def test_rail_fabric_keeps_dimension_1_on_one_leaf():
    """Same switches: on the rail-optimised fabric dimension-1 peers (same local GPU index) share a
    leaf; in the ToR layout (a leaf per pair of DGXs) they cross a spine."""
    rail = load_network_graph(EXAMPLES / "clos_dgx_h100_rail" / "network.yaml")
    tor = load_network_graph(EXAMPLES / "clos_dgx_h100" / "network.yaml")
    # gpu -> nic -> leaf -> nic -> gpu, against gpu -> nic -> leaf -> spine -> leaf -> nic -> gpu.
    assert len(rail.shortest_paths(rail.rank_node[0], rail.rank_node[16])[0]) == 4
    assert len(tor.shortest_paths(tor.rank_node[0], tor.rank_node[16])[0]) == 6


def test_to_analytical_matches_loaded_graph():
    network = load_network_graph(EXAMPLES / "dgx_h100" / "network.yaml")
    result = to_analytical(network)
    assert result["topology"] == ["Switch"] and result["npus_count"] == [8]
    assert result["latency"] == [pytest.approx((150 + 100 + 150) / 2)]


def test_to_analytical_output_folder_is_made(tmp_path, capsys):
    """``-o`` makes missing folders, as every astra command's output option does."""
    out_path = tmp_path / "new" / "analytical.yaml"
    rc, out, err = _cli(capsys, EXAMPLES / "torus_4x4x4" / "network.yaml", "--to-analytical", "-o", out_path)
    assert rc == 0, err
    assert yaml.safe_load(out_path.read_text())["npus_count"] == [4, 4, 4]
    assert [p.name for p in out_path.parent.iterdir()] == ["analytical.yaml"]
