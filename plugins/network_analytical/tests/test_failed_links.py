"""A failed cable on the analytical network lowers its dimension's bandwidth to the share of links left at the
NPU that lost the most; an unknown cable, or one whose loss cuts an NPU off, is one line naming the option."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_network_analytical import AnalyticalNetwork, parse_network_config
from astra_network_analytical.model import links_per_npu, without_links
from astra_sim.errors import ConfigError

GIB = 1 << 30


@pytest.fixture
def config(tmp_path):
    """A 4-NPU ring (dimension 0) in each of 2 nodes of a 2-member switch (dimension 1), and a fully connected
    4-NPU network."""
    def make(text, name="net.yml"):
        path = tmp_path / name
        path.write_text(text)
        return parse_network_config(path)

    return make


RING_SWITCH = ("topology: [ Ring, Switch ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 100.0, 50.0 ]\n"
               "latency: [ 500.0, 1000.0 ]\n")
FULL = "topology: [ FullyConnected ]\nnpus_count: [ 4 ]\nbandwidth: [ 90.0 ]\nlatency: [ 500.0 ]\n"


def test_links_per_npu_are_those_the_flow_backend_builds(config):
    ring_switch, full = config(RING_SWITCH), config(FULL, "full.yml")
    assert [links_per_npu(ring_switch, d) for d in (0, 1)] == [2, 1]
    assert links_per_npu(full, 0) == 3


def test_a_ring_cable_down_halves_its_dimension_only(config):
    net = AnalyticalNetwork(config(RING_SWITCH), engine=None, failed_links=[["npu0", "npu1"]])
    assert net.config.bandwidth_gib_per_s == (50.0, 50.0)
    size = 1 << 20
    # 1 -> 2 is not on the cable, yet runs at the dimension's lowered bandwidth (the model is symmetric)
    assert net.delay_ns(1, 2, size) == int(500.0 + size / (50.0 * GIB / 1e9))
    assert net.delay_ns(0, 4, size) == int(2 * 1000.0 + size / (50.0 * GIB / 1e9))  # dimension 1 as it was
    assert net.describe()["failed_links"] == [["npu0", "npu1"]]
    # the same cable named the other way round, and a cable of the other node's ring, give the same network
    assert without_links(config(RING_SWITCH), [["npu1", "npu0"]]) == net.config
    assert without_links(config(RING_SWITCH), [["npu7", "npu4"]]) == net.config


def test_two_cables_at_one_npu_of_a_fully_connected_group(config):
    full = config(FULL, "full.yml")
    assert without_links(full, [["npu0", "npu1"]]).bandwidth_gib_per_s == (60.0,)  # 2 of npu0's 3 links left
    assert without_links(full, [["npu0", "npu1"], ["npu0", "npu2"]]).bandwidth_gib_per_s == (30.0,)
    assert without_links(full, [["npu0", "npu1"], ["npu2", "npu3"]]).bandwidth_gib_per_s == (60.0,)


@pytest.mark.parametrize("pair", [["npu0", "npu2"], ["npu0", "npu5"], ["npu0", "npu8"], ["npu0", "d1.g1.switch"],
                                  ["npu0", "d0.g0.switch"], ["npu0", "npu0"], ["x", "y"], ["npu1", "d7.g0.switch"]])
def test_a_cable_the_network_does_not_have_is_one_line(config, pair):
    with pytest.raises(ConfigError) as info:
        without_links(config(RING_SWITCH), [pair])
    message = str(info.value)
    assert message.startswith("option failed_links: no link joins") and "\n" not in message


def test_an_npu_cut_off_is_an_error_not_a_bandwidth_of_zero(config):
    with pytest.raises(ConfigError, match="npu1 has no link left in dimension 1 \\(Switch\\)"):
        without_links(config(RING_SWITCH), [["npu1", "d1.g1.switch"]])
    with pytest.raises(ConfigError, match="npu1 has no link left in dimension 0"):
        without_links(config(RING_SWITCH), [["npu0", "npu1"], ["npu1", "npu2"]])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.lists(st.one_of(st.text(max_size=12), st.integers(-3, 20)), max_size=3),
                          st.integers(), st.text(max_size=5)), max_size=4))
def test_any_failed_links_value_is_a_network_or_one_line(tmp_path_factory, failed):
    path = tmp_path_factory.mktemp("net") / "net.yml"
    path.write_text(RING_SWITCH)
    config = parse_network_config(path)
    try:
        out = without_links(config, failed)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("option failed_links")
    else:
        assert all(0 < new <= old for new, old in zip(out.bandwidth_gib_per_s, config.bandwidth_gib_per_s))
