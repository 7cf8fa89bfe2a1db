"""Simulated time past int64 (2^63-1 ns) is a one-line error naming the rank and node; absurd but legal values
(a step over a year, a bandwidth under 1 B/s) are warned about once."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import example, given, strategies as st

import astra_sim.limits as limits
from astra_sim.chakra import make_node, types as T
from astra_sim.errors import ConfigError, SimulationError
from astra_sim.limits import LIMITS, LONG_STEP_NS, MAX_TIME_NS, check_number
from astra_sim.simulation import simulate
from astra_sim_testing import write_case
from astra_sim_testing.fuzzing import fuzz_settings

UINT64_MAX = (1 << 64) - 1


def case(tmp_path, duration_micros, **system):
    nodes = [make_node(1, "big", T.COMP_NODE, duration_micros=duration_micros),
             make_node(2, "ar", T.COMM_COLL_NODE, data_deps=[1], attrs={"comm_type": T.ALL_REDUCE, "comm_size": 1024})]
    return write_case(tmp_path, nodes, npus=2, **system)


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(limits, "_WARNED", set())


@fuzz_settings(30)
@given(duration=st.integers(0, UINT64_MAX), fold=st.booleans())
@example(duration=UINT64_MAX, fold=True)
@example(duration=MAX_TIME_NS // 1000 + 1, fold=False)
@example(duration=MAX_TIME_NS // 1000 - 100, fold=True)  # ends within int64: the collective's µs still fit
def test_any_compute_duration_finishes_in_int64_or_names_the_node(tmp_path_factory, duration, fold):
    prefix, system, network = case(tmp_path_factory.mktemp("o"), duration)
    try:
        report = simulate(prefix, system, network, fold=fold)
    except SimulationError as exc:
        message = str(exc)
        assert "\n" not in message
        assert "t.0.et: node 1 ('big') of rank 0" in message or "t.1.et: node 1 ('big') of rank 1" in message
        assert "2^63-1" in message
        assert duration * 1000 > MAX_TIME_NS - 10**6  # only a time near the bound is refused
        return
    assert all(0 <= r.finish_ns <= MAX_TIME_NS for r in report.ranks)
    assert report.breakdown["finish_ns"] == max(r.finish_ns for r in report.ranks)


def test_a_step_longer_than_a_year_is_warned_about_once(tmp_path):
    prefix, system, network = case(tmp_path, LONG_STEP_NS // 1000 * 2)
    report = simulate(prefix, system, network, fold=False)  # two ranks with the long node: one warning
    long_steps = [w for w in report.warnings if "years (more than one)" in w]
    assert len(long_steps) == 1 and "node 1 ('big')" in long_steps[0]
    short = case(tmp_path / "short", LONG_STEP_NS // 1000 - 1)
    limits._WARNED.clear()
    assert not [w for w in simulate(*short).warnings if "years" in w]


def test_a_bandwidth_under_a_byte_per_second_warns_once(capsys):
    for _ in range(3):
        assert check_number("sys.json", "local-mem-bw", 1e-12) == 1e-12
    err = capsys.readouterr().err
    assert err.count("astra: warning: sys.json: key 'local-mem-bw' is 1e-12 (GB/s, 10^9 bytes/s), under 1 byte/s")\
        == 1
    check_number("sys.json", "local-mem-bw", 1e-9)  # exactly 1 B/s: no warning
    check_number("net.yml", "bandwidth", 1.0, label="bandwidth[0]")
    assert capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match="bandwidth"):
        check_number("net.yml", "bandwidth", 0, label="bandwidth[0]")
    assert LIMITS["bandwidth"].warn_below * (1 << 30) == 1  # GB = 2^30 bytes: 1 B/s


def test_a_utilisation_under_a_millionth_warns_once(capsys):
    for _ in range(2):
        check_number("gpu.yaml", "utilisation", 1e-9, label="efficiency.compute_efficiency")
    err = capsys.readouterr().err
    assert err.count("key 'efficiency.compute_efficiency' is 1e-09 (fraction of the peak), under a millionth") == 1
    check_number("gpu.yaml", "utilisation", 0.4)
    assert capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match=r"must be a number > 0 and <= 1 \(fraction of the peak\), got 1.5"):
        check_number("gpu.yaml", "utilisation", 1.5)


def test_the_cli_exits_3_with_one_line_and_no_traceback(tmp_path):
    prefix, system, network = case(tmp_path, UINT64_MAX)
    done = subprocess.run([sys.executable, "-m", "astra_sim.cli", "run", "--workload-configuration", prefix,
                           "--system-configuration", system, "--network-configuration", network],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("astra: error:")]
    assert len(errors) == 1 and "node 1 ('big')" in errors[0] and "2^63-1" in errors[0]


def test_a_roofline_with_vanishing_memory_bandwidth_names_the_node(tmp_path):
    nodes = [make_node(1, "mm", T.COMP_NODE, attrs={"num_ops": 10**18, "tensor_size": 1})]
    prefix, system, network = write_case(tmp_path, nodes, npus=2, **{"roofline-enabled": 1, "local-mem-bw": 1e-300,
                                                                     "peak-perf": 1})
    with pytest.raises(SimulationError, match=r"node 1 \('mm'\) of rank 0 ends after"):
        simulate(prefix, system, network)


def in_switch_case(tmp_path, switch_line):
    nodes = [make_node(1, "ar", T.COMM_COLL_NODE, attrs={"comm_type": T.ALL_REDUCE, "comm_size": 1 << 20})]
    prefix, system, _ = write_case(tmp_path, nodes, npus=4, **{"all-reduce-implementation": ["inSwitch"]})
    network = tmp_path / "switch.yml"
    network.write_text("topology: [ Switch ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
                       + switch_line + "\n")
    return prefix, system, str(network)


def test_a_huge_switch_latency_names_the_config_key(tmp_path):
    with pytest.raises(ConfigError, match=r"switch.yml: key 'switch_reduction_latency\[0\]' must be a number >= 0 "
                                          r"and <= 1,000,000,000 \(ns per link traversal\), got 1e\+30"):
        simulate(*in_switch_case(tmp_path, "switch_reduction_latency: [ 1.0e+30 ]"))


def test_a_vanishing_switch_bandwidth_warns_then_stops_at_the_int64_bound(tmp_path, capsys):
    with pytest.raises(SimulationError, match=r"a network, memory or collective phase ends after "
                                              r"9,223,372,036,854,775,807 ns \(2\^63-1"):
        simulate(*in_switch_case(tmp_path, "switch_reduction_bandwidth: [ 1.0e-300 ]"))
    assert "key 'switch_reduction_bandwidth[0]' is 1e-300 (GB/s" in capsys.readouterr().err
    report = simulate(*in_switch_case(tmp_path / "fine", "switch_reduction_bandwidth: [ 1.0e-6 ]"))
    assert 0 < report.breakdown["finish_ns"] <= MAX_TIME_NS  # slow (a KB/s) but within int64
