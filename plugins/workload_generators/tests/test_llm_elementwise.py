"""``astra workload llm`` element-wise / memory-bound nodes (``--elementwise``) and ``--attention unfused``."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from astra_workload_compact import read_rank_nodes
from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.llm import (ADAM_BYTES_PER_PARAM, LlmConfig, generate_llm, layer_parameters,
                                           model_dims, padded_vocab, training_flops, vocab_padding)

GPT = dict(layers=4, hidden=256, heads=8, vocab=1000, seq_len=128, gated=False)       # ffn 4h, biases
LLAMA = dict(layers=4, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)


def _nodes(prefix, rank=0):
    return read_rank_nodes(prefix, rank)


def _by_label(nodes, label):
    return next(n for n in nodes if n.attrs.get("label") == label)


def _comp_ops(prefix, npus):
    return sum(n.attrs["num_ops"] for r in range(npus) for n in _nodes(prefix, r) if n.type == T.COMP_NODE)


@pytest.mark.parametrize("sp", [False, True])
def test_layer_nodes_and_shard_shapes(tmp_path, sp):
    dims = model_dims(**GPT)
    cfg = LlmConfig(tp=2, dp=1, micro_batches=1, micro_batch_size=2, sequence_parallel=sp, dtype="fp16")
    generate_llm(dims, cfg, tmp_path / "t")
    nodes = _nodes(tmp_path / "t")
    n, h, ff = 2 * 128, 256, 1024 // 2
    rows = n // 2 if sp else n  # residual-stream ops are split over TP only with sequence parallelism
    ln = _by_label(nodes, "fwd.l0.mb0.ln1.ln")
    assert ln.name == "aten::native_layer_norm"
    assert ln.inputs_shapes == f"[[{rows}, {h}], [{h}], [{h}]]"
    assert ln.inputs_types == "['Tensor(c10::Half)', 'Tensor(c10::Half)', 'Tensor(c10::Half)']"
    assert ln.attrs["num_ops"] == 0 and ln.attrs["tensor_size"] == (2 * rows * h + 2 * h) * 2
    assert _by_label(nodes, "bwd.l0.mb0.ln1.ln").name == "aten::native_layer_norm_backward"
    gelu = _by_label(nodes, "fwd.l0.mb0.fc1.gelu")
    assert gelu.name == "aten::gelu" and gelu.inputs_shapes == f"[[{n}, {ff}], [{ff}]]"  # fused bias + GeLU
    assert _by_label(nodes, "bwd.l0.mb0.fc1.gelu").inputs_shapes == f"[[{n}, {ff}], [{n}, {ff}]]"
    add = _by_label(nodes, "fwd.l0.mb0.mlp_out.residual")  # Megatron's fused bias-dropout-add (+ its mask)
    assert add.name == "aten::add_" and add.inputs_shapes == f"[[{rows}, {h}], [{rows}, {h}], [{h}], [{rows}, {h}]]"
    counts = Counter(x.name for x in nodes if x.type == T.COMP_NODE)
    L = dims.layers
    # two per layer and the final norm before the LM head (test_llm_final_norm.py)
    assert counts["aten::native_layer_norm"] == 2 * L + 1 and counts["aten::native_layer_norm_backward"] == 2 * L + 1
    # (the layers' dropouts are in the fused bias-dropout-add; the embedding's dropout is its own kernel,
    # test_embedding_kernels.py)
    assert counts["aten::native_dropout"] == 1 and counts["aten::native_dropout_backward"] == 2 * L + 1
    assert counts["aten::add_"] == 4 * L  # 2 residual adds forward, 2 residual-gradient adds backward
    assert counts["aten::gelu"] == counts["aten::gelu_backward"] == L
    assert counts["aten::_log_softmax"] == counts["aten::_log_softmax_backward_data"] == 1
    ce = next(x for x in nodes if x.name == "aten::_log_softmax")
    assert ce.inputs_shapes == f"[[{n}, {padded_vocab(dims, 2, 128 * 2) // 2}]]"  # (1000 -> 1024)
    # the word and the learned position embedding (GPT)
    assert counts["aten::embedding"] == counts["aten::embedding_dense_backward"] == 2
    assert counts["aten::_fused_adam_"] == 1
    # chain order: LN1 before the QKV GEMM, GeLU between FC1 and FC2, optimizer last
    ids = {x.attrs.get("label"): x.id for x in nodes}
    assert ids["fwd.l0.mb0.ln1.ln"] < ids["fwd.l0.mb0.qkv"]
    assert ids["fwd.l0.mb0.fc1"] < ids["fwd.l0.mb0.fc1.gelu"] < ids["fwd.l0.mb0.fc2"]
    assert ids["bwd.l0.mb0.fc2.dgrad"] < ids["bwd.l0.mb0.fc1.gelu"] < ids["bwd.l0.mb0.fc1.dgrad"]
    # Megatron's step ends with Adam, the fp32 shard copied back into the parameters and the gradient buffer's
    # memset (test_small_optimizer_tail.py)
    assert [x.name for x in nodes[-3:]] == ["aten::_fused_adam_", "aten::zero_", "aten::copy_"]


def test_gated_cp_shapes_and_no_elementwise(tmp_path):
    dims = model_dims(**LLAMA)
    generate_llm(dims, LlmConfig(tp=2, cp=2, micro_batches=1), tmp_path / "t")
    nodes = _nodes(tmp_path / "t")
    n, ff = 128 // 2, 512 // 2  # CP: s/CP tokens per rank
    # (Megatron's default fused SwiGLU, one kernel each way: test_fusions_swiglu.py)
    assert _by_label(nodes, "fwd.l0.mb0.fc1.swiglu").inputs_shapes == f"[[{n}, {ff}], [{n}, {ff}]]"
    assert _by_label(nodes, "bwd.l0.mb0.fc1.swiglu.bwd").inputs_shapes == f"[[{n}, {2 * ff}], [{n}, {ff}]]"
    assert _by_label(nodes, "fwd.l0.mb0.ln1.ln").inputs_shapes == f"[[{n}, 256], [256], [256]]"
    assert _by_label(nodes, "fwd.l0.mb0.attn_out.residual").inputs_shapes == \
        f"[[{n}, 256], [{n}, 256], [{n}, 256]]"  # no bias; the fused bias-dropout-add's mask
    generate_llm(dims, LlmConfig(tp=2, cp=2, micro_batches=1, elementwise=False), tmp_path / "o")
    names = {x.name for x in _nodes(tmp_path / "o") if x.type == T.COMP_NODE}
    assert names == {"aten::mm", "aten::addmm", "aten::_scaled_dot_product_flash_attention",
                     "aten::_scaled_dot_product_flash_attention_backward"}  # (addmm: wgrads into main_grad)
    # inference: the forward's element-wise nodes by default (issue 34), none with inference_elementwise=False
    generate_llm(dims, LlmConfig(tp=2, mode="prefill"), tmp_path / "p")
    assert "aten::native_layer_norm" in {x.name for x in _nodes(tmp_path / "p")}
    generate_llm(dims, LlmConfig(tp=2, mode="prefill", inference_elementwise=False), tmp_path / "p0")
    assert "aten::native_layer_norm" not in {x.name for x in _nodes(tmp_path / "p0")}


@pytest.mark.parametrize("mode", ["prefill", "decode", "mixed"])
def test_inference_elementwise(tmp_path, mode):
    """--inference-elementwise (the default): each layer's norms, residual adds and SiLU*mul on this step's tokens,
    no dropout, no cross entropy, no optimizer; the rest of the trace and the FLOPs are those of
    --no-inference-elementwise."""
    dims = model_dims(**LLAMA)
    kw = dict(tp=2, mode=mode, micro_batch_size=4, prompt_len=32, decode_len=3)
    if mode == "mixed":
        kw.update(prefill_chunk=16, prefill_done=8)
    generate_llm(dims, LlmConfig(inference_elementwise=False, **kw), tmp_path / "off")
    generate_llm(dims, LlmConfig(**kw), tmp_path / "on")
    off, on = _nodes(tmp_path / "off"), _nodes(tmp_path / "on")
    added = Counter(n.name for n in on) - Counter(n.name for n in off)
    layers = LLAMA["layers"]
    assert added == Counter({"aten::native_layer_norm": 2 * layers + 1, "aten::add_": 2 * layers,  # (+ the final)
                             "aten::silu": layers, "aten::mul": layers})
    assert not Counter(n.name for n in off) - Counter(n.name for n in on)  # nothing else changes
    rows = {"prefill": 4 * 32, "decode": 4, "mixed": 4 + 16}[mode]  # this step's tokens
    assert _by_label(on, "fwd.l0.mb0.ln1.ln").inputs_shapes == f"[[{rows}, 256], [256], [256]]"
    assert _by_label(on, "fwd.l0.mb0.fc1.silu").inputs_shapes == f"[[{rows}, {512 // 2}]]"
    assert _comp_ops(tmp_path / "on", 2) == _comp_ops(tmp_path / "off", 2)
    # training ignores it (its element-wise nodes follow --elementwise)
    generate_llm(dims, LlmConfig(tp=2, micro_batches=1, inference_elementwise=False), tmp_path / "t0")
    generate_llm(dims, LlmConfig(tp=2, micro_batches=1), tmp_path / "t1")
    assert [n.name for n in _nodes(tmp_path / "t0")] == [n.name for n in _nodes(tmp_path / "t1")]


def test_unfused_attention(tmp_path):
    dims = model_dims(**GPT)
    b, hq, s, d = 2, 8 // 2, 128, 32
    cfg = LlmConfig(tp=2, micro_batches=1, micro_batch_size=b, attention="unfused")
    generate_llm(dims, cfg, tmp_path / "t")
    nodes = _nodes(tmp_path / "t")
    assert not any("flash" in x.name for x in nodes)
    qk = _by_label(nodes, "fwd.l0.mb0.attn.qk")
    assert qk.name == "aten::bmm" and qk.inputs_shapes == f"[[{b * hq}, {s}, {d}], [{b * hq}, {d}, {s}]]"
    sm = _by_label(nodes, "fwd.l0.mb0.attn.softmax")
    assert sm.name == "aten::_softmax" and sm.inputs_shapes == f"[[{b}, {hq}, {s}, {s}]]"
    smb = _by_label(nodes, "bwd.l0.mb0.attn.softmax")
    assert smb.name == "aten::_softmax_backward_data"
    assert smb.inputs_shapes == f"[[{b}, {hq}, {s}, {s}], [{b}, {hq}, {s}, {s}]]"
    assert sum(x.name == "aten::bmm" for x in nodes) == dims.layers * 6  # 2 forward, 4 backward
    # same FLOPs as the flash-attention node
    generate_llm(dims, LlmConfig(tp=2, micro_batches=1, micro_batch_size=b), tmp_path / "f")
    assert _comp_ops(tmp_path / "t", 2) == _comp_ops(tmp_path / "f", 2) == training_flops(dims, b, 2, 128 * 2)
    with pytest.raises(Exception):
        generate_llm(dims, LlmConfig(mode="decode", attention="unfused"), tmp_path / "x", write=False)


@pytest.mark.parametrize("tp,pp,dp,zero", [(1, 1, 1, 0), (2, 2, 2, 0), (2, 2, 2, 1), (2, 1, 4, 2), (1, 2, 2, 3)])
def test_optimizer_bytes_per_rank(tmp_path, tp, pp, dp, zero):
    dims = model_dims(**GPT)
    cfg = LlmConfig(tp=tp, pp=pp, dp=dp, zero=zero, micro_batches=2)
    generate_llm(dims, cfg, tmp_path / "t")
    vh = padded_vocab(dims, tp, vocab_padding(cfg)) * dims.hidden
    for stage in range(pp):
        rank = stage * tp * dp
        adam = [x for x in _nodes(tmp_path / "t", rank) if x.name == "aten::_fused_adam_"]
        assert len(adam) == 1
        # params / TP / PP (+ embedding on the first stage, LM head on the last), plus the norms' weights and
        # biases whole (LayerNorm, 2 x 256, two a layer, the final one on the last stage), / DP under ZeRO
        params = (dims.layers // pp * layer_parameters(dims) + vh * ((stage == 0) + (stage == pp - 1))) // tp
        params += dims.layers // pp * 2 * 512 + 512 * (stage == pp - 1)
        # the linear biases (Megatron's add_bias_linear): QKV's 768 and FC1's 1,024 split over TP, the projection's
        # and FC2's 256 whole; the learned position table (128 x 256) whole on the first stage
        params += dims.layers // pp * ((768 + 1024) // tp + 2 * 256) + 128 * 256 * (stage == 0)
        if zero:
            params = -(-params // dp)
        assert adam[0].inputs_shapes == repr([[[params]]] * 4)
        assert adam[0].attrs["tensor_size"] == params * ADAM_BYTES_PER_PARAM == params * (4 * 4 + 3 * 4)
        assert adam[0].attrs["num_ops"] == 0


@pytest.mark.parametrize("kw", [dict(tp=2, pp=2, dp=2, micro_batches=4, recompute=True),
                                dict(tp=2, dp=2, micro_batches=2, sequence_parallel=True, zero=1),
                                dict(tp=2, pp=2, micro_batches=4, virtual_stages=2, cp=2)])
def test_flops_unchanged(tmp_path, kw):
    dims = model_dims(**LLAMA)
    generate_llm(dims, LlmConfig(**kw), tmp_path / "on")
    generate_llm(dims, LlmConfig(elementwise=False, **kw), tmp_path / "off")
    npus = LlmConfig(**kw).npus
    on, off = _comp_ops(tmp_path / "on", npus), _comp_ops(tmp_path / "off", npus)
    assert abs(on - off) / off < 0.01


def test_gpu_model_consistent_bytes(tmp_path):
    ops = pytest.importorskip("astra_gpu_model.ops")
    generate_llm(model_dims(**GPT), LlmConfig(tp=2, pp=2, dp=2, micro_batches=2, zero=1, recompute=True,
                                              attention="unfused", sequence_parallel=True), tmp_path / "t")
    seen = set()
    for x in _nodes(tmp_path / "t"):
        if x.type != T.COMP_NODE:
            continue
        op = ops.classify(x.name, *ops.node_io(x))
        if x.name in ("aten::mm", "aten::bmm", "aten::addmm"):
            assert op.kind == "gemm"
        else:
            assert op.kind == "memory", x.name
            assert op.nbytes == x.attrs["tensor_size"], x.name
            seen.add(x.name)
    assert "aten::_fused_adam_" in seen and "aten::_softmax_backward_data" in seen


def _gpu_report(tmp_path, name, npus, llm_args, **options):
    """Generate ``astra workload llm *llm_args`` into ``tmp_path/name`` and simulate it with the gpu compute model
    on an ``npus``-NPU ring."""
    pytest.importorskip("astra_gpu_model")
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(npus,))
    prefix = tmp_path / name / "g"
    assert main(["workload", "llm", *llm_args, "-o", str(prefix)]) == 0
    return simulate(prefix, sys_cfg, net, None, f"{prefix}.groups.json",
                    plugins=["network_analytical", "workload_generators", "gpu_model"], compute_model="gpu",
                    options=options)


def test_gpu_simulation_slower_with_elementwise(tmp_path):
    times = {}
    for flag in ("--elementwise", "--no-elementwise"):
        args = ["--layers", "2", "--hidden", "512", "--heads", "8", "--vocab", "2000", "--seq-len", "512",
                "--tp", "2", "--dp", "2", "--micro-batches", "2", "--micro-batch-size", "2", flag]
        times[flag] = _gpu_report(tmp_path, flag.strip("-"), 4, args).max_finish_ns
    assert times["--elementwise"] > times["--no-elementwise"] * 1.05


def test_no_dropout_drops_only_the_dropout_kernels(tmp_path):
    kw = dict(tp=2, pp=2, dp=1, micro_batches=2, sequence_parallel=True, attention="unfused")
    dims = model_dims(**GPT)
    generate_llm(dims, LlmConfig(**kw), tmp_path / "on")
    generate_llm(dims, LlmConfig(dropout=False, **kw), tmp_path / "off")
    for r in range(4):
        on = Counter(x.name for x in _nodes(tmp_path / "on", r))
        off = Counter(x.name for x in _nodes(tmp_path / "off", r))
        # (the residual stream's forward dropout is inside Megatron's fused bias-dropout-add; the attention's stays)
        assert on["aten::native_dropout"] > 0 and on["aten::native_dropout_backward"] > 0
        assert off["aten::native_dropout"] == off["aten::native_dropout_backward"] == 0
        del on["aten::native_dropout"], on["aten::native_dropout_backward"]
        assert on == off  # everything else is unchanged (node counts)
    # the residual add still follows the branch output it adds (bias included)
    nodes = _nodes(tmp_path / "off")
    add = _by_label(nodes, "fwd.l0.mb0.mlp_out.residual")
    rs = next(x for x in nodes if x.name == "tp_rs.fwd.l0.mb0.mlp_out")
    assert add.data_deps == [rs.id]
    assert add.inputs_shapes == "[[64, 256], [64, 256], [256]]"  # s/TP rows (sequence parallel)
    assert _comp_ops(tmp_path / "on", 4) == _comp_ops(tmp_path / "off", 4)


def test_fp8_gemms(tmp_path):
    """--gemm-dtype fp8: the linear layers become _scaled_mm with E4M3/E5M2 operands; FLOPs unchanged; the
    router and LM head stay bf16; the gpu model times them at the fp8 peak."""
    dims = model_dims(**dict(GPT, experts=4, top_k=2))
    kw = dict(tp=2, dp=2, ep=2, micro_batches=2, sequence_parallel=True)
    generate_llm(dims, LlmConfig(**kw), tmp_path / "bf16")
    generate_llm(dims, LlmConfig(gemm_dtype="fp8", **kw), tmp_path / "fp8")
    assert _comp_ops(tmp_path / "bf16", 4) == _comp_ops(tmp_path / "fp8", 4)
    nodes = _nodes(tmp_path / "fp8")
    e4, e5 = "Tensor(c10::Float8_e4m3fn)", "Tensor(c10::Float8_e5m2)"
    twin = {x.attrs.get("label"): x for x in _nodes(tmp_path / "bf16")}
    kinds = Counter()
    for x in nodes:
        lab = x.attrs.get("label", "")
        if x.type != T.COMP_NODE or lab not in twin or twin[lab].name != "aten::mm" or lab.endswith(".wgrad"):
            continue  # (TE's casts and amax updates: test_fp8_transformer_engine_kernels; the weight gradients
            # into main_grad: test_llm_wgrad_main_grad.py)
        if ".router" in lab or ".head" in lab:
            assert x.name == "aten::mm" and x.inputs_types == twin[lab].inputs_types, lab
            kinds["bf16"] += 1
            continue
        assert x.name == "aten::_scaled_mm", lab
        (m, k), (k2, nn) = eval(twin[lab].inputs_shapes)
        assert k == k2 and x.inputs_shapes == f"[[{m}, {k}], [{k}, {nn}], [], []]"
        a = e5 if lab.endswith(".dgrad") else e4
        b = e5 if lab.endswith(".wgrad") else e4
        assert x.inputs_types == repr([a, b, "Tensor(float)", "Tensor(float)"]), lab
        assert x.attrs["num_ops"] == 2 * m * k * nn
        weights, outputs = k * nn, 2 * m * nn  # 1-byte operands, bf16 output
        if ".experts." in lab:  # a grouped GEMM over the 2 local experts: each one's weights (or outputs)
            dim, sizes = x.attrs["grouped_gemm_dim"], x.attrs["grouped_gemm_sizes"]
            assert (dim, sum(sizes), len(sizes)) == (("k", k, 2) if lab.endswith(".wgrad") else ("m", m, 2))
            weights, outputs = (weights, 2 * outputs) if dim == "k" else (2 * weights, outputs)
        assert x.attrs["tensor_size"] == m * k + weights + outputs
        kinds["fp8"] += 1
    assert kinds["fp8"] > 0 and kinds["bf16"] > 0
    ops = pytest.importorskip("astra_gpu_model.ops")
    qkv = _by_label(nodes, "fwd.l0.mb0.qkv")
    op = ops.classify(qkv.name, *ops.node_io(qkv))
    assert op.kind == "gemm" and op.dtype == "fp8"


def test_fp8_gemms_faster_on_h100(tmp_path):
    times = {}
    for g in ("same", "fp8"):
        args = ["--layers", "2", "--hidden", "2048", "--heads", "16", "--vocab", "2000", "--seq-len", "2048",
                "--tp", "2", "--micro-batch-size", "2", "--no-elementwise", "--gemm-dtype", g]
        times[g] = _gpu_report(tmp_path, g, 2, args, gpu="H100-SXM5-80GB").ranks[0].compute_ns
    assert times["fp8"] < times["same"] * 0.8


@pytest.mark.parametrize("overlap", [False, True])
def test_fp8_transformer_engine_kernels(tmp_path, overlap):
    """--gemm-dtype fp8 with element-wise nodes: TE's cast+transpose before the projection and FC2 (forward:
    Megatron's GeLU writes bf16) and before every dgrad, FP8 transposes of the LayerNorm outputs for the wgrads,
    and at the end of every chunk's forward and backward an amax all-reduce over the stage's TP x DP ranks plus
    one amax/scale update. (``--te-op-fuser``, TE's fused GeLU: test_llm_smalldense_mlp_casts.py.)"""
    dims = model_dims(**GPT)
    L, M, tp, dp = dims.layers, 2, 2, 2
    kw = dict(tp=tp, dp=dp, micro_batches=M, sequence_parallel=True, tp_comm_overlap=overlap)
    generate_llm(dims, LlmConfig(**kw), tmp_path / "bf16")
    summary = generate_llm(dims, LlmConfig(gemm_dtype="fp8", **kw), tmp_path / "fp8")
    generate_llm(dims, LlmConfig(gemm_dtype="fp8", elementwise=False, **kw), tmp_path / "bare")
    te = lambda prefix: Counter(n.name for n in _nodes(prefix) if n.name.startswith("transformer_engine::"))
    assert te(tmp_path / "bf16") == Counter() and te(tmp_path / "bare") == Counter()
    # (+ each layer's four bf16 weights cast once a step, on micro-batch 0: test_small_weight_quantize.py)
    assert te(tmp_path / "fp8") == {"transformer_engine::cast_transpose": 6 * L * M + 4 * L,
                                    "transformer_engine::fp8_transpose": 2 * L * M,
                                    "transformer_engine::amax_and_scale_update": 2 * M}
    assert _comp_ops(tmp_path / "bf16", 4) == _comp_ops(tmp_path / "fp8", 4)  # no FLOPs added
    nodes = _nodes(tmp_path / "fp8")
    n, h, ff = 128, 256, 1024  # rows (s x b, gathered), hidden, FFN
    cast = _by_label(nodes, "fwd.l0.mb0.proj.fp8_cast")  # the attention output, bf16 in, two FP8 copies out
    assert (cast.inputs_shapes, cast.attrs["tensor_size"]) == (f"[[{n}, {h // tp}]]", n * h // tp * (2 + 1 + 1))
    assert _by_label(nodes, "bwd.l0.mb0.qkv.dgrad.fp8_cast").attrs["tensor_size"] == n * 3 * h // tp * 4
    assert _by_label(nodes, "fwd.l0.mb0.fc2.fp8_cast").attrs["tensor_size"] == 4 * n * ff // tp  # (its transpose)
    assert _by_label(nodes, "bwd.l0.mb0.fc1.dgrad.fp8_cast").attrs["tensor_size"] == 4 * n * ff // tp
    wgrad = _by_label(nodes, "bwd.l0.mb0.fc1.wgrad")
    assert _by_label(nodes, "bwd.l0.mb0.fc1.wgrad.fp8_transpose").id in wgrad.data_deps  # the chain: transpose first
    amax = [x for x in nodes if x.name.startswith("amax.")]
    assert [x.name for x in amax] == ["amax.fwd.mb0", "amax.bwd.mb0", "amax.fwd.mb1", "amax.bwd.mb1"]  # 1F1B
    fwd, bwd = amax[0], amax[1]
    assert (fwd.attrs["comm_type"], fwd.attrs["comm_size"], bwd.attrs["comm_size"]) == \
        (T.ALL_REDUCE, 4 * 4 * L * 3, 4 * 4 * L * 2)  # fp32 amaxes of 3 (fwd) / 2 (bwd) tensors per linear layer
    groups = json.loads((tmp_path / "fp8.groups.json").read_text())
    assert summary["groups"] == len(groups) and groups[fwd.attrs["pg_name"]] == [0, 1, 2, 3]  # the whole stage
    update = _by_label(nodes, "fwd.mb0.amax_update")
    assert update.data_deps == [fwd.id] and update.attrs["tensor_size"] == 2 * 4 * 1024 * 4 * L * 3
    # the gpu model times a cast as memory traffic at the achievable HBM bandwidth, plus a launch
    gm = pytest.importorskip("astra_gpu_model")
    model = gm.GpuComputeModel(gpu="H100-SXM5-80GB")
    gpu = model.gpu
    expect = gpu.gemm.launch_us * 1e-6 + cast.attrs["tensor_size"] / (gpu.gemm.hbm_efficiency * gpu.hbm_bytes_per_s)
    assert abs(model.compute_time_ns(cast, 0) - expect * 1e9) <= 1


def test_fp8_moe_expert_casts(tmp_path):
    """FP8 MoE: the routed and shared experts are plain TE linears (no LayerNorm or activation to fuse a cast
    into), so each expert GEMM's FP8 operand is cast + transposed first: the dispatched tokens and the
    activation output forward, the output gradients of FC2 and FC1 backward. Every cast has exactly the shape of
    its GEMM's first operand and comes right before it on the compute chain; the router stays in --dtype."""
    dims = model_dims(**dict(LLAMA, experts=4, top_k=2, moe_ffn=256, shared_experts=1))
    M, tp = 2, 2
    generate_llm(dims, LlmConfig(tp=tp, ep=2, dp=2, micro_batches=M, sequence_parallel=True, gemm_dtype="fp8"),
                 tmp_path / "moe")
    nodes = _nodes(tmp_path / "moe")
    by_id = {x.id: x for x in nodes}
    casts = [x for x in nodes if x.name == "transformer_engine::cast_transpose"]
    # the weights' casts, once a step on micro-batch 0 (test_small_weight_quantize.py), apart
    weights = [x for x in casts if ".weight." in x.attrs["label"]]
    assert Counter(x.attrs["label"].split(".", 3)[3] for x in weights if ".l0." in x.attrs["label"]) == {
        f"{part}.weight.fp8_cast": 1 for part in ("qkv", "proj", "experts.fc1", "experts.fc2", "shared.fc1",
                                                  "shared.fc2")}
    casts = [x for x in casts if x not in weights]
    per_layer = Counter(x.attrs["label"].split(".", 3)[3] for x in casts if ".l0.mb0." in x.attrs["label"])
    assert per_layer == {f"{part}.fp8_cast": 1 for part in (
        "proj", "experts.fc1", "experts.fc2", "shared.fc1", "shared.fc2",  # forward
        "proj.dgrad", "qkv.dgrad", "experts.fc2.dgrad", "experts.fc1.dgrad", "shared.fc2.dgrad",
        "shared.fc1.dgrad")}
    assert len(casts) == len(per_layer) * dims.layers * M
    for cast in casts:
        gemm = _by_label(nodes, cast.attrs["label"][:-len(".fp8_cast")])
        assert gemm.name == "aten::_scaled_mm"
        assert json.loads(cast.inputs_shapes)[0] == json.loads(gemm.inputs_shapes)[0]
        # right before it on the chain, or before the sequence-parallel all-gather of its operand (on micro-batch
        # 0: or before its weight's cast, which TE makes after the input's)
        deps = list(gemm.data_deps) + [e for d in gemm.data_deps if ".weight." in by_id[d].attrs.get("label", "")
                                       for e in by_id[d].data_deps]
        before = [d for d in deps if by_id[d].type != T.COMM_COLL_NODE] + \
            [e for d in deps if by_id[d].type == T.COMM_COLL_NODE for e in by_id[d].data_deps]
        assert cast.id in before, cast.attrs["label"]
    assert _by_label(nodes, "fwd.l0.mb0.router").name == "aten::mm"
