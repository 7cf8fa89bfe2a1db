"""The GPU's gap between the kernels of a step replayed as a CUDA graph (steptime.GRAPH_NODE_GAP_NS), by hand."""

from __future__ import annotations

from astra_serving.steptime import GRAPH_NODE_GAP_NS, Layout, StepTimer, graph_gaps


def test_the_gap_is_the_published_gap_over_the_published_nodes():
    # sglang-omni #760: an inter-kernel gap of 0.40 ms over 1065 graph nodes a step
    assert GRAPH_NODE_GAP_NS == round(0.40e6 / 1065) == 376


def test_one_stage_pays_the_gap_for_every_kernel_of_its_busiest_rank():
    # a Llama-3 70B TP 4 decode step: 80 layers x 14 kernels (12 compute, 2 all-reduces) + the LM head = 1121
    report = {"summary": {"max_finish_ns": 19_053_158},
              "ranks": [{"finish_ns": 19_053_158, "nodes": 1121}, {"finish_ns": 19_000_000, "nodes": 1120}]}
    assert graph_gaps(report, 1) == (1121 * 376,) == (421_496,)
    assert graph_gaps(report, 1, gap_ns=1000) == (1_121_000,)


def test_each_pipeline_stage_pays_for_its_own_kernels():
    # ranks sorted by finish time: the two that finish first are stage 0 (its 41 layers), the others stage 1
    report = {"summary": {"max_finish_ns": 300},
              "ranks": [{"finish_ns": 300, "nodes": 560}, {"finish_ns": 120, "nodes": 575},
                        {"finish_ns": 118, "nodes": 574}, {"finish_ns": 299, "nodes": 561}]}
    assert graph_gaps(report, 2, gap_ns=10) == (5750, 5610)
    # three ranks do not split into two stages: the busiest rank's kernels, split equally
    odd = {"summary": {"max_finish_ns": 300}, "ranks": report["ranks"][:3]}
    assert graph_gaps(odd, 2, gap_ns=10) == (2875, 2875)
    assert graph_gaps({"summary": {"max_finish_ns": 0}, "ranks": []}, 2) == (0, 0)


def test_a_simulated_graph_step_is_the_plain_run_plus_the_gap_and_an_eager_step_has_none(tmp_path):
    from astra_sim.runner import run_spec
    from astra_workload_generators.llm.spec import generate_llm_workload

    from astra_serving.steptime import _pm, shape_options

    layout = Layout(model={"model": "llama3-8b", "layers": 2, "inference_elementwise": True}, platform="hgx-h100")
    timer = StepTimer(layout, exact=True, cache=False, workdir=str(tmp_path))
    prefix = str(tmp_path / "step")
    generate_llm_workload(layout.llm_spec(**shape_options(0, 8, 256)), prefix)
    plain = run_spec(layout.run_spec(prefix, graph=True), _pm())
    kernels = max(r.nodes for r in plain.ranks)
    assert kernels == 2 * 12 + 1  # 2 layers of 12 compute kernels (TP 1: no all-reduce) and the LM head
    assert timer.simulate(0, 8, 256, graph=True) == (plain.max_finish_ns + kernels * GRAPH_NODE_GAP_NS,)
    eager = run_spec(layout.run_spec(prefix, graph=False), _pm())
    assert timer.simulate(0, 8, 256, graph=False) == (eager.max_finish_ns,)
