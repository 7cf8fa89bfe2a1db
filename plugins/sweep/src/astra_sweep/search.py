"""``astra search``: the best parallel layout of an LLM on N GPUs.

Every combination of TP (within a node), PP, virtual stages, DP, micro-batch size, ZeRO stage and
recomputation (and EP for mixture-of-experts models, CP with ``--cp``) that the generator accepts for the global
batch is enumerated; those whose estimated peak memory (:mod:`astra_workload_generators.llm.memory`) exceeds the
GPU's HBM are dropped, counted by why; the rest are ranked by step time, simulated (``workload.llm`` zipped over the
layouts, run on the platform with the gpu compute model) on the local pool or Dask.

Branch and bound (:mod:`.bound`): every layout first gets a lower bound on its step, its busiest rank's compute
from the gpu compute model's per-op costs; the layouts are simulated in rounds (one per worker), most promising
first (the bound plus the pipeline's bubble), and a layout whose bound is not below the best simulated step is
never simulated: it cannot win, so the answer is the exhaustive search's. ``--exhaustive`` simulates them all.

``--objective energy`` ranks by IT energy per token and ``--objective cost`` by cost per token (``--prices``, the
sweep's price table); ``--max-step-time-ms`` ranks out layouts slower than a bound (:mod:`.objective`, which also
says how the pruning stays exact for each objective).

``-o/--output PATH`` writes the answer as JSON (the ranked layouts, the drops; times in integer ns, energies in
integer mJ, a ``units`` key), ``--json`` prints it; ``--points RESULTS`` keeps every simulated point (.parquet or
.csv; a rerun resumes).

MFU = model FLOPs of the step (``6 * P * tokens + 12 * L * s^2 * h * sequences``, Megatron's count, no
recomputation) / (step time x GPUs x the GPU's dense bf16 peak).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time

from astra_sim.cliutil import add_executor_flags, add_output_flags, add_platform_flags, positive_float, positive_int
from astra_sim.errors import ConfigError

from .memory_columns import estimate_columns
from .objective import OBJECTIVES, Objective

#: what the JSON's numbers are in
UNITS = {"time": "ns", "size": "bytes"}


def _ints(text):
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise ConfigError(f"expected comma-separated non-negative integers, got {text!r}")
    return values


def add_search_command(sub):
    p = sub.add_parser(
        "search", help="find the fastest TP/PP/VP/DP/micro-batch/ZeRO/recompute layout of an LLM on N GPUs",
        description="Enumerate every valid parallel layout of a model on --gpus GPUs for --global-batch "
        "sequences, drop those that do not fit the GPU's memory (saying why and how many), simulate the rest and "
        "print the fastest with step time, MFU and memory (-o/--output writes them as JSON, --json prints them).")
    from astra_workload_generators.llm.spec import add_model_flags

    add_model_flags(p, required=True)
    p.add_argument("--gpus", type=positive_int, default=None, metavar="N",
                   help="GPUs of the training layouts (required); with --serve the most GPUs a deployment may "
                        "use (default 32)")
    add_platform_flags(p, required=True, nodes=False)
    p.add_argument("--global-batch", type=positive_int, default=None, metavar="B",
                   help="sequences per step (required for training layouts)")
    p.add_argument("--serve", action="store_true",
                   help="search serving deployments instead: the fewest GPUs (TP/PP/EP, replicas, prefill:decode "
                        "ratio) that meet --slo-ttft/--slo-tpot at --qps (astra serve runs; plugin serving; "
                        "docs/serving.md)")
    p.add_argument("--seq-len", type=positive_int, default=None, metavar="S", help="override the preset's")
    p.add_argument("--platform-collective", default="nccl", choices=("ring", "nccl"), help="default nccl")
    _add_nccl_version(p)
    for flag, default, what in (("tp", None, "TP sizes (default: every divisor of the node size)"),
                                ("pp", None, "PP sizes (default: every divisor of the layers)"),
                                ("vp", "1,2,3,4,6,8,12", "virtual stages per pipeline rank"),
                                ("mbs", "1,2,4", "micro-batch sizes"), ("zero", "0,1", "ZeRO stages"),
                                ("ep", None, "EP sizes (MoE models; default every divisor of the experts)"),
                                ("cp", "1", "context-parallel sizes")):
        p.add_argument(f"--{flag}", default=default, metavar="N,N,...", help=what)
    p.add_argument("--recompute", default="none,full", metavar="none,full,selective",
                   help="recomputation modes to try (default none,full; with FlashAttention none keeps no "
                   "attention scores)")
    p.add_argument("--gemm-dtype", default="same", choices=("same", "fp8"))
    p.add_argument("--grad-buffer", default="fp32", choices=("fp32", "same"),
                   help="Megatron/NeMo main gradients: fp32 (Megatron-LM, default) or the model dtype (NeMo's "
                        "distributed fused Adam), as astra workload llm --grad-buffer")
    p.add_argument("--fp8-params", action="store_true",
                   help="with --gemm-dtype fp8: FP8 primary weights (Transformer Engine; MLPerf v4.0's FP8_PARAMS)")
    p.add_argument("--top", type=positive_int, default=10, metavar="K", help="configurations printed (default 10)")
    p.add_argument("--objective", default="time", choices=OBJECTIVES,
                   help="what to minimise: time (the step, default), energy (IT energy per token: GPUs, host, "
                        "NVSwitch, NICs, switches; docs/energy.md) or cost (dollars per token, from --prices)")
    p.add_argument("--max-step-time-ms", type=positive_float, default=None, metavar="MS",
                   help="rank out layouts whose step takes longer (those whose lower bound does are not simulated)")
    p.add_argument("--prices", default=None, metavar="FILE.yaml",
                   help="a price table (as a sweep's prices:, e.g. examples/sweeps/gpu_prices.yaml): adds the cost "
                        "per token; needed by --objective cost")
    add_output_flags(p, "the answer", json_help="print the answer as JSON on stdout (the table goes to stderr); "
                     "training: the ranked layouts (step_ns, mfu, peak_mem_bytes) and the drops; --serve: every "
                     "candidate and the cheapest (latencies in ns)")
    p.add_argument("--points", default=None, metavar="RESULTS",
                   help="keep every simulated point (.parquet or .csv; a rerun resumes it)")
    add_executor_flags(p)
    p.add_argument("--point-timeout", type=float, default=None, metavar="S")
    p.add_argument("--exhaustive", action="store_true",
                   help="simulate every layout that fits (default: skip those whose lower bound is not "
                        "below the best simulated step; the winner is the same)")
    p.add_argument("--plot", metavar="FILE.png", help="step time against memory of every simulated point")
    p.add_argument("--no-progress", action="store_true")
    _add_serving_arguments(p)
    p.set_defaults(run_command=_cmd_search)


def _add_nccl_version(p):
    """``--nccl-version``, ``--nccl-nvls`` and ``--cudnn-version``, astra run's (the gpu_model plugin's), checked as
    they are there: the layouts run with them, and the lower bound times their collectives and attention with the
    same choice."""
    try:
        from astra_gpu_model.cudnn_versions import add_cudnn_argument
        from astra_gpu_model.nccl_tuning import add_release_arguments
    except ImportError:
        return
    add_release_arguments(p, "; in the simulated layouts and in their lower bounds")
    add_cudnn_argument(p)


def _add_serving_arguments(p):
    """--serve's flags, from the serving plugin when it is installed."""
    try:
        from astra_serving.search import add_serving_search_arguments
    except ImportError:
        return
    add_serving_search_arguments(p, max_gpus=False)


#: flags only --serve uses (their parser default is None or empty)
_SERVE_ONLY = ("qps", "requests", "prompt_len", "output_len", "seed", "slo_ttft", "slo_tpot", "slo_fraction",
               "disaggregate_ratios", "router", "serve_arg")


def _cmd_serve_search(args):
    try:
        from astra_serving.search import search_deployments
    except ImportError:
        raise ConfigError("astra search --serve needs the serving plugin (plugins/serving)") from None
    for flag in ("global_batch", "seq_len", "points", "plot", "max_step_time_ms", "prices", "nccl_version",
                 "nccl_nvls"):  # --cudnn-version is astra serve's too: every candidate's steps run with it
        if getattr(args, flag, None):
            raise ConfigError(f"--{flag.replace('_', '-')} is for training layouts, not --serve")
    if args.objective != "time":
        raise ConfigError(f"--objective {args.objective} is for training layouts, not --serve (it finds the fewest "
                          "GPUs that meet the SLOs)")
    args.max_gpus = args.gpus or 32
    if not (args.jobs or args.dask or args.executor):
        return search_deployments(args)
    from astra_sim.executors import make_executor

    with make_executor(args.jobs, args.dask, args.executor) as executor:  # each GPU count's candidates side by side
        return search_deployments(args, executor)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_layouts(dims, gpus, global_batch, gpus_per_node, choices, gemm_dtype="same", grad_buffer="fp32",
                      fp8_params=False):
    """(layouts [(LlmConfig, global batch divides?)], invalid count): every layout the generator accepts."""
    from astra_workload_generators.llm import LlmConfig, check_config

    tps = choices.get("tp") or [t for t in _divisors(gpus_per_node) if gpus % t == 0]
    pps = choices.get("pp") or _divisors(dims.layers)
    eps = choices.get("ep") or (_divisors(dims.experts) if dims.moe else [1])
    layouts, invalid = [], 0
    for tp in tps:
        for cp in choices["cp"]:
            for pp in pps:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                for mbs in choices["mbs"]:
                    # (a batch that does not divide is still checked for memory, then refused for the batch)
                    m = max(1, global_batch // (dp * mbs))
                    batch_ok = global_batch % (dp * mbs) == 0
                    for vp in choices["vp"]:
                        if vp > 1 and pp == 1:
                            continue
                        for ep in eps:
                            for zero in choices["zero"]:
                                for rc in choices["recompute"]:
                                    cfg = LlmConfig(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batches=m,
                                                    micro_batch_size=mbs, virtual_stages=vp, zero=zero,
                                                    sequence_parallel=tp > 1, recompute=rc == "full",
                                                    recompute_selective=rc == "selective", gemm_dtype=gemm_dtype,
                                                    grad_buffer=grad_buffer, fp8_params=fp8_params)
                                    try:
                                        check_config(dims, cfg)
                                    except ConfigError:
                                        invalid += 1
                                        continue
                                    layouts.append((cfg, batch_ok))
    return layouts, invalid


def _options(cfg):
    out = {"tp": cfg.tp, "pp": cfg.pp, "dp": cfg.dp, "micro-batches": cfg.micro_batches,
           "micro-batch-size": cfg.micro_batch_size, "virtual-stages": cfg.virtual_stages, "zero": cfg.zero,
           "sequence-parallel": cfg.sequence_parallel, "cp": cfg.cp, "ep": cfg.ep,
           "recompute": "full" if cfg.recompute else ("selective" if cfg.recompute_selective else False)}
    return out


#: ``astra search``'s flags that write a file, by argparse dest
OUTPUT_FLAGS = {"output": "--output", "points": "--points", "plot": "--plot"}


def _cmd_search(args):
    if args.output and os.path.splitext(args.output)[1].lower() in (".parquet", ".csv"):
        raise ConfigError(f"-o/--output {args.output}: the answer is written as JSON; keep the simulated points "
                          "with --points RESULTS.parquet|csv")
    from astra_sim.outputs import check_writable_folder

    given = {flag: getattr(args, dest) for dest, flag in OUTPUT_FLAGS.items() if getattr(args, dest, None)}
    for flag, path in given.items():  # before any layout is simulated
        check_writable_folder(os.path.dirname(os.path.abspath(path)), f"{flag} {path}")
    from astra_sim.executors import Stopped, stop_on_signals

    try:
        with stop_on_signals():  # a stop signal in any phase runs every clean-up and says what was kept
            return _run_search(args)
    except Stopped as stop:
        print(f"astra search: {stop.signal_name}: {_kept(args)}", file=sys.stderr)
        raise
    except OSError as exc:  # a write that fails late (a full disk); the atomic writers leave no partial file
        named = ", ".join(f"{flag} {path}" for flag, path in given.items()) or "astra search"
        kept = f"; the simulated points are kept in {args.points}.journal (rerun to resume)" if (
            args.points and os.path.exists(f"{args.points}.journal")) else ""
        raise ConfigError(f"{named}: cannot write: {exc.strerror or exc}{kept}") from None


def _kept(args):
    """What an interrupted search kept: the layouts simulated so far are in --points (a rerun resumes them), or
    nowhere (they were in a temporary folder)."""
    if args.serve:
        return "nothing kept (a serving search does not resume); rerun the same command"
    if not args.points:
        return ("nothing kept (the simulated layouts were in a temporary folder); give --points RESULTS.parquet to "
                "keep them, and a rerun resumes")
    rows = _read(args.points) if os.path.exists(args.points) else {}
    return (f"{len(rows)} simulated layout{'' if len(rows) == 1 else 's'} kept in {args.points}; rerun the same "
            "command to resume")


def _run_search(args):
    if args.serve:
        return _cmd_serve_search(args)
    late = []  # -o/--plot writes that failed late, each kept in a recovered file: said once the answer is out
    if not args.json:
        _search_layouts(args, late)
    else:
        with contextlib.redirect_stdout(sys.stderr):  # --json owns stdout: the table and the summary go to stderr
            result = _search_layouts(args, late)
        print(json.dumps(result, indent=1))
    if late:
        raise ConfigError("; ".join(late))
    return 0


def _search_layouts(args, late):
    """The training search: prints the table, writes -o/--output and --plot (a late failure of either: its error,
    saying where the output was kept, goes into ``late``); the answer as a mapping."""
    given = [f for f in _SERVE_ONLY if getattr(args, f, None)]
    if given:
        raise ConfigError(f"--{given[0].replace('_', '-')} is for --serve (serving deployments)")
    for flag in ("gpus", "global_batch"):
        if getattr(args, flag) is None:
            raise ConfigError(f"astra search: --{flag.replace('_', '-')} is required (or --serve to search "
                              "serving deployments)")
    from astra_sim.platforms import get_platform
    from astra_workload_generators.llm import model_dims, peak_memory, training_flops
    from astra_workload_generators.llm.memory_fit import verdict as memory_verdict

    source = {"preset": args.preset}
    name = args.preset
    if args.model:
        from astra_sim.cliutil import warning
        from astra_workload_generators.llm.hf import load_hf_config

        base, warnings, path = load_hf_config(args.model)
        for line in warnings:
            warning(line)
        source, name = {"model": os.path.abspath(path)}, args.model
    dims = model_dims(args.preset, base=base if args.model else None, seq_len=args.seq_len)
    platform = get_platform(args.platform)
    capacity = platform.device_memory_bytes()
    dtype = "fp8" if args.gemm_dtype == "fp8" else "bf16"
    peak_tflops = platform.peak_tflops(dtype)
    if capacity is None or not peak_tflops:
        raise ConfigError(f"astra search: --platform {platform.name} states no device memory or {dtype} peak (the "
                          "layouts are filtered by memory and ranked by MFU; see `astra platforms --json`)")
    device = platform.describe(1).get("gpu", platform.name)
    if args.gpus % platform.gpus_per_node:
        raise ConfigError(f"--gpus {args.gpus} is not a whole number of {platform.name} nodes "
                          f"({platform.gpus_per_node} GPUs each)")
    choices = {k: _ints(getattr(args, k)) if getattr(args, k) else None for k in ("tp", "pp", "vp", "mbs", "zero",
                                                                                   "ep", "cp")}
    choices["recompute"] = [r.strip() for r in args.recompute.split(",") if r.strip()]
    for mode in choices["recompute"]:
        if mode not in ("none", "full", "selective"):
            raise ConfigError(f"--recompute: unknown mode {mode!r} (none, full, selective)")
    if args.fp8_params and args.gemm_dtype != "fp8":
        raise ConfigError("--fp8-params needs --gemm-dtype fp8 (the weights are held as their FP8 copies)")
    objective = _objective(args, platform)
    layouts, invalid = enumerate_layouts(dims, args.gpus, args.global_batch, platform.gpus_per_node, choices,
                                         args.gemm_dtype, args.grad_buffer, args.fp8_params)
    fit, dropped = [], {}
    estimates = {}
    batch_refused = 0
    for cfg, batch_ok in layouts:
        m = peak_memory(dims, cfg)
        estimates[id(cfg)] = m
        if memory_verdict(m.total, capacity) != "oom":  # a near miss (within the estimate's uncertainty) is kept
            if batch_ok:
                fit.append(cfg)
            else:
                batch_refused += 1
            continue
        states = m.weights + m.gradients + m.optimizer + m.workspace
        why = ("weights, gradients and optimizer states alone" if states > capacity else
               "activations of the micro-batches in flight")
        dropped.setdefault(why, []).append((cfg, m))
    print(f"{name} on {args.gpus} x {device} ({platform.name}), global batch {args.global_batch}: "
          f"{len(layouts) + invalid} layouts, {invalid} refused by the generator (divisibility, heads, ...), "
          f"{sum(len(v) for v in dropped.values())} do not fit {capacity / 2**30:g} GiB, {batch_refused} fit but "
          f"do not divide the global batch (DP x micro-batch size), {len(fit)} to simulate")
    for why, items in sorted(dropped.items()):
        cfg, m = min(items, key=lambda x: x[1].total)
        print(f"  dropped {len(items)}: {why} exceed the HBM (smallest: {_describe(cfg)} needs "
              f"{m.describe()})")
    if not fit:
        raise ConfigError("no layout fits the GPU's memory; add GPUs, ZeRO stages or recomputation")
    source = {**source, "platform": platform.name, **({"seq-len": args.seq_len} if args.seq_len else {}),
              **({"gemm-dtype": "fp8"} if args.gemm_dtype == "fp8" else {}),
              **({"grad-buffer": args.grad_buffer} if args.grad_buffer != "fp32" else {}),
              **({"fp8-params": True} if args.fp8_params else {})}
    from astra_sim.executors import make_executor
    from astra_sim.generated import private_folder

    from .point import worker_state

    state = worker_state()
    # one pool for the bounds' generations and the simulations (its workers are started once)
    with make_executor(args.jobs, args.dask, args.executor, state["pm"]) as executor, \
            private_folder("astra-search-") as folder:  # named by this process: a SIGKILLed run's is reclaimed
        bounds, interleaved = _bounds(fit, source, platform, args, executor)
        output = args.points or os.path.join(folder, "results.parquet")
        rounds = []
        summary, rows, pruned = _simulate(fit, bounds, source, output, folder, args, objective, executor, state,
                                          interleaved, rounds)
    beyond = {id(c) for c in pruned if not objective.meets_bound(bounds[id(c)][0])}
    if summary is None:
        least = min(bounds[id(c)][0] for c in fit) / 1e6
        raise ConfigError(f"--max-step-time-ms {args.max_step_time_ms:g}: no layout can meet it (the least lower bound "
                          f"on a layout's step is {least:,.1f} ms); raise it or add GPUs")
    if bounds:
        print(f"simulated {len(fit) - len(pruned)} layouts in {len(rounds)} rounds ({sum(rounds):.1f} s); "
              f"{len(pruned) - len(beyond)} skipped: {objective.pruned_why()} (--exhaustive simulates them)")
        if interleaved.done:
            print(f"  {len(interleaved.done)} interleaved layouts' bounds raised by their own chunks in "
                  f"{interleaved.seconds:.1f} s")
    flops = training_flops(dims, args.global_batch)
    peak = peak_tflops * 1e12
    ranked, over = [], []
    for cfg, row in zip(fit, [rows.get(_key(c)) for c in fit]):
        if row is None or row.get("status") != "ok":
            continue
        if not objective.meets_bound(row["step_ns"]):
            over.append({"layout": _options(cfg), "step_ns": int(row["step_ns"])})
            continue
        step = row["step_ns"] / 1e9
        ranked.append((step, flops / (step * args.gpus * peak), estimates[id(cfg)].total, cfg, row))
    ranked.sort(key=lambda x: objective.key(x[4]))
    over += [{"layout": _options(c), "bound_ns": bounds[id(c)][0]} for c in pruned if id(c) in beyond]
    if objective.max_step_ns is not None:
        print(f"{len(over)} layouts ranked out: slower than --max-step-time-ms {args.max_step_time_ms:g} "
              f"({len(beyond)} of them by their lower bound, not simulated)")
        if not ranked and over:
            fastest = min(o.get("step_ns", o.get("bound_ns")) for o in over) / 1e6
            raise ConfigError(f"--max-step-time-ms {args.max_step_time_ms:g}: no layout meets it (the fastest takes "
                              f"{fastest:,.1f} ms or more); raise it or add GPUs")
    overlaps = _overlapping_the_best(ranked, objective)
    _print_top(ranked[:args.top], summary, objective, overlaps)
    error = bound_error(fit, rows, bounds)
    if error is not None:
        print(f"lower bound / simulated step over the {error['layouts']} simulated layouts: min {error['min']:.3f}, "
              f"median {error['median']:.3f}, max {error['max']:.3f} (each layout's bound as the search used it)")
    inside = _skipped_inside(ranked[0][4], [bounds[id(c)][0] for c in pruned if id(c) not in beyond]) if overlaps \
        else 0
    if len(overlaps) > 1 or inside:
        print(f"{len(overlaps) - 1} of the {len(ranked) - 1} other simulated layouts have 90 % intervals that overlap "
              f"the fastest's (the model cannot tell them apart)"
              + (f"; {inside} skipped layouts' lower bounds lie inside it" if inside else ""))
    result = {"units": {**UNITS, **objective.units()}, "objective": objective.name,
              **({"max_step_ns": objective.max_step_ns} if objective.max_step_ns is not None else {}),
              "ranked": [{"layout": _options(c), "step_ns": int(row["step_ns"]), "mfu": mfu,
                          **_interval_columns(row, (i in overlaps and i > 0) if overlaps else None),
                          **objective.columns(row), **estimate_columns(estimates[id(c)], capacity)}
                         for i, (s, mfu, mem, c, row) in enumerate(ranked)],
              "dropped": {why: [_options(c) for c, _ in items] for why, items in dropped.items()},
              "refused": invalid, "batch_refused": batch_refused,
              "pruned": [{"layout": _options(c), "bound_ns": bounds[id(c)][0]} for c in pruned if id(c) not in beyond],
              **({"bound_error": error} if error is not None else {}),
              **({"over_max_step_time": over} if objective.max_step_ns is not None else {})}
    if args.output:
        from astra_sim.safeio import write_or_recover

        try:
            write_or_recover(args.output, (json.dumps(result, indent=1) + "\n").encode(), "astra search", "--output")
        except ConfigError as exc:
            late.append(str(exc))
    if args.plot:
        try:
            plot(ranked, {why: [m.total for _, m in items] for why, items in dropped.items()}, capacity, args.plot,
                 f"{name} on {args.gpus} x {device}, batch {args.global_batch}", objective.best_label())
        except ConfigError as exc:
            late.append(str(exc))
    return result


def _objective(args, platform):
    """The search's :class:`.objective.Objective` from its flags (the price table read, its warnings printed)."""
    prices = None
    if args.prices:
        from astra_sim.cliutil import warning
        from astra_sim.platforms import platforms

        from .derived import price_warnings, read_prices

        prices = read_prices(args.prices, platforms())
        for line in price_warnings(prices, [platform.name]):
            warning(line)
    floor = 0.0
    if args.objective == "energy":
        from .objective import energy_floor_w_per_gpu

        floor = energy_floor_w_per_gpu(platform, args.gpus)
    max_step_ns = round(args.max_step_time_ms * 1e6) if args.max_step_time_ms else None
    return Objective(args.objective, max_step_ns, args.gpus, floor, prices, platform.name)


def _bounds(fit, source, platform, args, executor):
    """({id(layout): (lower bound ns, estimate ns)}, an :class:`_Interleaved` that raises interleaved layouts'
    bounds when asked), or ({}, None) when the platform's GPU has no gpu compute model (every layout is then
    simulated) or --exhaustive asks for every one. The generations behind the bounds run side by side on
    ``executor``'s workers."""
    gpu = getattr(platform, "gpu", None)
    if args.exhaustive or not isinstance(gpu, str):
        return {}, None
    from .bound import BoundCache, pipeline_estimate

    started = time.perf_counter()
    cache = BoundCache.for_platform(source, platform, args.gpus, nccl=args.platform_collective == "nccl",
                                    nccl_version=getattr(args, "nccl_version", None),
                                    nccl_nvls=getattr(args, "nccl_nvls", None),
                                    cudnn_version=getattr(args, "cudnn_version", None))
    cache.prefetch([cache.terms_layout(c) for c in fit], executor)
    out, whole = {}, {}
    for cfg in fit:
        terms = cache.terms(cfg)
        if terms is not None:
            out[id(cfg)] = (terms.bound_ns(cfg.micro_batches, cfg.virtual_stages), pipeline_estimate(terms, cfg))
            whole[id(cfg)] = terms.bound_ns(cfg.micro_batches, 1)
    print(f"bounded {len(out)} of {len(fit)} layouts in {time.perf_counter() - started:.1f} s (busiest rank's "
          f"compute and in-node collectives, pipeline fill and drain; {cache.generated} computed on "
          f"{getattr(executor, 'workers', 1)} workers, the rest shared or cached)")
    return out, _Interleaved(cache, out, whole, executor)


class _Interleaved:
    """Raises interleaved layouts' bounds to :func:`.bound.interleaved_bound_ns` (their own chunks' fill and
    drain), computed side by side on the search's workers, once per layout, and only for layouts that the cheap
    bound could not prune and whose bound with whole stages' edge (``whole``; a chunk's fill and drain are
    shorter) reaches the best step: that choice only saves time, a raised bound is a bound whatever the choice."""

    def __init__(self, cache, bounds, whole, executor):
        self.cache, self.bounds, self.whole, self.executor = cache, bounds, whole, executor
        self.done, self.seconds = set(), 0.0

    def __call__(self, layouts, limit):
        """Raise the bounds of those of ``layouts`` that may be pruned below ``limit`` (``bounds`` is updated)."""
        from .bound import interleaved_bound_ns

        ask = [c for c in layouts if c.virtual_stages > 1 and id(c) not in self.done and id(c) in self.bounds
               and self.bounds[id(c)][0] < limit <= self.whole[id(c)]]
        if not ask:
            return
        started = time.perf_counter()
        self.cache.prefetch([v for v in map(self.cache.virtual_stage_layout, ask) if v is not None], self.executor)
        for cfg in ask:
            self.done.add(id(cfg))
            raised = interleaved_bound_ns(cfg, self.cache.virtual_stage_terms(cfg), cfg.micro_batches)
            bound, estimate = self.bounds[id(cfg)]
            self.bounds[id(cfg)] = (max(bound, raised or 0), estimate)
        self.seconds += time.perf_counter() - started


def _simulate(fit, bounds, source, output, folder, args, objective, executor, state, interleaved=None, rounds=None):
    """Simulate the layouts in rounds on ``executor``, most promising first, skipping those whose bound reaches
    the objective's limit (:meth:`.objective.Objective.limit_ns`: they cannot beat the best row simulated so far,
    or cannot meet the step-time bound; interleaved layouts' bounds raised first by ``interleaved``); (the last
    round's summary, None when no layout could meet the step-time bound, {layout key: row}, the layouts not
    simulated). Each round's wall seconds are appended to ``rounds``."""
    from .sweep import run_sweep

    never = (float("inf"), float("inf"))
    todo = sorted(fit, key=lambda c: bounds.get(id(c), never)[1] if bounds else 0)
    done, rows, best, summary = [], {}, None, None
    if os.path.exists(output):  # a rerun's --points: its layouts go first (resumed, not simulated again)
        rows = _read(output)
        objective.check_resumed(rows, output)
        done = [c for c in todo if _key(c) in rows]
        todo = [c for c in todo if _key(c) not in rows]
        best = _best(done, rows, best, objective)

    def could_win(cfg, limit):  # a layout whose bound reaches the limit cannot beat the best (or meet the bound)
        return id(cfg) not in bounds or bounds[id(cfg)][0] < limit

    workers = max(1, getattr(executor, "workers", None) or args.jobs or 4)
    batch = workers
    while todo or summary is None:
        limit = objective.limit_ns(best) if bounds else None
        if limit is not None:
            todo = [c for c in todo if could_win(c, limit)]
            if interleaved is not None:
                interleaved(todo, limit)
                todo = [c for c in todo if could_win(c, limit)]
        # the first round one layout per worker (the most promising: a best step to prune with, soon); each later
        # round twice the one before (a round waits for its slowest layout, and its base case is checked with the
        # workers idle, so few rounds keep the workers busy; a layout that a better step found in its own round
        # would have pruned is simulated all the same, and the answer is the same)
        round_, todo = (todo[:batch], todo[batch:]) if bounds else (todo, [])
        batch *= 2
        if not round_ and (summary is not None or not done):
            break
        # the longest first (a point's time grows with its micro-batches), so that the round ends with short ones
        round_.sort(key=lambda c: (-c.micro_batches, -c.virtual_stages))
        done += round_
        started = time.perf_counter()
        summary = _run_round(done, (round_ or done)[0], source, output, folder, args, state, executor, run_sweep,
                             objective)
        if rounds is not None:
            rounds.append(time.perf_counter() - started)
        rows = _read(output)
        best = _best(round_, rows, best, objective)
    simulated = {id(c) for c in done}
    return summary, rows, [c for c in fit if id(c) not in simulated]


def bound_error(fit, rows, bounds):
    """How far below the simulated steps the lower bounds lay: ``{"layouts": n, "min", "median", "max"}`` of
    bound / simulated step over the layouts simulated with a bound (as the search used it: an interleaved
    layout's raised only where that was asked), or None without any."""
    ratios = sorted(bounds[id(c)][0] / rows[_key(c)]["step_ns"] for c in fit
                    if id(c) in bounds and rows.get(_key(c), {}).get("status") == "ok" and rows[_key(c)]["step_ns"])
    if not ratios:
        return None
    return {"layouts": len(ratios), "min": round(ratios[0], 4), "median": round(statistics.median(ratios), 4),
            "max": round(ratios[-1], 4)}


def _best(layouts, rows, best, objective):
    """The best simulated row by ``objective`` among ``layouts`` and ``best`` (None before any)."""
    for cfg in layouts:
        row = rows.get(_key(cfg))
        key = objective.key(row)
        if key is not None and (best is None or key < objective.key(best)):
            best = row
    return best


def _run_round(done, base, source, output, folder, args, state, executor, run_sweep, objective):
    """One sweep over every layout simulated so far (the earlier ones are resumed from ``output``). The base case,
    which the sweep makes and resolves in this process before any point runs (configurations, options, backends:
    the same for every layout of the search), is one of this round's layouts with one micro-batch and no virtual
    stages (as the bound's terms generate it): a full one's generation here would keep a worker waiting."""
    import yaml

    run = {"platform": args.platform, "platform-collective": args.platform_collective}
    if getattr(args, "nccl_version", None):
        run["nccl-version"] = args.nccl_version
    if getattr(args, "nccl_nvls", None):
        run["nccl-nvls"] = args.nccl_nvls
    if getattr(args, "cudnn_version", None):
        run["cudnn-version"] = args.cudnn_version
    if not objective.needs_energy:
        # no breakdown: a layout's row needs its step, not where each rank's time went (about a tenth of a
        # point's time on GPT-3 175B), and the step is the same to the ns; the energy accounting needs it
        run["no-breakdown"] = True
    quick = {**_options(base), "micro-batches": 1, "virtual-stages": 1}
    spec = {"workload": {"llm": {**source, **quick}}, "run": run,
            "axes": {"zip": {f"workload.llm.{k}": [_options(c)[k] for c in done] for k in _options(base)}}}
    spec_path = os.path.join(folder, "search.yaml")
    with open(spec_path, "w") as handle:
        yaml.safe_dump(spec, handle, sort_keys=False)
    return run_sweep(spec_path, output, point_timeout=args.point_timeout, state=state, executor_object=executor,
                     progress=False if args.no_progress else None)


def _key(cfg):
    return _layout_key(_options(cfg))


def _layout_key(options):
    """A layout's options as a key, its values as text: a Parquet column that mixes types (``recompute``: False,
    "full") is stored as text, so a row read back says "False" where the layout says False."""
    return tuple(sorted((k, str(v)) for k, v in options.items()))


def _read(path):
    """{layout key: row} of a results file."""
    from .results import Results

    reader = Results(path, [], {})
    rows = reader._read_results()
    out = {}
    for row in rows:
        opts = {k.split(".")[-1]: row[k] for k in row if k.startswith("workload.llm.")}
        out[_layout_key(opts)] = row
    return out


def _describe(cfg):
    rc = "full" if cfg.recompute else ("selective" if cfg.recompute_selective else "none")
    return (f"TP {cfg.tp} PP {cfg.pp} VP {cfg.virtual_stages} DP {cfg.dp}" + (f" CP {cfg.cp}" if cfg.cp > 1 else "")
            + (f" EP {cfg.ep}" if cfg.ep > 1 else "") + f" mbs {cfg.micro_batch_size} x {cfg.micro_batches} "
            f"ZeRO {cfg.zero} recompute {rc}")


def _interval(row):
    """A simulated layout's empirical 90 % interval of its step, ``(low_ns, high_ns)`` (the validation plugin's,
    from the registry's cross-validated steps), or None when the run got none."""
    low, high = row.get("step_interval_90_low_ns"), row.get("step_interval_90_high_ns")
    if low is None or high is None or low != low or high != high:  # NaN: a Parquet row without one
        return None
    return int(low), int(high)


def _overlapping_the_best(ranked, objective):
    """Indexes of the ranked layouts whose 90 % interval overlaps the fastest's (the fastest included), when ranking
    by step time and every row has an interval; else an empty set. Such a layout may be the faster on hardware."""
    if objective.name != "time" or not ranked:
        return set()
    intervals = [_interval(item[4]) for item in ranked]
    if any(i is None for i in intervals):
        return set()
    best_high = intervals[0][1]
    return {i for i, (low, _high) in enumerate(intervals) if low <= best_high}


def _skipped_inside(best_row, skipped_bounds_ns):
    """How many layouts skipped by their lower bound could still overlap the fastest's interval: a skipped
    layout's step is at least its bound, so its interval starts at or above bound x (low / step) of the fastest
    (every step's interval is the step scaled by the same two factors)."""
    low, high = _interval(best_row)
    low_factor = low / best_row["step_ns"]
    return sum(1 for bound in skipped_bounds_ns if bound * low_factor <= high)


def _interval_columns(row, overlaps_best):
    found = _interval(row)
    if found is None:
        return {}
    return {"step_interval_90_ns": list(found),
            **({"overlaps_fastest": overlaps_best} if overlaps_best is not None else {})}


def _print_top(ranked, summary, objective, overlaps=frozenset()):
    """The table: step (with its 90 % interval, and ``~`` where that overlaps the fastest's), MFU and memory; with
    energy the IT energy per step and token and the GPUs' mean power; with prices the cost per million tokens."""
    from astra_sim.termtable import Column, print_table

    columns = [Column("#", number=True), Column("layout"), Column("step ms", number=True),
               Column("90 % ms", number=True, drop=1), Column("MFU %", number=True), Column("memory GB", number=True)]
    if objective.needs_energy:
        columns += [Column("IT J/\nstep", number=True), Column("IT mJ/\ntoken", number=True),
                    Column("W/\nGPU", number=True, drop=1)]
    if objective.prices is not None:
        columns.append(Column("$/M\ntokens", number=True))
    rows = []
    for i, (step, mfu, mem, cfg, row) in enumerate(ranked):
        interval = _interval(row)
        cells = [str(i + 1) + (" ~" if i in overlaps and i else ""), _describe(cfg), f"{step * 1e3:,.1f}",
                 f"{interval[0] / 1e6:,.0f}-{interval[1] / 1e6:,.0f}" if interval else "",
                 f"{mfu * 100:.1f}", f"{mem / 1e9:.1f}"]
        extra = objective.columns(row)
        if objective.needs_energy:
            cells += [_cell(extra.get("it_energy_mj"), 1e-3, ",.1f"),
                      _cell(extra.get("it_energy_per_token_mj"), 1, ",.2f"),
                      _cell(extra.get("mean_power_w_per_gpu"), 1, ",.0f")]
        if objective.prices is not None:
            cells.append(_cell(extra.get("usd_per_million_tokens"), 1, ",.2f"))
        rows.append(cells)
    print_table(f"{objective.title()} ({summary['ok']} simulated, {summary['error'] + summary['infeasible']} failed)",
                columns, rows, caption="~ its 90 % interval overlaps the fastest's" if len(overlaps) > 1 else None)


def _cell(value, scale, fmt):
    return "" if value is None else format(value * scale, fmt)


def plot(ranked, dropped, capacity, path, title, best_label="fastest"):
    """Step time against estimated peak memory for every simulated layout (dropped ones as ticks past the
    HBM line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    if ranked:
        ax.scatter([r[2] / 1e9 for r in ranked], [r[0] * 1e3 for r in ranked], s=14, label="simulated layouts")
        best = ranked[0]
        ax.scatter([best[2] / 1e9], [best[0] * 1e3], s=60, marker="*", color="red",
                   label=f"{best_label}: {_describe(best[3])}")
    ax.axvline(capacity / 1e9, color="grey", linestyle="--", label="HBM capacity")
    total_dropped = sum(len(v) for v in dropped.values())
    if total_dropped:
        ax.text(capacity / 1e9, ax.get_ylim()[1], f"  {total_dropped} layouts beyond", va="top", fontsize=8)
    ax.set_xlabel("estimated peak memory per GPU (GB)")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    from astra_sim.safeio import write_or_recover

    def save(handle):
        fig.savefig(handle, format=os.path.splitext(path)[1].lstrip(".").lower() or "png", dpi=110)
    try:  # a full disk leaves no partial picture, and the picture goes to a recovered file (the ConfigError says where)
        write_or_recover(path, save, "astra search", "--plot")
    finally:
        plt.close(fig)
    print(f"wrote {path}", file=sys.stdout)
