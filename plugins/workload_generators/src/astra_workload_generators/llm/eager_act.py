"""FFN activations that eager PyTorch runs op by op where the generic step has one fused kernel each way
(``--activation-kernel``): Hugging Face's ``gelu_new`` (``eager``, :mod:`.hf_eager`) and NeMo's squared ReLU
(``squared-relu``).

NeMo's squared ReLU, the Nemotron models' activation (NVIDIA/NeMo v2.2.0, 7192a2c9:
``nemo/collections/llm/fn/activation.py`` ``squared_relu(x)``: ``torch.pow(torch.nn.functional.relu(x), 2)``, its
``@torch.jit.script`` commented out; ``gpt/model/nemotron.py`` ``NemotronConfig.activation_func = squared_relu``
with no ``bias_activation_fusion``, so Megatron-Core's ``MLP.forward`` calls it as it is):

- forward: ``relu`` and ``pow``, two kernels, each reading and writing one ``rows x cols`` tensor;
- backward, by autograd: ``pow_backward`` (pytorch/pytorch ``torch/csrc/autograd/FunctionsManual.cpp``:
  ``grad * (exp * self.pow(exp - 1))``), whose ``self.pow(1.0)`` is a copy (ATen ``aten/src/ATen/native/Pow.cpp``
  ``pow_Tensor_Scalar_out``: ``else if (exp.equal(1.0)) out.copy_(base)``), then the product with the scalar 2,
  then with the gradient; then relu's ``threshold_backward(grad, result, 0)`` (``tools/autograd/derivatives.yaml``):
  four kernels.
"""

from __future__ import annotations


class EagerActOps:
    """Eager activations of a non-gated FFN (a stage-builder mixin)."""

    def eager_act_fwd(self, label, rows, cols):
        """``--activation-kernel eager`` or ``squared-relu`` on this rank's ``rows x cols``."""
        if self.cfg.activation_kernel == "squared-relu":
            x = self._t(rows, cols)
            self.ew("aten::relu", label + ".relu", [x])
            return self.ew("aten::pow", label + ".square", [x])
        return self.gelu_new_fwd(label + ".gelu", rows, cols)

    def eager_act_bwd(self, label, rows, cols):
        """Its backward (autograd's kernels)."""
        if self.cfg.activation_kernel == "squared-relu":
            x = self._t(rows, cols)
            self.ew("aten::copy_", label + ".square.bwd.pow1", [x, x])  # relu(x).pow(1.0): a copy
            self.ew("aten::mul", label + ".square.bwd.times_2", [x])
            self.ew("aten::mul", label + ".square.bwd", [x, x])  # grad * 2 relu(x)
            return self.ew("aten::threshold_backward", label + ".relu.bwd", [x, x])
        return self.gelu_new_bwd(label + ".gelu", rows, cols)
