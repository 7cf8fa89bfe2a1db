"""Grace memory over NVLink-C2C (GB200/GB300 NVL72): the platform's remote-memory tier, timed by hand."""

from __future__ import annotations

import json

import pytest

from astra_sim import get_platform, simulate
from astra_sim.chakra import make_metadata, make_node, types, write_et

from astra_gpu_model.grace_memory import C2C_LATENCY_NS, GB200_GRACE, GB300_GRACE
from astra_gpu_model.platforms import generate

GB = 10**9
RUN = {"host_launch_us": 0, "host_sync_us": 0, "gpu_contention_model": "off"}


def load(node_id, size, deps=()):
    return make_node(node_id, f"load_{node_id}", types.MEM_LOAD_NODE, data_deps=list(deps),
                     attrs={"is_cpu_op": False, "tensor_size": size}, attr_types={"tensor_size": "uint64_val"})


def store(node_id, size, deps=()):
    return make_node(node_id, f"store_{node_id}", types.MEM_STORE_NODE, data_deps=list(deps),
                     attrs={"is_cpu_op": False, "tensor_size": size}, attr_types={"tensor_size": "uint64_val"})


def write_trace(tmp_path, per_rank):
    prefix = tmp_path / "t"
    for rank, nodes in enumerate(per_rank):
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    return str(prefix)


def by_hand(size, bandwidth):
    return C2C_LATENCY_NS + int(size / bandwidth)


def test_bandwidth_is_c2c_or_lpddr_whichever_is_slower():
    assert GB200_GRACE.bandwidth_bytes_per_ns() == 450  # C2C's 450 GB/s per direction < LPDDR5X's 512
    assert GB300_GRACE.bandwidth_bytes_per_ns() == 388  # 14 TB/s / 36 Grace = 388.9 GB/s < C2C's 450
    assert GB300_GRACE.capacity_gb_per_cpu == pytest.approx(472.2, abs=0.1)


def test_memory_config_one_server_per_grace():
    config = GB300_GRACE.config(144)
    assert config == {"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": C2C_LATENCY_NS,
                      "remote-mem-bw": 388, "num-nodes": 72, "num-npus-per-node": 2}
    assert GB200_GRACE.config(1)["num-npus-per-node"] == 1  # a one-GPU job has its Grace to itself


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb200-nvl72-64", "gb300-nvl72"])
def test_platform_generates_the_tier(name):
    platform = get_platform(name)
    files = generate(platform, nodes=2)
    memory = json.loads(files["remote_memory_configuration"].text)
    assert memory["num-nodes"] * memory["num-npus-per-node"] == 2 * platform.gpus_per_node
    numbers = platform.describe(2)
    assert numbers["grace_memory"]["bandwidth_bytes_per_ns"] == memory["remote-mem-bw"]
    assert "grace_memory.latency_ns" in numbers["assumptions"]  # not a published figure, and says so
    assert numbers["sources"]["grace_memory.capacity_gb_per_cpu"]


def test_platform_without_grace_has_no_tier():
    assert "remote_memory_configuration" not in generate(get_platform("hgx-b300"), nodes=1)
    assert "grace_memory" not in get_platform("hgx-b300").describe()


def finish_ns(report):
    return [rank.finish_ns for rank in report.ranks]


@pytest.mark.parametrize("name,grace", [("gb300-nvl72", GB300_GRACE), ("gb200-nvl72", GB200_GRACE)])
def test_mem_load_takes_size_over_bandwidth_plus_latency(tmp_path, name, grace):
    size = 3 * GB  # e.g. one GPU's share of offloaded optimizer states
    prefix = write_trace(tmp_path, [[load(0, size)], []])  # a two-GPU job: one superchip
    report = simulate(workload=prefix, platform=name, **RUN)
    bandwidth = grace.bandwidth_bytes_per_ns()
    assert report.settings["platform_defaults"]["remote_memory"]
    assert report.max_finish_ns == by_hand(size, bandwidth)


def test_the_two_gpus_of_a_superchip_share_their_grace(tmp_path):
    size = GB
    one = by_hand(size, GB300_GRACE.bandwidth_bytes_per_ns())
    prefix = write_trace(tmp_path, [[load(0, size), store(1, size, deps=[0])], [load(0, size)]])
    report = simulate(workload=prefix, platform="gb300-nvl72", **RUN)
    # FIFO per Grace: rank 0's load, rank 1's load (queued behind it), then rank 0's store
    assert sorted(finish_ns(report)) == [2 * one, 3 * one]
