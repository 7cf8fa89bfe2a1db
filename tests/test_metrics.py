"""The report's schema (core/astra_sim/metrics.py): every number a real report holds is declared once, with its unit."""

from __future__ import annotations

import pytest

import astra_sim
from astra_sim.errors import PluginError
from astra_sim.metrics import UNITS, MetricRegistry, metric_registry, metrics_table, undeclared

EXAMPLE = "examples/data_parallel"
MODEL = {"layers": 2, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256, "micro_batches": 2}


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    prefix = str(tmp_path_factory.mktemp("llm") / "w")
    generate_llm_workload(LlmSpec.from_mapping({**MODEL, "tp": 4, "pp": 2, "dp": 2}), prefix)
    return prefix


@pytest.mark.parametrize("run", [
    {"platform": "hgx-h100", "nodes": 2},
    {"platform": "hgx-h100", "nodes": 2, "network_backend": "congestion"},
    {"platform": "hgx-h100", "nodes": 2, "network_backend": "flow"},
    {"platform": "tpu-v3"},
], ids=["gpu-analytical", "gpu-congestion", "gpu-flow", "tpu"])
def test_every_number_of_a_real_report_is_declared(llm, run):
    report = astra_sim.simulate(workload=llm, **run).to_dict()
    assert undeclared(report) == []
    rows = metrics_table(report)
    assert any(key == "summary.max_finish_ns" and value == report["summary"]["max_finish_ns"]
               for key, _, value, _ in rows)


def test_the_examples_report_is_declared_too(monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    report = astra_sim.simulate(f"{EXAMPLE}/trace/dp", f"{EXAMPLE}/system.json", f"{EXAMPLE}/network.yml",
                                f"{EXAMPLE}/memory.json", measure_memory=True).to_dict()
    assert undeclared(report) == []


def test_an_undeclared_number_is_found():
    document = {"summary": {"max_finish_ns": 5}, "stats": {"my_plugin_flits": 3, "events": 2},
                "settings": {"not": 1}}
    assert undeclared(document) == ["stats.my_plugin_flits"]


def test_every_metric_has_a_known_unit_and_one_declaration():
    registry = metric_registry()
    assert all(m.unit in UNITS and m.description for m in registry.entries.values())
    plugins = {m.plugin for m in registry.entries.values()}
    assert {"builtin", "gpu_model", "compute_systolic", "network_congestion"} <= plugins
    fresh = MetricRegistry()
    fresh.metric("stats.x", "ns", "x")
    with pytest.raises(PluginError, match="declared by two plugins"):
        fresh.metric("stats.x", "ns", "again")
    with pytest.raises(PluginError, match="unit 'ms'"):
        fresh.metric("stats.y", "ms", "milliseconds are not a report unit")
