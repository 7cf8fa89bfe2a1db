"""The GPU's gap between the kernels of a step replayed as a CUDA graph (``--gpu-kernel-gap-ns``, which astra serve's
graph steps set to astra_gpu_model.model.GRAPH_KERNEL_GAP_NS), by hand: the same step through astra run and serve."""

from __future__ import annotations

from astra_gpu_model.model import GRAPH_KERNEL_GAP_NS
from astra_serving.steptime import Layout, StepTimer


def test_the_gap_is_the_published_gap_over_the_published_nodes():
    # sglang-omni #760: an inter-kernel gap of 0.40 ms over 1065 graph nodes a step
    assert GRAPH_KERNEL_GAP_NS == round(0.40e6 / 1065) == 376


def test_a_graph_step_pays_the_gap_before_each_compute_kernel_and_an_eager_step_has_none(tmp_path):
    from astra_sim.runner import run_spec
    from astra_workload_generators.llm.spec import generate_llm_workload

    from astra_serving.steptime import _pm, shape_options

    layout = Layout(model={"model": "llama3-8b", "layers": 2, "inference_elementwise": True}, platform="hgx-h100")
    timer = StepTimer(layout, exact=True, cache=False, workdir=str(tmp_path))
    prefix = str(tmp_path / "step")
    generate_llm_workload(layout.llm_spec(**shape_options(0, 8, 256)), prefix)
    graph = layout.run_spec(prefix, graph=True)
    assert graph.options["host_launch_us"] == 0.0 and graph.options["gpu_kernel_gap_ns"] == GRAPH_KERNEL_GAP_NS
    gapped = run_spec(graph, _pm())
    plain = run_spec(graph.replace(gpu_kernel_gap_ns=0), _pm())
    kernels = max(r.nodes for r in plain.ranks)
    # 2 layers of 13 compute kernels (12, and vLLM's rotary embedding of q and k; TP 1: no all-reduce), the final norm
    # and the LM head
    assert kernels == 2 * 13 + 2
    # one GPU stream, the kernels back to back: each starts GRAPH_KERNEL_GAP_NS after the one before it ends
    assert gapped.max_finish_ns == plain.max_finish_ns + kernels * GRAPH_KERNEL_GAP_NS
    assert timer.simulate(0, 8, 256, graph=True) == (gapped.max_finish_ns,)
    eager_spec = layout.run_spec(prefix, graph=False)
    assert not eager_spec.options.get("gpu_kernel_gap_ns")
    eager = run_spec(eager_spec, _pm())
    assert timer.simulate(0, 8, 256, graph=False) == (eager.max_finish_ns,)
