"""At most N waiting prompts admitted per iteration (``astra serve --max-prefill-seqs``,
``EngineConfig.max_prefill_seqs``): 1 with ``--separate-prefills`` is LMDeploy TurboMind v0.1.0a1's prefill, every
prompt its own context-decode sub-batch (``engine.MAX_PREFILL_SEQS_TURBOMIND``). Hand-computed times, the lazy
decoders against the plain loop, and the flag end to end."""

import dataclasses
import json

from astra_serving.cluster import Cluster
from astra_serving.engine import MAX_PREFILL_SEQS_TURBOMIND, Engine, EngineConfig
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request

MS = 1_000_000


class ShapeTimer:
    """10 ms for a step with any prefill, 2 ms for a decode-only one; keeps every shape it timed."""

    def __init__(self):
        self.shapes = []

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        self.shapes.append((prefill, decode))
        return 10 * MS if prefill else 2 * MS


def serve(requests, lazy=True, **config):
    timer = ShapeTimer()
    cfg = EngineConfig(separate_prefills=True, chunked_prefill=False, max_num_batched_tokens=1000, **config)
    engine = Engine(0, timer, BlockManager(1000, 16), cfg, 1000)
    engine.lazy_decodes = lazy
    reqs = [dataclasses.replace(r) for r in requests]
    Cluster([engine]).run(reqs)
    return reqs, engine, timer.shapes


def four_at_once():
    # four 100-token prompts at 0, 2 output tokens each (the first arrival is scheduled before the others arrive)
    return [Request(i, 0, 100, 2) for i in range(4)]


def test_four_prompts_by_hand():
    """No limit: [0, 10] the first prompt (it arrives first and starts the engine), [10, 20] one prefill of the
    other three (300 tokens), [20, 22] one decode of four. One prompt an iteration (TurboMind's rule): a prefill
    each in [0, 10], [10, 20], [20, 30], [30, 40] (first tokens at 10, 20, 30, 40 ms), then [40, 42] the four
    decodes; the two iterations that left prompts waiting count against the limit. Two an iteration: 1, 2, 1."""
    assert MAX_PREFILL_SEQS_TURBOMIND == 1
    reqs, engine, shapes = serve(four_at_once())
    assert shapes == [(100, 0), (300, 0), (0, 4)]
    assert [(r.first_token_ns, r.finish_ns) for r in reqs] == [(10 * MS, 22 * MS)] + [(20 * MS, 22 * MS)] * 3
    assert "max_prefill_seqs" not in engine.limited
    reqs, engine, shapes = serve(four_at_once(), max_prefill_seqs=1)
    assert shapes == [(100, 0)] * 4 + [(0, 4)]
    assert [(r.first_token_ns, r.finish_ns) for r in reqs] == [(k * 10 * MS, 42 * MS) for k in (1, 2, 3, 4)]
    assert engine.limited["max_prefill_seqs"] == 2 and engine.iterations == 5
    reqs, _, shapes = serve(four_at_once(), max_prefill_seqs=2)
    assert shapes == [(100, 0), (200, 0), (100, 0), (0, 4)]
    assert [r.first_token_ns for r in reqs] == [10 * MS, 20 * MS, 20 * MS, 30 * MS]


def test_lazy_decoders_give_the_plain_loop_times():
    """Staggered arrivals of mixed lengths: the lazy decoders give every request the plain loop's times."""
    reqs = [Request(i, i * 3 * MS, 40 + 17 * i, 3 + (i * 5) % 7) for i in range(12)]
    lazy, _, _ = serve(reqs, max_prefill_seqs=1)
    plain, _, _ = serve(reqs, lazy=False, max_prefill_seqs=1)
    assert [(r.first_token_ns, r.finish_ns) for r in lazy] == [(r.first_token_ns, r.finish_ns) for r in plain]


def test_astra_serve_flag_end_to_end(tmp_path):
    """astra serve --max-prefill-seqs 1: the report says so and names the limit (four prompts at once, three of
    them left waiting by it once each)."""
    from astra_sim.cli import main

    path = tmp_path / "out.json"
    assert main(["serve", "--model", "llama3-8b", "--platform", "dgx-a100", "--qps", "1000000", "--requests", "4",
                 "--prompt-len", "64", "--output-len", "4", "--seed", "1", "--no-async-output",
                 "--no-chunked-prefill", "--separate-prefills", "--max-num-batched-tokens", "8192",
                 "--max-prefill-seqs", "1", "-o", str(path), "-q"]) in (0, None)
    out = json.loads(path.read_text())
    assert out["deployment"]["engine"]["max_prefill_seqs"] == 1
    assert out["limits"]["max_prefill_seqs"] > 0
