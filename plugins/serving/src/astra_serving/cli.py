"""``astra serve``: the command line, and :func:`serve`, which runs one deployment from parsed arguments."""

from __future__ import annotations

import argparse
import itertools
import json
import time

from astra_sim.errors import ConfigError


def add_serve_command(sub):
    from astra_sim.cliutil import non_negative_float, positive_float, positive_int

    p = sub.add_parser(
        "serve", help="simulate an LLM serving deployment over time (requests, continuous batching, paged KV cache, "
        "replicas and routers, prefill/decode disaggregation)",
        description="Simulate requests served by replicas of a model: a vLLM-style engine per replica (waiting "
        "queue, token budget, chunked prefill, paged KV cache sized from the GPU's memory, preemption) whose every "
        "iteration is timed by astra workload llm + astra run in this process, memoised by bucketed batch shape. "
        "Prints TTFT, TPOT, end-to-end latency and throughput; --report-json writes them all (docs/serving.md).")
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--preset", help="model preset (astra workload llm --preset)")
    model.add_argument("--model", metavar="CONFIG", help="a Hugging Face config.json, a folder holding one or a "
                       "shipped config's name (astra workload llm --model), e.g. llama3-70b")
    p.add_argument("--platform", required=True, help="machine of every replica (astra platforms)")
    p.add_argument("--nodes", type=positive_int, metavar="N",
                   help="nodes per replica (default: the fewest that hold TP x PP x EP GPUs; checked when given)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size of a replica")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline stages of a replica, run as vLLM V0 runs "
                   "them: one virtual engine per stage (--virtual-engines), whose batches follow each other through "
                   "the stages")
    p.add_argument("--virtual-engines", type=positive_int, default=None, metavar="N",
                   help="with --pp: schedulers per replica, each with 1/N of the KV cache, whose iterations overlap "
                   "on the stages (default --pp, vLLM V0's; 1: one batch at a time through the whole pipeline)")
    p.add_argument("--ep", type=positive_int, default=1, help="expert-parallel size (MoE; attention data-parallel "
                   "over the EP ranks, each taking its share of the batch)")
    p.add_argument("--dtype", default=None, help="activation/KV type (astra workload llm --dtype; default bf16)")
    p.add_argument("--replicas", type=positive_int, default=1, metavar="R", help="model replicas behind the router")
    p.add_argument("--disaggregate", metavar="P:D",
                   help="prefill/decode disaggregation: P prefill replicas and D decode replicas (instead of "
                   "--replicas); the KV cache moves between them over the network")
    p.add_argument("--nic-gbit", type=positive_float, metavar="GBIT",
                   help="with --disaggregate: NIC bandwidth per GPU (Gb/s) the KV transfer runs on (default: the "
                   "platform's)")
    p.add_argument("--router", default="round-robin", choices=("round-robin", "least-loaded", "kv-aware"))
    work = p.add_argument_group("requests (a generator, or --trace)")
    work.add_argument("--trace", metavar="FILE", help="requests from a JSONL or CSV trace (astra serve's columns, the "
                      "Azure LLM inference trace's TIMESTAMP,ContextTokens,GeneratedTokens, or BurstGPT's)")
    work.add_argument("--qps", metavar="Q[,Q...]",
                      help="generated requests per second (required without --trace); several, comma-separated: a "
                      "QPS sweep in one process (the report's qps_sweep: one report per QPS; astra plot draws the "
                      "throughput-latency curve)")
    work.add_argument("--requests", type=positive_int, default=None, metavar="N", help="generated requests; with "
                      "--trace: the first N (default 1000 generated, the whole trace)")
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
    eng.add_argument("--max-model-len", type=positive_int, help="context limit (default: the model's)")
    eng.add_argument("--policy", default="fcfs", choices=("fcfs", "priority"))
    eng.add_argument("--preemption", default="recompute", choices=("recompute", "swap"))
    eng.add_argument("--swap-gbps", type=positive_float, default=50.0, metavar="GB_S",
                     help="host<->GPU copy bandwidth per GPU for --preemption swap (GB/s; default 50, PCIe 5 x16)")
    eng.add_argument("--prefix-caching", action="store_true", help="keep and share the KV blocks of common prefixes")
    eng.add_argument("--num-scheduler-steps", type=positive_int, default=1, metavar="N",
                     help="vLLM v0.6's multi-step scheduling: a decode-only batch runs N steps back to back (arrivals "
                     "wait for the run; its tokens are delivered at its end; default 1)")
    eng.add_argument("--separate-prefills", action="store_true",
                     help="a batch that admits waiting prompts runs them alone, without the running sequences' "
                          "decodes (vLLM V0's default scheduler, as v0.6.0 runs without chunked prefill)")
    eng.add_argument("--host-us-per-seq", type=non_negative_float, default=None, metavar="US",
                     help="host time of a scheduler pass per scheduled sequence (scheduling, input preparation; "
                          "once per multi-step run); default 42, vLLM v0.6.0's (docs/serving.md)")
    eng.add_argument("--host-us-per-schedule", type=non_negative_float, default=0.0, metavar="US",
                     help="fixed host time of a scheduler pass (default 0)")
    eng.add_argument("--cuda-graphs", default="vllm", choices=("vllm", "off"),
                     help="vllm (default): decode-only batches run as vLLM's CUDA graphs, padded to the captured "
                          "sizes 1, 2, 4, 8, 16, ..., 256 and launched at once (no per-kernel host launch); off: "
                          "every iteration eager")
    sim = p.add_argument_group("step simulator")
    sim.add_argument("--bucket-ratio", type=positive_float, default=None, metavar="R",
                     help="ratio of the token-count grid of the batch-shape buckets (> 1; default sqrt 2; see "
                     "docs/serving.md)")
    sim.add_argument("--exact-shapes", action="store_true", help="simulate every distinct batch shape (slow)")
    sim.add_argument("--step-elementwise", action=argparse.BooleanOptionalAction, default=True,
                     help="steps include each layer's norms, residual adds and activation (astra workload llm "
                     "--inference-elementwise; default on: a serving engine runs them; --no-step-elementwise: "
                     "GEMMs, attention, KV writes and collectives only, as astra workload llm's default)")
    sim.add_argument("--run-arg", action="append", default=[], metavar="FLAG",
                     help="a flag for every astra run (repeatable, e.g. --run-arg=--gpu-memory-op-rates=off)")
    out = p.add_argument_group("output")
    out.add_argument("--slo-ttft", type=positive_float, metavar="MS", help="TTFT SLO for goodput (ms)")
    out.add_argument("--slo-tpot", type=positive_float, metavar="MS", help="TPOT SLO for goodput (ms)")
    out.add_argument("--report-json", metavar="OUT", help="write the report as JSON")
    out.add_argument("--requests-csv", metavar="OUT", help="write one row per request (times in ns)")
    out.add_argument("--timeline", metavar="FILE.json[.gz]",
                     help="a Chrome/Perfetto trace: each replica's iterations (batch shape in args), each request's "
                     "queueing, prefill and decode spans, the KV transfers")
    out.add_argument("-q", "--quiet", action="store_true", help="no terminal summary")
    p.set_defaults(run_command=_cmd_serve)


def _qps_list(text):
    import math

    try:
        values = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise ConfigError(f"--qps: expected positive numbers, comma-separated, got {text!r}")
    return values


def _cmd_serve(args):
    import copy

    from astra_sim.cliutil import write_text_atomic

    from .metrics import describe

    if args.qps is not None and args.trace:
        raise ConfigError("give --qps (generated requests) or --trace, not both")
    rates = _qps_list(args.qps) if args.qps is not None else [None]
    reports = []
    for rate in rates:
        one = copy.copy(args)
        one.qps = rate
        report, requests = serve(one)
        reports.append(report)
        if not args.quiet:
            d = report["deployment"]
            print(f"{d['model']} on {d['gpus']} x {d['gpu']} ({d['description']})"
                  + (f" at {rate:g} QPS" if rate is not None else "") + f"; step simulator: "
                  f"{report['step_simulator']['shapes_simulated']} shapes for "
                  f"{report['step_simulator']['lookups']} iterations; {report['wall_s']:.1f} s")
            print(describe(report))
    if args.report_json:
        out = reports[0] if len(reports) == 1 else {"qps_sweep": reports}
        write_text_atomic(args.report_json, json.dumps(out, indent=1) + "\n")
    if args.requests_csv:
        if len(reports) > 1:
            raise ConfigError("--requests-csv is for one QPS (a sweep has one set of requests per QPS)")
        rows = ["id,replica,arrival_ns,prompt_tokens,output_tokens,scheduled_ns,first_token_ns,finish_ns,preemptions"]
        rows += [f"{r.id},{r.replica},{r.arrival_ns},{r.prompt_tokens},{r.output_tokens},{r.scheduled_ns},"
                 f"{r.first_token_ns},{r.finish_ns},{r.preemptions}" for r in sorted(requests, key=lambda r: r.id)]
        write_text_atomic(args.requests_csv, "\n".join(rows) + "\n")
    return 0


def host_us_per_seq(args):
    """--host-us-per-seq, or vLLM v0.6.0's value (engine.HOST_US_PER_SEQ_VLLM060)."""
    from .engine import HOST_US_PER_SEQ_VLLM060

    value = getattr(args, "host_us_per_seq", None)
    return HOST_US_PER_SEQ_VLLM060 if value is None else value


def _source(args):
    return ["--model", args.model] if args.model else ["--preset", args.preset]


def serve(args):
    """(report dict, requests) of the deployment ``args`` describes (parsed ``astra serve`` arguments)."""
    from astra_gpu_model.gpu import load_gpu
    from astra_gpu_model.platforms import get_platform

    from .capacity import kv_capacity
    from .cluster import Cluster
    from .engine import VLLM_CUDA_GRAPH_SIZES, Engine, EngineConfig, Pipeline
    from .kvcache import BlockManager
    from .metrics import build_report
    from .requests import generate_requests, parse_length, parse_prune, read_trace, write_trace
    from .steptime import DEFAULT_RATIO, Layout, StepTimer
    from .transfer import KvTransferTimer

    started = time.perf_counter()
    platform = get_platform(args.platform)
    source = (_source(args) + (["--dtype", args.dtype] if args.dtype else [])
              + (["--inference-elementwise"] if args.step_elementwise else []))
    layout = Layout(source, platform.name, tp=args.tp, pp=args.pp, ep=args.ep, run_args=list(args.run_arg),
                    gpus_per_node=platform.gpus_per_node)
    layout.dp  # checks the layout tiles whole nodes
    if args.nodes is not None and args.nodes != layout.nodes:
        raise ConfigError(f"--nodes {args.nodes}: a replica of TP {args.tp} x PP {args.pp} x EP {args.ep} = "
                          f"{layout.gpus} GPUs takes {layout.nodes} node(s) of {platform.name}")
    cap = kv_capacity(layout, args.gpu_memory_utilization, args.block_size, args.max_num_batched_tokens,
                      args.max_model_len)
    max_context = cap.max_context
    if args.no_chunked_prefill and args.max_num_batched_tokens < max_context:
        raise ConfigError(f"--no-chunked-prefill needs --max-num-batched-tokens >= the context ({max_context}; "
                          "--max-model-len lowers it), else a long prompt never fits an iteration")
    if args.trace:
        requests = read_trace(args.trace, max_context)
        if args.requests is not None:
            requests = requests[:args.requests]
    else:
        if args.qps is None:
            raise ConfigError("give --qps (generated requests per second) or --trace FILE")
        qps = args.qps
        if isinstance(qps, str):
            rates = _qps_list(qps)
            if len(rates) > 1:
                raise ConfigError("--qps: one rate per run here (astra serve runs a list as a sweep)")
            qps = rates[0]
        requests = generate_requests(args.requests or 1000, qps, parse_length(args.prompt_len, "--prompt-len"),
                                     parse_length(args.output_len, "--output-len"), seed=args.seed,
                                     arrival=args.arrival, burstiness=args.burstiness, max_context=max_context,
                                     prune=parse_prune(getattr(args, "prune", None)))
        if args.shared_prefix:
            if args.shared_prefix < 0:
                raise ConfigError(f"--shared-prefix must be >= 0, got {args.shared_prefix}")
            for r in requests:
                r.prefix_group, r.prefix_tokens = "shared", min(args.shared_prefix, r.prompt_tokens)
    if args.save_trace:
        write_trace(requests, args.save_trace)
    virtual_engines = args.pp if args.virtual_engines is None else args.virtual_engines
    if args.pp == 1 and virtual_engines != 1:
        raise ConfigError(f"--virtual-engines {virtual_engines}: virtual engines are for --pp > 1 (one per stage)")
    if virtual_engines not in (1, args.pp):
        raise ConfigError(f"--virtual-engines must be 1 or --pp ({args.pp}), got {virtual_engines}")
    engine_tokens = cap.blocks // virtual_engines * cap.block_size
    too_long = [r for r in requests if r.prompt_tokens + r.output_tokens > engine_tokens]
    if too_long:
        r = too_long[0]
        share = f" (a virtual engine's share: 1/{virtual_engines})" if virtual_engines > 1 else ""
        raise ConfigError(f"request {r.id} needs {r.prompt_tokens + r.output_tokens} KV positions but a replica's "
                          f"cache holds {engine_tokens}{share} ({cap.blocks} blocks of {cap.block_size}); use more "
                          "GPUs per replica or a smaller --max-model-len")
    ratio = args.bucket_ratio or DEFAULT_RATIO
    if ratio <= 1.0:
        raise ConfigError(f"--bucket-ratio must be > 1 (--exact-shapes turns bucketing off), got {ratio}")
    timer = StepTimer(layout, ratio=ratio, exact=args.exact_shapes)

    counter = itertools.count()

    def replica_engines(replica, role):
        """The engines of one replica: one, or ``virtual_engines`` over a shared :class:`Pipeline` (PP > 1),
        each with its share of the KV cache."""
        config = EngineConfig(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                              chunked_prefill=not args.no_chunked_prefill, policy=args.policy,
                              preemption=args.preemption, swap_bytes_per_s=args.swap_gbps * 1e9, role=role,
                              num_scheduler_steps=args.num_scheduler_steps,
                              separate_prefills=args.separate_prefills,
                              host_ns_per_schedule=int(round(args.host_us_per_schedule * 1000)),
                              host_ns_per_seq=int(round(host_us_per_seq(args) * 1000)),
                              cuda_graph_sizes=VLLM_CUDA_GRAPH_SIZES if args.cuda_graphs == "vllm" else ())
        pipeline = Pipeline(args.pp) if virtual_engines > 1 else None
        return [Engine(next(counter), timer, BlockManager(cap.blocks // virtual_engines, cap.block_size,
                                                          args.prefix_caching), config, cap.kv_bytes_per_token,
                       pipeline=pipeline, replica=replica, virtual_engine=v) for v in range(virtual_engines)]

    sample_ns = max(1_000_000, (requests[-1].arrival_ns // 2000) if requests else 1_000_000)
    transfer = None
    if args.disaggregate:
        try:
            n_p, n_d = (int(x) for x in args.disaggregate.split(":"))
            if n_p < 1 or n_d < 1:
                raise ValueError
        except ValueError:
            raise ConfigError(f"--disaggregate: expected P:D (prefill and decode replicas, each >= 1), got "
                              f"{args.disaggregate!r}") from None
        transfer = KvTransferTimer(layout, args.nic_gbit, ratio=ratio, exact=args.exact_shapes)
        prefill = [e for i in range(n_p) for e in replica_engines(i, "prefill")]
        decode = [e for i in range(n_d) for e in replica_engines(n_p + i, "decode")]
        cluster = Cluster(prefill, args.router, decode, transfer, cap.kv_bytes_per_token, sample_ns)
        replicas = n_p + n_d
        description = f"{n_p} prefill + {n_d} decode replicas of TP {args.tp} x PP {args.pp}" + (
            f" x EP {args.ep}" if args.ep > 1 else "")
    else:
        if args.nic_gbit is not None:
            raise ConfigError("--nic-gbit is for --disaggregate (the KV transfer's network)")
        cluster = Cluster([e for i in range(args.replicas) for e in replica_engines(i, "both")], args.router,
                          sample_every_ns=sample_ns)
        replicas = args.replicas
        description = f"{replicas} replica{'s' if replicas > 1 else ''} of TP {args.tp} x PP {args.pp}" + (
            f" x EP {args.ep}" if args.ep > 1 else "")
    cluster.record_iterations = bool(getattr(args, "timeline", None))
    cluster.run(requests)
    if cluster.record_iterations:
        from .timeline import write_timeline

        write_timeline(args.timeline, cluster, requests)
    report = build_report(requests, cluster, args.slo_ttft, args.slo_tpot)
    report["qps"] = None if args.trace else qps
    gpu = load_gpu(platform.gpu)
    engines = cluster.engines + cluster.decode_engines
    report["deployment"] = {
        "model": args.model or args.preset, "platform": platform.name, "gpu": gpu.name,
        "gpus": replicas * layout.gpus, "gpus_per_replica": layout.gpus, "virtual_engines": virtual_engines,
        "nodes_per_replica": layout.nodes, "replicas": replicas, "tp": args.tp, "pp": args.pp, "ep": args.ep,
        "disaggregate": args.disaggregate, "router": args.router, "description": description,
        "engine": {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
                   "chunked_prefill": not args.no_chunked_prefill, "policy": args.policy,
                   "preemption": args.preemption, "prefix_caching": args.prefix_caching,
                   "num_scheduler_steps": args.num_scheduler_steps,
                   "separate_prefills": args.separate_prefills, "host_us_per_seq": host_us_per_seq(args),
                   "host_us_per_schedule": args.host_us_per_schedule,
                   "cuda_graphs": args.cuda_graphs}}
    report["kv_cache"] = cap.to_dict()
    if args.prefix_caching:
        looked = sum(e.blocks.lookups for e in engines)
        report["kv_cache"]["prefix_hit_rate"] = sum(e.blocks.hits for e in engines) / looked if looked else 0.0
    iterations = sum(e.iterations for e in engines)
    report["limits"] = {k: sum(e.limited[k] for e in engines) / max(1, iterations)
                        for k in ("max_num_seqs", "token_budget", "kv_cache")}
    report["replicas"] = [{"index": e.index, "replica": e.replica, "virtual_engine": e.virtual_engine,
                           "role": e.config.role, "iterations": e.iterations,
                           "busy_fraction": e.busy_ns / max(1, max(r.finish_ns for r in requests)),
                           "preemptions": e.preemptions, "prefill_tokens": e.tokens_prefilled,
                           "decode_tokens": e.tokens_decoded} for e in engines]
    report["step_simulator"] = timer.stats()
    if transfer is not None:
        spans = [t[2] - t[1] for t in cluster.transfers]
        from .metrics import distribution_ms

        report["kv_transfer"] = transfer.stats() | {"time_ms": distribution_ms(spans)}
    report["wall_s"] = time.perf_counter() - started
    return report, requests
