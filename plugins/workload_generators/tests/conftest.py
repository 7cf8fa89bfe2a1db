"""Shared helpers for the workload-generator tests (fixtures ``shared_dir``/``parity_dir`` come from the kernel).

Tests run with ``--import-mode=importlib`` and cannot import each other, so a helper two test modules need is a
fixture here that returns it (``layer_nodes``, ``gpu_bytes``)."""

from __future__ import annotations

import pytest

from astra_sim_testing import write_network_config, write_system_config
from astra_workload_compact import read_rank_nodes


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


def _layer_nodes(folder, phase, layer=0):
    """[(label suffix, node)] of rank 0's ``phase`` ("fwd"/"bwd"/"recompute") of ``layer``, micro-batch 0, in trace
    order."""
    out = []
    for n in read_rank_nodes(folder, 0):
        label = n.attrs.get("label") or n.name
        prefix = f"{phase}.l{layer}.mb0."
        if label.startswith(prefix):
            out.append((label[len(prefix):], n))
    return out


def _gpu_bytes(node):
    """The bytes the gpu model moves for ``node`` (from its shapes and types, as it times it)."""
    from astra_gpu_model.ops import classify  # the gpu-model plugin: only the tests that ask for this need it

    return classify(node.name, node.inputs_shapes, node.inputs_types, node.inputs_values).nbytes


@pytest.fixture
def layer_nodes():
    """``layer_nodes(folder, phase, layer=0)``: one layer's nodes of rank 0's trace, micro-batch 0, with the
    ``{phase}.l{layer}.mb0.`` prefix taken off their labels."""
    return _layer_nodes


@pytest.fixture
def gpu_bytes():
    """``gpu_bytes(node)``: the bytes the gpu model moves for a trace node."""
    return _gpu_bytes
