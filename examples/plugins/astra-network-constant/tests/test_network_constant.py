"""Tests of the example ``constant`` network backend.

Fixtures ``tmp_path`` and ``monkeypatch`` come from pytest; ``parity_dir``
comes from astra-sim-testing's pytest plugin ``astra_sim_testing`` (it skips the test
when the shared reference material is absent).
"""

import argparse
import json

import pytest

from astra_sim.api import RunContext
from astra_sim.chakra import make_metadata, make_node, types, write_et
from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError
from astra_sim.plugins import available_plugins, build_registry, describe_plugins, make_plugin_manager
from astra_sim.simulation import simulate

import astra_network_constant.plugin as plugin
from astra_network_constant import ConstantNetwork
from astra_sim_testing import system_config

NETWORK_YAML = "npus: 4\nlatency_ns: 1000\nbandwidth_bytes_per_ns: 100\n"

SYSTEM = system_config()  # one ring, 4 chunks, endpoint delay 10 ns, local memory 1600 GB/s


def write_all_reduce(prefix, ranks, size):
    """One ALL_REDUCE per rank, written as Chakra's generator writes it."""
    node = make_node(
        1, "ALL_REDUCE", types.COMM_COLL_NODE,
        attrs={"is_cpu_op": False, "comm_type": types.ALL_REDUCE, "comm_size": size},
    )
    for rank in range(ranks):
        write_et(f"{prefix}.{rank}.et", make_metadata("1.0.0"), [node])
    return str(prefix)


def ring_all_reduce_ns(n, size, splits=4, endpoint=10, local_mem_gbps=1600, latency=1000, bandwidth=100):
    """Ring all-reduce on a constant network (docs: astra-sim-semantics §4.7)."""
    m = size // splits // n
    t = latency + -(-m // bandwidth)
    r = 3 * (m // local_mem_gbps)  # 3 x trunc(m / (local-mem-bw x 1e9) x 1e9)
    return splits * (2 * (n - 1) * t + (2 * n - 1) * endpoint + (n - 1) * r)


@pytest.fixture
def network_yml(tmp_path):
    path = tmp_path / "network.yml"
    path.write_text(NETWORK_YAML)
    return path


@pytest.fixture
def system_json(tmp_path):
    path = tmp_path / "system.json"
    path.write_text(json.dumps(SYSTEM))
    return path


def test_delay_is_latency_plus_ceil_of_size_over_bandwidth():
    engine = EventEngine()
    net = ConstantNetwork(8, 1000, 100, engine)
    assert [net.delay_ns(0, 1, s) for s in (0, 1, 100, 101, 65536)] == [1000, 1001, 1001, 1002, 1656]
    assert ConstantNetwork(8, 0, 2.5, engine).delay_ns(7, 2, 6) == 3


def test_send_schedules_the_callback_on_the_engine(network_yml):
    engine = EventEngine()
    net = ConstantNetwork.from_context(RunContext(engine=engine, system_config=None,
                                                  network_config_path=str(network_yml)))
    arrived = []
    net.send(0, 3, 250, arrived.append, "hello")
    engine.run()
    assert arrived == ["hello"] and engine.now == 1003
    assert net.npus_per_dim == [4]
    assert net.describe() == {"backend": "constant", "npus": 4, "latency_ns": 1000, "bandwidth_bytes_per_ns": 100}


@pytest.mark.parametrize(
    "text, message",
    [
        ("latency_ns: 1000\nbandwidth_bytes_per_ns: 100\n", "key 'npus' is missing"),
        ("npus: 4\nlatency_ns: 1000\n", "key 'bandwidth_bytes_per_ns' is missing"),
        ("npus: 4\nlatency: 1000\nlatency_ns: 1\nbandwidth_bytes_per_ns: 1\n", "unknown key 'latency'"),
        ("npus: 0\nlatency_ns: 1000\nbandwidth_bytes_per_ns: 100\n", "key 'npus' must be an integer >= 1"),
        ("npus: 4\nlatency_ns: 1.5\nbandwidth_bytes_per_ns: 100\n", "key 'latency_ns' must be an integer >= 0"),
        ("npus: 4\nlatency_ns: 10\nbandwidth_bytes_per_ns: 0\n", "key 'bandwidth_bytes_per_ns' must be a number > 0"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("npus: [\n", "not valid YAML"),
    ],
)
def test_config_errors_name_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "bad.yml"
    path.write_text(text)
    context = RunContext(engine=EventEngine(), system_config=None, network_config_path=str(path))
    with pytest.raises(ConfigError) as info:
        ConstantNetwork.from_context(context)
    assert message in str(info.value) and str(path) in str(info.value)


def test_missing_file_is_a_config_error(tmp_path):
    context = RunContext(engine=EventEngine(), system_config=None, network_config_path=str(tmp_path / "nope.yml"))
    with pytest.raises(ConfigError, match="nope.yml.*does not exist"):
        ConstantNetwork.from_context(context)


def test_registers_the_constant_network_backend():
    pm = make_plugin_manager(select=[], extra_plugins=[plugin])
    registry = build_registry(pm)
    assert "constant" in registry.names("network_backend")


def test_ring_all_reduce_matches_the_closed_form(tmp_path, network_yml, system_json):
    workload = write_all_reduce(tmp_path / "ar", 4, 1 << 20)
    report = simulate(workload, system_json, network_yml, plugins=[], extra_plugins=[plugin],
                      network_backend="constant")
    expected = ring_all_reduce_ns(4, 1 << 20)
    assert expected == 41464
    assert [r.finish_ns for r in report.ranks] == [expected] * 4
    assert report.settings["network"]["backend"] == "constant"


def test_with_the_shared_system_config(tmp_path, network_yml, parity_dir):
    """Same run with the shared reference's sys_ring_1d.json (uses the kernel's ``parity_dir`` fixture)."""
    workload = write_all_reduce(tmp_path / "ar", 4, 1 << 20)
    report = simulate(workload, parity_dir / "configs" / "sys_ring_1d.json", network_yml,
                      plugins=[], extra_plugins=[plugin], network_backend="constant")
    assert report.max_finish_ns == ring_all_reduce_ns(4, 1 << 20)


def test_summary_line_is_off_by_default(tmp_path, network_yml, system_json, capsys, monkeypatch):
    monkeypatch.delenv(plugin.SUMMARY_ENV, raising=False)
    workload = write_all_reduce(tmp_path / "ar", 4, 4096)
    simulate(workload, system_json, network_yml, plugins=[], extra_plugins=[plugin], network_backend="constant")
    assert capsys.readouterr().err == ""


def test_summary_line_from_option_or_environment(tmp_path, network_yml, system_json, capsys, monkeypatch):
    monkeypatch.delenv(plugin.SUMMARY_ENV, raising=False)
    workload = write_all_reduce(tmp_path / "ar", 4, 1 << 20)
    kwargs = dict(plugins=[], extra_plugins=[plugin], network_backend="constant")
    simulate(workload, system_json, network_yml, options={"constant_summary": True}, **kwargs)
    first = capsys.readouterr().err
    assert first.startswith("network_constant: 4 NPUs,") and first.strip().endswith("max finish 41464 ns")
    monkeypatch.setenv(plugin.SUMMARY_ENV, "1")
    simulate(workload, system_json, network_yml, **kwargs)
    assert capsys.readouterr().err == first


def test_adds_a_run_option():
    parser = argparse.ArgumentParser()
    pm = make_plugin_manager(select=[], extra_plugins=[plugin])
    pm.hook.astra_add_run_options(parser=parser)
    assert parser.parse_args(["--constant-summary"]).constant_summary is True
    assert parser.parse_args([]).constant_summary is False


def test_discovered_through_its_entry_point():
    """The installed distribution's entry point works (skipped when not installed)."""
    if "network_constant" not in available_plugins():
        pytest.skip("astra-network-constant is not installed (pip install -e examples/plugins/astra-network-constant)")
    pm = make_plugin_manager(select=["network_constant"])
    rows = {row["name"]: row for row in describe_plugins(pm)}
    assert rows["network_constant"]["status"] == "loaded"
    assert rows["network_constant"]["distribution"] == "astra-network-constant"
    assert rows["network_constant"]["provides"] == ["network_backend:constant"]
