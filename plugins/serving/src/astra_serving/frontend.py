"""A request's path outside the engine step: the serving frontend (``astra serve --frontend``).

Before a request reaches the engine's queue the API server parses the HTTP request and tokenises the prompt; after
the engine delivers a token it is detokenised and streamed to the client. Neither runs on the GPU, and a measured
TTFT or E2E contains both. The frontend is one process with one event loop, and tokenisation is synchronous work
in it, so the requests of one replica go through it one at a time: a request enters the engine when the frontend
has finished the requests before it and then its own (:meth:`Frontend.enter_ns`). A delivered token reaches the
client ``deliver_ns`` later (first tokens and finishes alike, so TPOT does not change).

Presets (``FRONTENDS``), by what was measured:

- ``vllm`` (the default; vLLM's OpenAI-compatible server): the request's way in is a line through the published
  time from sending a streamed chat completion to the response's first byte (HTTP parsing, the chat template and
  tokenisation) at concurrency 1, against the prompt's tokens (``VLLM_FRONTEND_POINTS``): 2.53 ms per request and
  2.20 us per prompt token (least squares; the largest residual 0.59 ms). The way out is the same source's
  incremental detokenisation (0.257 ms for 128 streamed tokens: 2.0 us a token) and the client's parse of one
  server-sent-event chunk (1.9 us).
- ``none``: no frontend, a benchmark that feeds token ids to the engine in its own process (TensorRT-LLM's
  gptSessionBenchmark, LMDeploy's profile_generation.py, vLLM's offline ``LLM`` given token ids).

What is assumed: the measurement is vLLM 0.19 (V1) on an AMD MI300X host with MiniMax-M2.5's tokenizer (200k
vocabulary); it stands for every vLLM version, tokenizer and host CPU (vLLM v0.6.0's server is also a separate
process since vllm-project/vllm#6883). Not modelled: the frontend's work per streamed token while other requests
wait for it (at the published 2 us a token it serves 500,000 tokens/s), the engine's inter-process hop, network
time between client and server.
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_sim.errors import ConfigError

#: vLLM's OpenAI server, a streamed /v1/chat/completions at concurrency 1: (prompt tokens per request, time from the
#: request sent to the response's first byte, ns). Source: andyluo7/cpu-gpu-codesign-agentic-inference,
#: results/phase2-deepdive/server_decomposition.json (commit 7006a687; vLLM 0.19.0, MiniMax-M2.5 FP8, 2 x MI300X;
#: scripts/06_server_decomposition.py: t_http_overhead_ms = first byte - send): scenarios single_1k, single_8k,
#: single_32k, single_100k, "t_http_overhead_ms_mean" 6.998852640390396, 15.202923119068146, 46.5388490508,
#: 131.42361926535764; tokens per request = the run's "vllm:prompt_tokens_total" delta over its "num_requests":
#: 9950 / 5, 29950 / 5, 59112 / 3, 175680 / 3.
VLLM_FRONTEND_POINTS = ((1990, 6_998_853), (5990, 15_202_923), (19704, 46_538_849), (58560, 131_423_619))
#: incremental detokenisation of one streamed token, ns. Source: the same repository,
#: results/phase2_tokenizer_benchmark.json, the 679-token row's "incremental_decode" "1" "mean_ms"
#: 0.25687720626592636 for 128 output tokens ("Incremental detokenize (streaming, 128 output tokens): 0.27ms
#: total", RESULTS_SUMMARY.md): 256,877 / 128 = 2,007 ns.
DETOKENIZE_NS_PER_TOKEN = 2_007
#: the client's parse of one server-sent-event chunk, ns. Source: RESULTS_SUMMARY.md, "SSE chunk parse | per chunk
#: | 1.9 µs".
SSE_CHUNK_NS = 1_900


def fit_line(points):
    """``(intercept, slope)`` of the least-squares line through ``((x, y), ...)``."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


@dataclass(frozen=True)
class Frontend:
    """One frontend's costs: ``ns_per_request`` + ``ns_per_prompt_token`` x prompt tokens on the way in (one
    request at a time per replica), ``deliver_ns`` on the way out of every delivered token."""

    name: str
    ns_per_request: int = 0
    ns_per_prompt_token: float = 0.0
    deliver_ns: int = 0

    def ingress_ns(self, prompt_tokens):
        """The frontend's time for one request of ``prompt_tokens`` before it reaches the engine (int ns)."""
        return self.ns_per_request + round(self.ns_per_prompt_token * prompt_tokens)

    @property
    def active(self):
        return bool(self.ns_per_request or self.ns_per_prompt_token or self.deliver_ns)

    def to_dict(self):
        return {"name": self.name, "ns_per_request": self.ns_per_request,
                "ns_per_prompt_token": self.ns_per_prompt_token, "deliver_ns": self.deliver_ns}


class FrontendQueue:
    """The frontends of a deployment's replicas: each takes one request at a time (:meth:`enter_ns`)."""

    def __init__(self, frontend):
        self.frontend = frontend
        self._free = {}  # replica -> when its frontend is free

    def enter_ns(self, replica, arrival_ns, prompt_tokens):
        """When a request arriving at ``arrival_ns`` reaches ``replica``'s engine: after the requests before it and
        its own ingress."""
        start = max(arrival_ns, self._free.get(replica, 0))
        self._free[replica] = end = start + self.frontend.ingress_ns(prompt_tokens)
        return end


def _vllm():
    intercept, slope = fit_line(VLLM_FRONTEND_POINTS)
    return Frontend("vllm", round(intercept), slope, DETOKENIZE_NS_PER_TOKEN + SSE_CHUNK_NS)


FRONTENDS = {"vllm": _vllm(), "none": Frontend("none")}


def get_frontend(name):
    """The preset ``name`` (``--frontend``); a ConfigError listing the presets otherwise."""
    try:
        return FRONTENDS[name]
    except KeyError:
        raise ConfigError(f"--frontend must be one of {', '.join(FRONTENDS)}, got {name!r}") from None


__all__ = ["FRONTENDS", "Frontend", "FrontendQueue", "get_frontend", "fit_line"]
