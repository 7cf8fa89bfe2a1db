"""Running one :class:`~astra_serving.spec.ServeSpec`: :func:`serve`, behind ``astra serve``, ``astra search
--serve``, a sweep's serving points and the Python API (``astra_serving.serve``)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass

from astra_sim import progress
from astra_sim.errors import ConfigError

from .spec import ServeSpec


def model_options(spec):
    """The ``astra workload llm`` options that name the spec's model and its precision; the step's element-wise
    kernels always given (``--step-elementwise``), whatever the generator's default; ``--embedding replicated``
    as the generator's ``--inference-embedding``."""
    options = {"model": spec.model} if spec.model else {"preset": spec.preset}
    if spec.dtype:
        options["dtype"] = spec.dtype
    options["inference_elementwise"] = bool(spec.step_elementwise)
    if getattr(spec, "embedding", "vocab-parallel") != "vocab-parallel":  # (the default's key unchanged)
        options["inference_embedding"] = spec.embedding
    return options


def host_us_per_seq(spec):
    """--host-us-per-seq, or vLLM v0.6.0's value (engine.HOST_US_PER_SEQ_VLLM060)."""
    from .engine import HOST_US_PER_SEQ_VLLM060

    value = getattr(spec, "host_us_per_seq", None)
    return HOST_US_PER_SEQ_VLLM060 if value is None else value


def async_output(spec):
    """--async-output, or vLLM V0's default: on, but off with pipeline parallelism and with eager execution
    (--cuda-graphs off), where vLLM turns it off (ModelConfig.verify_async_output_proc: "Async output processing
    can not be enabled with pipeline parallel"; "Since, enforce-eager is enabled, async output processor cannot be
    used")."""
    value = getattr(spec, "async_output", None)
    return spec.pp == 1 and spec.cuda_graphs == "vllm" if value is None else bool(value)


def run_options(spec):
    """The ``astra run`` options of every step: the spec's ``run`` (``--run-arg``) with ``--cudnn-version`` in it, as
    ``astra run --cudnn-version`` takes it; the two saying different releases is a ConfigError. Keys are the run
    options' names with underscores (a Python ``ServeSpec(run=...)`` may spell them with dashes, as
    ``check_run_options`` accepts them), so every reader looks up ``cudnn_version`` alone."""
    run = {str(key).replace("-", "_"): value for key, value in spec.run.items()}
    version = getattr(spec, "cudnn_version", None)
    if version is not None:
        given = run.get("cudnn_version")
        if given is not None and str(given) != str(version):
            raise ConfigError(f"--cudnn-version {version} and --run-arg=--cudnn-version={given} name two cuDNN "
                              "releases; give one")
        run["cudnn_version"] = str(version)
    return run


#: the gpu model's notes on a --cudnn-version already said in this process (a QPS sweep or a search resolves its
#: deployment once per rate or candidate; astra run says them once per run)
_CUDNN_SAID = set()


def check_cudnn_version(run, platform):
    """``--cudnn-version`` (the steps' run option) checked before any step, as ``astra run`` checks it: the gpu model
    of the steps' GPU is made with it, so a release older than every measurement of that GPU is the same one-line
    ConfigError, and its notes (timed at an older measured release; not timed by release on this GPU) are the same
    warnings, said once (the steps' own warnings are dropped: one per simulated shape). ``run``: run_options's."""
    version = run.get("cudnn_version")
    gpu_of = getattr(platform, "gpu_of", None)
    if version is None or gpu_of is None or (run.get("compute_model") or "gpu") != "gpu":
        return
    from types import SimpleNamespace

    from astra_gpu_model.model import GpuComputeModel
    from astra_sim.cliutil import warning

    notes = []
    GpuComputeModel(SimpleNamespace(options={"gpu": gpu_of(run), "cudnn_version": str(version)}, warn=notes.append))
    for note in notes:
        if note not in _CUDNN_SAID:
            _CUDNN_SAID.add(note)
            warning(note)


@dataclass
class ResolvedServe:
    """A spec made concrete, before any request or step: the platform, one replica's layout, its KV cache, the
    virtual engines per replica and the bucket grid's ratio."""

    spec: ServeSpec
    platform: object
    layout: object
    capacity: object
    virtual_engines: int
    bucket_ratio: float


def resolve(spec):
    """:meth:`ServeSpec.resolve`: every check that needs no request and no simulated step."""
    from astra_sim.platforms import get_platform

    from .capacity import kv_capacity
    from .steptime import DEFAULT_RATIO, Layout, _pm

    spec.check()
    if spec.qps is not None and spec.trace:
        raise ConfigError("give --qps (generated requests) or --trace, not both")
    platform = get_platform(spec.platform, _pm())
    layout = Layout(model_options(spec), platform.name, tp=spec.tp, pp=spec.pp, ep=spec.ep, run=run_options(spec),
                    gpus_per_node=platform.gpus_per_node)
    check_cudnn_version(layout.run, platform)
    layout.dp  # checks the layout tiles whole nodes
    if spec.nodes is not None and spec.nodes != layout.nodes:
        raise ConfigError(f"--nodes {spec.nodes}: a replica of TP {spec.tp} x PP {spec.pp} x EP {spec.ep} = "
                          f"{layout.gpus} GPUs takes {layout.nodes} node(s) of {platform.name}")
    cap = kv_capacity(layout, spec.gpu_memory_utilization, spec.block_size, spec.max_num_batched_tokens,
                      spec.max_model_len, spec.max_num_seqs, spec.kv_cache_dtype)
    if spec.no_chunked_prefill and spec.max_num_batched_tokens < cap.max_context:
        raise ConfigError(f"--no-chunked-prefill needs --max-num-batched-tokens >= the context ({cap.max_context}; "
                          "--max-model-len lowers it), else a long prompt never fits an iteration")
    if spec.pp > 1 and getattr(spec, "async_output", None):
        raise ConfigError(f"--async-output: vLLM runs no asynchronous output processing with pipeline parallelism "
                          f"(--pp {spec.pp}); drop --async-output")
    if spec.disaggregate and spec.first_token_from == "decode":
        raise ConfigError("--first-token-from decode with --disaggregate: a prefill replica samples the first token "
                          "itself (not modelled otherwise); drop one of them")
    virtual_engines = spec.pp if spec.virtual_engines is None else spec.virtual_engines
    if spec.pp == 1 and virtual_engines != 1:
        raise ConfigError(f"--virtual-engines {virtual_engines}: virtual engines are for --pp > 1 (one per stage)")
    if virtual_engines not in (1, spec.pp):
        raise ConfigError(f"--virtual-engines must be 1 or --pp ({spec.pp}), got {virtual_engines}")
    ratio = spec.bucket_ratio or DEFAULT_RATIO
    if ratio <= 1.0:
        raise ConfigError(f"--bucket-ratio must be > 1 (--exact-shapes turns bucketing off), got {ratio}")
    return ResolvedServe(spec, platform, layout, cap, virtual_engines, ratio)


def serve(spec):
    """``(report dict, requests)`` of the deployment ``spec`` describes (a :class:`ServeSpec`, or a mapping of
    ``astra serve`` options read by :meth:`ServeSpec.from_mapping`): what ``astra serve`` reports for it, every
    iteration timed by the step simulator in this process. ``spec.timeline`` and ``spec.save_trace`` are written;
    when the timeline's write fails late, the ConfigError carries ``(report, requests)`` as ``served``."""

    from .cluster import Cluster
    from .engine import VLLM_CUDA_GRAPH_SIZES, Engine, EngineConfig, Pipeline
    from .frontend import get_frontend
    from .kvcache import BlockManager
    from .metrics import build_report
    from .requests import generate_requests, parse_length, parse_prune, read_trace, write_trace
    from .sampler import sampler_timer
    from .steptime import StepTimer
    from .transfer import KvTransferTimer

    started, started_cpu = time.perf_counter(), time.process_time()
    if isinstance(spec, Mapping):
        spec = ServeSpec.from_mapping(spec, where="serve()")
    resolved = resolve(spec)
    frontend = get_frontend(spec.frontend)
    platform, layout, cap = resolved.platform, resolved.layout, resolved.capacity
    virtual_engines, ratio = resolved.virtual_engines, resolved.bucket_ratio
    max_context = cap.max_context
    if spec.trace:
        requests = read_trace(spec.trace, max_context)
        if spec.requests is not None:
            requests = requests[:spec.requests]
    else:
        if spec.qps is None:
            raise ConfigError("give --qps (generated requests per second) or --trace FILE")
        qps = spec.qps
        if isinstance(qps, bool) or not isinstance(qps, (int, float)) or not qps > 0 or qps == float("inf"):
            raise ConfigError(f"--qps: expected one positive rate, got {qps!r}")
        requests = generate_requests(spec.requests or 1000, qps, parse_length(spec.prompt_len, "--prompt-len"),
                                     parse_length(spec.output_len, "--output-len"), seed=spec.seed,
                                     arrival=spec.arrival, burstiness=spec.burstiness, max_context=max_context,
                                     prune=parse_prune(spec.prune))
        if spec.shared_prefix:
            if spec.shared_prefix < 0:
                raise ConfigError(f"--shared-prefix must be >= 0, got {spec.shared_prefix}")
            for r in requests:
                r.prefix_group, r.prefix_tokens = "shared", min(spec.shared_prefix, r.prompt_tokens)
    if spec.save_trace:
        write_trace(requests, spec.save_trace)
    engine_tokens = cap.blocks // virtual_engines * cap.block_size
    too_long = [r for r in requests if r.prompt_tokens + r.output_tokens > engine_tokens]
    if too_long:
        r = too_long[0]
        share = f" (a virtual engine's share: 1/{virtual_engines})" if virtual_engines > 1 else ""
        raise ConfigError(f"request {r.id} needs {r.prompt_tokens + r.output_tokens} KV positions but a replica's "
                          f"cache holds {engine_tokens}{share} ({cap.blocks} blocks of {cap.block_size}); use more "
                          "GPUs per replica or a smaller --max-model-len")
    timer = StepTimer(layout, ratio=ratio, exact=spec.exact_shapes, cache=not spec.no_cache)
    sampler = sampler_timer(spec.sampler, layout, platform)
    progress.phase(f"serving {len(requests):,} requests",
                   lambda: f"{timer.simulated:,} batch shapes simulated, {timer.lookups:,} iterations timed", lead=True)

    counter = itertools.count()

    def replica_engines(replica, role):
        """The engines of one replica: one, or ``virtual_engines`` over a shared :class:`Pipeline` (PP > 1),
        each with its share of the KV cache."""
        config = EngineConfig(max_num_seqs=spec.max_num_seqs, max_num_batched_tokens=spec.max_num_batched_tokens,
                              chunked_prefill=not spec.no_chunked_prefill, policy=spec.policy,
                              preemption=spec.preemption, swap_bytes_per_s=spec.swap_gbps * 1e9, role=role,
                              num_scheduler_steps=spec.num_scheduler_steps,
                              separate_prefills=spec.separate_prefills, async_output=async_output(spec),
                              first_token_from_decode=spec.first_token_from == "decode",
                              host_ns_per_schedule=int(round(spec.host_us_per_schedule * 1000)),
                              host_ns_per_seq=int(round(host_us_per_seq(spec) * 1000)),
                              cuda_graph_sizes=VLLM_CUDA_GRAPH_SIZES if spec.cuda_graphs == "vllm" else (),
                              sampler=sampler)
        pipeline = Pipeline(spec.pp) if virtual_engines > 1 else None
        return [Engine(next(counter), timer, BlockManager(cap.blocks // virtual_engines, cap.block_size,
                                                          spec.prefix_caching), config, cap.kv_bytes_per_token,
                       pipeline=pipeline, replica=replica, virtual_engine=v) for v in range(virtual_engines)]

    sample_ns = max(1_000_000, (requests[-1].arrival_ns // 2000) if requests else 1_000_000)
    transfer = None
    if spec.disaggregate:
        try:
            n_p, n_d = (int(x) for x in spec.disaggregate.split(":"))
            if n_p < 1 or n_d < 1:
                raise ValueError
        except ValueError:
            raise ConfigError(f"--disaggregate: expected P:D (prefill and decode replicas, each >= 1), got "
                              f"{spec.disaggregate!r}") from None
        transfer = KvTransferTimer(layout, spec.nic_gbit, ratio=ratio, exact=spec.exact_shapes)
        prefill = [e for i in range(n_p) for e in replica_engines(i, "prefill")]
        decode = [e for i in range(n_d) for e in replica_engines(n_p + i, "decode")]
        cluster = Cluster(prefill, spec.router, decode, transfer, cap.kv_bytes_per_token, sample_ns, frontend)
        replicas = n_p + n_d
        description = f"{n_p} prefill + {n_d} decode replicas of TP {spec.tp} x PP {spec.pp}" + (
            f" x EP {spec.ep}" if spec.ep > 1 else "")
    else:
        if spec.nic_gbit is not None:
            raise ConfigError("--nic-gbit is for --disaggregate (the KV transfer's network)")
        cluster = Cluster([e for i in range(spec.replicas) for e in replica_engines(i, "both")], spec.router,
                          sample_every_ns=sample_ns, frontend=frontend)
        replicas = spec.replicas
        description = f"{replicas} replica{'s' if replicas > 1 else ''} of TP {spec.tp} x PP {spec.pp}" + (
            f" x EP {spec.ep}" if spec.ep > 1 else "")
    cluster.record_iterations = bool(spec.timeline)
    if virtual_engines == 1:  # a pipeline's virtual engines overlap on the stages: their steps' energy does not add
        from .energy import EnergyMeter

        cluster.meter = EnergyMeter(min(r.arrival_ns for r in requests))
    cluster.run(requests)
    report = build_report(requests, cluster, slos=spec.slo_targets())
    report["qps"] = None if spec.trace else qps
    engines = cluster.engines + cluster.decode_engines
    report["deployment"] = {
        "model": spec.model or spec.preset, "platform": platform.name, "gpu": platform.describe(1).get("gpu"),
        "gpus": replicas * layout.gpus, "gpus_per_replica": layout.gpus, "virtual_engines": virtual_engines,
        "nodes_per_replica": layout.nodes, "replicas": replicas, "tp": spec.tp, "pp": spec.pp, "ep": spec.ep,
        "disaggregate": spec.disaggregate, "router": spec.router, "description": description,
        "cudnn_version": layout.run.get("cudnn_version"),
        "engine": {"max_num_seqs": spec.max_num_seqs, "max_num_batched_tokens": spec.max_num_batched_tokens,
                   "chunked_prefill": not spec.no_chunked_prefill, "policy": spec.policy,
                   "preemption": spec.preemption, "prefix_caching": spec.prefix_caching,
                   "num_scheduler_steps": spec.num_scheduler_steps,
                   "separate_prefills": spec.separate_prefills,
                   "host_ns_per_seq": int(round(host_us_per_seq(spec) * 1000)),
                   "host_ns_per_schedule": int(round(spec.host_us_per_schedule * 1000)),
                   "cuda_graphs": spec.cuda_graphs, "async_output": async_output(spec),
                   "first_token_from": spec.first_token_from,
                   "sampler": {"name": spec.sampler, **sampler.to_dict()} if sampler is not None else None,
                   "frontend": frontend.to_dict()}}
    report["kv_cache"] = cap.to_dict()
    if spec.prefix_caching:
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
    from .intervals import report_intervals
    from .steptime import _pm

    intervals = report_intervals(report, _pm())  # from astra-validation's cross-validated serving errors
    if intervals is not None:
        report["interval_90"] = intervals
    energy = cluster.meter.finish(requests, engines, max(r.finish_ns for r in requests)) if cluster.meter else None
    if energy is not None:
        report["energy"] = energy
    if transfer is not None:
        spans = [t[2] - t[1] for t in cluster.transfers]
        from .metrics import distribution_ns

        report["kv_transfer"] = transfer.stats() | {"time_ns": distribution_ns(spans)}
    report["wall_s"] = time.perf_counter() - started
    report["cpu_s"] = time.process_time() - started_cpu  # this process's CPU time: what other jobs do not change
    if cluster.record_iterations:  # last, once the report exists: a late write failure must not lose it
        from .timeline import write_timeline

        try:
            write_timeline(spec.timeline, cluster, requests)
        except ConfigError as exc:  # the timeline is in a recovered file (the error says where), the report on it
            exc.served = (report, requests)
            raise
    return report, requests
