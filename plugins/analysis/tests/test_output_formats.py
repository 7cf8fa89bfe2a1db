"""The output-format role (astra_sim.outputs): the flags live in this plugin, the run options reach the formats,
keywords without a format that reads them are an error, and the hooks.md example works as documented."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from astra_sim import simulate
from astra_sim.errors import ConfigError
from astra_sim.outputs import output_formats, output_registry
from astra_sim.plugins import make_plugin_manager
from astra_sim.simulation import Simulation
from astra_sim.spec import RunSpec


HOOKS_MD = Path(__file__).resolve().parents[3] / "docs" / "plugins" / "hooks.md"


def test_the_plugin_registers_its_formats_and_flags():
    assert set(output_formats()) >= {"timeline", "critical_path", "astra_sim_log"}
    spec = RunSpec.from_mapping({"workload": "w", "timeline": "t.json", "critical-path": True})
    assert spec.options["timeline"] == "t.json" and spec.options["critical_path"] is True
    assert not hasattr(spec, "timeline")


def test_keywords_without_the_plugin_are_an_error(tmp_path, gemm_then_all_reduce):
    args = gemm_then_all_reduce
    with pytest.raises(ConfigError, match="timeline"):
        Simulation(*args, block=("analysis",), timeline=str(tmp_path / "t.json"))
    # without any output the run does not need the plugin (it then has no breakdown either: the plugin computes it)
    report = Simulation(*args, block=("analysis",), breakdown=False).run()
    assert report.timeline is None and report.critical_path is None and report.astra_sim_log is None


def test_options_and_keywords_ask_for_the_same_outputs(gemm_then_all_reduce):
    args = gemm_then_all_reduce
    by_keyword = simulate(*args, critical_path=True, breakdown=False)
    by_option = simulate(*args, options={"critical_path": True}, breakdown=False)
    assert by_keyword.critical_path == by_option.critical_path and by_keyword.critical_path["items"]
    assert by_keyword.breakdown is None  # spans were recorded for the critical path only


def _hooks_md_example():
    text = HOOKS_MD.read_text(encoding="utf-8")
    section = re.split(r"^### `astra_register_output_formats\(registry\)`$", text, flags=re.M)[1]
    section = re.split(r"^### `", section, flags=re.M)[0]
    block = re.findall(r"^```python\n(.*?)^```", section, flags=re.M | re.S)[0]
    module = types.ModuleType("hooks_md_output_format")
    exec(compile(block, "hooks.md (astra_register_output_formats)", "exec"), module.__dict__)
    return module


def test_the_documented_example_writes_its_file(tmp_path, gemm_then_all_reduce):
    pm = make_plugin_manager(select=["network_analytical"], extra_plugins=[_hooks_md_example()])
    assert "finish_times" in output_registry(pm).names()
    out = tmp_path / "out" / "finish.csv"
    report = simulate(*gemm_then_all_reduce, plugin_manager=pm, options={"finish_times_csv": str(out)})
    rows = out.read_text().splitlines()
    assert rows[0] == "rank,finish_ns" and len(rows) == 5
    assert [int(r.split(",")[1]) for r in rows[1:]] == [report.ranks[int(r.split(",")[0])].finish_ns
                                                        for r in rows[1:]]
    assert report.settings["finish_times_csv"] == str(out)
