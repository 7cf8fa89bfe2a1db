"""Readers of ASTRA-sim's ns-3 inputs (no ns-3 needed): values, one-line errors, and properties."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.errors import ConfigError

from astra_network_ns3.inputs import (
    MODELLED_KEYS, RDMA_CC, SUPPORTED_CC, check_cc_mode, ecn_thresholds, parse_delay_ns, parse_rate_bps,
    read_config_topology, read_logical_topology, read_network_cfg, read_topology, resolve,
)

DATA = Path(__file__).parent / "data"
CFG = DATA / "scratch" / "config" / "network_cfg.txt"  # ASTRA-sim's folder layout: its relative paths work
TOPO = DATA / "scratch" / "topology" / "8_nodes_1_switch_topology.txt"


def test_example_config_values():
    config = read_network_cfg(str(CFG))
    assert config.topology_file == "../../scratch/topology/8_nodes_1_switch_topology.txt"
    assert config.topology_line == 4
    assert config.payload_bytes == 1000 and config.cc_mode == 8 and config.buffer_mb == 32
    assert config.enable_qcn and config.stop_time_s == 4e13 and config.ewma_gain == 0.00390625
    assert config.kmin_kb[400_000_000_000] == 800 and config.kmax_kb[100_000_000_000] == 1600
    assert config.pmax[25_000_000_000] == 0.2 and len(config.kmin_kb) == 6
    assert "HAS_WIN" in config.ignored_keys and "FLOW_FILE" in config.ignored_keys
    assert not set(config.ignored_keys) & set(MODELLED_KEYS)
    assert ecn_thresholds(config, 400_000_000_000, "x") == (800_000, 3_200_000, 0.2)


def test_example_topology_and_logical_dims():
    config = read_network_cfg(str(CFG))
    topology = read_config_topology(config)  # resolved against the config's folder
    assert topology.nodes == 9 and topology.switches == [8] and topology.hosts == list(range(8))
    assert len(topology.links) == 8
    link = topology.links[0]
    assert (link.src, link.dst, link.rate_bps, link.delay_ns, link.line) == (8, 0, 400_000_000_000, 500, 3)
    assert read_logical_topology(str(DATA / "logical_topology.json"), 8) == [8]


def test_relative_paths_resolve_against_the_current_directory_first(tmp_path, monkeypatch):
    here = tmp_path / "run" / "here"
    (tmp_path / "scratch" / "topology").mkdir(parents=True)
    here.mkdir(parents=True)
    (tmp_path / "scratch" / "topology" / TOPO.name).write_text("3 1 2\n2\n2 0 100Gbps 1us 0\n2 1 100Gbps 1us 0\n")
    monkeypatch.chdir(here)  # ../../scratch/topology/... from here is the tmp copy
    config = read_network_cfg(str(CFG))
    assert read_config_topology(config).nodes == 3  # the current directory's copy wins
    assert resolve("no-such-file", str(CFG)) == "no-such-file"


@pytest.mark.parametrize("mode", sorted(RDMA_CC) + [2, 99])
def test_unsupported_cc_mode_names_supported_modes(tmp_path, mode):
    path = tmp_path / "cfg.txt"
    path.write_text(f"TOPOLOGY_FILE t.txt\nCC_MODE {mode}\n")
    with pytest.raises(ConfigError) as info:
        check_cc_mode(read_network_cfg(str(path)))
    message = str(info.value)
    assert "\n" not in message and str(path) in message and f"CC_MODE {mode}" in message
    assert "supported modes: 0 = plain TCP" in message and "1 = DCQCN" in message and "8 = DCTCP" in message
    if mode in RDMA_CC:
        assert RDMA_CC[mode].split()[0] in message


def test_dcqcn_keys(tmp_path):
    path = tmp_path / "cfg.txt"
    path.write_text("TOPOLOGY_FILE t.txt\nCC_MODE 1\nRATE_AI 50Mb/s\nRP_TIMER 900\nCLAMP_TARGET_RATE 1\n")
    config = read_network_cfg(str(path))
    assert config.dcqcn["rate_ai_bps"] == 50_000_000 and config.dcqcn["rp_timer_us"] == 900
    assert config.dcqcn["clamp"] is True and config.dcqcn["fast_recovery"] == 5  # the paper's default
    assert config.dcqcn_keys == ["RATE_AI", "RP_TIMER", "CLAMP_TARGET_RATE"] and not config.ignored_keys
    path.write_text("TOPOLOGY_FILE t.txt\nRATE_AI 50\n")
    assert "rate '50' has no unit" in _one_line_error(read_network_cfg, str(path))


def test_supported_cc_modes_pass(tmp_path):
    for mode in SUPPORTED_CC:
        path = tmp_path / "cfg.txt"
        path.write_text(f"TOPOLOGY_FILE t.txt\nCC_MODE {mode}\n")
        check_cc_mode(read_network_cfg(str(path)))


def _one_line_error(fn, *args):
    with pytest.raises(ConfigError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_topology_file_names_config_and_line(tmp_path):
    cfg = tmp_path / "cfg.txt"
    cfg.write_text("CC_MODE 8\nTOPOLOGY_FILE nowhere.txt\n")
    message = _one_line_error(read_config_topology, read_network_cfg(str(cfg)))
    assert f"{cfg}:2: TOPOLOGY_FILE 'nowhere.txt' does not exist" in message


@pytest.mark.parametrize("text,expected", [
    ("3 1 2\n2\n0 2 100Gbps 1us 0\n2 7 100Gbps 1us 0\n", ":4: link to unknown node 7"),
    ("3 1 2\n2\n0 2 100 1us 0\n2 1 100Gbps 1us 0\n", ":3: rate: rate '100' has no unit"),
    ("3 1 2\n2\n0 2 100Gbps 5 0\n2 1 100Gbps 1us 0\n", ":3: delay: delay '5' has no unit"),
    ("3 1 2\n2\n0 2 100Gbps 1us 0\n", "announces 2 links but 1 link lines follow"),
    ("3 1 1\n5\n0 2 100Gbps 1us 0\n", ":2: switch 5 is not a node"),
    ("3 1\n", ":1: expected 'nodes switches links'"),
    ("3 1 2\n2\n0 2 100Gbps 1us 0 9\n2 1 100Gbps 1us 0\n", ":3: expected 'src dst rate delay error_rate'"),
    ("3 1 2\n2\n0 2 100Gbps 1us 0\n2 0 100Gbps 1us 0\n", ":4: a second link between nodes 2 and 0"),
    ("3 1 1\n2\n0 2 100Gbps 1us 0\n", "NPU node 1 has no link"),
    ("", "empty topology file"),
])
def test_topology_errors_name_file_and_line(tmp_path, text, expected):
    path = tmp_path / "topo.txt"
    path.write_text(text)
    message = _one_line_error(read_topology, str(path))
    assert message.startswith(str(path)) and expected in message


@pytest.mark.parametrize("text,expected", [
    ('{"logical-dims": ["2", "2"]}', ":1: logical-dims [2, 2] multiply to 4 but the topology has 8 NPUs"),
    ('{\n "other": 1,\n "logical-dims": [3]\n}', ":3: logical-dims [3] multiply to 3"),
    ('{"logical-dims": ["x"]}', "entries must be positive integers"),
    ('{"logical-dims": []}', "must be a non-empty list"),
    ('{"dims": [8]}', "expected an object with a 'logical-dims' list"),
    ('{"logical-dims": [8]', "not valid JSON"),
])
def test_logical_topology_errors(tmp_path, text, expected):
    path = tmp_path / "logical.json"
    path.write_text(text)
    message = _one_line_error(read_logical_topology, str(path), 8)
    assert message.startswith(str(path)) and expected in message


@pytest.mark.parametrize("text,expected", [
    ("PACKET_PAYLOAD_SIZE x\n", ":1: PACKET_PAYLOAD_SIZE: expected an integer"),
    ("KMIN_MAP 2 100 4\n", ":1: KMIN_MAP: count 2 needs 4 numbers after it, got 2"),
    ("PMAX_MAP 1 100 1.5\n", "P_max is a probability"),
    ("ENABLE_QCN yes\n", "expected 0 or 1"),
    ("CC_MODE 8 9\n", "expected one value, got 2"),
    ("CC_MODE 8\nCC_MODE 1\n", ":2: CC_MODE: key given twice"),
    ("CC_MODE 8\n", "no TOPOLOGY_FILE key"),
    ("BUFFER_SIZE 0\n", "expected a buffer size > 0 MB"),
])
def test_config_errors(tmp_path, text, expected):
    path = tmp_path / "cfg.txt"
    path.write_text(text + ("TOPOLOGY_FILE t.txt\n" if "TOPOLOGY" not in expected else ""))
    message = _one_line_error(read_network_cfg, str(path))
    assert message.startswith(str(path)) and expected in message


def test_missing_ecn_threshold_for_a_rate(tmp_path):
    path = tmp_path / "cfg.txt"
    path.write_text("TOPOLOGY_FILE t.txt\nKMIN_MAP 1 100 4\nKMAX_MAP 1 100 8\nPMAX_MAP 1 100 0.2\n")
    config = read_network_cfg(str(path))
    assert ecn_thresholds(config, 100, "x") == (4000, 8000, 0.2)
    message = _one_line_error(ecn_thresholds, config, 200, "topo.txt:3")
    assert "KMIN_MAP, KMAX_MAP, PMAX_MAP has no entry for 200 bit/s" in message


def test_rate_and_delay_units():
    assert parse_rate_bps("400Gbps", "x") == 400_000_000_000
    assert parse_rate_bps("100Gb/s", "x") == 100_000_000_000
    assert parse_rate_bps("1.5Mbps", "x") == 1_500_000
    assert parse_rate_bps("10GBps", "x") == 80_000_000_000
    assert parse_delay_ns("0.0005ms", "x") == 500
    assert parse_delay_ns("1us", "x") == 1000 and parse_delay_ns("2ns", "x") == 2
    for bad in ("", "Gbps", "10Xbps", "-1Gbps", "0Gbps"):
        with pytest.raises(ConfigError):
            parse_rate_bps(bad, "x")


# ---------------------------------------------------------------- properties

_UNITS = {"bps": 1, "Kbps": 1e3, "Mbps": 1e6, "Gbps": 1e9, "Tbps": 1e12}


@given(st.integers(1, 10_000), st.sampled_from(sorted(_UNITS)))
def test_rate_parses_any_integer_with_unit(value, unit):
    assert parse_rate_bps(f"{value}{unit}", "x") == int(round(value * _UNITS[unit]))


@given(st.text(max_size=20))
def test_rate_reader_never_crashes(text):
    try:
        assert parse_rate_bps(text, "x") > 0
    except ConfigError as exc:
        assert "\n" not in str(exc)


_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def topologies(draw):
    hosts = draw(st.integers(1, 6))
    switches = draw(st.integers(1, 3))
    nodes = hosts + switches
    switch_ids = list(range(hosts, nodes))
    links = []
    for host in range(hosts):
        links.append((draw(st.sampled_from(switch_ids)), host))
    for a, b in zip(switch_ids, switch_ids[1:]):
        links.append((a, b))
    rates = [(draw(st.integers(1, 800)), draw(st.sampled_from(["Gbps", "Mbps"]))) for _ in links]
    delays = [draw(st.integers(1, 5000)) for _ in links]
    return nodes, switch_ids, links, rates, delays


@_settings
@given(topologies())
def test_topology_round_trip(tmp_path, case):
    nodes, switch_ids, links, rates, delays = case
    text = [f"{nodes} {len(switch_ids)} {len(links)}", " ".join(map(str, switch_ids))]
    for (a, b), (rate, unit), delay in zip(links, rates, delays):
        text.append(f"{a} {b} {rate}{unit} {delay}ns 0")
    path = tmp_path / "topo.txt"
    path.write_text("\n".join(text) + "\n")
    topology = read_topology(str(path))
    assert topology.nodes == nodes and topology.switches == switch_ids
    assert [(l.src, l.dst) for l in topology.links] == links
    assert [l.delay_ns for l in topology.links] == delays
    assert [l.rate_bps for l in topology.links] == [r * _UNITS[u] for r, u in rates]
    assert topology.hosts == [n for n in range(nodes) if n not in switch_ids]


_line = st.lists(st.sampled_from(["0", "1", "2", "8", "x", "100Gbps", "1us", "-3", "1e3", "3.5", "", "9"]),
                 max_size=6).map(" ".join)


@_settings
@given(st.lists(_line, max_size=6))
def test_topology_reader_errors_are_one_line(tmp_path, lines):
    path = tmp_path / "topo.txt"
    path.write_text("\n".join(lines))
    try:
        read_topology(str(path))
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))


_keys = st.sampled_from(list(MODELLED_KEYS) + ["HAS_WIN", "RATE_AI", "LINK_DOWN"])


@_settings
@given(st.lists(st.tuples(_keys, _line), max_size=8))
def test_config_reader_errors_are_one_line(tmp_path, entries):
    path = tmp_path / "cfg.txt"
    path.write_text("".join(f"{key} {values}\n" for key, values in entries))
    try:
        config = read_network_cfg(str(path))
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    assert config.topology_file
    assert set(config.ignored_keys) <= {"HAS_WIN", "RATE_AI", "LINK_DOWN"}


@_settings
@given(st.lists(st.one_of(st.integers(-2, 9), st.text(max_size=3), st.booleans()), max_size=4), st.integers(1, 16))
def test_logical_reader(tmp_path, dims, npus):
    path = tmp_path / "logical.json"
    path.write_text(json.dumps({"logical-dims": dims}))
    try:
        out = read_logical_topology(str(path), npus)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    assert all(d >= 1 for d in out) and len(out) == len(dims)
    product = 1
    for d in out:
        product *= d
    assert product == npus


def test_the_plugin_module_does_not_import_ns3():
    """Loading the plugin (every ``astra`` command does) must not pay ns-3's ~10 s import."""
    import subprocess
    import sys

    code = ("import sys, astra_network_ns3.plugin, astra_network_ns3.inputs; "
            "print('cppyy' in sys.modules or 'ns' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"


def test_failed_links_leave_the_topology(tmp_path):
    from astra_network_ns3.inputs import without_links

    topology = read_config_topology(read_network_cfg(str(CFG)))
    assert without_links(topology, None) is topology
    left = without_links(topology, [[3, 8], ["8", "5"]])
    assert len(left.links) == 6 and not {(l.src, l.dst) for l in left.links} & {(8, 3), (8, 5)}
    assert left.hosts == topology.hosts and len(topology.links) == 8
    with pytest.raises(ConfigError, match=r"option failed_links: no link joins nodes 0 and 1 in .*8_nodes"):
        without_links(topology, [[0, 1]])
    with pytest.raises(ConfigError, match="pair of node ids"):
        without_links(topology, [[0, 1, 2]])
    with pytest.raises(ConfigError, match="integers"):
        without_links(topology, [["a", "b"]])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.none(), st.integers(-3, 12), st.text(max_size=4), st.floats(),
                          st.lists(st.one_of(st.integers(-3, 12), st.text(max_size=3)), max_size=3)), max_size=4))
def test_failed_links_any_input_is_a_topology_or_a_config_error(failed):
    from astra_network_ns3.inputs import without_links

    topology = read_config_topology(read_network_cfg(str(CFG)))
    try:
        left = without_links(topology, failed)
    except ConfigError as exc:
        assert "\n" not in str(exc) and "failed_links" in str(exc)
    else:
        assert len(left.links) <= len(topology.links)


def test_link_failures_name_a_cable_and_a_time():
    from astra_network_ns3.inputs import link_failures

    topology = read_config_topology(read_network_cfg(str(CFG)))
    index = next(i for i, l in enumerate(topology.links) if {l.src, l.dst} == {3, 8})
    assert link_failures(topology, [{"link": [8, "3"], "at_ns": 1500}]) == [(index, 1500)]
    for value, expected in (
            ({"link": [3, 8], "at_ns": 1}, r"option link_failures: expected a list"),
            ([{"link": [3, 8]}], r"link_failures\[0\]: expected \{link: \[a, b\], at_ns: T\}"),
            ([{"link": [3, 8], "at_ns": -5}], r"\[0\].at_ns: expected an integer >= 0"),
            ([{"link": [3, 8], "at_ns": 2.5}], r"\[0\].at_ns: expected an integer >= 0"),
            ([{"link": [3, True], "at_ns": 5}], r"\[0\].link: a failed link's ends are node ids"),
            ([{"link": [0, 1], "at_ns": 5}], r"\[0\].link: no link joins nodes 0 and 1 in .*8_nodes")):
        with pytest.raises(ConfigError, match=expected):
            link_failures(topology, value)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.lists(st.dictionaries(
    st.sampled_from(["link", "at_ns", "x"]),
    st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.floats(), st.text(max_size=3),
              st.lists(st.one_of(st.integers(-3, 12), st.text(max_size=3)), max_size=3)), max_size=3), max_size=3)))
def test_link_failures_any_input_is_a_list_or_a_config_error(value):
    from astra_network_ns3.inputs import link_failures

    topology = read_config_topology(read_network_cfg(str(CFG)))
    try:
        failures = link_failures(topology, value)
    except ConfigError as exc:
        assert "\n" not in str(exc) and "option link_failures" in str(exc)
    else:
        assert all(0 <= index < len(topology.links) and at >= 0 for index, at in failures)


def test_link_down_is_read_as_astra_sims_ns3_does(tmp_path):
    """``LINK_DOWN T A B``: the link A-B goes down at 2 s + T us (ASTRA-sim's ns-3); T = 0 (the shipped line) never."""
    from astra_network_ns3.inputs import LINK_DOWN_BASE_NS, config_link_failures

    config = read_network_cfg(str(CFG))
    assert config.link_down is None and "LINK_DOWN" not in config.ignored_keys
    topology = read_config_topology(config)
    assert config_link_failures(config, topology) == []
    path = tmp_path / "cfg.txt"
    path.write_text(CFG.read_text().replace("LINK_DOWN 0 0 0", "LINK_DOWN 150 8 3"))
    config = read_network_cfg(str(path))
    index = next(i for i, l in enumerate(topology.links) if {l.src, l.dst} == {3, 8})
    assert config_link_failures(config, topology) == [(index, LINK_DOWN_BASE_NS + 150_000)]
    for line, expected in (("LINK_DOWN 150 8", "expected 'LINK_DOWN time_us node_a node_b'"),
                           ("LINK_DOWN -1 8 3", "expected a value >= 0"),
                           ("LINK_DOWN 99999999999999999 8 3", "past what ns-3 counts")):
        path.write_text(CFG.read_text().replace("LINK_DOWN 0 0 0", line))
        with pytest.raises(ConfigError, match=expected):
            read_network_cfg(str(path))
    path.write_text(CFG.read_text().replace("LINK_DOWN 0 0 0", "LINK_DOWN 5 0 1"))
    with pytest.raises(ConfigError, match=r"cfg.txt:\d+: LINK_DOWN: no link joins nodes 0 and 1"):
        config_link_failures(read_network_cfg(str(path)), topology)
