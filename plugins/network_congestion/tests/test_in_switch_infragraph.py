"""``inSwitch`` on InfraGraph switch tiers (issue 26): switches that declare ``switch_reduction`` in their
attributes serve the logical dimensions whose traffic meets at them (astra_network_congestion.switch_tiers)."""

from __future__ import annotations

import json

import pytest
import yaml

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.report import read_report
from astra_sim_testing import repo_root

from astra_network_congestion.infragraph import load_network_graph
from astra_network_congestion.switch_tiers import graph_in_switch, parse_size

RAIL = repo_root() / "examples" / "infragraph" / "clos_dgx_h100_rail"


def _network(tmp_path, nodes):
    """The rail-optimised Clos example (16 DGX H100, dims [8, 16]) with one more annotation."""
    (tmp_path / "reduction.yaml").write_text(yaml.safe_dump({"nodes": nodes}))
    wrapper = {"infrastructure": str(RAIL / "infrastructure.yaml"),
               "annotations": [str(RAIL / "infrastructure.rank-annotation.yaml"), "reduction.yaml"],
               "logical_dims": [8, 16], "switch_latency_ns": {"nvsw": 100, "leaf": 500, "spine": 500}}
    path = tmp_path / "network.yaml"
    path.write_text(yaml.safe_dump(wrapper))
    return path


def _attrs(**values):
    return [{"attribute": k, "value": str(v)} for k, v in values.items()]


def test_the_leaf_and_the_nvswitches_serve_their_dimensions(tmp_path):
    path = _network(tmp_path, [
        {"name": "leaf", "attributes": _attrs(switch_reduction="true", switch_reduction_latency="200 ns",
                                              switch_reduction_bandwidth="200 Gb/s", switch_reduction_buffer="16 MiB")},
        {"name": "dgx[0:16]nvsw[0:4]", "attributes": _attrs(switch_reduction="true")}])
    graph = load_network_graph(path)
    leaf = graph_in_switch(graph, [8, 16], 1)
    # a GPU reaches its rail's leaf through its 400 Gb/s NIC: 50 bytes/ns; 200 Gb/s of reduction = 25
    assert leaf.line_rate == pytest.approx(50.0)
    assert leaf.reduce_rate == pytest.approx(25.0)
    assert leaf.latency_ns == 200 and leaf.buffer_bytes == 16 << 20
    assert leaf.link_latency_ns > 0
    nvswitch = graph_in_switch(graph, [8, 16], 0)
    # four NVSwitch chips in parallel: the GPU's whole 450 GB/s of NVLink; reduction rate defaults to it
    assert nvswitch.line_rate == pytest.approx(450.0)
    assert nvswitch.reduce_rate == nvswitch.line_rate and nvswitch.latency_ns == 0
    assert graph_in_switch(graph, [8, 16], 2) is None


def test_a_switch_reduces_only_where_declared(tmp_path):
    graph = load_network_graph(_network(tmp_path, [{"name": "spine", "attributes": _attrs(switch_reduction="true")}]))
    # rail groups never cross a spine: no reducing switch on their paths
    with pytest.raises(ConfigError, match="network dimension 1: the path from .* crosses no switch that reduces"):
        graph_in_switch(graph, [8, 16], 1)
    graph = load_network_graph(_network(tmp_path, [{"name": "leaf", "attributes": _attrs(switch_reduction="false")}]))
    with pytest.raises(ConfigError, match=r"leaf\.0\.asic\.0 declares switch_reduction: false"):
        graph_in_switch(graph, [8, 16], 1)


@pytest.mark.parametrize("attribute,value,message", [
    ("switch_reduction", "maybe", "switch_reduction must be true or false"),
    ("switch_reduction_bandwidth", "fast", "cannot read bandwidth"),
    ("switch_reduction_latency", "soon", "cannot read latency"),
    ("switch_reduction_buffer", "big", "cannot read size"),
])
def test_bad_attributes_name_the_node(tmp_path, attribute, value, message):
    path = _network(tmp_path, [{"name": "leaf", "attributes": _attrs(**{attribute: value})}])
    with pytest.raises(ConfigError, match=f"node leaf.0.asic.0.*{message}"):
        load_network_graph(path)


def test_sizes():
    assert parse_size(65536, "x") == 65536
    assert parse_size("64 KiB", "x") == 65536
    assert parse_size("1.5 MB", "x") == 1_500_000
    with pytest.raises(ConfigError):
        parse_size(True, "x")


@pytest.mark.parametrize("backend", ["flow", "congestion"])
def test_in_switch_runs_on_the_leaf_tier_and_beats_the_ring(tmp_path, backend):
    path = _network(tmp_path, [{"name": "leaf", "attributes": _attrs(switch_reduction="true")}])
    system = json.loads((RAIL / "system.json").read_text())
    finish = {}
    for name, impl in (("ring", ["ring", "ring"]), ("leaf", ["ring", "inSwitch"])):
        system["all-reduce-implementation"] = impl
        (tmp_path / f"{name}.json").write_text(json.dumps(system))
        report = tmp_path / f"{name}.report.json"
        assert main(["run", "--network-backend", backend, "--workload-configuration", str(RAIL / "trace" / "ar_a2a"),
                     "--system-configuration", str(tmp_path / f"{name}.json"), "--network-configuration", str(path),
                     "-q", "--report-json", str(report)]) == 0
        data = read_report(report)
        finish[name] = max(r["finish_ns"] for r in data["ranks"])
        if name == "leaf":
            assert data["breakdown"]["parts"]["exposed_in_switch:world"] > 0
    assert finish["leaf"] < finish["ring"]


def test_without_a_reducing_switch_the_run_stops_with_one_line(tmp_path, capsys):
    path = _network(tmp_path, [{"name": "spine", "attributes": _attrs(switch_reduction="true")}])
    system = json.loads((RAIL / "system.json").read_text())
    system["all-reduce-implementation"] = ["ring", "inSwitch"]
    (tmp_path / "s.json").write_text(json.dumps(system))
    rc = main(["run", "--network-backend", "flow", "--workload-configuration", str(RAIL / "trace" / "ar_a2a"),
               "--system-configuration", str(tmp_path / "s.json"), "--network-configuration", str(path), "-q"])
    assert rc != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert any("inSwitch on network dimension 1" in line for line in err)


def test_any_size_text_is_read_or_refused_in_one_line():
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(st.text(max_size=20), st.integers(), st.floats(allow_nan=True), st.booleans()))
    def check(value):
        try:
            size = parse_size(value, "node x switch_reduction_buffer")
        except ConfigError as exc:
            assert "\n" not in str(exc).strip() or "\n" in str(value)
            return
        assert isinstance(size, int) and size >= 0

    check()
