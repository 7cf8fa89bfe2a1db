"""``--host-us-per-schedule trtllm-python``: TensorRT-LLM's Python runtime's host time per step
(engine.HOST_US_PER_STEP_TRTLLM_PYTHON), re-derived from its published benchmark, and charged once per step."""

from __future__ import annotations

import pytest

from astra_serving.cluster import Cluster
from astra_serving.engine import (HOST_US_PER_SCHEDULE_PRESETS, HOST_US_PER_STEP_TRTLLM_PYTHON, Engine, EngineConfig)
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request
from astra_serving.spec import ServeSpec
from astra_sim.errors import ConfigError

#: NVIDIA/TensorRT-LLM benchmarks/python/README.md (read at 05316d33), "Expected outputs" of the Python runtime
#: benchmark: gpt_350m, float16, plugin mode, input_length 60, output_length 20, compute_cap sm80: latency(ms)
README_LATENCY_MS = {1: 41.362, 8: 46.013, 64: 64.981}
#: gpt_350m as the README's lines give it (num_layers 24, hidden_size 1024, num_heads 16, vocab_size 51200), with
#: GPT's FFN of 4 x hidden and GELU
GPT_350M = {"layers": 24, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 51200, "gated": False,
            "seq_len": 2048, "dtype": "fp16", "inference_elementwise": True}


def _gpu_ms(timer, batch, prompt=60, outputs=20):
    """The simulated GPU time of one generate() call: the context step of ``batch`` prompts and ``outputs - 1``
    generation steps, each without host launches (graph steps: TensorRT launches from C++, its cost is in the
    host share being derived)."""
    ns = timer.simulate(batch * prompt, 0, 0, graph=True)[0]
    ns += sum(timer.simulate(0, batch, context, graph=True)[0] for context in range(prompt + 1, prompt + outputs))
    return ns / 1e6


def test_the_preset_is_the_readme_latency_less_the_simulated_gpu_time_over_its_20_steps(tmp_path):
    from astra_serving.steptime import Layout, StepTimer

    timer = StepTimer(Layout(model=GPT_350M, platform="dgx-a100"), exact=True, cache=False, workdir=str(tmp_path))
    per_step_us = {b: (README_LATENCY_MS[b] - _gpu_ms(timer, b)) / 20 * 1000 for b in (1, 8)}
    # the constant is the batch-1 row's (30.38 ms simulated: (41.362 - 30.38) / 20 = 549 us a step); batch 8 gives
    # (46.013 - 33.65) / 20 = 618
    assert per_step_us[1] == pytest.approx(HOST_US_PER_STEP_TRTLLM_PYTHON, abs=25.0)
    assert 580.0 < per_step_us[8] < 660.0
    assert HOST_US_PER_SCHEDULE_PRESETS["trtllm-python"] == HOST_US_PER_STEP_TRTLLM_PYTHON == 549.0


def test_the_flag_takes_the_runtime_name_or_microseconds():
    base = ["--model", "llama2-7b", "--platform", "dgx-a100", "--qps", "1"]
    assert ServeSpec.from_argv(base).host_us_per_schedule == 0.0
    assert ServeSpec.from_argv(base + ["--host-us-per-schedule", "trtllm-python"]).host_us_per_schedule == 549.0
    assert ServeSpec.from_argv(base + ["--host-us-per-schedule", "TRTLLM-Python"]).host_us_per_schedule == 549.0
    assert ServeSpec.from_argv(base + ["--host-us-per-schedule", "12.5"]).host_us_per_schedule == 12.5
    assert ServeSpec.from_mapping({"model": "llama2-7b", "platform": "dgx-a100", "qps": 1,
                                   "host_us_per_schedule": "trtllm-python"}).host_us_per_schedule == 549.0
    for bad in ("-1", "nan", "vllm", ""):
        with pytest.raises(ConfigError, match="host-us-per-schedule"):
            ServeSpec.from_argv(base + ["--host-us-per-schedule", bad])


class LinearTimer:
    """A stand-in step time: 1 ms + 10 us per prefill token + 20 us per decode sequence."""

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        return 1_000_000 + 10_000 * prefill + 20_000 * decode


def _isolated(host_ns_per_schedule):
    engine = Engine(0, LinearTimer(), BlockManager(1000, 16, False),
                    EngineConfig(host_ns_per_schedule=host_ns_per_schedule), 1000)
    request = Request(0, 0, 128, 20)
    Cluster([engine]).run([request])
    return request


def test_an_isolated_request_pays_it_once_in_each_of_its_20_steps():
    host = int(HOST_US_PER_STEP_TRTLLM_PYTHON * 1000)  # 549,000 ns
    plain, charged = _isolated(0), _isolated(host)
    prefill = 1_000_000 + 10_000 * 128
    decode = 1_000_000 + 20_000
    assert plain.first_token_ns == prefill and plain.finish_ns == prefill + 19 * decode
    assert charged.first_token_ns == prefill + host  # the context step
    assert charged.finish_ns == prefill + 19 * decode + 20 * host  # and each of the 19 generation steps
