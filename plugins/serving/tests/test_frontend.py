"""The request's path outside the engine step (frontend.py, ``astra serve --frontend``): the vLLM preset's terms
against their published points, by hand; one request at a time through a replica's frontend; the delivery delay on
first tokens and finishes (TPOT unchanged); ``none`` leaves every time as it was; the flag end to end."""

import argparse
import dataclasses
import json

import pytest

from astra_serving.cluster import Cluster
from astra_serving.engine import Engine, EngineConfig
from astra_serving.frontend import (DETOKENIZE_NS_PER_TOKEN, FRONTENDS, SSE_CHUNK_NS, VLLM_FRONTEND_POINTS, Frontend,
                                    FrontendQueue, fit_line, get_frontend)
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request
from astra_sim.errors import ConfigError

MS = 1_000_000


class FixedTimer:
    """10 ms for a step with any prefill, 2 ms for a decode-only one."""

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        return 10 * MS if prefill else 2 * MS


def run(requests, frontend, replicas=1):
    engines = [Engine(i, FixedTimer(), BlockManager(1000, 16), EngineConfig(), 1000) for i in range(replicas)]
    cluster = Cluster(engines, frontend=frontend)
    reqs = [dataclasses.replace(r) for r in requests]
    cluster.run(reqs)
    return reqs


def test_fit_line_by_hand():
    # y = 3 + 2x exactly, and a symmetric residual pair that leaves the line where it is
    assert fit_line([(0, 3), (1, 5), (2, 7)]) == pytest.approx((3.0, 2.0))
    # means 1.5 and 2; sum dx dy = 3 + 0 + 0 + 3 = 6, sum dx^2 = 5: slope 1.2, intercept 2 - 1.2 x 1.5 = 0.2
    assert fit_line([(0, 0), (1, 2), (2, 2), (3, 4)]) == pytest.approx((0.2, 1.2))


def test_vllm_preset_is_the_line_through_the_published_points():
    """By hand from the four points (tokens, ns): mean x = 86244 / 4 = 21561, mean y = 200163244 / 4 = 50040811;
    slope = sum dx dy / sum dx^2 = 2.2036 us per token, intercept 2.5298 ms; every point within 0.6 ms of it."""
    vllm = FRONTENDS["vllm"]
    assert vllm.ns_per_prompt_token == pytest.approx(2203.57, abs=0.01)
    assert vllm.ns_per_request == 2_529_799
    for tokens, measured in VLLM_FRONTEND_POINTS:
        assert abs(vllm.ingress_ns(tokens) - measured) < 600_000
    # a 228-token ShareGPT-like prompt: 2,529,799 + round(2203.574 x 228) = 2,529,799 + 502,415
    assert vllm.ingress_ns(228) == 3_032_214
    assert vllm.deliver_ns == DETOKENIZE_NS_PER_TOKEN + SSE_CHUNK_NS == 3_907
    assert FRONTENDS["none"].ingress_ns(10_000) == 0 and not FRONTENDS["none"].active


def test_one_request_at_a_time_per_replica():
    """1 ms + 1 us per token: replica 0 gets requests at 0 (1000 tokens: 2 ms), 0.5 ms (0 tokens: 1 ms, after the
    first: 2 -> 3 ms) and 10 ms (free again: 11 ms); replica 1's frontend is its own (0 -> 2 ms)."""
    queue = FrontendQueue(Frontend("t", MS, 1000.0))
    assert queue.enter_ns(0, 0, 1000) == 2 * MS
    assert queue.enter_ns(0, MS // 2, 0) == 3 * MS
    assert queue.enter_ns(1, 0, 1000) == 2 * MS
    assert queue.enter_ns(0, 10 * MS, 0) == 11 * MS


def test_ingress_and_delivery_in_a_run_by_hand():
    """Frontend 1 ms + 10 us per prompt token, delivery 0.5 ms. A (100 prompt tokens, 3 outputs) at 0 enters the
    engine at 1 + 1 = 2 ms; B (100 tokens, 2 outputs) at 0.5 ms waits for A's ingress and enters at 2 + 2 = 4 ms.
    Steps: [2, 12] A's prefill (A token 1); [12, 22] A's decode and B's prefill (A 2, B 1); [22, 24] both decode
    (A 3, B 2: both finish). Each delivery 0.5 ms later: A first 12.5, finish 24.5; B first 22.5, finish 24.5.
    Without the frontend: A's prefill [0, 10], B's with A's decode [10, 20], both decode [20, 22]."""
    frontend = Frontend("t", MS, 10_000.0, MS // 2)
    requests = [Request(0, 0, 100, 3), Request(1, MS // 2, 100, 2)]
    a, b = run(requests, frontend)
    assert (a.first_token_ns, a.finish_ns, a.scheduled_ns) == (12 * MS + MS // 2, 24 * MS + MS // 2, 2 * MS)
    assert (b.first_token_ns, b.finish_ns, b.scheduled_ns) == (22 * MS + MS // 2, 24 * MS + MS // 2, 12 * MS)
    plain = run(requests, None)
    assert [(r.first_token_ns, r.finish_ns) for r in plain] == [(10 * MS, 22 * MS), (20 * MS, 22 * MS)]
    assert [(r.first_token_ns, r.finish_ns) for r in run(requests, FRONTENDS["none"])] == [
        (r.first_token_ns, r.finish_ns) for r in plain]


def test_delivery_leaves_tpot_alone():
    requests = [Request(i, i * 50 * MS, 64, 8) for i in range(4)]
    plain = run(requests, None)
    shifted = run(requests, Frontend("t", 0, 0.0, 777))
    for p, s in zip(plain, shifted):
        assert s.first_token_ns - p.first_token_ns == s.finish_ns - p.finish_ns == 777


def test_get_frontend_refuses_an_unknown_name():
    assert get_frontend("none") is FRONTENDS["none"]
    with pytest.raises(ConfigError, match="--frontend must be one of vllm, none, got 'sglang'"):
        get_frontend("sglang")


def test_astra_serve_frontend_flag_end_to_end(capsys):
    """astra serve --frontend none against the default (vllm): alone (QPS 0.01), each request's TTFT and E2E grow
    by the ingress of its 128-token prompt and the delivery, exactly; TPOT does not change; the report says which
    frontend ran; a name that is no preset is refused by the parser."""
    from astra_sim.cli import main

    common = ["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "0.01", "--requests", "2",
              "--prompt-len", "128", "--output-len", "4", "--json", "-q"]
    reports = {}
    for name in ("vllm", "none"):
        assert main(common + ["--frontend", name]) == 0
        reports[name] = json.loads(capsys.readouterr().out)
    vllm, none = reports["vllm"], reports["none"]
    assert vllm["deployment"]["engine"]["frontend"]["name"] == "vllm"
    assert none["deployment"]["engine"]["frontend"] == {"name": "none", "ns_per_request": 0,
                                                        "ns_per_prompt_token": 0.0, "deliver_ns": 0}
    extra = FRONTENDS["vllm"].ingress_ns(128) + FRONTENDS["vllm"].deliver_ns
    assert vllm["ttft_ns"]["p50"] - none["ttft_ns"]["p50"] == extra
    assert vllm["e2e_ns"]["max"] - none["e2e_ns"]["max"] == extra
    assert vllm["tpot_ns"]["p50"] == none["tpot_ns"]["p50"]
    with pytest.raises((SystemExit, argparse.ArgumentError), match="invalid choice: 'sglang'|2"):
        main(common + ["--frontend", "sglang"])
