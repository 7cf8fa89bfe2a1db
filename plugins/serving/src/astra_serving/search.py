"""``astra serve-search``: the cheapest deployment (fewest GPUs) of a model that meets a latency SLO at a QPS.

Candidates are every TP size that divides the node (or ``--tp``) with 1 .. N replicas, and with
``--disaggregate-ratios`` prefill:decode pools of each ratio, scaled; each is one ``astra serve`` run of the
same requests (same seed). They are tried in order of GPU count; the first count at which some candidate meets
the SLO (``--slo-fraction`` of requests within ``--slo-ttft`` and ``--slo-tpot``) ends the search, and the best
candidate of that count (the highest SLO fraction, then the lowest TTFT p90) is the answer. A candidate whose
model does not fit its GPUs is skipped, saying why.
"""

from __future__ import annotations

import json
import sys

from astra_sim.errors import ConfigError, InfeasibleError


def add_search_command(sub):
    from astra_sim.cliutil import positive_float, positive_int

    p = sub.add_parser("serve-search", help="find the cheapest serving deployment (GPUs, TP, replicas, P/D ratio) "
                       "that meets a TTFT/TPOT SLO at a QPS (astra serve runs)",
                       description=__doc__.split("\n\n")[0])
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--preset")
    model.add_argument("--model", metavar="CONFIG")
    p.add_argument("--platform", required=True)
    p.add_argument("--qps", type=positive_float, required=True)
    p.add_argument("--requests", type=positive_int, default=500)
    p.add_argument("--prompt-len", default="512")
    p.add_argument("--output-len", default="128")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo-ttft", type=positive_float, metavar="MS")
    p.add_argument("--slo-tpot", type=positive_float, metavar="MS")
    p.add_argument("--slo-fraction", type=positive_float, default=0.9,
                   help="fraction of requests that must meet the SLO (default 0.9)")
    p.add_argument("--tp", default=None, metavar="N,N,...", help="TP sizes (default: every divisor of the node)")
    p.add_argument("--max-gpus", type=positive_int, default=32)
    p.add_argument("--disaggregate-ratios", default="", metavar="P:D,...",
                   help="also try prefill/decode pools of these ratios (e.g. 1:1,1:2)")
    p.add_argument("--router", default="least-loaded")
    p.add_argument("--serve-arg", action="append", default=[], metavar="FLAG",
                   help="an astra serve flag for every candidate (repeatable, e.g. --serve-arg=--max-num-seqs=64)")
    p.add_argument("--json", metavar="FILE", help="every candidate's numbers and the answer")
    p.set_defaults(run_command=_cmd_search)


def candidates(gpus_per_node, tps, max_gpus, ratios):
    """(GPUs, label, astra serve flags) of every candidate, by GPU count."""
    out = []
    for tp in tps:
        for replicas in range(1, max_gpus // tp + 1):
            out.append((tp * replicas, f"{replicas} x TP {tp}", ["--tp", str(tp), "--replicas", str(replicas)]))
        for p_, d_ in ratios:
            k = 1
            while (p_ + d_) * k * tp <= max_gpus:
                out.append(((p_ + d_) * k * tp, f"{p_ * k}P:{d_ * k}D x TP {tp}",
                            ["--tp", str(tp), "--disaggregate", f"{p_ * k}:{d_ * k}"]))
                k += 1
    return sorted(out, key=lambda c: (c[0], c[1]))


def _serve_parser():
    """``astra serve``'s parser, to read each candidate's flags exactly as the command line does."""
    import argparse

    from astra_sim.cli import build_parser
    from astra_sim.plugins import make_plugin_manager

    parser = build_parser(make_plugin_manager())
    for action in parser._actions:  # argparse has no public way to reach a sub-command's parser
        if isinstance(action, argparse._SubParsersAction) and "serve" in action.choices:
            return action.choices["serve"]
    raise ConfigError("astra serve is not installed")


def _cmd_search(args):
    from astra_gpu_model.platforms import get_platform

    from .cli import serve

    if args.slo_ttft is None and args.slo_tpot is None:
        raise ConfigError("give --slo-ttft and/or --slo-tpot (ms)")
    if not 0 < args.slo_fraction <= 1:
        raise ConfigError(f"--slo-fraction must be in (0, 1], got {args.slo_fraction}")
    platform = get_platform(args.platform)
    try:
        tps = ([int(x) for x in args.tp.split(",")] if args.tp else
               [t for t in range(1, platform.gpus_per_node + 1) if platform.gpus_per_node % t == 0])
        ratios = [tuple(int(v) for v in r.split(":")) for r in args.disaggregate_ratios.split(",") if r.strip()]
    except ValueError:
        raise ConfigError("--tp takes N,N,... and --disaggregate-ratios P:D,P:D,...") from None
    parser = _serve_parser()
    base = (["--model", args.model] if args.model else ["--preset", args.preset]) + [
        "--platform", args.platform, "--qps", str(args.qps), "--requests", str(args.requests), "--prompt-len",
        args.prompt_len, "--output-len", args.output_len, "--seed", str(args.seed), "--router", args.router,
        *(["--slo-ttft", str(args.slo_ttft)] if args.slo_ttft else []),
        *(["--slo-tpot", str(args.slo_tpot)] if args.slo_tpot else []), *args.serve_arg]
    rows, answer, found_at = [], None, None
    for gpus, label, flags in candidates(platform.gpus_per_node, tps, args.max_gpus, ratios):
        if found_at is not None and gpus > found_at:
            break
        ns = parser.parse_args(base + flags)
        try:
            report, _ = serve(ns)
        except InfeasibleError as exc:
            rows.append({"gpus": gpus, "deployment": label, "skipped": str(exc)})
            print(f"{label}: skipped ({exc})", file=sys.stderr)
            continue
        row = {"gpus": gpus, "deployment": label, "slo_fraction": report["goodput"]["fraction"],
               "ttft_p90_ms": report["ttft_ms"]["p90"], "tpot_p50_ms": report["tpot_ms"]["p50"],
               "throughput_tokens_per_s": report["throughput_tokens_per_s"]}
        rows.append(row)
        print(f"{label} ({gpus} GPUs): {100 * row['slo_fraction']:.1f} % meet the SLO, TTFT p90 "
              f"{row['ttft_p90_ms']:.1f} ms, TPOT p50 {row['tpot_p50_ms']:.1f} ms", flush=True)
        if row["slo_fraction"] >= args.slo_fraction:
            found_at = gpus
            if answer is None or (row["slo_fraction"], -row["ttft_p90_ms"]) > (answer["slo_fraction"],
                                                                             -answer["ttft_p90_ms"]):
                answer = row
    if answer is None:
        print(f"no deployment of at most {args.max_gpus} GPUs meets the SLO for {100 * args.slo_fraction:g} % of "
              "requests")
    else:
        print(f"cheapest: {answer['deployment']} = {answer['gpus']} GPUs ({100 * answer['slo_fraction']:.1f} % "
              "meet the SLO)")
    if args.json:
        from astra_sim.cliutil import write_text_atomic

        write_text_atomic(args.json, json.dumps({"candidates": rows, "answer": answer}, indent=1) + "\n")
    return 0 if answer is not None else 1
