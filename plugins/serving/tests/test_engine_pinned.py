"""The serving loop's results pinned on a smaller copy of benchmarks/bench_serve.py's case (Poisson arrivals at
20 QPS, prompts lognormal mean 512, outputs lognormal mean 128, seed 1; vLLM's defaults, CUDA graphs and host time
on one TP 8 replica with the benchmark's KV cache), timed by a real StepTimer over stand-in corners (no step
simulated). Why: speed work on the engine, the KV cache and the energy accounting must not change any request's
times or energy; the digests below were computed by the code before that work, and the plain loop (no lazy
decoders) must give the same times."""

import dataclasses
import hashlib
import random

from astra_serving.cluster import Cluster
from astra_serving.energy import EnergyMeter
from astra_serving.engine import VLLM_CUDA_GRAPH_SIZES, Engine, EngineConfig
from astra_serving.kvcache import BlockManager
from astra_serving.requests import generate_requests
from astra_serving.stepcache import StepEnergy
from astra_serving.steptime import Layout, StepTimer


def corner_ns(key):
    """A stand-in simulated corner: about a Llama-3 70B TP 8 step's size in each term, with a fixed
    pseudo-random part so that the interpolation's weights matter."""
    prefill, decode, context, _, graph = key
    jitter = random.Random(repr(key)).randrange(0, 500_000)
    return 9_000_000 + 28_000 * prefill + 45_000 * decode + 6 * decode * context + (0 if graph else 3_000_000) + jitter


class Corners(dict):
    def get(self, key, default=None):
        return (corner_ns(key),)


class EnergyCorners(dict):
    """A corner's energy: 8 GPUs at about 600 W over its time, with its own pseudo-random part."""

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        mj = corner_ns(key) * 48 // 10_000 + random.Random(repr(key) + "e").randrange(0, 5_000)
        return StepEnergy(mj, 8, 2_960_000)

    def values(self):  # what StepTimer.idle_mw reads
        return [self[(1, 0, 0, 0, False)]]


def serve_case(requests, fast, blocks=88_356, replicas=1):
    """Serve copies of ``requests`` (the lazy decoders on or off); (requests, energy report, engines)."""
    timer = StepTimer(Layout({"model": "pinned"}, "stand-in", tp=8), cache=False)
    timer.memo, timer.energy_memo = Corners(), EnergyCorners()
    config = EngineConfig(host_ns_per_seq=42_000, cuda_graph_sizes=VLLM_CUDA_GRAPH_SIZES)
    engines = [Engine(i, timer, BlockManager(blocks, 16), config, 40_960) for i in range(replicas)]
    cluster = Cluster(engines, "round-robin", sample_every_ns=50_000_000)
    cluster.fast_forward = fast
    reqs = [dataclasses.replace(r) for r in requests]
    cluster.meter = EnergyMeter(min(r.arrival_ns for r in reqs))
    cluster.run(reqs)
    energy = cluster.meter.finish(reqs, engines, max(r.finish_ns for r in reqs))
    return reqs, energy, engines, cluster


def times(reqs):
    return [(r.id, r.replica, r.scheduled_ns, r.first_token_ns, r.finish_ns, r.preemptions) for r in reqs]


def digest(reqs, energy, engines, cluster):
    """SHA-256 (16 hex digits) of every request's times and integer mJ, the run's energy, the engines' counters and
    the KV samples."""
    rows = [t + (r.energy_mj,) for t, r in zip(times(reqs), reqs)]
    counters = [(e.iterations, e.busy_ns, e.preemptions, e.tokens_prefilled, e.tokens_decoded,
                 sorted(e.limited.items()), e.blocks.free) for e in engines]
    text = repr((rows, energy["it_energy_mj"], energy["idle_energy_mj"], counters, cluster.kv_samples))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def bench_requests(n):
    return generate_requests(n, 20.0, ("lognormal", 512.0, 1.0), ("lognormal", 128.0, 1.0), seed=1,
                             max_context=8192)


def test_the_benchmark_case_is_pinned_and_the_plain_loop_agrees():
    """1,500 requests of the benchmark's case: the digest of the code before the speed work, and the plain loop's
    times."""
    requests = bench_requests(1500)
    fast = serve_case(requests, True)
    assert sum(r.energy_mj for r in fast[0]) == fast[1]["it_energy_mj"]
    assert digest(*fast) == "84ab32340f0bda85"
    assert times(fast[0]) == times(serve_case(requests, False)[0])


def test_a_tight_cache_with_preemptions_on_two_replicas_is_pinned():
    """The same arrivals on two replicas of 1,200 blocks each: preemptions dissolve the lazy group."""
    requests = bench_requests(600)
    fast = serve_case(requests, True, blocks=1_200, replicas=2)
    assert sum(e.preemptions for e in fast[2]) > 0
    assert digest(*fast) == "4f29d603bfd42a0c"
    assert times(fast[0]) == times(serve_case(requests, False, blocks=1_200, replicas=2)[0])
