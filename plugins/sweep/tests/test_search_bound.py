"""The search's lower bound (astra_sweep.bound) and its branch and bound: the terms extrapolate exactly to any
micro-batch count and virtual-stage count, the bound never exceeds the simulated step, and the pruned search
answers what the exhaustive one does."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_sim.cli import main

from astra_sweep.bound import BoundCache
from astra_sweep.search import _options
from astra_workload_generators.llm import LlmConfig

SOURCE = {"preset": "llama2-7b", "seq-len": 256}
#: a small search (8 H100s): exhaustive simulation of its 8 layouts takes ~30 s on 2 busy cores
SEARCH = ["search", "--preset", "llama2-7b", "--seq-len", "256", "--gpus", "8", "--platform", "hgx-h100",
          "--global-batch", "16", "--tp", "2,4,8", "--pp", "1,2", "--vp", "1,2", "--mbs", "1,2", "--zero", "1",
          "--recompute", "none", "--jobs", "2", "--no-progress", "--json"]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test its own disk cache (the default is the user's ~/.cache)."""
    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path / "bounds"))


def _cfg(**kw):
    base = dict(tp=2, pp=2, dp=2, micro_batches=4, micro_batch_size=1, virtual_stages=1, zero=1,
                sequence_parallel=True)
    return LlmConfig(**{**base, **kw})


def _direct(cache, cfg):
    """The bound from generating the layout itself (its own micro-batches and virtual stages)."""
    ranks = cache._compute(_options(cfg), cfg.micro_batches)
    edged = cfg.virtual_stages == 1
    return max(max(compute, longest, compute + edge if edged else 0, serial if edged else 0)
               for compute, longest, edge, _fill, _drain, serial, _post, _gap in ranks.values())


@pytest.mark.parametrize("kw", [dict(), dict(micro_batches=6), dict(virtual_stages=2, micro_batches=4),
                                dict(tp=4, dp=1, micro_batch_size=2, recompute=True),
                                dict(tp=2, pp=4, dp=1, micro_batches=12), dict(micro_batches=1)])
def test_terms_extrapolate_to_the_layout(kw, tmp_path):
    """Two small generations (m = 2, 3, VP 1) give the layout's own bound: linear in m (the pipeline's edge
    too), the same for any VP (without the edge); m = 1 is its own. The first micro-batch's compute is cheaper
    (TE writes main_grad without reading it) except with --recompute."""
    cache = BoundCache(SOURCE, "h100-sxm", 8, disk=False)
    cfg = _cfg(**kw)
    terms = cache.terms(cfg)
    assert terms.bound_ns(cfg.micro_batches, cfg.virtual_stages) == _direct(cache, cfg)
    gaps = set(terms.first_gap_ns.values())
    assert gaps == {0} if kw.get("recompute") or cfg.micro_batches == 1 else min(gaps) > 0


def test_interleaved_bound_by_its_own_chunks():
    """PP 4 VP 2: the bound from the 8-stage layout's terms counts the interleaved fill and drain (above the
    busiest rank's chain) and stays at most the edge of the layout's own generation (:func:`pipeline_edges` over
    its true graph); a layout without virtual stages or with ZeRO-3 gets none. Against simulation:
    test_search_bound_interleaved.py."""
    from astra_sweep.bound import interleaved_bound_ns

    cache = BoundCache(SOURCE, "h100-sxm", 8, disk=False)
    cfg = _cfg(tp=2, pp=4, dp=1, virtual_stages=2, micro_batches=8)
    cheap = cache.terms(cfg).bound_ns(8, 2)
    bound = interleaved_bound_ns(cfg, cache.virtual_stage_terms(cfg), 8)
    direct = max(compute + edge for compute, _, edge, *_ in cache._compute(_options(cfg), 8).values())
    assert cheap < bound <= max(direct, cheap)
    assert cache.virtual_stage_terms(_cfg()) is None and cache.virtual_stage_terms(_cfg(virtual_stages=2, zero=3)) is None
    assert interleaved_bound_ns(_cfg(), cache.terms(_cfg()), 4) is None


def test_prefetch_on_workers_gives_the_terms_computed_here():
    """The bounds' generations run on the search's pool: the same terms as computed in this process, and each
    shared layout once."""
    from astra_sim.executors import LocalPool

    layouts = [_cfg(), _cfg(micro_batches=8, virtual_stages=2)]
    here = BoundCache(SOURCE, "h100-sxm", 8, disk=False)
    pooled = BoundCache(SOURCE, "h100-sxm", 8, disk=False)
    shared = [pooled.terms_layout(c) for c in layouts] + [pooled.virtual_stage_layout(layouts[1])]
    with LocalPool(2) as pool:
        assert pooled.prefetch(shared, pool) == 2  # the first two are one layout
    assert pooled.generated == 2 and pooled.prefetch(shared, None) == 0
    for cfg in layouts:
        assert pooled.terms(cfg) == here.terms(cfg)
    assert pooled.virtual_stage_terms(layouts[1]) == here.virtual_stage_terms(layouts[1])


def test_the_pipeline_edge_tightens_the_bound():
    """PP 4: the fill and drain count (the bound rises above the busiest rank's chain); PP 1 has no edge."""
    cache = BoundCache(SOURCE, "h100-sxm", 8, disk=False)
    piped = cache.terms(_cfg(tp=2, pp=4, dp=1, micro_batches=8))
    assert piped.bound_ns(8) > piped.bound_ns(8, 0) > 0
    flat = cache.terms(_cfg(tp=2, pp=1, dp=4, micro_batches=8))
    assert all(flat.pipeline_fixed_ns[r] + 8 * flat.pipeline_per_micro_batch_ns[r] <= flat.bound_ns(8, 0)
               for r in flat.fixed_ns)


def test_the_communicators_serial_work_tightens_the_bound():
    """PP 1, ZeRO-1 over DP 4: after the optimizer the rank still all-gathers every layer's parameters, one at a
    time on its data-parallel communicator (post_ns), so the bound rises above the busiest rank's chain; with
    virtual stages it is not counted."""
    cache = BoundCache(SOURCE, "h100-sxm", 8, disk=False)
    flat = cache.terms(_cfg(tp=2, pp=1, dp=4, micro_batches=8))
    assert flat.bound_ns(8) > flat.bound_ns(8, 0) > 0
    assert min(flat.post_ns.values()) > 0
    assert flat.bound_ns(8, 2) == flat.bound_ns(8, 0)


def _graph(*ranks):
    """{rank: [(id, cost, on the compute slot, deps, p2p)]} from (id, cost, deps, p2p) tuples; cost > 0 is
    compute."""
    return {r: [(i, c, c > 0, tuple(d), p) for i, c, d, p in nodes] for r, nodes in enumerate(ranks)}


def test_pipeline_edges_by_hand():
    """Two stages, one micro-batch: stage 1 waits for stage 0's forward (10) and stage 0 for stage 1's
    backward (7 + 5): each rank's edge is the other's work on the chain (a cycle gives none; an unmatched
    receive joins nothing)."""
    from astra_sweep.bound import pipeline_edges

    stage0 = [(0, 10, [], None), (1, 0, [0], ("send", 0, 1, 0)), (2, 0, [1], ("recv", 1, 0, 1)),
              (3, 20, [2], None)]
    stage1 = [(0, 0, [], ("recv", 0, 1, 0)), (1, 7, [0], None), (2, 5, [1], None), (3, 0, [2], ("send", 1, 0, 1))]
    assert pipeline_edges(_graph(stage0, stage1)) == {0: 12, 1: 30}
    cycle = [(0, 0, [1], None), (1, 3, [0], None)]
    assert pipeline_edges(_graph(cycle)) == {}
    lonely = [(0, 0, [], ("recv", 5, 0, 9)), (1, 4, [0], None)]
    assert pipeline_edges(_graph(lonely)) == {0: 0}


def test_fill_and_drain_by_hand():
    """The same two stages: stage 1's first compute waits for stage 0's forward (10), and after its send to
    stage 0 the backward there takes 20 more; stage 0 starts at once and sends nothing down."""
    from astra_sweep.bound import fill_and_drain

    stage0 = [(0, 10, [], None), (1, 0, [0], ("send", 0, 1, 0)), (2, 0, [1], ("recv", 1, 0, 1)),
              (3, 20, [2], None)]
    stage1 = [(0, 0, [], ("recv", 0, 1, 0)), (1, 7, [0], None), (2, 5, [1], None), (3, 0, [2], ("send", 1, 0, 1))]
    assert fill_and_drain(_graph(stage0, stage1)) == {0: (0, 0), 1: (10, 20)}
    assert fill_and_drain(_graph([(0, 0, [1], None), (1, 3, [0], None)])) == {}


def test_interleaved_bound_by_hand():
    """PP 2 VP 2 from the 4-stage terms (one rank per stage): rank q's fill + micro-batches x (its chunks' stages
    q and q + 2, per micro-batch the larger of compute and chain) + drain, the largest over q."""
    from astra_sweep.bound import StepTerms, interleaved_bound_ns

    stages = StepTerms({}, {}, compute_per_micro_batch_ns={0: 10, 1: 11, 2: 10, 3: 12},
                       chain_per_micro_batch_ns={0: 9, 1: 13, 2: 10, 3: 12}, fill_ns={0: 0, 1: 6, 2: 17, 3: 29},
                       drain_ns={0: 0, 1: 8, 2: 20, 3: 33})
    cfg = _cfg(tp=1, pp=2, dp=1, virtual_stages=2, micro_batches=4)
    assert interleaved_bound_ns(cfg, stages, 4) == max(0 + 4 * 20 + 0, 6 + 4 * 25 + 8) == 114
    # the first micro-batch's gap (it writes main_grad without reading it), each chunk's stage's, comes off once
    gapped = StepTerms(**{**stages.__dict__, "first_gap_ns": {0: 1, 1: 2, 2: 0, 3: 3}})
    assert interleaved_bound_ns(cfg, gapped, 4) == max(0 + 4 * 20 - 1 + 0, 6 + 4 * 25 - 5 + 8) == 109
    partial = StepTerms({}, {}, compute_per_micro_batch_ns={0: 10, 1: 11, 2: 10}, chain_per_micro_batch_ns={0: 9},
                        fill_ns={0: 0}, drain_ns={0: 0})
    assert interleaved_bound_ns(cfg, partial, 4) is None  # stage 3 missing: no bound


def test_collectives_in_a_node_count_and_others_do_not():
    """TP 2 layouts: the in-node all-gathers / reduce-scatters lengthen the chain beyond compute; with the ring
    collective (simulated packets, not the NCCL model) only compute counts."""
    cfg = _cfg()
    nccl = BoundCache(SOURCE, "h100-sxm", 8, disk=False).terms(cfg)
    ring = BoundCache(SOURCE, "h100-sxm", 8, nccl=False, disk=False).terms(cfg)
    assert nccl.bound_ns(4) > ring.bound_ns(4) > 0


def test_disk_cache_is_shared_and_survives_a_bad_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path))
    cfg = _cfg()
    first = BoundCache(SOURCE, "h100-sxm", 8)
    terms = first.terms(cfg)
    assert first.generated == 1 and first.terms(_cfg(micro_batches=8, virtual_stages=2)) == terms  # shared
    second = BoundCache(SOURCE, "h100-sxm", 8)
    assert second.terms(cfg) == terms and second.generated == 0  # another process: read from disk
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".json")]
    assert len(files) == 1
    with open(files[0], "w") as handle:
        handle.write("{not json")
    third = BoundCache(SOURCE, "h100-sxm", 8)
    assert third.terms(cfg) == terms and third.generated == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
                 st.recursive(st.none() | st.integers() | st.text(max_size=5),
                              lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=20), c,
                                                                                  max_size=3)).map(json.dumps)))
def test_a_damaged_cache_entry_is_recomputed_never_a_crash(tmp_path, text):
    cache = BoundCache(SOURCE, "h100-sxm", 8)
    cache.disk = str(tmp_path)
    path = tmp_path / "ab" / "abcd.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    found = cache._load("abcd")
    assert found is None or all(isinstance(v, int) for v in found.fixed_ns.values())


@pytest.mark.slow
def test_pruned_search_finds_the_exhaustive_winner_and_the_bound_holds(capsys):
    """The bound is at most every simulated step; the pruned search skips some layouts and ranks the same
    winner first."""
    assert main(SEARCH + ["--exhaustive"]) == 0
    exhaustive = json.loads(capsys.readouterr().out)
    assert exhaustive["pruned"] == [] and len(exhaustive["ranked"]) >= 6
    from astra_sweep.bound import interleaved_bound_ns

    cache = BoundCache(SOURCE, "h100-sxm", 8, disk=False)
    for entry in exhaustive["ranked"]:
        layout = entry["layout"]
        cfg = LlmConfig(tp=layout["tp"], pp=layout["pp"], dp=layout["dp"], micro_batches=layout["micro-batches"],
                        micro_batch_size=layout["micro-batch-size"], virtual_stages=layout["virtual-stages"],
                        zero=layout["zero"], sequence_parallel=layout["sequence-parallel"])
        assert cache.terms(cfg).bound_ns(cfg.micro_batches, cfg.virtual_stages) <= entry["step_ns"], layout
        if cfg.virtual_stages > 1:  # the bound by its own chunks
            assert interleaved_bound_ns(cfg, cache.virtual_stage_terms(cfg), cfg.micro_batches) <= entry["step_ns"]
    assert main(SEARCH) == 0
    printed = capsys.readouterr()
    pruned = json.loads(printed.out)
    assert pruned["ranked"][0] == exhaustive["ranked"][0]
    assert pruned["pruned"] and len(pruned["ranked"]) + len(pruned["pruned"]) == len(exhaustive["ranked"])
    assert "skipped: their lower bound is not below" in printed.err
    best = pruned["ranked"][0]["step_ns"]
    assert all(p["bound_ns"] >= best for p in pruned["pruned"])
    error = pruned["bound_error"]  # stated: bound / simulated step over the simulated layouts
    assert error["layouts"] == len(pruned["ranked"]) and 0 < error["min"] <= error["median"] <= error["max"] <= 1
    assert f"lower bound / simulated step over the {error['layouts']} simulated layouts" in printed.err


def test_bound_error_by_hand():
    """bound / simulated step over the layouts simulated with a bound (a failed point and one without a bound
    left out): min, median (the middle two's mean for an even count), max."""
    from astra_sweep.search import _key, bound_error

    layouts = [_cfg(micro_batches=m) for m in (4, 8, 12, 16, 20)]
    rows = {_key(c): {"status": "ok", "step_ns": 100} for c in layouts}
    rows[_key(layouts[3])] = {"status": "error: boom", "step_ns": None}
    bounds = {id(layouts[0]): (80, 0), id(layouts[1]): (90, 0), id(layouts[2]): (60, 0), id(layouts[3]): (99, 0)}
    assert bound_error(layouts, rows, bounds) == {"layouts": 3, "min": 0.6, "median": 0.8, "max": 0.9}
    bounds[id(layouts[4])] = (70, 0)
    assert bound_error(layouts, rows, bounds) == {"layouts": 4, "min": 0.6, "median": 0.75, "max": 0.9}
    assert bound_error(layouts, rows, {}) is None


@pytest.mark.slow
def test_exhaustive_flag_simulates_every_layout_and_a_rerun_resumes_its_points(tmp_path, capsys):
    """``--exhaustive``: no bound is computed and every layout that fits is ranked. --points of that search: a
    rerun resumes its layouts first (not simulated again) and they stay in the file. (One test, so the exhaustive
    search runs once.)"""
    flags = [a for a in SEARCH]
    flags[flags.index("--tp") + 1], flags[flags.index("--pp") + 1] = "8", "1"
    flags[flags.index("--vp") + 1] = "1"
    points = tmp_path / "points.csv"
    assert main(flags + ["--exhaustive", "--points", str(points)]) == 0
    printed = capsys.readouterr()
    first = json.loads(printed.out)
    assert first["pruned"] == [] and len(first["ranked"]) == 2 and "bounded" not in printed.err
    before = points.read_text()
    assert main(flags + ["--points", str(points)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["ranked"] == first["ranked"] and again["pruned"] == []
    assert sorted(points.read_text().splitlines()) == sorted(before.splitlines())  # same rows, none re-run


#: pipeline layouts of the 8-GPU search's model (VP 1: the edge counts), sampled by test_bound_holds_on_random_layouts
PIPELINES = [dict(tp=tp, pp=pp, dp=8 // (tp * pp), micro_batches=m, micro_batch_size=b)
             for tp in (1, 2) for pp in (2, 4) for m in (pp, 2 * pp + 1) for b in (1, 2) if tp * pp <= 8]


@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.slow), pytest.param(1, marks=pytest.mark.slow),
                                  2])
def test_bound_holds_on_random_layouts(seed, tmp_path):
    """A random pipeline layout, simulated as the search does (hgx-h100, NCCL collectives): its bound, with the
    pipeline's edge, is at most the simulated step, and above the bound without the edge."""
    import random

    from astra_sim import simulate

    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    cfg = _cfg(**random.Random(seed).choice(PIPELINES))
    terms = BoundCache(SOURCE, "h100-sxm", 8, disk=False).terms(cfg)
    prefix = str(tmp_path / "w")
    generate_llm_workload(LlmSpec.from_mapping({**SOURCE, **_options(cfg)}, "workload.llm"), prefix,
                          on_warning=lambda _: None)
    report = simulate(workload=prefix, platform="hgx-h100", platform_collective="nccl",
                      comm_groups=f"{prefix}.groups.json", breakdown=False)
    step = report.max_finish_ns
    assert terms.bound_ns(cfg.micro_batches, 0) < terms.bound_ns(cfg.micro_batches) <= step, _options(cfg)


class _Inline:
    """An executor that runs each task here, in order (the kernel's interface: run yields (task, result))."""

    workers = 1

    def share(self, payload):
        return payload

    def run(self, fn, tasks, timeout=None):
        for task, payload in tasks:
            yield task, fn(task, payload)


def test_interleaved_bounds_are_raised_only_where_they_may_prune():
    """An interleaved layout's bound is raised (once) only when its cheap bound is below the best step and its
    bound with whole stages' edge reaches it; the raised bound is interleaved_bound_ns's and never below the
    cheap one."""
    from astra_sweep.bound import interleaved_bound_ns
    from astra_sweep.search import _Interleaved

    cache = BoundCache(SOURCE, "h100-sxm", 8, disk=False)
    cfg = _cfg(tp=2, pp=4, dp=1, virtual_stages=2, micro_batches=8)
    terms = cache.terms(cfg)
    cheap, whole = terms.bound_ns(8, 2), terms.bound_ns(8, 1)
    bounds = {id(cfg): (cheap, 0)}
    raise_ = _Interleaved(cache, bounds, {id(cfg): whole}, _Inline())
    raise_([cfg], whole + 1)
    assert bounds[id(cfg)][0] == cheap and not raise_.done and cache.generated == 1
    raise_([cfg], whole)
    raised = bounds[id(cfg)][0]
    assert raise_.done == {id(cfg)} and raised == max(cheap, interleaved_bound_ns(cfg, cache.virtual_stage_terms(cfg), 8))
    assert raised > cheap and cache.generated == 2
    raise_([cfg], whole)
    assert cache.generated == 2
