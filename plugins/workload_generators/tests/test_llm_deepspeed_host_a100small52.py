"""DeepSpeed ZeRO-3's step as the host runs it (``llm.deepspeed_step``, microsoft/DeepSpeed v0.7.0
``runtime/zero/stage3.py``): ``get_grad_norm_direct`` takes one ``.double().norm(2)`` per parameter tensor's gradient
partition, and the host waits (``host_waits``) at ``has_overflow``'s and the norm's ``.item()`` and at the persistent
parameters' ``torch.cuda.synchronize()``. By hand on a two-layer GPT-2-style model over DP 2."""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.deepspeed_step import layer_weight_tensors, parameter_tensors

# GPT-2-style (LayerNorm, biases, GeLU, learned positions, untied head): h 64, 4 heads, FFN 256, vocabulary 512,
# 32 tokens, 2 layers
GPT = dict(layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256, vocab=512, seq_len=32, gated=False)
# one layer's tensors, Hugging Face GPT-2's order: c_attn (64 x 192), c_proj (64 x 64), mlp.c_fc (64 x 256),
# mlp.c_proj (256 x 64); ln_1 and ln_2 (weight, bias); the four Conv1D biases (192, 64, 256, 64)
LAYER = [12_288, 4_096, 16_384, 16_384, 64, 64, 64, 64, 192, 64, 256, 64]
# wte (512 x 64), wpe (32 x 64), the layers, ln_f (weight, bias), the untied LM head (512 x 64)
TENSORS = [32_768, 2_048] + LAYER * 2 + [64, 64, 32_768]


def _nodes(tmp_path, name="t", **kw):
    cfg = LlmConfig(**{"dp": 2, "zero": 3, "framework": "deepspeed", "dtype": "fp16", **kw})
    generate_llm(model_dims(**GPT), cfg, tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _label(n):
    return n.attrs.get("label") or n.name


def test_the_parameter_tensors_follow_hugging_faces_layouts():
    gpt = model_dims(**GPT)
    assert parameter_tensors(gpt, [0, 1], final=True, first=True) == TENSORS
    assert parameter_tensors(gpt, [1], final=False) == LAYER
    tied = model_dims(**{**GPT, "tied_embeddings": True})
    assert parameter_tensors(tied, [], final=True) == [64, 64]  # (the head is wte)
    # Llama-style: q, k, v, o apart (2 KV heads of 16: 64 x 32 each), gate, up and down (64 x 256 each)
    llama = model_dims(**{**GPT, "kv_heads": 2, "gated": True, "rms_norm": True, "rotary": True})
    assert layer_weight_tensors(llama) == [4_096, 2_048, 2_048, 4_096, 16_384, 16_384, 16_384]
    assert parameter_tensors(llama, [0], final=False) == layer_weight_tensors(llama) + [64, 64]


def test_the_norm_is_taken_one_parameter_tensor_at_a_time(tmp_path):
    nodes = _nodes(tmp_path)
    norm = [n for n in nodes if _label(n).startswith("optimizer.ds_norm.")]
    halves = [-(-n // 2) for n in TENSORS]  # each tensor's gradient partition over DP 2
    assert len(halves) == 29
    # per tensor: .double() (read 2 B, write 8 B), then .norm(2) (read 8 B)
    assert [n.attrs["tensor_size"] for n in norm[:-3]] == [b for k in halves for b in (10 * k, 8 * k)]
    assert [_label(n) for n in norm[:2]] == ["optimizer.ds_norm.double.0", "optimizer.ds_norm.0"]
    # then torch.stack of the 29 norms, torch.pow, torch.sum (fp64 scalars)
    assert [(_label(n), n.attrs["tensor_size"]) for n in norm[-3:]] == [
        ("optimizer.ds_norm.stack", 2 * 29 * 8), ("optimizer.ds_norm.pow", 2 * 29 * 8),
        ("optimizer.ds_norm.sum", 29 * 8 + 8)]
    # all on the compute chain, after the overflow all-reduce and before the norm's
    opt = [n for n in nodes if _label(n).startswith("optimizer.")]
    assert _label(opt[0]) == "optimizer.ds_overflow_all_reduce"
    assert _label(opt[1 + len(norm)]) == "optimizer.ds_norm_all_reduce"
    for a, b in zip(opt, opt[1:]):
        assert a.id in b.data_deps


def test_the_host_waits_at_the_overflow_flag_the_norm_and_the_persistent_gathers(tmp_path):
    nodes = _nodes(tmp_path)
    waited = [n for n in nodes if n.attrs.get("host_waits")]
    # has_overflow's overflow_gpu[0].item(), get_grad_norm_direct's total_norm_cuda.item(), and
    # _allgather_params_coalesced's torch.cuda.synchronize() after the last of the 19 persistent all-gathers
    # (ln_f's bias: 64 elements, 2 B each, a 64 B share per rank)
    assert [(_label(n), n.attrs["comm_type"], n.attrs["comm_size"]) for n in waited] == [
        ("optimizer.ds_overflow_all_reduce", T.ALL_REDUCE, 1), ("optimizer.ds_norm_all_reduce", T.ALL_REDUCE, 8),
        ("optimizer.ds_persistent_ag.18", T.ALL_GATHER, 64)]
    assert waited[-1].id == max(n.id for n in nodes if _label(n).startswith("optimizer."))
    # no other framework's step waits there
    for name, kw in (("z3", {"framework": None}), ("fsdp2", {"framework": "fsdp2"}), ("ds2", {"zero": 2})):
        assert not [n for n in _nodes(tmp_path, name, **kw) if n.attrs.get("host_waits")], name
