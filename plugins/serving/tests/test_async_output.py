"""Asynchronous output processing (engine.py's module doc, ``EngineConfig.async_output``): a step's tokens reach the
client when the engine's next step ends (or starts, when it is a multi-step run's CUDA-graph step); when nothing else
runs, the finished sequences' extra decode step is run and delivers them. Hand-computed times, the lazy decoders against the plain loop, exact energy, and the option's
defaults by engine (``astra serve --async-output``)."""

import dataclasses
import json

import pytest

from astra_serving.cluster import Cluster
from astra_serving.energy import EnergyMeter
from astra_serving.engine import Engine, EngineConfig
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request
from astra_serving.spec import ServeSpec

MS = 1_000_000


def serve(timer, requests, async_output, energy=False):
    engine = Engine(0, timer(), BlockManager(1000, 16), EngineConfig(async_output=async_output), 1000)
    cluster = Cluster([engine])
    reqs = [dataclasses.replace(r) for r in requests]
    if energy:
        cluster.meter = EnergyMeter(0)
    cluster.run(reqs)
    report = cluster.meter.finish(reqs, [engine], max(r.finish_ns for r in reqs)) if energy else None
    return reqs, engine, report


def two_requests():
    # A: 100-token prompt, 3 output tokens, at 0; B: 100-token prompt, 2 output tokens, at 0.5 ms
    return [Request(0, 0, 100, 3), Request(1, MS // 2, 100, 2)]


def test_two_requests_by_hand(fixed_timer):
    """Steps: [0, 10] A's prefill (A samples token 1); [10, 20] A's decode and B's prefill (A token 2, B token 1);
    [20, 22] both decode (A token 3 and B token 2: both finish). Without async output each token arrives when its
    step ends. With it, a step's tokens arrive when the next step ends: A's first at 20, B's at 22; the finishes
    wait for the extra decode step of the two finished sequences, [22, 24]."""
    plain, _, _ = serve(fixed_timer, two_requests(), False)
    assert [(r.first_token_ns, r.finish_ns) for r in plain] == [(10 * MS, 22 * MS), (20 * MS, 22 * MS)]
    reqs, engine, _ = serve(fixed_timer, two_requests(), True)
    a, b = reqs
    assert a.first_token_ns - a.arrival_ns == 20 * MS  # TTFT: arrival to the end of the step after the prefill
    assert b.first_token_ns - b.arrival_ns == 22 * MS - MS // 2
    assert (a.finish_ns, b.finish_ns) == (24 * MS, 24 * MS)
    assert engine.iterations == 4 and engine.tokens_decoded == 3  # the extra step's tokens are dropped
    assert engine.busy_ns == 24 * MS


def test_equal_steps_keep_tpot_and_add_one_step_to_ttft_and_e2e(fixed_timer):
    """One request alone, every step 2 ms (a decode-only timer): TTFT and E2E one step longer, TPOT the same."""

    class Decode(fixed_timer):
        def step_ns(self, *shape):
            return 2 * MS

    out = {}
    for on in (False, True):
        engine = Engine(0, Decode(), BlockManager(100, 16), EngineConfig(async_output=on), 1000)
        r = Request(0, 0, 30, 5)
        Cluster([engine]).run([r])
        out[on] = (r.first_token_ns, r.finish_ns, (r.finish_ns - r.first_token_ns) // 4)
    assert out[False] == (2 * MS, 10 * MS, 2 * MS)
    assert out[True] == (4 * MS, 12 * MS, 2 * MS)


def test_energy_stays_on_the_computation_and_adds_up(fixed_timer):
    """The extra step's energy goes to the sequences it runs; the requests' integer mJ sum to the run's."""
    reqs, _, report = serve(fixed_timer, two_requests(), True, energy=True)
    assert sum(r.energy_mj for r in reqs) == report["it_energy_mj"]
    # steps: 10 + 10 + 2 + 2 ms of step energy (1 mJ per us) and no idle gap before the first
    assert report["it_energy_mj"] == 24_000


def test_a_prefill_replica_and_a_pipeline_have_none(fixed_timer):
    """vLLM turns it off with pipeline parallelism; a prefill replica's KV leaves when its step ends."""
    from astra_serving.engine import Pipeline

    assert not Engine(0, fixed_timer(), BlockManager(10, 16), EngineConfig(async_output=True, role="prefill"),
                      1000).async_output
    assert not Engine(0, fixed_timer(), BlockManager(10, 16), EngineConfig(async_output=True), 1000,
                      pipeline=Pipeline(2)).async_output


@pytest.mark.parametrize("words, expected", [
    ([], True),
    (["--no-async-output"], False),
    (["--cuda-graphs", "off"], False),
    (["--cuda-graphs", "off", "--async-output"], True),
])
def test_the_default_is_vllms(words, expected):
    from astra_serving.deployment import async_output

    spec = ServeSpec.from_argv(["--model", "llama3-8b", "--platform", "dgx-a100", "--qps", "1"] + words)
    assert async_output(spec) is expected


def test_pipeline_parallel_refuses_it():
    from astra_sim.errors import ConfigError

    spec = ServeSpec.from_argv(["--model", "llama3-8b", "--platform", "dgx-a100", "--qps", "1", "--pp", "2",
                                "--async-output"])
    with pytest.raises(ConfigError, match="--async-output"):
        spec.resolve()
    from astra_serving.deployment import async_output

    assert async_output(dataclasses.replace(spec, async_output=None)) is False


def test_astra_serve_flag_end_to_end(tmp_path):
    """astra serve --no-async-output: the report says so, and the first token comes one step earlier than by
    default."""
    from astra_sim.cli import main

    ttft = {}
    for flag in ("--async-output", "--no-async-output"):
        out = tmp_path / f"{flag}.json"
        assert main(["serve", "--model", "llama3-8b", "--platform", "dgx-a100", "--qps", "0.01", "--requests", "2",
                     "--prompt-len", "64", "--output-len", "4", "--seed", "1", "--no-cache", flag, "-o",
                     str(out), "-q"]) in (0, None)
        report = json.loads(out.read_text())
        assert report["deployment"]["engine"]["async_output"] is (flag == "--async-output")
        ttft[flag] = report["ttft_ns"]["p50"]
    assert ttft["--async-output"] > ttft["--no-async-output"]


@pytest.mark.parametrize("graphs, expected", [
    # a multi-step run launched as a CUDA graph returns at once: the last batch's tokens leave at its start
    ((1, 2, 4, 8), [(12 * MS, 31 * MS), (32 * MS, 40 * MS)]),
    # eager steps return when they end (the one-step rule)
    ((), [(14 * MS, 31 * MS), (34 * MS, 40 * MS)]),
])
def test_multi_step_runs_deliver_when_their_first_step_returns(fixed_timer, graphs, expected):
    """vLLM v0.6.0 (engine.py's module doc): the callback that hands the last step's tokens to their streams runs
    inside the next step's execute_model, which returns at once for a multi-step run's first step launched as a CUDA
    graph and when it ends otherwise. A (100 + 5 tokens) at 0, B (100 + 2) at 13 ms; 4 scheduler steps, admitted
    prompts alone, 1 ms of host time a pass. By hand: [1, 11] A's prefill; [12, 20] A's 4-step run (A's first token
    leaves at 12 with graphs, at the end of the run's first step, 14, without; A finishes at the run's last step);
    [21, 31] B's prefill, eager (A's finish leaves when it ends, 31); [32, 40] B's decode run, 4 steps although B
    needs one token (vLLM's run has all its steps; B's first token at 32 or 34); B's last token comes at the run's
    first step, so its finish is handed to its stream during the run and leaves when the run's last call returns,
    40 (no request enters meanwhile), and no extra step runs. Without async output each token leaves when its own
    step (or run) ends."""
    def run(async_output):
        config = EngineConfig(async_output=async_output, num_scheduler_steps=4, cuda_graph_sizes=graphs,
                              separate_prefills=True, host_ns_per_schedule=MS)
        engine = Engine(0, fixed_timer(), BlockManager(1000, 16), config, 1000)
        reqs = [Request(0, 0, 100, 5), Request(1, 13 * MS, 100, 2)]
        Cluster([engine]).run(reqs)
        return [(r.first_token_ns, r.finish_ns) for r in reqs], engine

    plain, _ = run(False)
    assert plain == [(11 * MS, 20 * MS), (31 * MS, 40 * MS)]
    times, engine = run(True)
    assert times == expected
    assert engine.iterations == 4


def test_arrivals_during_a_run_share_one_prefill_and_a_later_one_goes_first(fixed_timer):
    """vLLM v0.6.0's admission under multi-step, read at the release (PyPI vllm==0.6.0): ``step_async`` calls
    ``schedule()`` only when the run has no steps left (``_has_remaining_steps``), ``_schedule_default`` admits every
    waiting prompt that fits into one prefill batch and runs decodes only in a pass that admitted none, and an eager
    prefill's call returns when it ends. A (100 + 9 tokens) at 0; B and C (100 + 3) at 13 and 14 ms, inside A's first
    run; D (100 + 3) at 27 ms, inside B and C's prefill. 4 scheduler steps, CUDA graphs, 1 ms a pass. By hand: [1, 11]
    A's prefill; [12, 20] A's run (A's first token at 12, the run's start); [21, 31] B's and C's prefill, one batch;
    [32, 42] D's prefill before any decode (B's and C's first tokens leave when it ends, 42); [43, 51] the run of all
    four (D's first token at its start, 43; B, C and D take their last token at its second step, so they leave when
    the run's last call returns, 51; A at its last step); the extra step [52, 54] delivers A's finish at its start,
    52."""
    config = EngineConfig(async_output=True, num_scheduler_steps=4, cuda_graph_sizes=(1, 2, 4, 8),
                          separate_prefills=True, host_ns_per_schedule=MS)
    engine = Engine(0, fixed_timer(), BlockManager(1000, 16), config, 1000)
    reqs = [Request(0, 0, 100, 9), Request(1, 13 * MS, 100, 3), Request(2, 14 * MS, 100, 3),
            Request(3, 27 * MS, 100, 3)]
    Cluster([engine]).run(reqs)
    assert [(r.first_token_ns // MS, r.finish_ns // MS) for r in reqs] == [(12, 52), (42, 51), (42, 51), (43, 51)]
    assert engine.iterations == 6 and engine.tokens_prefilled == 400  # three prefill batches, B and C's one


@pytest.mark.parametrize("graphs", [(1, 2, 4, 8), ()])
def test_a_finish_inside_a_run_leaves_when_the_run_ends(fixed_timer, graphs):
    """vLLM v0.6.0 (engine.py's module doc): a sequence that ends before its multi-step run's last step gets its
    RequestOutput from the run's last call (``_final_process_outputs`` -> ``_process_model_outputs(is_last_step=
    False)`` -> the callback), so it leaves when that call returns, the run's end, and no extra step runs for it.
    A (100 + 2 tokens) at 0, B (100 + 2) at 16 ms, inside A's run; 4 scheduler steps, 1 ms a pass. By hand: [1, 11]
    A's prefill; [12, 20] A's run (A's first token at 12 with graphs, at its first step's end, 14, without; its last
    token at that first step, its finish at 20); [21, 31] B's prefill; [32, 40] B's run (B's first token at 32 or
    34, its finish at 40)."""
    config = EngineConfig(async_output=True, num_scheduler_steps=4, cuda_graph_sizes=graphs,
                          separate_prefills=True, host_ns_per_schedule=MS)
    engine = Engine(0, fixed_timer(), BlockManager(1000, 16), config, 1000)
    reqs = [Request(0, 0, 100, 2), Request(1, 16 * MS, 100, 2)]
    Cluster([engine]).run(reqs)
    late = 0 if graphs else 2 * MS
    assert [(r.first_token_ns, r.finish_ns) for r in reqs] == [(12 * MS + late, 20 * MS), (32 * MS + late, 40 * MS)]
    assert engine.iterations == 4  # two prefills, two runs: no extra step
