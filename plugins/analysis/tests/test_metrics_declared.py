"""Every number the analyses add to a report (critical path, timeline, link utilisation) is in the report's schema."""

from __future__ import annotations

import astra_sim
from astra_sim.metrics import metric_registry, undeclared


def test_a_report_with_every_analysis_is_declared(tmp_path, monkeypatch):
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    monkeypatch.chdir(tmp_path)
    generate_llm_workload(LlmSpec.from_mapping({"layers": 2, "hidden": 512, "heads": 8, "vocab": 1024,
                                                "seq_len": 256, "tp": 4, "pp": 2, "dp": 2, "micro_batches": 2}), "w")
    report = astra_sim.simulate(workload="w", platform="hgx-h100", nodes=2, network_backend="flow",
                                critical_path=True, timeline="t.json").to_dict()
    assert report["critical_path"]["length_ns"] == report["summary"]["max_finish_ns"]
    assert undeclared(report) == []
    assert metric_registry().entries["critical_path.length_ns"].plugin == "analysis"
