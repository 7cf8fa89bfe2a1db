"""The transformer's norms (LayerNorm or RMSNorm): the layers' pre-attention and pre-MLP norms and the final norm
before the LM head, one fused kernel each or eager PyTorch's composite RMSNorm, forward and backward."""

from __future__ import annotations

from .fp8 import FP8_FWD


class NormOps:
    """The norms (a stage-builder mixin, the base of :class:`.layers.LayerOps`)."""

    def layer_norm(self, label, deps=(), linear_input=False):
        """The layer's norm on this rank's ``r x h`` rows, one fused kernel: the model's own kind
        (``dims.rms_norm``). LayerNorm is ATen's ``native_layer_norm(input, normalized_shape, weight, bias, eps)``;
        RMSNorm is ``_fused_rms_norm(input, normalized_shape, weight, eps)``, the op ``torch.nn.functional.rms_norm``
        runs on CUDA (pytorch/pytorch v2.8.0 ``tools/autograd/derivatives.yaml``: ``_fused_rms_norm(Tensor input,
        int[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, Tensor)``, the output and the fp32 rstd):
        the same rows read and written without the bias (and without the mean it does not compute). Transformer
        Engine's ``LayerNormLinear`` / ``RMSNorm`` run their own kernels (``tex.layernorm_fwd`` / ``tex.rmsnorm_fwd``)
        and vLLM its ``rms_norm`` custom op: ASSUMPTION, timed as PyTorch's kernel of the same kind, whose rate and
        floor were measured (the gpu model's ``data/memops_fit.json`` / ``memops_floor.json``).

        ``linear_input``: the norm is the one Transformer Engine's ``LayerNormLinear`` runs before the layer's QKV or
        dense FC1 GEMM; where it writes that GEMM's FP8 input itself (:attr:`.fp8.Fp8Ops.norm_writes_fp8`: delayed
        scaling) its output is listed last as an FP8 tensor, written 1 B an element instead of 2 (the gpu model's
        ``ops.NORM_OUT_OPS``)."""
        if self.cfg.norm_kernel == "composite":
            return self._composite_rms_norm(label + ".ln", deps)
        out = FP8_FWD if linear_input and self.norm_writes_fp8 else None
        return self.norm_kernel(label + ".ln", self.ln_rows, self.dims.hidden, deps, out)

    def layer_norm_bwd(self, label, deps=()):
        """The norm's backward: ``native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight,
        bias, output_mask)``, or for RMSNorm ``_fused_rms_norm_backward(grad_out, input, normalized_shape, rstd,
        weight, output_mask)`` (derivatives.yaml as above): no mean, no bias; the statistics in fp32."""
        if self.cfg.norm_kernel == "composite":
            return self._composite_rms_norm_bwd(label + ".ln", deps)
        return self.norm_kernel_bwd(label + ".ln", self.ln_rows, self.dims.hidden, deps)

    def norm_kernel(self, label, rows, width, deps=(), out=None):
        """One fused norm kernel of the model's kind (``dims.rms_norm``) over ``rows x width``, as
        :meth:`layer_norm` describes (also the query/key norms', :meth:`.rope.RopeOps.qk_norm_fwd`). ``out``: the
        type of the output where it is not ``--dtype`` (an FP8 GEMM input), listed as the last argument."""
        x, w = self._t(rows, width), self._t(width)
        written = [] if out is None else [((rows, width), out)]
        if self.dims.rms_norm:
            return self.ew("aten::_fused_rms_norm", label, [x, w] + written, deps)
        return self.ew("aten::native_layer_norm", label, [x, w, self._t(width)] + written, deps)

    def norm_kernel_bwd(self, label, rows, width, deps=()):
        """Its backward (:meth:`layer_norm_bwd`): the gradient and the input, the fp32 statistics, the weight
        (and LayerNorm's bias)."""
        f, g, x = "Tensor(float)", self._t(rows, width), self._t(rows, width)
        if self.dims.rms_norm:
            return self.ew("aten::_fused_rms_norm_backward", label, [g, x, ((rows, 1), f), self._t(width)], deps)
        return self.ew("aten::native_layer_norm_backward", label,
                       [g, x, ((rows, 1), f), ((rows, 1), f), self._t(width), self._t(width)], deps)

    def final_norm(self, mb, deps=()):
        """The model's final norm, between the last layer and the LM head, on the stage that holds the head:
        :meth:`layer_norm` (the same kind, rows and kernel timing as the layers' norms), on every position of the
        stage's output. Megatron-Core's ``TransformerBlock.final_layernorm`` (built only where ``post_process``,
        applied after the layers, outside ``_checkpointed_forward``; NVIDIA/Megatron-LM core_r0.14.0 32ad5c89
        ``megatron/core/transformer/transformer_block.py``); torchtitan's ``Transformer.norm`` (``h = self.norm(h)
        if self.norm else h``, outside the blocks ``apply_ac`` wraps; pytorch/torchtitan 9dec370
        ``torchtitan/models/llama/model.py``); Hugging Face's ``model.norm`` / GPT-2's ``ln_f`` (``hidden_states =
        self.ln_f(hidden_states)`` after the blocks, gradient checkpointing wraps each block only; huggingface/
        transformers 0010f602 ``src/transformers/models/gpt2/modeling_gpt2.py``); MaxText's
        ``decoder_norm`` (after the ``nn.remat``-ed layers; AI-Hypercomputer/maxtext b8bbe21c
        ``MaxText/layers/models.py``). Serving with ``--logits last``: vLLM's ``LlamaModel.forward`` ends with
        ``self.norm(hidden_states, residual)`` over every token of the batch and ``LogitsProcessor`` picks the
        sampled rows only afterwards (``_prune_hidden_states``), SGLang's ``LogitsProcessor`` likewise
        (``hidden_states[last_index]`` after the model's norm): the norm runs on all rows. Not recomputed by any
        recomputation (none of them checkpoints it). ``None`` with the forward's memory-bound nodes off."""
        if not self.cfg.ew_forward:
            return None
        return self.layer_norm(f"{self.fwd_tag}.final_norm.mb{mb}", deps)

    def final_norm_bwd(self, mb, deps=()):
        """The final norm's backward (:meth:`layer_norm_bwd`), after the LM head's; ``None`` without the
        memory-bound nodes."""
        if not self.cfg.ew:
            return None
        return self.layer_norm_bwd(f"bwd.final_norm.mb{mb}", deps)

    def _composite_rms_norm(self, label, deps=()):
        """``--norm-kernel composite``: a Python RMSNorm in eager PyTorch, ``(x.float() * rsqrt(mean(x.float()**2)
        + eps)).type_as(x) * weight`` (torchtitan's ``RMSNorm``, Hugging Face's ``LlamaRMSNorm``): one kernel per op,
        each reading and writing the whole ``r x h`` activation, most of them in fp32."""
        h, r, f = self.dims.hidden, self.ln_rows, "Tensor(float)"
        x, x32, stat = self._t(r, h), ((r, h), f), ((r, 1), f)
        self.ew("aten::copy_", label + ".float", [x, x32], deps)  # x.float()
        self.ew("aten::mul", label + ".square", [x32, x32])  # x.pow(2)
        self.ew("aten::mean", label + ".mean", [x32])  # (an r x 1 result)
        self.ew("aten::add", label + ".eps", [stat])
        self.ew("aten::rsqrt", label + ".rsqrt", [stat])
        self.ew("aten::mul", label + ".scale", [x32, stat])
        self.ew("aten::copy_", label + ".type_as", [x32, x])
        return self.ew("aten::mul", label + ".weight", [x, self._t(h)])

    def _composite_rms_norm_bwd(self, label, deps=()):
        """The backward autograd runs for :meth:`_composite_rms_norm`: the weight's product and its gradient, the
        casts, the scale's two products (the gradient of x and of the rsqrt, reduced per row), the square's and
        the mean's backward, and the two gradients of x added."""
        h, r, f = self.dims.hidden, self.ln_rows, "Tensor(float)"
        x, x32, stat = self._t(r, h), ((r, h), f), ((r, 1), f)
        self.ew("aten::mul", label + ".weight.dgrad", [x, self._t(h)], deps)
        self.ew("aten::mul", label + ".weight.wgrad", [x, x])
        self.ew("aten::sum", label + ".weight.wgrad.sum", [x])
        self.ew("aten::copy_", label + ".type_as.bwd", [x, x32])
        self.ew("aten::mul", label + ".scale.dx", [x32, stat])
        self.ew("aten::mul", label + ".scale.dr", [x32, x32])
        self.ew("aten::sum", label + ".scale.dr.sum", [x32])
        self.ew("aten::rsqrt", label + ".rsqrt.bwd", [stat])
        self.ew("aten::mul", label + ".square.bwd", [x32, stat])  # 2 x grad / h, broadcast from the mean's grad
        self.ew("aten::add", label + ".accumulate", [x32, x32])
        return self.ew("aten::copy_", label + ".float.bwd", [x32, x])
