"""The final norm before the LM head (issue 36): one norm of the model's kind on the stage that holds the head, on
every position of its output, forward and backward, timed as the layers' norms, never recomputed; by hand."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.layout import rank_of

# h 256, 8 query heads and 4 KV heads, FFN 512 (gated), vocab 1000, sequences of 128 tokens; micro-batches of 2
SMALL = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
BF = "Tensor(c10::BFloat16)"
R, H = 2 * 128, 256  # the norm's rows (2 sequences x 128 positions) and width


def _stage_nodes(tmp_path, dims, stage=0, name="t", **cfg):
    cfg = LlmConfig(**{"micro_batches": 2, "micro_batch_size": 2, **cfg})
    generate_llm(dims, cfg, tmp_path / name)
    return read_rank_nodes(tmp_path / name, rank_of(cfg, 0, 0, stage))


def _final(nodes):
    return [n for n in nodes if ".final_norm." in (n.attrs.get("label") or "")]


def test_rms_norm_model_last_stage_only_forward_and_backward(tmp_path):
    """PP 2: the first stage has no final norm; the last runs one ``_fused_rms_norm`` per micro-batch before the
    LM head and one ``_fused_rms_norm_backward`` after the head's backward, before the last layer's."""
    dims = model_dims(**SMALL, rms_norm=True)
    assert _final(_stage_nodes(tmp_path, dims, 0, pp=2)) == []
    nodes = _stage_nodes(tmp_path, dims, 1, pp=2)
    final = {n.attrs["label"]: n for n in _final(nodes)}
    assert sorted(final) == ["bwd.final_norm.mb0.ln", "bwd.final_norm.mb1.ln", "fwd.final_norm.mb0.ln",
                             "fwd.final_norm.mb1.ln"]
    fwd, bwd = final["fwd.final_norm.mb0.ln"], final["bwd.final_norm.mb0.ln"]
    assert fwd.name == "aten::_fused_rms_norm" and fwd.inputs_shapes == f"[[{R}, {H}], [{H}]]"
    # x (256 x 256) and the weight (256) read, y written, 2 B each: (2 x 65,536 + 256) x 2 = 262,656 B
    assert fwd.attrs["tensor_size"] == 262_656
    assert bwd.name == "aten::_fused_rms_norm_backward"
    assert bwd.inputs_shapes == f"[[{R}, {H}], [{R}, {H}], [{R}, 1], [{H}]]"
    # dy, x, the weight read and dx written (2 B), the fp32 rstd (256 x 4 B): (3 x 65,536 + 256) x 2 + 1,024
    assert bwd.attrs["tensor_size"] == 394_752
    # where: the forward right after the last layer and right before the head; the backward right after the
    # head's weight gradient and before the last layer's backward
    labels = [n.attrs.get("label") or "" for n in nodes]
    i = labels.index("fwd.final_norm.mb0.ln")
    assert labels[i - 1].startswith("fwd.l1.mb0.") and labels[i + 1] == "fwd.head.mb0"
    assert nodes[i].id in nodes[i + 1].data_deps
    j = labels.index("bwd.final_norm.mb0.ln")
    assert labels[j - 1] == "bwd.head.mb0.wgrad" and nodes[j - 1].id in nodes[j].data_deps
    assert next(x for x in labels[j + 1:] if x.startswith("bwd.")).startswith("bwd.l1.mb0.")


def test_layer_norm_model_runs_native_layer_norm(tmp_path):
    nodes = _final(_stage_nodes(tmp_path, model_dims(**SMALL), micro_batches=1))
    assert [(n.attrs["label"], n.name) for n in nodes] == [
        ("fwd.final_norm.mb0.ln", "aten::native_layer_norm"),
        ("bwd.final_norm.mb0.ln", "aten::native_layer_norm_backward")]
    # + the bias (256) read: (2 x 65,536 + 2 x 256) x 2; backward + the bias and the fp32 mean: ... + 2 x 1,024
    assert [n.attrs["tensor_size"] for n in nodes] == [263_168, (3 * R * H + 2 * H) * 2 + 8 * R]


def test_timed_as_the_layers_norms(tmp_path):
    """The gpu model times the final norm as a layer's norm of the same shape: its measured floor + bytes / its
    measured rate (no rate of its own)."""
    gpu_model = pytest.importorskip("astra_gpu_model.model")
    data = Path(gpu_model.__file__).with_name("data")
    rates = json.loads((data / "memops_fit.json").read_text())["rates_bytes_per_s"]
    floors = json.loads((data / "memops_floor.json").read_text())["floors_us"]
    model = gpu_model.GpuComputeModel(gpu="H100-SXM")
    hbm = model.gpu.gemm.hbm_efficiency * model.gpu.hbm_bytes_per_s
    nodes = {n.attrs.get("label"): n for n in _stage_nodes(tmp_path, model_dims(**SMALL, rms_norm=True),
                                                           micro_batches=1)}
    for phase, op, nbytes in (("fwd", "_fused_rms_norm", 262_656), ("bwd", "_fused_rms_norm_backward", 394_752)):
        final, layer = nodes[f"{phase}.final_norm.mb0.ln"], nodes[f"{phase}.l0.mb0.ln1.ln"]
        ns = model.compute_time_ns(final, 0)
        assert ns == model.compute_time_ns(layer, 0)
        seconds = floors[op] * 1e-6 + nbytes / min(rates["aten::" + op], hbm)
        assert ns == pytest.approx(seconds * 1e9, abs=1)


def test_sequence_parallel_rows_and_serving_all_positions(tmp_path):
    """With sequence parallelism this rank's s/TP rows (as the layers' norms); serving with ``--logits last``
    normalises every position of the prompt (vLLM and SGLang prune to the sampled rows after the norm) while the
    LM head multiplies only the last one of each sequence."""
    dims = model_dims(**SMALL, rms_norm=True)
    sp = _final(_stage_nodes(tmp_path, dims, name="sp", micro_batches=1, tp=2, sequence_parallel=True))
    assert [n.inputs_shapes for n in sp] == [f"[[{R // 2}, {H}], [{H}]]",
                                             f"[[{R // 2}, {H}], [{R // 2}, {H}], [{R // 2}, 1], [{H}]]"]
    nodes = _stage_nodes(tmp_path, dims, name="pf", micro_batches=1, mode="prefill", prompt_len=64, logits="last")
    final = _final(nodes)
    assert [(n.attrs["label"], n.inputs_shapes) for n in final] == [("fwd.final_norm.mb0.ln", f"[[128, {H}], [{H}]]")]
    head = next(n for n in nodes if n.attrs.get("label") == "fwd.head.mb0")
    assert head.inputs_shapes.startswith("[[2, 256]")


def test_decode_steps_each_run_it(tmp_path):
    nodes = _final(_stage_nodes(tmp_path, model_dims(**SMALL, rms_norm=True), micro_batches=1, mode="decode",
                                prompt_len=64, decode_len=3, decode_steps=2))
    assert [(n.attrs["label"], n.inputs_shapes) for n in nodes] == [
        ("fwd.s0.final_norm.mb0.ln", f"[[2, {H}], [{H}]]"), ("fwd.s1.final_norm.mb0.ln", f"[[2, {H}], [{H}]]")]


@pytest.mark.parametrize("kw", [
    dict(),  # Megatron-LM
    dict(recompute=True),  # full recomputation: the layers only
    dict(recompute_selective=True, framework="fsdp2", zero=3, dp=2),  # torchtitan's op-level SAC
    dict(recompute=True, framework="fsdp2", zero=3, dp=2),  # torchtitan's full AC: the blocks only
    dict(framework="deepspeed", zero=3, dp=2, dtype="fp16"),
    dict(zero=3, dp=2, remat_policy="minimal_flash", iota_embed=True, rope="fused", dropout=False),  # MaxText
    dict(activation_kernel="eager", attention="unfused", softmax_kernel="eager", dtype="fp16",
         gated=False),  # Hugging Face GPT-2 (ln_f: a LayerNorm)
    dict(pp=2, virtual_stages=2, micro_batches=4, layers=4),  # interleaved: the last chunk of the last stage only
])
def test_every_path_runs_exactly_one_per_micro_batch(tmp_path, kw):
    """Every framework's step: one final norm forward and one backward per micro-batch, none recomputed."""
    kw = {"micro_batches": 2, **kw}
    dims = model_dims(**{**SMALL, "rotary": True, "gated": kw.pop("gated", True), "layers": kw.pop("layers", 2)})
    stages = LlmConfig(**kw).pp
    nodes = [n for p in range(stages) for n in _final(_stage_nodes(tmp_path, dims, p, name=f"s{p}", **kw))]
    M = kw["micro_batches"]
    assert Counter(n.attrs["label"].split(".final_norm.")[0] for n in nodes) == {"fwd": M, "bwd": M}
    assert not [n for n in nodes if n.attrs["label"].startswith("recompute")]


def test_composite_norm_kernel_and_no_elementwise(tmp_path):
    """``--norm-kernel composite`` (torchtitan's Python RMSNorm, its final norm the same class): the eight
    forward and eleven backward kernels; ``--no-elementwise``: none."""
    dims = model_dims(**SMALL, rms_norm=True)
    nodes = _final(_stage_nodes(tmp_path, dims, name="c", micro_batches=1, framework="fsdp2", zero=3, dp=2,
                                norm_kernel="composite"))
    assert Counter(n.attrs["label"].split(".")[0] for n in nodes) == {"fwd": 8, "bwd": 11}
    assert _final(_stage_nodes(tmp_path, dims, name="n", micro_batches=1, elementwise=False)) == []
    assert all(n.type == T.COMP_NODE for n in nodes)
