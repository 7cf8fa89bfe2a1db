"""A layout's steps share one resolution of their run (Layout.resolved, issue 37): the same resolved run and the
same step times as resolving each step, and a new resolution when what a resolution reads changes (the run's
options, the workload's rank count)."""

from __future__ import annotations

import dataclasses

from astra_sim.runner import run_spec
from astra_workload_generators.llm.spec import generate_llm_workload

from astra_serving.steptime import Layout, StepTimer, _pm, shape_options

MODEL = {"model": "llama3-8b", "layers": 2, "inference_elementwise": True}


def _step(layout, folder, name, prefill, decode, context):
    prefix = str(folder / name)
    generate_llm_workload(layout.llm_spec(**shape_options(prefill, decode, context)), prefix)
    return prefix


def test_a_shared_resolution_equals_a_fresh_one_and_gives_the_same_step(tmp_path):
    layout = Layout(model=MODEL, platform="hgx-h100")
    first = layout.run_spec(_step(layout, tmp_path, "a", 0, 8, 256))
    second = layout.run_spec(_step(layout, tmp_path, "b", 64, 4, 512))
    layout.resolved(first, _pm())
    shared = layout.resolved(second, _pm())
    assert len(layout._resolved) == 1  # the second step reused the first's
    assert shared == second.resolve(_pm()) and shared.spec is second
    assert shared.options is not layout._resolved[0][1].options  # each step its own options
    again = run_spec(second, _pm(), resolved=shared)
    fresh = run_spec(second, _pm())
    assert again.max_finish_ns == fresh.max_finish_ns
    assert again.stats["energy"] == fresh.stats["energy"]
    assert [r.finish_ns for r in again.ranks] == [r.finish_ns for r in fresh.ranks]


def test_a_changed_option_or_rank_count_resolves_again(tmp_path):
    layout = Layout(model=MODEL, platform="hgx-h100")
    prefix = _step(layout, tmp_path, "a", 0, 8, 256)
    eager, graph = layout.run_spec(prefix), layout.run_spec(prefix, graph=True)
    assert layout.resolved(eager, _pm()).options["host_launch_us"] != 0.0
    assert layout.resolved(graph, _pm()).options["host_launch_us"] == 0.0
    assert len(layout._resolved) == 2
    # the same run options, a workload of 4 ranks instead of 8: its own resolution (one partial node of 4 GPUs)
    half = Layout(model=MODEL, platform="hgx-h100", gpus_per_node=4)
    other = layout.run_spec(_step(half, tmp_path, "dp4", 0, 8, 256))
    resolved = layout.resolved(other, _pm())
    assert len(layout._resolved) == 3
    assert dataclasses.replace(resolved, spec=other) == other.resolve(_pm())
    assert resolved.devices_per_node == 4 != layout.resolved(eager, _pm()).devices_per_node


def test_the_step_timer_gives_the_same_times_with_the_shared_resolution(tmp_path):
    layout = Layout(model=MODEL, platform="hgx-h100")
    timer = StepTimer(layout, exact=True, cache=False, workdir=str(tmp_path))
    for shape in ((0, 8, 256), (64, 0, 0), (32, 4, 300)):
        prefix = _step(layout, tmp_path, "s", *shape)
        fresh = run_spec(layout.run_spec(prefix), _pm())
        assert timer.simulate(*shape) == (fresh.max_finish_ns,)
    assert len(layout._resolved) == 1
