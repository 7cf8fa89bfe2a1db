"""pcie-l40s: eight L40S on PCIe Gen4 (no NVLink), 2 x 200 Gb/s per node; a small LLM step runs on it."""

from __future__ import annotations

import pytest
import yaml

from astra_sim import get_platform, simulate

from astra_gpu_model.platforms import generate

GIB = 1 << 30


def test_numbers_and_network():
    numbers = get_platform("pcie-l40s").describe(2)
    assert (numbers["gpu"], numbers["gpus_per_node"], numbers["total_gpus"]) == ("L40S", 8, 16)
    assert numbers["scaleup_gb_per_s_per_direction"] == 32.0  # PCIe Gen4 x16, one direction
    assert numbers["nic_gbit_per_s_per_gpu"] == 50.0  # 2 x 200 Gb/s over 8 GPUs
    assert "nic" in numbers["assumptions"]  # no vendor's 8 x L40S NIC layout was found: said so
    assert "grace_memory" not in numbers
    net = yaml.safe_load(generate("pcie-l40s", 2)["network_configuration"].text)
    assert net["npus_count"] == [8, 2]
    assert net["bandwidth"] == pytest.approx([32e9 / GIB, 50e9 / 8 / GIB])


def test_small_llm_step_runs_and_pays_for_pcie(tmp_path):
    llm = pytest.importorskip("astra_workload_generators")
    spec = llm.LlmSpec(preset="llama3-8b", tp=8, layers=2, seq_len=2048, micro_batches=1)
    prefix = str(tmp_path / "l")
    llm.generate_llm_workload(spec, prefix)
    l40s = simulate(workload=prefix, platform="pcie-l40s")
    h100 = simulate(workload=prefix, platform="hgx-h100")
    assert l40s.settings["platform"]["name"] == "pcie-l40s"
    assert "L40S" in l40s.settings["platform_defaults"]["gpu"]
    # 8-way tensor parallelism over PCIe (32 GB/s) instead of NVLink (450 GB/s), on a GPU with 1/2.7 the bf16
    # rate and 1/3.9 the memory bandwidth: the step is several times longer
    assert l40s.max_finish_ns > 3 * h100.max_finish_ns
    assert l40s.max_exposed_comm_ns > 5 * h100.max_exposed_comm_ns
