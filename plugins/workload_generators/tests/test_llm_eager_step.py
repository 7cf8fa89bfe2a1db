"""torchtitan's eager step under ``--framework fsdp2`` (``llm.eager_step``): the fp32 loss, the ``repeat_kv``
copies of K and V and the foreach clipping and AdamW, by hand; absent without ``--framework fsdp2``."""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# one sequence of 128 tokens, 8 query heads and 4 KV heads of 32, a vocabulary of 1024
LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1024, seq_len=128, gated=True)
LOGITS = 128 * 1024  # elements of the logits
KV, KV_REPEATED = 128 * 4 * 32, 128 * 8 * 32  # elements of K (or V) before and after repeat_kv


def _nodes(tmp_path, name="t", **kw):
    cfg = LlmConfig(**{"dp": 2, "zero": 3, "framework": "fsdp2", "micro_batches": 1, **kw})
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _labelled(nodes, start):
    return [n for n in nodes if (n.attrs.get("label") or "").startswith(start)]


def test_the_loss_runs_in_fp32_each_way(tmp_path):
    # forward: the cast (read 2 B, write 4 B), the log-softmax in fp32 (read 4, write 4);
    # backward: nll_loss_backward's zero-filled fp32 gradient (write 4), the log-softmax backward in fp32 (read the
    # gradient and the output, write: 12 B), the cast back (read 4, write 2): 36 B per logit against 4 + 6 in bf16
    nodes = _nodes(tmp_path)
    fwd = _labelled(nodes, "fwd.head.mb0.cross_entropy")
    assert [(n.attrs["label"], n.name) for n in fwd] == [
        ("fwd.head.mb0.cross_entropy.float", "aten::copy_"), ("fwd.head.mb0.cross_entropy", "aten::_log_softmax")]
    assert [n.attrs["tensor_size"] for n in fwd] == [6 * LOGITS, 8 * LOGITS]
    bwd = _labelled(nodes, "bwd.head.mb0.cross_entropy")
    assert [n.name for n in bwd] == ["aten::zero_", "aten::_log_softmax_backward_data", "aten::copy_"]
    assert [n.attrs["tensor_size"] for n in bwd][1:] == [12 * LOGITS, 6 * LOGITS]
    # (a fill: the gpu model counts its one fp32 write, plugins/validation/tests/test_step_physics.py)
    assert (bwd[0].inputs_shapes, bwd[0].inputs_types) == ("[[128, 1024]]", "['Tensor(float)']")
    # a plain --zero 3 keeps the bf16 log-softmax each way
    plain = _nodes(tmp_path, "z", framework=None)
    assert [(n.name, n.attrs["tensor_size"]) for n in _labelled(plain, "fwd.head.mb0.cross_entropy")] == [
        ("aten::_log_softmax", 4 * LOGITS)]
    assert [(n.name, n.attrs["tensor_size"]) for n in _labelled(plain, "bwd.head.mb0.cross_entropy")] == [
        ("aten::_log_softmax_backward_data", 6 * LOGITS)]


def test_repeat_kv_copies_k_and_v_and_its_backward_sums_them(tmp_path):
    # each copy reads the 4-head tensor and writes the 8-head one in bf16: (16,384 + 32,768) x 2 B; the backward
    # reads the 8-head gradient and writes the 4-head sum, the same bytes
    each = (KV + KV_REPEATED) * 2
    nodes = _nodes(tmp_path, recompute_selective=True)
    by_label = {n.attrs.get("label"): n for n in nodes}
    for phase in ("fwd", "recompute", "bwd"):  # op SAC saves neither copy: the recomputation runs them again
        for t in "kv":
            node = by_label[f"{phase}.l0.mb0.repeat_kv.{t}"]
            assert node.name == ("aten::sum" if phase == "bwd" else "aten::copy_")
            # the copy: source then destination; the sum: the gradient then its reduced output (the gpu model
            # counts both as read and written once, plugins/validation/tests/test_step_physics.py)
            shapes = [[1, 128, 8, 32], [1, 128, 4, 32]] if phase == "bwd" else [[1, 128, 4, 32], [1, 128, 8, 32]]
            assert node.inputs_shapes == repr(shapes)
            if phase != "bwd":
                assert node.attrs["tensor_size"] == each
    ids = {label: n.id for label, n in by_label.items()}
    # after the rotation, before the attention; the sums before dK goes back through the rotation
    assert ids["fwd.l0.mb0.rope.k.type_as"] < ids["fwd.l0.mb0.repeat_kv.k"] < ids["fwd.l0.mb0.attn"]
    assert ids["bwd.l0.mb0.attn"] < ids["bwd.l0.mb0.repeat_kv.v"] < ids["bwd.l0.mb0.rope.q.type_as.bwd"]
    # multi-head attention (as many KV heads as query heads) and a plain --zero 3 copy nothing
    generate_llm(model_dims(**{**LLAMA, "kv_heads": 8}), LlmConfig(dp=2, zero=3, framework="fsdp2"), tmp_path / "m")
    assert not _labelled(read_rank_nodes(tmp_path / "m", 0), "fwd.l0.mb0.repeat_kv")
    assert not [n for n in _nodes(tmp_path, "z", framework=None) if ".repeat_kv." in (n.attrs.get("label") or "")]
    # nor with the memory-bound nodes off (--no-elementwise), as the loss and the optimizer
    assert not [n for n in _nodes(tmp_path, "e", elementwise=False) if ".repeat_kv." in (n.attrs.get("label") or "")]


def test_clipping_and_foreach_adamw_move_96_bytes_per_parameter(tmp_path):
    nodes = _nodes(tmp_path)
    opt = [n for n in nodes if (n.attrs.get("label") or n.name).startswith("optimizer.")]
    labels = [n.attrs.get("label") or n.name for n in opt]
    assert labels == ["optimizer.clip.norm", "optimizer.clip.norm_all_reduce", "optimizer.clip.scale",
                      "optimizer.adamw.weight_decay", "optimizer.adamw.exp_avg", "optimizer.adamw.exp_avg_sq.decay",
                      "optimizer.adamw.exp_avg_sq", "optimizer.adamw.denom.sqrt",
                      "optimizer.adamw.denom.bias_correction", "optimizer.adamw.denom.eps", "optimizer.adamw.update"]
    norm, reduce, scale, *adamw = opt
    params = scale.attrs["tensor_size"] // 8  # the clip scales every fp32 gradient in place: read 4 B, write 4 B
    assert params > 0 and scale.name == "aten::_foreach_mul_" and scale.attrs["tensor_size"] == 8 * params
    assert norm.name == "aten::_foreach_norm" and norm.inputs_shapes == f"[[[{params}]]]"
    assert reduce.type == T.COMM_COLL_NODE and reduce.attrs["comm_size"] == 4  # one fp32 scalar over the DP group
    # _multi_tensor_adamw: mul_ p (8) + lerp_ m, g (12) + mul_ v (8) + addcmul_ v, g, g (16) + sqrt v (8)
    # + div_ d (8) + add_ d (8) + addcdiv_ p, m, d (16) = 84 B per parameter
    assert [n.attrs["tensor_size"] // params for n in adamw] == [8, 12, 8, 16, 8, 8, 8, 16]
    assert sum(n.attrs["tensor_size"] for n in adamw) == 84 * params
    # the step ends with the update; every reduce-scatter of the step comes before the norm
    assert nodes[-1].attrs.get("label") == "optimizer.adamw.update"
    rs = {n.id for n in nodes if (n.attrs.get("label") or n.name).startswith("dp_rs.")}
    assert rs and rs <= set(norm.data_deps)
    # a plain --zero 3: one fused Adam node of 28 B per parameter (the same shard: p, g, m, v read, p, m, v written)
    plain = [n for n in _nodes(tmp_path, "z", framework=None) if n.name == "aten::_fused_adam_"]
    assert len(plain) == 1 and plain[0].attrs["tensor_size"] == 28 * params
