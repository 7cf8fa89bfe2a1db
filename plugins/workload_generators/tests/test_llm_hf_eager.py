"""Hugging Face GPT-2's eager kernels (``llm.hf_eager``): ``gelu_new`` as eight kernels forward and eleven backward
(``--activation-kernel eager``), and the attention's scale, causal mask and padding mask before its softmax
(``--softmax-kernel eager``) with ``torch.matmul``'s copies of the permuted heads around it, by hand; absent by
default."""

from __future__ import annotations

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, LlmSpec, generate_llm, model_dims

# GPT-2-style: h 64, 4 heads of 16, FFN 256, 2 sequences of 32 tokens, fp16
GPT = dict(layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256, vocab=512, seq_len=32, gated=False)
ACT = 2 * 32 * 256  # elements of the FFN activation (2 x 32 tokens x 256)
SCORES = 2 * 4 * 32 * 32  # elements of the attention scores (b x heads x q x k)


def _nodes(tmp_path, name="t", **kw):
    cfg = LlmConfig(**{"dtype": "fp16", "micro_batch_size": 2, "attention": "unfused", **kw})
    generate_llm(model_dims(**GPT), cfg, tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _labelled(nodes, start):
    return [n for n in nodes if (n.attrs.get("label") or "").startswith(start)]


def test_gelu_new_is_eight_kernels_forward_and_eleven_backward(tmp_path):
    # forward: pow, x 0.044715, + x (reads two), x sqrt(2/pi), tanh, 1 +, 0.5 x, the product (reads two): 4 B per
    # element read-and-write each, 6 B for the two that read two tensors: 36 B per element (the fused GeLU: 4 + bias)
    nodes = _nodes(tmp_path, activation_kernel="eager")
    fwd = _labelled(nodes, "fwd.l0.mb0.fc1.gelu")
    assert [(n.attrs["label"].split("gelu.")[1], n.name) for n in fwd] == [
        ("pow", "aten::pow"), ("cube_scale", "aten::mul"), ("inner", "aten::add"), ("sqrt_2_pi", "aten::mul"),
        ("tanh", "aten::tanh"), ("one_plus", "aten::add"), ("half_x", "aten::mul"), ("out", "aten::mul")]
    assert [n.attrs["tensor_size"] // ACT for n in fwd] == [4, 4, 6, 4, 4, 4, 4, 6]
    # backward: the product's two gradients (6 B each), 0.5's (4), tanh_backward (6), the two scalars' (4, 4),
    # pow_backward's x^2, x 3 and x grad (4, 4, 6), the input's three gradients added (6, 6): 56 B per element
    bwd = _labelled(nodes, "bwd.l0.mb0.fc1.gelu")
    assert [n.name for n in bwd] == ["aten::mul", "aten::mul", "aten::mul", "aten::tanh_backward", "aten::mul",
                                     "aten::mul", "aten::pow", "aten::mul", "aten::mul", "aten::add", "aten::add"]
    assert [n.attrs["tensor_size"] // ACT for n in bwd] == [6, 6, 4, 6, 4, 4, 4, 4, 6, 6, 6]
    assert sum(n.attrs["tensor_size"] for n in bwd) == 56 * ACT
    # the default: one fused kernel each way
    plain = _nodes(tmp_path, "p")
    assert [n.name for n in _labelled(plain, "fwd.l0.mb0.fc1.gelu")] == ["aten::gelu"]
    assert [n.name for n in _labelled(plain, "bwd.l0.mb0.fc1.gelu")] == ["aten::gelu_backward"]


def test_the_attention_scales_and_masks_its_scores_before_the_softmax(tmp_path):
    # forward: the division (read and write 2 B per score), the causal where (read 2 B and the 32 x 32 bool mask,
    # write 2 B), the padding mask's addition (read 2 B and the 2 x 1 x 1 x 32 mask, write 2 B); backward after the
    # softmax's: the where's and the division's
    nodes = _nodes(tmp_path, softmax_kernel="eager")
    labels = [n.attrs.get("label") for n in nodes]
    fwd = [n for n in _labelled(nodes, "fwd.l0.mb0.attn.") if ".heads_copy." not in n.attrs["label"]]
    assert (fwd[0].attrs["label"], fwd[0].name) == ("fwd.l0.mb0.attn.qk", "aten::bmm")
    assert [(n.attrs["label"].split("attn.")[1], n.name, n.attrs["tensor_size"]) for n in fwd][1:5] == [
        ("scale", "aten::div", 4 * SCORES),
        ("causal_mask", "aten::where", 4 * SCORES + 32 * 32), ("padding_mask", "aten::add", 4 * SCORES + 2 * 2 * 32),
        ("softmax", "aten::_softmax", 4 * SCORES)]
    i = labels.index
    assert i("bwd.l0.mb0.attn.softmax") < i("bwd.l0.mb0.attn.causal_mask") < i("bwd.l0.mb0.attn.scale") \
        < i("bwd.l0.mb0.attn.dq")
    by = {n.attrs.get("label"): n for n in nodes}
    assert by["bwd.l0.mb0.attn.causal_mask"].attrs["tensor_size"] == 4 * SCORES + 32 * 32
    assert by["bwd.l0.mb0.attn.scale"].attrs["tensor_size"] == 4 * SCORES
    # the default: Megatron's fused scale-mask-softmax alone
    plain = _nodes(tmp_path, "p")
    assert not _labelled(plain, "fwd.l0.mb0.attn.scale") and not _labelled(plain, "bwd.l0.mb0.attn.causal_mask")


def test_the_attention_copies_its_heads_around_torch_matmul(tmp_path):
    # b = 2 sequences: torch.matmul's reshape of the permuted Q, K^T and V cannot fold batch and heads into a view,
    # so each is copied, and _merge_heads copies the output: each tensor 2 x 4 heads x 32 x 16 = 4096 fp16
    # elements, read and written: 2 x 4096 x 2 B = 16,384 B
    one = 2 * (2 * 4 * 32 * 16) * 2
    nodes = _nodes(tmp_path, softmax_kernel="eager")
    fwd = _labelled(nodes, "fwd.l0.mb0.attn.heads_copy.")
    assert [(n.attrs["label"].rsplit(".", 1)[1], n.name, n.attrs["tensor_size"]) for n in fwd] == [
        ("q", "aten::copy_", one), ("k", "aten::copy_", one), ("v", "aten::copy_", one),
        ("merge_heads", "aten::copy_", one)]
    # backward: the output gradient reshaped for the bmm backward, dQ, dK, dV back to b x s x h (one copy each),
    # and split's backward: cat of the three 2 x 32 x 64 gradients (read 3 x 8,192 B, write 24,576 B = 49,152 B)
    bwd = _labelled(nodes, "bwd.l0.mb0.attn.heads_copy.")
    assert [(n.attrs["label"].rsplit(".", 1)[1], n.attrs["tensor_size"]) for n in bwd] == [
        ("out_grad", one), ("dq", one), ("dk", one), ("dv", one)]
    cat = _labelled(nodes, "bwd.l0.mb0.attn.split_backward")
    assert [(n.name, n.attrs["tensor_size"]) for n in cat] == [("aten::cat", 2 * 3 * (2 * 32 * 64) * 2)]
    # the recomputation (none here) aside, a step adds 8 x 16,384 + 49,152 = 180,224 B a layer
    assert sum(n.attrs["tensor_size"] for n in fwd + bwd + cat) == 180_224
    # one sequence: the reshapes are views; the merge, dQ, dK, dV copies and the cat remain (1 x 4 x 32 x 16 x 2 x 2
    # = 8,192 B a copy; the cat 2 x 3 x 2,048 x 2 = 24,576 B)
    single = _nodes(tmp_path, "one", softmax_kernel="eager", micro_batch_size=1)
    sizes = [(n.attrs["label"].split("attn.")[1], n.attrs["tensor_size"])
             for n in _labelled(single, "fwd.l0.mb0.attn.") + _labelled(single, "bwd.l0.mb0.attn.")
             if ".heads_copy." in n.attrs["label"] or "split_backward" in n.attrs["label"]]
    assert sizes == [("heads_copy.merge_heads", 8192), ("heads_copy.dq", 8192), ("heads_copy.dk", 8192),
                     ("heads_copy.dv", 8192), ("split_backward", 24576)]
    # the default (Megatron's attention on its [s, b, h] views): no copies
    plain = _nodes(tmp_path, "p")
    assert not [n for n in plain if ".heads_copy." in (n.attrs.get("label") or "")]


def test_the_flags_are_checked():
    with pytest.raises(ConfigError, match="--activation-kernel eager is Hugging Face's gelu_new"):
        LlmSpec.from_argv(["--preset", "llama3-8b", "--activation-kernel", "eager"]).resolve(on_warning=print)
    with pytest.raises(ConfigError, match="--softmax-kernel eager .* needs --attention unfused"):
        LlmSpec.from_argv(["--preset", "gpt3-13b", "--softmax-kernel", "eager"]).resolve(on_warning=print)
    with pytest.raises(ConfigError, match="--softmax-kernel"):
        LlmSpec.from_argv(["--preset", "gpt3-13b", "--softmax-kernel", "sometimes"])


def test_the_command_line_flags(tmp_path, capsys):
    base = ["workload", "llm", "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "4", "--ffn-hidden",
            "256", "--vocab", "512", "--seq-len", "32", "--dp", "2", "--attention", "unfused"]
    assert main([*base, "--activation-kernel", "eager", "--softmax-kernel", "eager", "-o", str(tmp_path / "w")]) == 0
    nodes = read_rank_nodes(tmp_path / "w", 0)
    assert len(_labelled(nodes, "fwd.l0.mb0.fc1.gelu.")) == 8
    assert len(_labelled(nodes, "fwd.l0.mb0.attn.padding_mask")) == 1
    with pytest.raises(SystemExit) as stop:
        main([*base, "--activation-kernel", "fast", "-o", str(tmp_path / "x")])
    assert stop.value.code != 0
    assert "--activation-kernel" in capsys.readouterr().err
