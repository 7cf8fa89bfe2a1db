"""The terms added to cut the cross-validated step-time error, each on its own hand-computed case
(docs/validation.md, "Step-time terms and their sources")."""

from __future__ import annotations

import pytest

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)


def test_fsdp2_selective_recomputes_torchtitans_every_second_matmul(tmp_path):
    # torchtitan's op-level SAC saves wq, wv, w1, w2 (1st, 3rd, 5th, 7th matmul) and recomputes wk, wo, w3:
    # n = 1 x 128 tokens, h = 256, wk 256 -> 4 KV heads x 32 = 128, wo 256 -> 256, w3 256 -> 512.
    cfg = LlmConfig(dp=2, zero=3, framework="fsdp2", recompute_selective=True, micro_batches=1, micro_batch_size=1)
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / "t")
    nodes = [n for n in read_rank_nodes(tmp_path / "t", 0) if n.attrs.get("label", "").startswith("recompute.l0.")]
    gemm_ops = {n.attrs["label"].rsplit(".", 1)[-1]: n.attrs["num_ops"] for n in nodes
                if n.attrs["label"].rsplit(".", 1)[-1] in ("wk", "wo", "w3")}
    assert gemm_ops == {"wk": 2 * 128 * 256 * 128, "wo": 2 * 128 * 256 * 256, "w3": 2 * 128 * 256 * 512}
    # the norms and the SiLU x up product run again too (the last tensor the backward needs is the product)
    names = [n.name for n in nodes]
    assert names.count("aten::native_layer_norm") == 2 and "aten::silu" in names and "aten::mul" in names
    # both layers, once each (one micro-batch)
    labels = {n.attrs.get("label") for n in read_rank_nodes(tmp_path / "t", 0)}
    assert {"recompute.l0.mb0.w3", "recompute.l1.mb0.w3"} <= labels


def test_megatrons_selective_recomputation_adds_no_node(tmp_path):
    # Megatron's selective recomputation is the attention core, which FlashAttention's backward recomputes anyway
    cfg = LlmConfig(dp=2, zero=1, framework="megatron", recompute_selective=True, micro_batches=1)
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / "t")
    assert not [n for n in read_rank_nodes(tmp_path / "t", 0) if n.attrs.get("label", "").startswith("recompute.")]


def test_nccl_peak_statements_average_per_pair_and_leave_a_source_out():
    from astra_gpu_model import nccl

    assert nccl.peak_busbw()["hopper"][1] == {("ring", "Simple"): 370.0, ("nvls", "Simple"): 480.0}
    # A100: NVLink 3's 300 GB/s per direction x NCCL Simple's 370 / 450 effective share = 246.67 GB/s
    assert nccl.peak_busbw()["ampere"][1] == {("ring", "Simple"): pytest.approx(246.7)}
    without = nccl.peak_busbw(excluded={"NVIDIA/nccl-tests#212"})
    assert without == {"hopper": ("H100-SXM5-80GB", {("nvls", "Simple"): 480.0}),
                       "blackwell": ("B200", {("nvls", "Simple"): (830.0 + 811.0) / 2}),  # issue 40's statements
                       "cdna3": ("MI300X", {("ring", "Simple"): 315.69})}
    assert nccl.peak_busbw(excluded=set(nccl.PEAK_BUSBW_SOURCES)) == {}
    # two statements of one pair: their mean
    two = [nccl.PeakStatement("a", "hopper", "H100-SXM5-80GB", "nvls", "Simple", 470.0, ""),
           nccl.PeakStatement("b", "hopper", "H100-SXM5-80GB", "nvls", "Simple", 490.0, "")]
    assert nccl.peak_busbw(two)["hopper"][1] == {("nvls", "Simple"): 480.0}
    # NCCL's own A100 ring algBw (240 GB/s of bus bandwidth: 300 x 20/25) times the factor is the peak
    assert nccl.beyond_fit_efficiency()["ampere"] == {"nvswitch/ring/Simple": round(246.7 / 240.0, 5)}


def test_fsdp2_copies_each_gathered_unit_out_and_its_gradients_in_then_reduces_in_fp32(tmp_path):
    # One Llama layer holds 256 x (256 + 128 + 128 + 256) + 3 x 256 x 512 = 589,824 matmul parameters and its two
    # LayerNorms' weights and biases (4 x 256): 590,848 (bf16: 2 B each). FSDP2's copy-out reads and writes them once
    # per gather (2 x 2 x 590,848 B); its copy-in reads the bf16 gradients and writes them as fp32 (590,848 x
    # (2 + 4) B); the reduce-scatter moves fp32 (4 x 590,848 B).
    cfg = LlmConfig(dp=2, zero=3, framework="fsdp2", micro_batches=2)
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / "t")
    by_label = {n.attrs.get("label", n.name): n for n in read_rank_nodes(tmp_path / "t", 0)}
    params = 589_824 + 4 * 256
    for phase in ("fwd", "bwd"):  # gathered once per phase, reused by both micro-batches: one copy each
        assert by_label[f"fsdp_copy_out.l0.{phase}"].attrs["tensor_size"] == 2 * 2 * params
    assert sum(1 for label in by_label if label.startswith("fsdp_copy_out.l0.")) == 2
    assert by_label["fsdp_copy_in.l0"].attrs["tensor_size"] == params * (2 + 4)
    assert by_label["dp_rs.l0"].attrs["comm_size"] == 4 * params
    # a plain --zero 3 (no --framework) keeps the generic ZeRO-3 step: no copies, gradients reduced in bf16
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=3, micro_batches=2), tmp_path / "z")
    plain = {n.attrs.get("label", n.name): n for n in read_rank_nodes(tmp_path / "z", 0)}
    assert not [label for label in plain if label.startswith("fsdp_copy")]
    assert plain["dp_rs.l0"].attrs["comm_size"] == 2 * params


def test_the_command_line_gives_fsdp2s_step_only_with_framework_fsdp2(tmp_path):
    from astra_sim.cli import main

    base = ["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "4", "--ffn-hidden",
            "512", "--vocab", "1000", "--seq-len", "128", "--gated", "--dp", "2", "--zero", "3", "--recompute",
            "selective"]
    assert main([*base, "--framework", "fsdp2", "-o", str(tmp_path / "f")]) == 0
    assert main([*base, "-o", str(tmp_path / "z")]) == 0
    labels = {n.attrs.get("label") for n in read_rank_nodes(tmp_path / "f", 0)}
    assert {"recompute.l0.mb0.w3", "fsdp_copy_in.l0", "fsdp_copy_out.l0.fwd.mb0"} <= labels  # (FSDP2 reshards)
    assert not [x for x in (n.attrs.get("label") or "" for n in read_rank_nodes(tmp_path / "z", 0))
                if x.startswith(("recompute.", "fsdp_copy"))]


def test_composite_rms_norm_runs_one_kernel_per_op_mostly_in_fp32(tmp_path):
    # rows r = 128 tokens, h = 256: x.float() reads 2 B and writes 4 B per element (r x h x 6 B); the cast back the
    # same; the square reads two fp32 operands and writes one (12 B per element).
    from astra_sim.cli import main

    base = ["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "4", "--ffn-hidden",
            "512", "--vocab", "1000", "--seq-len", "128", "--gated", "--dp", "2"]
    assert main([*base, "--norm-kernel", "composite", "-o", str(tmp_path / "c")]) == 0
    nodes = _labelled(tmp_path / "c", "fwd.l0.mb0.ln1.ln.")
    assert [n.name for n in nodes] == ["aten::copy_", "aten::mul", "aten::mean", "aten::add", "aten::rsqrt",
                                       "aten::mul", "aten::copy_", "aten::mul"]
    r, h = 128, 256
    assert nodes[0].attrs["tensor_size"] == r * h * (2 + 4) == nodes[6].attrs["tensor_size"]
    assert nodes[1].attrs["tensor_size"] == r * h * 12
    bwd = _labelled(tmp_path / "c", "bwd.l0.mb0.ln1.ln.")
    assert len(bwd) == 11 and bwd[-1].name == "aten::copy_"
    # the default: one fused kernel each way
    assert main([*base, "-o", str(tmp_path / "f")]) == 0
    assert [n.name for n in _labelled(tmp_path / "f", "fwd.l0.mb0.ln1.")] == ["aten::native_layer_norm"]


def _labelled(prefix, start):
    return [n for n in read_rank_nodes(prefix, 0) if (n.attrs.get("label") or "").startswith(start)]


def test_the_hardware_flops_count_torchtitans_recomputed_matmuls():
    # 2 sequences x 128 tokens, 2 layers, h = 256: wk (128) + wo (256) + w3 (512) = 896 output columns each
    from astra_workload_generators.llm.generate import step_metadata

    dims = model_dims(**LLAMA)
    cfg = LlmConfig(dp=2, zero=3, framework="fsdp2", recompute_selective=True, micro_batches=1)
    meta = step_metadata(dims, cfg, 1_000_000)
    assert meta["hardware_flops_per_step"] - meta["model_flops_per_step"] == 2 * 2 * 128 * 256 * 896 * 2
    plain = step_metadata(dims, LlmConfig(dp=2, zero=3, recompute_selective=True, micro_batches=1), 1_000_000)
    assert plain["hardware_flops_per_step"] == plain["model_flops_per_step"]


def test_torchtitans_eager_loss_repeat_kv_and_foreach_adamw_as_the_gpu_model_counts_them(tmp_path):
    # llm.eager_step under --framework fsdp2 (vocabulary 1024, 128 tokens, 8 query and 4 KV heads of 32):
    # the loss moves 6 + 8 B per logit forward (cast, fp32 log-softmax) and 4 + 12 + 6 backward (the zero-filled
    # fp32 gradient, the fp32 log-softmax backward, the cast back) against 4 + 6 in bf16; repeat_kv reads 4 heads
    # and writes 8 (or the reverse) in bf16; clipping and AdamW move 4 + 8 + 84 = 96 B per fp32 parameter
    from astra_gpu_model.ops import classify

    llama = {**LLAMA, "vocab": 1024}
    generate_llm(model_dims(**llama), LlmConfig(dp=2, zero=3, framework="fsdp2", micro_batches=1), tmp_path / "t")
    nodes = read_rank_nodes(tmp_path / "t", 0)

    def moved(node):
        return classify(node.name, node.inputs_shapes, node.inputs_types, None).nbytes

    def labelled(part):
        return [n for n in nodes if part in (n.attrs.get("label") or "")]

    logits = 128 * 1024
    assert sum(moved(n) for n in labelled("fwd.head.mb0.cross_entropy")) == 14 * logits
    assert sum(moved(n) for n in labelled("bwd.head.mb0.cross_entropy")) == 22 * logits
    for n in labelled(".repeat_kv."):
        assert moved(n) == (128 * 4 * 32 + 128 * 8 * 32) * 2
    assert len(labelled(".repeat_kv.")) == 2 * 2 * 2  # K and V, forward and backward, 2 layers
    optimizer = [n for n in labelled("optimizer.") if n.name.startswith("aten::")]
    params = optimizer[0].attrs["tensor_size"] // 4  # (the emitter counts the norm's fp32 read, as the gpu model)
    assert sum(moved(n) for n in optimizer) == 96 * params


def test_grand_teton_runs_at_its_500_w_default_limit(tmp_path):
    # torchtitan's Grand Teton H100s run at the default 500 W of a 700 W TDP: GEMMs (992.7 W at the boost clock,
    # astra_energy's H200 measurement) are capped at both limits and settle at (418.1 / 618.1) ** (1 / 1.32) = 0.74367
    # of the clock the SXM5 rates were calibrated at (idle 81.9 W); --power-limit-w 700 gives them back. One
    # 8k x 8k x 8k-sized layer: a launch (4.3 us) is 0.3 % of each GEMM, so the GEMM time ratio is
    # 1 / 0.74367 = 1.3447 within 0.5 %.
    import json

    from astra_sim.cli import main

    big = dict(layers=1, hidden=8192, heads=64, kv_heads=8, ffn_hidden=8192 * 3, vocab=1024, seq_len=8192, gated=True)
    generate_llm(model_dims(**big), LlmConfig(dp=8, zero=3, framework="fsdp2", micro_batches=1), tmp_path / "w")
    parts, ratios = {}, {}
    for name, extra in (("default", []), ("700", ["--power-limit-w", "700"])):
        out = tmp_path / f"{name}.json"
        assert main(["run", "--platform", "grand-teton-h100", "--nodes", "1", "--workload-configuration",
                     str(tmp_path / "w"), "-q", "-o", str(out), *extra]) == 0
        report = json.loads(out.read_text())
        parts[name] = report["breakdown"]["parts"]
        ratios[name] = (report["stats"]["energy"]["power_limit_w"], report["stats"]["energy"]["time_clock_ratio"])
    assert ratios["default"][0] == 500 and ratios["700"][0] == 700
    assert ratios["default"][1]["gemm"] == pytest.approx((418.1 / 618.1) ** (1 / 1.32))
    assert ratios["700"][1]["gemm"] == 1.0
    slow = parts["default"]["compute:gemm"] / parts["700"]["compute:gemm"]
    assert slow == pytest.approx(1 / 0.74367, rel=0.005)
    # memory-bound ops: a saturated one draws 572 W (the H200's HBM copy), so at 500 W their SM-side rates run at
    # (418.1 / 490.1) ** (1 / 1.32) = 0.8866; their HBM time does not scale, so they barely slow
    elementwise = parts["default"]["compute:elementwise"] / parts["700"]["compute:elementwise"]
    assert 1.0 <= elementwise < 1.02
