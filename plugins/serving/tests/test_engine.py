"""The engine's scheduling and the KV block manager, with a stand-in step time (these tests are about the
scheduler's bookkeeping; iteration times from the step simulator are tested in test_serve.py)."""

import pytest

from astra_serving.cluster import Cluster
from astra_serving.engine import VLLM_CUDA_GRAPH_SIZES, Engine, EngineConfig, Seq, padded_batch
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request


class LinearTimer:
    """A stand-in step time: 1 ms + 10 us per prefill token + 20 us per decode sequence."""

    def __init__(self):
        self.shapes = []
        self.graphs = []

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        self.shapes.append((prefill, decode, context, prefill_done))
        self.graphs.append(graph)
        return 1_000_000 + 10_000 * prefill + 20_000 * decode


def make(blocks=1000, block_size=16, prefix=False, replicas=1, **config):
    timer = LinearTimer()
    engines = [Engine(i, timer, BlockManager(blocks, block_size, prefix), EngineConfig(**config), 1000)
               for i in range(replicas)]
    return timer, engines


def reqs(n, prompt=100, output=10, gap_ns=0, **kw):
    return [Request(i, i * gap_ns, prompt, output, **kw) for i in range(n)]


def test_every_request_finishes_with_consistent_times():
    timer, (engine,) = make()
    requests = Cluster([engine]).run(reqs(20, gap_ns=500_000))
    for r in requests:
        assert r.arrival_ns <= r.scheduled_ns < r.first_token_ns <= r.finish_ns
    assert engine.tokens_prefilled == 20 * 100 and engine.tokens_decoded == 20 * 9


def test_chunked_prefill_splits_a_long_prompt():
    timer, (engine,) = make(max_num_batched_tokens=256)
    Cluster([engine]).run([Request(0, 0, 1000, 3)])
    assert [s[0] for s in timer.shapes[:4]] == [256, 256, 256, 232]
    assert [s[3] for s in timer.shapes[:4]] == [0, 256, 512, 768]  # the cached part of the prompt


def test_without_chunked_prefill_prompts_go_whole():
    timer, (engine,) = make(max_num_batched_tokens=300, chunked_prefill=False)
    Cluster([engine]).run(reqs(3, prompt=200, output=2))
    assert all(s[0] in (0, 200) for s in timer.shapes)


def test_budget_and_max_seqs():
    timer, (engine,) = make(max_num_seqs=4, max_num_batched_tokens=10_000)
    Cluster([engine]).run(reqs(10, prompt=50, output=5))
    assert all(s[0] // 50 + s[1] <= 4 for s in timer.shapes)


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_preemption_when_blocks_run_out(mode):
    timer, (engine,) = make(blocks=40, block_size=16, preemption=mode, max_num_batched_tokens=4096)
    requests = Cluster([engine]).run(reqs(8, prompt=100, output=200))
    assert engine.preemptions > 0 and all(r.finish_ns for r in requests)
    assert engine.blocks.used == 0 and engine.blocks.free == 40
    if mode == "recompute":  # recomputed positions are prefilled again
        assert engine.tokens_prefilled > 8 * 100


def test_priority_policy_serves_urgent_first():
    timer, (engine,) = make(max_num_seqs=1, policy="priority")
    requests = [Request(0, 0, 10, 50)] + [Request(i, 1000 + i, 10, 5, priority=5 - i) for i in range(1, 5)]
    Cluster([engine]).run(requests)
    order = sorted(requests[1:], key=lambda r: r.scheduled_ns)
    assert [r.priority for r in order] == [1, 2, 3, 4]


def test_prefix_caching_hits():
    timer, (engine,) = make(prefix=True)
    requests = reqs(10, prompt=300, output=4, gap_ns=50_000_000, prefix_group="sys", prefix_tokens=256)
    Cluster([engine]).run(requests)
    assert engine.blocks.hits == 9 * 256
    assert engine.tokens_prefilled == 300 + 9 * 44


def test_block_manager_prefix_eviction():
    bm = BlockManager(10, 16, prefix_caching=True)
    assert bm.grow(1, 64) and bm.used == 4
    bm.release(1, keep_prefix=("g", 2))
    assert bm.free == 8 and bm.available() == 10 and bm.used == 0
    assert bm.match_prefix(2, "g", 40) == 32 and bm.used == 2
    assert bm.grow(3, 8 * 16) and not bm.grow(4, 16)  # 8 free blocks taken; the referenced prefix stays
    bm.release(2)
    assert bm.grow(4, 16) and not bm.has_prefix("g")  # the least recently used cached block is evicted
    assert bm.used == 9 and bm.available() == 1


def test_round_robin_and_least_loaded():
    _, engines = make(replicas=3)
    Cluster(engines, "round-robin").run(reqs(9, gap_ns=1000))
    assert [e.iterations > 0 for e in engines] == [True] * 3
    _, engines = make(replicas=2)
    requests = [Request(0, 0, 2000, 500)] + [Request(i, 1000 * i, 10, 5) for i in range(1, 6)]
    Cluster(engines, "least-loaded").run(requests)
    assert all(r.replica == 1 for r in requests[1:])


def test_multi_step_runs_decodes_back_to_back():
    timer, (engine,) = make(num_scheduler_steps=10)
    requests = [Request(0, 0, 100, 25), Request(1, 2_500_000, 50, 3)]
    Cluster([engine]).run(requests)
    decode_only = [s for s in timer.shapes if s[0] == 0]
    # request 1 arrives during request 0's first 10-step run and waits for its end
    assert requests[1].scheduled_ns == requests[0].first_token_ns + 10 * (1_000_000 + 20_000)
    assert [s[2] for s in decode_only[:3]] == [101, 102, 103]  # the context grows step by step
    assert requests[0].finish_ns is not None and engine.blocks.used == 0


def test_host_time_is_charged_once_per_scheduler_pass():
    timer, (engine,) = make(num_scheduler_steps=10, host_ns_per_schedule=5_000, host_ns_per_seq=1_000)
    requests = [Request(0, 0, 100, 21)]
    Cluster([engine]).run(requests)
    prefill = 1_000_000 + 10_000 * 100 + 5_000 + 1_000
    run = 10 * (1_000_000 + 20_000) + 5_000 + 1_000  # ten decode steps, one pass
    assert requests[0].first_token_ns == prefill
    assert requests[0].finish_ns == prefill + 2 * run


def test_cuda_graph_padding_pads_decode_only_batches():
    sizes = VLLM_CUDA_GRAPH_SIZES
    assert [padded_batch(d, sizes) for d in (1, 2, 3, 4, 5, 8, 9, 250, 256, 300)] == \
        [1, 2, 4, 4, 8, 8, 16, 256, 256, 300]
    assert padded_batch(5, ()) == 5
    shapes = {}
    for padding in (sizes, ()):
        timer, (engine,) = make(cuda_graph_sizes=padding)
        Cluster([engine]).run(reqs(3, prompt=100, output=3))
        shapes[padding] = [s for s in timer.shapes if s[0] == 0]
    assert (0, 3, 101, 0) in shapes[()]  # three sequences at context 101 ...
    assert (0, 4, -(-3 * 101 // 4), 0) in shapes[sizes]  # ... run the graph of 4, with the same total context
    assert all(s[1] in sizes for s in shapes[sizes])
    timer, (engine,) = make(cuda_graph_sizes=(1, 2))  # 3 sequences: above the largest graph, eager
    Cluster([engine]).run(reqs(3, prompt=100, output=3))
    graphs = dict(zip(timer.shapes, timer.graphs))
    assert graphs[(0, 3, 101, 0)] is False and graphs[(0, 2, 102, 0)] is True
    assert all(g is False for s, g in graphs.items() if s[0] > 0)  # prefills and mixed batches run eagerly


def test_separate_prefills_run_prompts_alone():
    shapes = {}
    for separate in (False, True):
        timer, (engine,) = make(separate_prefills=separate, chunked_prefill=False)
        requests = [Request(0, 0, 100, 20), Request(1, 5_000_000, 50, 3)]
        Cluster([engine]).run(requests)
        shapes[separate] = [s[:2] for s in timer.shapes]
        assert all(r.finish_ns is not None for r in requests) and engine.blocks.used == 0
    assert (50, 1) in shapes[False] and (50, 1) not in shapes[True]  # request 1's prompt beside request 0's decode
    assert (50, 0) in shapes[True]  # ... or alone, request 0 waiting for it
    assert all(p == 0 or d == 0 for p, d in shapes[True])


def test_seq_tokens():
    s = Seq(Request(0, 0, 10, 5), computed=10, generated=1)
    assert s.tokens == 11 and s.pending == 1


def test_kv_aware_router_follows_the_cached_prefix():
    _, engines = make(replicas=3, prefix=True)
    first = [Request(0, 0, 300, 2, prefix_group="a", prefix_tokens=256)]
    rest = [Request(i, 100_000_000 * i, 300, 2, prefix_group="a", prefix_tokens=256) for i in range(1, 6)]
    Cluster(engines, "kv-aware").run(first + rest)
    assert {r.replica for r in rest} == {first[0].replica}  # every later request finds the prefix cached there
    assert engines[first[0].replica].blocks.hits == 5 * 256


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=int(__import__('os').environ.get('SERVE_FUZZ', 80)), deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(0, 5_000_000), st.integers(1, 300), st.integers(1, 60)), min_size=1,
                        max_size=25),
       blocks=st.integers(25, 200), block_size=st.sampled_from([1, 8, 16]),
       preemption=st.sampled_from(["recompute", "swap"]), chunked=st.booleans(), prefix=st.booleans(),
       policy=st.sampled_from(["fcfs", "priority"]), replicas=st.integers(1, 3),
       router=st.sampled_from(["round-robin", "least-loaded", "kv-aware"]), max_seqs=st.integers(1, 8),
       disaggregate=st.booleans(), multi_step=st.sampled_from([1, 1, 4]), separate=st.booleans(),
       graphs=st.sampled_from([(), (1, 2, 4, 8)]), host_ns=st.sampled_from([0, 37_000]))
def test_engine_invariants(lengths, blocks, block_size, preemption, chunked, prefix, policy, replicas, router,
                           max_seqs, disaggregate, multi_step, separate, graphs, host_ns):
    """Whatever the load and settings, every request finishes in order of its events, and the cache ends
    empty (prefix-cached blocks apart)."""
    blocks = max(blocks, -(-360 // block_size) + 1)  # the longest request fits
    _, engines = make(blocks=blocks, block_size=block_size, prefix=prefix, replicas=replicas,
                      preemption=preemption, chunked_prefill=chunked, policy=policy, max_num_seqs=max_seqs,
                      max_num_batched_tokens=512, num_scheduler_steps=multi_step, separate_prefills=separate,
                      cuda_graph_sizes=graphs, host_ns_per_seq=host_ns)
    requests = [Request(i, t, p, o, priority=i % 3, prefix_group="g" if i % 2 else None, prefix_tokens=p // 2)
                for i, (t, p, o) in enumerate(lengths)]
    if disaggregate:  # the first replica prefills, the others decode (a stand-in transfer: 1 us per position)
        class Transfer:
            def transfer_ns(self, nbytes):
                return nbytes

        prefill = engines[:1]
        prefill[0].config.role = "prefill"
        decode = engines[1:] or make(blocks=blocks, block_size=block_size, preemption=preemption,
                                     chunked_prefill=chunked, max_num_seqs=max_seqs,
                                     max_num_batched_tokens=512)[1]
        for e in decode:
            e.config.role = "decode"
        engines = prefill + decode
        Cluster(prefill, router, decode, Transfer(), 1000).run(requests)
    else:
        Cluster(engines, router).run(requests)
    for r in requests:
        assert r.arrival_ns <= r.scheduled_ns < r.first_token_ns <= r.finish_ns
    for e in engines:
        assert e.blocks.used == 0 and not e.running and not e.waiting and not e.swapped
        assert e.blocks.free + len(e.blocks.evictable) == e.blocks.total
    assert sum(e.tokens_decoded for e in engines) <= sum(r.output_tokens - 1 for r in requests)


# ------------------------------------------------------------------------ pipeline parallelism: virtual engines
class StagedTimer(LinearTimer):
    """LinearTimer's step split over two pipeline stages, 40 % and 60 %."""

    def stage_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        total = self.step_ns(prefill, decode, context, prefill_done, graph)
        first = total * 2 // 5
        return [first, total - first]


def test_pipeline_stages_take_one_batch_at_a_time_in_order():
    from astra_serving.engine import Pipeline

    pipe = Pipeline(2)
    assert pipe.run(0, [[4, 6]]) == 10           # alone: the sum of its stages
    assert pipe.run(0, [[4, 6]]) == 16           # the next batch entered stage 0 at 4 and waited for stage 1
    assert pipe.run(100, [[4, 6], [4, 6]]) == 120  # two steps of one engine: the second needs the first's tokens
    assert pipe.free_ns == [114, 120]


def test_virtual_engines_overlap_on_the_stages_and_alone_cost_the_whole_pipeline():
    from astra_serving.engine import Pipeline

    def run(virtual, n, gap_ns):
        timer = StagedTimer()
        pipe = Pipeline(2) if virtual > 1 else None
        engines = [Engine(v, timer, BlockManager(1000 // virtual, 16), EngineConfig(max_num_seqs=4), 1000,
                          pipeline=pipe, replica=0, virtual_engine=v) for v in range(virtual)]
        requests = Cluster(engines, "least-loaded").run(reqs(n, gap_ns=gap_ns))
        return requests, max(r.finish_ns for r in requests)

    # one request at a time: a virtual engine's iteration is the whole pipeline, as without virtual engines
    alone, _ = run(2, 3, 10**10)
    serial, _ = run(1, 3, 10**10)
    assert [(r.first_token_ns - r.arrival_ns, r.finish_ns - r.arrival_ns) for r in alone] == \
        [(r.first_token_ns - r.arrival_ns, r.finish_ns - r.arrival_ns) for r in serial]
    # saturated (more work than max_num_seqs): two engines keep both stages busy
    _, overlapped = run(2, 40, 0)
    _, one_at_a_time = run(1, 40, 0)
    assert one_at_a_time / overlapped > 1.3


def test_take_then_assign_is_grow_for_each_in_turn():
    """The lazy decoders' blocks, taken at once and counted as theirs later (take, assign): the free blocks first,
    then the least recently used cached prefix blocks, as one grow after the other would take them."""
    def cache(bm):
        bm.grow(0, 64)
        bm.release(0, keep_prefix=("g", 4))  # 4 cached prefix blocks, none referenced
        for i in (1, 2, 3):
            bm.grow(i, 16)
        return bm

    one, each = cache(BlockManager(9, 16, prefix_caching=True)), cache(BlockManager(9, 16, prefix_caching=True))
    for i in (1, 2, 3):
        one.grow(i, 32)
    assert each.take(3)
    for i in (1, 2, 3):
        each.assign(i, 1)
    assert (one.free, dict(one.owned), list(one.evictable), one.refs) == (
        each.free, dict(each.owned), list(each.evictable), each.refs)
    assert each.free == 0 and list(each.evictable) == [("g", 1), ("g", 2), ("g", 3)]  # 2 free, ("g", 0) evicted
    assert not each.take(4) and each.available() == 3  # 3 available: nothing taken


def test_an_arrival_at_an_iteration_end_is_scheduled_by_the_next_pass():
    """An arrival at the very ns an iteration ends is queued before that iteration completes (the next pass
    admits it), and requests given out of arrival order are taken in it."""
    timer, (engine,) = make()
    end = 1_000_000 + 10_000 * 100  # the first request's prefill alone (LinearTimer)
    requests = [Request(1, end, 50, 3), Request(0, 0, 100, 3)]
    Cluster([engine]).run(requests)
    assert requests[1].first_token_ns == end and requests[0].scheduled_ns == end
    assert timer.shapes[1] == (50, 1, 101, 0)  # the second prompt with the first's decode
