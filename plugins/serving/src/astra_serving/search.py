"""The cheapest serving deployment (fewest GPUs) of a model that meets a latency SLO at a QPS: ``astra search
--serve`` (plugins/sweep's command, which calls :func:`search_deployments`) and its deprecated alias ``astra
serve-search`` (removed in the next release).

Candidates are every TP size that divides the node (or ``--tp``) times every ``--pp`` and ``--ep`` size (default
1) with 1 .. N replicas, and with ``--disaggregate-ratios`` prefill:decode pools of each ratio, scaled; each is
one ``astra serve`` run of the same requests (same seed). They are tried in order of GPU count; the first count at
which some candidate meets every SLO (``--slo-ttft-p99 500``: the TTFT p99 at most 500 ms; any ``--slo-ttft-pNN``
and ``--slo-tpot-pNN``) ends the search, and the best candidate of that count (the highest share of requests
within every target, then the lowest value of the first SLO's percentile) is the answer. The deprecated
``--slo-ttft MS --slo-fraction F`` reads as ``--slo-ttft-p<100 F> MS``. A candidate whose model does not fit its GPUs is skipped, saying why. The candidates of one GPU count
are independent runs: given an executor (``astra search --serve --jobs N`` or ``--dask ADDRESS``, astra-sweep's
local pool or Dask cluster) they run side by side, with the same rows as one after the other.

``-o/--output PATH`` writes every candidate's row and the answer as JSON, ``--json`` prints them (latencies in
integer ns, with a ``units`` key); the terminal shows ms.
"""

from __future__ import annotations

import json
import sys

from astra_sim.errors import ConfigError, InfeasibleError


def add_serving_search_arguments(p, max_gpus=True):
    """The flags of a serving search (shared by ``astra serve-search`` and ``astra search --serve``)."""
    from astra_sim.cliutil import positive_float, positive_int

    from .spec import add_slo_flags

    g = p.add_argument_group("serving deployments" + ("" if max_gpus else " (--serve)"))
    g.add_argument("--qps", type=positive_float, help="requests per second to serve")
    g.add_argument("--requests", type=positive_int, default=None, help="generated requests (default 500)")
    g.add_argument("--prompt-len", default=None, help="prompt length distribution (astra serve's; default 512)")
    g.add_argument("--output-len", default=None, help="output length distribution (default 128)")
    g.add_argument("--seed", type=int, default=None)
    add_slo_flags(g)
    g.add_argument("--slo-ttft", type=positive_float, metavar="MS",
                   help="deprecated: write --slo-ttft-p90 MS (with --slo-fraction F: --slo-ttft-p<100 F>)")
    g.add_argument("--slo-tpot", type=positive_float, metavar="MS",
                   help="deprecated: write --slo-tpot-p90 MS (with --slo-fraction F: --slo-tpot-p<100 F>)")
    g.add_argument("--slo-fraction", type=positive_float, default=None,
                   help="deprecated, with --slo-ttft/--slo-tpot: the share of requests within them (default 0.9); "
                   "the percentile flags name it (--slo-ttft-p90)")
    if max_gpus:
        g.add_argument("--max-gpus", type=positive_int, default=32)
    g.add_argument("--disaggregate-ratios", default=None, metavar="P:D,...",
                   help="also try prefill/decode pools of these ratios (e.g. 1:1,1:2)")
    g.add_argument("--router", default=None, help="astra serve's --router (default least-loaded)")
    g.add_argument("--serve-arg", action="append", default=[], metavar="FLAG",
                   help="an astra serve flag for every candidate (repeatable, e.g. --serve-arg=--max-num-seqs=64)")


#: the serving flags' defaults (None on the parser, so that astra search can tell which were given)
SERVE_DEFAULTS = {"requests": 500, "prompt_len": "512", "output_len": "128", "seed": 0,
                  "disaggregate_ratios": "", "router": "least-loaded"}


#: what ``astra serve-search`` prints before it runs (the alias goes in the next release)
DEPRECATION = ("'astra serve-search' is deprecated; use 'astra search --serve' (it will be removed in the next "
               "release)")


def add_search_command(sub):
    """``astra serve-search``: the deprecated alias of ``astra search --serve`` (same flags, ``--max-gpus`` for
    ``--gpus``), kept for one release."""
    from astra_sim.cliutil import add_executor_flags, add_output_flags, add_platform_flags
    from astra_workload_generators.llm.spec import add_model_flags

    p = sub.add_parser("serve-search", help="deprecated: use astra search --serve (removed in the next release)",
                       description="Deprecated alias of astra search --serve (removed in the next release): the "
                       "cheapest serving deployment (fewest GPUs) of a model that meets a latency SLO at a QPS "
                       "(docs/serving.md).")
    add_model_flags(p, required=True)
    add_platform_flags(p, required=True, nodes=False)
    p.add_argument("--tp", default=None, metavar="N,N,...", help="TP sizes (default: every divisor of the node)")
    p.add_argument("--pp", default=None, metavar="N,N,...", help="PP sizes (default 1)")
    p.add_argument("--ep", default=None, metavar="N,N,...", help="EP sizes (MoE models; default 1)")
    add_output_flags(p, "every candidate's numbers and the answer")
    add_executor_flags(p)
    add_serving_search_arguments(p)
    from astra_gpu_model.cudnn_versions import add_cudnn_argument

    add_cudnn_argument(p)  # astra search --serve's and astra serve's: every candidate's steps run with it
    p.set_defaults(run_command=_cmd_serve_search)


def _cmd_serve_search(args):
    from astra_sim.cliutil import warning

    warning(DEPRECATION)
    if not (args.jobs or args.dask or args.executor):
        return search_deployments(args)
    from astra_sim.executors import make_executor

    with make_executor(args.jobs, args.dask, args.executor) as executor:
        return search_deployments(args, executor)


def _sizes(text, flag, default):
    if not text:
        return default
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise ConfigError(f"{flag}: expected positive integers N,N,..., got {text!r}")
    return values


def tiles(tp, pp, ep, gpus_per_node):
    """Whether a replica of TP x PP x EP fills whole nodes as the step simulator runs it (steptime.Layout)."""
    per = tp * pp * ep
    total = -(-per // gpus_per_node) * gpus_per_node
    return total % (tp * pp) == 0 and (total // (tp * pp)) % ep == 0 and (per >= gpus_per_node or
                                                                        gpus_per_node % per == 0)


def candidates(gpus_per_node, tps, max_gpus, ratios, pps=(1,), eps=(1,)):
    """(GPUs, label, {ServeSpec field: value}) of every candidate, by GPU count."""
    out = []
    for tp in tps:
        for pp in pps:
            for ep in eps:
                if not tiles(tp, pp, ep, gpus_per_node):
                    continue
                per = tp * pp * ep
                name = f"TP {tp}" + (f" PP {pp}" if pp > 1 else "") + (f" EP {ep}" if ep > 1 else "")
                layout = {"tp": tp, "pp": pp, "ep": ep}
                for replicas in range(1, max_gpus // per + 1):
                    out.append((per * replicas, f"{replicas} x {name}", {**layout, "replicas": replicas}))
                for p_, d_ in ratios:
                    k = 1
                    while (p_ + d_) * k * per <= max_gpus:
                        out.append(((p_ + d_) * k * per, f"{p_ * k}P:{d_ * k}D x {name}",
                                    {**layout, "disaggregate": f"{p_ * k}:{d_ * k}"}))
                        k += 1
    return sorted(out, key=lambda c: (c[0], c[1]))


def run_candidate(task, _payload=None):
    """One candidate (``task``: its ``spec``, a :class:`~astra_serving.spec.ServeSpec`, ``gpus``, ``label``), on
    whatever process runs it: ``("ok", row)``, ``("skipped", why)`` when the model does not fit, never an
    exception for that."""
    from .deployment import serve
    from .metrics import percentile_label

    try:
        report, _ = serve(task["spec"])
    except InfeasibleError as exc:
        return "skipped", str(exc)
    row = {"gpus": task["gpus"], "deployment": task["label"], "slo_fraction": report["goodput"]["fraction"],
           "slo_met": all(s["met"] for s in report["slo"]),
           "ttft_p90_ns": report["ttft_ns"]["p90"], "tpot_p50_ns": report["tpot_ns"]["p50"],
           "throughput_tokens_per_s": report["throughput_tokens_per_s"]}
    for s in report["slo"]:  # the percentiles the SLOs ask for: ttft_p99_ns, ...
        row[f"{s['metric']}_{percentile_label(s['percentile'])}_ns"] = s["value_ns"]
    return "ok", row


def _run_group(tasks, executor):
    """The results of ``tasks`` in their order: one after the other here, or side by side on ``executor``."""
    if executor is None:
        return [run_candidate(task) for task in tasks]
    from astra_sim.executors import ExecutorFailure

    done = {}
    for task, result in executor.run(run_candidate, [(task, None) for task in tasks]):
        if isinstance(result, ExecutorFailure):
            raise ConfigError(f"{task['label']}: {result.message}")
        done[task["label"]] = result
    return [done[task["label"]] for task in tasks]


def search_deployments(args, executor=None):
    """Run the search ``args`` describes (``astra serve-search``'s or ``astra search --serve``'s flags), each GPU
    count's candidates on ``executor`` when given; exit status 0 with an answer, 1 when no deployment of at most
    ``max_gpus`` GPUs meets the SLO. The progress goes to stdout, or to stderr with ``--json`` (whose JSON owns
    stdout)."""
    import itertools

    from .metrics import SLO_METRICS, UNITS, percentile_label, slo_key

    from astra_sim.platforms import get_platform

    from .spec import ServeSpec

    for key, value in SERVE_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.qps is None:
        raise ConfigError("give --qps (requests per second to serve)")
    slos = search_slos(args)
    from astra_sim.cliutil import warning

    from .cli import SLO_TAIL_REQUESTS, check_outputs, small_sample_warning

    check_outputs(args)

    for metric, percentile, _ in dict.fromkeys((m, p, None) for m, p, _ in slos):  # once per percentile asked
        thin = small_sample_warning(args.requests, percentile, SLO_TAIL_REQUESTS, SLO_METRICS[metric])
        if thin:
            warning(thin)
    platform = get_platform(args.platform)
    tps = _sizes(args.tp, "--tp", [t for t in range(1, platform.gpus_per_node + 1)
                                   if platform.gpus_per_node % t == 0])
    pps = _sizes(getattr(args, "pp", None), "--pp", [1])
    eps = _sizes(getattr(args, "ep", None), "--ep", [1])
    try:
        ratios = [tuple(int(v) for v in r.split(":")) for r in args.disaggregate_ratios.split(",") if r.strip()]
        if any(len(r) != 2 or min(r) < 1 for r in ratios):
            raise ValueError
    except ValueError:
        raise ConfigError(f"--disaggregate-ratios: expected P:D,P:D,... (each >= 1), got "
                          f"{args.disaggregate_ratios!r}") from None
    # a bad --serve-arg is an error before anything runs
    base = ServeSpec.from_mapping(
        {("model" if args.model else "preset"): args.model or args.preset, "platform": args.platform,
         "qps": args.qps, "requests": args.requests, "prompt_len": args.prompt_len, "output_len": args.output_len,
         "seed": args.seed, "router": args.router, **{slo_key(m, p): ms for m, p, ms in slos},
         **({"cudnn_version": args.cudnn_version} if getattr(args, "cudnn_version", None) else {})},
        where="astra search --serve", flags=args.serve_arg)
    from .deployment import check_cudnn_version, run_options

    check_cudnn_version(run_options(base), platform)  # a release no measurement of the GPU reaches: before any run
    first = f"{slos[0][0]}_{percentile_label(slos[0][1])}_ns"  # the answer's tie-break and the progress lines
    shown_slos = ", ".join(f"{SLO_METRICS[m]} {percentile_label(p)} <= {ms:g} ms" for m, p, ms in slos)
    shown = sys.stderr if getattr(args, "json", False) else sys.stdout
    rows, answer = [], None
    found = candidates(platform.gpus_per_node, tps, args.max_gpus, ratios, pps, eps)
    for gpus, group in itertools.groupby(found, key=lambda c: c[0]):
        group = list(group)
        tasks = [{"spec": base.replace(**changes), "gpus": gpus, "label": label} for _, label, changes in group]
        for task, (status, result) in zip(tasks, _run_group(tasks, executor)):
            label = task["label"]
            if status == "skipped":
                rows.append({"gpus": gpus, "deployment": label, "skipped": result})
                print(f"{label}: skipped ({result})", file=sys.stderr)
                continue
            row = result
            rows.append(row)
            values = ", ".join(f"{SLO_METRICS[m]} {percentile_label(p)} {_ms(row[f'{m}_{percentile_label(p)}_ns'])} ms"
                               for m, p in dict.fromkeys((m, p) for m, p, _ in slos))
            print(f"{label} ({gpus} GPUs): {values}: {'meets' if row['slo_met'] else 'misses'} the SLO "
                  f"({100 * row['slo_fraction']:.1f} % of requests within every target)", file=shown, flush=True)
            if row["slo_met"] and (answer is None or (row["slo_fraction"], -(row[first] or 0))
                                   > (answer["slo_fraction"], -(answer[first] or 0))):
                answer = row
        if answer is not None:  # the fewest GPUs that meet the SLO: no larger count runs
            break
    if answer is None:
        print(f"no deployment of at most {args.max_gpus} GPUs meets {shown_slos}", file=shown)
    else:
        print(f"cheapest: {answer['deployment']} = {answer['gpus']} GPUs (meets {shown_slos})", file=shown)
    result = {"units": dict(UNITS), "candidates": rows, "answer": answer}
    if getattr(args, "json", False):  # before -o: a late failure of -o does not take it with it
        print(json.dumps(result, indent=1))
    if getattr(args, "output", None):  # a late failure keeps it in a recovered file; the ConfigError says where
        from astra_sim.safeio import write_or_recover

        write_or_recover(args.output, (json.dumps(result, indent=1) + "\n").encode(), "astra search", "--output")
    return 0 if answer is not None else 1


def search_slos(args):
    """The search's SLOs ``((metric, percentile, target ms), ...)``: the ``--slo-ttft-pNN``/``--slo-tpot-pNN``
    flags, or the deprecated ``--slo-ttft``/``--slo-tpot`` with ``--slo-fraction`` (default 0.9) read as the
    percentile ``100 x fraction`` with a warning that gives the new spelling; a ConfigError when none is given."""
    from astra_sim.cliutil import warning

    from .metrics import SLO_PERCENTILES, percentile_label
    from .spec import slos_of

    slos = list(slos_of(vars(args)))
    old = [(m, getattr(args, f"slo_{m}", None)) for m in ("ttft", "tpot") if getattr(args, f"slo_{m}", None)]
    fraction = getattr(args, "slo_fraction", None)
    if fraction is not None and not old:
        raise ConfigError(f"--slo-fraction {fraction:g} goes with the deprecated --slo-ttft/--slo-tpot; the "
                          "percentile flags name the share: --slo-ttft-p90 MS, --slo-tpot-p99 MS")
    if old:
        fraction = 0.9 if fraction is None else fraction
        percentile = round(100 * fraction, 6)
        percentile = int(percentile) if float(percentile).is_integer() else percentile
        if percentile not in SLO_PERCENTILES:
            raise ConfigError(f"--slo-fraction must be 0.01 .. 0.99 or 0.999, got {fraction:g}")
        new = " ".join(f"--slo-{m}-{percentile_label(percentile)} {ms:g}" for m, ms in old)
        given = " ".join(f"--slo-{m} {ms:g}" for m, ms in old) + (
            f" --slo-fraction {args.slo_fraction:g}" if args.slo_fraction is not None else "")
        warning(f"{given} is deprecated: write {new} (removed in the next release)")
        slos += [(m, percentile, float(ms)) for m, ms in old]
    if not slos:
        raise ConfigError("give an SLO: --slo-ttft-pNN MS and/or --slo-tpot-pNN MS (e.g. --slo-ttft-p99 500)")
    return tuple(dict.fromkeys(slos))


def _ms(ns):
    return "n/a" if ns is None else f"{ns / 1e6:.1f}"
