"""``astra workload llm`` as a typed spec (:class:`LlmSpec`) and the public calls over it.

One object names one generated step, whichever door it comes through: the command line
(:meth:`LlmSpec.from_cli_args`), a mapping such as a sweep's ``llm:`` block or Python keywords
(:meth:`LlmSpec.from_mapping`, checked by the command's own parser, so the types, choices and errors are the
CLI's), or code (``LlmSpec(preset="llama3-8b", tp=8, mode="decode")``). :meth:`LlmSpec.resolve` turns it into the
checked model dimensions and step settings; :func:`generate_llm_workload` writes the workload and
:func:`llm_summary` gives ``--summary``'s numbers. The flags are :mod:`.flags`'; :meth:`LlmSpec.add_cli_args` adds
them with the dataclass's defaults, so that the command, the spec and its defaults cannot drift apart.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from dataclasses import replace as dataclass_replace

from astra_sim.errors import ConfigError

from .config import LlmConfig, check_config
from .flags import add_llm_flags, add_model_flags
from .fp8 import fp8_transpose_for, run_gpu
from .lora import LORA_TARGETS, parse_lora_targets
from .model import ModelDims, model_dims
from .moe import parse_recompute_modules
from .overlap import load_tp_overlap_sms, parse_comm_sms
from .routing import parse_expert_load

__all__ = ["LlmSpec", "add_model_flags", "generate_llm_workload", "llm_summary"]


@dataclass(frozen=True)
class LlmSpec:
    """Every option of ``astra workload llm`` (field = the option's argparse dest; None = not given, the model's
    or the mode's default). Frozen: derive variants with :meth:`replace`."""

    # model source and dimension overrides (None: the preset's / config's value)
    preset: str | None = None
    model: str | None = None            # a Hugging Face config.json, a folder holding one, or a shipped name
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    vocab: int | None = None
    seq_len: int | None = None
    head_dim: int | None = None
    sliding_window: int | None = None
    window_pattern: int | None = None
    mtp_layers: int | None = None
    gated: bool | None = None
    tie_embeddings: bool | None = None  # the LM head uses the embedding's weight; None: the model's (--tie-embeddings)
    # mixture of experts
    experts: int | None = None
    top_k: int | None = None
    moe_ffn: int | None = None
    shared_experts: int | None = None
    moe_layer_freq: int | None = None
    moe_dense_layers: int | None = None
    moe_capacity_factor: float | None = None
    moe_pad_to_capacity: bool = False
    moe_imbalance: float = 1.0
    moe_expert_load: str | None = None  # SPEC: "a,b,...", "zipf:S[:SEED]" or a .json file
    moe_dispatcher: str = "exchange"    # exchange | alltoall (see --moe-dispatcher)
    moe_grouped_gemm: str = "grouped"   # grouped | cublas-streams (see --moe-grouped-gemm)
    recompute_modules: str | None = None  # "layernorm,moe_act" (see --recompute-modules)
    bias_activation_fusion: bool = False  # the experts' fused activation (see --bias-activation-fusion)
    bias_swiglu_fusion: bool = True     # Megatron training: the dense gated FFN's fused SwiGLU (--no-bias-swiglu-fusion)
    bias_dropout_fusion: bool = True    # Megatron training: the fused bias-dropout-add (--no-bias-dropout-fusion)
    te_op_fuser: bool = False           # Megatron training: TE's operation fuser runs the MLP (--te-op-fuser)
    async_tensor_model_parallel_allreduce: bool = True  # (--no-async-tensor-model-parallel-allreduce)
    make_vocab_size_divisible_by: int = 128  # Megatron training: the vocabulary's padding multiple / TP
    moe_router_dtype: str | None = None  # fp32 | fp64; None: --dtype (see --moe-router-dtype)
    moe_force_load_balancing: bool = False  # random router logits (see --moe-force-load-balancing)
    # layout
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    virtual_stages: int = 1
    pipeline_embedding_layer: bool = False  # the embedding counts as a layer of the pipeline split (Megatron/NeMo)
    pipeline_loss_layer: bool = False       # the loss counts as a layer of the pipeline split
    pp_scatter_gather: bool = False
    lora_rank: int | None = None        # LoRA fine-tuning: adapter rank (None: full training)
    lora_targets: str | None = None     # "qkv,proj,fc1,fc2" (default with --lora-rank: all four)
    lora_dropout: float = 0.0           # the adapters' input dropout probability (see --lora-dropout)
    sequence_parallel: bool = False
    tp_comm_overlap: bool = False
    comm_sms: str | None = None         # "KEY=N[,KEY=N...]"
    tp_overlap_config: str | None = None  # Transformer Engine ub_cfgs YAML
    # mode and inference shape
    mode: str = "train"
    logits: str = "all"
    batch_size: int | None = None
    prompt_len: int | None = None
    decode_len: int = 1
    decode_steps: int = 1
    prefill_chunk: int | None = None
    prefill_done: int = 0
    micro_batches: int = 1
    micro_batch_size: int = 1
    # ZeRO, recomputation
    zero: int = 0
    overlap_param_gather: bool = False
    defer_embedding_wgrad_compute: bool = False  # the LM head's wgrad in the pipeline drain (Megatron)
    wgrad_deferral_limit: int = 0       # head calls deferred at most (0: all)
    reshard_after_forward: bool | None = None  # None: on for --zero 3 training (FSDP2's and DeepSpeed's default)
    grad_sync_every_micro_batch: bool = False
    check_nan_in_grad: bool = False
    framework: str | None = None        # megatron | fsdp2 | deepspeed; None: implied by the flags
    loss_dtype: str = "fp32"            # fp32 | same: the precision the loss works on the logits in (memory)
    grad_buffer: str = "fp32"           # fp32 | same: Megatron/NeMo's gradient buffer dtype (memory)
    fp8_params: bool = False            # Megatron/NeMo: FP8 primary weights (memory)
    fp8_activation_input: bool = False  # Megatron/NeMo: the FFN activation's input kept in FP8 (memory)
    dp_shard: int | None = None         # FSDP2 HSDP: the shard group's size (memory)
    fsdp_prefetch: int = 1              # FSDP2: units prefetched (memory)
    norm_kernel: str = "fused"          # fused | composite: how the norms run (see --norm-kernel)
    activation_kernel: str = "fused"    # fused | eager: how a GeLU FFN's activation runs (see --activation-kernel)
    softmax_kernel: str = "fused"       # fused | eager: the unfused attention's scale and masks (see --softmax-kernel)
    attention_kernel: str | None = None  # fa2 | fa3 | cudnn (see --attention-kernel); None: by --framework
    rope: str | None = None             # none | eager | fused (see --rope); None: by --framework
    remat_policy: str | None = None     # MaxText's remat policy: minimal_flash (see --remat-policy)
    iota_embed: bool = False            # MaxText's use_iota_embed (see --iota-embed)
    inference_embedding: str = "vocab-parallel"  # vocab-parallel | replicated (see --inference-embedding)
    cp_rotate: str | None = None        # ring | allgather | alltoall (see --cp-rotate); None: by --framework
    cp_compile: bool = False            # PyTorch's CP under torch.compile (see --cp-compile)
    torch_compile: bool = False         # torchtitan's training.compile (see --torch-compile)
    cuda_graphs: bool = False           # per-layer CUDA graphs (see --cuda-graphs)
    fp8_recipe: str | None = None       # delayed | current | tensorwise FP8 scaling; None: the framework's
    attention_dtype: str = "same"       # same | fp8: the flash attention forward's operands (see --attention-dtype)
    fp8_attention_backward: str = "on"  # on | off: an FP8 attention's backward in FP8 (see --fp8-attention-backward)
    recompute: str | None = None        # None, "full" or "selective"
    # kernels and precision
    elementwise: bool = True
    inference_elementwise: bool = True  # on for inference as astra serve times its steps (issue 34)
    attention: str = "flash"
    causal: bool = True
    dropout: bool = True
    dtype: str = "bf16"
    gemm_dtype: str = "same"
    tflops: float = 312.0
    # the machine the step is generated for (a registered platform's name): its GPU's FP8 GEMM layouts
    platform: str | None = None
    gpu: str | None = None              # the GPU that replaces the platform's (astra run --gpu): a preset or YAML
    # output layout
    per_rank_files: bool = False
    # --summary: the device memory (decimal GB) the estimate is checked against
    hbm_gb: float | None = None

    # ------------------------------------------------------------------------------------------- constructors
    @classmethod
    def add_cli_args(cls, parser):
        """Add the spec's flags to ``parser`` (``astra workload llm``'s, or any other command's that generates an
        LLM step); their defaults are the dataclass's."""
        add_llm_flags(parser)
        parser.set_defaults(**{f.name: f.default for f in fields(cls)})
        return parser

    @classmethod
    def from_cli_args(cls, args) -> "LlmSpec":
        """The spec of a parsed namespace (a parser :meth:`add_cli_args` filled; missing dests keep the default)."""
        return cls(**{f.name: getattr(args, f.name, f.default) for f in fields(cls)})

    @classmethod
    def from_mapping(cls, mapping, where="llm") -> "LlmSpec":
        """The spec of ``{option: value}`` (keys: the command's option names, with dashes or underscores; values as
        on the command line or typed: ints, floats, booleans for flags, None for not given; ``recompute`` also
        True/False, ``comm_sms`` also a ``{key: SMs}`` mapping, ``moe_expert_load`` also a list of loads). Each
        value is checked by the command's own parser; errors are ConfigErrors naming ``where`` and the key."""
        from astra_sim.cliutil import option_argv, parse_or_raise

        if not isinstance(mapping, Mapping):
            raise ConfigError(f"{where}: expected a mapping of astra workload llm options, got "
                              f"{type(mapping).__name__}")
        names = {f.name for f in fields(cls)}
        parser = _parser()
        argv, seen = [], {}
        for key, value in mapping.items():
            dest = str(key).replace("-", "_")
            if dest not in names:
                raise ConfigError(f"{where}: unknown astra workload llm option {key!r}{_suggest(key, names)}")
            if dest in seen:
                raise ConfigError(f"{where}: {key!r} and {seen[dest]!r} are the same option")
            seen[dest] = key
            words = option_argv(parser, dest, _plain(dest, value), f"{where}: {key}")
            # FLAG=VALUE, so that a value starting with '-' is read as the value, not as an option
            argv += [f"{words[0]}={words[1]}"] if len(words) == 2 else words
        return cls.from_cli_args(parse_or_raise(parser, argv, where))

    @classmethod
    def from_argv(cls, argv, where="astra workload llm") -> "LlmSpec":
        """The spec of ``astra workload llm``'s command-line words (a registry's or a script's options, as a user
        writes them; no --summary/-o); what the parser refuses is a ConfigError naming ``where``."""
        from astra_sim.cliutil import parse_or_raise

        return cls.from_cli_args(parse_or_raise(_parser(), [str(word) for word in argv], where))

    def to_mapping(self) -> dict:
        """``{field: value}`` of every option (what :meth:`from_mapping` reads back)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes) -> "LlmSpec":
        """A copy with ``changes`` (field names), checked as :meth:`from_mapping` checks them. Giving ``model``
        drops the ``preset`` and the other way round (they are two ways to name the model). Only the changes are
        parsed (each option's check is its own; the other fields were checked when this spec was made): a serving
        run replaces its step's shape once per new batch shape, and parsing every option took 1.5 ms (issue 37)."""
        names = {f.name for f in fields(self)}
        for key in changes:
            if key not in names:
                raise ConfigError(f"LlmSpec.replace: unknown option {key!r}{_suggest(key, names)}")
        changed = dict(changes)
        for a, b in (("model", "preset"), ("preset", "model")):
            if changes.get(a) is not None and b not in changes:
                changed[b] = None
        checked = type(self).from_mapping(changed, where="LlmSpec.replace")
        return dataclass_replace(self, **{key: getattr(checked, key) for key in changed})

    def for_platform(self, platform, options=None) -> "LlmSpec":
        """The spec generated for ``platform`` (a registered platform's name: its GPU's kernels, e.g. Transformer
        Engine's FP8 transposes), as every command that runs the step there generates it, on the GPU a run with
        ``options`` (``astra run``'s, a mapping) computes on: an explicit ``--gpu`` replaces the platform's
        (:func:`.fp8.run_gpu`); unchanged when the spec names its own platform or ``platform`` is None."""
        if self.platform is not None or platform is None:
            return self
        return self.replace(platform=platform, gpu=run_gpu(platform, options))

    # ------------------------------------------------------------------------------------------------ resolve
    def resolve(self, on_warning=None) -> tuple[ModelDims, LlmConfig]:
        """``(dims, cfg)``: the model dimensions and the step's settings, checked against each other
        (:func:`check_config`). ``on_warning(line)`` gets what a Hugging Face config sets that the generator does
        not model (default: printed as ``astra: warning: ...``)."""
        if self.gpu is not None and self.platform is None:
            raise ConfigError(f"--gpu {self.gpu}: replaces a platform's GPU; give --platform too")
        base = None
        if self.model:
            from astra_sim.cliutil import warning

            from .hf import load_hf_config

            base, warnings, _ = load_hf_config(self.model)
            for line in warnings:
                (on_warning or warning)(line)
        dims = model_dims(self.preset, base=base, head_size=self.head_dim, window=self.sliding_window,
                          mtp_layers=self.mtp_layers, window_pattern=self.window_pattern, layers=self.layers,
                          hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads, ffn_hidden=self.ffn_hidden,
                          vocab=self.vocab, seq_len=self.seq_len, gated=self.gated, experts=self.experts,
                          top_k=self.top_k, moe_ffn=self.moe_ffn, shared_experts=self.shared_experts,
                          moe_dense_layers=self.moe_dense_layers, moe_layer_freq=self.moe_layer_freq)
        if self.tie_embeddings is not None:  # (--tie-embeddings / --no-tie-embeddings: the model's default overridden)
            dims = dataclass_replace(dims, tied_embeddings=self.tie_embeddings)
        mbs = self.micro_batch_size
        if self.batch_size is not None:
            if self.mode == "train":
                raise ConfigError("--batch-size is for --mode prefill/decode/mixed (training uses "
                                  "--micro-batch-size)")
            if self.batch_size % self.micro_batches:
                raise ConfigError(f"--batch-size {self.batch_size} is not divisible by --micro-batches "
                                  f"{self.micro_batches}")
            mbs = self.batch_size // self.micro_batches
        comm_sms, margins = {}, {}
        if self.tp_overlap_config:
            if not self.tp_comm_overlap:
                raise ConfigError("--tp-overlap-config needs --tp-comm-overlap (it sets the userbuffers overlaps' "
                                  "SMs)")
            sms, margins = load_tp_overlap_sms(self.tp_overlap_config, with_margins=True)
            comm_sms.update(sms)
        comm_sms.update(parse_comm_sms(self.comm_sms))
        margins = {name: comm_sms[name] for name in margins if comm_sms[name]}  # (--comm-sms overrides the file)
        load = ()
        if self.moe_expert_load is not None:
            if not dims.moe:
                raise ConfigError("--moe-expert-load needs a mixture-of-experts model (--experts)")
            load = parse_expert_load(self.moe_expert_load, dims.experts, dims.moe_layers)
        lora_targets = ()
        if self.lora_targets is not None:
            lora_targets = parse_lora_targets(self.lora_targets)
        elif self.lora_rank:
            lora_targets = tuple(LORA_TARGETS)
        reshard = self.reshard_after_forward
        if reshard is None:  # FSDP2's FULL_SHARD and DeepSpeed ZeRO-3 free gathered parameters after forward
            reshard = self.zero == 3 and self.mode == "train"
        cfg = LlmConfig(tp=self.tp, pp=self.pp, dp=self.dp, micro_batches=self.micro_batches,
                        micro_batch_size=mbs, sequence_parallel=self.sequence_parallel, zero=self.zero,
                        recompute=self.recompute == "full", recompute_selective=self.recompute == "selective",
                        dtype=self.dtype, tflops=self.tflops, ep=self.ep, mode=self.mode,
                        prompt_len=self.prompt_len, decode_len=self.decode_len, decode_steps=self.decode_steps,
                        prefill_chunk=self.prefill_chunk or 0, prefill_done=self.prefill_done, cp=self.cp,
                        cp_rotate=self.cp_rotate, cp_compile=self.cp_compile, torch_compile=self.torch_compile,
                        virtual_stages=self.virtual_stages,
                        pipeline_embedding_layer=self.pipeline_embedding_layer,
                        pipeline_loss_layer=self.pipeline_loss_layer, lora_rank=self.lora_rank or 0,
                        lora_targets=lora_targets, lora_dropout=self.lora_dropout, elementwise=self.elementwise,
                        attention=self.attention, causal=self.causal, dropout=self.dropout,
                        gemm_dtype=self.gemm_dtype, inference_elementwise=self.inference_elementwise,
                        overlap_param_gather=self.overlap_param_gather, tp_comm_overlap=self.tp_comm_overlap,
                        defer_embedding_wgrad=self.defer_embedding_wgrad_compute,
                        wgrad_deferral_limit=self.wgrad_deferral_limit,
                        reshard_after_forward=reshard, framework=self.framework, loss_dtype=self.loss_dtype,
                        grad_buffer=self.grad_buffer, fp8_params=self.fp8_params, dp_shard=self.dp_shard or 0,
                        fp8_activation_input=self.fp8_activation_input,
                        fsdp_prefetch=self.fsdp_prefetch,
                        norm_kernel=self.norm_kernel, attention_kernel=self.attention_kernel, rope=self.rope,
                        remat_policy=self.remat_policy, iota_embed=self.iota_embed,
                        inference_embedding=self.inference_embedding,
                        activation_kernel=self.activation_kernel, softmax_kernel=self.softmax_kernel,
                        cuda_graphs=self.cuda_graphs, fp8_recipe=self.fp8_recipe,
                        fp8_transpose=fp8_transpose_for(self.platform, self.gpu),
                        attention_dtype=self.attention_dtype,
                        fp8_attention_backward=self.fp8_attention_backward == "on",
                        grad_sync_every_micro_batch=self.grad_sync_every_micro_batch,
                        check_nan_in_grad=self.check_nan_in_grad,
                        moe_capacity_factor=self.moe_capacity_factor,
                        moe_pad_to_capacity=self.moe_pad_to_capacity, moe_imbalance=self.moe_imbalance,
                        moe_expert_load=load, logits=self.logits, pp_scatter_gather=self.pp_scatter_gather,
                        moe_dispatcher=self.moe_dispatcher, moe_grouped_gemm=self.moe_grouped_gemm,
                        bias_activation_fusion=self.bias_activation_fusion,
                        bias_swiglu_fusion=self.bias_swiglu_fusion,
                        bias_dropout_fusion=self.bias_dropout_fusion, te_op_fuser=self.te_op_fuser,
                        async_tp_allreduce=self.async_tensor_model_parallel_allreduce,
                        make_vocab_size_divisible_by=self.make_vocab_size_divisible_by,
                        moe_router_dtype=self.moe_router_dtype, moe_force_load_balancing=self.moe_force_load_balancing,
                        recompute_modules=(() if self.recompute_modules is None
                                           else parse_recompute_modules(self.recompute_modules)),
                        comm_sms=tuple(sorted(comm_sms.items())), sm_margins=tuple(sorted(margins.items())))
        check_config(dims, cfg)
        return dims, cfg


# ---------------------------------------------------------------------------------------------- public calls
def _spec_of(spec) -> LlmSpec:
    if isinstance(spec, LlmSpec):
        return spec
    if isinstance(spec, Mapping):
        return LlmSpec.from_mapping(spec)
    raise ConfigError(f"expected an LlmSpec or a mapping of astra workload llm options, got {type(spec).__name__}")


def generate_llm_workload(spec, prefix, per_rank_files=None, *, on_warning=None, in_memory=False) -> dict:
    """Write the workload ``astra workload llm`` writes for ``spec`` (an :class:`LlmSpec` or a mapping of its
    options) under ``prefix``: byte for byte the command's files. ``per_rank_files`` (None: the spec's) writes
    ``PREFIX.<rank>.et`` for every rank instead of the compact workload (``PREFIX.workload.json`` plus one trace
    per class of symmetric ranks). Returns the summary dict: ``npus``, ``nodes_per_stage``, ``groups``,
    ``parameters``, ``activated_parameters`` (matmul weights, per TP rank), ``flops``, ``classes``, ``steps``,
    ``memory`` (a :class:`~.memory.MemoryEstimate` per stage) and ``peak_memory_bytes``.

    ``in_memory=True`` (the compact workload only), for a run in this process: the class traces are held as the
    nodes a run reads instead of being encoded and parsed back; their files hold only their GlobalMetadata until
    something other than the run needs them (:func:`astra_workload_compact.ensure_written` writes them out, byte
    for byte the files above). The run's reports are the same to the ns."""
    from .generate import generate_llm

    spec = _spec_of(spec)
    dims, cfg = spec.resolve(on_warning)
    per_rank = spec.per_rank_files if per_rank_files is None else bool(per_rank_files)
    if in_memory and per_rank:
        raise ConfigError("generate_llm_workload: in_memory=True holds a compact workload; per-rank files are "
                          "written as files")
    summary = generate_llm(dims, cfg, prefix, per_rank_files=per_rank, model_name=spec.model or spec.preset,
                           in_memory=bool(in_memory))
    summary["steps"] = cfg.steps
    return summary


def llm_summary(spec, *, on_warning=None) -> dict:
    """``astra workload llm --summary --json``'s numbers for ``spec`` (an :class:`LlmSpec` or a mapping): the
    model's parameters (total, active), FLOPs and KV-cache bytes per token and the step's peak memory estimate,
    without writing traces."""
    from .summary import model_summary

    spec = _spec_of(spec)
    hbm = None if spec.hbm_gb is None else int(spec.hbm_gb * 2**30)  # a datasheet's GB of HBM are GiB
    return model_summary(*spec.resolve(on_warning), hbm_bytes=hbm)


# --------------------------------------------------------------------------------------------------- shared flags
# --------------------------------------------------------------------------------------------------- helpers
@functools.lru_cache(maxsize=None)
def _parser():
    """The spec's own parser (the command's flags without --summary/-o), built once, for :meth:`from_mapping`."""
    return LlmSpec.add_cli_args(argparse.ArgumentParser(prog="astra workload llm", add_help=False))


def _suggest(key, names):
    """The hint, spelt as on the command line (dashes)."""
    from astra_sim.cliutil import did_you_mean

    return did_you_mean(str(key).replace("_", "-"), [n.replace("_", "-") for n in names])


def _plain(dest, value):
    """A typed value as the command line would give it (the few options whose CLI form is a string)."""
    if dest == "recompute" and isinstance(value, bool):
        return "full" if value else None
    if dest in ("lora_targets", "recompute_modules") and isinstance(value, (list, tuple)):
        return ",".join(str(x) for x in value)
    if dest == "comm_sms" and isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if (dest == "moe_expert_load" and isinstance(value, (list, tuple)) and value
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)):
        return ",".join(str(x) for x in value)
    return value
