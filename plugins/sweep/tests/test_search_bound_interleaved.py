"""The interleaved pipeline's lower bound (astra_sweep.bound.interleaved_bound_ns) against simulation: on random
small interleaved layouts it never exceeds the simulated step (hgx-h100, NCCL collectives, as the search runs
them); the search takes the larger of it and the busiest rank's chain (test_search_bound.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_sweep.bound import BoundCache, interleaved_bound_ns
from astra_sweep.search import _options
from astra_workload_generators.llm import LlmConfig

SOURCE = {"preset": "llama2-7b", "seq-len": 256}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path / "bounds"))


#: interleaved layouts of Llama-2 7B (32 layers) on 8 GPUs: TP x PP x DP = 8, PP x VP dividing the layers
LAYOUTS = st.builds(
    lambda tp, pp, vp, mbs, periods, zero, recompute: LlmConfig(
        tp=tp, pp=pp, dp=8 // (tp * pp), micro_batches=periods * pp, micro_batch_size=mbs, virtual_stages=vp,
        zero=zero, sequence_parallel=tp > 1, recompute=recompute),
    st.sampled_from([1, 2]), st.sampled_from([2, 4]), st.sampled_from([2, 4]), st.sampled_from([1, 2]),
    st.sampled_from([1, 2]), st.sampled_from([0, 1]), st.booleans())


def _step(cfg, folder):
    from astra_sim import simulate

    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    prefix = str(folder / "w")
    generate_llm_workload(LlmSpec.from_mapping({**SOURCE, **_options(cfg)}, "workload.llm"), prefix,
                          on_warning=lambda _: None)
    return simulate(workload=prefix, platform="hgx-h100", platform_collective="nccl",
                    comm_groups=f"{prefix}.groups.json", breakdown=False).max_finish_ns


_CACHES = []


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(LAYOUTS)
def test_interleaved_bound_is_at_most_the_simulated_step(tmp_path_factory, cfg):
    if not _CACHES:  # one in-memory cache for the test, as one search holds one (CI margin): the same terms
        _CACHES.append(BoundCache(SOURCE, "h100-sxm", 8, disk=False))
    cache = _CACHES[0]
    bound = interleaved_bound_ns(cfg, cache.virtual_stage_terms(cfg), cfg.micro_batches)
    assert bound is not None and bound <= _step(cfg, tmp_path_factory.mktemp("w")), _options(cfg)
