"""A platform's default scale-out fabric (``astra platforms --json``'s ``fabric``) and what ``--fabric`` asks of a
platform run."""

from __future__ import annotations

import json

import pytest

from astra_sim.errors import ConfigError

from astra_gpu_model.platforms import LEAF_SWITCHES, PLATFORMS, default_fabric, get_platform


def test_every_gpu_platform_shows_its_default_fabric():
    for platform in PLATFORMS.values():
        fabric = platform.numbers(4)["fabric"]
        assert fabric["kind"] == "rail" and fabric["oversubscription"] == 1.0 and fabric["planes"] == 1
        assert fabric["nic_gbit_per_s"] == platform.nic_gbit_per_gpu
        assert fabric["spec"] == f"rail:nodes_per_leaf={fabric['nodes_per_leaf']}:over=1" and fabric["source"]


def test_leaves_take_half_a_leaf_switchs_ports():
    assert get_platform("hgx-h100").numbers()["fabric"]["nodes_per_leaf"] == 32  # QM9700: 64 ports of 400G
    b300 = get_platform("hgx-b300").numbers()["fabric"]
    assert b300["nodes_per_leaf"] == 72 and b300["nic_gbit_per_s"] == 800.0  # Q3400: 144 ports of 800G
    assert default_fabric(200.0)["source"].startswith("ASSUMPTION")  # no 200G leaf recorded
    for name, ports, source in LEAF_SWITCHES.values():
        assert ports % 2 == 0 and name.split()[-1] in source


def test_fabric_needs_two_nodes_and_passes_the_platform_default():
    platform = get_platform("hgx-b300")
    with pytest.raises(ConfigError, match="needs --nodes >= 2"):
        platform.resolve(1, {"fabric": "rail"})
    setup = platform.resolve(4, {"fabric": "rail:over=2"})
    assert setup.options["fabric_defaults"]["nodes_per_leaf"] == 72
    assert "analytical backend ignores it" in setup.defaults["fabric"]
    assert "fabric_defaults" not in platform.resolve(4, {}).options  # without --fabric nothing changes
    assert "fabric" not in platform.resolve(4, {}).defaults


def test_the_analytical_network_is_unchanged_by_the_fabric():
    """--fabric is for the flow/congestion backends: the generated analytical YAML is the same with or without."""
    platform = get_platform("hgx-h100")
    plain = platform.resolve(4, {}).network_configuration.text
    assert platform.resolve(4, {"fabric": "rail:over=4"}).network_configuration.text == plain
    assert json.dumps(platform.numbers(4)["fabric"])  # JSON-able for astra platforms --json
