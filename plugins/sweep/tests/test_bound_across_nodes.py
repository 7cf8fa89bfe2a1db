"""The search's lower bound with collectives across nodes (astra_sweep.bound: the NCCL model's time of a
communicator group spanning nodes, the communicators' serial work, the all-gathers after the optimizer) against
simulation: on random small layouts over two hgx-h100 nodes it never exceeds the simulated step, with or without
virtual stages."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_sim.platforms import get_platform

from astra_sweep.bound import BoundCache, interleaved_bound_ns
from astra_sweep.search import _options
from astra_workload_generators.llm import LlmConfig

SOURCE = {"preset": "llama2-7b", "seq-len": 256}
GPUS = 16


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path / "bounds"))


_CACHES = []


def _cache():
    """One in-memory cache for the module, as one search holds one (CI margin): a shared layout's terms (one and two
    micro-batches, whole stages) are computed once, whichever drawn layout asks first; the bound read from them is
    the one a fresh cache computes."""
    if not _CACHES:
        _CACHES.append(BoundCache.for_platform(SOURCE, get_platform("hgx-h100"), GPUS, disk=False))
    return _CACHES[0]


#: layouts of Llama-2 7B (32 layers) on 16 GPUs (two nodes): TP x PP x DP = 16, data-parallel and pipeline groups
#: across the nodes
LAYOUTS = st.builds(
    lambda tp, pp, vp, mbs, periods, zero, recompute: LlmConfig(
        tp=tp, pp=pp, dp=GPUS // (tp * pp), micro_batches=periods * pp, micro_batch_size=mbs,
        virtual_stages=vp if pp > 1 else 1, zero=zero, sequence_parallel=tp > 1, recompute=recompute),
    st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2]),
    st.sampled_from([1, 2]), st.sampled_from([0, 1]), st.booleans())


def test_collectives_across_nodes_count():
    """DP 8 over two nodes (TP 2): the data-parallel reduce-scatters and all-gathers get the NCCL model's time
    across nodes, so the bound rises above the one that counts only groups inside a node."""
    cfg = LlmConfig(tp=2, pp=1, dp=8, micro_batches=2, micro_batch_size=1, zero=1, sequence_parallel=True)
    across = _cache().terms(cfg)
    inside = BoundCache(SOURCE, "h100-sxm", 8, disk=False).terms(cfg)
    assert across.bound_ns(2) > inside.bound_ns(2) > 0
    assert min(across.post_ns.values()) > min(inside.post_ns.values())


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.filter_too_much])
@given(LAYOUTS)
def test_bound_is_at_most_the_simulated_step_across_nodes(tmp_path_factory, simulated_step, cfg):
    cache = _cache()
    step = simulated_step(SOURCE, cfg, tmp_path_factory.mktemp("w"))
    assert cache.terms(cfg).bound_ns(cfg.micro_batches, cfg.virtual_stages) <= step, _options(cfg)
    if cfg.virtual_stages > 1 and cfg.zero != 3:
        bound = interleaved_bound_ns(cfg, cache.virtual_stage_terms(cfg), cfg.micro_batches)
        assert bound is not None and bound <= step, _options(cfg)
