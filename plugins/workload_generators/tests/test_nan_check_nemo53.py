"""``--check-nan-in-grad``: Megatron-Core DDP's ``check_for_nan_in_grad`` (core_r0.11
``megatron/core/distributed/param_and_grad_buffer.py``: ``start_grad_sync`` calls ``check_for_nan_in_grad``, which takes
``bucket.grad_data.norm(p=2)`` of every bucket before its reduce-scatter or all-reduce). NeMo 2.2.0's recipes set it
(``recipes/llama3_8b.py`` 117, ``recipes/nemotron.py`` 130, ...); Megatron-Bridge's performance scripts turn it off
(``scripts/performance/utils/helpers.py`` 97 at v0.2.0). One read of the bucket's gradients on the compute stream."""

from __future__ import annotations

import pytest

from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

#: one layer, hidden 256 (4 heads, LayerNorm, biases, not gated), FFN 1024, vocabulary 1000 (padded to 1024), 64 tokens
DIMS = dict(layers=1, hidden=256, heads=4, ffn_hidden=1024, vocab=1000, seq_len=64)
#: the layer's parameters: QKV 256 x 768 + 768, proj 256 x 256 + 256, fc1 256 x 1024 + 1024, fc2 1024 x 256 + 256,
#: two LayerNorms 2 x (256 + 256): 196,608 + 65,536 + 262,144 + 262,144 + 2,304 + 1,024 = 789,760
LAYER = 789_760
#: the LM head 1,024 x 256 = 262,144 and the final LayerNorm 512: 262,656; the embedding 1,024 x 256 = 262,144 and
#: the learned positions 64 x 256 = 16,384: 278,528
HEAD, EMBEDDING = 262_656, 278_528


def _nodes(tmp_path, name, **kw):
    cfg = {"dp": 4, "micro_batches": 2, "grad_buffer": "same"}
    cfg.update(kw)
    generate_llm(model_dims(**DIMS), LlmConfig(**cfg), tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _by_label(nodes):
    return {n.attrs.get("label", n.name): n for n in nodes}


def _bytes(node):
    from astra_gpu_model.ops import classify, node_io
    return classify(node.name, *node_io(node)).nbytes


def test_off_by_default_the_reduction_waits_on_the_last_backward_node(tmp_path):
    nodes = _nodes(tmp_path, "off", zero=1)
    ids = {n.id: n for n in nodes}
    assert not [n for n in nodes if n.attrs.get("label", "").startswith("nan_check")]
    rs = _by_label(nodes)["dp_rs.l0"]
    assert len(rs.data_deps) == 1 and ids[rs.data_deps[0]].type == T.COMP_NODE
    assert ids[rs.data_deps[0]].name != "aten::linalg_vector_norm"


@pytest.mark.parametrize("zero, comm", [(1, "dp_rs"), (0, "dp_ar")])
def test_one_norm_per_bucket_before_its_reduction_bf16(tmp_path, zero, comm):
    nodes = _nodes(tmp_path, f"z{zero}", zero=zero, check_nan_in_grad=True)
    by = _by_label(nodes)
    ids = {n.id: n for n in nodes}
    for unit, params in (("l0", LAYER), ("head", HEAD), ("embedding", EMBEDDING)):
        norm, reduce = by[f"nan_check.{unit}"], by[f"{comm}.{unit}"]
        # torch's norm of the bf16 buffer: reads 2 B per gradient, writes one scalar (not counted)
        assert norm.name == "aten::linalg_vector_norm" and norm.type == T.COMP_NODE
        assert norm.inputs_shapes == f"[[{params}]]" and norm.inputs_types == "['Tensor(c10::BFloat16)']"
        assert _bytes(norm) == norm.attrs["tensor_size"] == 2 * params
        # the reduction of the same bucket (2 B per gradient) waits on it; the norm is on the compute chain
        assert reduce.attrs["comm_size"] == 2 * params and reduce.data_deps == [norm.id]
        assert len(norm.data_deps) == 1 and ids[norm.data_deps[0]].type == T.COMP_NODE
    # 789,760 + 262,656 + 278,528 = 1,330,944 gradients read once: 2,661,888 bytes in all
    total = sum(n.attrs["tensor_size"] for n in nodes if n.attrs.get("label", "").startswith("nan_check"))
    assert total == 2 * (LAYER + HEAD + EMBEDDING) == 2_661_888


def test_fp32_gradient_buffer_reads_four_bytes(tmp_path):
    by = _by_label(_nodes(tmp_path, "fp32", zero=1, grad_buffer="fp32", check_nan_in_grad=True))
    norm = by["nan_check.l0"]
    assert norm.inputs_types == "['Tensor(float)']" and _bytes(norm) == 4 * LAYER == 3_159_040


def test_every_micro_batch_checks_every_reduction(tmp_path):
    nodes = _nodes(tmp_path, "every", zero=1, check_nan_in_grad=True, grad_sync_every_micro_batch=True)
    labels = [n.attrs.get("label", "") for n in nodes]
    assert labels.count("nan_check.l0.mb0") == labels.count("nan_check.l0.mb1") == 1


@pytest.mark.parametrize("kw", [dict(zero=3), dict(zero=3, framework="fsdp2"), dict(zero=3, framework="deepspeed")])
def test_refused_outside_megatron_ddp(tmp_path, kw):
    with pytest.raises(ConfigError, match="check-nan-in-grad"):
        _nodes(tmp_path, "bad", check_nan_in_grad=True, grad_buffer="fp32", **kw)
