"""The memory estimate's parameter storage in FP8 and LoRA's frozen base (docs/memory.md, "LoRA's frozen base" and
"MXFP8 parameter gather"): hand-computed terms on a small model, and the published layouts they let through."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main

from astra_workload_generators.llm import LlmConfig, model_dims
from astra_workload_generators.llm.memory import layer_activation_bytes, peak_memory, stage_memory
from astra_workload_generators.llm.memory_fit import verdict

L, H, HEADS, KV, FFN, VOCAB, S = 4, 256, 8, 4, 512, 1000, 128
SMALL = dict(layers=L, hidden=H, heads=HEADS, kv_heads=KV, ffn_hidden=FFN, vocab=VOCAB, seq_len=S, gated=True)
R = 8
D = H // HEADS
QKV = H + 2 * KV * D
LINEAR = L * (H * QKV + H * H + 3 * H * FFN)  # QKV, projection, gated FC1 (2 x FFN) and FC2 of every layer
ADAPTERS_QKV_PROJ = L * R * ((H + QKV) + (H + H))  # A and B of the QKV and projection adapters


def _cfg(**kw):
    return LlmConfig(dp=2, dropout=False, **kw)


@pytest.mark.parametrize("targets,tp,dropped", [
    (("qkv", "proj"), 1, S * (H + FFN) * 2),          # FC1's input (h) and FC2's (the SwiGLU output, FFN), bf16
    (("qkv", "fc1"), 1, S * FFN * 2),                 # FC2's input only
    (("qkv", "proj", "fc1", "fc2"), 1, 0),            # every input feeds an adapter
    (("proj",), 1, S * (2 * H + FFN) * 2),            # the QKV input too
    (("qkv", "proj"), 2, S * H * 2 + S * FFN // 2 * 2),  # TP 2 without SP: h whole, FFN split
])
def test_frozen_layers_keep_no_inputs(targets, tp, dropped):
    dims = model_dims(**SMALL)
    full = layer_activation_bytes(dims, _cfg(tp=tp))
    lora = layer_activation_bytes(dims, _cfg(tp=tp, lora_rank=R, lora_targets=targets))
    assert full - lora == dropped


def test_lora_fp8_params_hold_the_frozen_base_in_one_byte():
    dims = model_dims(**SMALL)
    params = stage_memory(dims, _cfg(), 0).weights // 2  # bf16: every parameter of the stage
    lora = dict(lora_rank=R, lora_targets=("qkv", "proj"), gemm_dtype="fp8")
    fp8 = stage_memory(dims, _cfg(fp8_params=True, **lora), 0)
    # the linear layers' weights in FP8 (1 byte, no cached transpose), the embedding and LM head in bf16, the
    # adapters in bf16
    assert fp8.weights == (params - LINEAR) * 2 + LINEAR + 2 * ADAPTERS_QKV_PROJ
    # without --fp8-params: bf16 base beside Transformer Engine's cached FP8 copy and transpose (2 bytes)
    bf16 = stage_memory(dims, _cfg(**lora), 0)
    assert bf16.weights == params * 2 + 2 * LINEAR + 2 * ADAPTERS_QKV_PROJ


def test_mxfp8_params_replace_the_bf16_copy():
    dims = model_dims(**SMALL)
    params = stage_memory(dims, _cfg(), 0).weights // 2
    mx = 2 * -(-LINEAR * 33 // 32)  # row-wise and column-wise MXFP8 copies: 1 byte + an E8M0 scale per 32
    assert stage_memory(dims, _cfg(gemm_dtype="mxfp8"), 0).weights == params * 2 + mx
    assert stage_memory(dims, _cfg(gemm_dtype="mxfp8", fp8_params=True), 0).weights == (params - LINEAR) * 2 + mx


def _peak(capsys, argv):
    assert main(["workload", "llm", *argv, "--summary", "--json"]) == 0
    return sum(json.loads(capsys.readouterr().out)["memory"].values())  # (the parts add up to the total)


#: capacity of the presets the published runs used (GB, decimal, as `astra platforms` lists them)
MI325X_GB, H200_GB, B300_GB = 274.9, 151.4, 309.2

LORA_70B = ["--model", "llama2-70b", "--seq-len", "8192", "--tp", "1", "--pp", "1", "--micro-batch-size", "1",
            "--zero", "1", "--lora-rank", "16", "--lora-targets", "qkv,proj", "--gemm-dtype", "fp8",
            "--fp8-params", "--dtype", "bf16", "--no-dropout"]


def test_mlperf_lora_70b_layouts_are_accepted(capsys):
    """MLPerf Training v5.1 llama2_70b_lora: AMD's MI325X (TP 1, CP 1, DP 8) and Dell's H200 (CP 2, DP 4, two
    micro-batches), FP8 with fp8_params; both ran, so neither may be refused (near misses warn)."""
    mi325x = [*LORA_70B, "--dp", "8", "--micro-batches", "1"]
    h200 = [*LORA_70B, "--cp", "2", "--dp", "4", "--micro-batches", "2"]
    assert verdict(_peak(capsys, mi325x), int(MI325X_GB * 1e9)) == "fits"
    assert verdict(_peak(capsys, h200), int(H200_GB * 1e9)) != "oom"
    # with the runs' activation_func_fp8_input_store as well: both fit outright
    for argv, gb in ((mi325x, MI325X_GB), (h200, H200_GB)):
        assert verdict(_peak(capsys, [*argv, "--fp8-activation-input"]), int(gb * 1e9)) == "fits"


def test_gb300_70b_tp1_mxfp8_layout_is_accepted(capsys):
    """Megatron-Bridge's DGX-GB300 Llama 3 70B MXFP8 row (TP 1, PP 4, VP 5, 64 GPUs): fp8_param_gather with MXFP8
    (--fp8-params) and grad_reduce_in_fp32 False (--grad-buffer same)."""
    argv = ["--model", "llama3-70b", "--seq-len", "8192", "--tp", "1", "--pp", "4", "--virtual-stages", "5",
            "--dp", "16", "--micro-batch-size", "1", "--micro-batches", "16", "--zero", "1",
            "--overlap-param-gather", "--gemm-dtype", "mxfp8", "--dtype", "bf16", "--no-dropout"]
    assert verdict(_peak(capsys, argv), int(B300_GB * 1e9)) == "oom"  # (as the docs found it)
    assert verdict(_peak(capsys, [*argv, "--fp8-params", "--grad-buffer", "same"]), int(B300_GB * 1e9)) == "fits"


def test_peak_memory_of_the_h200_lora_by_parts():
    """The H200 LoRA estimate's activations, by hand: 80 layers at 4096 tokens a rank (CP 2), one micro-batch alive
    (PP 1), FC1's and FC2's inputs not kept, plus the last stage's final-norm and LM-head inputs."""
    dims = model_dims(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000, seq_len=8192,
                      gated=True)
    cfg = LlmConfig(cp=2, dp=4, micro_batches=2, zero=1, lora_rank=16, lora_targets=("qkv", "proj"),
                    gemm_dtype="fp8", fp8_params=True, dropout=False)
    # two norm inputs and the QKV input (h each), Q, K, V, the projection's input, the SwiGLU's two inputs; bf16
    per_token = (3 * 8192 + (8192 + 2 * 1024) + 8192 + 2 * 28672) * 2
    assert per_token == 200_704
    assert peak_memory(dims, cfg).activations == 80 * 4096 * per_token + 2 * 4096 * 8192 * 2


def test_fp8_activation_input_keeps_fc1_outputs_in_one_byte():
    dims = model_dims(**SMALL)
    base = layer_activation_bytes(dims, _cfg(gemm_dtype="fp8"))
    fp8 = layer_activation_bytes(dims, _cfg(gemm_dtype="fp8", fp8_activation_input=True))
    assert base - fp8 == S * 2 * FFN * (2 - 1)  # gated FC1's two outputs, 2 bytes -> 1
    tp2 = layer_activation_bytes(dims, _cfg(tp=2, gemm_dtype="fp8")) - layer_activation_bytes(
        dims, _cfg(tp=2, gemm_dtype="fp8", fp8_activation_input=True))
    assert tp2 == S * 2 * (FFN // 2)  # split over TP


def test_fp8_activation_input_cli(capsys):
    small = ["--layers", str(L), "--hidden", str(H), "--heads", str(HEADS), "--kv-heads", str(KV), "--ffn-hidden",
             str(FFN), "--vocab", str(VOCAB), "--seq-len", str(S), "--gated", "--dp", "2", "--no-dropout"]
    with_fp8 = _peak(capsys, [*small, "--gemm-dtype", "fp8", "--fp8-activation-input"])
    assert _peak(capsys, [*small, "--gemm-dtype", "fp8"]) > with_fp8
    assert main(["workload", "llm", *small, "--fp8-activation-input", "--summary"]) == 2
    assert "--fp8-activation-input is Megatron-LM/NeMo training memory with --gemm-dtype fp8" in \
        capsys.readouterr().err


@pytest.mark.parametrize("gemm,per_token", [
    ("same", 4 * H * 2 + (QKV + H) * 2 + FFN * 3 * 2),           # bf16: Korthikanti's count
    # FP8: the QKV and FC1 inputs and FC2's in 1 byte, the projection's a 1-byte copy beside the attention output
    ("fp8", 2 * H * 2 + 2 * H + (QKV + H) * 2 + H + 2 * FFN * 2 + FFN),
    # MXFP8: 1 + 1/32 byte each (an E8M0 scale per 32)
    ("mxfp8", 2 * H * 2 + 2 * H * 33 // 32 + (QKV + H) * 2 + H * 33 // 32 + 2 * FFN * 2 + FFN * 33 // 32),
])
def test_megatron_keeps_linear_inputs_quantized(gemm, per_token):
    dims = model_dims(**SMALL)
    assert layer_activation_bytes(dims, _cfg(gemm_dtype=gemm)) == S * per_token
    # not under FSDP2 (torchao's float8, not Transformer Engine's) nor LoRA (the adapters keep theirs in bf16)
    fsdp = LlmConfig(dp=2, dropout=False, framework="fsdp2", zero=3, gemm_dtype=gemm)
    assert layer_activation_bytes(dims, fsdp) == S * (4 * H * 2 + (QKV + H) * 2 + FFN * 3 * 2)
