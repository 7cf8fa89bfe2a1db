"""Where a prompt's first token is sampled (``astra serve --first-token-from``, ``EngineConfig.first_token_from_decode``):
vLLM's prefill samples it from the prompt's last position; LMDeploy TurboMind's prefill computes the prompt but its
last token, which the next decode step computes and samples from (engine.FIRST_TOKEN_FROM). Hand-computed times, the
lazy decoders against the plain loop, the refusal with --disaggregate, and the flag end to end."""

import dataclasses
import json

import pytest

from astra_serving.cluster import Cluster
from astra_serving.engine import Engine, EngineConfig
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request
from astra_serving.spec import ServeSpec

MS = 1_000_000


class ShapeTimer:
    """10 ms for a step with any prefill, 2 ms for a decode-only one; keeps every shape it timed."""

    def __init__(self):
        self.shapes = []

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        self.shapes.append((prefill, decode, context))
        return 10 * MS if prefill else 2 * MS


def serve(requests, decode_first, **config):
    timer = ShapeTimer()
    engine = Engine(0, timer, BlockManager(1000, 16), EngineConfig(first_token_from_decode=decode_first, **config),
                    1000)
    reqs = [dataclasses.replace(r) for r in requests]
    Cluster([engine]).run(reqs)
    return reqs, engine, timer.shapes


def test_one_request_by_hand():
    """A 100-token prompt and 3 output tokens, alone. From the prefill: [0, 10] the prefill of 100 (token 1), then
    two decodes [10, 12], [12, 14]. From a decode: [0, 10] the prefill of 99, [10, 12] the decode of the prompt's last
    token at context 100 (token 1), [12, 14] and [14, 16] (tokens 2 and 3): TTFT and E2E one decode step longer, TPOT
    the same, one iteration more."""
    (plain,), engine, shapes = serve([Request(0, 0, 100, 3)], False)
    assert (plain.first_token_ns, plain.finish_ns) == (10 * MS, 14 * MS)
    assert engine.iterations == 3 and shapes[0] == (100, 0, 0)
    (late,), engine, shapes = serve([Request(0, 0, 100, 3)], True)
    assert (late.first_token_ns, late.finish_ns) == (12 * MS, 16 * MS)
    assert shapes[:2] == [(99, 0, 0), (0, 1, 100)]  # the prefill leaves the last token to the first decode
    assert engine.iterations == 4 and engine.tokens_prefilled == 99 and engine.tokens_decoded == 3  # 2 before
    assert (late.finish_ns - late.first_token_ns) // 2 == (plain.finish_ns - plain.first_token_ns) // 2  # TPOT


def test_two_requests_by_hand():
    """A (100-token prompt, 3 tokens) at 0, B (50, 2) at 0.5 ms, chunked prefill (a prompt joins the decodes).
    From a decode: [0, 10] A's 99; [10, 20] A's last prompt token (a decode) with B's 49 (A's token 1); [20, 22] both
    decode (A's token 2, B's token 1); [22, 24] (A's 3, B's 2: both finish). From the prefill: [0, 10] A's 100 (token
    1); [10, 20] A's decode and B's 50 (A's 2, B's 1); [20, 22] (A's 3, B's 2)."""
    requests = [Request(0, 0, 100, 3), Request(1, MS // 2, 50, 2)]
    (a, b), _, _ = serve(requests, False)
    assert [(a.first_token_ns, a.finish_ns), (b.first_token_ns, b.finish_ns)] == [(10 * MS, 22 * MS),
                                                                                  (20 * MS, 22 * MS)]
    (a, b), _, shapes = serve(requests, True)
    assert [(a.first_token_ns, a.finish_ns), (b.first_token_ns, b.finish_ns)] == [(20 * MS, 24 * MS),
                                                                                  (22 * MS, 24 * MS)]
    assert shapes == [(99, 0, 0), (49, 1, 100), (0, 2, 75), (0, 2, 76)]


def test_separate_prefills_and_a_one_token_prompt():
    """V0's separate prefills: a prefill of P - 1 alone, then the decode step samples the first token. A one-token
    prompt has no position before its last: it goes straight to a decode step (TurboMind prefills only a prompt with
    more than one position missing: ``if (missing > 1)`` in ContextDecode)."""
    (r,), _, shapes = serve([Request(0, 0, 40, 2)], True, separate_prefills=True)
    assert shapes == [(39, 0, 0), (0, 1, 40), (0, 1, 41)] and r.first_token_ns == 12 * MS
    (r,), _, shapes = serve([Request(0, 0, 1, 2)], True)
    assert shapes[0] == (0, 1, 1) and r.first_token_ns == 2 * MS


def test_disaggregation_refuses_it():
    from astra_sim.errors import ConfigError

    spec = ServeSpec.from_argv(["--model", "llama3-8b", "--platform", "dgx-a100", "--qps", "1", "--disaggregate",
                                "1:1", "--first-token-from", "decode"])
    with pytest.raises(ConfigError, match="--first-token-from decode"):
        spec.resolve()


def test_astra_serve_flag_end_to_end(tmp_path):
    """astra serve --first-token-from decode: the report says so, TTFT is longer by about one decode step (a
    request alone: the TPOT), and an unknown value is refused."""
    from astra_sim.cli import main

    out = {}
    for value in ("prefill", "decode"):
        path = tmp_path / f"{value}.json"
        assert main(["serve", "--model", "llama3-8b", "--platform", "dgx-a100", "--qps", "0.01", "--requests", "2",
                     "--prompt-len", "64", "--output-len", "4", "--seed", "1", "--no-async-output",
                     "--first-token-from", value, "-o", str(path), "-q"]) in (0, None)
        out[value] = json.loads(path.read_text())
    assert out["decode"]["deployment"]["engine"]["first_token_from"] == "decode"
    extra = out["decode"]["ttft_ns"]["p50"] - out["prefill"]["ttft_ns"]["p50"]
    tpot = out["prefill"]["tpot_ns"]["p50"]
    assert 0.8 * tpot < extra < 1.2 * tpot
    with pytest.raises(SystemExit):
        main(["serve", "--model", "llama3-8b", "--platform", "dgx-a100", "--qps", "1", "--first-token-from", "x"])
