"""The wafer-scale case study's machines and DLRM step (examples/case-studies/wafer-scale/run.py): the two networks
hold the same NPUs, the system JSON names one algorithm per dimension (so a collective crosses the wafers), and
the DLRM graph moves the bytes its MLPerf configuration implies. The study's ``--small`` ratio is checked with
the other studies' in tests/test_case_studies.py."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

STUDY = Path(__file__).resolve().parents[1] / "examples" / "case-studies" / "wafer-scale" / "run.py"


@pytest.fixture(scope="module")
def study():
    spec = importlib.util.spec_from_file_location("case_study_wafer_scale_unit", STUDY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("system", ["scale-out", "wafer-scale"])
def test_both_networks_hold_the_same_npus_and_the_off_node_bandwidth(study, system):
    config = study.network(system, 12.5)
    assert math.prod(config["npus_count"]) == study.NPUS
    assert config["topology"][-1] == "Switch"
    assert config["bandwidth"][-1] == pytest.approx(12.5e9 / 2 ** 30, abs=1e-3)  # GB/s -> GiB/s
    assert config["cross_dimension_route"] == "dimension_order"
    inside = study.NVLINK_GBPS if system == "scale-out" else study.ON_WAFER_LINK_GBPS
    assert all(bw == pytest.approx(inside * 1e9 / 2 ** 30, abs=1e-3) for bw in config["bandwidth"][:-1])


def test_the_system_names_an_algorithm_for_every_dimension(study):
    wafer = study.system(["Ring", "Ring", "Switch"])
    assert wafer["all-reduce-implementation"] == ["ring", "ring", "ring"]
    assert wafer["all-to-all-implementation"] == ["ring", "ring", "direct"]
    assert study.system(["Switch", "Switch"])["all-to-all-implementation"] == ["direct", "direct"]


def test_a_wafer_all_reduce_crosses_the_wafers(study, tmp_path):
    """With the study's system JSON an all-reduce over all 256 NPUs runs its last phase across the 16 wafers on
    1/16 of the data (with the platform's two-dimensional JSON it would stay inside one wafer and never pay
    the off-wafer bandwidth): at 12.5 GB/s per NPU that phase alone is 2 x 15/16 x S/16 / 12.5 GB/s."""
    from astra_sim import simulate
    from astra_workload_generators.micro import generate_micro

    size = 256 << 20
    generate_micro(str(tmp_path / "ar"), collective="all_reduce", size=str(size), npus=study.NPUS)
    (network,), systems = study.machine_files(tmp_path, [("wafer-scale", 12.5)])
    finish = simulate(str(tmp_path / "ar"), systems["wafer-scale"], network, gpu="H100-SXM5-80GB").max_finish_ns
    off_wafer_ns = 2 * 15 / 16 * size / 16 / 12.5
    assert off_wafer_ns < finish < 1.5 * off_wafer_ns


def test_the_dlrm_step_moves_its_embeddings_and_gradients(study):
    from astra_workload_generators.micro import graph_trace

    graph = study.dlrm_graph()
    nodes = {n["name"]: n for n in graph["nodes"]}
    pooled = study.DLRM_BATCH * 26 * 128 * 4
    assert nodes["a2a_fwd"]["size"] == nodes["a2a_bwd"]["size"] == pooled
    assert study.mlp_params() == 2_368_897  # 13-512-256-128 and 479-1024-1024-512-256-1, weights and biases
    assert nodes["allreduce_mlp"]["size"] == 4 * 2_368_897
    gemms = [n for n in graph["nodes"] if n["type"] == "comp"]
    assert len(gemms) == 3 * 8  # 8 layers: a forward, a data-gradient and a weight-gradient GEMM each
    first_top = nodes["aten::mm.top_fwd0"]
    assert "a2a_fwd" in first_top["data_deps"]
    assert json.loads(first_top["attrs"]["inputs.shapes"]) == [[study.DLRM_BATCH, 479], [479, 1024]]
    assert len(graph_trace(graph, 2).ranks) == 2


def test_the_rows_are_labelled_by_system_and_bandwidth(study):
    rows = study.labelled([{"run.network-configuration": "/x/wafer-scale_12.5.yml", "step_ns": "5"}])
    assert rows[0]["system"] == "wafer-scale" and rows[0]["off_node_gbps"] == "12.5"
