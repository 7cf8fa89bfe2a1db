"""The search's lower bound on a rack platform whose GPUs run above their preset's TDP (gb200-nvl72's 1,200 W
trays): its GEMMs take the run's sustained clock at that board power. At the preset's 1,000 W they were slower than
the run's, and the bound of this layout (144.2 ms) exceeded its simulated step (137.8 ms), so a search could skip
the layout that wins."""

from __future__ import annotations

from astra_sim.platforms import get_platform

from astra_sweep.bound import BoundCache
from astra_workload_generators.llm import LlmConfig

SOURCE = {"preset": "llama2-7b", "seq-len": 1024}


def test_the_bound_takes_the_platforms_board_power():
    cache = BoundCache.for_platform(SOURCE, get_platform("gb200-nvl72"), 72, disk=False)
    assert cache.board_power_w == 1200.0
    assert cache.model.describe()["sustained_gemm"]["board_power_w"] == 1200.0
    assert BoundCache.for_platform(SOURCE, get_platform("hgx-h100"), 8, disk=False).board_power_w is None


def test_the_bound_is_at_most_the_step_on_gb200(tmp_path, simulated_step_on):
    cfg = LlmConfig(tp=2, pp=2, dp=18, micro_batches=4, micro_batch_size=2, sequence_parallel=True)
    cache = BoundCache.for_platform(SOURCE, get_platform("gb200-nvl72"), 72, disk=False)
    step = simulated_step_on("gb200-nvl72", SOURCE, cfg, tmp_path)
    assert cache.terms(cfg).bound_ns(cfg.micro_batches, cfg.virtual_stages) <= step
