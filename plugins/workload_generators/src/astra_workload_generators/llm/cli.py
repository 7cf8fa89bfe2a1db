"""``astra workload llm``: the command line, a thin layer over :class:`.spec.LlmSpec` (parse, build the spec,
resolve, then write the workload or print the summary)."""

from __future__ import annotations

from astra_sim.errors import ConfigError

from .spec import LlmSpec, generate_llm_workload, llm_summary
from .summary import describe


# ------------------------------------------------------------------------------------------------ command line
def add_llm_command(sub):
    p = sub.add_parser(
        "llm", help="training/inference traces for a transformer (TP, PP 1F1B/interleaved, DP/ZeRO-1..3, CP, "
        "MoE/EP, recomputation)",
        description="Write PREFIX.<rank>.et for one step of a transformer, dense or mixture-of-experts: a "
        "training step (--mode train, default) or inference (--mode prefill, decode or mixed), and "
        "PREFIX.groups.json (TP, DP, PP and, when used, CP and EP communicator groups; rank = tp + TP*(cp + CP*(dp + "
        "DP*pp))). "
        "Run them with astra run --comm-group-configuration PREFIX.groups.json.")
    LlmSpec.add_cli_args(p)
    p.add_argument("--summary", action="store_true",
                   help="print the model's parameters (total, active), FLOPs and KV-cache bytes per token and the "
                   "step's memory estimate; write no traces (-o not needed)")
    p.add_argument("--list-models", action="store_true",
                   help="list the models --model and --preset name (the shipped configs with their Hugging Face ids, "
                   "which --model also takes) and exit")
    p.add_argument("--json", action="store_true", help="with --summary or --list-models: JSON on stdout")
    p.add_argument("-o", "--output", metavar="PREFIX", help="output prefix (required unless --summary)")
    p.set_defaults(run_command=_cmd_llm)


def dims_and_config(args):
    """The checked ``(dims, cfg)`` of parsed ``astra workload llm`` arguments (``args``: its namespace).

    Kept for the callers that still hold a namespace; new code builds an :class:`LlmSpec` (``from_mapping`` or
    its constructor) and calls :meth:`LlmSpec.resolve`."""
    return LlmSpec.from_cli_args(args).resolve()


def _cmd_llm(args):
    if args.list_models:
        return _list_models(args.json)
    if args.json and not args.summary:
        raise ConfigError("--json is for --summary or --list-models")
    if not args.summary and not args.output:
        raise ConfigError("-o/--output PREFIX is required (unless --summary)")
    spec = LlmSpec.from_cli_args(args)
    if args.summary:
        summary = llm_summary(spec)
        if args.json:
            import json

            print(json.dumps(summary, indent=1))
        else:
            print(describe(summary))
        return 0
    from astra_workload_generators.cli import output_prefix

    with output_prefix(args.output, redo=lambda prefix: generate_llm_workload(spec, prefix),
                       command="astra workload llm"):
        s = generate_llm_workload(spec, args.output)
    if spec.per_rank_files:
        wrote = f"{args.output}.0.et .. {args.output}.{s['npus'] - 1}.et"
    else:
        wrote = (f"{args.output}.workload.json with {s['classes']} class trace{'s' if s['classes'] > 1 else ''} "
                 f"({args.output}.class<i>.et; --per-rank-files writes one file per rank)")
    steps = "per step" if s["steps"] == 1 else f"over {s['steps']} steps"
    print(f"{s['npus']} ranks, {s['parameters'] / 1e9:.2f}B matmul parameters "
          f"({s['activated_parameters'] / 1e9:.2f}B activated), {flops_text(s['flops'])} "
          f"{steps}, nodes per rank by stage "
          f"{s['nodes_per_stage']}; wrote {wrote} and {args.output}.groups.json ({s['groups']} groups)")
    peak = max(s["memory"], key=lambda m: m.total)
    print(f"estimated peak HBM per GPU: {peak.describe()} on stage {peak.stage}"
          + (f" (stages: {', '.join(f'{m.total / 1e9:.1f}' for m in s['memory'])} GB)" if len(s["memory"]) > 1 else ""))
    return 0


def flops_text(flops):
    """FLOPs in the unit that shows them (``1.23 PFLOP``, ``4.56 TFLOP``, ``789 GFLOP``): a decode step is not
    ``0.0000 PFLOP``."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def _list_models(as_json):
    """The shipped configs (``--model``; their Hugging Face ids work too) and the presets (``--preset``)."""
    from .hf import load_hf_config, model_ids
    from .model import PRESETS, model_dims
    from .summary import params_active, params_total

    rows = []
    for name, hf_id in model_ids().items():
        base, _, _ = load_hf_config(name)
        dims = model_dims(base=base)
        rows.append({"model": name, "hugging_face_id": hf_id, "layers": dims.layers, "hidden": dims.hidden,
                     "experts": dims.experts, "parameters": params_total(dims),
                     "active_parameters": params_active(dims), "preset": name in PRESETS})
    if as_json:
        import json

        print(json.dumps(rows, indent=1))
        return 0
    from astra_sim.termtable import Column, print_table

    print_table("astra workload llm --model NAME (or its Hugging Face id); * also a --preset", [
        Column("model"), Column("Hugging Face id", drop=2), Column("layers", number=True, drop=3),
        Column("hidden", number=True, drop=4), Column("params", number=True), Column("active", number=True, drop=1)],
        [[r["model"] + (" *" if r["preset"] else ""), r["hugging_face_id"] or "-", str(r["layers"]), str(r["hidden"]),
          f"{r['parameters'] / 1e9:.3g}B", f"{r['active_parameters'] / 1e9:.3g}B"] for r in rows])
    return 0