"""Decode runs (cluster.py's fast_forward) against the loop that schedules every iteration: on random workloads
and engine settings, every request's times, every engine's counters, the KV samples and the iterations recorded
are the same to the nanosecond."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from astra_serving.cluster import Cluster
from astra_serving.engine import VLLM_CUDA_GRAPH_SIZES, Engine, EngineConfig, Seq
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request


class ContextTimer:
    """A stand-in step time that depends on every term of the shape, the decode context included (a decode run
    must look each iteration's time up with its own context)."""

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        return 900_000 + 9_000 * prefill + 17_000 * decode + 3 * decode * context + prefill_done + (0 if graph
                                                                                                    else 50_000)


class LinearTransfer:
    def transfer_ns(self, nbytes):
        return 10_000 + nbytes // 100


def simulate(requests, fast, *, replicas, blocks, block_size, prefix, disaggregate, router, config):
    timer = ContextTimer()

    def engines(first, n, role):
        return [Engine(first + i, timer, BlockManager(blocks, block_size, prefix),
                       dataclasses.replace(config, role=role), 1000) for i in range(n)]

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
       max_num_seqs=st.integers(1, 16), budget=st.integers(64, 512), chunked=st.booleans(),
       preemption=st.sampled_from(["recompute", "swap"]), graphs=st.booleans(), policy=st.sampled_from(["fcfs",
                                                                                                          "priority"]),
       host_ns=st.integers(0, 50_000))
def test_decode_runs_change_nothing(rows, replicas, blocks, block_size, prefix, disaggregate, router, max_num_seqs,
                                    budget, chunked, preemption, graphs, policy, host_ns):
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
                          cuda_graph_sizes=VLLM_CUDA_GRAPH_SIZES if graphs else ())
    kw = dict(replicas=replicas, blocks=blocks, block_size=block_size, prefix=prefix, disaggregate=disaggregate,
              router=router, config=config)
    assert simulate(requests, True, **kw) == simulate(requests, False, **kw)


def test_a_lone_long_decode_runs_between_block_boundaries():
    """One request decoding alone: one decode run takes it to its last token (its KV blocks taken on the way),
    and the result is the per-iteration loop's."""
    config = EngineConfig()
    kw = dict(replicas=1, blocks=100, block_size=16, prefix=False, disaggregate=False, router="round-robin",
              config=config)
    requests = [Request(0, 0, 20, 200)]
    fast, slow = simulate(requests, True, **kw), simulate(requests, False, **kw)
    assert fast == slow
    timer = ContextTimer()
    engine = Engine(0, timer, BlockManager(100, 16), config, 1000)
    calls = []
    original = engine.schedule
    engine.schedule = lambda: calls.append(1) or original()
    Cluster([engine]).run([Request(0, 0, 20, 200)])
    assert engine.iterations == 200 and len(calls) <= 3, len(calls)  # the prefill, the run, the last token


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
