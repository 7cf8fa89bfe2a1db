"""``ServeSpec``: one serving deployment under load, as every door states it (``astra serve``, ``astra search
--serve``, a sweep's serving points, Python).

The spec owns its flags: :meth:`ServeSpec.add_cli_args` defines ``astra serve``'s options (the command adds only
how to show or write the report), :meth:`ServeSpec.from_cli_args` reads them back, and
:meth:`ServeSpec.from_mapping` turns a mapping (a sweep's ``serve:`` block, Python keywords) into the same spec
through the same parser, so types, checks and defaults are the command's whichever door a question comes through.
:func:`astra_serving.serve` runs a spec.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from astra_sim.errors import ConfigError

#: the spec's fields that are not ``astra serve`` options of the same name
_NOT_OPTIONS = ("run",)


def qps_list(text):
    """One or more positive rates, comma-separated, as a tuple of floats."""
    try:
        values = tuple(float(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, comma-separated, got {text!r}")
    return values


def host_us_per_schedule(text):
    """``--host-us-per-schedule``'s type: microseconds (a number >= 0) or the name of a published runtime's value
    (:data:`.engine.HOST_US_PER_SCHEDULE_PRESETS`: ``trtllm-python``, TensorRT-LLM's Python runtime)."""
    from .engine import HOST_US_PER_SCHEDULE_PRESETS

    name = str(text).strip().lower()
    if name in HOST_US_PER_SCHEDULE_PRESETS:
        return HOST_US_PER_SCHEDULE_PRESETS[name]
    try:
        value = float(name)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected microseconds >= 0 or one of "
                                         f"{', '.join(sorted(HOST_US_PER_SCHEDULE_PRESETS))}, got {text!r}")
    return value


def qps_text(text):
    """``--qps``'s type: the text, checked by :func:`qps_list` (a list of rates is the command's QPS sweep)."""
    qps_list(text)
    return str(text).strip()


@dataclass
class ServeSpec:
    """One deployment and its requests: the model and its replicas' layout on a platform, the request source,
    vLLM's engine settings, the step simulator's and the SLOs. Fields are ``astra serve``'s option dests, but
    ``run``: ``astra run`` options (by name) for every simulated step (``--run-arg`` on the command line)."""

    platform: str | None = None
    model: str | None = None
    preset: str | None = None
    nodes: int | None = None
    tp: int = 1
    pp: int = 1
    virtual_engines: int | None = None
    ep: int = 1
    dtype: str | None = None
    replicas: int = 1
    disaggregate: str | None = None
    nic_gbit: float | None = None
    router: str = "round-robin"
    # requests
    trace: str | None = None
    qps: float | None = None
    requests: int | None = None
    prompt_len: str = "512"
    output_len: str = "128"
    prune: str | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    shared_prefix: int = 0
    seed: int = 0
    save_trace: str | None = None
    # engine
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    no_chunked_prefill: bool = False
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str = "auto"  # vLLM's --kv-cache-dtype: auto (the model's dtype) or an FP8 cache (capacity.py)
    max_model_len: int | None = None
    policy: str = "fcfs"
    preemption: str = "recompute"
    swap_gbps: float = 50.0
    prefix_caching: bool = False
    num_scheduler_steps: int = 1
    separate_prefills: bool = False
    host_us_per_seq: float | None = None
    host_us_per_schedule: float = 0.0
    cuda_graphs: str = "vllm"
    async_output: bool | None = None  # None: vLLM's default (deployment.async_output)
    frontend: str = "vllm"  # the request's path outside the engine step (frontend.py)
    first_token_from: str = "prefill"  # prefill (vLLM) | decode (TurboMind): engine.FIRST_TOKEN_FROM
    sampler: str = "vllm-v0"  # the sampler's kernels after each step (sampler.py): vllm-v0 | none
    embedding: str = "vocab-parallel"  # the embedding table at TP > 1 (astra workload llm --inference-embedding)
    # step simulator
    bucket_ratio: float | None = None
    exact_shapes: bool = False
    no_cache: bool = False  # the persistent step cache (stepcache.py) is neither read nor written
    step_elementwise: bool = True
    cudnn_version: str | None = None  # astra run's --cudnn-version for every step (Blackwell's cuDNN attention rows)
    run: dict = field(default_factory=dict)
    # SLOs and files the run writes
    slos: tuple = ()  # percentile SLOs: ((metric, percentile, target ms), ...), e.g. (("ttft", 99, 500.0),)
    slo_ttft: float | None = None  # deprecated (--slo-ttft MS): read as a p90 SLO
    slo_tpot: float | None = None  # deprecated (--slo-tpot MS)
    timeline: str | None = None

    # ------------------------------------------------------------------ command line
    @staticmethod
    def add_cli_args(p):
        """``astra serve``'s options (the command adds its output flags: -o/--output, --json, --requests-csv, -q):
        the shared model flags (``add_model_flags``) and ``--platform`` (``add_platform_flags``); ``--nodes`` is
        per replica here."""
        from astra_sim.cliutil import add_platform_flags, non_negative_float, positive_float, positive_int
        from astra_workload_generators.llm.spec import add_model_flags

        from .capacity import KV_CACHE_DTYPE_BYTES
        from .engine import FIRST_TOKEN_FROM
        from .sampler import SAMPLERS

        add_model_flags(p, required=True, help_suffix=" (the serving steps' model)")
        add_platform_flags(p, required=True, nodes=False)
        p.add_argument("--nodes", type=positive_int, metavar="N",
                       help="nodes per replica (default: the fewest that hold TP x PP x EP GPUs; checked when given)")
        p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size of a replica")
        p.add_argument("--pp", type=positive_int, default=1, help="pipeline stages of a replica, run as vLLM V0 "
                       "runs them: one virtual engine per stage (--virtual-engines), whose batches follow each other "
                       "through the stages")
        p.add_argument("--virtual-engines", type=positive_int, default=None, metavar="N",
                       help="with --pp: schedulers per replica, each with 1/N of the KV cache, whose iterations "
                       "overlap on the stages (default --pp, vLLM V0's; 1: one batch at a time through the whole "
                       "pipeline)")
        p.add_argument("--ep", type=positive_int, default=1, help="expert-parallel size (MoE; attention "
                       "data-parallel over the EP ranks, each taking its share of the batch)")
        p.add_argument("--dtype", default=None, help="activation/KV type (astra workload llm --dtype; default bf16)")
        p.add_argument("--replicas", type=positive_int, default=1, metavar="R", help="model replicas behind the "
                       "router")
        p.add_argument("--disaggregate", metavar="P:D",
                       help="prefill/decode disaggregation: P prefill replicas and D decode replicas (instead of "
                       "--replicas); the KV cache moves between them over the network")
        p.add_argument("--nic-gbit", type=positive_float, metavar="GBIT",
                       help="with --disaggregate: NIC bandwidth per GPU (Gb/s) the KV transfer runs on (default: the "
                       "platform's)")
        p.add_argument("--router", default="round-robin", choices=("round-robin", "least-loaded", "kv-aware"))
        work = p.add_argument_group("requests (a generator, or --trace)")
        work.add_argument("--trace", metavar="FILE", help="requests from a JSONL or CSV trace (astra serve's "
                          "columns, the Azure LLM inference trace's TIMESTAMP,ContextTokens,GeneratedTokens, or "
                          "BurstGPT's)")
        work.add_argument("--qps", type=qps_text, metavar="Q[,Q...]",
                          help="generated requests per second (required without --trace); several, comma-separated: "
                          "a QPS sweep in one process (the report's qps_sweep: one report per QPS; astra plot draws "
                          "the throughput-latency curve)")
        work.add_argument("--requests", type=positive_int, default=None, metavar="N", help="generated requests; "
                          "with --trace: the first N (default 1000 generated, the whole trace)")
        work.add_argument("--prompt-len", default="512", metavar="DIST",
                          help="prompt tokens: N, uniform:LO:HI, exp:MEAN or lognormal:MEAN:CV (default 512)")
        work.add_argument("--output-len", default="128", metavar="DIST",
                          help="output tokens, as --prompt-len (default 128)")
        work.add_argument("--prune", metavar="MIN:MAX_PROMPT:MAX_TOTAL", default=None,
                          help="draw again every request whose prompt or output is shorter than MIN, prompt longer "
                               "than MAX_PROMPT or prompt + output longer than MAX_TOTAL, as vLLM's and SGLang's "
                               "benchmark_serving prune ShareGPT (4:1024:2048)")
        work.add_argument("--arrival", default="poisson", choices=("poisson", "gamma"))
        work.add_argument("--burstiness", type=positive_float, default=1.0, metavar="CV",
                          help="gamma arrivals: coefficient of variation of the gaps (1: Poisson)")
        work.add_argument("--shared-prefix", type=int, default=0, metavar="TOKENS",
                          help="generated requests share their first TOKENS prompt tokens (a system prompt; for "
                          "--prefix-caching)")
        work.add_argument("--seed", type=int, default=0)
        work.add_argument("--save-trace", metavar="FILE.jsonl", help="write the requests served (a JSONL trace)")
        eng = p.add_argument_group("engine (vLLM's names and defaults)")
        eng.add_argument("--max-num-seqs", type=positive_int, default=256)
        eng.add_argument("--max-num-batched-tokens", type=positive_int, default=2048)
        eng.add_argument("--no-chunked-prefill", action="store_true",
                         help="admit a prompt only whole (needs --max-num-batched-tokens >= the model's context)")
        eng.add_argument("--block-size", type=positive_int, default=16, help="KV-cache block (tokens)")
        eng.add_argument("--gpu-memory-utilization", type=positive_float, default=0.9)
        eng.add_argument("--kv-cache-dtype", default="auto", choices=tuple(KV_CACHE_DTYPE_BYTES),
                         help="the KV cache's element type, as vLLM's --kv-cache-dtype: auto (default: the model's "
                         "--dtype) or fp8 / fp8_e4m3 / fp8_e5m2 (one byte per element: the same memory holds twice "
                         "the tokens of a bf16 cache; decode attention is still timed on a --dtype cache)")
        eng.add_argument("--max-model-len", type=positive_int, help="context limit (default: the model's)")
        eng.add_argument("--policy", default="fcfs", choices=("fcfs", "priority"))
        eng.add_argument("--preemption", default="recompute", choices=("recompute", "swap"))
        eng.add_argument("--swap-gbps", type=positive_float, default=50.0, metavar="GB_S",
                         help="host<->GPU copy bandwidth per GPU for --preemption swap (GB/s; default 50, PCIe 5 x16)")
        eng.add_argument("--prefix-caching", action="store_true", help="keep and share the KV blocks of common "
                         "prefixes")
        eng.add_argument("--num-scheduler-steps", type=positive_int, default=1, metavar="N",
                         help="vLLM v0.6's multi-step scheduling: a decode-only batch runs N steps back to back "
                         "(arrivals wait for the run; its tokens are delivered at its end; default 1)")
        eng.add_argument("--separate-prefills", action="store_true",
                         help="a batch that admits waiting prompts runs them alone, without the running sequences' "
                              "decodes (vLLM V0's default scheduler, as v0.6.0 runs without chunked prefill)")
        eng.add_argument("--host-us-per-seq", type=non_negative_float, default=None, metavar="US",
                         help="host time of a scheduler pass per scheduled sequence (scheduling, input preparation; "
                              "once per multi-step run); default 42, vLLM v0.6.0's (docs/serving.md)")
        eng.add_argument("--host-us-per-schedule", type=host_us_per_schedule, default=0.0, metavar="US",
                         help="fixed host time of a scheduler pass (default 0), or trtllm-python: TensorRT-LLM's "
                              "Python runtime's host time per step, 549 us (its published GPT-350M benchmark; "
                              "docs/serving.md)")
        eng.add_argument("--cuda-graphs", default="vllm", choices=("vllm", "off"),
                         help="vllm (default): decode-only batches run as vLLM's CUDA graphs, padded to the captured "
                              "sizes 1, 2, 4, 8, 16, ..., 256 and launched at once (no per-kernel host launch); off: "
                              "every iteration eager")
        eng.add_argument("--async-output", action=argparse.BooleanOptionalAction, default=None,
                         help="vLLM V0's asynchronous output processing (v0.6.0+): a step's tokens reach the client "
                              "when the next step ends (TTFT and E2E one step longer), or as soon as it starts when it "
                              "is a multi-step run's graph step (docs/serving.md). Default: on, "
                              "off with --pp > 1 or --cuda-graphs off, where vLLM turns it off; --no-async-output for "
                              "an engine that delivers a token when its step ends")
        eng.add_argument("--frontend", default="vllm", choices=("vllm", "none"),
                         help="the request's path outside the engine step: vllm (default): vLLM's OpenAI server, "
                              "2.53 ms + 2.20 us per prompt token to parse and tokenise a request (one at a time per "
                              "replica) and 3.9 us to detokenise and stream a token, as published "
                              "(docs/serving.md); none: token ids straight into the engine (an in-process benchmark)")
        eng.add_argument("--first-token-from", default="prefill", choices=FIRST_TOKEN_FROM,
                         help="where a prompt's first token is sampled: prefill (default; vLLM's and TensorRT-LLM's: "
                              "the prefill's last position) or decode (LMDeploy TurboMind's: the prefill computes the "
                              "prompt but its last token, which the next decode step computes and samples from; TTFT "
                              "is one decode step longer; docs/serving.md)")
        eng.add_argument("--sampler", default="vllm-v0", choices=SAMPLERS,
                         help="the sampler's GPU kernels after each step, on every row that samples: vllm-v0 "
                              "(default): vLLM V0's greedy Sampler.forward, six passes over the fp32 logits (to "
                              "float, temperature, softmax, log-softmax, the rows' gather, argmax), timed by the GPU "
                              "model; none: not timed (docs/serving.md)")
        eng.add_argument("--embedding", default="vocab-parallel", choices=("vocab-parallel", "replicated"),
                         help="the embedding table at TP > 1 (astra workload llm --inference-embedding): "
                              "vocab-parallel (default; vLLM's and SGLang's VocabParallelEmbedding: each step "
                              "all-reduces the embedding output over TP) or replicated (the whole table on every "
                              "rank, no collective: LMDeploy TurboMind v0.1, TensorRT-LLM without "
                              "--use_parallel_embedding)")
        sim = p.add_argument_group("step simulator")
        sim.add_argument("--bucket-ratio", type=positive_float, default=None, metavar="R",
                         help="ratio of the token-count grid of the batch-shape buckets (> 1; default sqrt 2; see "
                         "docs/serving.md)")
        sim.add_argument("--exact-shapes", action="store_true", help="simulate every distinct batch shape (slow)")
        sim.add_argument("--no-cache", action="store_true",
                         help="neither read nor write the persistent cache of simulated step times (default: "
                         "$ASTRA_CACHE_DIR or ~/.cache/astra-sim/steps; ASTRA_CACHE=0 turns it off too)")
        sim.add_argument("--step-elementwise", action=argparse.BooleanOptionalAction, default=True,
                         help="steps include each layer's norms, residual adds and activation (astra workload llm "
                         "--inference-elementwise; default on: a serving engine runs them; --no-step-elementwise: "
                         "GEMMs, attention, KV writes and collectives only)")
        from astra_gpu_model.cudnn_versions import add_cudnn_argument

        add_cudnn_argument(sim)  # astra run's option, its type and help: every step runs with it (deployment.resolve)
        sim.add_argument("--run-arg", action="append", default=[], metavar="FLAG",
                         help="an astra run flag for every simulated step (repeatable, e.g. "
                         "--run-arg=--gpu-memory-op-rates=off; a mapping's run: {option: value} says the same)")
        slo = p.add_argument_group("SLOs and trace files")
        add_slo_flags(slo)
        slo.add_argument("--slo-ttft", type=positive_float, metavar="MS",
                         help="deprecated: write --slo-ttft-p90 MS (or any --slo-ttft-pNN); removed in the next "
                         "release")
        slo.add_argument("--slo-tpot", type=positive_float, metavar="MS",
                         help="deprecated: write --slo-tpot-p90 MS (or any --slo-tpot-pNN); removed in the next "
                         "release")
        slo.add_argument("--timeline", metavar="FILE.json[.gz]",
                         help="a Chrome/Perfetto trace: each replica's iterations (batch shape in args), each "
                         "request's queueing, prefill and decode spans, the KV transfers")
        return p

    @classmethod
    def from_cli_args(cls, args) -> "ServeSpec":
        """The spec of parsed ``astra serve`` arguments (one QPS: a list of rates is the command's QPS sweep, one
        spec per rate). ``--run-arg`` flags become the ``run`` mapping, read by ``astra run``'s parser."""
        values = vars(args)
        kwargs = {f.name: values[f.name] for f in dataclasses.fields(cls)
                  if f.name not in _NOT_OPTIONS and f.name in values}
        kwargs["slos"] = tuple(values.get("slos") or ()) + slos_of(values)
        for flag in ("ttft", "tpot"):
            if values.get(f"slo_{flag}") is not None:
                from astra_sim.cliutil import warning

                warning(f"--slo-{flag} {values[f'slo_{flag}']:g} is deprecated: write --slo-{flag}-p90 "
                        f"{values[f'slo_{flag}']:g} (or any percentile, e.g. --slo-{flag}-p99); --slo-{flag} goes in "
                        "the next release")
        qps = kwargs.get("qps")
        if qps is not None:
            rates = (qps,) if isinstance(qps, (int, float)) and not isinstance(qps, bool) else qps_list_or_error(qps)
            if len(rates) > 1:
                raise ConfigError(f"--qps {','.join(f'{r:g}' for r in rates)}: one rate per spec (astra serve runs "
                                  "a list as a QPS sweep, one spec per rate)")
            kwargs["qps"] = rates[0]
        run = dict(values.get("run") or {})
        run.update(run_flags_mapping(values.get("run_arg") or ()))
        return cls(**kwargs, run=run)

    @classmethod
    def from_mapping(cls, mapping, where="serve", flags=()) -> "ServeSpec":
        """The spec of ``{option: value}`` (``astra serve``'s option names, with dashes or underscores; ``run``: a
        mapping of ``astra run`` options for every step), read by ``astra serve``'s own parser: the command's
        types, checks and defaults; a ConfigError naming ``where`` and the key otherwise. ``flags``: ``astra
        serve`` command-line words read after the mapping (``astra search --serve-arg``)."""
        from astra_sim.cliutil import option_argv, parse_or_raise

        if not isinstance(mapping, Mapping):
            raise ConfigError(f"{where}: expected a mapping of astra serve options, got {type(mapping).__name__}")
        parser = _parser()
        argv, seen, run = [], {}, {}
        for key, value in mapping.items():
            name = str(key).replace("-", "_")
            if name in seen:
                raise ConfigError(f"{where}: {key!r} and {seen[name]!r} are the same option")
            seen[name] = key
            if name == "run":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"{where}: run: expected a mapping of astra run options, got "
                                      f"{type(value).__name__}")
                run = check_run_options(value, f"{where}: run")
                continue
            argv += _joined(option_argv(parser, name, value, f"{where}: {key}"))
        args = parse_or_raise(parser, argv + [str(w) for w in flags], where)
        args.run = run
        try:
            return cls.from_cli_args(args)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @classmethod
    def from_argv(cls, argv, where="astra serve") -> "ServeSpec":
        """The spec of ``astra serve``'s command-line words (a registry's or a script's options, as a user writes
        them; no output flags); what the parser refuses is a ConfigError naming ``where``."""
        from astra_sim.cliutil import parse_or_raise

        args = parse_or_raise(_parser(), [str(word) for word in argv], where)
        try:
            return cls.from_cli_args(args)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def replace(self, **changes) -> "ServeSpec":
        """A copy with fields changed (field names; an unknown one is a ConfigError naming it)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = [k for k in changes if k not in names]
        if unknown:
            from astra_sim.cliutil import did_you_mean

            raise ConfigError(f"ServeSpec.replace: unknown option {unknown[0]!r}{did_you_mean(unknown[0], names)}")
        return dataclasses.replace(self, **changes)

    def to_mapping(self) -> dict:
        """``{field: value}`` of every option (what :meth:`from_mapping` reads back; the SLOs as their options,
        ``slo_ttft_p99: 500``)."""
        from .metrics import slo_key

        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "slos"}
        out.update({slo_key(metric, percentile): ms for metric, percentile, ms in self.slos})
        return out

    def slo_targets(self):
        """Every SLO as ``(metric, percentile, target ms)``: the percentile ones and the deprecated
        ``slo_ttft``/``slo_tpot`` read as p90 (the serving search's default share), without repeats."""
        out = list(self.slos)
        for metric, ms in (("ttft", self.slo_ttft), ("tpot", self.slo_tpot)):
            if ms is not None:
                out.append((metric, 90, ms))
        return tuple(dict.fromkeys(out))

    def resolve(self):
        """The concrete deployment (:class:`~astra_serving.deployment.ResolvedServe`: the platform, a replica's
        layout and KV cache, its virtual engines, the bucket grid), every check made that needs no request and no
        simulated step: a ConfigError here is one before anything runs."""
        from .deployment import resolve

        return resolve(self)

    def check(self):
        """The checks a spec made in code skips (the parser makes them for the other doors): a model or a preset,
        a platform."""
        if bool(self.model) == bool(self.preset):
            raise ConfigError("give the model (--model CONFIG) or a --preset, one of them")
        if not self.platform:
            raise ConfigError("give the --platform of every replica")
        return self


def add_slo_flags(group):
    """``--slo-ttft-pNN MS`` and ``--slo-tpot-pNN MS`` (NN: 1..99 or 99.9; repeatable per percentile), each its own
    option (a mapping's ``slo_ttft_p99: 500`` says the same); help lists p99 and says the rest."""
    from astra_sim.cliutil import positive_float

    from .metrics import SLO_METRICS, SLO_PERCENTILES, percentile_label

    for metric, name in SLO_METRICS.items():
        for percentile in SLO_PERCENTILES:
            label = percentile_label(percentile)
            shown = (f"SLO: the {label[1:]}th percentile of {name} at most MS ms (any percentile: "
                     f"--slo-{metric}-p90, --slo-{metric}-p99.9, ...; p1-p99 and p99.9; the report keeps ns)"
                     if percentile == 99 else argparse.SUPPRESS)
            group.add_argument(f"--slo-{metric}-{label}", type=positive_float, metavar="MS", help=shown)


def slos_of(values):
    """``((metric, percentile, target ms), ...)`` of the SLO options in ``values`` (parsed options by dest)."""
    from .metrics import parse_slo_key

    out = []
    for key, ms in values.items():
        found = parse_slo_key(key)
        if found is not None and ms is not None:
            out.append((*found, float(ms)))
    return tuple(sorted(out))


def qps_list_or_error(text):
    try:
        return qps_list(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"--qps: {exc}") from None


def _joined(words):
    """``[--flag, value, ...]`` as ``--flag=value`` words, so that a value starting with '-' stays a value."""
    if len(words) >= 2 and len(words) % 2 == 0 and all(w == words[0] for w in words[0::2]):
        return [f"{flag}={value}" for flag, value in zip(words[0::2], words[1::2])]
    return list(words)


@functools.lru_cache(maxsize=None)
def _parser():
    """The spec's own parser (``astra serve``'s options without the output flags), built once per process."""
    return ServeSpec.add_cli_args(argparse.ArgumentParser(prog="astra serve", add_help=False))


def run_flags_mapping(words, where="--run-arg"):
    """``astra run`` flags (``--run-arg`` words) as ``{option dest: value}``, read by ``astra run``'s own parser:
    every option whose value the flags change."""
    if not words:
        return {}
    from astra_sim.cliutil import parse_or_raise
    from astra_sim.spec import run_parser

    parser = run_parser()
    base = ["--workload-configuration", "step"]
    given = vars(parse_or_raise(parser, base + [str(w) for w in words], where))
    default = vars(parse_or_raise(parser, base, where))
    return {k: v for k, v in given.items() if k != "workload_configuration" and v != default.get(k)}


def check_run_options(mapping, where):
    """``{astra run option: value}`` checked by ``astra run``'s parser (a ConfigError naming the key), keys with
    underscores."""
    from astra_sim.spec import RunSpec

    RunSpec.from_mapping({"workload": "step", **mapping}, where=where)
    return {str(k).replace("-", "_"): v for k, v in mapping.items()}


__all__ = ["ServeSpec", "qps_list"]
