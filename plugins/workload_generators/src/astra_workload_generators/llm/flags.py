"""``astra workload llm``'s flags: the model (:func:`add_model_flags`, shared by every command that names an LLM)
and the layout, precision and mode flags of a generated step (:func:`add_llm_flags`). Their defaults are
:class:`~astra_workload_generators.llm.spec.LlmSpec`'s (its ``add_cli_args`` sets them), so the command, the spec and
its defaults cannot drift apart.
"""

from __future__ import annotations

import argparse

from .config import (ACTIVATION_KERNELS, ATTENTION_DTYPES, ATTENTION_KERNELS, ATTENTIONS, DTYPES,
                     FP8_ATTENTION_BACKWARDS, FP8_RECIPES, FRAMEWORKS, GEMM_DTYPES, GRAD_BUFFERS, INFERENCE_EMBEDDINGS,
                     LOSS_DTYPES, MODES, NORM_KERNELS, ROPE_KERNELS, SOFTMAX_KERNELS)
from .lora import LORA_TARGETS
from .model import PRESETS
from .moe import MOE_DISPATCHERS, MOE_GROUPED_GEMMS, MOE_ROUTER_DTYPES
from .overlap import COMM_SMS_GROUPS
from .torch_cp import CP_ROTATES

def add_model_flags(parser, required=False, help_suffix=""):
    """``--preset NAME`` / ``--model CONFIG``, one of them: how every command that names an LLM names it
    (``astra workload llm``, ``astra serve``, ``astra search``, a plugin's own command), with one set of choices
    and one help. ``help_suffix`` ends ``--model``'s help (what the command does with the config)."""
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--preset", choices=sorted(PRESETS), metavar="NAME",
                        help="published model dimensions: " + ", ".join(sorted(PRESETS)))
    source.add_argument("--model", metavar="CONFIG",
                        help="a Hugging Face config.json (or a folder holding one, or a shipped one by name, e.g. "
                        "llama3-70b, or by its Hugging Face id, e.g. meta-llama/Llama-3.1-70B: `astra workload llm "
                        "--list-models`), read as it is: Llama, Mistral, Mixtral, "
                        "Qwen2/Qwen2-MoE/Qwen3/Qwen3-MoE, Gemma 2/3, DeepSeek-V2/V3, GPT-2, GPT-NeoX, Phi-3"
                        + help_suffix)
    return source


def add_llm_flags(p):
    """``astra workload llm``'s model, layout, precision and mode flags (defaults: :class:`LlmSpec`'s)."""
    from astra_sim.cliutil import non_negative_int, platform_names, positive_float, positive_int

    add_model_flags(p, help_suffix="; the flags below override its values")
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
    p.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction, default=None,
                   help="the LM head uses the input embedding's weight (Megatron-LM's default, Hugging Face's "
                   "tie_word_embeddings): at PP 1 one parameter, reduced and updated once; at PP > 1 a copy on the "
                   "first and the last stage whose gradients Megatron all-reduces between them. Default: the "
                   "model's (--model: its config's tie_word_embeddings; --preset: the preset's; dimensions alone: "
                   "untied). --no-tie-embeddings, or Megatron-LM's own --untie-embeddings-and-output-weights: untied")
    p.add_argument("--untie-embeddings-and-output-weights", dest="tie_embeddings", action="store_false",
                   default=None, help="Megatron-LM's name for --no-tie-embeddings")
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
    p.add_argument("--moe-dispatcher", choices=MOE_DISPATCHERS, default="exchange",
                   help="MoE: exchange (default: the expert all-to-alls alone) or alltoall (Megatron-Core's alltoall "
                   "token dispatcher with fused permutes: the tokens-per-expert count and its all-gather over EP, "
                   "the host's synchronisation on it before the dispatch, the permute, the chunk sort by local "
                   "expert, the probabilities' all-to-all, the unsort and unpermute, and their backward)")
    p.add_argument("--moe-grouped-gemm", choices=MOE_GROUPED_GEMMS, default="grouped",
                   help="MoE: the routed experts' GEMMs as one grouped kernel (default), or cublas-streams: one "
                   "cuBLAS GEMM per local expert, as Transformer Engine's grouped linear runs on Hopper without "
                   "NVTE_USE_CUTLASS_GROUPED_GEMM (each its own node and host launch)")
    p.add_argument("--bias-activation-fusion", action="store_true",
                   help="MoE, gated experts: Megatron-Core's bias_activation_fusion (Megatron-LM's default, turned off "
                   "by --no-bias-swiglu-fusion; Megatron-Bridge's GPT-OSS bridge and Qwen3 recipes set it) as "
                   "TEGroupedMLP runs it: the experts' SwiGLU or clamped quick-GeGLU (GPT-OSS) with the routing "
                   "probabilities in one fused kernel each way, the clamps and their cat before it (default: SiLU "
                   "and product, unfused). The dense FFN is not changed by it")
    p.add_argument("--no-bias-swiglu-fusion", dest="bias_swiglu_fusion", action="store_false",
                   help="Megatron training (--framework megatron, the default), a gated FFN: run the dense FFN's "
                   "SwiGLU unfused, as Megatron-LM's --no-bias-swiglu-fusion does (MLP.forward's glu(): SiLU and "
                   "product, and in backward their gradients and the chunk's cat). Default: Megatron-Core's "
                   "bias_swiglu_impl, one compiled kernel each way (read [rows, 2f], write [rows, f]; backward "
                   "read both, write [rows, 2f]). Other frameworks run the SiLU and the product unfused anyway")
    p.add_argument("--no-bias-dropout-fusion", dest="bias_dropout_fusion", action="store_false",
                   help="Megatron training with dropout: the residual stream's dropout and add as two kernels "
                   "(native_dropout, then add_), as Megatron-LM's --no-bias-dropout-fusion runs them. Default: "
                   "Megatron's fused bias-dropout-add, one kernel (the other frameworks: two anyway)")
    p.add_argument("--te-op-fuser", action="store_true",
                   help="Megatron training, FP8: the dense MLP as Transformer Engine's operation fuser runs it "
                   "(Megatron's use_transformer_engine_op_fuser, MLPerf's USE_TE_OPS): the activation writes FP8 "
                   "for FC2 and its backward FP8 for FC1 itself. Default: Megatron-Core's TE spec, whose FC2 "
                   "casts its input and FC1 its output gradient (one TE cast each)")
    p.add_argument("--no-async-tensor-model-parallel-allreduce", dest="async_tensor_model_parallel_allreduce",
                   action="store_false",
                   help="Megatron training at --tp > 1 without --sequence-parallel: the QKV/FC1 and LM-head input-"
                   "gradient all-reduces run after the weight-gradient GEMM, as Megatron-LM did before 2021-09 and "
                   "with this flag until 2024-04. Default: launched after the input-gradient GEMM, beside the wgrad. "
                   "No effect with --sequence-parallel, and none on the layers with Transformer Engine's (FP8) linears")
    p.add_argument("--make-vocab-size-divisible-by", type=positive_int, default=128, metavar="N",
                   help="Megatron training: the vocabulary (embedding table, LM head, logits) padded up to a "
                   "multiple of N x TP, Megatron-LM's flag and default (NeMo 2's make_vocab_size_divisible_by "
                   "too); 1: to a multiple of TP only. torchtitan, DeepSpeed and MaxText do not pad; inference "
                   "pads to a multiple of TP")
    p.add_argument("--moe-force-load-balancing", action="store_true",
                   help="MoE: Megatron's --moe-router-force-load-balancing (random router logits, as NVIDIA's "
                   "benchmark recipes run): each expert's token copies spread as the random top-k gives them "
                   "(Binomial), not split evenly; the all-to-all bytes stay the mean's")
    p.add_argument("--moe-router-dtype", choices=MOE_ROUTER_DTYPES, default=None,
                   help="MoE: Megatron's --moe-router-dtype, the router's logits and probabilities in fp32 or fp64 "
                   "(the probabilities' all-to-all carries 4 or 8 B a copy); default: the input's dtype (--dtype), "
                   "as Megatron-Core's TopKRouter.gating runs without it")
    p.add_argument("--recompute-modules", metavar="M[,M]",
                   help="Megatron's selective recompute of named modules (recompute_modules): layernorm (the two "
                   "norms of each layer) and/or moe_act (the experts' activation), re-run before the backward")
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
    p.add_argument("--defer-embedding-wgrad-compute", action="store_true",
                   help="Megatron-LM's --defer-embedding-wgrad-compute (NeMo's defer_embedding_wgrad_compute): the "
                   "LM head's weight-gradient GEMMs (and, with --sequence-parallel, their input re-gathers) are not "
                   "run in each micro-batch's backward but together in the pipeline drain, after the last stage's "
                   "last backward. Needs --pp > 1 (default off, as Megatron's)")
    p.add_argument("--wgrad-deferral-limit", type=int, metavar="N",
                   help="with --defer-embedding-wgrad-compute: defer at most N of the step's LM-head calls, the "
                   "rest compute their weight gradient in place (Megatron's --wgrad-deferral-limit; 0, the "
                   "default: all)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="with --sequence-parallel: each TP all-gather / reduce-scatter runs as a ring of TP-1 "
                   "send/recv steps pipelined with TP row chunks of its GEMM (Transformer Engine userbuffers); in a "
                   "Megatron step the backward's QKV/FC1 input-gradient reduce-scatter is TE's bulk one instead, "
                   "beside the weight-gradient GEMM")
    p.add_argument("--comm-sms", metavar="KEY=N[,KEY=N...]",
                   help="SMs (NCCL CTAs) each kind of communication kernel occupies, written as the nodes' comm_sms "
                   "attribute: the gpu model's --gpu-contention leaves the rest to compute (nodes without it take "
                   "--gpu-comm-sms), and its NCCL model runs a capped collective on as many channels. Keys: "
                   f"{', '.join(COMM_SMS_GROUPS)} (NCCL communicators, e.g. Megatron's *_MAX_CTAS) and, with "
                   "--tp-comm-overlap, Transformer Engine's userbuffers names (qkv_fprop, proj_fprop, fc1_fprop, "
                   "fc2_fprop, qkv_dgrad, fc1_dgrad, qkv_wgrad, fc1_wgrad, proj_dgrad, fc2_dgrad); 0 = copy engine")
    p.add_argument("--tp-overlap-config", metavar="YAML",
                   help="with --tp-comm-overlap: Transformer Engine's tp_overlap / ub_cfgs YAML (per layer name: "
                   "method, num_sm, use_ce, ...); gives each userbuffers overlap's SMs (ring_exchange: 0, copy "
                   "engine, unless use_ce is false; pipeline and bulk: num_sm, default 16). --comm-sms overrides")
    p.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction, default=None,
                   help="--zero 3: all-gather each unit's parameters before every micro-batch's forward and again "
                   "before its backward, freeing them after use (FSDP2 FULL_SHARD, DeepSpeed ZeRO-3: the default "
                   "with --zero 3); --no-reshard-after-forward: gathered once per step per phase, kept and reused "
                   "by all micro-batches")
    p.add_argument("--framework", choices=FRAMEWORKS, default=None,
                   help="whose memory semantics the estimate follows (docs/memory.md): megatron (Megatron-LM/NeMo: "
                   "fp32 main gradients, --zero 1 = distributed optimizer, fused vocab-parallel cross entropy), "
                   "fsdp2 (torchtitan: fp32 sharded parameters, bf16 compute copies, op-level selective "
                   "recomputation) or deepspeed (ZeRO 1/2/3 with its buckets); default: implied by --zero "
                   "(3: fsdp2, 2: deepspeed, else megatron). Given as fsdp2, the step is also FSDP2's under "
                   "torchtitan: each gathered unit copied out, gradients copied in and reduce-scattered in fp32, "
                   "and --recompute selective re-runs every second matmul of a layer. Given as deepspeed with --zero "
                   "3, the step is also DeepSpeed ZeRO-3's: the gathers' copies, gradients reduced in its buckets "
                   "with the fp16 overflow check, and its optimizer step's passes and small all-gathers")
    p.add_argument("--grad-sync-every-micro-batch", action="store_true",
                   help="reduce the gradients after every micro-batch's backward (all-reduce, or reduce-scatter with "
                   "--zero; DDP/FSDP without no_sync, DeepSpeed) instead of after the last one only")
    p.add_argument("--check-nan-in-grad", action="store_true",
                   help="Megatron DDP's check_for_nan_in_grad: an L2 norm of each gradient bucket before its reduction")
    p.add_argument("--cp", type=positive_int, default=1,
                   help="context-parallel size, training and prefill (sequence split; K/V exchanged as --cp-rotate "
                   "says; "
                   "rank = t + TP*(c + CP*(d + DP*p)))")
    p.add_argument("--cp-rotate", choices=CP_ROTATES, default=None,
                   help="how --cp exchanges K/V: ring (Megatron-LM / Transformer Engine: CP-1 send/recv steps, "
                   "dK/dV sent back the same way), allgather or alltoall (PyTorch's context_parallel, as torchtitan "
                   "runs it: K/V all-gathered once per pass, or passed on by a permute each step; one SDPA call per "
                   "step, fp32 merges of the outputs, dK/dV accumulated in fp32 and passed on each step); default: "
                   "allgather with --framework fsdp2 (torchtitan's context_parallel_rotate_method default), else ring")
    p.add_argument("--cp-compile", action="store_true",
                   help="with --cp-rotate allgather or alltoall: the ring attention runs compiled (torch.compile, as "
                   "torchtitan's --training.compile compiles every TransformerBlock): each K/V and dK/dV exchange is "
                   "waited for where it is issued (functional collectives under tracing; Inductor does not move "
                   "the waits by default), the merges and accumulations fused into one kernel per step; default: "
                   "eager (each exchange waited for at its first use)")
    p.add_argument("--torch-compile", action="store_true",
                   help="with --framework fsdp2: torchtitan's training.compile (apply_compile: each TransformerBlock "
                   "compiled by torch.compile, fullgraph): Inductor fuses each chain of element-wise ops between two "
                   "GEMM or attention calls, so SwiGLU silu(w1 x) * w3 x is one kernel each way (read both halves, "
                   "write the product; backward: read the gradient and both halves, write both gradients) and the "
                   "norm one kernel (--norm-kernel fused); RoPE stays eager's three kernels per tensor (its complex "
                   "product falls back to ATen: Inductor generates no code for complex ops); default: eager PyTorch")
    p.add_argument("--virtual-stages", type=positive_int, default=1, metavar="V",
                   help="interleaved 1F1B: model chunks per pipeline rank (micro-batches a multiple of --pp)")
    p.add_argument("--lora-rank", type=positive_int, metavar="R",
                   help="LoRA fine-tuning: frozen base weights (no weight gradients, gradient sync or optimizer state "
                   "for them; their input gradients still flow) and rank-R adapters (A: in x R, B: R x out) on "
                   "--lora-targets of every layer, in forward and backward; only the adapters are reduced over DP "
                   "and updated (training; dense models; --zero 0 or 1)")
    p.add_argument("--lora-targets", metavar="LIST",
                   help="with --lora-rank: the linear layers with adapters, comma-separated from "
                   f"{','.join(LORA_TARGETS)} (default: all four)")
    p.add_argument("--lora-dropout", type=float, default=0.0, metavar="P",
                   help="with --lora-rank: dropout of probability P on each adapter's input (NeMo's LoRA "
                   "dropout_position 'pre'): a dropout over the target's input before A in forward and its backward "
                   "after A's input gradient, each a memory-bound pass (default 0: none)")
    p.add_argument("--pipeline-embedding-layer", action="store_true",
                   help="the pipeline split counts the embedding as one layer: layers + 1 (+ 1 with "
                   "--pipeline-loss-layer) split evenly over --pp x --virtual-stages, the first virtual stage holding "
                   "one transformer layer fewer (Megatron-LM's account_for_embedding_in_pipeline_split, as NeMo "
                   "splits Llama-3.1 405B's 126 layers over PP 8 x VP 8)")
    p.add_argument("--pipeline-loss-layer", action="store_true",
                   help="the pipeline split counts the loss (LM head and cross entropy) as one layer: the last "
                   "virtual stage holds one transformer layer fewer (Megatron-LM's "
                   "account_for_loss_in_pipeline_split)")
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
    p.add_argument("--inference-elementwise", action=argparse.BooleanOptionalAction, default=True,
                   help="inference (--mode prefill/decode/mixed): emit each layer's norms, residual adds and "
                   "activation (SiLU*mul / GeLU), unfused, as the gpu compute model times them from their shapes, "
                   "as a serving engine runs them (default on, as astra serve times its steps; "
                   "--no-inference-elementwise: GEMMs, attention and communication only, the traces of releases "
                   "before issue 34)")
    p.add_argument("--dropout", action=argparse.BooleanOptionalAction, default=True,
                   help="training with --elementwise: emit the dropout kernels (default on; --no-dropout for "
                   "models trained with hidden and attention dropout 0, e.g. MLPerf GPT-3)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="activation/gradient type (default bf16)")
    p.add_argument("--gemm-dtype", choices=GEMM_DTYPES, default="same",
                   help="operand type of the linear layers' GEMMs: same as --dtype (default), fp8 "
                   "(Transformer Engine: aten::_scaled_mm with E4M3 weights/activations and E5M2 gradients, bf16 "
                   "output; the router, LM head and attention stay in --dtype), or a block-scaled format: fp4 "
                   "(NVFP4: E2M1, an E4M3 scale per 16 elements; Blackwell), mxfp8 / mxfp6 / mxfp4 (OCP MX: E4M3 / "
                   "E2M3 / E2M1, an E8M0 scale per 32; Blackwell, AMD MI355X), each GEMM's activation input "
                   "quantized by a memory-bound kernel first")
    p.add_argument("--tflops", type=positive_float, default=312.0,
                   help="peak TFLOP/s for duration_micros (default 312, A100 BF16 dense)")
    p.add_argument("--norm-kernel", choices=NORM_KERNELS, default="fused",
                   help="fused (default): each norm one kernel (Transformer Engine, Apex, torchtitan's fused_rmsnorm); "
                   "composite: RMSNorm as eager PyTorch runs a Python RMSNorm, one kernel per op in fp32 (x.float(), "
                   "x*x, mean, rsqrt, x*r, the cast back, the weight), and autograd's kernels for its backward "
                   "(torchtitan's norm_type = \"rmsnorm\" without torch.compile, Hugging Face's LlamaRMSNorm)")
    p.add_argument("--activation-kernel", choices=ACTIVATION_KERNELS, default="fused",
                   help="a GeLU FFN's activation: fused (default; bias and GeLU one kernel each way), eager: Hugging "
                   "Face's gelu_new (NewGELUActivation, GPT-2's activation_function) as eager PyTorch runs it, eight "
                   "kernels forward and autograd's eleven backward, or squared-relu: NeMo's Nemotron activation "
                   "(pow(relu(x), 2), eager: two kernels forward, autograd's four backward)")
    p.add_argument("--softmax-kernel", choices=SOFTMAX_KERNELS, default="fused",
                   help="with --attention unfused: fused (default; Megatron's scale-mask-softmax), or eager: Hugging "
                   "Face's GPT-2 attention, the scale, the causal mask (where) and the padding mask (add) each its own "
                   "kernel over the scores before the softmax, and the scale's and the mask's backward, and torch.matmul's "
                   "copies of the permuted heads (Q, K, V and the output; their gradients and split's cat backward)")
    p.add_argument("--attention-kernel", choices=ATTENTION_KERNELS, default=None,
                   help="the fused attention kernel the gpu model times the flash nodes as, at its published "
                   "efficiency on Hopper (FlashAttention-3 paper, arXiv:2407.08608, Fig. 5-6): fa2 "
                   "(FlashAttention-2, what PyTorch's SDPA flash backend runs), fa3 (FlashAttention-3) or cudnn "
                   "(cuDNN's fused attention, Transformer Engine's default on Hopper); default: fa2 with "
                   "--framework fsdp2, else none named (the GPU preset's attention efficiency)")
    p.add_argument("--attention-dtype", choices=ATTENTION_DTYPES, default="same",
                   help="the flash attention's operand type: same as --dtype (default) or fp8 (Transformer "
                   "Engine's fp8_dpa: Q, K, V cast to E4M3 by a memory-bound kernel first; the backward in FP8 too "
                   "unless --fp8-attention-backward off); needs --attention flash and --attention-kernel fa3 or "
                   "cudnn (or none named); train and prefill only; the gpu model refuses it on GPUs without FP8")
    p.add_argument("--fp8-attention-backward", choices=FP8_ATTENTION_BACKWARDS, default="on",
                   help="with --attention-dtype fp8: on (default, Transformer Engine's NVTE_FP8_DPA_BWD=1 default: "
                   "cuDNN's FP8 backward on the forward's E4M3 Q, K, V, O and an E5M2 dO, its dQ, dK, dV "
                   "dequantized to --dtype) or off (NVTE_FP8_DPA_BWD=0: the backward in --dtype)")
    p.add_argument("--rope", choices=ROPE_KERNELS, default=None,
                   help="the rotary position embedding of Q and K, forward and backward: eager (PyTorch's "
                   "apply_rotary_emb as torchtitan writes it: q.float(), the complex product, the cast back, three "
                   "memory-bound kernels per tensor each way), fused (training: one kernel per tensor each way, "
                   "Transformer Engine's fused RoPE, Megatron's apply_rope_fusion; inference: vLLM's in-place "
                   "rotary_embedding, one kernel on Q and K per layer), fused-qkv (training: Transformer Engine's "
                   "apply_fused_qkv_rotary_pos_emb, Megatron's fused_single_qkv_rope, MLPerf's FUSED_QKV_ROPE: one "
                   "kernel each way over the whole QKV output and none of Megatron's QKV-split copies) or none; "
                   "default: none for a model without "
                   "RoPE (GPT-2/3, dimensions given without --model or --preset) or with MLA, eager with "
                   "--framework fsdp2, fused for a rotary model's Megatron training step or inference step (the "
                   "engine taken to be vLLM-like), else none (DeepSpeed)")
    p.add_argument("--remat-policy", choices=("minimal_flash",), default=None,
                   help="MaxText's remat_policy (JAX/XLA training step): minimal_flash saves the weight matmuls' "
                   "outputs and the attention's (jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims and the "
                   "name 'context', which Transformer Engine's fused attention gives its output and softmax "
                   "statistics), so each layer's backward first runs its element-wise forward again: both norms, "
                   "the residual add, RoPE (with --rope) and the activation; instead of --recompute")
    p.add_argument("--inference-embedding", choices=INFERENCE_EMBEDDINGS, default="vocab-parallel",
                   help="--mode prefill/decode/mixed at TP > 1: how the serving engine holds the embedding table: "
                   "vocab-parallel (default: vLLM's and SGLang's VocabParallelEmbedding, each TP rank's vocab/TP rows, "
                   "the output all-reduced over TP before the first layer) or replicated (the whole table on every "
                   "TP rank, no collective: LMDeploy TurboMind v0.1, TensorRT-LLM built without "
                   "--use_parallel_embedding)")
    p.add_argument("--iota-embed", action="store_true",
                   help="MaxText's use_iota_embed: the embedding as a one-hot matmul (the tokens compared with an iota "
                   "of the vocabulary, one-hot [tokens, vocab] x [vocab, hidden]) and its weight gradient as the "
                   "transposed matmul, instead of a lookup and its scatter-add")
    p.add_argument("--fp8-recipe", choices=FP8_RECIPES, default=None,
                   help="with --gemm-dtype fp8, the scaling recipe: Transformer Engine's delayed (DelayedScaling, the "
                   "default outside FSDP2: scales from an amax history, a LayerNorm or GeLU writes its output in FP8 "
                   "itself) or current (Float8CurrentScaling, e.g. Megatron-Bridge's "
                   "bf16_with_fp8_current_scaling_mixed: each tensor's own amax is read first, so every cast reads its "
                   "input twice and the LayerNorm and GeLU outputs get their own amax-and-cast kernel; no amax "
                   "history), or torchao's tensorwise (Float8Linear with dynamic scaling, torchtitan's Float8; the "
                   "default of an FSDP2 training step: every linear's input and weight cast at each forward, its "
                   "output gradient at each backward, each cast writing both layouts; no amax history)")
    p.add_argument("--platform", default=None, metavar="NAME",
                   help="the registered platform (`astra platforms`) the step is generated for; its GPU's compute "
                   "capability decides where Transformer Engine writes FP8 transposes (--gemm-dtype fp8): with each "
                   "cast on Hopper, where FP8 GEMMs take only the TN layout, plus each --fp8-params weight's once a "
                   "step; none on Blackwell (TE's is_non_tn_fp8_gemm_supported). Default: no platform, a transpose "
                   "with each cast and none for FP8 weights (the step as generated before the generator knew its "
                   "GPU); also on a GPU that states no compute capability (AMD)").completer = platform_names
    p.add_argument("--gpu", default=None, metavar="NAME_OR_YAML",
                   help="with --platform: the GPU that runs the step instead of the platform's (astra run --platform "
                   "P --gpu G: a gpu model preset or GPU YAML); its compute capability decides the FP8 layouts")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="per-layer CUDA graphs (Transformer Engine's make_graphed_callables, Megatron's "
                   "--cuda-graph-impl transformer_engine, NeMo's per-layer graphs): each layer's forward and backward "
                   "kernels go to the GPU as one graph, so the host launches one graph per layer pass instead of one "
                   "kernel at a time (astra run's host model); the graphs' static buffers keep about 20 %% more "
                   "activation memory (see docs/memory.md)")
    p.add_argument("--loss-dtype", choices=LOSS_DTYPES, default="fp32",
                   help="training memory: the cross entropy works on the logits upcast to fp32 (default: Megatron-LM, "
                   "torchtitan, Hugging Face Llama) or on them in --dtype (same: a loss on half-precision logits, "
                   "e.g. Hugging Face GPT-2 under DeepSpeed fp16); see docs/memory.md")
    p.add_argument("--grad-buffer", choices=GRAD_BUFFERS, default="fp32",
                   help="training memory under Megatron-LM/NeMo: fp32 main gradients (default: Megatron-LM "
                   "accumulates bf16 gradients in fp32) or gradients in --dtype (same: NeMo's distributed fused "
                   "Adam with grad_sync_dtype bf16, as MLPerf's GPT-3 ran); see docs/memory.md")
    p.add_argument("--fp8-params", action="store_true",
                   help="training memory under Megatron-LM/NeMo with --gemm-dtype fp8 or mxfp8: the linear layers' "
                   "weights are held in FP8 only (Transformer Engine's fp8_model_init, NeMo fp8_params; MXFP8: "
                   "fp8_param_gather with reuse_grad_buf_for_mxfp8_param_ag), not in --dtype beside their FP8 copy; "
                   "the fp32 master weights stay in the optimizer; with --lora-rank the frozen base in FP8. Inference "
                   "(--mode prefill/decode/mixed) with --gemm-dtype fp8: an FP8 checkpoint, its linear layers' "
                   "weights held in E4M3 with an FP32 scale per 128x128 block, as DeepSeek-V3 ships them "
                   "(README_WEIGHTS.md, config.json quantization_config), not in --dtype")
    p.add_argument("--fp8-activation-input", action="store_true",
                   help="training memory under Megatron-LM/NeMo with --gemm-dtype fp8: the FFN activation's input "
                   "(FC1's output) kept for its backward in FP8, 1 byte (Megatron's activation_func_fp8_input_store)")
    p.add_argument("--dp-shard", type=positive_int, default=None, metavar="N",
                   help="training memory under FSDP2: HSDP, parameters, gradients and optimizer states sharded over "
                   "N of the --dp ranks and replicated across --dp/N (torchtitan's data_parallel_shard_degree; "
                   "default: all of them, FULL_SHARD). The generated step's collectives stay FULL_SHARD's")
    p.add_argument("--fsdp-prefetch", type=non_negative_int, default=1, metavar="N",
                   help="training memory under FSDP2: units gathered ahead of the one computing (default 1, FSDP2's "
                   "implicit prefetch; more with set_modules_to_forward_prefetch)")
    p.add_argument("--hbm-gb", type=positive_float, metavar="GB",
                   help="with --summary: the device's memory as its datasheet states it (80 for an 80 GB H100; read "
                   "as GiB, as the GPU presets are) to check the estimate against: the "
                   "margin, and when it does not fit, the one change of these flags that would (docs/memory.md)")
    p.add_argument("--per-rank-files", action="store_true",
                   help="write PREFIX.<rank>.et for every rank (default: the compact workload, "
                        "PREFIX.workload.json and one trace per class of symmetric ranks, which astra run "
                        "reads the same way; see docs/compact-workload.md)")
