"""NeMo's squared ReLU (Nemotron's activation: ``torch.pow(torch.nn.functional.relu(x), 2)``, eager) is two kernels
forward and autograd's four backward (``pow_backward``: a copy for ``pow(1.0)``, the product with 2, the product
with the gradient; relu's ``threshold_backward``), where the fused GeLU is one each way."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

#: one layer, hidden 256, FFN 1024 (not gated), 128 tokens: the activation's tensor is 128 x 1024 bf16 (256 KiB)
GPT = dict(layers=1, hidden=256, heads=8, ffn_hidden=1024, vocab=1000, seq_len=128)
X = 128 * 1024 * 2


def _act(tmp_path, name, **kw):
    generate_llm(model_dims(**GPT), LlmConfig(dp=2, zero=1, **kw), tmp_path / name)
    return [(n.name, n.attrs["label"].split(".fc1.", 1)[1], n.attrs["tensor_size"])
            for n in read_rank_nodes(tmp_path / name, 0) if ".l0.mb0.fc1." in n.attrs.get("label", "")
            and n.attrs.get("num_ops", 0) == 0 and "fp8" not in n.attrs["label"]
            and "bias_grad" not in n.attrs["label"]]  # (the bias gradient: test_llm_bias_grad.py)


def test_squared_relu_runs_two_kernels_forward_and_four_backward(tmp_path):
    ops = _act(tmp_path, "sq", activation_kernel="squared-relu")
    # each reads its one or two bf16 tensors and writes one: 2 x 2 B forward, 2 + 2 + 3 + 3 x 2 B backward
    assert ops == [("aten::relu", "relu", 2 * X), ("aten::pow", "square", 2 * X),
                   ("aten::copy_", "square.bwd.pow1", 2 * X), ("aten::mul", "square.bwd.times_2", 2 * X),
                   ("aten::mul", "square.bwd", 3 * X), ("aten::threshold_backward", "relu.bwd", 3 * X)]
    assert sum(size for *_, size in ops) == 14 * X == 3_670_016  # against GeLU's 2 + 3 tensors: 5 x 262,144
    assert [name for name, *_ in _act(tmp_path, "gelu")] == ["aten::gelu", "aten::gelu_backward"]


def test_squared_relu_needs_a_non_gated_ffn(tmp_path):
    with pytest.raises(ConfigError, match="squared-relu is NeMo's squared ReLU"):
        generate_llm(model_dims(**GPT, gated=True), LlmConfig(activation_kernel="squared-relu"), tmp_path / "g")
