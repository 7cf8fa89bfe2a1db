"""The analytical network's closed form (semantics §6.2) and its ``cross_dimension_route`` option."""

from __future__ import annotations

import pytest

from astra_network_analytical import AnalyticalNetwork, parse_network_config
from astra_sim.errors import ConfigError

GIB = 1 << 30


def _network(tmp_path, route=None, topology=("Switch", "Switch"), npus=(8, 4), bw=(400.0, 50.0),
             latency=(250.0, 1000.0)):
    text = (f"topology: [ {', '.join(topology)} ]\n"
            f"npus_count: [ {', '.join(str(n) for n in npus)} ]\n"
            f"bandwidth: [ {', '.join(str(b) for b in bw)} ]\n"
            f"latency: [ {', '.join(str(x) for x in latency)} ]\n")
    if route is not None:
        text += f"cross_dimension_route: {route}\n"
    path = tmp_path / "net.yml"
    path.write_text(text)
    return AnalyticalNetwork(parse_network_config(path), engine=None)


def _bytes_per_ns(gbps):
    return gbps * GIB / 1e9


def test_one_dimension_messages_cost_hops_latency_plus_bytes_over_bandwidth(tmp_path):
    net = _network(tmp_path)
    size = 1 << 20
    # 0 -> 5: same node (dim 1 coordinate 0), different local index: Switch = 2 hops
    assert net.delay_ns(0, 5, size) == int(2 * 250.0 + size / _bytes_per_ns(400.0))
    # 3 -> 27: same local index 3, nodes 0 -> 3: only dimension 1
    assert net.delay_ns(3, 27, size) == int(2 * 1000.0 + size / _bytes_per_ns(50.0))


def test_reference_charges_only_the_lowest_differing_dimension(tmp_path):
    net = _network(tmp_path)
    assert net.config.cross_dimension_route == "lowest_dimension"
    size = 1 << 20
    # 4 -> 8: local index 4 -> 0 and node 0 -> 1; the reference charges NVLink (dimension 0) alone
    assert net.delay_ns(4, 8, size) == int(2 * 250.0 + size / _bytes_per_ns(400.0))
    assert "cross_dimension_route" not in net.describe()


def test_dimension_order_adds_the_latencies_and_streams_at_the_slowest_bandwidth(tmp_path):
    net = _network(tmp_path, "dimension_order")
    size = 1 << 20
    expected = int(2 * 250.0 + 2 * 1000.0 + size / _bytes_per_ns(50.0))
    assert net.delay_ns(4, 8, size) == expected
    assert net.delay_ns(8, 4, size) == expected
    # a message inside one dimension costs what the reference charges
    ref = _network(tmp_path)
    for src, dst in ((0, 5), (3, 27), (7, 6)):
        assert net.delay_ns(src, dst, size) == ref.delay_ns(src, dst, size)
    assert net.describe()["cross_dimension_route"] == "dimension_order"


def test_dimension_order_on_rings_counts_the_shorter_way_in_each_dimension(tmp_path):
    net = _network(tmp_path, "dimension_order", topology=("Ring", "Ring", "FullyConnected"), npus=(4, 6, 2),
                   bw=(100.0, 200.0, 25.0), latency=(10.0, 20.0, 300.0))
    # src coordinates (1, 0, 0) -> dst (3, 5, 1): ring hops 2 and 1, one FullyConnected hop
    src = 1
    dst = 3 + 4 * 5 + 24 * 1
    size = 3_000_000
    assert net.delay_ns(src, dst, size) == int(2 * 10.0 + 1 * 20.0 + 300.0 + size / _bytes_per_ns(25.0))
    # without the last dimension the slowest is dimension 0
    assert net.delay_ns(src, 3 + 4 * 5, size) == int(2 * 10.0 + 20.0 + size / _bytes_per_ns(100.0))


def test_a_message_to_itself_is_an_error_in_both_routes(tmp_path):
    for route in (None, "dimension_order"):
        net = _network(tmp_path, route)
        with pytest.raises(ConfigError, match="NPU 9 sends a message to itself"):
            net.delay_ns(9, 9, 100)


def test_unknown_route_names_the_file_key_and_the_choices(tmp_path):
    with pytest.raises(ConfigError) as err:
        _network(tmp_path, "shortest")
    message = str(err.value)
    assert "net.yml" in message and "cross_dimension_route" in message
    assert "lowest_dimension, dimension_order" in message and "'shortest'" in message
