"""Hugging Face GPT-2's eager kernels where the generic step has one fused kernel: the ``gelu_new`` activation
(``--activation-kernel eager``) and the attention's scale and masks before its softmax (``--softmax-kernel eager``,
with ``--attention unfused``). Each op is its own memory-bound kernel over the whole tensor, forward and backward.

Sources:

- ``gelu_new``: huggingface/transformers ``src/transformers/activations.py`` (00e12e7c), ``NewGELUActivation``:
  ``0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))``, the
  ``ACT2FN["gelu_new"]`` that GPT-2's ``activation_function`` names: ``pow``, four products or sums with a scalar,
  ``tanh``, the sum with the input and the final product, eight kernels.
- its backward, by autograd (pytorch/pytorch ``torch/csrc/autograd/FunctionsManual.cpp`` at 002ca671):
  ``mul_tensor_backward`` (``grad * other``) twice for the final product and once for each product with a scalar,
  ``tanh_backward(grad, result)``, ``pow_backward`` (``grad * (exp * self.pow(exp - 1))``: three kernels); the sums
  pass the gradient through; the input's three gradients (from ``pow``, the sum and ``0.5 * input``) are added
  (two additions).
- the attention: ``src/transformers/models/gpt2/modeling_gpt2.py`` (0010f602), ``GPT2Attention._attn``:
  ``attn_weights / torch.full([], value.size(-1) ** 0.5, ...)``, ``torch.where(causal_mask, attn_weights,
  mask_value)``, ``attn_weights + attention_mask`` (when the model is given a padding mask, as Hugging Face's data
  collators and the registry's DeepSpeed benchmark pass one), then the softmax; the backward runs
  ``div_tensor_self_backward`` (``grad / other``) and the ``where``'s (``tools/autograd/derivatives.yaml``,
  ``where.self``: ``self: where(condition, grad, 0)``); the addition passes the gradient through.
- the attention's head copies (same file, ``_split_heads``, ``_attn``, ``_merge_heads``): ``c_attn``'s output is
  ``split`` into Q, K and V, each ``view``-ed to ``b x s x heads x d`` and ``permute``-d to ``b x heads x s x d``
  (strides ``s*3h, d, 3h, 1``), then multiplied by ``torch.matmul``. For 4-D operands ATen's ``matmul``
  (pytorch/pytorch ``aten/src/ATen/native/LinearAlgebra.cpp``, ``_matmul_impl``) runs
  ``tensor.expand(...).reshape({batch * heads, n, m})`` and ``bmm``: batch and heads fold into a view only when the
  batch's stride is ``heads`` times the heads' (``d``); here it is ``s * 3h``, so with more than one sequence
  ``reshape`` copies Q, K^T and V (one ``b x s x h`` tensor each), and ``_merge_heads``' ``permute(0, 2, 1,
  3).contiguous()`` copies the attention output back to ``b x s x h`` at any batch size. Backward: the output
  gradient, permuted by ``_merge_heads``' backward, is reshaped (copied, with more than one sequence) for the two
  ``bmm`` backward products; ``_split_heads``' ``view`` backward reshapes each of dQ, dK and dV from the permuted
  layout (three copies, at any batch size), and ``split``'s backward (``split_with_sizes_backward``) is
  ``at::cat`` of the three into the ``b x s x 3h`` gradient of ``c_attn``'s output. An AOTAutograd graph of GPT-2
  at one sequence shows the same ``clone`` / ``cat`` nodes (the one-sequence reshapes are views there).
"""

from __future__ import annotations

BOOL = "Tensor(bool)"


class HfEagerOps:
    """Hugging Face's eager ``gelu_new`` and attention masking (a stage-builder mixin)."""

    def gelu_new_fwd(self, label, rows, cols):
        """``NewGELUActivation`` on ``rows x cols``: eight kernels in ``--dtype``."""
        x = self._t(rows, cols)
        self.ew("aten::pow", label + ".pow", [x])
        self.ew("aten::mul", label + ".cube_scale", [x])  # 0.044715 * x^3
        self.ew("aten::add", label + ".inner", [x, x])  # x + ...
        self.ew("aten::mul", label + ".sqrt_2_pi", [x])
        self.ew("aten::tanh", label + ".tanh", [x])
        self.ew("aten::add", label + ".one_plus", [x])  # 1.0 + tanh
        self.ew("aten::mul", label + ".half_x", [x])  # 0.5 * x
        return self.ew("aten::mul", label + ".out", [x, x])

    def gelu_new_bwd(self, label, rows, cols):
        """Its backward: eleven kernels in ``--dtype``."""
        x = self._t(rows, cols)
        self.ew("aten::mul", label + ".out.dhalf_x", [x, x])  # grad * (1 + tanh)
        self.ew("aten::mul", label + ".out.dtanh", [x, x])  # grad * 0.5x
        self.ew("aten::mul", label + ".half_x.bwd", [x])
        self.ew("aten::tanh_backward", label + ".tanh.bwd", [x, x])
        self.ew("aten::mul", label + ".sqrt_2_pi.bwd", [x])
        self.ew("aten::mul", label + ".cube_scale.bwd", [x])
        self.ew("aten::pow", label + ".pow.bwd.square", [x])
        self.ew("aten::mul", label + ".pow.bwd.times_3", [x])
        self.ew("aten::mul", label + ".pow.bwd", [x, x])
        self.ew("aten::add", label + ".accumulate", [x, x])
        return self.ew("aten::add", label + ".accumulate2", [x, x])

    def attn_heads_fwd(self, lab, b, hq, q, c):
        """``torch.matmul``'s copies of Q, K^T and V (with more than one sequence) and ``_merge_heads``' copy of
        the output, each ``b x heads x tokens x d`` in ``--dtype``: read and written (``copy_``). Emitted with the
        masks, between the two ``bmm`` of the same stream (the step's time is the same as where PyTorch runs them)."""
        d = self.dims.head_dim
        names = (("q", q), ("k", c), ("v", c)) if b > 1 else ()
        for name, rows in names + (("merge_heads", q),):
            t = self._t(b, hq, rows, d)
            self.ew("aten::copy_", f"{lab}.attn.heads_copy.{name}", [t, t])

    def attn_heads_bwd(self, lab, b, hq, q, c):
        """Their backward: the output gradient reshaped for the ``bmm`` backward (a copy with more than one
        sequence), dQ, dK and dV copied from the heads' layout back to ``b x tokens x h`` (three copies), and
        ``split``'s backward joining the three (``aten::cat``: read them, write ``b x tokens x 3h``)."""
        d = self.dims.head_dim
        names = (("out_grad", q),) if b > 1 else ()
        for name, rows in names + (("dq", q), ("dk", c), ("dv", c)):
            t = self._t(b, hq, rows, d)
            self.ew("aten::copy_", f"{lab}.attn.heads_copy.{name}", [t, t])
        return self.ew("aten::cat", f"{lab}.attn.split_backward",
                       [[self._t(b, q, hq * d), self._t(b, c, hq * d), self._t(b, c, hq * d)]])

    def attn_mask_fwd(self, lab, b, hq, q, c):
        """The scale, the causal mask and the padding mask on the ``b x hq x q x c`` scores, before the softmax
        (the scores are listed first: the output is theirs in size and type), after :meth:`attn_heads_fwd`."""
        self.attn_heads_fwd(lab, b, hq, q, c)
        sc = self._t(b, hq, q, c)
        self.ew("aten::div", lab + ".attn.scale", [sc])
        self.ew("aten::where", lab + ".attn.causal_mask", [sc, ((1, 1, q, c), BOOL)])
        return self.ew("aten::add", lab + ".attn.padding_mask", [sc, self._t(b, 1, 1, c)])

    def attn_mask_bwd(self, lab, b, hq, q, c):
        """Their backward, after the softmax's: the ``where``'s, then the scale's; then :meth:`attn_heads_bwd`."""
        sc = self._t(b, hq, q, c)
        self.ew("aten::where", lab + ".attn.causal_mask", [sc, ((1, 1, q, c), BOOL)])
        self.ew("aten::div", lab + ".attn.scale", [sc])
        return self.attn_heads_bwd(lab, b, hq, q, c)
