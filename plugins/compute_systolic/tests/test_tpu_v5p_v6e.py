"""tpu-v5p (3-D torus) and tpu-v6e (Trillium, 2-D torus): Google's published per-chip numbers and a small run."""

from __future__ import annotations

import pytest
import yaml

from astra_sim import simulate
from astra_sim_testing import all_reduce_trace

from astra_compute_systolic.platforms import generate, get_preset

GIB = 1 << 30


def test_v5p_numbers_from_googles_page():
    v5p = get_preset("tpu-v5p")
    n = v5p.numbers()
    assert (n["bf16_tflops"], n["hbm_bandwidth_gbps"], n["hbm_capacity_gib"]) == (459.0, 2765.0, 95)
    assert n["ici_topology"] == "4x4x4" and n["ici_links_per_chip"] == 6
    # 1200 GB/s both directions per chip over 6 links
    assert n["scaleup_gb_per_s_per_direction"] * n["ici_links_per_chip"] * 2 == 1200.0
    assert (n["systolic_array"], n["clock_ghz"]) == ("128x1024", 1.75)
    assert n["nic_gbit_per_s_per_gpu"] == 50.0
    assert "dcn" not in n["assumptions"] and "clock" not in n["assumptions"]


def test_v6e_numbers_from_googles_page():
    v6e = get_preset("tpu-v6e")
    n = v6e.numbers()
    assert (n["bf16_tflops"], n["hbm_bandwidth_gbps"], n["hbm_capacity_gib"]) == (918.0, 1638.0, 32)
    assert n["ici_topology"] == "16x16" and n["total_gpus"] == 256 and n["ici_links_per_chip"] == 4
    assert n["scaleup_gb_per_s_per_direction"] * n["ici_links_per_chip"] * 2 == 800.0
    assert n["systolic_array"] == "256x512"
    # the clock only makes the array's peak the published one, and says so
    assert 2 * 256 * 512 * n["clock_ghz"] * 1e9 == pytest.approx(918e12, rel=0.01)
    assert "clock" in n["assumptions"]
    # DCN: 4 x 200 Gb/s NICs per host of 8 chips (= 25.6 Tb/s per 256-chip pod)
    assert n["nic_gbit_per_s_per_gpu"] == 4 * 200 / 8 == 25_600 / 256 and "dcn" not in n["assumptions"]


def test_networks_are_the_tori():
    v5p = yaml.safe_load(generate("tpu-v5p", 2, "4x4x8")["network_configuration"].text)
    assert v5p["topology"] == ["Ring", "Ring", "Ring", "Switch"] and v5p["npus_count"] == [4, 4, 8, 2]
    assert v5p["bandwidth"][:3] == [pytest.approx(86.3e9 / GIB)] * 3   # the measured payload rate (marin#6736)
    assert v5p["bandwidth"][3] == pytest.approx(50e9 / 8 / GIB)
    v6e = yaml.safe_load(generate("tpu-v6e", 1)["network_configuration"].text)
    assert v6e["topology"] == ["Ring", "Ring"] and v6e["npus_count"] == [16, 16]


def test_faster_ici_makes_a_v5p_all_reduce_faster_than_v4(tmp_path):
    prefix = all_reduce_trace(tmp_path, 64, 64 << 20)
    v4 = simulate(workload=prefix, platform="tpu-v4").max_finish_ns
    v5p = simulate(workload=prefix, platform="tpu-v5p").max_finish_ns
    # the same 4x4x4 torus, links of 86.3 (v5p's measured payload rate; 100 nominal) instead of 50 GB/s per
    # direction: a bandwidth-bound all-reduce takes 50 / 86.3 = 0.579 of v4's time
    assert v5p / v4 == pytest.approx(50 / 86.3, rel=0.05)


def test_small_llm_step_on_a_v6e_slice(tmp_path):
    llm = pytest.importorskip("astra_workload_generators")
    prefix = str(tmp_path / "l")
    llm.generate_llm_workload(llm.LlmSpec(preset="llama2-7b", layers=2, tp=4, dp=4, seq_len=1024), prefix)
    report = simulate(workload=prefix, platform="tpu-v6e", tpu_topology="4x4", comm_groups=f"{prefix}.groups.json")
    assert len(report.ranks) == 16 and report.max_finish_ns > 0
    assert report.stats["systolic_model_nodes"]["gemm"] > 0
