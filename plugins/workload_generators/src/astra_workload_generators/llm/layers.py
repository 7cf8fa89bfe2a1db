"""The transformer layer: its attention block, dense FFN, residual stream (its norms: :mod:`.norms`), and its
tensor-parallel communication (all-reduces, sequence-parallel all-gathers / reduce-scatters, Transformer Engine's
overlapped rings), forward and backward."""

from __future__ import annotations

from astra_sim.chakra import types as T

from .config import implied_framework
from .fp8 import FP8_FWD
from .norms import NormOps
from .overlap import _te_overlap


TP_TAG_BASE = 1 << 28  # comm_tag of --tp-comm-overlap ring messages: TP_TAG_BASE + a per-stage counter


class LayerOps(NormOps):
    """One transformer layer, forward and backward (a stage-builder mixin; its norms: :class:`.norms.NormOps`)."""

    # -- the LM head's sequence-parallel communication --------------------------------------------------------
    def head_gather(self, mb, deps=(), site=None):
        """Sequence parallelism (TP > 1): the LM head is a column-parallel linear (vocab split over TP) whose input
        is the final norm's ``s/TP`` rows, so it all-gathers them over TP (all the rank's ``n x h`` rows) before its
        GEMM, on the compute chain. Megatron-Core's ``output_layer`` is its own ``tensor_parallel.
        ColumnParallelLinear`` (``sequence_parallel = config.sequence_parallel``, off at TP 1), whose
        ``LinearWithGradAccumulationAndAsyncCommunication.forward`` runs ``dist_all_gather_func`` synchronously
        before ``torch.matmul`` (NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/models/gpt/gpt_model.py``,
        ``megatron/core/tensor_parallel/layers.py``); it is not a Transformer Engine module (``tp_comm_buffer_name``
        "Not used"), so ``--tp-comm-overlap``'s userbuffers never reach it: an NCCL all-gather in ``--dtype``
        (no FP8 buffer) either way. torchtitan: ``"norm": SequenceParallel()`` then ``"output": ColwiseParallel(
        input_layouts=Shard(1), ...)`` redistributes the norm's shard to ``Replicate`` (pytorch/torchtitan 9dec370
        ``torchtitan/parallelisms/parallelize_llama.py``), the same all-gather; the output layer is neither
        compiled (``apply_compile`` wraps the blocks only) nor Float8, so async TP does not reach it either.
        ``None`` without sequence parallelism or at TP 1. ``site``: the head call's label part (default
        ``head.mb<k>``; a multi-token-prediction module's ``mtp<d>.mb<k>.head``, which calls the same
        ``output_layer``)."""
        if not self.cfg.sequence_parallel:
            return None
        return self._tp("ag", f"{self.fwd_tag}.{site or f'head.mb{mb}'}.head_in", deps)

    def head_regather(self, mb, site=None):
        """Megatron's backward of the head re-gathers its saved ``s/TP``-row input for the weight gradient
        (``dist_all_gather_func(..., async_op=True)`` launched before the input-gradient GEMM, waited before the
        weight gradient; layers.py as in :meth:`head_gather`), like the layers' :meth:`_regather`, but in
        ``--dtype`` and never a userbuffers overlap. Off the chain; ``[gather id]`` for the wgrad GEMM. None
        (``[]``) without sequence parallelism, without a weight gradient (LoRA's frozen head), or with torchtitan,
        whose DTensor autograd saves the redistributed (gathered) input of the output's matmul itself."""
        cfg = self.cfg
        if not cfg.sequence_parallel or cfg.tp == 1 or self.frozen or implied_framework(cfg) == "fsdp2":
            return []
        deps = [] if self.prev is None else [self.prev]
        return [self.coll(f"tp_ag.bwd.{site or f'head.mb{mb}'}.head_in.regather", T.ALL_GATHER, self.act_bytes,
                          "tp", deps, chain=False)]

    def head_grad_scatter(self, mb, site=None):
        """The TP reduction of the head's input gradient, after its input-gradient GEMM: with sequence parallelism
        the reduce-scatter (all ``n`` rows -> this rank's ``s/TP``), without it, in a Megatron training step, the
        all-reduce of all ``n`` rows. Megatron's ``output_layer`` is a ``ColumnParallelLinear`` (gpt_model.py
        213-226) whose ``allreduce_dgrad`` is on at TP > 1 without sequence parallelism (layers.py 912-914); its
        backward launches either reduction ``async_op=True`` right after that GEMM, before the weight gradient, and
        waits for it at the backward's end (layers.py 534-553, 610-616; as in :meth:`head_gather`, and as
        :meth:`_dgrad_reduce` for the layers'), so it runs beside the wgrad GEMM (with the wgrad deferred, nothing
        is beside it): off the chain, after the dgrad (the current last node); the final norm's backward waits for
        it. A frozen (LoRA) head all-reduces too (``LinearWithFrozenWeight``, synchronously: no wgrad to overlap).
        torchtitan: the ``Partial`` gradient of the replicated input back to ``Shard(1)``, a reduce-scatter too.
        Returns ``[id]``; ``[]`` at TP 1, and without sequence parallelism outside a Megatron training step (not
        emitted there, as before), and with ``--no-async-tensor-model-parallel-allreduce`` (:meth:`head_backward`
        emits it on the chain after the wgrad)."""
        cfg = self.cfg
        if cfg.tp == 1:
            return []
        site = site or f"head.mb{mb}"
        if cfg.sequence_parallel:
            return [self.coll(f"tp_rs.bwd.{site}.head_in", T.REDUCE_SCATTER, self.act_bytes, "tp", [self.prev],
                              chain=False)]
        if self._head_input_all_reduce() != "async":
            return []
        return [self.coll(f"tp_ar.bwd.{site}.head_in", T.ALL_REDUCE, self.act_bytes, "tp", [self.prev], chain=False)]

    def _head_input_all_reduce(self):
        """How a Megatron training step all-reduces the head's input gradient without sequence parallelism at
        TP > 1: ``"async"`` beside the wgrad (:meth:`head_grad_scatter`), ``"sync"`` on the chain after it with
        ``--no-async-tensor-model-parallel-allreduce`` (:meth:`head_backward`); None otherwise (TP 1, SP: the
        reduce-scatter, other frameworks: none)."""
        cfg = self.cfg
        if cfg.tp == 1 or cfg.sequence_parallel or not self.megatron_training:
            return None
        return "async" if cfg.async_tp_allreduce else "sync"

    def head_backward(self, mb, vocab, deps=(), site=None):
        """One LM-head call's backward: the input-gradient GEMM and its TP reduction (:meth:`head_grad_scatter`),
        and the weight gradient (with its re-gather, :meth:`head_regather`) now, or, with
        ``--defer-embedding-wgrad-compute``, in the pipeline drain (:meth:`drain_head_wgrads`). Returns the
        reduction's ``[id]`` (what the norm's backward after it waits for), ``[]`` without one. With
        ``--no-async-tensor-model-parallel-allreduce`` (no sequence parallelism) the all-reduce runs on the chain
        after the wgrad (or the dgrad, deferred or frozen), as ``copy_to_tensor_model_parallel_region``'s backward
        after the matmul's: ``parallel_lm_logits`` without ``async_tensor_model_parallel_allreduce``
        (NVIDIA/Megatron-LM cfd2e216 ``megatron/model/language_model.py`` 30-49; f559787d, 2021-03, always so)."""
        n, h = self.tokens, self.dims.hidden
        site = site or f"head.mb{mb}"
        defer = self._head_wgrad_deferred()
        gathered = [] if defer else self.head_regather(mb, site)
        self.mm(f"bwd.{site}.dgrad", n, vocab, h, deps, linear=False)
        scattered = self.head_grad_scatter(mb, site)  # (beside the wgrad GEMM)
        if defer:
            self.deferred_head.append(site)
        elif not self.frozen:
            self.mm(f"bwd.{site}.wgrad", h, n, vocab, gathered, linear=False)
        if self._head_input_all_reduce() == "sync":
            self._tp("ar", f"bwd.{site}.head_in")
        return scattered

    def _head_wgrad_deferred(self):
        """Whether this head call's weight gradient goes to the drain: Megatron-Core's ``ColumnParallelLinear`` of
        the output layer, with ``defer_embedding_wgrad_compute``, hands its backward the model's
        ``grad_output_buffer``; ``LinearWithGradAccumulationAndAsyncCommunication.backward`` appends the output
        gradient and skips the re-gather and the wgrad GEMM (``wgrad_compute = False``) while
        ``wgrad_deferral_limit == 0 or len(grad_output_buffer) < wgrad_deferral_limit``; past the limit the call
        computes its own (NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/tensor_parallel/layers.py``
        487-530, 994-1020). Every call counts, the multi-token-prediction heads' too (they run the same
        ``output_layer``)."""
        cfg = self.cfg
        if not cfg.defer_embedding_wgrad or self.frozen:
            return False
        return cfg.wgrad_deferral_limit == 0 or len(self.deferred_head) < cfg.wgrad_deferral_limit

    def drain_head_wgrads(self, vocab):
        """The deferred head weight gradients, after the stage's last backward (the pipeline drain, where the
        last stage would idle while the earlier stages finish their backwards), before the gradients are
        finalised and the optimizer runs: ``finish_embedding_wgrad_compute`` -> ``drain_embedding_wgrad_compute``
        (Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/pipeline_parallel/schedules.py`` 681-695, 1897-1903,
        2296-2301; ``megatron/core/utils.py`` 918-998). With sequence parallelism the first kept input is
        all-gathered synchronously (on the chain); then for each call ``i`` the next input's all-gather is
        launched asynchronously (double-buffered, after the previous wgrad on the compute stream and the previous
        gather) and call ``i``'s wgrad GEMM runs beside it, waiting for its own gather. Without sequence
        parallelism the GEMMs alone. The labels are the calls' own (``bwd.head.mb<k>.wgrad``,
        ``tp_ag.bwd.head.mb<k>.head_in.regather``). Megatron launches this after the DP gradient reduction of
        the last micro-batch was started (issue NVIDIA/Megatron-LM#1012): the generator's ``grad_sync`` of the
        head likewise does not wait for the drain."""
        sites, self.deferred_head = self.deferred_head, []
        if not sites:
            return
        n, h = self.tokens, self.dims.hidden
        sp = self.cfg.sequence_parallel and self.cfg.tp > 1
        gathers = []
        if sp:
            gathers.append(self.coll(f"tp_ag.bwd.{sites[0]}.head_in.regather", T.ALL_GATHER, self.act_bytes, "tp"))
        for i, site in enumerate(sites):
            if sp and i + 1 < len(sites):
                gathers.append(self.coll(f"tp_ag.bwd.{sites[i + 1]}.head_in.regather", T.ALL_GATHER,
                                         self.act_bytes, "tp", [self.prev, gathers[-1]], chain=False))
            self.mm(f"bwd.{site}.wgrad", h, n, vocab, [gathers[i]] if sp and i else [], linear=False)

    def dropout_add(self, label, deps=()):
        """Bias (GPT) + dropout + residual add on the residual stream: in a Megatron training step Megatron's fused
        bias-dropout-add (one kernel), else ``native_dropout`` of the branch output, then the in-place residual
        ``add_`` (without dropout: the ``add_`` alone)."""
        h, r = self.dims.hidden, self.ln_rows
        bias = [self._t(h)] if self.dims.has_linear_bias else []
        if self.cfg.dropout and self.cfg.bias_dropout_fusion and self.megatron_training:
            # Megatron's bias_dropout_fusion (on unless --no-bias-dropout-fusion; NVIDIA/Megatron-LM core_r0.14.0
            # megatron/core/fusions/fused_bias_dropout.py bias_dropout_add_fused_train, a jit_fuser function of
            # x + bias, dropout and the residual add): one kernel reading the branch output, the residual and the
            # bias and writing the sum and the dropout mask kept for the backward (bool, 1 B an element; listed
            # as an argument of the in-place add_ so that the gpu model counts its byte). ASSUMPTION: the compiled
            # function keeps the mask rather than regenerating it from the RNG seed in the backward.
            return self.ew("aten::add_", label + ".residual",
                           [self._t(r, h), self._t(r, h)] + bias + [((r, h), "Tensor(bool)")], deps)
        if self.cfg.dropout and not self.cfg.inference:
            self.ew("aten::native_dropout", label + ".dropout", [self._t(r, h)], deps)
            deps = ()
        return self.ew("aten::add_", label + ".residual", [self._t(r, h), self._t(r, h)] + bias, deps)

    def dropout_bwd(self, label, deps=()):
        """The dropout's backward on the residual stream's gradient (nothing without dropout: the gradient
        passes through unchanged)."""
        h, r = self.dims.hidden, self.ln_rows
        if not self.cfg.dropout:
            return None
        return self.ew("aten::native_dropout_backward", label + ".dropout",
                       [self._t(r, h), ((r, h), "Tensor(bool)")], deps)

    def residual_grad(self, label, deps=()):
        h, r = self.dims.hidden, self.ln_rows
        return self.ew("aten::add_", label + ".residual", [self._t(r, h), self._t(r, h)], deps)

    def act_fwd(self, label, rows, cols):
        """FFN activation on this rank's ``rows x cols`` (cols: the FFN inner size shard): bias + GeLU (fused,
        GPT) or SiLU(gate) * up (gated: two kernels; the dense FFN's in a Megatron step: :meth:`dense_act_fwd`)."""
        if not self.cfg.ew_forward:
            return
        if self.dims.gated:
            self.ew("aten::silu", label + ".silu", [self._t(rows, cols)])
            self.ew("aten::mul", label + ".mul", [self._t(rows, cols), self._t(rows, cols)])
        elif self.cfg.activation_kernel != "fused":  # gelu_new's eight kernels, squared ReLU's two (.eager_act)
            self.eager_act_fwd(label, rows, cols)
        else:
            self.ew("aten::gelu", label + ".gelu", [self._t(rows, cols), self._t(cols)])

    def act_bwd(self, label, rows, cols):
        if not self.cfg.ew:
            return
        if self.dims.gated:
            self.ew("aten::mul", label + ".mul.dup", [self._t(rows, cols), self._t(rows, cols)])
            self.ew("aten::mul", label + ".mul.dgate", [self._t(rows, cols), self._t(rows, cols)])
            self.ew("aten::silu_backward", label + ".silu", [self._t(rows, cols), self._t(rows, cols)])
        elif self.cfg.activation_kernel != "fused":
            self.eager_act_bwd(label, rows, cols)
        else:
            self.ew("aten::gelu_backward", label + ".gelu", [self._t(rows, cols), self._t(rows, cols)])

    # -- Megatron-Core's fused SwiGLU (bias_swiglu_fusion, on by default) -----------------------------------------
    def dense_act_fwd(self, label, rows, cols):
        """The dense FFN's activation: :meth:`_fused_swiglu_fwd` where Megatron fuses it (:attr:`swiglu_fused`),
        else :meth:`act_fwd` (the routed experts' activation is .moe's: ``--bias-activation-fusion``)."""
        if self.swiglu_fused:
            if self.cfg.ew_forward:
                self._fused_swiglu_fwd(label, rows, cols)
            return
        self.act_fwd(label, rows, cols)

    def dense_act_bwd(self, label, rows, cols):
        """The backward of :meth:`dense_act_fwd`. Megatron's unfused ``glu()`` (``--no-bias-swiglu-fusion``)
        splits fc1's one ``[rows, 2 x cols]`` output with ``torch.chunk``, whose backward concatenates the two
        halves' gradients (``aten::cat``: read both, write ``[rows, 2 x cols]``) after :meth:`act_bwd`'s three
        kernels; torchtitan and Hugging Face run two GEMMs (w1, w3), no chunk."""
        if not self.cfg.ew:
            return
        if self.swiglu_fused:
            self._fused_swiglu_bwd(label, rows, cols)
            return
        self.act_bwd(label, rows, cols)
        if self.dims.gated and self.megatron_training:
            self.ew("aten::cat", label + ".chunk.bwd", [[self._t(rows, cols), self._t(rows, cols)]])

    @property
    def megatron_training(self):
        """A Megatron-LM / NeMo / Megatron-Bridge training step (``--framework megatron``, also implied)."""
        return not self.cfg.inference and implied_framework(self.cfg) == "megatron"

    @property
    def swiglu_fused(self):
        """Megatron-LM's ``bias_swiglu_fusion``, on unless ``--no-bias-swiglu-fusion`` (NVIDIA/Megatron-LM
        core_r0.14.0 32ad5c89 ``megatron/training/arguments.py``: ``--no-bias-swiglu-fusion`` is ``store_false``,
        and ``--swiglu`` sets ``TransformerConfig.bias_activation_fusion`` from it; NeMo's ``LlamaConfig`` and
        Megatron-Bridge's Llama bridge set ``bias_activation_fusion=True`` too). Only in a Megatron training step:
        torchtitan and Hugging Face run ``F.silu(w1(x)) * w3(x)``, two kernels, and DeepSpeed runs the model's.
        torchtitan under ``--torch-compile`` (a training step) runs it as one Inductor kernel each way, with the same
        bytes (the w1 and w3 outputs are two tensors there, not fc1's halves; read and written alike)."""
        compiled = self.cfg.torch_compile and not self.cfg.inference
        return self.dims.gated and ((self.cfg.bias_swiglu_fusion and self.megatron_training) or compiled)

    def _fused_swiglu_fwd(self, label, rows, cols):
        """The dense gated FFN's activation as Megatron-Core runs it by default (``MLP.forward`` with
        ``bias_activation_fusion`` -> ``bias_swiglu_impl`` -> ``SwiGLUFunction``, ``megatron/core/fusions/
        fused_bias_swiglu.py`` at core_r0.14.0): ``swiglu(y)`` is one ``jit_fuser`` (compiled) kernel that reads fc1's
        ``[rows, 2 x cols]`` output (the gate and the up halves) and writes ``[rows, cols]``: an ``aten::mul`` of the
        two halves (3 x rows x cols elements moved, against 5 for SiLU then product). With
        ``--fp8-activation-input`` (``activation_func_fp8_input_store``) the function first keeps its input for the
        backward as ``input.to(torch.float8_e4m3fn)``: one more kernel, read 2 B and write 1 B per element."""
        if self.cfg.fp8_activation_input:
            self._fp8_store_cast(label + ".swiglu.fp8_store", rows, 2 * cols, to_fp8=True)
        half = self._t(rows, cols)
        self.ew("aten::mul", label + ".swiglu", [half, half])

    def _fused_swiglu_bwd(self, label, rows, cols):
        """The backward of :meth:`_fused_swiglu_fwd`: ``SwiGLUFunction.backward`` runs ``swiglu_back(g, y)``, one
        compiled kernel that reads the ``[rows, cols]`` gradient and the saved ``[rows, 2 x cols]`` input and writes
        the input's ``[rows, 2 x cols]`` gradient (the ``torch.cat`` of the two halves' gradients inside the compiled
        function: 5 x rows x cols elements moved, against 9 for the three unfused kernels and the chunk's cat's 4).
        With ``--fp8-activation-input`` the FP8 copy is cast back first (``input.to(ctx.ori_input_dtype)``)."""
        if self.cfg.fp8_activation_input:
            self._fp8_store_cast(label + ".swiglu.fp8_load", rows, 2 * cols, to_fp8=False)
        self.ew("aten::mul", label + ".swiglu.bwd", [self._t(rows, 2 * cols), self._t(rows, cols)])

    def _fp8_store_cast(self, label, rows, cols, to_fp8):
        """A ``rows x cols`` cast between ``--dtype`` and FP8 E4M3 (``aten::copy_`` into the destination: reads the
        source, writes the destination; the gpu model sizes each by its type)."""
        nb = self.nbytes
        src, dst = ((self.ttype, FP8_FWD) if to_fp8 else (FP8_FWD, self.ttype))
        shape = [rows, cols]
        self._memory_node("aten::copy_", label, rows * cols * (nb + 1), repr([shape, shape]),
                          repr([dst, src]), ())

    # -- bias gradients reduced outside the GEMMs --------------------------------------------------------------
    @property
    def separate_bias_grads(self):
        """Whether a training step reduces each linear layer's bias gradient in a kernel of its own (an
        ``aten::sum`` of the ``[rows, out]`` output gradient over its rows, :meth:`bias_grad`). Only a model with
        biased linears (:attr:`.model.ModelDims.has_linear_bias`: by default a non-gated, GPT-2-style model; Qwen2's
        Q/K/V-only biases are not emitted). Then:

        - ``--framework deepspeed`` (a Hugging Face model under eager autograd): GPT-2's ``Conv1D`` runs
          ``torch.addmm(self.bias, x, self.weight)`` (huggingface/transformers ``pytorch_utils.py``); autograd's
          ``addmm`` backward gives ``self`` the whole ``[rows, out]`` gradient (``tools/autograd/derivatives.yaml``:
          ``self: maybe_multiply(grad, beta.conj())``) and the engine's ``validate_outputs`` reduces it to the bias's
          shape with ``at::sum_to`` (``torch/csrc/autograd/engine.cpp``): one reduction kernel per linear.
        - a Megatron-LM training step on its own linears (no Transformer Engine: neither ``--gemm-dtype`` FP8/FP4
          nor ``--tp-comm-overlap``, the registry's SC'21 rows, Megatron-LM of 2021): QKV's ``ColumnParallelLinear``
          (``LinearWithGradAccumulationAndAsyncCommunication.backward``: ``grad_bias = grad_output.sum(dim=0) if
          use_bias``, NVIDIA/Megatron-LM ``megatron/core/tensor_parallel/layers.py``; in 2021 ``F.linear`` whose
          broadcast bias add autograd reduces the same way); FC1's bias through the fused bias-GeLU
          (``GeLUFunction.backward`` returns the ``[rows, ffn]`` gradient ``tmp`` for the bias too, ``megatron/model/
          fused_bias_gelu.py``, which the engine's ``sum_to`` reduces); the projection's and FC2's
          (``skip_bias_add``) through the scripted bias-dropout-add, whose autodiff reduces ``x + bias``'s gradient
          to the bias's shape (``_grad_sum_to_size``). **Assumption**: TorchScript's fuser of the time left that
          reduction a kernel of its own (its fusion groups were element-wise).
        - Transformer Engine's linears: none separate: without FP8 the bias gradient comes out of the weight-gradient
          GEMM (cuBLASLt's BGRADB epilogue: ``grad_output_preprocess`` returns no bias gradient, "bgrad is fused with
          wgrad", and the wgrad ``general_gemm`` is called with ``bias`` and ``grad=True``), with FP8 out of the
          gradient's cast (``tex.bgrad_quantize``, "fused bgrad + cast + transpose"); NVIDIA/TransformerEngine
          d0067d0 ``transformer_engine/pytorch/module/base.py`` ``grad_output_preprocess``, ``module/linear.py``
          ``wgrad_gemm``. (FP8 with a sequence-parallel gather of the gradient, a row-parallel layer's, reduces it
          unfused, ``grad_output.sum(dim=0)``; Megatron's row-parallel layers return their bias instead,
          ``skip_bias_add``: not emitted, see the issue-36 notes.)
        - torchtitan (``--framework fsdp2``): its models' linears have no bias; MaxText's (also ``--zero 3``) are
          XLA's fusions: none."""
        cfg = self.cfg
        if not self.dims.has_linear_bias or cfg.inference or not cfg.ew or self.frozen:
            return False
        framework = implied_framework(cfg)
        if framework == "deepspeed":
            return True
        return framework == "megatron" and cfg.gemm_dtype == "same" and not cfg.tp_comm_overlap

    def bias_grad(self, label, rows, cols, deps=()):
        """The bias gradient of a linear layer whose output gradient is ``[rows, cols]`` on this rank, reduced over
        the rows where the framework does it in a kernel of its own (:attr:`separate_bias_grads`): ``aten::sum``
        reading the gradient and writing the ``[cols]`` bias gradient (both listed, so the gpu model, which counts a
        reduction's arguments once, moves ``(rows + 1) x cols`` elements). None where it is fused or absent."""
        if not self.separate_bias_grads:
            return None
        return self.ew("aten::sum", label + ".bias_grad", [self._t(rows, cols), self._t(cols)], deps)

    def _tp_ring_step(self, label, j, deps, gathered_bytes):
        """One step of a TP ring (``--tp-comm-overlap``): send one shard (``gathered_bytes/TP``: ``b*s*h``
        elements) to TP index t+1 after ``deps``, receive one from t-1. Returns the receive's id."""
        tag = TP_TAG_BASE + self.tp_tags
        self.tp_tags += 1
        size = gathered_bytes // self.cfg.tp
        overlap = _te_overlap(label)
        self.send(f"tp_send.{label}.{j}", +1, tag, deps, size, "tpsend", overlap)
        return self.recv(f"tp_recv.{label}.{j}", -1, tag, size, "tprecv", overlap)

    def ag_mm(self, ag_label, mm_label, m, k, n, deps=()):
        """Sequence-parallel all-gather of the ``[m, k]`` input (none without sequence parallelism), then
        ``[m,k] x [k,n]``. With
        ``--tp-comm-overlap`` (Transformer Engine's userbuffers): the GEMM runs in TP row chunks; chunk 0 on the
        local shard while a ring passes the other shards along, chunk j as soon as shard j arrived."""
        if not self.cfg.tp_comm_overlap:  # (torchao's Float8 TP: the gather in FP8, see stage.ag_bytes)
            if self.cfg.sequence_parallel and self._tp("ag", ag_label, deps, self.ag_bytes) is not None:
                deps = []
            return self.mm(mm_label, m, k, n, deps)
        tp = self.cfg.tp
        start = list(deps) + ([] if self.prev is None else [self.prev])
        # each transfer is emitted before the GEMM chunk launched with it (lower id: issued first when both become
        # ready at once), so that the gpu model's --gpu-contention sees it running beside that chunk
        overlap = _te_overlap(f"ag.{ag_label}")
        recv = self._tp_ring_step(f"ag.{ag_label}", 1, start, self.ag_bytes)
        node = self.mm(f"{mm_label}.c0", m // tp, k, n, deps, overlap=overlap)
        for j in range(1, tp):
            arrived = recv
            if j + 1 < tp:
                recv = self._tp_ring_step(f"ag.{ag_label}", j + 1, [arrived], self.ag_bytes)
            node = self.mm(f"{mm_label}.c{j}", m // tp, k, n, [arrived], overlap=overlap)
        return node

    def mm_rs(self, mm_label, rs_label, m, k, n, deps=(), lora=None):
        """``[m,k] x [k,n]`` (and the ``lora`` target's adapter, its partial output added before the reduction),
        then the TP reduction of its output (reduce-scatter with sequence parallelism, all-reduce without). With
        ``--tp-comm-overlap``: the GEMM runs in TP row chunks, and a ring accumulates the partial sums (send the
        partial of the previous chunk, receive one, add it to this chunk's: ``aten::add_`` of one shard)
        while the next chunk computes. torchtitan's AsyncTP (``--framework fsdp2``) does not accumulate along the
        ring: PyTorch's ``fused_matmul_reduce_scatter`` computes each peer's partial, the peer copies it out, and
        one ``torch.sum`` over the TP stacked partials ``[tp, rows, n] -> [rows, n]`` ends it ("a single reduction
        kernel"; pytorch/pytorch 0e9ed9cf torch/distributed/_symmetric_memory/__init__.py
        ``_fused_matmul_reduce_scatter_impl`` / ``_pipelined_produce_and_all2all``): it waits for every copy."""
        if not self.cfg.tp_comm_overlap:
            node = self.lora_forward(mm_label, lora, self.mm(mm_label, m, k, n, deps))
            self._tp("rs" if self.cfg.sequence_parallel else "ar", rs_label)
            return node
        tp = self.cfg.tp
        rows = m // tp
        overlap = _te_overlap(f"rs.{rs_label}")
        stacked = implied_framework(self.cfg) == "fsdp2"
        node = self.mm(f"{mm_label}.c0", rows, k, n, deps, overlap=overlap)
        received = []
        for j in range(1, tp):
            recv = self._tp_ring_step(f"rs.{rs_label}", j, [node], self.act_bytes)
            if stacked:
                node = self.mm(f"{mm_label}.c{j}", rows, k, n, overlap=overlap)
                received.append(recv)
                continue
            self.mm(f"{mm_label}.c{j}", rows, k, n, overlap=overlap)
            node = self.ew("aten::add_", f"{rs_label}.rs_add{j}", [self._t(rows, n), self._t(rows, n)], [recv])
        if stacked:
            node = self.ew("aten::sum", f"{rs_label}.rs_sum", [self._t(tp, rows, n), self._t(rows, n)], received)
        return node

    # -- the model ------------------------------------------------------------------------------------------
    def _tp(self, kind, label, deps=(), size=None):
        """A TP collective: kind 'ar' (all-reduce), 'ag' (all-gather) or 'rs' (reduce-scatter) of ``size`` bytes
        (default the ``tokens x h`` activation in ``--dtype``)."""
        if self.cfg.tp == 1:
            return None
        comm = {"ar": T.ALL_REDUCE, "ag": T.ALL_GATHER, "rs": T.REDUCE_SCATTER}[kind]
        return self.coll(f"tp_{kind}.{label}", comm, self.act_bytes if size is None else size, "tp", deps)

    @property
    def fp8_grad_cast_first(self):
        """torchao's Float8RowwiseParallel (torchtitan's TP plan with Float8, 9dec370 ``apply_tp``): its
        ``NoopFwToFloat8BwDynamic`` runs after the output's redistribute, so in backward the output gradient is cast
        to FP8 on this rank's sequence-parallel shard before the all-gather (pytorch/ao eab345c
        ``float8/float8_tensor_parallel.py``): the cast reads ``tokens / TP`` rows, not the gathered ``tokens``."""
        cfg = self.cfg
        return self.fp8_tensorwise and cfg.sequence_parallel and cfg.tp > 1

    def layer_forward(self, layer, mb, deps=(), tag=None):
        dims, cfg, tp = self.dims, self.cfg, self.cfg.tp
        h, d, b, n = dims.hidden, dims.head_dim, cfg.micro_batch_size, self.tokens
        q, c = self.seq, self.ctx
        sp = cfg.sequence_parallel
        tag = tag or self.fwd_tag
        lab = f"{tag}.l{layer}.mb{mb}"
        qkv = (dims.q_width + 2 * dims.kv_heads * d) // tp
        f1 = (2 if dims.gated else 1) * dims.ffn_hidden // tp
        deps = list(deps)
        ew = cfg.ew_forward
        if ew:  # deps stay on the first GEMM too (ZeRO-3 gathers; already ordered by the chain)
            self.layer_norm(lab + ".ln1", deps, linear_input=not dims.mla)  # (TE's LayerNormLinear: QKV)
        if dims.mla:
            qkv_node = self.mla_forward(lab, deps)
        else:
            self.fp8_norm_cast(lab + ".qkv", self.ln_rows, h)  # (--fp8-recipe current: the LayerNorm output)
            qkv_node = self.ag_mm(lab + ".attn_in", lab + ".qkv", n, h, qkv, deps)
            qkv_node = self.lora_forward(lab + ".qkv", "qkv", qkv_node)
        hq, hkv = dims.heads // tp, dims.kv_heads // tp
        rope = self.rope_fwd(lab, b, q, hq, hkv, d)  # (--rope: before the K/V cache and the CP ring)
        qkv_node = qkv_node if rope is None else rope
        if not dims.mla:  # (--framework fsdp2: eager repeat_kv copies of K and V)
            qkv_node = self.repeat_kv_fwd(lab, b, q, hq, hkv, d) or qkv_node
        if cfg.inference:  # this step's keys and values go into the KV cache (K and V as one copy; MLA: latent)
            kv_new = self._t(b, q, dims.kv_lora_rank + dims.rope_dim) if dims.mla else self._t(2, b, hkv, q, d)
            qkv_node = self.ew("aten::copy_", lab + ".kv_write", [kv_new, kv_new])
            if cfg.mode == "mixed":
                kv_chunk = (self._t(1, cfg.prefill_chunk, dims.kv_lora_rank + dims.rope_dim) if dims.mla
                            else self._t(2, 1, hkv, cfg.prefill_chunk, d))
                qkv_node = self.ew("aten::copy_", lab + ".prefill.kv_write", [kv_chunk, kv_chunk])
        phase = 1 if tag == "recompute" else 0
        ring = [] if self.torch_cp else self._cp_ring(lab + ".kv", layer, mb, phase, qkv_node)
        if self.torch_cp:  # PyTorch's context_parallel (--cp-rotate allgather | alltoall: .torch_cp)
            self.torch_cp_fwd(lab, b, hq, hkv, q, d, dims.v_dim or d, layer, mb, phase, [qkv_node])
        elif cfg.attention == "unfused":
            self.attn_unfused_fwd(lab, b, hq, q, c, d, ring)
        else:
            decode = cfg.mode in ("decode", "mixed")
            kv_bytes = {"kv_cache_bytes": self.cache_bytes(b, dims.attn_keys(layer, c), hkv)} if decode else None
            self.flash_fwd(lab, b, hq, hkv, q, d, ring, kv_bytes, dv=dims.v_dim, layer=layer)
            if cfg.mode == "mixed":  # the prefill chunk: causal over the cached prompt tokens and itself
                chunk, keys = cfg.prefill_chunk, cfg.prefill_done + cfg.prefill_chunk
                wk = dims.attn_keys(layer, keys)  # (a sliding window: the chunk's band, timed as a block)
                self.flash_fwd(lab + ".prefill", 1, hq, hkv, chunk, d, [],
                               {"kv_cache_bytes": self.cache_bytes(1, wk, hkv)},
                               steps=[(wk, wk, cfg.causal and wk == keys)], dv=dims.v_dim)
        ow = dims.o_width // tp
        self.fp8_cast(lab + ".proj", n, ow)  # (QKV, FC1, FC2 inputs: cast inside LayerNorm / GeLU)
        self.mm_rs(lab + ".proj", lab + ".attn_out", n, ow, h, lora="proj")
        if ew:
            self.dropout_add(lab + ".attn_out")
            self.layer_norm(lab + ".ln2", linear_input=not dims.is_moe_layer(layer))  # (dense: FC1's)
        if dims.is_moe_layer(layer):
            if sp:
                self._tp("ag", lab + ".mlp_in")
            self.moe_forward(lab, layer)
            self._tp("rs" if sp else "ar", lab + ".mlp_out")
        else:
            self.fp8_norm_cast(lab + ".fc1", self.ln_rows, h)
            self.lora_forward(lab + ".fc1", "fc1", self.ag_mm(lab + ".mlp_in", lab + ".fc1", n, h, f1))
            self.dense_act_fwd(lab + ".fc1", n, dims.ffn_hidden // tp)
            if self.fp8_mlp_casts_apart:  # (Megatron's activation wrote --dtype: FC2's own cast)
                self.fp8_cast(lab + ".fc2", n, dims.ffn_hidden // tp)
            elif self.cfg.te_op_fuser:  # (TE's fused activation: cast inside it, under current scaling after it)
                self.fp8_act_cast(lab + ".fc2", n, dims.ffn_hidden // tp)
            else:  # (another framework's FP8 linears: under current scaling the amax, then the cast)
                self.fp8_norm_cast(lab + ".fc2", n, dims.ffn_hidden // tp)
            self.mm_rs(lab + ".fc2", lab + ".mlp_out", n, dims.ffn_hidden // tp, h, lora="fc2")
        if ew:
            self.dropout_add(lab + ".mlp_out")

    def layer_recompute_op_sac(self, layer, mb, deps=()):
        """What torchtitan's op-level selective activation checkpointing runs again before a dense layer's backward
        (``--framework fsdp2 --recompute selective``; torchtitan's ``_save_list`` policy, the one the memory estimate
        keeps, :func:`.memory_terms.op_sac_layer_bytes`): the layer's forward re-runs with every matmul, attention
        and reduce-scatter output saved except every second matmul in the order the layer runs them (wq, *wk*, wv,
        *wo*, w1, *w3*, w2), and every other op (norms, activation, residual adds) recomputed, up to the last tensor
        the backward needs (the SiLU x up product w2 reads). So the recomputed GEMMs are wk, wo and w3."""
        dims, cfg, tp = self.dims, self.cfg, self.cfg.tp
        h, n = dims.hidden, self.tokens
        lab = f"recompute.l{layer}.mb{mb}"
        deps = list(deps)
        if cfg.ew_forward:
            self.layer_norm(lab + ".ln1", deps)
        self.mm(lab + ".wk", n, h, dims.kv_heads * dims.head_dim // tp, deps)
        # the rotated queries and keys the attention's backward reads are recomputed (only its output is saved)
        self.rope_fwd(lab, cfg.micro_batch_size, self.seq, dims.heads // tp, dims.kv_heads // tp, dims.head_dim)
        # and so are the keys and values repeat_kv expanded for the attention's backward (.eager_step)
        self.repeat_kv_fwd(lab, cfg.micro_batch_size, self.seq, dims.heads // tp, dims.kv_heads // tp, dims.head_dim)
        self.mm(lab + ".wo", n, dims.o_width // tp, h)
        if cfg.ew_forward:
            self.dropout_add(lab + ".attn_out")
            self.layer_norm(lab + ".ln2")
        self.mm(lab + ".w3", n, h, dims.ffn_hidden // tp)
        self.dense_act_fwd(lab + ".fc1", n, dims.ffn_hidden // tp)  # (--torch-compile: one fused kernel)

    def fc2_input_transpose(self, lab, rows, ff):
        """The FP8 transpose of FC2's input for its weight gradient where the activation cast it in forward
        without one (TE's fused activation, delayed scaling, Hopper); FC2's own cast wrote it already
        (:attr:`fp8_mlp_casts_apart`)."""
        if not self.fp8_mlp_casts_apart:
            self.fp8_transpose(lab + ".fc2.wgrad", rows, ff)

    def fc1_grad_cast(self, lab, rows, f1):
        """FC1's output gradient cast to FP8 by FC1 itself after Megatron's activation backward wrote it in
        ``--dtype`` (:attr:`fp8_mlp_casts_apart`); TE's fused activation backward writes FP8 itself, under
        current scaling through one cast after it (:meth:`fp8_act_cast`)."""
        if self.fp8_mlp_casts_apart:
            self.fp8_cast(lab + ".fc1.dgrad", rows, f1)
        elif self.cfg.te_op_fuser and self.cfg.ew:
            self.fp8_act_cast(lab + ".fc1.dgrad", rows, f1)

    def layer_backward(self, layer, mb, deps=()):
        dims, cfg, tp = self.dims, self.cfg, self.cfg.tp
        h, d, b, s, n = dims.hidden, dims.head_dim, cfg.micro_batch_size, dims.seq_len, self.tokens
        q = self.seq  # this rank's queries (s / CP); keys/values: all s
        sp = cfg.sequence_parallel
        lab = f"bwd.l{layer}.mb{mb}"
        qkv = (dims.q_width + 2 * dims.kv_heads * d) // tp
        f1 = (2 if dims.gated else 1) * dims.ffn_hidden // tp
        ff = dims.ffn_hidden // tp
        deps = self.norms_recompute(lab, list(deps))  # (--recompute-modules layernorm, .moe)
        deps = self.maxtext_recompute(lab, deps)  # (--remat-policy minimal_flash, .maxtext_step)
        ew = cfg.ew
        if ew:  # the residual stream's gradient through the MLP branch's dropout (before any SP gather)
            self.dropout_bwd(lab + ".mlp_out", deps)
        overlap = cfg.tp_comm_overlap  # (the ring helpers: dgrad GEMMs in chunks, wgrad after)
        scattered = []
        rows = self.ln_rows if self.fp8_grad_cast_first else n  # (torchao: the shard cast before the gather)
        if overlap and not dims.is_moe_layer(layer):
            if self.fp8_cast(lab + ".fc2.dgrad", rows, h, deps) is not None:  # FP8: the output gradient
                deps = []
            self.ag_mm(lab + ".mlp_out", lab + ".fc2.dgrad", n, h, ff, deps)
            self.fc2_input_transpose(lab, n, ff)
            self.mm(lab + ".fc2.wgrad", ff, n, h)
            self.dense_act_bwd(lab + ".fc1", n, ff)
            self.fc1_grad_cast(lab, n, f1)
            gathered = self._regather(lab + ".mlp_in")
            bulk = self._bulk_dgrad(lab + ".fc1.dgrad", lab + ".mlp_in", n, f1, h)
            self.fp8_transpose(lab + ".fc1.wgrad", n, h, gathered)  # the LayerNorm output
            scattered = self._bulk_wgrad_scatter(lab + ".mlp_in", gathered) if bulk else []
            self.mm(lab + ".fc1.wgrad", h, n, f1, gathered)
            self.wait_for(scattered)  # (Transformer Engine's bulk reduce-scatter, beside the wgrad)
        else:
            first = self.fp8_grad_cast_first and not dims.is_moe_layer(layer)
            if first and self.fp8_cast(lab + ".fc2.dgrad", self.ln_rows, h, deps) is not None:
                deps = []
            if sp and self._tp("ag", lab + ".mlp_out", deps, self.ag_bytes if first else None) is not None:
                deps = []
            if dims.is_moe_layer(layer):
                self.moe_backward(lab, layer, deps)
            else:
                if not first and self.fp8_cast(lab + ".fc2.dgrad", n, h, deps) is not None:
                    deps = []
                self.mm(lab + ".fc2.dgrad", n, h, ff, deps)
                self.lora_backward(lab, "fc2")
                if not self.frozen:
                    self.fc2_input_transpose(lab, n, ff)
                    self.mm(lab + ".fc2.wgrad", ff, n, h)
                self.bias_grad(lab + ".fc2", self.ln_rows, h)  # (the residual stream's rows: SP's shard)
                self.dense_act_bwd(lab + ".fc1", n, ff)
                self.fc1_grad_cast(lab, n, f1)
                gathered = self._regather(lab + ".mlp_in") if self.needs_input("fc1") else []
                self.mm(lab + ".fc1.dgrad", n, f1, h)
                scattered = self._dgrad_reduce(lab + ".mlp_in")  # (Megatron: beside the wgrad GEMM)
                self.lora_backward(lab, "fc1", gathered)
                if not self.frozen:
                    self.fp8_transpose(lab + ".fc1.wgrad", n, h, gathered)
                    self.mm(lab + ".fc1.wgrad", h, n, f1, gathered)
                self.bias_grad(lab + ".fc1", n, f1)
            if not scattered:
                self._tp("rs" if sp else "ar", lab + ".mlp_in")
            else:
                self.wait_for(scattered)  # (the norm's backward reads the reduced gradient)
        if ew:
            self.layer_norm_bwd(lab + ".ln2")
            self.residual_grad(lab + ".ln2")
            self.dropout_bwd(lab + ".attn_out")
        self.fp8_cast(lab + ".proj.dgrad", rows, h)
        self.ag_mm(lab + ".attn_out", lab + ".proj.dgrad", n, h, dims.o_width // tp)
        self.lora_backward(lab, "proj")
        if not self.frozen:
            self.mm(lab + ".proj.wgrad", dims.o_width // tp, n, h)  # (its input's transpose: the forward cast's)
        self.bias_grad(lab + ".proj", self.ln_rows, h)
        hq, hkv = dims.heads // tp, dims.kv_heads // tp
        if cfg.attention == "unfused":
            attn = self.attn_unfused_bwd(lab, b, hq, q, s, d)
        elif self.torch_cp:  # (its dK/dV come home inside the SDPA backward: .torch_cp)
            attn = self.torch_cp_bwd(lab, layer, mb, b, hq, hkv, q, d, dims.v_dim or d)
        else:  # (CP: the dK/dV ring starts when the first remote chunk's gradients are done)
            attn = self.flash_bwd(lab, b, hq, hkv, q, d, dv=dims.v_dim, layer=layer)
        if not dims.mla:  # (--framework fsdp2: dK and dV summed over repeat_kv's copies)
            attn = self.repeat_kv_bwd(lab, b, q, hq, hkv, d) or attn
        rope = self.rope_bwd(lab, b, q, hq, hkv, d)  # (--rope: dQ and dK back through the rotation)
        attn = attn if rope is None else rope
        ring = [attn] if self.torch_cp else self._cp_ring(lab + ".dkv", layer, mb, 2, attn)  # dK, dV home
        split = self.qkv_split_bwd(lab, b, q, hq, hkv, d, ring)  # (Megatron: dQ, dK, dV joined for the QKV GEMM)
        ring = ring if split is None else [split]
        # (Transformer Engine casts the output gradient before it launches the input's re-gather: grad_output_preprocess
        # ahead of gather_along_first_dim, or of the bulk all-gather the dgrad GEMM launches: _regather)
        cast = not dims.mla and self.fp8_cast(lab + ".qkv.dgrad", n, qkv, ring) is not None
        gathered = self._regather(lab + ".attn_in", [] if cast else ring) if self.needs_input("qkv") else []
        if cast:
            ring = []
        if dims.mla:  # (Megatron without SP: each up-projection reduces its own input gradient, .mla)
            out = self.prev if self.mla_backward(lab, ring, gathered) else self._tp("rs" if sp else "ar",
                                                                                    lab + ".attn_in")
        elif overlap:
            bulk = self._bulk_dgrad(lab + ".qkv.dgrad", lab + ".attn_in", n, qkv, h, ring)
            self.fp8_transpose(lab + ".qkv.wgrad", n, h, gathered)
            scattered = self._bulk_wgrad_scatter(lab + ".attn_in", gathered) if bulk else []
            self.mm(lab + ".qkv.wgrad", h, n, qkv, gathered)
            self.wait_for(scattered)
            out = scattered[0] if scattered else self.prev
        else:
            self.mm(lab + ".qkv.dgrad", n, qkv, h, ring)
            scattered = self._dgrad_reduce(lab + ".attn_in")  # (Megatron: beside the wgrad GEMM)
            self.lora_backward(lab, "qkv", gathered)
            if not self.frozen:
                self.fp8_transpose(lab + ".qkv.wgrad", n, h, gathered)
                self.mm(lab + ".qkv.wgrad", h, n, qkv, gathered)
            self.bias_grad(lab + ".qkv", n, qkv)
            if scattered:
                self.wait_for(scattered)
                out = scattered[0]
            else:
                out = self._tp("rs" if sp else "ar", lab + ".attn_in")
        if ew:
            self.layer_norm_bwd(lab + ".ln1")
            out = self.residual_grad(lab + ".ln1")
        return out

    def cache_bytes(self, b, positions, hkv):
        """KV-cache bytes ``b`` sequences' attention reads over ``positions`` in one layer on this rank: keys and
        values of this rank's ``hkv`` heads, or MLA's compressed latent (whole on every TP rank)."""
        if self.dims.mla:
            return b * self.mla_cache_bytes(positions)
        return 2 * b * positions * self.dims.head_dim * hkv * self.nbytes

    def _bulk_dgrad(self, mm_label, rs_label, m, k, n, deps=()):
        """``--tp-comm-overlap``: a column-parallel layer's (QKV's, FC1's) input-gradient GEMM, whose reduce-scatter
        follows. In a Megatron step Transformer Engine's default is the bulk overlap with the weight gradient
        (Megatron-Core ``tp_comm_bulk_wgrad = True``, ``tp_comm_overlap_rs_dgrad = False``: NVIDIA/Megatron-LM
        core_r0.14.0 32ad5c89 ``megatron/core/model_parallel_config.py`` 166-186; NeMo's comm-overlap callback
        leaves them): the dgrad GEMM runs whole, writing into the wgrad userbuffer, and the wgrad GEMM runs with
        ``ub_type=RS, bulk_overlap=True``, the buffer reduce-scattered beside it (:meth:`_bulk_wgrad_scatter`;
        NVIDIA/TransformerEngine v2.1 ``transformer_engine/pytorch/module/layernorm_linear.py`` 504-660: Megatron-
        Core's QKV and FC1 are ``TELayerNormColumnParallelLinear``; ``layernorm_mlp.py`` 779-875 likewise, TE's own
        MLP under ``--te-op-fuser``). Emitted here: the whole dgrad GEMM; True when the reduce-scatter is still to
        come. torchtitan's AsyncTP (``--framework fsdp2``) keeps :meth:`mm_rs`'s pipelined matmul-reduce-scatter
        (False: its last node the chain's)."""
        if not self.megatron_training:
            self.mm_rs(mm_label, rs_label, m, k, n, deps)
            return False
        self.mm(mm_label, m, k, n, deps)
        return True

    def _bulk_wgrad_scatter(self, rs_label, gathered=()):
        """Transformer Engine's bulk reduce-scatter of the input gradient beside the weight-gradient GEMM (after
        :meth:`_bulk_dgrad`; emit it just before the wgrad GEMM), in ``--dtype`` off the chain (its TE name
        ``qkv_wgrad`` / ``fc1_wgrad`` for ``--comm-sms``). ``CommOverlapBase::bulk_overlap`` records its start on
        the main stream at the wgrad GEMM's launch, and the main stream waited, right after the dgrad GEMM's launch,
        for that GEMM's bulk all-gather (the re-gather, :meth:`_regather`: ``cudaStreamWaitEvent(stream_main,
        _stop_comm)``; NVIDIA/TransformerEngine v2.1 ``transformer_engine/common/comm_gemm_overlap/
        comm_gemm_overlap.cpp`` 251-299), then for Hopper's FP8 transpose of the gathered input
        (``_create_transpose``, layernorm_linear.py 611-630, layernorm_mlp.py 831-841): so it waits for the chain's
        last node and for
        ``gathered``. The caller makes the chain wait for it after the wgrad (:meth:`wait_for`). Returns ``[id]``."""
        deps = list(gathered) + ([] if self.prev is None else [self.prev])
        return [self.coll(f"tp_rs.{rs_label}", T.REDUCE_SCATTER, self.act_bytes, "tp", deps, chain=False,
                          overlap=_te_overlap(f"rs.{rs_label}"))]

    def _dgrad_reduce(self, label, size=None):
        """The TP reduction of a column-parallel layer's (QKV's, FC1's; MLA's up-projections', .mla) input gradient
        (``size`` bytes; default the ``tokens x h`` activation) in a Megatron training step
        without ``--tp-comm-overlap``: the reduce-scatter with sequence parallelism, else the all-reduce, launched
        right after the input-gradient GEMM, before the weight gradient, and waited for after it.
        Megatron-Core's ``LinearWithGradAccumulationAndAsyncCommunication.backward`` runs ``grad_input =
        grad_output.matmul(weight)``, then, with ``allreduce_dgrad`` (``ColumnParallelLinear``: TP > 1 without
        sequence parallelism), ``torch.distributed.all_reduce(grad_input, async_op=True)``, or with sequence
        parallelism ``dist_reduce_scatter_func(sub_grad_input, grad_input, async_op=True)`` (both "scheduled before
        the weight gradient computation", relying on ``CUDA_DEVICE_MAX_CONNECTIONS=1``, which Megatron-LM's
        arguments.py asserts at TP > 1 before Blackwell), the wgrad GEMM and the bias gradient, and ``handle.wait()``
        last (NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/tensor_parallel/layers.py`` 487-618, 912-914);
        Transformer Engine's ``_Linear`` / ``_LayerNormLinear`` backward likewise (``allreduce(dgrad, tp_group,
        async_op=True)`` / ``reduce_scatter_along_first_dim(dgrad, tp_group, async_op=True)`` after the dgrad GEMM,
        ``dgrad_work.wait()`` after the wgrad GEMM, before the norm's backward; NVIDIA/TransformerEngine d0067d0
        ``transformer_engine/pytorch/module/linear.py`` 1122-1132, 1350; ``layernorm_linear.py`` 900-910,
        1128-1130). The all-reduce has run so in Megatron-LM since 3f652469 (2021-09-02, on unless
        ``--no-async-tensor-model-parallel-allreduce``; that flag ignored since 5fffdfc7, 2024-04). Off the chain
        after the dgrad (the current last node); the caller makes the chain wait for it after the wgrad
        (:meth:`wait_for`). ``[]`` (the caller keeps the reduction on the chain after the wgrad, as autograd runs
        it) at TP 1, for torchtitan / DeepSpeed / Hugging Face (autograd reduces after the matmul's backward, both
        GEMMs), and without a weight gradient (LoRA's frozen base: ``LinearWithFrozenWeight`` all-reduces
        synchronously). ``[]`` too with ``--no-async-tensor-model-parallel-allreduce`` without sequence parallelism
        on Megatron's own linears (``async_grad_allreduce`` off: ``copy_to_tensor_model_parallel_region``'s
        backward all-reduces after both GEMMs; NVIDIA/Megatron-LM 3f652469 ``megatron/mpu/layers.py`` 305-330,
        cfd2e216 ``megatron/arguments.py`` 304-307: with sequence parallelism the flag is moot, its reduce-scatter
        async anyway). Transformer Engine's linears (``--gemm-dtype`` FP8/FP4) never read it (5fffdfc7^
        ``megatron/core/transformer/custom_layers/transformer_engine.py``): async as above."""
        cfg = self.cfg
        if cfg.tp == 1 or self.frozen or not self.megatron_training:
            return []
        if not (cfg.async_tp_allreduce or cfg.sequence_parallel) and cfg.gemm_dtype == "same":
            return []
        kind, comm = ("rs", T.REDUCE_SCATTER) if cfg.sequence_parallel else ("ar", T.ALL_REDUCE)
        size = self.act_bytes if size is None else size
        return [self.coll(f"tp_{kind}.{label}", comm, size, "tp", [self.prev], chain=False)]

    def _regather(self, label, deps=()):
        """Sequence parallelism: Megatron-LM (and Transformer Engine) keep only this rank's shard of a
        column-parallel layer's input (QKV, FC1) and all-gather it again in backward for the weight gradient,
        launched just before the input-gradient GEMM so that it overlaps it. Off the compute chain; returns
        ``[gather id]`` for the wgrad GEMM to wait on (``[]`` without sequence parallelism). With
        ``--tp-comm-overlap`` it is Transformer Engine's bulk all-gather (``qkv_dgrad`` / ``fc1_dgrad``, on
        ``num_sm`` SMs, the GEMM on all of them unless ``set_sm_margin``): ``CommOverlapBase::bulk_overlap``
        starts it on its stream when the main stream reaches the dgrad GEMM (after the output gradient's cast) and
        makes the main stream wait for it right after launching that GEMM (NVIDIA/TransformerEngine v2.1
        ``transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp`` 251-299), so whatever follows the
        dgrad GEMM waits for it (:meth:`_bulk_wgrad_scatter` too). Not emitted: the local shard's copy into the
        userbuffer before it (``copy_into_buffer``'s ``cudaMemcpyAsync`` on the same stream, ``tokens / TP x h``
        bytes)."""
        if not self.cfg.sequence_parallel or self.cfg.tp == 1:
            return []
        deps = list(deps) + ([] if self.prev is None else [self.prev])
        overlap = _te_overlap(f"regather.{label}") if self.cfg.tp_comm_overlap else None
        return [self.coll(f"tp_ag.{label}.regather", T.ALL_GATHER, self.ag_bytes, "tp", deps, chain=False,
                          overlap=overlap)]
