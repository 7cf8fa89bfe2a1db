"""FP8 GEMMs as Transformer Engine runs them: E4M3/E5M2 operand types, the casts and transposes it adds
around the linear layers, and the amax reductions and scale updates at the end of each FP8 region; torchao's
Float8Linear casts in an FSDP2 (torchtitan) step (``--fp8-recipe tensorwise``); and the quantization of a
block-scaled GEMM's input (``--gemm-dtype fp4 | mxfp8 | mxfp6 | mxfp4``, :mod:`.blockscale`)."""

from __future__ import annotations

import re

from astra_sim.chakra import types as T

from .config import implied_framework
from .layout import _amax_reduction


SCALED_MM = "aten::_scaled_mm"  # FP8 GEMM (Transformer Engine style): fp8 operands, per-tensor scales, bf16 output


FP8_FWD, FP8_GRAD = "Tensor(c10::Float8_e4m3fn)", "Tensor(c10::Float8_e5m2)"


#: Transformer Engine's FP8 bookkeeping kernels (``--gemm-dtype fp8`` with element-wise nodes): not ATen ops, so
#: the gpu model times them from ``tensor_size`` (memory-bound)
TE_CAST_TRANSPOSE = "transformer_engine::cast_transpose"


TE_FP8_TRANSPOSE = "transformer_engine::fp8_transpose"


TE_AMAX_UPDATE = "transformer_engine::amax_and_scale_update"


#: the kernel quantizing a block-scaled GEMM's input (Transformer Engine's MXFP8/NVFP4 quantize): not an ATen op,
#: timed from ``tensor_size`` (memory-bound)
TE_QUANTIZE = "transformer_engine::quantize"


#: torchao's dynamic tensorwise cast to float8 (``--fp8-recipe tensorwise``, :attr:`Fp8Ops.fp8_tensorwise`): under
#: torch.compile an Inductor kernel, not an ATen op, so the gpu model times it from ``tensor_size`` (memory-bound)
TORCHAO_CAST = "torchao::float8_cast"


#: a torchao Float8Linear's forward GEMM whose weight it casts (``fwd.l<i>.mb<k>.<name>`` or ``recompute....``, the
#: whole GEMM or the first chunk of a TP-overlapped one); op-level SAC's recomputed wk / wo / w3 are not matched
_TORCHAO_FORWARD = re.compile(r"^(fwd|recompute)\.l\d+\.mb\d+\.(qkv|proj|fc1|fc2)(\.c0)?$")


#: TE's DelayedScaling amax history length (its default, and MLPerf v3.1 GPT-3's FP8_AMAX_HISTORY)
FP8_AMAX_HISTORY = 1024


#: a training forward GEMM of the first micro-batch (``fwd.l<i>.mb0.<name>``, ``fwd.mtp<k>.mb0.<name>``), not a later
#: chunk of a TP-overlapped one (``.c1`` ...): where Transformer Engine quantizes a linear layer's weight
_FIRST_FORWARD = re.compile(r"^fwd\.[^.]+\.mb0\.(?!.*\.c[1-9]\d*$)")


#: Transformer Engine's rule for which GPUs' FP8 GEMMs take operands in any layout (no FP8 transpose needed): TE v2.7
#: (fedd9ddc) ``transformer_engine/pytorch/utils.py`` ``is_non_tn_fp8_gemm_supported``: ``(10, 0) <= device_capability
#: < (12, 0) or device_capability >= (13, 0)`` (the same in ``common/transformer_engine.cpp``
#: ``nvte_is_non_tn_fp8_gemm_supported``); Hopper (9.0) and Ada (8.9) take only the TN layout
def non_tn_fp8_gemm(capability) -> bool:
    """TE's ``is_non_tn_fp8_gemm_supported`` for a GPU of compute capability ``(major, minor)``."""
    capability = tuple(capability)
    return (10, 0) <= capability < (12, 0) or capability >= (13, 0)


def run_gpu(platform, options) -> str | None:
    """The GPU a run with ``options`` (``astra run``'s, as a mapping: a door's run words) uses on ``platform`` where
    it is not the platform's own (an explicit ``--gpu``: the platform's ``gpu_of``), else None; None also without a
    platform or for a platform whose device cannot be replaced (no ``gpu_of``: a TPU slice)."""
    if platform is None or not options:
        return None
    from astra_sim.platforms import get_platform

    machine = get_platform(platform)
    gpu_of = getattr(machine, "gpu_of", None)
    if gpu_of is None:
        return None
    gpu = gpu_of(options)
    return None if gpu == machine.gpu else gpu


def _machine(platform, gpu):
    """``platform`` (a name or object) with its GPU replaced by ``gpu`` where given (its ``variant``)."""
    from astra_sim.platforms import get_platform

    machine = get_platform(platform)
    return machine if gpu is None else machine.variant(gpu=gpu)


def fp8_transpose_for(platform, gpu=None) -> bool | None:
    """Whether Transformer Engine writes FP8 transposes on the GPU of ``platform`` (a registered platform's name or
    object, :func:`astra_sim.platforms.get_platform`), or on ``gpu`` where a run replaces the platform's with it
    (``astra run --gpu``: a preset name or GPU YAML), from the compute capability its ``describe()`` states:
    True where its FP8 GEMMs take only the TN layout (Hopper), False where they take any (Blackwell: TE's quantizers
    then write no transpose, ``csrc/quantizer.cpp`` ``Float8CurrentScalingQuantizer::create_tensor``: ``with_transpose
    = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``); None when there is no platform or it states no
    compute capability (AMD: ROCm's TE was not checked), which keeps the generator's GPU-agnostic step: a transpose
    with every cast, none for FP8 weights (see :meth:`Fp8Ops.weight_quantize`)."""
    if platform is None:
        return None
    capability = _machine(platform, gpu).describe().get("compute_capability")
    return None if not capability else not non_tn_fp8_gemm(capability)


def fp8_layout_mismatch(transposes, platform, gpu=None):
    """The warning for a step whose FP8 casts were written ``transposes`` (with TE's transposes or without: the
    trace's ``te_fp8_transposes``) run on ``platform``, or on ``gpu`` where the run replaces the platform's GPU with
    it (the run's resolved ``gpu`` option), whose GPU wants the other layout; None when they agree or the GPU states
    no compute capability."""
    from astra_sim.platforms import get_platform

    name = getattr(platform, "name", platform)
    own = getattr(get_platform(platform), "gpu", None)
    if own is None or gpu == own:
        gpu = None  # the platform's own GPU, or a platform whose device a --gpu does not replace (a TPU slice)
    wanted = fp8_transpose_for(platform, gpu)
    if wanted is None or wanted == bool(transposes):
        return None
    written, kind = ("with", "Blackwell: its FP8 GEMMs take any layout") if transposes else ("without", "Hopper")
    if gpu is None:
        return (f"the step's FP8 casts were generated {written} Transformer Engine's FP8 transposes, but --platform "
                f"{name}'s GPU is {kind}; generate it for this platform (astra workload llm --platform {name}) "
                "for the step Transformer Engine runs there")
    return (f"the step's FP8 casts were generated {written} Transformer Engine's FP8 transposes, but the run's GPU, "
            f"--gpu {gpu} (instead of --platform {name}'s), is {kind}; generate it for that GPU (astra workload llm "
            f"--platform {name} --gpu {gpu}) for the step Transformer Engine runs there")


#: FP8 tensors with an amax per linear layer: input, weight, output in forward; grad output, grad input in backward
FP8_AMAX_FWD, FP8_AMAX_BWD = 3, 2


class Fp8Ops:
    """Transformer Engine's FP8 bookkeeping nodes (a stage-builder mixin)."""

    @property
    def te_fp8(self):
        """Transformer Engine's FP8 casts and transposes are emitted: FP8 linear layers, element-wise nodes on."""
        return self.cfg.gemm_dtype == "fp8" and self.cfg.ew

    @property
    def fp8_tensorwise(self):
        """``--fp8-recipe tensorwise`` (an FSDP2 training step's default): torchao's ``Float8Linear`` with dynamic
        tensorwise scaling, as torchtitan swaps it in for every linear but the output head (pytorch/torchtitan 9dec370
        ``torchtitan/float8.py``, ``module_filter_fn=lambda mod, fqn: fqn != "output"``). Per linear, pytorch/ao
        eab345c ``torchao/float8/float8_linear.py`` ``Float8Linear.forward`` casts the input
        (``hp_tensor_to_float8_dynamic``: ``tensor_to_scale`` = an amax over it, then the scaled cast) and the weight
        (``get_weight_scale`` then ``cast_weight_to_float8_t``) at every forward, and ``NoopFwToFloat8BwDynamic``
        casts the output gradient to E5M2 at every backward; no amax history (torchtitan syncs amaxes only for
        delayed scaling). Their bytes are torchao's own roofline for the compiled step (``torchao/float8/
        roofline_utils.py`` ``get_tensor_memory_traffic_bytes`` "dynamic", used by ``get_float8_mem_sympy``): each
        cast reads ``--dtype`` once and writes FP8 twice, row- and column-major, so the backward's GEMMs need no
        transpose (``gi_fp8_weight_mem = 0``, ``gw_fp8_input_t_mem = 0``); an input's and an output gradient's amax
        is fused into the kernel that writes it (``fuse_with_prev=True``), a weight's is a read of its own
        (``fuse_with_prev=False``)."""
        return self.te_fp8 and self.cfg.fp8_recipe == "tensorwise"

    @property
    def fp8_current(self):
        """``--fp8-recipe current``: Transformer Engine's Float8CurrentScaling (each tensor scaled by its own amax)."""
        return self.te_fp8 and self.cfg.fp8_recipe == "current"

    @property
    def fp8_transposes(self):
        """TE writes FP8 transposes: the step's GPU takes only TN FP8 GEMMs (``cfg.fp8_transpose`` True), or it is
        not known (None: Hopper's layout, the generator's behaviour without a platform). False on Blackwell."""
        return self.cfg.fp8_transpose is not False

    @property
    def fp8_mlp_casts_apart(self):
        """Megatron-Core's dense MLP with Transformer Engine's modules (the TE layer spec's
        ``TELayerNormColumnParallelLinear`` FC1 and ``TERowParallelLinear`` FC2 around Megatron's own activation:
        Megatron-LM core_r0.11.0 ``transformer/mlp.py`` ``MLP.forward``, ``bias_swiglu_impl`` / ``bias_gelu_impl``
        return a ``--dtype`` tensor). So FC2 casts its input (TE v2.2 ``module/linear.py`` ``_Linear.forward``:
        ``inputmat = input_quantizer(inputmat)``) and FC1 its output gradient in backward
        (``grad_output_preprocess`` with ``ctx.grad_output_quantizer``): one TE cast each, as the projection's.
        Not with ``--te-op-fuser`` (TE's ``ops`` activation takes the next op's quantizer, v2.7
        ``ops/basic/activation.py``: ``self._activation_forward_impl(x, next_op_input_quantizer)``, and the
        previous op's in backward), nor outside a Megatron training step with per-tensor FP8."""
        cfg = self.cfg
        if self.fp8_tensorwise:  # (torchao: FC2 casts its input, FC1 its output gradient, as every Float8Linear)
            return True
        return (self.te_fp8 and not cfg.te_op_fuser and not cfg.inference
                and implied_framework(cfg) == "megatron")

    @property
    def te_norm_linear(self):
        """The layers' QKV and dense FC1 are Transformer Engine's ``LayerNormLinear`` (Megatron-Core's TE layer spec,
        ``TELayerNormColumnParallelLinear``; TE's ``ops`` RMSNorm / LayerNorm with ``--te-op-fuser``): the norm
        before them is TE's, and TE hands it the linear's input quantizer. A Megatron training step with the fused
        norm kernel (no other framework's norm was read)."""
        cfg = self.cfg
        return implied_framework(cfg) == "megatron" and not cfg.inference and cfg.norm_kernel != "composite"

    @property
    def norm_writes_fp8(self):
        """Delayed scaling (per-tensor, a ``Float8Quantizer``): TE's norm kernel writes the linear's FP8 input itself,
        1 B an element, no cast after it. ``LayerNormLinear`` passes the input quantizer to the norm unless it returns
        the norm's output (TE v2.2 ``module/layernorm_linear.py``: ``with_quantized_norm = fp8 and not
        return_layernorm_output and not return_layernorm_output_gathered``; ``apply_normalization(..., input_quantizer
        if with_quantized_norm else None, ...)``; the same at v2.8), with sequence parallelism too (the FP8 rows
        are all-gathered); ``layernorm_fwd`` / ``rmsnorm_fwd`` then run the fused kernel for it: v2.2-v2.7
        ``csrc/extensions/normalization.cpp`` ``else if (IsFloat8Quantizers(...)) { // Always used fused kernel for
        FP8 delayed scaling  force_unfused_kernel = false; }``, v2.8 ``Impl::FULLY_FUSED`` (v2.0 / v2.1: the
        quantizer's tensor is the kernel's output). Not under current scaling (v2.2-v2.6: the norm writes
        ``--dtype``, then ``nvte_compute_amax`` and the cast read it twice; v2.7 / v2.8: the amax is fused into the
        norm, ``create_hp_tensor_with_amax`` / ``Impl::FUSED_NORM_AMAX_FP8``, and ``quantize_with_amax`` reads it once:
        :meth:`fp8_norm_cast`), nor MXFP8 (unfused unless ``NVTE_NORM_FWD_USE_CUDNN`` on whole 128 x 128 tiles: the
        block path's own quantize, :meth:`block_quantize`), nor NVFP4 (v2.8: unfused with the forward input's
        Hadamard transform, the recipe's default)."""
        return self.te_fp8 and not self.fp8_current and self.te_norm_linear

    def fp8_cast(self, label, rows, cols, deps=()):
        """TE's fused cast + transpose of a ``rows x cols`` GEMM operand to FP8 before an FP8 linear layer:
        read once in ``--dtype``, written as FP8 and as its FP8 transpose (Hopper's FP8 GEMMs take only the
        TN layout, so the weight-gradient GEMM needs the transposed copy). Under current scaling the operand's
        amax is read first: one more read. On a GPU whose FP8 GEMMs take any layout (``cfg.fp8_transpose`` False:
        Blackwell) TE writes the FP8 copy only (a quantize, no transpose: :func:`fp8_transpose_for`).
        Memory-bound."""
        if not self.te_fp8:
            return None
        if self.fp8_tensorwise:
            return self._torchao_cast(label, rows, cols, deps)
        return self._cast_to_fp8(label, rows, cols, 2 if self.fp8_current else 1, deps)

    def _torchao_cast(self, label, rows, cols, deps):
        """torchao's dynamic cast of a linear's ``rows x cols`` input or output gradient (:attr:`fp8_tensorwise`):
        read once in ``--dtype``, written as FP8 row- and column-major (roofline_utils "dynamic" kernel 3:
        ``BYTES_PER_EL_BF16 * numel + 2 * BYTES_PER_EL_FLOAT8 * numel``), its amax fused into the kernel before it
        under torch.compile (``fuse_with_prev=True``). ASSUMPTION: a step with eager PyTorch's composite norm
        (``--norm-kernel composite``: torchtitan without torch.compile, whose rows have no Float8) reads it once
        more for the amax (kernel 1, ``fuse_with_prev=False``). ASSUMPTION: torch.compile's extra FP8 read of the
        two-layout cast (pytorch/pytorch#130015, roofline_utils ``model_torch_compile_limitations``, which its
        benchmark computes as a worst case beside the case without it) is not added. Memory-bound."""
        reads = 2 if self.cfg.norm_kernel == "composite" else 1
        nbytes = rows * cols * (reads * self.nbytes + 2)
        return self._te(TORCHAO_CAST, label + ".fp8_cast", rows, cols, self.ttype, nbytes, deps)

    def _cast_to_fp8(self, label, rows, cols, reads, deps):
        """TE's cast of a ``rows x cols`` ``--dtype`` tensor read ``reads`` times: written as FP8 and its FP8
        transpose (``transformer_engine::cast_transpose``), or as the FP8 copy alone where the GPU's FP8 GEMMs take
        any layout (``transformer_engine::quantize``, Blackwell)."""
        op, written = (TE_CAST_TRANSPOSE, 2) if self.fp8_transposes else (TE_QUANTIZE, 1)
        return self._te(op, label + ".fp8_cast", rows, cols, self.ttype, rows * cols * (reads * self.nbytes + written),
                        deps)

    def fp8_norm_cast(self, label, rows, cols, deps=()):
        """Current scaling only: a LayerNorm's or GeLU's output cannot be cast inside that kernel (its scale needs
        its own amax), so it is written in ``--dtype``, then read for its amax and read again to be written as FP8
        and as its transpose (which the backward then reuses: no :meth:`fp8_transpose`). Transformer Engine's own
        norm (:attr:`te_norm_linear`) computes the amax as it writes (TE v2.7 ``csrc/extensions/normalization.cpp``
        ``create_hp_tensor_with_amax`` then ``quantize_with_amax``; v2.8 ``Impl::FUSED_NORM_AMAX_FP8``; ASSUMPTION: a
        current-scaling step runs TE 2.7 or later, as the registry's do, NeMo 25.11 and MLPerf v5.1): read once.
        Under delayed scaling the kernel writes FP8 itself and nothing is emitted (:attr:`norm_writes_fp8`).
        torchao's tensorwise scaling: the linear's own cast (:meth:`_torchao_cast`)."""
        if self.fp8_tensorwise:
            return self._torchao_cast(label, rows, cols, deps)
        if not self.fp8_current:
            return None
        return self._cast_to_fp8(label, rows, cols, 1 if self.te_norm_linear else 2, deps)

    def fp8_act_cast(self, label, rows, cols, deps=()):
        """Current scaling only, where Transformer Engine's activation takes the GEMM's quantizer (TE's fused MLP,
        ``--te-op-fuser``): the activation (or its backward) writes ``--dtype`` with its amax fused in, then one
        cast reads it once (TE v2.7 ``csrc/extensions/activation.cpp`` ``activation_helper`` /
        ``dactivation_helper``: ``create_hp_tensor_with_amax``, then ``quantize_with_amax``). Under delayed
        scaling the activation writes FP8 itself and nothing is emitted."""
        if not self.fp8_current:
            return None
        return self._cast_to_fp8(label, rows, cols, 1, deps)

    def fp8_transpose(self, label, rows, cols, deps=()):
        """TE's transpose of an FP8 operand that was cast without one (a LayerNorm or GeLU output, cast inside
        that kernel under delayed scaling), for the weight-gradient GEMM: read and write ``rows x cols`` bytes.
        Current scaling made the transpose with the cast (:meth:`fp8_norm_cast`): nothing. Nothing on a GPU whose FP8
        GEMMs take any layout (Blackwell: the wgrad GEMM reads the FP8 copy itself)."""
        if not self.te_fp8 or self.fp8_current or self.fp8_tensorwise or not self.fp8_transposes:
            return None  # (tensorwise: the cast wrote the column-major copy, :meth:`_torchao_cast`)
        return self._te(TE_FP8_TRANSPOSE, label + ".fp8_transpose", rows, cols, FP8_FWD, 2 * rows * cols, deps)

    def block_quantize(self, fmt, label, rows, cols, deps=()):
        """The quantization of a block-scaled GEMM's ``rows x cols`` activation input (blocks along ``cols``, the
        GEMM's K): read in ``--dtype``, written in ``fmt`` with one scale byte per block, once for inference and
        twice in training (row-wise for this GEMM, column-wise for the weight-gradient GEMM that reads it again, as
        ``fp8_cast`` writes a transpose). NVFP4's per-tensor FP32 scale needs the tensor's amax first: one more
        read. The block scales need no amax history or reduction (each block's own amax sets its scale)."""
        copies = 1 if self.cfg.inference else 2
        reads = 2 if fmt.name == "nvfp4" else 1
        nbytes = reads * rows * cols * self.nbytes + copies * fmt.nbytes(rows, cols)
        return self._te(TE_QUANTIZE, label + ".quantize", rows, cols, self.ttype, nbytes, deps)

    def weight_quantize(self, fmt, label, rows, cols, deps=()):
        """The quantization of a linear layer's ``rows x cols`` weight (``cols``: the GEMM's K) that is held in
        ``--dtype``, once a step: Megatron-Core tells Transformer Engine which micro-batch is the first
        (``TELinear.forward`` passes ``is_first_microbatch``, ``forward_step`` calls ``set_is_first_microbatch``),
        and TE quantizes the weight into its cached workspace on that one and reuses it on the others
        (``Linear``: ``get_weight_workspace(..., cache_name="weight", update_workspace=is_first_microbatch)``),
        row-wise for the forward and column-wise for the input-gradient GEMM. So: before the first micro-batch's
        forward GEMM (``label`` = ``fwd.<unit>.mb0.<name>``), in a Megatron training step, with element-wise nodes
        on. An FSDP2 step under ``--fp8-recipe tensorwise`` casts each weight at every forward instead
        (:meth:`_torchao_weight_cast`); under TE's recipes it gets none. ``fmt`` None: an FP8 weight cast as :meth:`fp8_cast` casts an input
        (under current scaling its own amax first), nothing with ``--fp8-params`` (the weights are FP8 already);
        a block format as :meth:`block_quantize` quantizes an input (NVFP4: the amax first), nothing for MXFP8
        with ``--fp8-params`` (held in MXFP8). Memory-bound.

        With ``--fp8-params`` on a GPU known to take only TN FP8 GEMMs (``cfg.fp8_transpose`` True: Hopper), the FP8
        weight's transpose instead, once a step: the optimizer's cast of the master weights resets it (TE v2.7
        ``tensor/utils.py`` ``cast_master_weights_to_fp8``: ``model_weight._reset_caches()``, which sets
        ``_transpose_invalid``), and the first forward remakes it (``module/linear.py``: ``if inp.requires_grad:
        weightmat.update_usage(columnwise_usage=True)``; ``Float8TensorBase.update_usage`` ->
        ``_create_transpose()``, kept valid until the next reset): read and write 1 B an element. Not for a LoRA
        step's frozen base (no optimizer step resets it), nor on Blackwell (``update_usage`` keeps no transpose
        there), nor without a platform (None: as before the generator knew its GPU)."""
        cfg = self.cfg
        if fmt is None and self.fp8_tensorwise:
            return self._torchao_weight_cast(label, rows, cols, deps)
        if cfg.inference or not cfg.ew or implied_framework(cfg) != "megatron" or not _FIRST_FORWARD.match(label):
            return None
        label = label.removesuffix(".c0")  # (a TP-overlapped GEMM's weight: once, whole)
        if fmt is None:
            if cfg.fp8_params:
                if cfg.fp8_transpose is not True or cfg.lora_rank or not self.te_fp8:
                    return None
                return self._te(TE_FP8_TRANSPOSE, label + ".weight.fp8_transpose", rows, cols, FP8_FWD,
                                2 * rows * cols, deps)
            return self.fp8_cast(label + ".weight", rows, cols, deps)
        if cfg.fp8_params and fmt.name == "mxfp8":
            return None
        return self.block_quantize(fmt, label + ".weight", rows, cols, deps)

    def _torchao_weight_cast(self, label, rows, cols, deps):
        """torchao's cast of a Float8Linear's ``rows x cols`` weight (:attr:`fp8_tensorwise`) at every forward of
        every micro-batch, the full activation checkpointing's recomputed forward too (``Float8Linear.forward`` keeps
        no cast weight between calls): the amax read, then the scaled cast read again and written row- and
        column-major (roofline_utils "dynamic", ``fuse_with_prev=False``: ``2 * numel`` + ``2 * numel + 2 *
        numel`` bytes for bf16). After FSDP2's all-gather in ``--dtype`` (torchtitan's
        ``enable_fsdp_float8_all_gather`` off: the registry's rows do not state it on). ASSUMPTION: a TP-sharded
        weight's amax all-reduce (a DTensor's, a few bytes) is not emitted. Memory-bound."""
        if not _TORCHAO_FORWARD.match(label):
            return None
        label = label.removesuffix(".c0")  # (an AsyncTP-chunked GEMM's weight: once, whole)
        return self._te(TORCHAO_CAST, label + ".weight.fp8_cast", rows, cols, self.ttype,
                        rows * cols * (2 * self.nbytes + 2), deps)

    def _te(self, op, label, rows, cols, ttype, nbytes, deps):
        return self._memory_node(op, label, nbytes, f"[[{rows}, {cols}]]", f"[{ttype!r}]", deps)

    def fp8_amax(self, label, layers, backward):
        """The end of an FP8 region (one model chunk's forward or backward): TE all-reduces (max) the amaxes of
        its FP8 tensors over the amax group, on the compute stream, then updates the amax histories and scales
        (one kernel over ``FP8_AMAX_HISTORY`` x tensors fp32 values)."""
        if self.cfg.gemm_dtype != "fp8" or self.cfg.inference or self.cfg.fp8_recipe in ("current", "tensorwise"):
            return  # (current and tensorwise scaling keep no amax history: each cast read its tensor's own amax)
        linears = 4 * layers  # QKV, projection, FC1, FC2 (MoE experts: counted as one FC1/FC2 pair)
        tensors = linears * (FP8_AMAX_BWD if backward else FP8_AMAX_FWD)
        if _amax_reduction(self.cfg):
            self.coll(f"amax.{label}", T.ALL_REDUCE, 4 * tensors, "amax")
        if self.cfg.ew:
            self._te(TE_AMAX_UPDATE, f"{label}.amax_update", FP8_AMAX_HISTORY, tensors, "Tensor(float)",
                     2 * 4 * FP8_AMAX_HISTORY * tensors, ())
