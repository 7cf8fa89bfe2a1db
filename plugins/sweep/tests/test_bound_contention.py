"""The search's bound counts the slowdowns the run's measured contention model makes in every run
(astra_sweep.bound.beside_collectives): by hand on small graphs, and against simulation on random layouts as the
search runs them (hgx-h100: NCCL collectives, measured contention, the host's launches)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_gpu_model.contention import measured_slowdown
from astra_sim.platforms import get_platform

from astra_sweep.bound import (
    BoundCache, Contention, beside_collectives, interleaved_bound_ns, least_piecewise_ns,
)
from astra_sweep.search import _options
from astra_workload_generators.llm import LlmConfig

SOURCE = {"preset": "llama2-7b", "seq-len": 256}
RUN = Contention(comm_sms=32, sm_count=132, host_launch_ns=26_200)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path / "bounds"))


def _graph(c_cost=100_000, c_id=1, g_deps=(0,), c_deps=(0,), margin=False, comm_sms=None, chained=True):
    """P (0) -> G (2, a GEMM), and a collective C (id ``c_id``) that depends on P; then a later GEMM (3) after G."""
    graph = [(0, 1_000_000, True, (), None), (c_id, c_cost, False, tuple(c_deps), ("coll", "1")),
             (2, 2_000_000, True, tuple(g_deps), None), (3, 500_000, True, (2,) if chained else (), None)]
    info = {0: ("aten::mm", None, False), c_id: ("tp_ag.x", comm_sms, False), 2: ("aten::mm", None, margin),
            3: ("aten::add_", None, False)}
    return sorted(graph), info


def test_beside_collectives_by_hand():
    """The GEMM issued with a collective that depends on the same compute node alone gets its least slowed cost
    (32 of 132 SMs taken) for the time the collective surely runs beside it, its whole-GPU cost after; nothing else
    does, and nothing when a condition of the proof is missing."""
    f = measured_slowdown("compute", 32 / 132)
    assert f > 1.4
    graph, info = _graph()  # C (id 1) launched one interval before G: beside it for 100 - 26.2 us at least
    overlap = 100_000 - 26_200
    least = least_piecewise_ns(2_000_000, f, overlap)
    assert beside_collectives(graph, info, RUN) == {2: least}
    slowed = 2_000_000 * f - 0.5
    assert least == math.floor(overlap + (1 - overlap / slowed) * 2_000_000) - 1
    graph, info = _graph(c_id=4)  # issued after the GEMM: beside it for its whole NCCL time
    assert beside_collectives(graph, info, RUN) == {2: least_piecewise_ns(2_000_000, f, 100_000)}
    graph, info = _graph(c_id=4, c_cost=10_000_000)  # longer than the slowed GEMM: the slowed GEMM
    assert beside_collectives(graph, info, RUN) == {2: math.floor(2_000_000 * f - 0.5) - 1}
    for kw in (dict(c_cost=26_200), dict(g_deps=(0, 1)), dict(c_deps=(0, 3)), dict(margin=True), dict(comm_sms=0),
               dict(chained=False), dict(c_cost=0)):
        graph, info = _graph(**kw)
        assert beside_collectives(graph, info, RUN) == {}, kw
    graph, info = _graph(c_cost=26_201)  # one id apart: longer than one launch interval is enough
    assert beside_collectives(graph, info, RUN) == {2: least_piecewise_ns(2_000_000, f, 1)}
    assert beside_collectives(graph, info, None) == {}
    graph, info = _graph()
    info[2] = ("aten::native_layer_norm", None, False)  # a memory-bound kernel: the memory factor
    assert beside_collectives(graph, info, RUN) == {
        2: least_piecewise_ns(2_000_000, measured_slowdown("memory", 32 / 132), overlap)}


def test_another_collective_of_the_communicator_may_hold_the_slot():
    """A collective of C's communicator that nothing orders before P may still run when P ends: C then waits, and
    the GEMM is slowed only until that one's end (unknown here): no raise. Ordered before P (used by P), or after
    G (waiting for it), it cannot."""
    graph, info = _graph(c_id=4)
    graph.append((5, 100_000, False, (), ("coll", "1")))  # free-standing, same communicator
    info[5] = ("tp_rs.y", None, False)
    assert beside_collectives(sorted(graph), info, RUN) == {}
    graph[-1] = (5, 100_000, False, (3,), ("coll", "1"))  # waits for the GEMM after G
    assert set(beside_collectives(sorted(graph), info, RUN)) == {2}
    graph[-1] = (5, 100_000, False, (), ("coll", "2"))  # another communicator: its own slot
    assert set(beside_collectives(sorted(graph), info, RUN)) == {2}
    early = [(0, 1_000_000, True, (6,), None), (4, 100_000, False, (0,), ("coll", "1")),
             (2, 2_000_000, True, (0,), None), (3, 500_000, True, (2,), None), (6, 50_000, False, (), ("coll", "1"))]
    info = {0: ("aten::mm", None, False), 4: ("ag", None, False), 2: ("aten::mm", None, False),
            3: ("aten::add_", None, False), 6: ("ag0", None, False)}
    assert beside_collectives(sorted(early), info, RUN) == {}  # ids out of order: no claim at all
    early = [(1, 50_000, False, (), ("coll", "1")), (2, 1_000_000, True, (1,), None),
             (4, 100_000, False, (2,), ("coll", "1")), (5, 2_000_000, True, (2,), None)]
    info = {1: ("ag0", None, False), 2: ("aten::mm", None, False), 4: ("ag", None, False), 5: ("aten::mm", None, False)}
    assert set(beside_collectives(early, info, RUN)) == {5}  # the earlier one is used by P: over before P began


_CACHES = []


def _cache():
    """One in-memory cache for the module, as one search holds one (CI margin): a shared layout's terms (one and two
    micro-batches, whole stages) are computed once, whichever drawn layout asks first; the bound read from them is
    the one a fresh cache computes."""
    if not _CACHES:
        _CACHES.append(BoundCache.for_platform(SOURCE, get_platform("hgx-h100"), 8, disk=False))
    return _CACHES[0]


def test_the_platform_contention_raises_the_bound():
    """hgx-h100 implies the measured contention model and host launches: with sequence parallelism the re-gathers
    of the backward run beside its data-gradient GEMMs, so the bound rises above the one without contention."""
    cache = _cache()
    assert cache.contention == Contention(32, 132, 26_200)
    cfg = LlmConfig(tp=2, pp=2, dp=2, micro_batches=4, micro_batch_size=1, zero=1, sequence_parallel=True)
    plain = BoundCache(SOURCE, cache.gpu, 8, disk=False).terms(cfg)
    assert cache.terms(cfg).bound_ns(4) > plain.bound_ns(4)
    assert BoundCache(SOURCE, cache.gpu, 8, disk=False, contention=None).contention is None


#: the search's layouts of Llama-2 7B (32 layers) on one hgx-h100 node: TP x PP x DP = 8
LAYOUTS = st.builds(
    lambda tp, pp, vp, mbs, periods, zero, recompute: LlmConfig(
        tp=tp, pp=pp, dp=8 // (tp * pp), micro_batches=periods * pp, micro_batch_size=mbs,
        virtual_stages=vp if pp > 1 else 1, zero=zero, sequence_parallel=tp > 1, recompute=recompute),
    st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
    st.sampled_from([1, 3]), st.sampled_from([0, 1]), st.booleans())


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.filter_too_much])
@given(LAYOUTS)
def test_bound_with_contention_is_at_most_the_simulated_step(tmp_path_factory, simulated_step, cfg):
    cache = _cache()
    step = simulated_step(SOURCE, cfg, tmp_path_factory.mktemp("w"))
    assert cache.terms(cfg).bound_ns(cfg.micro_batches, cfg.virtual_stages) <= step, _options(cfg)
    if cfg.virtual_stages > 1 and cfg.zero != 3:
        bound = interleaved_bound_ns(cfg, cache.virtual_stage_terms(cfg), cfg.micro_batches)
        assert bound is not None and bound <= step, _options(cfg)
