"""One generated step's settings (:class:`LlmConfig`: parallelism, schedule, precision, mode) and their
validation against the model (:func:`check_config`)."""

from __future__ import annotations

from dataclasses import dataclass

from astra_sim.errors import ConfigError

from .model import ModelDims, _lengths
from .lora import check_lora
from .split import check_split
from .overlap import COMM_SMS_GROUPS, TE_OVERLAP_NAMES


MODES = ("train", "prefill", "decode", "mixed")


DTYPES = {"bf16": (2, "c10::BFloat16"), "fp16": (2, "c10::Half"), "fp32": (4, "float")}


#: --gemm-dtype choices: the linear layers' operand type; "fp8" = Transformer Engine's hybrid recipe (E4M3 for
#: weights/activations, E5M2 for gradients, per-tensor scales); "fp4" (NVFP4), "mxfp8", "mxfp6", "mxfp4": block-scaled
#: formats (.blockscale), on GPUs whose tensor cores scale blocks (Blackwell; AMD CDNA 4 for the MX ones)
GEMM_DTYPES = ("same", "fp8", "fp4", "mxfp8", "mxfp6", "mxfp4")


ATTENTIONS = ("flash", "unfused")


#: --norm-kernel choices: a norm is one fused kernel, or eager PyTorch's composite RMSNorm (LayerOps.layer_norm)
NORM_KERNELS = ("fused", "composite")
#: --activation-kernel choices: a GeLU FFN's activation as one fused kernel each way, Hugging Face's gelu_new as
#: eager PyTorch runs it (.hf_eager), or NeMo's eager squared ReLU (.eager_act)
ACTIVATION_KERNELS = ("fused", "eager", "squared-relu")
#: --softmax-kernel choices: the unfused attention's scale, masks and softmax as Megatron's one fused kernel, or as
#: Hugging Face's eager ops (.hf_eager)
SOFTMAX_KERNELS = ("fused", "eager")
#: --attention-kernel choices: the flash attention kernel the gpu model times (astra_gpu_model.attention)
ATTENTION_KERNELS = ("fa2", "fa3", "cudnn")
#: --fp8-recipe choices: Transformer Engine's DelayedScaling (scales from an amax history: a LayerNorm or GeLU casts
#: its output to FP8 itself) or Float8CurrentScaling (each tensor's own amax first: a separate amax pass and cast), or
#: torchao's Float8Linear with dynamic tensorwise scaling (torchtitan's Float8; .fp8.Fp8Ops.fp8_tensorwise), the
#: default of an FSDP2 training step (:func:`default_fp8_recipe`)
FP8_RECIPES = ("delayed", "current", "tensorwise")
#: --attention-dtype choices: the flash attention's operand type, the step's --dtype ("same") or FP8 E4M3 (Transformer
#: Engine's fp8_dpa forward: Q, K, V cast to FP8 first; see .attention)
ATTENTION_DTYPES = ("same", "fp8")
#: --fp8-attention-backward choices: with --attention-dtype fp8, the backward in FP8 too ("on", Transformer Engine's
#: default NVTE_FP8_DPA_BWD=1) or in --dtype ("off", NVTE_FP8_DPA_BWD=0); see .attention
FP8_ATTENTION_BACKWARDS = ("on", "off")
#: --rope choices: no rotary embedding nodes, eager PyTorch's complex-number RoPE (three kernels per tensor) or one
#: fused kernel per tensor (Transformer Engine / Megatron --apply-rope-fusion); see .rope
ROPE_KERNELS = ("none", "eager", "fused", "fused-qkv")
#: --framework choices: whose memory semantics the estimate follows (docs/memory.md)
FRAMEWORKS = ("megatron", "fsdp2", "deepspeed")
#: --inference-embedding choices: how a serving engine holds the embedding table at TP > 1 (see
#: .embedding.EmbeddingOps._embedding_tp_kind): split by vocabulary rows, its output all-reduced (vLLM, SGLang), or
#: whole on every TP rank, no collective (LMDeploy TurboMind v0.1, TensorRT-LLM without --use_parallel_embedding)
INFERENCE_EMBEDDINGS = ("vocab-parallel", "replicated")
#: --loss-dtype choices: the cross entropy upcasts the logits to fp32, or works on them in --dtype
LOSS_DTYPES = ("fp32", "same")
#: --grad-buffer choices (Megatron-LM/NeMo memory): fp32 main gradients, or gradients kept in --dtype
GRAD_BUFFERS = ("fp32", "same")


@dataclass(frozen=True)
class LlmConfig:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batches: int = 1
    micro_batch_size: int = 1
    sequence_parallel: bool = False
    zero: int = 0
    recompute: bool = False         # full activation recomputation before each backward
    recompute_selective: bool = False  # memory only: attention scores recomputed, not kept (flash never keeps them)
    dtype: str = "bf16"
    tflops: float = 312.0
    ep: int = 1                     # expert parallelism, carved out of dp
    mode: str = "train"             # train | prefill | decode
    prompt_len: int | None = None   # inference; default: the model's seq_len
    decode_len: int = 1             # decode: generated tokens so far, this one included
    decode_steps: int = 1           # decode: consecutive steps in one trace (the KV cache grows by one each)
    prefill_chunk: int = 0          # mixed: prompt tokens prefilled per micro-batch beside its decode tokens
    prefill_done: int = 0           # mixed: tokens of that prompt already in the KV cache (earlier chunks)
    cp: int = 1                     # context parallelism (sequence split over CP ranks; training, prefill)
    cp_rotate: str | None = None    # ring | allgather | alltoall: the CP K/V exchange (.torch_cp); None: cp_rotate()
    cp_compile: bool = False        # allgather | alltoall: the ring attention compiled (torch.compile, .torch_cp)
    torch_compile: bool = False     # fsdp2: torchtitan's training.compile (each block compiled: SwiGLU fused)
    virtual_stages: int = 1         # interleaved 1F1B: model chunks per pipeline rank (training only)
    elementwise: bool = True        # training: emit norms, activations, dropout, residual adds, CE, optimizer
    attention: str = "flash"        # flash (one fused node) | unfused (bmm + softmax + dropout + bmm; training)
    causal: bool = True             # flash: causal mask (decoder LMs), timed as the lower triangle only
    dropout: bool = True            # training: emit dropout kernels (off: Megatron with hidden/attention dropout 0)
    inference_elementwise: bool = True  # inference: emit the forward's norms, residual adds and activation
    gemm_dtype: str = "same"        # linear-layer GEMM operands: "same" as dtype, "fp8" (Transformer Engine), or a
    #                                 block-scaled "fp4" (NVFP4) / "mxfp8" / "mxfp6" / "mxfp4" (see .blockscale)
    overlap_param_gather: bool = False  # ZeRO-1/2: gather updated parameters at the step's start, overlapping it
    reshard_after_forward: bool = False  # ZeRO-3: gather each unit before every micro-batch's forward and backward
    grad_sync_every_micro_batch: bool = False  # reduce gradients after every micro-batch's backward, not the last only
    check_nan_in_grad: bool = False  # Megatron DDP check_for_nan_in_grad: each bucket's grad norm before its reduction
    tp_comm_overlap: bool = False   # SP: TP all-gathers / reduce-scatters as rings pipelined with GEMM chunks
    moe_capacity_factor: float | None = None  # MoE: expert capacity = ceil(tokens*top_k/E * C); None: dropless
    moe_pad_to_capacity: bool = False  # MoE: pad every expert's input to its capacity
    moe_imbalance: float = 1.0      # MoE dropless: busiest EP rank's token copies / the balanced share (>= 1)
    moe_expert_load: tuple = ()     # MoE: the experts' relative loads, one tuple of E for every MoE layer or one
    #                                 per MoE layer (see parse_expert_load); () = balanced routing
    moe_dispatcher: str = "exchange"  # MoE: the all-to-alls alone, or Megatron-Core's "alltoall" dispatcher (.moe)
    moe_grouped_gemm: str = "grouped"  # MoE: one grouped kernel, or TE's per-expert "cublas-streams" GEMMs (.moe)
    recompute_modules: tuple = ()   # Megatron's output-discarding recompute of "layernorm" / "moe_act" (.moe)
    bias_activation_fusion: bool = False  # MoE: the experts' activation as Megatron's fused weighted GLU kernels (.moe)
    bias_swiglu_fusion: bool = True  # Megatron training: the dense gated FFN's SwiGLU as one kernel each way (.layers)
    bias_dropout_fusion: bool = True  # Megatron training: bias + dropout + residual add as one kernel (.layers)
    te_op_fuser: bool = False       # Megatron training: TE's op fuser runs the MLP, its FP8 casts fused (.layers)
    async_tp_allreduce: bool = True  # Megatron training without SP: QKV/FC1/head dgrad all-reduce beside the wgrad
    make_vocab_size_divisible_by: int = 128  # Megatron training: the vocabulary padded to this x TP (.model)
    moe_router_dtype: str | None = None  # MoE: Megatron's router dtype, fp32 | fp64; None: the input's (--dtype)
    moe_force_load_balancing: bool = False  # MoE: Megatron's random router logits, the experts' rows spread (.routing)
    comm_sms: tuple = ()            # ((key, SMs), ...): comm_sms attribute per kind of communication (see --comm-sms)
    sm_margins: tuple = ()          # ((TE overlap name, SMs), ...): its GEMMs' sm_margin (TE's set_sm_margin)
    logits: str = "all"             # inference: LM head on "all" positions, or the "last" of each sequence (serving)
    pp_scatter_gather: bool = False  # TP without SP: each TP rank sends 1/TP of a stage boundary, all-gathered after
    framework: str | None = None    # megatron | fsdp2 | deepspeed (memory semantics); None: implied_framework()
    loss_dtype: str = "fp32"        # training memory: the loss works on fp32 logits, or the "same" as --dtype
    grad_buffer: str = "fp32"       # Megatron/NeMo memory: fp32 main gradients, or the "same" as --dtype (NeMo's
    #                                 distributed fused Adam, grad_sync_dtype bf16)
    fp8_params: bool = False        # Megatron/NeMo memory: FP8 primary weights (Transformer Engine), no bf16 copy
    fp8_activation_input: bool = False  # Megatron memory: the FFN activation's input kept in FP8 for its backward
    dp_shard: int = 0               # FSDP2 memory: HSDP, sharded over this many DP ranks, replicated across the rest
    fsdp_prefetch: int = 1          # FSDP2 memory: units gathered ahead of the one computing (explicit prefetch)
    norm_kernel: str = "fused"      # the norms as one kernel each, or eager PyTorch's "composite" fp32 RMSNorm ops
    activation_kernel: str = "fused"  # a GeLU FFN's activation fused, or Hugging Face's "eager" gelu_new ops
    softmax_kernel: str = "fused"   # --attention unfused: fused scale-mask-softmax, or Hugging Face's "eager" ops
    attention_kernel: str | None = None  # fa2 | fa3 | cudnn on the flash nodes; None: attn_kernel's default
    rope: str | None = None         # none | eager | fused rotary embedding of Q and K; None: rope_kernel's default
    remat_policy: str | None = None  # MaxText's JAX remat policy "minimal_flash": element-wise ops again in the
    #                                 backward (.maxtext_step); None: none
    iota_embed: bool = False        # MaxText's use_iota_embed: the embedding as a one-hot matmul (.maxtext_step)
    inference_embedding: str = "vocab-parallel"  # inference at TP > 1: INFERENCE_EMBEDDINGS (the output all-reduced)
    cuda_graphs: bool = False       # per-layer CUDA graphs: one host launch per layer pass; activations +20 % (memory)
    fp8_recipe: str | None = None   # --gemm-dtype fp8: Transformer Engine's delayed (amax history) or current scaling,
    #                                 or torchao's tensorwise; None: default_fp8_recipe() (set in __post_init__)
    fp8_transpose: bool | None = None  # --gemm-dtype fp8: TE writes FP8 transposes (the GPU's FP8 GEMMs take only TN:
    #                                 Hopper) or not (False: Blackwell); None: no platform given, casts with transposes
    #                                 but none for FP8 weights (.fp8.fp8_transpose_for)
    attention_dtype: str = "same"   # same | fp8: the flash attention forward's operands (see .attention)
    fp8_attention_backward: bool = True  # attention_dtype fp8: the backward in FP8 too (TE's NVTE_FP8_DPA_BWD=1)
    pipeline_embedding_layer: bool = False  # the embedding counts as one layer of the pipeline split (see .split)
    pipeline_loss_layer: bool = False  # the loss (LM head, cross entropy) counts as one layer of the split
    defer_embedding_wgrad: bool = False  # Megatron's --defer-embedding-wgrad-compute: the LM head's wgrad GEMMs in
    #                                      the pipeline drain (see .layers _head_wgrad_deferred / drain_head_wgrads)
    wgrad_deferral_limit: int = 0   # ... for at most this many head calls of the step (0: all, Megatron's default)
    lora_rank: int = 0              # LoRA: adapters of this rank, base weights frozen (0: full training; see .lora)
    lora_targets: tuple = ()        # LoRA: the linear layers with adapters (names of lora.LORA_TARGETS)
    lora_dropout: float = 0.0       # LoRA: the adapters' input dropout probability (0: none; see .lora)

    def __post_init__(self):
        if self.fp8_recipe is None:
            object.__setattr__(self, "fp8_recipe", default_fp8_recipe(self))

    @property
    def npus(self):
        return self.tp * self.pp * self.dp * self.cp

    @property
    def inference(self):
        return self.mode != "train"

    @property
    def steps(self):
        """Steps in one trace: the decode steps, else 1."""
        return self.decode_steps if self.mode == "decode" else 1

    @property
    def ew(self):
        """Element-wise / memory-bound nodes are emitted (training only)."""
        return self.elementwise and not self.inference

    @property
    def ew_forward(self):
        """The layer forward's norms, residual adds and activation are emitted: in training with ``ew``; in
        inference with ``inference_elementwise`` (on by default since issue 34, so that a step generated here
        is the step ``astra serve`` times), never with dropout."""
        return self.ew or (self.elementwise and self.inference and self.inference_elementwise)


def _check_cp_rotate(cfg: LlmConfig):
    """``--cp-rotate``: one of :data:`.torch_cp.CP_ROTATES`; PyTorch's context_parallel (allgather, alltoall) only
    as torch runs it: flash SDPA, causal (its load balancing raises "Load balancing requires `is_causal=True`"),
    operands in --dtype."""
    from .torch_cp import CP_ROTATES, cp_rotate

    if cfg.cp_rotate is not None and cfg.cp_rotate not in CP_ROTATES:
        raise ConfigError(f"--cp-rotate must be one of {', '.join(CP_ROTATES)}, got {cfg.cp_rotate!r}")
    if cp_rotate(cfg) == "ring":
        if cfg.cp_compile:
            raise ConfigError("--cp-compile is PyTorch's context_parallel under torch.compile: it needs --cp-rotate "
                              "allgather or alltoall (the default with --framework fsdp2)")
        return
    if cfg.attention != "flash" or not cfg.causal or cfg.attention_dtype != "same":
        raise ConfigError(f"--cp-rotate {cp_rotate(cfg)} (PyTorch's context_parallel) needs --attention flash, "
                          "--causal (its load balancing requires is_causal=True) and --attention-dtype same; "
                          "use --cp-rotate ring")


def attention_kernel(cfg: LlmConfig) -> str | None:
    """The kernel the flash attention nodes name (``attention_kernel`` attribute): ``--attention-kernel`` if given,
    else FlashAttention-2 under ``--framework fsdp2`` (eager PyTorch's SDPA flash backend), else None (no attribute:
    the GPU preset's attention efficiency, as every trace written before)."""
    if cfg.attention_kernel:
        return cfg.attention_kernel
    return "fa2" if cfg.framework == "fsdp2" and cfg.attention == "flash" else None


def rope_kernel(cfg: LlmConfig, dims=None) -> str:
    """How the rotary embedding of Q and K runs (see .rope): ``--rope`` if given; else none with multi-head latent
    attention (its decoupled rope_dim part is not modelled); else ``eager`` under ``--framework fsdp2``
    (torchtitan's ``apply_rotary_emb``; its models are all rotary); else, for a rotary model (``dims.rotary``: its
    Hugging Face config or preset) whose element-wise nodes are emitted, what the framework runs: ``fused`` in a
    Megatron training step (Megatron-LM's ``--no-rope-fusion`` is store_false: ``apply_rope_fusion`` defaults on,
    Transformer Engine's fused RoPE, one kernel per tensor each way) and in inference (vLLM's ``rotary_embedding``
    custom op, one in-place kernel on Q and K per layer; ASSUMPTION: the engine is vLLM-like: TensorRT-LLM and
    LMDeploy apply RoPE inside their QKV-preparation / attention kernels, no separate kernel); ``none`` otherwise
    (a non-rotary model: GPT-2/3, or dimensions given without a model, Megatron-LM's learned_absolute default;
    DeepSpeed / Hugging Face eager: its ``apply_rotary_pos_emb`` is not modelled)."""
    if cfg.rope:
        return cfg.rope
    if dims is not None and dims.mla:
        return "none"
    if cfg.framework == "fsdp2":  # (--torch-compile too: Inductor falls back to ATen for complex ops, .rope)
        return "eager"
    if dims is None or not dims.rotary or not cfg.ew_forward:
        return "none"
    if cfg.inference or implied_framework(cfg) == "megatron":
        return "fused"
    return "none"


def implied_framework(cfg: LlmConfig) -> str:
    """The framework whose memory semantics a step follows: ``--framework`` if given, else the one the other flags
    imply: ``--zero 3`` is FSDP2 (FULL_SHARD), ``--zero 2`` DeepSpeed (Megatron-LM has no ZeRO-2), anything else
    Megatron-LM (``--zero 1`` = its distributed optimizer)."""
    if cfg.framework:
        return cfg.framework
    return {3: "fsdp2", 2: "deepspeed"}.get(cfg.zero, "megatron")


def default_fp8_recipe(cfg: LlmConfig) -> str:
    """The FP8 recipe a step runs when ``--fp8-recipe`` is not given: torchao's dynamic tensorwise scaling in an FSDP2
    training step with ``--gemm-dtype fp8`` (torchtitan's Float8: pytorch/torchtitan 9dec370 ``torchtitan/float8.py``
    swaps every ``nn.Linear`` but the output head for torchao's ``Float8Linear``, ``scaling_type_*`` default
    "dynamic" in ``config_manager.py``), else Transformer Engine's delayed scaling (Megatron-LM / NeMo)."""
    if cfg.gemm_dtype == "fp8" and not cfg.inference and implied_framework(cfg) == "fsdp2":
        return "tensorwise"
    return "delayed"


def _check_megatron_moe_sp(dims: ModelDims, cfg: LlmConfig):
    """A Megatron training step refuses what Megatron-Core refuses: an MoE layer in training at TP > 1 without
    sequence parallelism (any token dispatcher: ``MoELayer.forward``, megatron/core/transformer/moe/moe_layer.py
    258-262 at core_r0.14.0), which covers EP > 1 with TP > 1 without it (model_parallel_config.py 388-393).
    Other frameworks and inference are not Megatron-Core's training step and keep the layout."""
    if not dims.moe or cfg.tp == 1 or cfg.sequence_parallel or cfg.inference:
        return
    if implied_framework(cfg) != "megatron":
        return
    ep = f" --ep {cfg.ep}" if cfg.ep > 1 else ""
    raise ConfigError(f"a mixture-of-experts model ({dims.experts} experts) at --tp {cfg.tp}{ep} without "
                      "--sequence-parallel: Megatron-Core refuses MoE layers in training at TP > 1 without sequence "
                      "parallelism; add --sequence-parallel (or give --framework fsdp2 / deepspeed, or --mode "
                      "prefill / decode / mixed)")


def _check(dims: ModelDims, cfg: LlmConfig):
    for name in ("tp", "pp", "dp", "micro_batches", "micro_batch_size", "ep", "cp", "virtual_stages"):
        v = getattr(cfg, name)
        if not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name.replace('_', '-')} must be a positive integer, got {v!r}")
    if cfg.recompute and cfg.recompute_selective:
        raise ConfigError("--recompute is full or selective, not both")
    if cfg.remat_policy not in (None, "minimal_flash"):
        raise ConfigError(f"--remat-policy must be minimal_flash, got {cfg.remat_policy!r}")
    if cfg.remat_policy and (cfg.inference or cfg.recompute or cfg.recompute_selective or cfg.recompute_modules
                             or dims.experts or dims.mla or cfg.attention != "flash"):
        raise ConfigError("--remat-policy minimal_flash is MaxText's recomputation of a dense model's training step "
                          "with fused (flash) attention, whose saved 'context' spares the attention, instead of "
                          "--recompute / --recompute-modules (not with MoE or MLA layers or --attention unfused, "
                          "whose score matmuls the policy would recompute)")
    if cfg.iota_embed and cfg.inference:
        raise ConfigError("--iota-embed is for --mode train")
    if cfg.inference_embedding not in INFERENCE_EMBEDDINGS:
        raise ConfigError(f"--inference-embedding must be one of {', '.join(INFERENCE_EMBEDDINGS)}, got "
                          f"{cfg.inference_embedding!r}")
    if cfg.recompute_selective and cfg.attention == "unfused":
        raise ConfigError("--recompute selective with --attention unfused is not emitted (the attention core's "
                          "recomputation); FlashAttention recomputes it anyway, so use --attention flash")
    V = cfg.virtual_stages
    if V > 1:
        if cfg.inference:
            raise ConfigError("--virtual-stages is for --mode train")
        if cfg.pp < 2:
            raise ConfigError("--virtual-stages needs --pp >= 2")
    check_split(dims.layers, cfg)
    check_lora(dims, cfg)
    if V > 1:
        if cfg.micro_batches % cfg.pp:
            raise ConfigError(f"--micro-batches {cfg.micro_batches} must be a multiple of --pp {cfg.pp} "
                              "with --virtual-stages")
    if cfg.cp > 1:
        if cfg.mode in ("decode", "mixed"):
            raise ConfigError("--cp is for --mode train or prefill")
        seq, what = (dims.seq_len, "seq len") if cfg.mode == "train" else (_lengths(dims, cfg)[0], "prompt len")
        if seq % cfg.cp:
            raise ConfigError(f"{what} {seq} is not divisible by --cp {cfg.cp}")
        _check_cp_rotate(cfg)
        if cfg.causal and cfg.attention == "flash" and seq % (2 * cfg.cp):
            raise ConfigError(f"{what} {seq} is not divisible by 2 x --cp {cfg.cp}: causal context "
                              "parallelism splits the sequence into 2 x CP load-balanced chunks (Megatron-LM's "
                              "requirement); use --no-causal for a bidirectional model")
    if cfg.attention not in ATTENTIONS:
        raise ConfigError(f"--attention must be one of {', '.join(ATTENTIONS)}, got {cfg.attention!r}")
    if cfg.attention == "unfused" and cfg.inference:
        raise ConfigError("--attention unfused is for --mode train")
    if dims.mla and (cfg.tp_comm_overlap or cfg.attention == "unfused" or cfg.cp > 1):
        raise ConfigError("multi-head latent attention (kv_lora_rank) is not modelled with --tp-comm-overlap, "
                          "--attention unfused or --cp")
    if dims.window and (cfg.attention == "unfused" or cfg.cp > 1):
        raise ConfigError("sliding-window attention is not modelled with --attention unfused or --cp")
    if dims.mtp_layers and not cfg.inference and (cfg.zero == 3 or cfg.cp > 1 or cfg.moe_expert_load
                                                   or cfg.overlap_param_gather):
        raise ConfigError("multi-token prediction (num_nextn_predict_layers) is not modelled with --zero 3, --cp, "
                          "--moe-expert-load or --overlap-param-gather (set --mtp-layers 0)")
    if dims.kv_heads % cfg.tp:
        raise ConfigError(f"kv heads {dims.kv_heads} (and heads {dims.heads}) must be divisible by --tp {cfg.tp}")
    if dims.ffn_hidden % cfg.tp:
        raise ConfigError(f"ffn hidden {dims.ffn_hidden} is not divisible by --tp {cfg.tp}")
    if cfg.zero not in (0, 1, 2, 3):
        raise ConfigError(f"--zero must be 0, 1, 2 or 3, got {cfg.zero!r}")
    if cfg.dtype not in DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, got {cfg.dtype!r}")
    if cfg.overlap_param_gather and (cfg.zero not in (1, 2) or cfg.inference):
        raise ConfigError("--overlap-param-gather is for training with --zero 1 or 2 (ZeRO-3 gathers every unit "
                          "anyway)")
    if cfg.defer_embedding_wgrad and (cfg.inference or cfg.pp == 1 or implied_framework(cfg) != "megatron"):
        raise ConfigError("--defer-embedding-wgrad-compute is Megatron's deferral of the LM head's weight gradient to "
                          "the pipeline drain: a Megatron training step with --pp > 1 (Megatron-Core refuses it "
                          "without pipeline parallelism)")
    if not isinstance(cfg.wgrad_deferral_limit, int) or cfg.wgrad_deferral_limit < 0:
        raise ConfigError(f"--wgrad-deferral-limit must be a non-negative integer, got {cfg.wgrad_deferral_limit!r}")
    if cfg.wgrad_deferral_limit and not cfg.defer_embedding_wgrad:
        raise ConfigError("--wgrad-deferral-limit needs --defer-embedding-wgrad-compute")
    if cfg.pp_scatter_gather and (cfg.tp == 1 or cfg.pp == 1 or cfg.sequence_parallel):
        raise ConfigError("--pp-scatter-gather needs --tp > 1 and --pp > 1, without --sequence-parallel (which "
                          "already splits the stage boundary over TP)")
    if cfg.logits not in ("all", "last"):
        raise ConfigError(f"--logits must be all or last, got {cfg.logits!r}")
    if cfg.logits == "last" and not cfg.inference:
        raise ConfigError("--logits last is for inference (training computes the loss on every position)")
    if cfg.logits == "last" and cfg.cp > 1:
        raise ConfigError("--logits last with --cp is not modelled (only the CP rank holding a sequence's end "
                          "would compute its logits)")
    if cfg.framework is not None and cfg.framework not in FRAMEWORKS:
        raise ConfigError(f"--framework must be one of {', '.join(FRAMEWORKS)}, got {cfg.framework!r}")
    if cfg.norm_kernel not in NORM_KERNELS:
        raise ConfigError(f"--norm-kernel must be one of {', '.join(NORM_KERNELS)}, got {cfg.norm_kernel!r}")
    if cfg.torch_compile and (cfg.framework != "fsdp2" or cfg.inference):
        raise ConfigError("--torch-compile is torchtitan's training.compile: it needs a --framework fsdp2 training step")
    if cfg.torch_compile and cfg.norm_kernel == "composite":
        raise ConfigError("--torch-compile compiles the norm into one kernel: --norm-kernel composite is the eager "
                          "Python RMSNorm")
    if cfg.activation_kernel not in ACTIVATION_KERNELS:
        raise ConfigError(f"--activation-kernel must be one of {', '.join(ACTIVATION_KERNELS)}, got "
                          f"{cfg.activation_kernel!r}")
    if cfg.activation_kernel != "fused" and dims.gated:
        what = "Hugging Face's gelu_new" if cfg.activation_kernel == "eager" else "NeMo's squared ReLU"
        raise ConfigError(f"--activation-kernel {cfg.activation_kernel} is {what} of a GeLU-like (non-gated) FFN; a "
                          "gated (SwiGLU) FFN's SiLU runs as one kernel")
    if cfg.softmax_kernel not in SOFTMAX_KERNELS:
        raise ConfigError(f"--softmax-kernel must be one of {', '.join(SOFTMAX_KERNELS)}, got {cfg.softmax_kernel!r}")
    if cfg.softmax_kernel == "eager" and cfg.attention != "unfused":
        raise ConfigError("--softmax-kernel eager is the unfused attention's scale, masks and softmax: it needs "
                          "--attention unfused")
    if cfg.attention_kernel is not None and cfg.attention_kernel not in ATTENTION_KERNELS:
        raise ConfigError(f"--attention-kernel must be one of {', '.join(ATTENTION_KERNELS)}, got "
                          f"{cfg.attention_kernel!r}")
    if cfg.attention_kernel and cfg.attention != "flash":
        raise ConfigError("--attention-kernel names the fused attention kernel: it needs --attention flash")
    if cfg.attention_dtype not in ATTENTION_DTYPES:
        raise ConfigError(f"--attention-dtype must be one of {', '.join(ATTENTION_DTYPES)}, got "
                          f"{cfg.attention_dtype!r}")
    if cfg.attention_dtype == "fp8" and cfg.attention != "flash":
        raise ConfigError("--attention-dtype fp8 runs the fused (flash) attention kernel in FP8: it needs --attention "
                          "flash")
    if cfg.attention_dtype == "fp8" and attention_kernel(cfg) == "fa2":
        raise ConfigError("--attention-dtype fp8: FlashAttention-2 has no FP8 kernel; give --attention-kernel fa3 or "
                          "cudnn")
    if not cfg.fp8_attention_backward and cfg.attention_dtype != "fp8":
        raise ConfigError("--fp8-attention-backward off needs --attention-dtype fp8 (it keeps an FP8 attention's "
                          "backward in --dtype)")
    if cfg.attention_dtype == "fp8" and cfg.mode in ("decode", "mixed"):
        raise ConfigError(f"--attention-dtype fp8 with --mode {cfg.mode}: FP8 attention over the KV cache needs an FP8 "
                          "cache, which is not modelled; use --mode train or prefill")
    if cfg.rope is not None and cfg.rope not in ROPE_KERNELS:
        raise ConfigError(f"--rope must be one of {', '.join(ROPE_KERNELS)}, got {cfg.rope!r}")
    if cfg.rope in ("eager", "fused", "fused-qkv") and dims.mla:
        raise ConfigError("--rope: multi-head latent attention's rotary part (rope_dim) is not modelled; use "
                          "--rope none")
    if cfg.rope == "fused-qkv" and (cfg.inference or implied_framework(cfg) != "megatron"):
        raise ConfigError("--rope fused-qkv is Transformer Engine's fused QKV RoPE in a Megatron training step; use "
                          "--rope fused (or eager) here")
    if cfg.loss_dtype not in LOSS_DTYPES:
        raise ConfigError(f"--loss-dtype must be one of {', '.join(LOSS_DTYPES)}, got {cfg.loss_dtype!r}")
    if cfg.framework == "fsdp2" and cfg.zero != 3 and not cfg.inference:
        raise ConfigError("--framework fsdp2 shards parameters, gradients and optimizer states (FULL_SHARD): "
                          "give --zero 3")
    if cfg.framework == "megatron" and cfg.zero in (2, 3) and not cfg.inference:
        raise ConfigError(f"--framework megatron shards the optimizer states only (--zero 1, its distributed "
                          f"optimizer), not --zero {cfg.zero}: use --framework deepspeed or fsdp2")
    if cfg.reshard_after_forward and (cfg.zero != 3 or cfg.inference):
        raise ConfigError("--reshard-after-forward is for training with --zero 3 (it re-gathers the sharded "
                          "parameters)")
    if cfg.grad_buffer not in GRAD_BUFFERS:
        raise ConfigError(f"--grad-buffer must be one of {', '.join(GRAD_BUFFERS)}, got {cfg.grad_buffer!r}")
    if (cfg.grad_buffer != "fp32" or cfg.fp8_params and not cfg.inference) and (
            cfg.inference or implied_framework(cfg) != "megatron"):
        raise ConfigError("--grad-buffer and --fp8-params are Megatron-LM/NeMo training memory (--framework "
                          "megatron, --zero 0 or 1); --fp8-params also an FP8 checkpoint in inference")
    if cfg.fp8_params and cfg.inference and cfg.gemm_dtype != "fp8":
        raise ConfigError("--fp8-params in inference needs --gemm-dtype fp8 (an FP8 checkpoint's weights are the "
                          "GEMMs' E4M3 operands)")
    if (cfg.dp_shard or cfg.fsdp_prefetch != 1) and (cfg.inference or implied_framework(cfg) != "fsdp2"):
        raise ConfigError("--dp-shard and --fsdp-prefetch are FSDP2 training memory (--framework fsdp2, --zero 3)")
    if cfg.dp_shard and (cfg.dp % cfg.dp_shard or cfg.ep > 1):
        raise ConfigError(f"--dp-shard {cfg.dp_shard}: HSDP shards over a divisor of --dp {cfg.dp} (and not with "
                          "--ep)")
    if cfg.fsdp_prefetch < 0 or cfg.dp_shard < 0:
        raise ConfigError("--fsdp-prefetch and --dp-shard take a non-negative integer")
    if cfg.fp8_recipe not in FP8_RECIPES:
        raise ConfigError(f"--fp8-recipe must be one of {', '.join(FP8_RECIPES)}, got {cfg.fp8_recipe!r}")
    if cfg.fp8_recipe != "delayed" and cfg.gemm_dtype != "fp8":
        raise ConfigError(f"--fp8-recipe {cfg.fp8_recipe} needs --gemm-dtype fp8 (the recipe scales the FP8 GEMMs' "
                          "operands)")
    if cfg.fp8_recipe == "tensorwise" and (cfg.inference or implied_framework(cfg) != "fsdp2"):
        raise ConfigError("--fp8-recipe tensorwise is torchao's Float8Linear as torchtitan trains with it (--framework "
                          "fsdp2 training); Megatron-LM / NeMo steps take Transformer Engine's delayed or current")
    if cfg.fp8_activation_input and (cfg.gemm_dtype != "fp8" or cfg.inference or implied_framework(cfg) != "megatron"):
        raise ConfigError("--fp8-activation-input is Megatron-LM/NeMo training memory with --gemm-dtype fp8")
    if not cfg.bias_swiglu_fusion and (cfg.inference or implied_framework(cfg) != "megatron"):
        raise ConfigError("--no-bias-swiglu-fusion is Megatron-LM's flag (--framework megatron training); the other "
                          "frameworks run the SwiGLU unfused anyway")
    if not cfg.bias_dropout_fusion and (cfg.inference or implied_framework(cfg) != "megatron"):
        raise ConfigError("--no-bias-dropout-fusion is Megatron-LM's flag (--framework megatron training); the other "
                          "frameworks run dropout and add unfused anyway")
    if cfg.te_op_fuser and (cfg.inference or implied_framework(cfg) != "megatron"):
        raise ConfigError("--te-op-fuser is Megatron-Core's use_transformer_engine_op_fuser (--framework megatron "
                          "training)")
    if not isinstance(cfg.make_vocab_size_divisible_by, int) or cfg.make_vocab_size_divisible_by < 1:
        raise ConfigError(f"--make-vocab-size-divisible-by must be a positive integer, got "
                          f"{cfg.make_vocab_size_divisible_by!r}")
    if cfg.make_vocab_size_divisible_by != 128 and (cfg.inference or implied_framework(cfg) != "megatron"):
        raise ConfigError("--make-vocab-size-divisible-by is Megatron-LM's flag (--framework megatron training); "
                          "the other frameworks do not pad the vocabulary (inference: to a multiple of TP)")
    if not cfg.async_tp_allreduce and (cfg.inference or implied_framework(cfg) != "megatron"):
        raise ConfigError("--no-async-tensor-model-parallel-allreduce is Megatron-LM's flag (--framework megatron "
                          "training); the other frameworks reduce after the weight gradient anyway")
    if cfg.fp8_activation_input and dims.gated and not cfg.bias_swiglu_fusion:
        raise ConfigError("--fp8-activation-input with --no-bias-swiglu-fusion: Megatron keeps the activation's "
                          "input in FP8 only inside its fused SwiGLU (bias_swiglu_impl's fp8_input_store)")
    if cfg.fp8_params and cfg.gemm_dtype not in ("fp8", "mxfp8"):
        raise ConfigError("--fp8-params needs --gemm-dtype fp8 or mxfp8 (the FP8 weights are the GEMMs' operands)")
    if cfg.grad_sync_every_micro_batch and cfg.inference:
        raise ConfigError("--grad-sync-every-micro-batch is for --mode train")
    if cfg.check_nan_in_grad and (cfg.inference or implied_framework(cfg) != "megatron" or cfg.zero == 3):
        raise ConfigError("--check-nan-in-grad is Megatron-Core DDP's check_for_nan_in_grad (--framework megatron "
                          "training, --zero 0-2): FSDP2 and DeepSpeed check their gradients their own way")
    if cfg.tp_comm_overlap and not (cfg.sequence_parallel and cfg.tp > 1):
        raise ConfigError("--tp-comm-overlap needs --sequence-parallel and --tp > 1 (it overlaps the sequence-"
                          "parallel all-gathers and reduce-scatters with their GEMMs)")
    if cfg.gemm_dtype not in GEMM_DTYPES:
        raise ConfigError(f"--gemm-dtype must be one of {', '.join(GEMM_DTYPES)}, got {cfg.gemm_dtype!r}")
    if not cfg.tflops > 0:
        raise ConfigError(f"--tflops must be > 0, got {cfg.tflops!r}")
    if cfg.mode not in MODES:
        raise ConfigError(f"--mode must be one of {', '.join(MODES)}, got {cfg.mode!r}")
    if cfg.prompt_len is not None and (not isinstance(cfg.prompt_len, int) or cfg.prompt_len < 1):
        raise ConfigError(f"--prompt-len must be a positive integer, got {cfg.prompt_len!r}")
    if not isinstance(cfg.decode_len, int) or cfg.decode_len < 1:
        raise ConfigError(f"--decode-len must be a positive integer, got {cfg.decode_len!r}")
    if not isinstance(cfg.decode_steps, int) or cfg.decode_steps < 1:
        raise ConfigError(f"--decode-steps must be a positive integer, got {cfg.decode_steps!r}")
    if cfg.decode_steps > 1 and cfg.mode != "decode":
        raise ConfigError("--decode-steps is for --mode decode")
    for key in ("prefill_chunk", "prefill_done"):
        value = getattr(cfg, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"--{key.replace('_', '-')} must be a non-negative integer, got {value!r}")
    if cfg.mode == "mixed" and cfg.prefill_chunk < 1:
        raise ConfigError("--mode mixed needs --prefill-chunk >= 1 (the prompt tokens prefilled beside the decodes)")
    if cfg.mode != "mixed" and (cfg.prefill_chunk or cfg.prefill_done):
        raise ConfigError("--prefill-chunk / --prefill-done are for --mode mixed")
    if cfg.ep > 1 and not dims.moe:
        raise ConfigError("--ep needs a mixture-of-experts model (--experts)")
    if cfg.dp % cfg.ep:
        raise ConfigError(f"--dp {cfg.dp} is not divisible by --ep {cfg.ep} (EP is carved out of DP)")
    if dims.moe and dims.experts % cfg.ep:
        raise ConfigError(f"experts {dims.experts} are not divisible by --ep {cfg.ep}")
    if dims.moe and dims.expert_ffn % cfg.tp:
        raise ConfigError(f"expert ffn {dims.expert_ffn} is not divisible by --tp {cfg.tp}")
    _check_megatron_moe_sp(dims, cfg)
    c = cfg.moe_capacity_factor
    if c is not None:
        if not dims.moe:
            raise ConfigError("--moe-capacity-factor needs a mixture-of-experts model (--experts)")
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not c > 0:
            raise ConfigError(f"--moe-capacity-factor must be a number > 0, got {c!r}")
    if cfg.moe_pad_to_capacity and c is None:
        raise ConfigError("--moe-pad-to-capacity needs --moe-capacity-factor")
    from .moe import check_moe_kernels  # (--moe-dispatcher, --moe-grouped-gemm, --recompute-modules)

    check_moe_kernels(dims, cfg)
    f = cfg.moe_imbalance
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not f >= 1:
        raise ConfigError(f"--moe-imbalance must be a number >= 1 (busiest EP rank's load / the mean), got {f!r}")
    if f != 1 and not dims.moe:
        raise ConfigError("--moe-imbalance needs a mixture-of-experts model (--experts)")
    if f != 1 and c is not None:
        raise ConfigError("--moe-imbalance is for dropless routing; with --moe-capacity-factor every expert's load "
                          "is capped at its capacity (use --moe-pad-to-capacity for the capped worst case)")
    if cfg.moe_expert_load:
        if not dims.moe:
            raise ConfigError("--moe-expert-load needs a mixture-of-experts model (--experts)")
        if f != 1:
            raise ConfigError("--moe-expert-load and --moe-imbalance are two models of the same thing; give one")
        table = cfg.moe_expert_load
        if len(table) not in (1, dims.moe_layers) or any(len(w) != dims.experts for w in table):
            raise ConfigError(f"--moe-expert-load: expected 1 or {dims.moe_layers} (MoE layers) lists of "
                              f"{dims.experts} expert loads")
        if any(not sum(w) > 0 or min(w) < 0 for w in table):
            raise ConfigError("--moe-expert-load: expert loads must be numbers >= 0, not all 0")
    if f != 1 and f > min(cfg.ep, dims.experts / dims.top_k):
        # an EP rank gets at most all of a rank's copies (EP x the balanced share) and at most one copy of each
        # token per expert it holds (E/EP experts: E/K x the balanced share)
        raise ConfigError(f"--moe-imbalance {f} is more than the busiest EP rank can get: at most "
                          f"min(EP, experts / top-k) = {min(cfg.ep, dims.experts / dims.top_k):g} x the balanced "
                          "share (with --ep 1 every expert is on every rank and the load cannot be uneven)")
    known = COMM_SMS_GROUPS + TE_OVERLAP_NAMES
    for key, sms in cfg.comm_sms:
        if key not in known:
            raise ConfigError(f"--comm-sms: unknown key {key!r} (known: {', '.join(known)})")
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 0:
            raise ConfigError(f"--comm-sms: {key} must be a non-negative integer (SMs), got {sms!r}")
        if key not in COMM_SMS_GROUPS and not cfg.tp_comm_overlap:
            raise ConfigError(f"--comm-sms: {key} is a Transformer Engine userbuffers overlap, emitted only with "
                              "--tp-comm-overlap")
    for name, sms in cfg.sm_margins:
        if name not in TE_OVERLAP_NAMES or not cfg.tp_comm_overlap:
            raise ConfigError(f"sm_margins: {name!r} is not a Transformer Engine userbuffers overlap emitted here "
                              f"(known: {', '.join(TE_OVERLAP_NAMES)}; they need --tp-comm-overlap)")
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
            raise ConfigError(f"sm_margins: {name} must be a positive integer (SMs), got {sms!r}")


check_config = _check
