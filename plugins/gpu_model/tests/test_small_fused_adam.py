"""A fused Adam/AdamW (``torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, ...)``) reads its four lists and
writes three back: the parameters and both moments, 28 bytes per fp32 parameter. That is what fit/measure_gpu.py
timed the H200's rate on (``adamw_fused``, ``bytes=28 * params``), so a node of N parameters takes what the
measurement took, not 20/28 of it (the count before: read everything, write only the parameters)."""

from __future__ import annotations

from astra_gpu_model.ops import classify

#: two fp32 tensors of 1,000 and 24 elements in each of the four lists
LISTS = "[[[1000], [24]], [[1000], [24]], [[1000], [24]], [[1000], [24]]]"


def _types(n):
    return repr(["GenericList[Tensor(float),Tensor(float)]"] * n)


def test_fused_adam_writes_the_parameters_and_both_moments():
    op = classify("aten::_fused_adam_", LISTS, _types(4), "")
    # read 4 x 1,024 x 4 = 16,384 bytes, write 3 x 4,096 = 12,288: 28,672 = 28 per parameter
    assert op.kind == "memory" and op.nbytes == 16_384 + 12_288 == 28 * 1024
    assert classify("aten::_fused_adamw_", LISTS, _types(4), "").nbytes == 28 * 1024
    # an in-place foreach op still writes only its first list (read 2 x 4,096, write 4,096)
    assert classify("aten::_foreach_mul_", "[[[1000], [24]], [[1000], [24]]]", _types(2), "").nbytes == 3 * 4096


def test_fused_adam_of_a_real_trace_with_empty_max_exp_avg_sqs_and_step_counters():
    # PyTorch records max_exp_avg_sqs (empty without amsgrad) and state_steps (one fp32 scalar each) as lists too
    shapes = "[[[1000], [24]], [[1000], [24]], [[1000], [24]], [[1000], [24]], [], [[], []]]"
    op = classify("aten::_fused_adam_", shapes, repr(["GenericList[Tensor(float),Tensor(float)]"] * 4
                                                     + ["GenericList[]", "GenericList[Tensor(float),Tensor(float)]"]),
                  "")
    # the two step scalars are read (8 bytes); params, exp_avgs, exp_avg_sqs written
    assert op.nbytes == 28 * 1024 + 8


def test_the_generator_counts_what_the_gpu_model_counts(tmp_path):
    from astra_workload_compact import read_rank_nodes
    from astra_workload_generators.llm import ADAM_BYTES_PER_PARAM, LlmConfig, generate_llm, model_dims

    dims = model_dims(layers=1, hidden=64, heads=4, ffn_hidden=128, vocab=100, seq_len=16)
    generate_llm(dims, LlmConfig(dp=2, zero=1), tmp_path / "w")
    adam = next(n for n in read_rank_nodes(tmp_path / "w", 0) if n.name == "aten::_fused_adam_")
    op = classify(adam.name, adam.inputs_shapes, adam.inputs_types, "")
    assert ADAM_BYTES_PER_PARAM == 28 and op.nbytes == adam.attrs["tensor_size"]
    assert adam.attrs["tensor_size"] % 28 == 0
