"""The engines' lazy decoders (cluster.py's fast_forward, engine.py's module doc) against the plain loop that
schedules and completes every sequence one by one: on random workloads and engine settings, every request's times,
every engine's counters, the KV samples and the iterations recorded are the same to the nanosecond."""

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from astra_serving.cluster import Cluster
from astra_serving.engine import VLLM_CUDA_GRAPH_SIZES, Engine, EngineConfig, Pipeline, Seq
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request
from astra_serving.steptime import Layout, StepTimer


class ContextTimer:
    """A stand-in step time that depends on every term of the shape, the decode context included (a decode run
    must look each iteration's time up with its own context)."""

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        return 900_000 + 9_000 * prefill + 17_000 * decode + 3 * decode * context + prefill_done + (0 if graph
                                                                                                    else 50_000)

    def stage_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        """Two pipeline stages, the second a third of the step."""
        step = self.step_ns(prefill, decode, context, prefill_done, graph)
        return [step - step // 3, step // 3]


class LinearTransfer:
    def transfer_ns(self, nbytes):
        return 10_000 + nbytes // 100


def simulate(requests, fast, *, replicas, blocks, block_size, prefix, disaggregate, router, config, virtual=1):
    timer = ContextTimer()

    def engines(first, n, role):
        """``n`` replicas, each of ``virtual`` engines over a shared two-stage pipeline when ``virtual`` > 1."""
        out = []
        for i in range(n):
            pipeline = Pipeline(2) if virtual > 1 else None
            out += [Engine(first + len(out), timer, BlockManager(blocks, block_size, prefix),
                           dataclasses.replace(config, role=role), 1000, pipeline=pipeline, replica=first + i,
                           virtual_engine=v) for v in range(virtual)]
        return out

    if disaggregate:
        cluster = Cluster(engines(0, replicas, "prefill"), router, engines(replicas, replicas, "decode"),
                          LinearTransfer(), 1000, sample_every_ns=3_000_000)
    else:
        cluster = Cluster(engines(0, replicas, "both"), router, sample_every_ns=3_000_000)
    cluster.fast_forward = fast
    cluster.record_iterations = True
    reqs = [dataclasses.replace(r) for r in requests]
    cluster.run(reqs)
    every = cluster.engines + cluster.decode_engines
    return ([(r.id, r.replica, r.scheduled_ns, r.first_token_ns, r.finish_ns, r.preemptions) for r in reqs],
            [(e.iterations, e.busy_ns, e.preemptions, e.tokens_prefilled, e.tokens_decoded, dict(e.limited),
              e.blocks.free, e.blocks.hits) for e in every],
            cluster.kv_samples, sorted(cluster.iterations), cluster.transfers, cluster.queue_area_ns())


workloads = st.lists(st.tuples(st.integers(0, 30_000_000), st.integers(1, 300), st.integers(1, 120),
                               st.sampled_from([None, "a"]), st.integers(0, 2)), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(rows=workloads, replicas=st.integers(1, 2), blocks=st.integers(30, 120), block_size=st.sampled_from([1, 4, 16]),
       prefix=st.booleans(), disaggregate=st.booleans(), router=st.sampled_from(["round-robin", "least-loaded",
                                                                                   "kv-aware"]),
       max_num_seqs=st.integers(1, 16), budget=st.integers(4, 512), chunked=st.booleans(),
       preemption=st.sampled_from(["recompute", "swap"]), graphs=st.booleans(), policy=st.sampled_from(["fcfs",
                                                                                                          "priority"]),
       host_ns=st.integers(0, 50_000), separate=st.booleans(), steps=st.sampled_from([1, 1, 3]),
       virtual=st.sampled_from([1, 1, 2]))
def test_lazy_decoders_change_nothing(rows, replicas, blocks, block_size, prefix, disaggregate, router, max_num_seqs,
                                      budget, chunked, preemption, graphs, policy, host_ns, separate, steps, virtual):
    """A budget under the batch (the group dissolved), KV blocks running out (preemptions), multi-step decodes,
    prompts run alone and virtual engines over a pipeline included."""
    if not chunked:
        budget = 512  # every prompt fits an iteration whole
    requests = []
    for i, (arrival, prompt, output, group, priority) in enumerate(sorted(rows, key=lambda row: row[0])):
        r = Request(i, arrival, prompt, output, priority=priority)
        if group:
            r.prefix_group, r.prefix_tokens = group, min(prompt, 40)
        requests.append(r)
    if max(r.prompt_tokens + r.output_tokens for r in requests) > blocks * block_size:
        blocks = -(-max(r.prompt_tokens + r.output_tokens for r in requests) // block_size)
    config = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, chunked_prefill=chunked,
                          policy=policy, preemption=preemption, host_ns_per_seq=host_ns,
                          cuda_graph_sizes=VLLM_CUDA_GRAPH_SIZES if graphs else (), separate_prefills=separate,
                          num_scheduler_steps=steps)
    kw = dict(replicas=replicas, blocks=blocks, block_size=block_size, prefix=prefix, disaggregate=disaggregate,
              router=router, config=config, virtual=virtual)
    assert simulate(requests, True, **kw) == simulate(requests, False, **kw)


def scheduled(engine):
    """Record (sequences scheduled one by one, lazy decoders) of each batch ``engine`` makes."""
    seen = []
    original = engine.schedule

    def schedule():
        batch = original()
        if batch is not None:
            seen.append((len(batch.items), batch.group))
        return batch

    engine.schedule = schedule
    return seen


def test_a_busy_engine_schedules_its_decoders_as_one_group():
    """Forty requests arriving together: once prefilled, they decode as one group (no sequence scheduled one by
    one) across KV block boundaries, and leave it as they finish; the times are the plain loop's."""
    requests = [Request(i, 0, 30 + i, 20 + 3 * i) for i in range(40)]
    kw = dict(replicas=1, blocks=400, block_size=16, prefix=False, disaggregate=False, router="round-robin",
              config=EngineConfig(max_num_batched_tokens=4096))
    assert simulate(requests, True, **kw) == simulate(requests, False, **kw)
    engine = Engine(0, ContextTimer(), BlockManager(400, 16), EngineConfig(max_num_batched_tokens=4096), 1000)
    for r in requests:
        engine.add(Seq(dataclasses.replace(r)))
    seen = []
    while engine.running or engine.waiting:
        batch = engine.schedule()
        seen.append((len(batch.items), batch.group))
        engine.complete(batch, 0)
    assert seen[0] == (40, 0)  # every prompt at once
    # the k-th decode iteration: the sequences with more than k tokens to sample after the first
    assert seen[1:] == [(0, sum(20 + 3 * i - 1 >= k for i in range(40))) for k in range(1, len(seen))]
    assert engine.blocks.free == 400 and engine._lazy == 0


def test_the_group_dissolves_when_blocks_run_out_and_forms_again():
    """A cache too small for every sequence's growth: the pass that cannot give the group its blocks is the
    plain one (it preempts), the group forms again after it, and every time is the plain loop's."""
    requests = [Request(i, 10_000 * i, 40, 90) for i in range(12)]
    for preemption in ("recompute", "swap"):
        config = EngineConfig(max_num_batched_tokens=512, preemption=preemption)
        kw = dict(replicas=1, blocks=40, block_size=16, prefix=False, disaggregate=False, router="round-robin",
                  config=config)
        assert simulate(requests, True, **kw) == simulate(requests, False, **kw)
        engine = Engine(0, ContextTimer(), BlockManager(40, 16), config, 1000)
        seen = scheduled(engine)
        Cluster([engine]).run([dataclasses.replace(r) for r in requests])
        assert engine.preemptions > 0
        regrouped = [i for i in range(1, len(seen)) if seen[i - 1][1] == 0 and seen[i][1] > 0]
        assert len(regrouped) >= 2, seen  # formed, dissolved and formed again


def test_a_budget_under_the_group_dissolves_it():
    """More decoding sequences than the token budget: the plain pass schedules the first ones (the group would
    need one token each); the times are the plain loop's."""
    requests = [Request(i, 0, 4, 30) for i in range(12)]
    config = EngineConfig(max_num_batched_tokens=8, max_num_seqs=12)
    kw = dict(replicas=1, blocks=200, block_size=4, prefix=False, disaggregate=False, router="round-robin",
              config=config)
    assert simulate(requests, True, **kw) == simulate(requests, False, **kw)


def test_least_loaded_router_reads_the_lazy_decoders():
    """The router's load of a replica whose sequences decode as a group counts their tokens as they are now."""
    engine = Engine(0, ContextTimer(), BlockManager(100, 4), EngineConfig(), 1000)
    plain = Engine(1, ContextTimer(), BlockManager(100, 4), EngineConfig(), 1000)
    plain.lazy_decodes = False
    for e in (engine, plain):
        for i in range(3):
            e.add(Seq(Request(i, 0, 5, 10 + i)))
    for _ in range(6):
        for e in (engine, plain):
            e.complete(e.schedule(), 0)
        assert engine.load_tokens() == plain.load_tokens()
    # after the prefill and 5 decodes: one token to compute each, 4, 5 and 6 more to sample
    assert engine._lazy == 3 and engine.load_tokens() == 3 + 4 + 5 + 6


class Corners(dict):
    """Stand-in simulated corners: a fixed pseudo-random time per shape (``pp`` stages, the last ``zeros`` 0)."""

    def __init__(self, pp, zeros=0):
        super().__init__()
        self.pp, self.zeros = pp, zeros

    def get(self, key, default=None):
        times = [random.Random(repr(key) + str(s)).randrange(10**5, 10**8) for s in range(self.pp - self.zeros)]
        return tuple(times + [0] * self.zeros)


@settings(max_examples=300, deadline=None)
@given(prefill=st.integers(0, 9000), decode=st.integers(0, 300), context=st.integers(1, 9000),
       done=st.integers(0, 4000), graph=st.booleans())
def test_one_stage_interpolation_is_the_stage_sum(trilinear, prefill, decode, context, done, graph):
    """One stage's step time is taken as the plain sum over the corners: the same as the stage sum of two stages
    whose second takes no time, and the same looked up once or again."""
    if prefill == decode == 0:
        decode = 1
    one = StepTimer(Layout({"model": "x"}, "p"), cache=False)
    two = StepTimer(Layout({"model": "x"}, "p", pp=2), cache=False)
    one.memo, two.memo = Corners(1), Corners(2, zeros=1)
    shape = (prefill, decode, context, done, graph)
    first = one.step_ns(*shape)
    assert first == two.step_ns(*shape) == sum(two.stage_ns(*shape)) == one.step_ns(*shape) > 0
    assert one.lookups == 2
    # the trilinear sum written out: corners of weight 0 left out, prefill outermost, then decode, then context
    total = trilinear(prefill, decode, context, lambda key: one.memo.get(key)[0], graph)
    assert first == int(round(total))


def test_a_sequence_swapped_in_during_its_prefill_holds_the_blocks_it_computes():
    """A running sequence holds the KV blocks of its computed positions (what the scheduler's block check and
    the decode runs rely on): one swapped out during its prefill takes, when it comes back, the blocks of the
    chunk it computes as well."""
    engine = Engine(0, ContextTimer(), BlockManager(100, 4),
                    EngineConfig(max_num_batched_tokens=32, preemption="swap"), 1000)
    seq = Seq(Request(0, 0, 100, 5), computed=8)
    seq.state, seq.swapped_positions = "swapped", 8
    engine.swapped.append(seq)
    (scheduled, n), = engine.schedule().items
    assert scheduled is seq and n == 32 and engine.blocks.blocks_of(0) * 4 >= 8 + 32


def _plain_requests(rows, blocks, block_size):
    """The workload's requests in arrival order (no priorities, no shared prefixes), and enough KV blocks for the
    longest of them."""
    requests = [Request(i, arrival, prompt, output) for i, (arrival, prompt, output, _, _)
                in enumerate(sorted(rows, key=lambda row: row[0]))]
    return requests, max(blocks, -(-max(r.prompt_tokens + r.output_tokens for r in requests) // block_size))


@settings(max_examples=60, deadline=None)
@given(rows=workloads, blocks=st.integers(30, 120), block_size=st.sampled_from([1, 4, 16]),
       max_num_seqs=st.integers(1, 16), budget=st.integers(4, 512), steps=st.sampled_from([1, 1, 3]),
       separate=st.booleans(), disaggregate=st.booleans(), preemption=st.sampled_from(["recompute", "swap"]))
def test_lazy_decoders_change_nothing_with_async_output(rows, blocks, block_size, max_num_seqs, budget, steps,
                                                        separate, disaggregate, preemption):
    """The lazy decoders against the plain loop with async output on: the same times to the nanosecond."""
    requests, blocks = _plain_requests(rows, blocks, block_size)
    config = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, preemption=preemption,
                          separate_prefills=separate, num_scheduler_steps=steps, async_output=True)
    kw = dict(replicas=1, blocks=blocks, block_size=block_size, prefix=False, disaggregate=disaggregate,
              router="round-robin", config=config)
    assert simulate(requests, True, **kw) == simulate(requests, False, **kw)


@settings(max_examples=60, deadline=None)
@given(rows=workloads, blocks=st.integers(30, 120), block_size=st.sampled_from([1, 4, 16]),
       max_num_seqs=st.integers(1, 16), budget=st.integers(4, 512), separate=st.booleans(),
       preemption=st.sampled_from(["recompute", "swap"]), async_output=st.booleans())
def test_lazy_decoders_change_nothing_with_the_first_token_from_decode(rows, blocks, block_size, max_num_seqs, budget,
                                                                        separate, preemption, async_output):
    """The lazy decoders against the plain loop with the first token from a decode step: the same times to the
    nanosecond, and every request gets all its tokens."""
    requests, blocks = _plain_requests(rows, blocks, block_size)
    config = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, preemption=preemption,
                          separate_prefills=separate, async_output=async_output, first_token_from_decode=True)
    kw = dict(replicas=1, blocks=blocks, block_size=block_size, prefix=False, disaggregate=False,
              router="round-robin", config=config)
    fast = simulate(requests, True, **kw)
    assert fast == simulate(requests, False, **kw)
    assert all(first is not None and finish >= first for _, _, _, first, finish, _ in fast[0])
