"""HolisticTraceAnalysis reads the Kineto-shaped traces of a simulated run, and its temporal breakdown and
comm/comp overlap agree with the report's breakdown within 1 % (astra_analysis.kineto)."""

from __future__ import annotations

import logging

import pytest

from astra_sim.cli import main
from astra_sim.report import read_report

hta = pytest.importorskip("hta.trace_analysis", reason="holistictraceanalysis is not installed")
pytest.importorskip("astra_workload_generators", reason="the workload_generators plugin is not installed")
pytest.importorskip("astra_gpu_model", reason="the gpu_model plugin is not installed")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """An 8-rank GPT-style step (TP 2, PP 2, DP 2, 4 micro-batches) on an HGX-H100, with its Kineto traces."""
    folder = tmp_path_factory.mktemp("hta")
    prefix = folder / "g"
    assert main(["workload", "llm", "--preset", "gpt3-13b", "--layers", "4", "--tp", "2", "--pp", "2", "--dp", "2",
                 "--micro-batches", "4", "-o", str(prefix)]) == 0
    traces = folder / "kineto"
    assert main(["run", "--platform", "hgx-h100", "--compute-model", "gpu", "--workload-configuration", str(prefix),
                 "--report-json", str(folder / "report.json"), "--timeline", str(traces),
                 "--timeline-format", "kineto", "-q"]) == 0
    return read_report(folder / "report.json"), traces


def _ours(rank):
    parts = rank["breakdown"]["parts"]
    compute = sum(ns for name, ns in parts.items() if name.startswith("compute:"))
    non_compute = sum(ns for name, ns in parts.items()
                      if name.startswith(("exposed:", "recv_wait:")) or name == "remote_memory")
    idle = parts.get("idle", 0) + parts.get("cpu", 0)
    return compute / 1000, non_compute / 1000, idle / 1000


def test_hta_breakdown_and_overlap_agree_with_ours(simulated):
    report, traces = simulated
    logging.disable(logging.WARNING)
    try:
        analysis = hta.TraceAnalysis(trace_dir=str(traces))
        temporal = analysis.get_temporal_breakdown(visualize=False)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    finally:
        logging.disable(logging.NOTSET)
    assert sorted(temporal["rank"]) == list(range(8))
    pipelined = 0
    for _, row in temporal.iterrows():
        rank = report["ranks"][int(row["rank"])]
        compute, non_compute, idle = _ours(rank)
        step = rank["finish_ns"] / 1000
        assert row["kernel_time(us)"] == pytest.approx(step, rel=0.01)
        assert row["compute_time(us)"] == pytest.approx(compute, rel=0.01)
        assert row["non_compute_time(us)"] == pytest.approx(non_compute, rel=0.01)
        assert abs(row["idle_time(us)"] - idle) <= 0.01 * step
        pipelined += any(name.startswith("recv_wait:") for name in rank["breakdown"]["parts"])
    assert pipelined, "the case has pipeline bubbles (receives) for HTA to count as non-compute"
    for _, row in overlap.iterrows():
        b = report["ranks"][int(row["rank"])]["breakdown"]
        ours = 100.0 * b["comm_overlapped_ns"] / b["comm_busy_ns"]
        assert row["comp_comm_overlap_pctg"] == pytest.approx(ours, abs=1.0)
        assert 0 < ours < 100
