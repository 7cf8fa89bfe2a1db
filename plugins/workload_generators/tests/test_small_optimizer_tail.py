"""Megatron-Core's optimizer step around Adam (Megatron-LM core_r0.14.0): every step starts with
``zero_grad_buffer()`` (a memset of the whole gradient buffer; emitted at the step's end), and around Adam the distributed optimizer copies the
gradients to fp32 when they are kept in --dtype, takes the gradient norm for clipping (read the fp32 shard, an
all-reduce of one fp32 over DP), and after Adam writes the fp32 shard back into the parameters (a copy to --dtype,
or Transformer Engine's FP8 cast with --fp8-params). Only in a Megatron step: FSDP2/torchtitan and DeepSpeed keep
their own."""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

#: one layer, hidden 256 (4 heads), FFN 1024, vocabulary 1000 (padded to 1024), no biases counted below
DIMS = dict(layers=1, hidden=256, heads=4, ffn_hidden=1024, vocab=1000, seq_len=64)


def _nodes(tmp_path, name, **kw):
    cfg = {"dp": 4, "zero": 1, "micro_batches": 2}
    cfg.update(kw)
    generate_llm(model_dims(**DIMS), LlmConfig(**cfg), tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _by_label(nodes):
    return {n.attrs.get("label", n.name): n for n in nodes}


def _bytes(node):
    from astra_gpu_model.ops import classify, node_io
    return classify(node.name, *node_io(node)).nbytes


def test_zero_1_bf16_step_hand_computed(tmp_path):
    nodes = _nodes(tmp_path, "z1")
    by = _by_label(nodes)
    adam = by["optimizer.adam"]
    shard = adam.attrs["tensor_size"] // 28  # this rank's quarter of the parameters
    # the whole gradient buffer (ZeRO-1 keeps it whole) is 4 x the shard, rounded up; fp32 main gradients
    zero = by["zero_grad_buffer"]
    whole = zero.attrs["tensor_size"] // 4
    assert zero.name == "aten::zero_" and zero.inputs_types == "['Tensor(float)']"
    assert zero.inputs_shapes == f"[[{whole}]]" and -(-whole // 4) == shard
    assert _bytes(zero) == zero.attrs["tensor_size"] == 4 * whole  # a memset: writes only
    # Megatron's next step starts with it: emitted after Adam, before the copy back, on the compute chain
    assert by["optimizer.adam"].id in zero.data_deps
    # before Adam: the norm over the fp32 shard (read 4 B each), its all-reduce (one fp32) over DP, no fp32 copy
    norm = by["optimizer.clip.norm"]
    assert norm.name == "aten::linalg_vector_norm" and _bytes(norm) == norm.attrs["tensor_size"] == 4 * shard
    reduce = by["optimizer.clip.norm_all_reduce"]
    assert (reduce.type, reduce.attrs["comm_type"], reduce.attrs["comm_size"]) == (T.COMM_COLL_NODE, T.ALL_REDUCE, 4)
    assert reduce.id in adam.data_deps and "optimizer.main_grads" not in by
    # every gradient reduce-scatter comes before the norm
    rs = {n.id for n in nodes if n.name.startswith("dp_rs.")}
    assert rs and rs <= set(norm.data_deps)
    # after Adam: the shard copied back into the bf16 parameters (read 4, write 2 B), then the ZeRO-1 gathers
    back = by["optimizer.params"]
    assert back.name == "aten::copy_" and _bytes(back) == back.attrs["tensor_size"] == 6 * shard
    assert zero.id in back.data_deps
    # the last compute node: the ZeRO-1 all-gathers of the updated parameters wait on it
    assert max(n.id for n in nodes if n.type == T.COMP_NODE) == back.id
    gathers = [n for n in nodes if n.name.startswith("dp_ag.")]
    assert gathers and all(back.id in n.data_deps or n.data_deps[0] in {g.id for g in gathers} for n in gathers)


def test_bf16_gradients_are_copied_to_fp32_first(tmp_path):
    by = _by_label(_nodes(tmp_path, "same", grad_buffer="same"))
    shard = by["optimizer.adam"].attrs["tensor_size"] // 28
    copy = by["optimizer.main_grads"]  # shard_model_grad.float(): read 2, write 4 B
    assert copy.name == "aten::copy_" and _bytes(copy) == 6 * shard
    assert copy.id in by["optimizer.clip.norm"].data_deps
    # the gradient buffer is bf16: 2 B per element
    assert by["zero_grad_buffer"].inputs_types == "['Tensor(c10::BFloat16)']"


def test_fp8_params_are_cast_back_with_their_amax_under_current_scaling(tmp_path):
    by = _by_label(_nodes(tmp_path, "cs", gemm_dtype="fp8", fp8_recipe="current", fp8_params=True))
    shard = by["optimizer.adam"].attrs["tensor_size"] // 28
    cast = by["optimizer.params_fp8"]  # the amax (read 4), then the cast (read 4, write 1)
    assert cast.name == "transformer_engine::quantize" and cast.attrs["tensor_size"] == 9 * shard
    by = _by_label(_nodes(tmp_path, "ds", gemm_dtype="fp8", fp8_params=True))
    assert by["optimizer.params_fp8"].attrs["tensor_size"] == 5 * shard


def test_a_single_gpu_has_no_norm_all_reduce_and_other_frameworks_keep_their_step(tmp_path):
    by = _by_label(_nodes(tmp_path, "one", dp=1, zero=0, micro_batches=1))
    assert "optimizer.clip.norm" in by and "optimizer.clip.norm_all_reduce" not in by
    for name, kw in (("fsdp2", {"zero": 3, "framework": "fsdp2"}), ("z3", {"zero": 3}),
                     ("ds", {"zero": 3, "framework": "deepspeed"}), ("noew", {"elementwise": False})):
        labels = set(_by_label(_nodes(tmp_path, name, **kw)))
        assert not labels & {"zero_grad_buffer", "optimizer.params", "optimizer.params_fp8"}, name


def test_with_overlapped_parameter_gathers_the_memset_starts_the_step(tmp_path):
    """--overlap-param-gather: the step starts with the ZeRO-1 all-gathers of the updated parameters, and the
    memset runs first on the compute chain while the first layer waits for its gather (as Megatron's train_step
    zeroes the buffer before the forward); Adam is then followed by the copy back only."""
    nodes = _nodes(tmp_path, "ovl", overlap_param_gather=True)
    by = _by_label(nodes)
    first = next(n for n in nodes if n.type == T.COMP_NODE)
    assert first.attrs["label"] == "zero_grad_buffer" and not first.data_deps
    assert by["optimizer.adam"].id in by["optimizer.params"].data_deps
    assert [n.attrs["label"] for n in nodes if n.type == T.COMP_NODE][-2:] == ["optimizer.adam", "optimizer.params"]


def test_without_the_distributed_optimizer_the_norm_is_not_reduced_over_dp(tmp_path):
    """ZeRO 0: every DP rank holds the whole gradients after their all-reduce, so Megatron-Core reduces the squared
    norm over the model-parallel group only (its grad-stats group), not over DP; ZeRO 1 shards them over DP."""
    plain = _by_label(_nodes(tmp_path, "z0", dp=4, zero=0, micro_batches=1))
    assert "optimizer.clip.norm" in plain and "optimizer.clip.norm_all_reduce" not in plain
    sharded = _by_label(_nodes(tmp_path, "z1", dp=4, zero=1, micro_batches=1))
    assert sharded["optimizer.clip.norm_all_reduce"].attrs["comm_size"] == 4
