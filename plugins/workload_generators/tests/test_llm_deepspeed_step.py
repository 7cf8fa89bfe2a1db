"""DeepSpeed ZeRO-3's own step under ``--framework deepspeed --zero 3`` (``llm.deepspeed_step``): the gathers'
copy-in and copy-out, the gradients reduced in buckets with the overflow check, and the optimizer step's passes
and small collectives, by hand; absent from every other step."""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm import deepspeed_step
from astra_workload_generators.llm.deepspeed_step import persistent_parameters

# GPT-2-style (LayerNorm, biases, GeLU): h 64, 4 heads, FFN 256, a vocabulary of 512, 32 tokens, 2 layers
GPT = dict(layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256, vocab=512, seq_len=32, gated=False)
LAYER = 3 * 64 * 64 + 64 * 64 + 2 * 64 * 256  # QKV, projection, FC1, FC2: 49,152 parameters
VOCAB = 512 * 64  # the embedding's (and the LM head's) 32,768


def _nodes(tmp_path, name="t", **kw):
    cfg = LlmConfig(**{"dp": 2, "zero": 3, "framework": "deepspeed", "dtype": "fp16", **kw})
    generate_llm(model_dims(**GPT), cfg, tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _label(n):
    return n.attrs.get("label") or n.name


def test_each_gather_has_deepspeeds_copy_in_and_copy_out(tmp_path):
    # all_gather_coalesced: torch.cat of this rank's shard into the send buffer (read and write 24,576 x 2 B), the
    # gather (each rank's share: 49,152 B), torch.cat of the gathered pieces into each parameter (49,152 x 2 x 2 B)
    nodes = _nodes(tmp_path)
    by = {_label(n): n for n in nodes}
    copy_in, gather, copy_out = by["ds_ag_copy_in.l0.fwd"], by["dp_ag.l0.fwd"], by["ds_ag_copy_out.l0.fwd"]
    assert (copy_in.name, copy_in.attrs["tensor_size"]) == ("aten::cat", 2 * (LAYER // 2) * 2)
    assert (copy_out.name, copy_out.attrs["tensor_size"]) == ("aten::cat", 2 * LAYER * 2)
    assert gather.attrs["comm_type"] == T.ALL_GATHER and gather.attrs["comm_size"] == LAYER * 2 // 2
    assert copy_in.id in gather.data_deps and gather.id in copy_out.data_deps
    # the layer's compute waits for the copy-out, not for the gather itself
    first = next(n for n in nodes if _label(n).startswith("fwd.l0.mb0."))
    assert copy_out.id in first.data_deps and gather.id not in first.data_deps
    # the backward gathers again (full recomputation or not), with its copies
    assert by["ds_ag_copy_out.l1.bwd"].attrs["tensor_size"] == 2 * LAYER * 2


def test_gradients_are_reduced_in_buckets_with_the_overflow_check(tmp_path):
    # the backward's units: head, l1, l0, embedding = 32,768 + 49,152 + 49,152 + 32,768 = 163,840 gradients, one
    # bucket under DeepSpeed's 5e8: each unit copied into it (read and write 2 B each), then interleaved (cat, 2 x
    # 2 B), pre-divided (div_, in place: 2 x 2 B), reduce-scattered (its 327,680-byte input), the 81,920-element
    # partition copied out (2 x 2 B), isinf and isnan of it (read 2 B, write the flags counted in its dtype: 4 B)
    # and any() of the flags (read 1 B)
    nodes = _nodes(tmp_path)
    side = [n for n in nodes if _label(n).startswith(("ds_ipg_copy", "ds_rs", "ds_grad", "ds_overflow"))
            or _label(n).startswith("dp_rs")]
    total, part = 2 * VOCAB + 2 * LAYER, (2 * VOCAB + 2 * LAYER) // 2
    assert [(_label(n), n.attrs.get("tensor_size", n.attrs.get("comm_size"))) for n in side] == [
        ("ds_ipg_copy.head", 4 * VOCAB), ("ds_ipg_copy.l1", 4 * LAYER), ("ds_ipg_copy.l0", 4 * LAYER),
        ("ds_ipg_copy.embedding", 4 * VOCAB),
        ("ds_rs_interleave.b0", 4 * total), ("ds_rs_predivide.b0", 4 * total), ("dp_rs.ds_bucket0", 2 * total),
        ("ds_grad_partition.b0", 4 * part),
        ("ds_overflow.isinf.b0", 4 * part), ("ds_overflow.isinf.any.b0", part),
        ("ds_overflow.isnan.b0", 4 * part), ("ds_overflow.isnan.any.b0", part)]
    # one stream: each waits for the one before; the optimizer's first node waits for the last
    for a, b in zip(side, side[1:]):
        assert a.id in b.data_deps
    opt = next(n for n in nodes if _label(n) == "optimizer.ds_overflow_all_reduce")
    assert side[-1].id in opt.data_deps


def test_a_bucket_is_reduced_when_the_next_unit_would_overflow_it(tmp_path, monkeypatch):
    # a bucket of 90,000: head (32,768) + l1 (49,152) = 81,920 fit; l0 would make 131,072 -> reduce; l0 +
    # embedding = 81,920 fit -> reduced at the backward's end
    monkeypatch.setattr(deepspeed_step, "REDUCE_BUCKET_ELEMS", 90_000)
    nodes = _nodes(tmp_path)
    rs = [(_label(n), n.attrs["comm_size"]) for n in nodes if _label(n).startswith("dp_rs")]
    assert rs == [("dp_rs.ds_bucket0", 2 * (VOCAB + LAYER)), ("dp_rs.ds_bucket1", 2 * (LAYER + VOCAB))]
    labels = [_label(n) for n in nodes]
    assert labels.index("ds_ipg_copy.l1") < labels.index("dp_rs.ds_bucket0") < labels.index("ds_ipg_copy.l0")


def test_the_optimizer_step_runs_deepspeeds_passes_and_small_collectives(tmp_path):
    # this rank's partition: 163,840 / 2 = 81,920 parameters. The overflow flag's all-reduce (1 B); the norm, one
    # parameter tensor at a time (test_llm_deepspeed_host_a100small52.py), and its all-reduce (8 B); the fp32
    # gradient (flatten: 2 x 2 B; .to(fp32): 2 + 4 B); unscaled (mul_: 4 + 4 B); FusedAdam (28 B: p, g, m, v read,
    # p, m, v written); the fp16 copy (4 + 2 B); then the persistent parameters gathered one by one (each rank's
    # share of 2 B per element)
    nodes = _nodes(tmp_path)
    p = 81_920
    opt = [n for n in nodes if _label(n).startswith("optimizer.")]
    sized = [(_label(n), n.attrs.get("tensor_size", n.attrs.get("comm_size"))) for n in opt
             if not _label(n).startswith("optimizer.ds_norm.")]
    assert sized[:7] == [
        ("optimizer.ds_overflow_all_reduce", 1), ("optimizer.ds_norm_all_reduce", 8),
        ("optimizer.ds_flatten_grads", 4 * p), ("optimizer.ds_grads_fp32", 6 * p),
        ("optimizer.ds_unscale", 8 * p), ("optimizer.adam", 28 * p), ("optimizer.ds_fp16_params", 6 * p)]
    gathers = sized[7:]
    # first the learned position table (GPT-2's wpe: 32 x 64 = 2,048 elements, under the 1e5 threshold); per layer:
    # LayerNorm 1 and 2 (weight, bias: 64 each), the QKV bias (192), the projection's (64), FC1's (256), FC2's (64);
    # then the final LayerNorm's weight and bias
    assert [size for _, size in gathers] == [2048] + [64, 64, 64, 64, 192, 64, 256, 64] * 2 + [64, 64]
    assert all(n.attrs["comm_type"] == T.ALL_GATHER for n in opt if "persistent" in _label(n))
    # one after the other, on the compute chain
    for a, b in zip(opt, opt[1:]):
        assert a.id in b.data_deps


def test_persistent_parameters_follow_the_model_family():
    # GPT-2: 8 small parameters a layer + the final LayerNorm's 2 (+ the position table on the first stage);
    # Llama-style (gated: no linear biases; RMSNorm: no norm biases; rotary: no position table): the two RMSNorm
    # weights a layer + the final one; nothing of 1e5 elements or more (DeepSpeed partitions those)
    gpt = model_dims(**GPT)
    assert len(persistent_parameters(gpt)) == 8 * 2 + 2
    assert persistent_parameters(gpt, first=True)[0] == 32 * 64
    llama = model_dims(**{**GPT, "gated": True, "rms_norm": True, "rotary": True})
    assert persistent_parameters(llama, first=True) == [64] * 5
    assert persistent_parameters(llama) == [64] * 5
    wide = model_dims(**{**GPT, "hidden": 256, "heads": 4, "kv_heads": 4, "ffn_hidden": 100_000})
    assert 100_000 not in persistent_parameters(wide) and 256 in persistent_parameters(wide)


def test_other_frameworks_and_stages_keep_their_step(tmp_path):
    for name, kw in (("z3", {"framework": None}), ("fsdp2", {"framework": "fsdp2"}), ("ds2", {"zero": 2})):
        labels = [_label(n) for n in _nodes(tmp_path, name, **kw)]
        assert not [lab for lab in labels if ".ds_" in lab or lab.startswith("ds_")], name
    # on one GPU DeepSpeed still runs the step's passes, but nothing is gathered, reduced or all-reduced
    one = _nodes(tmp_path, "ds3_1gpu", dp=1)
    assert not [n for n in one if n.type == T.COMM_COLL_NODE]
    assert [_label(n) for n in one if _label(n).startswith("optimizer.") and ".ds_norm." not in _label(n)] == [
        "optimizer.ds_flatten_grads", "optimizer.ds_grads_fp32", "optimizer.ds_unscale", "optimizer.adam",
        "optimizer.ds_fp16_params"]
    assert not [n for n in one if n.attrs.get("host_waits")]  # (no .item() of a collective to wait for)
    # the generic ZeRO-3 step: one reduce-scatter per unit, one fused Adam
    plain = [_label(n) for n in _nodes(tmp_path, "plain", framework=None)]
    assert [lab for lab in plain if lab.startswith("dp_rs")] == [
        "dp_rs.head", "dp_rs.l1", "dp_rs.l0", "dp_rs.embedding"]
    assert [lab for lab in plain if lab.startswith("optimizer")] == ["optimizer.adam"]


def test_without_memory_bound_nodes_the_buckets_are_still_reduced(tmp_path, monkeypatch):
    # --no-elementwise: no copies, no checks, no optimizer; the two buckets' reduce-scatters remain, the last one
    # issued at the backward's end, after the embedding's backward
    monkeypatch.setattr(deepspeed_step, "REDUCE_BUCKET_ELEMS", 90_000)
    nodes = _nodes(tmp_path, elementwise=False)
    labels = [_label(n) for n in nodes]
    assert not [lab for lab in labels if lab.startswith(("ds_", "optimizer"))]
    rs = [n for n in nodes if _label(n).startswith("dp_rs")]
    assert [(_label(n), n.attrs["comm_size"]) for n in rs] == [
        ("dp_rs.ds_bucket0", 2 * (VOCAB + LAYER)), ("dp_rs.ds_bucket1", 2 * (LAYER + VOCAB))]
    last_compute = max(n.id for n in nodes if n.type == T.COMP_NODE)
    assert last_compute in rs[-1].data_deps
    # the gathers stay, without their copies
    assert "dp_ag.l0.fwd" in labels


def test_each_pipeline_stage_gathers_its_own_persistent_parameters(tmp_path):
    # PP 2 (DeepSpeed itself runs ZeRO-3 without a pipeline; the generator still splits): one layer a stage, 8 small
    # parameters each, the position table on the first stage and the final LayerNorm's 2 on the last
    cfg = LlmConfig(dp=2, pp=2, zero=3, framework="deepspeed", dtype="fp16")
    generate_llm(model_dims(**GPT), cfg, tmp_path / "pp")
    counts = []
    for rank in (0, 2):  # the first rank of each stage (ranks are DP-major within a stage)
        nodes = read_rank_nodes(tmp_path / "pp", rank)
        counts.append(len([n for n in nodes if _label(n).startswith("optimizer.ds_persistent_ag")]))
    assert sorted(counts) == [9, 10]
