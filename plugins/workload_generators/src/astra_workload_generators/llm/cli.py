"""``astra workload llm``: the command line."""

from __future__ import annotations

from astra_sim.errors import ConfigError

from .config import ATTENTIONS, DTYPES, GEMM_DTYPES, MODES, LlmConfig, check_config
from .generate import generate_llm
from .hf import load_hf_config
from .model import PRESETS, model_dims
from .summary import describe, model_summary
from .overlap import COMM_SMS_GROUPS, load_tp_overlap_sms, parse_comm_sms
from .routing import parse_expert_load


# ------------------------------------------------------------------------------------------------ command line
def add_llm_command(sub):
    import argparse

    from astra_sim.cliutil import non_negative_int, positive_float, positive_int

    p = sub.add_parser(
        "llm", help="training/inference traces for a transformer (TP, PP 1F1B/interleaved, DP/ZeRO-1..3, CP, "
        "MoE/EP, recomputation)",
        description="Write PREFIX.<rank>.et for one step of a transformer, dense or mixture-of-experts: a "
        "training step (--mode train, default) or inference (--mode prefill, decode or mixed), and "
        "PREFIX.groups.json (TP, DP, PP and, when used, CP and EP communicator groups; rank = tp + TP*(cp + CP*(dp + "
        "DP*pp))). "
        "Run them with astra run --comm-group-configuration PREFIX.groups.json.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--preset", choices=sorted(PRESETS), help="published model dimensions")
    source.add_argument("--model", metavar="CONFIG",
                        help="a Hugging Face config.json (or a folder holding one, or the name of a shipped one in "
                        "the generator's configs/ folder), read as it is: Llama, Mistral, Mixtral, Qwen2/Qwen2-MoE/"
                        "Qwen3/Qwen3-MoE, Gemma 2/3, DeepSeek-V2/V3, GPT-2, GPT-NeoX, Phi-3; the flags below "
                        "override its values")
    p.add_argument("--summary", action="store_true",
                   help="print the model's parameters (total, active), FLOPs and KV-cache bytes per token and the "
                   "step's memory estimate; write no traces (-o not needed)")
    p.add_argument("--json", action="store_true", help="with --summary: one JSON object")
    for flag, what in (("layers", "transformer layers"), ("hidden", "hidden size h"), ("heads", "attention heads"),
                       ("kv-heads", "key/value heads (GQA; default: heads)"),
                       ("ffn-hidden", "FFN inner size (default 4h)"), ("vocab", "vocabulary size"),
                       ("seq-len", "sequence length s"),
                       ("head-dim", "head dimension d (default hidden/heads)")):
        p.add_argument(f"--{flag}", type=positive_int, metavar="N", help=f"{what} (overrides the preset)")
    for flag, what in (("sliding-window", "sliding-window attention: local layers attend to the last N keys (0: off)"),
                       ("window-pattern", "with --sliding-window: every N-th layer (N-1, 2N-1, ...) global "
                        "(Gemma 2: 2, Gemma 3: 6; 0, the default: every layer local)"),
                       ("mtp-layers", "multi-token-prediction modules run in training (DeepSeek-V3's "
                        "num_nextn_predict_layers; 0: none)")):
        p.add_argument(f"--{flag}", type=non_negative_int, metavar="N", help=f"{what} (overrides --model)")
    for flag, what in (("experts", "routed experts E (mixture of experts; default: the preset's, else dense)"),
                       ("top-k", "experts per token K"), ("moe-ffn", "expert FFN inner size (default: ffn hidden)"),
                       ("shared-experts", "always-active shared experts S of size moe-ffn"),
                       ("moe-layer-freq", "MoE on every N-th layer only (layers 0, N, 2N, ...; Megatron's "
                        "--moe-layer-freq N), dense FFNs of ffn-hidden between (default 1: every layer)"),
                       ("moe-dense-layers", "the first N layers keep a dense FFN of ffn-hidden (DeepSeekMoE's "
                        "first_k_dense_replace, Megatron's --moe-layer-freq with leading zeros; default 0)")):
        p.add_argument(f"--{flag}", type=positive_int if flag in ("top-k", "moe-layer-freq") else non_negative_int,
                       metavar="N",
                       help=f"{what} (overrides the preset)")
    p.add_argument("--gated", action=argparse.BooleanOptionalAction, default=None,
                   help="gated (SwiGLU, 3 matrices) FFN (default: the preset's; off without preset)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline-parallel stages (1F1B)")
    p.add_argument("--dp", type=positive_int, default=1, help="data-parallel size")
    p.add_argument("--ep", type=positive_int, default=1,
                   help="expert-parallel size, carved out of DP (DP must be divisible by it)")
    p.add_argument("--moe-capacity-factor", type=positive_float, metavar="C",
                   help="MoE expert capacity factor (Megatron --moe-expert-capacity-factor): each expert takes at "
                   "most ceil(tokens x top-k / experts x C) of a rank's token copies, the rest are dropped "
                   "(default: dropless)")
    p.add_argument("--moe-pad-to-capacity", action="store_true",
                   help="with --moe-capacity-factor: pad every expert's input to its capacity (all-to-all bytes "
                   "and expert GEMM rows become experts x capacity)")
    p.add_argument("--moe-imbalance", type=float, default=1.0, metavar="F",
                   help="dropless MoE: the busiest EP rank gets F x the balanced token copies; every rank is timed "
                   "as that straggler (expert rows and all-to-all bytes x F; default 1, balanced)")
    p.add_argument("--pp-scatter-gather", action="store_true",
                   help="TP without sequence parallelism: each TP rank sends 1/TP of the stage-boundary tensor and the "
                   "receiving stage all-gathers it over TP (Megatron-LM's scatter/gather optimisation, its 2021 "
                   "default); without it every TP rank sends the whole b x s x h")
    p.add_argument("--logits", choices=("all", "last"), default="all",
                   help="inference: the LM head on every position (default, as a training forward does) or only on "
                   "each sequence's last one (and the prefill chunk's), as serving engines do")
    p.add_argument("--moe-expert-load", metavar="SPEC",
                   help="MoE: the experts' relative token loads instead of balanced routing: E comma-separated "
                   "numbers, zipf:S (expert e gets (e+1)^-S; EP rank 0 holds the hottest), zipf:S:SEED (the same "
                   "loads dealt at random to the experts of each MoE layer), or a .json list of E loads or of one "
                   "list per MoE layer (e.g. logged router counts). Each EP rank computes its experts' rows; the "
                   "all-to-alls are timed by their busiest rank (per-peer message: the largest EP rank's share)")
    p.add_argument("--mode", choices=MODES, default="train",
                   help="train (default), or one inference step: prefill (forward over the prompt), decode "
                   "(one token per sequence against a KV cache of prompt-len + decode-len) or mixed (continuous "
                   "batching: the decode tokens plus a --prefill-chunk of a new prompt per micro-batch)")
    p.add_argument("--batch-size", type=positive_int, metavar="N",
                   help="inference: sequences per DP replica (split into --micro-batches; default M x B)")
    p.add_argument("--prompt-len", type=positive_int, metavar="N", help="inference: prompt length (default seq-len)")
    p.add_argument("--decode-len", type=positive_int, default=1, metavar="N",
                   help="decode: tokens generated so far including this step's (default 1)")
    p.add_argument("--decode-steps", type=positive_int, default=1, metavar="N",
                   help="decode: N consecutive steps in one trace, the KV cache growing by one position per step; "
                        "with PP the last stage sends each sampled token back to the first (default 1)")
    p.add_argument("--prefill-chunk", type=positive_int, metavar="N",
                   help="mixed: prompt tokens prefilled per micro-batch beside its decode tokens (chunked prefill)")
    p.add_argument("--prefill-done", type=int, default=0, metavar="N",
                   help="mixed: tokens of that prompt already in the KV cache from earlier chunks (default 0)")
    p.add_argument("--micro-batches", type=positive_int, default=1, metavar="M",
                   help="micro-batches per step (gradient accumulation steps)")
    p.add_argument("--micro-batch-size", type=positive_int, default=1, metavar="B", help="sequences per micro-batch")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="TP with all-gather/reduce-scatter instead of all-reduce")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                   help="ZeRO stage: 1/2 reduce-scatter gradients and all-gather parameters over DP; 3 (FSDP): "
                   "parameters sharded, all-gathered per layer before forward and before backward, gradients "
                   "reduce-scattered")
    p.add_argument("--overlap-param-gather", action="store_true",
                   help="ZeRO-1/2: all-gather the updated parameters at the start of the step (each layer's first "
                   "forward waits for its own) instead of after the optimizer (Megatron --overlap-param-gather)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="with --sequence-parallel: each TP all-gather / reduce-scatter runs as a ring of TP-1 "
                   "send/recv steps pipelined with TP row chunks of its GEMM (Transformer Engine userbuffers)")
    p.add_argument("--comm-sms", metavar="KEY=N[,KEY=N...]",
                   help="SMs each kind of communication kernel occupies, written as the nodes' comm_sms attribute "
                   "for the gpu model's --gpu-contention (nodes without it take --gpu-comm-sms). Keys: "
                   f"{', '.join(COMM_SMS_GROUPS)} (NCCL communicators, e.g. Megatron's *_MAX_CTAS) and, with "
                   "--tp-comm-overlap, Transformer Engine's userbuffers names (qkv_fprop, proj_fprop, fc1_fprop, "
                   "fc2_fprop, qkv_dgrad, fc1_dgrad, qkv_wgrad, fc1_wgrad, proj_dgrad, fc2_dgrad); 0 = copy engine")
    p.add_argument("--tp-overlap-config", metavar="YAML",
                   help="with --tp-comm-overlap: Transformer Engine's tp_overlap / ub_cfgs YAML (per layer name: "
                   "method, num_sm, use_ce, ...); gives each userbuffers overlap's SMs (ring_exchange: 0, copy "
                   "engine, unless use_ce is false; pipeline and bulk: num_sm, default 16). --comm-sms overrides")
    p.add_argument("--reshard-after-forward", action="store_true",
                   help="--zero 3: all-gather each unit's parameters before every micro-batch's forward and again "
                   "before its backward (FSDP FULL_SHARD, DeepSpeed ZeRO-3; default: once per step per phase, "
                   "reused by all micro-batches)")
    p.add_argument("--grad-sync-every-micro-batch", action="store_true",
                   help="reduce the gradients after every micro-batch's backward (all-reduce, or reduce-scatter with "
                   "--zero; DDP/FSDP without no_sync, DeepSpeed) instead of after the last one only")
    p.add_argument("--cp", type=positive_int, default=1,
                   help="context-parallel size, training and prefill (sequence split; ring K/V exchange; "
                   "rank = t + TP*(c + CP*(d + DP*p)))")
    p.add_argument("--virtual-stages", type=positive_int, default=1, metavar="V",
                   help="interleaved 1F1B: model chunks per pipeline rank (micro-batches a multiple of --pp)")
    p.add_argument("--recompute", nargs="?", const="full", choices=("full", "selective"), default=None,
                   help="activation recomputation: full (the default when given alone: every layer's forward again "
                   "before its backward) or selective (only the attention scores, which FlashAttention recomputes "
                   "anyway: changes the memory estimate only)")
    p.add_argument("--elementwise", action=argparse.BooleanOptionalAction, default=True,
                   help="training: emit the memory-bound ops (LayerNorm, GeLU/SwiGLU, dropout, residual adds, "
                   "embedding, cross entropy, Adam) as ATen nodes the gpu compute model times from their shapes "
                   "(default on; --no-elementwise: GEMMs, attention and communication only)")
    p.add_argument("--attention", choices=ATTENTIONS, default="flash",
                   help="flash: one FlashAttention node per layer (default); unfused: QK^T and AV aten::bmm with "
                   "softmax and dropout over the b x heads x s^2 scores (Megatron-LM before FlashAttention)")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="flash attention: causal mask, timed by the gpu model as the lower triangle only, and "
                   "with --cp Megatron's load-balanced chunks (default on, decoder LMs; --no-causal: every "
                   "query attends to every key). num_ops counts the full block either way")
    p.add_argument("--inference-elementwise", action=argparse.BooleanOptionalAction, default=False,
                   help="inference (--mode prefill/decode/mixed): also emit each layer's norms, residual adds and "
                   "activation (SiLU*mul / GeLU), unfused, as the gpu compute model times them from their shapes, "
                   "as a serving engine runs them (default off: inference traces stay byte-identical to earlier "
                   "releases; astra serve turns it on)")
    p.add_argument("--dropout", action=argparse.BooleanOptionalAction, default=True,
                   help="training with --elementwise: emit the dropout kernels (default on; --no-dropout for "
                   "models trained with hidden and attention dropout 0, e.g. MLPerf GPT-3)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="activation/gradient type (default bf16)")
    p.add_argument("--gemm-dtype", choices=GEMM_DTYPES, default="same",
                   help="operand type of the linear layers' GEMMs: same as --dtype (default), or fp8 "
                   "(Transformer Engine: aten::_scaled_mm with E4M3 weights/activations and E5M2 gradients, bf16 "
                   "output; the router, LM head and attention stay in --dtype)")
    p.add_argument("--tflops", type=positive_float, default=312.0,
                   help="peak TFLOP/s for duration_micros (default 312, A100 BF16 dense)")
    p.add_argument("--per-rank-files", action="store_true",
                   help="write PREFIX.<rank>.et for every rank (default: the compact workload, "
                        "PREFIX.workload.json and one trace per class of symmetric ranks, which astra run "
                        "reads the same way; see docs/compact-workload.md)")
    p.add_argument("-o", "--output", metavar="PREFIX", help="output prefix (required unless --summary)")
    p.set_defaults(run_command=_cmd_llm)


def dims_and_config(args):
    """The model and step settings of parsed ``astra workload llm`` arguments (``args``: its namespace), checked:
    what ``astra sweep`` and ``astra search`` use to build a configuration without writing it."""
    base = None
    if getattr(args, "model", None):
        from astra_sim.cli import warning

        base, warnings, _ = load_hf_config(args.model)
        for line in warnings:
            warning(line)
    dims = model_dims(args.preset, base=base, head_size=getattr(args, "head_dim", None),
                      window=getattr(args, "sliding_window", None), mtp_layers=getattr(args, "mtp_layers", None),
                      window_pattern=getattr(args, "window_pattern", None),
                      layers=args.layers, hidden=args.hidden, heads=args.heads,
                      kv_heads=args.kv_heads, ffn_hidden=args.ffn_hidden, vocab=args.vocab, seq_len=args.seq_len,
                      gated=args.gated, experts=args.experts, top_k=args.top_k, moe_ffn=args.moe_ffn,
                      shared_experts=args.shared_experts, moe_dense_layers=args.moe_dense_layers,
                      moe_layer_freq=args.moe_layer_freq)
    mbs = args.micro_batch_size
    if args.batch_size is not None:
        if args.mode == "train":
            raise ConfigError("--batch-size is for --mode prefill/decode/mixed (training uses --micro-batch-size)")
        if args.batch_size % args.micro_batches:
            raise ConfigError(f"--batch-size {args.batch_size} is not divisible by --micro-batches "
                              f"{args.micro_batches}")
        mbs = args.batch_size // args.micro_batches
    comm_sms, margins = {}, {}
    if args.tp_overlap_config:
        if not args.tp_comm_overlap:
            raise ConfigError("--tp-overlap-config needs --tp-comm-overlap (it sets the userbuffers overlaps' SMs)")
        sms, margins = load_tp_overlap_sms(args.tp_overlap_config, with_margins=True)
        comm_sms.update(sms)
    comm_sms.update(parse_comm_sms(args.comm_sms))
    margins = {name: comm_sms[name] for name in margins if comm_sms[name]}  # (--comm-sms overrides the file's SMs)
    load = ()
    if args.moe_expert_load is not None:
        if not dims.moe:
            raise ConfigError("--moe-expert-load needs a mixture-of-experts model (--experts)")
        load = parse_expert_load(args.moe_expert_load, dims.experts, dims.moe_layers)
    cfg = LlmConfig(tp=args.tp, pp=args.pp, dp=args.dp, micro_batches=args.micro_batches,
                    micro_batch_size=mbs, sequence_parallel=args.sequence_parallel,
                    zero=args.zero, recompute=args.recompute == "full",
                    recompute_selective=args.recompute == "selective", dtype=args.dtype, tflops=args.tflops, ep=args.ep,
                    mode=args.mode, prompt_len=args.prompt_len, decode_len=args.decode_len,
                    decode_steps=args.decode_steps, prefill_chunk=args.prefill_chunk or 0,
                    prefill_done=args.prefill_done, cp=args.cp,
                    virtual_stages=args.virtual_stages, elementwise=args.elementwise, attention=args.attention,
                    causal=args.causal, dropout=args.dropout, gemm_dtype=args.gemm_dtype,
                    inference_elementwise=args.inference_elementwise,
                    overlap_param_gather=args.overlap_param_gather, tp_comm_overlap=args.tp_comm_overlap,
                    reshard_after_forward=args.reshard_after_forward,
                    grad_sync_every_micro_batch=args.grad_sync_every_micro_batch,
                    moe_capacity_factor=args.moe_capacity_factor, moe_pad_to_capacity=args.moe_pad_to_capacity,
                    moe_imbalance=args.moe_imbalance, moe_expert_load=load, logits=args.logits,
                    pp_scatter_gather=args.pp_scatter_gather,
                    comm_sms=tuple(sorted(comm_sms.items())), sm_margins=tuple(sorted(margins.items())))
    check_config(dims, cfg)
    return dims, cfg


def _cmd_llm(args):
    if args.json and not args.summary:
        raise ConfigError("--json is for --summary")
    if not args.summary and not args.output:
        raise ConfigError("-o/--output PREFIX is required (unless --summary)")
    dims, cfg = dims_and_config(args)
    if args.summary:
        summary = model_summary(dims, cfg)
        if args.json:
            import json

            print(json.dumps(summary, indent=1))
        else:
            print(describe(summary))
        return 0
    s = generate_llm(dims, cfg, args.output, per_rank_files=args.per_rank_files)
    if args.per_rank_files:
        wrote = f"{args.output}.0.et .. {args.output}.{s['npus'] - 1}.et"
    else:
        wrote = (f"{args.output}.workload.json with {s['classes']} class trace{'s' if s['classes'] > 1 else ''} "
                 f"({args.output}.class<i>.et; --per-rank-files writes one file per rank)")
    print(f"{s['npus']} ranks, {s['parameters'] / 1e9:.2f}B matmul parameters "
          f"({s['activated_parameters'] / 1e9:.2f}B activated), {s['flops'] / 1e15:.4f} PFLOP "
          f"{'per step' if cfg.steps == 1 else f'over {cfg.steps} steps'}, nodes per rank by stage "
          f"{s['nodes_per_stage']}; wrote {wrote} and {args.output}.groups.json ({s['groups']} groups)")
    peak = max(s["memory"], key=lambda m: m.total)
    print(f"estimated peak HBM per GPU: {peak.describe()} on stage {peak.stage}"
          + (f" (stages: {', '.join(f'{m.total / 1e9:.1f}' for m in s['memory'])} GB)" if len(s["memory"]) > 1 else ""))
    return 0
