"""The report's breakdown is this plugin's (the hook ``astra_report_breakdown``): loaded whenever installed, even when
``-p`` names other plugins; blocked (``-p no:analysis``) the run records no spans, the report has no breakdown and a
warning says why; another plugin's implementation that returns True takes its place."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest

from astra_sim import hookimpl
from astra_sim.cli import main
from astra_sim.errors import PluginError
from astra_sim.plugins import make_plugin_manager
from astra_sim.run.report import NO_BREAKDOWN
from astra_sim.simulation import simulate

HOOKS_MD = Path(__file__).resolve().parents[3] / "docs" / "plugins" / "hooks.md"


def test_selecting_other_plugins_keeps_the_breakdown(gemm_then_all_reduce):
    report = simulate(*gemm_then_all_reduce, plugins=["network_analytical"])
    assert "analysis" in report.settings["plugins"]
    for rank in report.ranks:
        assert sum(rank.breakdown["parts"].values()) == rank.finish_ns
        assert rank.breakdown["parts"]["compute:gemm"] == (2 + rank.rank) * 1000
    assert report.breakdown["slowest_rank"] == max(report.ranks, key=lambda r: (r.finish_ns, -r.rank)).rank
    assert NO_BREAKDOWN not in report.warnings


def test_blocked_the_report_has_no_breakdown_and_says_why(gemm_then_all_reduce):
    args = gemm_then_all_reduce
    report = simulate(*args, block=("analysis",))
    assert report.breakdown is None and all(r.breakdown is None for r in report.ranks)
    assert report.warnings == [NO_BREAKDOWN]
    assert "-p no:analysis" in NO_BREAKDOWN
    # the same numbers otherwise; nothing to say when no breakdown was asked for
    full = simulate(*args)
    assert [r.finish_ns for r in report.ranks] == [r.finish_ns for r in full.ranks]
    assert simulate(*args, block=("analysis",), breakdown=False).warnings == []


def test_cli_with_the_plugin_blocked(capsys, gemm_then_all_reduce):
    workload, system, network = gemm_then_all_reduce
    argv = ["run", "--workload-configuration", workload, "--system-configuration", system,
            "--network-configuration", network, "--json"]
    assert main(["-p", "no:analysis", *argv]) == 0
    printed = capsys.readouterr()
    data = json.loads(printed.out)
    assert "breakdown" not in data and all("breakdown" not in r for r in data.get("ranks", data.get("rank_classes")))
    assert data["warnings"] == [NO_BREAKDOWN] and NO_BREAKDOWN in printed.err
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["breakdown"]["parts"] and data["warnings"] == []


def _hooks_md_example():
    text = HOOKS_MD.read_text(encoding="utf-8")
    section = re.split(r"^### `astra_report_breakdown\(run, report\)`$", text, flags=re.M)[1]
    section = re.split(r"^### `", section, flags=re.M)[0]
    block = re.findall(r"^```python\n(.*?)^```", section, flags=re.M | re.S)[0]
    module = types.ModuleType("hooks_md_breakdown")
    exec(compile(block, "hooks.md (astra_report_breakdown)", "exec"), module.__dict__)
    return module


def test_another_plugin_can_take_the_breakdown_over(gemm_then_all_reduce):
    """The hooks.md example: with its option, its coarse parts replace this plugin's; without, it leaves it."""
    args = gemm_then_all_reduce
    pm = make_plugin_manager(extra_plugins=[_hooks_md_example()])
    coarse = simulate(*args, plugin_manager=pm, options={"coarse_breakdown": True})
    assert coarse.breakdown is None
    assert [r.breakdown["parts"] for r in coarse.ranks] == [
        {"compute": r.compute_ns, "other": r.finish_ns - r.compute_ns} for r in coarse.ranks]
    fine = simulate(*args, plugin_manager=pm)
    assert fine.ranks[1].breakdown["parts"]["compute:gemm"] == 3000 and fine.breakdown is not None


def _spans_probe():
    """A plugin that keeps what ``run.spans`` was at the end of each run (None: nothing was recorded)."""
    module = types.ModuleType("spans_probe")
    module.seen = []
    module.astra_run_finish = hookimpl(lambda run, report: module.seen.append(run.spans))
    return module


def test_spans_are_recorded_only_when_a_plugin_asks(gemm_then_all_reduce):
    """The analysis plugin asks for the spans when the run wants a breakdown; blocked, or with no breakdown and no
    output that reads spans, the run records none (and the report says there is no breakdown)."""
    args = gemm_then_all_reduce
    probe = _spans_probe()
    simulate(*args, extra_plugins=[probe])
    assert {rank: len(spans) // 3 for rank, spans in probe.seen[-1].spans.items()} == {r: 2 for r in range(4)}
    report = simulate(*args, extra_plugins=[probe], block=("analysis",))
    assert probe.seen[-1] is None
    assert report.breakdown is None and report.warnings == [NO_BREAKDOWN]
    simulate(*args, extra_plugins=[probe], breakdown=False)
    assert probe.seen[-1] is None
    simulate(*args, extra_plugins=[probe], breakdown=False, critical_path=True)  # an output that reads spans asks
    assert probe.seen[-1] is not None


def test_spans_asked_for_after_the_first_event_are_an_error(gemm_then_all_reduce):
    """Spans asked for once the run has started would miss its first nodes: a PluginError, not a partial record."""
    module = types.ModuleType("late_spans")
    module.astra_run_finish = hookimpl(lambda run, report: run.record_spans())
    with pytest.raises(PluginError, match="after the first event"):
        simulate(*gemm_then_all_reduce, extra_plugins=[module], breakdown=False)
    # in the middle of the loop too (a node observer asking when the first node ends)
    mid = types.ModuleType("mid_spans")
    mid.astra_run_start = hookimpl(lambda run: run.add_node_observer(lambda *_: run.record_spans()))
    with pytest.raises(PluginError, match="after the first event"):
        simulate(*gemm_then_all_reduce, extra_plugins=[mid], breakdown=False)
