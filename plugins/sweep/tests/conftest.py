import os
import shutil

import pytest


@pytest.fixture
def astra_exe():
    """The astra command of this environment (for subprocess tests)."""
    import sys

    path = os.path.join(os.path.dirname(sys.executable), "astra")
    return path if os.path.exists(path) else shutil.which("astra")


SMALL_SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 4, hidden: 512, heads: 8, kv-heads: 8, ffn-hidden: 2048, seq-len: 256, tp: 2, pp: 2, dp: 2, micro-batches: 2}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {run.platform-collective: [ring, nccl], workload.llm.tp: [2, 4], workload.llm.micro-batches: [2, 4, 8]}
"""


@pytest.fixture
def small_spec(tmp_path):
    """A 12-point sweep of small GPT layouts (each point well under a second)."""
    path = tmp_path / "spec.yaml"
    path.write_text(SMALL_SPEC)
    return str(path)


@pytest.fixture
def simulated_step_on():
    """The bound tests' reference: ``step(platform, source, cfg, folder)``, a layout's simulated step as the search
    runs it (NCCL); a layout that does not fit the GPU's memory is not drawn (hypothesis ``assume``)."""

    def step(platform, source, cfg, folder):
        from hypothesis import assume

        from astra_sim import simulate
        from astra_sim.errors import InfeasibleError
        from astra_sweep.search import _options
        from astra_workload_generators.llm import LlmSpec, generate_llm_workload

        prefix = str(folder / "w")
        generate_llm_workload(LlmSpec.from_mapping({**source, **_options(cfg)}, "workload.llm"), prefix,
                              on_warning=lambda _: None)
        try:
            return simulate(workload=prefix, platform=platform, platform_collective="nccl",
                            comm_groups=f"{prefix}.groups.json", breakdown=False).max_finish_ns
        except InfeasibleError:
            assume(False)

    return step


@pytest.fixture
def simulated_step(simulated_step_on):
    """:func:`simulated_step_on` on hgx-h100: ``step(source, cfg, folder)``."""
    return lambda source, cfg, folder: simulated_step_on("hgx-h100", source, cfg, folder)
