"""``--no-gpu-utilization`` (issue 37): the report leaves out ``stats.gpu_utilization`` (astra serve's steps, which
read only their time and energy) and is otherwise the same run."""

from __future__ import annotations

from astra_sim.runner import run_spec
from astra_sim.spec import RunSpec
from astra_workload_generators.llm import LlmSpec, generate_llm_workload


def test_the_utilization_is_left_out_and_nothing_else_changes(tmp_path):
    prefix = str(tmp_path / "step")
    spec = LlmSpec.from_mapping({"preset": "llama3-8b", "layers": 2, "tp": 2, "mode": "decode", "batch_size": 4,
                                 "prompt_len": 255, "decode_len": 1, "platform": "hgx-h100"})
    generate_llm_workload(spec, prefix)
    run = RunSpec.from_mapping({"workload": prefix, "platform": "hgx-h100", "nodes": 1})
    full = run_spec(run)
    lean = run_spec(run.replace(no_gpu_utilization=True))
    assert "gpu_utilization" in full.stats and "gpu_utilization" not in lean.stats
    assert lean.max_finish_ns == full.max_finish_ns
    assert [r.finish_ns for r in lean.ranks] == [r.finish_ns for r in full.ranks]
    assert lean.stats["energy"] == full.stats["energy"]
    timing = ("run_s", "analysis_s", "build_s", "events_per_s")  # (this process's seconds)
    assert ({k: v for k, v in full.stats.items() if k not in timing + ("gpu_utilization",)}
            == {k: v for k, v in lean.stats.items() if k not in timing})
