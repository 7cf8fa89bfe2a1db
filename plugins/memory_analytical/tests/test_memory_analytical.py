"""The analytical remote-memory backend: reference goldens, queueing order, discovery and errors."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import make_metadata, make_node, types, write_et
from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.plugins import build_registry, make_plugin_manager
from astra_sim.simulation import simulate

from astra_memory_analytical import AnalyticalRemoteMemory, MemoryConfig, parse_memory_config
from astra_sim_testing import system_config

MIB = 1 << 20
PLUGINS = ["network_analytical", "memory_analytical"]

SYSTEM = system_config()  # one ring, the reference's usual settings


def mem(node_id, kind, size, deps=()):
    type_ = types.MEM_LOAD_NODE if kind == "load" else types.MEM_STORE_NODE
    return make_node(
        node_id, f"{kind}_{node_id}", type_, data_deps=list(deps),
        attrs={"is_cpu_op": False, "tensor_size": size}, attr_types={"tensor_size": "uint64_val"},
    )


def comp(node_id, micros, deps=()):
    return make_node(node_id, f"comp_{node_id}", types.COMP_NODE, data_deps=list(deps),
                     duration_micros=micros, attrs={"is_cpu_op": False})


def load_then_store(size=MIB):
    return [mem(0, "load", size), mem(1, "store", size, deps=[0])]


def write_case(tmp_path, nodes_per_rank, memory, npus=8):
    """Traces (``nodes_per_rank``: list per rank, or one list for every rank), network, system, memory files."""
    prefix = tmp_path / "trace" / "t"
    prefix.parent.mkdir()
    for rank in range(npus):
        nodes = nodes_per_rank[rank] if isinstance(nodes_per_rank[0], list) else nodes_per_rank
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    network = tmp_path / "network.yml"
    network.write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    system = tmp_path / "system.json"
    system.write_text(json.dumps(SYSTEM))
    memory_path = None
    if memory is not None:
        memory_path = tmp_path / "memory.json"
        memory_path.write_text(json.dumps(memory) if isinstance(memory, dict) else memory)
    return str(prefix), str(system), str(network), None if memory_path is None else str(memory_path)


def run(tmp_path, nodes, memory, npus=8, **kwargs):
    prefix, system, network, memory_path = write_case(tmp_path, nodes, memory, npus)
    return simulate(prefix, system, network, memory_path, plugins=PLUGINS, **kwargs)


def finishes(report):
    return [r.finish_ns for r in report.ranks]


# ------------------------------------------------------------------ reference goldens
# 8 NPUs, each: MEM_LOAD 1 MiB -> MEM_STORE 1 MiB, latency 1000 ns, bw 100 B/ns:
# one request = 1000 + trunc(1048576 / 100) = 11485 ns.


def test_per_npu_golden(tmp_path):
    memory = {"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 1000, "remote-mem-bw": 100}
    report = run(tmp_path, load_then_store(), memory)
    assert finishes(report) == [22970] * 8
    assert report.settings["memory_backend"] == "analytical"


def test_memory_pool_golden(tmp_path):
    memory = {"memory-type": "MEMORY_POOL", "remote-mem-latency": 1000, "remote-mem-bw": 100}
    report = run(tmp_path, load_then_store(), memory)
    assert finishes(report) == [(9 + r) * 11485 for r in range(8)]


def test_per_node_golden(tmp_path):
    memory = {
        "memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 1000, "remote-mem-bw": 100,
        "num-nodes": 2, "num-npus-per-node": 4,
    }
    report = run(tmp_path, load_then_store(), memory)
    # Each node: its 4 loads (FIFO by rank), then the 4 stores queued as the loads finish.
    expected = [(5 + r % 4) * 11485 for r in range(8)]
    assert finishes(report) == expected
    assert min(expected) == 57425 and max(expected) == 91880


# ------------------------------------------------------------------ timing details


def test_fractional_latency_and_bandwidth_truncate_like_the_reference(tmp_path):
    # uint64 in the reference: latency 1000.9 -> 1000, bw 100.7 -> 100; size / bw truncated.
    memory = {"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 1000.9, "remote-mem-bw": 100.7}
    report = run(tmp_path, load_then_store(), memory)
    assert finishes(report) == [22970] * 8
    assert any("truncated" in w and "remote-mem-bw" in w for w in report.warnings)
    assert any("truncated" in w and "remote-mem-latency" in w for w in report.warnings)


def test_runtime_formula():
    config = MemoryConfig(path="x", memory_type="MEMORY_POOL", latency_ns=7, bandwidth_bytes_per_ns=3)
    assert config.runtime_ns(0) == 7
    assert config.runtime_ns(10) == 7 + 3
    assert config.runtime_ns(MIB) == 7 + 349525


def test_completion_order_follows_the_reference_sys_batching(tmp_path):
    """A completion joins the requesting rank's per-tick batch (reference Sys::register_event).

    Pool, 2000 ns per request. Rank 0: COMP 4 us, load A at 0 (done 2000), load B after A (served
    2000..4000, registered at 2000 into rank 0's batch for 4000 that the COMP created at 0), store C after B.
    Rank 1: COMP 4 us, then load D. At 4000 rank 0's batch runs before rank 1's: B completes, C queues,
    the pool starts C (4000..6000); then rank 1's COMP ends and D queues (6000..8000).
    """
    size = 100_000  # 1000 + 100000 / 100 = 2000 ns
    rank0 = [comp(0, 4), mem(1, "load", size), mem(2, "load", size, deps=[1]), mem(3, "store", size, deps=[2])]
    rank1 = [comp(0, 4), mem(1, "load", size, deps=[0])]
    memory = {"memory-type": "MEMORY_POOL", "remote-mem-latency": 1000, "remote-mem-bw": 100}
    report = run(tmp_path, [rank0, rank1], memory, npus=2)
    assert finishes(report) == [6000, 8000]


def test_per_npu_requests_do_not_wait_for_each_other(tmp_path):
    # A CPU-op MEM node and a GPU MEM node on one NPU overlap (separate hardware slots, no memory queue).
    size = 100_000
    cpu_load = make_node(0, "cpu_load", types.MEM_LOAD_NODE,
                         attrs={"is_cpu_op": True, "tensor_size": size}, attr_types={"tensor_size": "uint64_val"})
    nodes = [cpu_load, mem(1, "load", size)]
    memory = {"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 1000, "remote-mem-bw": 100}
    report = run(tmp_path, nodes, memory, npus=2)
    assert finishes(report) == [2000, 2000]


def test_standalone_backend_uses_the_engine():
    from astra_sim.engine import EventEngine

    engine = EventEngine()
    config = parse_memory_config({"memory-type": "MEMORY_POOL", "remote-mem-latency": 10, "remote-mem-bw": 2})
    memory = AnalyticalRemoteMemory(config, engine)
    done = []
    for rank in range(3):
        memory.issue(rank, False, 20, lambda r: done.append((r, engine.now)), rank)
    engine.run()
    assert done == [(0, 20), (1, 40), (2, 60)]
    assert memory.requests == 3 and memory.bytes == 60


# ------------------------------------------------------------------ discovery


def test_discovery_registers_analytical():
    pm = make_plugin_manager(select=PLUGINS)
    registry = build_registry(pm)
    assert "analytical" in registry.names("memory_backend")
    assert registry.get("memory_backend", "analytical").plugin == "memory_analytical"


def test_analytical_is_the_default_memory_backend(tmp_path):
    nodes = [comp(0, 1)]
    report = run(tmp_path, nodes, {"memory-type": "NO_MEMORY_EXPANSION"}, npus=2)
    assert report.settings["memory_backend"] == "analytical"
    assert finishes(report) == [1000, 1000]


# ------------------------------------------------------------------ errors


def test_no_memory_expansion_with_mem_node_is_a_workload_error(tmp_path):
    with pytest.raises(WorkloadError) as info:
        run(tmp_path, load_then_store(), {"memory-type": "NO_MEMORY_EXPANSION"})
    message = str(info.value)
    assert "t.0.et" in message
    assert "node 0" in message and "load_0" in message
    assert "NO_MEMORY_EXPANSION" in message and "memory.json" in message
    assert "PER_NPU_MEMORY_EXPANSION" in message


def test_no_memory_file_with_mem_node_is_a_workload_error(tmp_path):
    with pytest.raises(WorkloadError, match="NO_MEMORY_EXPANSION.*no --remote-memory-configuration"):
        run(tmp_path, load_then_store(), None)


def test_no_memory_expansion_without_mem_nodes_runs(tmp_path):
    report = run(tmp_path, [comp(0, 2)], None, npus=2)
    assert finishes(report) == [2000, 2000]


BAD_CONFIGS = [
    ({}, "'memory-type' is missing"),
    ({"memory-type": "HBM"}, "unknown memory-type 'HBM'"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-bw": 100}, "'remote-mem-latency' is missing"),
    ({"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 10}, "'remote-mem-bw' is missing"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-latency": 10, "remote-mem-bw": 0}, "'remote-mem-bw' must be >= 1"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-latency": 10, "remote-mem-bw": -5}, "'remote-mem-bw' must be >= 1"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-latency": 10, "remote-mem-bw": 0.5}, "would become 0"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-latency": -1, "remote-mem-bw": 1}, "'remote-mem-latency' must be >= 0"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-latency": "1", "remote-mem-bw": 1}, "must be a number"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-latency": 1, "remote-mem-bw": True}, "must be a number"),
    ({"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 1, "remote-mem-bw": 1,
      "num-npus-per-node": 4}, "'num-nodes' is missing"),
    ({"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 1, "remote-mem-bw": 1,
      "num-nodes": 2, "num-npus-per-node": 0}, "'num-npus-per-node' must be a positive integer"),
    ({"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 1, "remote-mem-bw": 1,
      "num-nodes": 2, "num-npus-per-node": 2.0}, "'num-npus-per-node' must be a positive integer"),
    ({"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 1, "remote-mem-bw": 1,
      "num-nodes": 2, "num-npus-per-node": 3}, "2 x 3 = 6, but the network has 8 NPUs"),
    ('{"memory-type": "MEMORY_POOL", "remote-mem-latency": NaN, "remote-mem-bw": 1}', "finite"),
    ("[1, 2]", "must be a JSON object"),
]


@pytest.mark.parametrize("config, expected", BAD_CONFIGS)
def test_bad_config_is_a_config_error(tmp_path, config, expected):
    with pytest.raises(ConfigError) as info:
        run(tmp_path, load_then_store(), config)
    message = str(info.value)
    assert expected in message
    assert "memory.json" in message


def test_unknown_key_is_warned(tmp_path):
    memory = {"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 1000, "remote-mem-bw": 100,
              "remote-mem-latncy": 5}
    report = run(tmp_path, load_then_store(), memory)
    assert any("'remote-mem-latncy' is ignored" in w for w in report.warnings)
