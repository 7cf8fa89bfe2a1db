"""The sampler's GPU kernels after each step (sampler.py, ``astra serve --sampler``): vLLM V0's greedy pass timed by
the GPU model by hand on an A100, the rows an iteration samples (a decode step's sequences, the prompts a prefill
ends, every step of a multi-step run), its time at the idle power in the energy, and the option."""

import dataclasses
import json

import pytest

from astra_gpu_model.gpu import load_gpu
from astra_serving.cluster import Cluster
from astra_serving.energy import EnergyMeter
from astra_serving.engine import Engine, EngineConfig
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request
from astra_serving.sampler import VLLM_V0_GREEDY_KERNELS, SamplerTimer
from astra_serving.spec import ServeSpec
from astra_sim.errors import ConfigError

MS = 1_000_000


def test_vllm_v0_greedy_pass_on_an_a100_by_hand():
    """10 rows of Llama 3's 128,256 logits on an A100 SXM4 80 GB: 1,282,560 logits. The preset's per-kernel floor is
    2.344505 us and its HBM rate 0.745412 x 2.039 TB/s = 1.519895 TB/s. The softmax and log-softmax run at their
    measured H200 rate, 1.332456 TB/s, scaled by SMs x clock, 108 x 1410 / (132 x 1980) = 0.582645: 0.776349 TB/s
    (below the HBM rate, so it holds); copy_ (4.267 x 0.5826 = 2.486 TB/s) is capped at the HBM rate, div_, index
    and argmax have no measured rate (HBM). Transfers: copy_ 6 B x 1,282,560 / 1.519895e12 = 5.0631 us, div_ and
    index 8 B: 6.7508 us each, softmax and log-softmax 8 B / 0.776349e12: 13.2164 us each, argmax 4 B: 3.3754 us;
    sum 48.3729 us, plus 6 x 2.344505 = 14.0670 us of floors: 62.4399 us."""
    gpu = load_gpu("A100-SXM4-80GB")
    params = gpu.gemm
    assert (round(params.launch_us, 6), round(params.hbm_efficiency, 6), gpu.hbm_bytes_per_s) == \
        (2.344505, 0.745412, 2.039e12)  # the hand arithmetic's inputs
    assert (gpu.sm_count, gpu.boost_clock_mhz) == (108, 1410)
    assert [b for _, b in VLLM_V0_GREEDY_KERNELS] == [6, 8, 8, 8, 8, 4]
    timer = SamplerTimer("A100-SXM4-80GB", 128256)
    assert abs(timer(10) - 62_440) <= 2  # ns
    assert timer(0) == 0
    # without the measured memory-op rates every pass streams at the HBM rate: 42 B x 1,282,560 / 1.519895e12
    # = 35.4412 us, plus the 14.0670 us of floors: 49.5082 us
    assert abs(SamplerTimer("A100-SXM4-80GB", 128256, memory_op_rates=False)(10) - 49_508) <= 2


def per_row(rows):
    """A stand-in sampler: 0.2 ms per sampled row."""
    return rows * MS // 5


def serve(timer, requests, sampler, **config):
    engine = Engine(0, timer(), BlockManager(1000, 16), EngineConfig(sampler=sampler, **config), 1000)
    cluster = Cluster([engine])
    cluster.meter = EnergyMeter(0)
    reqs = [dataclasses.replace(r) for r in requests]
    cluster.run(reqs)
    report = cluster.meter.finish(reqs, [engine], max(r.finish_ns for r in reqs))
    return reqs, engine, report


def test_each_step_pays_for_the_rows_it_samples(fixed_timer):
    """A: 100-token prompt, 3 outputs, at 0; B: 100-token prompt, 2 outputs, at 0.5 ms (chunked prefill, vLLM's
    default: B joins A's decode). [0, 10.2] A's prefill, 1 row (10 + 0.2); [10.2, 20.6] A's decode and B's prefill,
    2 rows (10 + 0.4); [20.6, 23.0] both decode, 2 rows (2 + 0.4). Without the sampler: 10, 20, 22."""
    requests = [Request(0, 0, 100, 3), Request(1, MS // 2, 100, 2)]
    plain, _, _ = serve(fixed_timer, requests, None)
    assert [(r.first_token_ns, r.finish_ns) for r in plain] == [(10 * MS, 22 * MS), (20 * MS, 22 * MS)]
    reqs, engine, report = serve(fixed_timer, requests, per_row)
    assert [(r.first_token_ns, r.finish_ns) for r in reqs] == [(10_200_000, 23 * MS), (20_600_000, 23 * MS)]
    assert engine.busy_ns == 23 * MS
    # energy: the steps' 10,000 + 10,000 + 2,000 mJ, and the sampler's 1.0 ms at the idle 1 W: 1 mJ
    assert (report["it_energy_mj"], report["idle_energy_mj"]) == (22_001, 1)


def test_a_prefill_chunk_that_does_not_end_its_prompt_samples_nothing(fixed_timer):
    """--no-chunked-prefill off, a 48-token budget: a 100-token prompt in chunks of 48, 48 and 4 (3 steps of 10 ms);
    only the last samples (0.2 ms): the first token at 30.2 ms; then 1 decode (2 + 0.2): 32.4 ms."""
    (r,), _, _ = serve(fixed_timer, [Request(0, 0, 100, 2)], per_row, max_num_batched_tokens=48)
    assert (r.first_token_ns, r.finish_ns) == (30_200_000, 32_400_000)


def test_every_step_of_a_multi_step_run_samples(fixed_timer):
    """A 100-token prompt, 4 outputs, at 0; --num-scheduler-steps 3: [0, 10.2] its prefill (1 row), then one run of 3
    decode steps, each 2 ms + 1 row x 0.2 ms: 6.6 ms, to 16.8 ms (its tokens delivered at its end)."""
    (r,), engine, _ = serve(fixed_timer, [Request(0, 0, 100, 4)], per_row, num_scheduler_steps=3)
    assert (r.first_token_ns, r.finish_ns) == (10_200_000, 16_800_000)
    assert engine.iterations == 2


def test_the_option():
    """vllm-v0 by default; none for an engine that is not vLLM; another name refused; the report names it."""
    assert ServeSpec(model="llama3-8b", platform="dgx-a100").sampler == "vllm-v0"
    assert ServeSpec.from_mapping({"model": "llama3-8b", "platform": "dgx-a100", "sampler": "none"}).sampler == "none"
    with pytest.raises(ConfigError):
        ServeSpec.from_mapping({"model": "llama3-8b", "platform": "dgx-a100", "sampler": "sglang"})
    from astra_serving.deployment import resolve
    from astra_serving.sampler import sampler_timer

    resolved = resolve(ServeSpec(model="llama3-8b", platform="dgx-a100", qps=1, requests=1))
    assert sampler_timer("none", resolved.layout, resolved.platform) is None
    timer = sampler_timer("vllm-v0", resolved.layout, resolved.platform)
    assert (timer.model.gpu.name, timer.vocab) == ("A100-SXM4-80GB", 128256)
    assert json.loads(json.dumps(timer.to_dict()))["kernels"][2] == {"op": "_softmax", "bytes_per_logit": 8}
