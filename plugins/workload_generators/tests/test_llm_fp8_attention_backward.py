"""FP8 attention backward (``--attention-dtype fp8`` with ``--fp8-attention-backward on``, the default, as Transformer
Engine's NVTE_FP8_DPA_BWD=1): dO quantized to E5M2, the backward node on E5M2 dO and E4M3 Q, K, V (named cudnn),
its dQ, dK, dV dequantized to bf16; by hand, and end to end on an HGX H100."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, LlmSpec, generate_llm, model_dims

# one sequence of 128 tokens, 8 query heads and 4 KV heads of 32: Q (and dO, dQ) 32,768 elements, K and V 16,384 each
LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
Q, KV = 128 * 8 * 32, 2 * 128 * 4 * 32
E4M3, E5M2 = "Tensor(c10::Float8_e4m3fn)", "Tensor(c10::Float8_e5m2)"
BWD = "aten::_scaled_dot_product_flash_attention_backward"


def _generate(tmp_path, name="t", **kw):
    cfg = LlmConfig(**{"dp": 1, "micro_batches": 1, "attention_dtype": "fp8", **kw})
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return read_rank_nodes(tmp_path / name, 0)


def _types(node):
    return str(node.inputs_types if hasattr(node, "inputs_types") else node.attrs["inputs_types"])


def test_the_backward_runs_in_fp8_by_default_between_a_grad_cast_and_a_dequantize(tmp_path):
    nodes = _generate(tmp_path)
    by_label = {n.attrs.get("label"): n for n in nodes}
    bwd = by_label["bwd.l0.mb0.attn"]
    assert bwd.name == BWD and _types(bwd).count("Float8_e5m2") == 1 and _types(bwd).count("Float8_e4m3fn") == 3
    assert _types(bwd).index("e5m2") < _types(bwd).index("e4m3")  # grad_out first
    assert bwd.attrs["attention_kernel"] == "cudnn"
    # tensor_size: dO, Q, K, V and dQ, dK, dV, O at one byte (2 x (Q + K + V + O) elements)
    assert bwd.attrs["tensor_size"] == 2 * 1 * (32 + 32) * 128 * (8 + 4)
    # dO: read in bf16 (2 B), written in E5M2 (1 B)
    cast = by_label["bwd.l0.mb0.attn.fp8_grad_cast"]
    assert cast.name == "transformer_engine::quantize" and cast.attrs["tensor_size"] == Q * 3
    # dQ, dK, dV: read in E5M2 (1 B), written in bf16 (2 B)
    deq = by_label["bwd.l0.mb0.attn.fp8_dequantize"]
    assert deq.name == "transformer_engine::dequantize" and deq.attrs["tensor_size"] == (Q + KV) * 3
    assert cast.id < bwd.id < deq.id and bwd.id in deq.data_deps
    assert sum(n.name == BWD for n in nodes) == 2 and all(E4M3 in _types(n) for n in nodes if n.name == BWD)


def test_off_keeps_the_backward_in_bf16(tmp_path):
    nodes = _generate(tmp_path, fp8_attention_backward=False)
    backward = [n for n in nodes if n.name == BWD]
    assert backward and all("Float8" not in _types(n) for n in backward)
    assert not any("attention_kernel" in n.attrs for n in backward)
    assert not any((n.attrs.get("label") or "").startswith("bwd") and ".fp8_" in n.attrs["label"] for n in nodes)


def test_current_scaling_reads_do_twice(tmp_path):
    nodes = _generate(tmp_path, gemm_dtype="fp8", fp8_recipe="current")
    by_label = {n.attrs.get("label"): n for n in nodes}
    assert by_label["bwd.l0.mb0.attn.fp8_grad_cast"].attrs["tensor_size"] == Q * (2 * 2 + 1)


def test_context_parallel_quantizes_do_once_and_dequantizes_each_step(tmp_path):
    """--cp 2: 64 queries per rank; dO cast once (Q/2 elements); step 0's dQ, dK, dV on its own 64 keys, step 1's
    on the 32 keys it is timed on (causal: half a block)."""
    nodes = _generate(tmp_path, cp=2)
    by_label = {n.attrs.get("label") or n.name: n for n in nodes}
    assert by_label["bwd.l0.mb0.attn.cp0.fp8_grad_cast"].attrs["tensor_size"] == Q // 2 * 3
    assert "bwd.l0.mb0.attn.cp1.fp8_grad_cast" not in by_label
    assert by_label["bwd.l0.mb0.attn.cp0.fp8_dequantize"].attrs["tensor_size"] == (Q // 2 + KV // 2) * 3
    assert by_label["bwd.l0.mb0.attn.cp1.fp8_dequantize"].attrs["tensor_size"] == (Q // 2 + KV // 4) * 3
    # the dK/dV ring starts after step 1's gradients are dequantized
    send = next(n for n in nodes if n.name == "cp_send.bwd.l0.mb0.dkv.1")
    # (the send waits for the step's dK/dV accumulated after the dequantize: test_llm_te_cp_merges.py)
    assert by_label["bwd.l0.mb0.attn.cp1.fp8_dequantize"].id < by_label["bwd.l0.mb0.attn.cp1.dv_accumulate"].id
    assert by_label["bwd.l0.mb0.attn.cp1.dv_accumulate"].id in send.data_deps


def test_off_without_fp8_attention_is_a_config_error():
    with pytest.raises(ConfigError, match="--fp8-attention-backward off needs --attention-dtype fp8"):
        LlmSpec.from_argv(["--preset", "gpt3-13b", "--fp8-attention-backward", "off"]).resolve(
            on_warning=lambda line: None)


def test_astra_run_the_fp8_backward_changes_the_step_by_its_share(tmp_path, capsys):
    """End to end on an HGX H100 at 16k tokens (cuDNN), --fp8-attention-backward on against off: the step changes by
    exactly what the gpu model changes on the backward attention nodes, net of the dO casts and the dequantizes
    (attention is on the critical path); each FP8 backward node's time over its bf16 one is the ratio of the rates
    by hand: NVIDIA's measured cuDNN FP8 backward (H200 rows, causal, 16k: 374 TFLOP/s, H100 takes them; a burst,
    at the 700 W cap / 1.0823, attention.HOPPER_BURST_OVER_CAP) against the bf16 backward the model times (this
    project's measured cuDNN 9.19 at the cap). Measured, the causal FP8 backward is the slower one (346 at the cap
    against the bf16 601 at 16k), so the FP8 step is longer."""
    gpu_model = pytest.importorskip("astra_gpu_model.model")
    from astra_gpu_model.attention import hopper_fp8_efficiency, kernel_efficiency

    model = gpu_model.GpuComputeModel(None, "H100")
    base = ["workload", "llm", "--layers", "2", "--hidden", "1024", "--heads", "8", "--kv-heads", "8",
            "--ffn-hidden", "2048", "--vocab", "1000", "--seq-len", "16384", "--gated", "--dp", "8",
            "--attention-kernel", "cudnn", "--attention-dtype", "fp8"]
    steps, backward, nodes = {}, {}, {}
    for name in ("off", "on"):
        prefix = str(tmp_path / name)
        assert main([*base, "--fp8-attention-backward", name, "-o", prefix]) == 0
        capsys.readouterr()
        assert main(["run", "--workload-configuration", prefix, "--platform", "hgx-h100", "--nodes", "1",
                     "--json"]) == 0
        steps[name] = json.loads(capsys.readouterr().out)["summary"]["max_finish_ns"]
        nodes[name] = [n for n in read_rank_nodes(prefix, 0)
                       if n.name == BWD or ".attn.fp8_grad_cast" in (n.attrs.get("label") or "")
                       or (n.attrs.get("label") or "").startswith("bwd") and ".attn.fp8_dequantize" in n.attrs["label"]]
        backward[name] = sum(model.compute_time_ns(n, 0) for n in nodes[name])
    assert len(nodes["off"]) == 2 and len(nodes["on"]) == 6  # per layer: a cast, the node, a dequantize
    assert steps["off"] - steps["on"] == pytest.approx(backward["off"] - backward["on"], rel=0.01)
    assert steps["on"] > steps["off"]
    launch = model.gpu.gemm.launch_us * 1e3
    bf16, fp8 = ([model.compute_time_ns(n, 0) - launch for n in nodes[name] if n.name == BWD] for name in ("off", "on"))
    ratio = (hopper_fp8_efficiency(model.gpu, "cudnn", True, True, 16384, 128) * 1978.9
             / (kernel_efficiency("cudnn", True, True, 16384) * 989.4))
    # the FP8 rate over its benchmark's wave utilisation (8192 blocks in 63 waves of 132), at the 700 W cap: divided
    # by NVIDIA's BF16 backward burst over ours at the cap (581 / 536.8 on causal 64/8 heads at 32k,
    # fit/check_fp8_cap.py); the bf16 backward at 16k keys is this project's H200 measurement (cuDNN 9.19 at the cap,
    # data/measured_attention_hopper_long.csv: causal, head dim 128, 601.3 TFLOP/s over full waves)
    assert ratio == pytest.approx(374 / 1.082322 / (8192 / (63 * 132)) / 601.3, rel=1e-3)
    assert all(b / f == pytest.approx(ratio, rel=0.02) for b, f in zip(bf16, fp8))


def test_the_command_line_flag(tmp_path, capsys):
    base = ["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "4", "--ffn-hidden",
            "512", "--vocab", "1000", "--seq-len", "128", "--gated", "--attention-dtype", "fp8"]
    for value, casts in (("on", 2), ("off", 0)):
        assert main([*base, "--fp8-attention-backward", value, "-o", str(tmp_path / value)]) == 0
        labels = [n.attrs.get("label") or "" for n in read_rank_nodes(tmp_path / value, 0)]
        assert sum(label.endswith(".attn.fp8_grad_cast") for label in labels) == casts
    with pytest.raises(SystemExit) as stop:
        main([*base, "--fp8-attention-backward", "maybe", "-o", str(tmp_path / "x")])
    assert stop.value.code != 0 and "--fp8-attention-backward" in capsys.readouterr().err
