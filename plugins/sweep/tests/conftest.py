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
