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

    def attn_mask_fwd(self, lab, b, hq, q, c):
        """The scale, the causal mask and the padding mask on the ``b x hq x q x c`` scores, before the softmax
        (the scores are listed first: the output is theirs in size and type)."""
        sc = self._t(b, hq, q, c)
        self.ew("aten::div", lab + ".attn.scale", [sc])
        self.ew("aten::where", lab + ".attn.causal_mask", [sc, ((1, 1, q, c), BOOL)])
        return self.ew("aten::add", lab + ".attn.padding_mask", [sc, self._t(b, 1, 1, c)])

    def attn_mask_bwd(self, lab, b, hq, q, c):
        """Their backward, after the softmax's: the ``where``'s, then the scale's."""
        sc = self._t(b, hq, q, c)
        self.ew("aten::where", lab + ".attn.causal_mask", [sc, ((1, 1, q, c), BOOL)])
        return self.ew("aten::div", lab + ".attn.scale", [sc])
