"""Shared helpers for the workload-generator tests (fixtures ``shared_dir``/``parity_dir`` come from the kernel)."""

from __future__ import annotations

import pytest

from astra_sim_testing import write_network_config, write_system_config


@pytest.fixture
def configs(tmp_path):
    """System/network configs: 1-D rings of 2 and 8 NPUs, and a 2-D 4x2 ring network."""
    d = tmp_path / "configs"
    d.mkdir()
    return {
        "sys1": write_system_config(d / "sys1.json", dims=1),
        "sys2": write_system_config(d / "sys2.json", dims=2),
        "net2": write_network_config(d / "net2.yml", npus=(2,)),
        "net8": write_network_config(d / "net8.yml", npus=(8,)),
        "net42": write_network_config(d / "net42.yml", topology=("Ring", "Ring"), npus=(4, 2),
                                      bandwidth_gbps=(50.0, 25.0), latency_ns=(500.0, 500.0)),
    }
