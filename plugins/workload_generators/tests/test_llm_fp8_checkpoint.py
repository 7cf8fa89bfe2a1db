"""An FP8 checkpoint in inference (``--gemm-dtype fp8 --fp8-params`` with ``--mode prefill/decode``): the linear
layers' weights held in E4M3 with an FP32 scale per 128x128 block, as DeepSeek-V3 ships them (README_WEIGHTS.md),
not in --dtype. Hand-computed on a small model, the refusal without FP8 GEMMs, and the CLI."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main

from astra_workload_generators.llm import LlmConfig, model_dims
from astra_workload_generators.llm.blockscale import fp8_checkpoint_weight_bytes
from astra_workload_generators.llm.config import ConfigError, check_config
from astra_workload_generators.llm.memory import stage_memory

L, H, HEADS, KV, FFN, VOCAB, S = 4, 256, 8, 4, 512, 1000, 128
SMALL = dict(layers=L, hidden=H, heads=HEADS, kv_heads=KV, ffn_hidden=FFN, vocab=VOCAB, seq_len=S, gated=True)
D = H // HEADS
LINEAR = L * (H * (H + 2 * KV * D) + H * H + 3 * H * FFN)  # QKV, projection, gated FC1 and FC2 of every layer


def _decode(**kw):
    return LlmConfig(mode="decode", prompt_len=64, micro_batch_size=2, **kw)


def test_scales_one_fp32_per_128x128_block():
    assert fp8_checkpoint_weight_bytes(128 * 128) == 128 * 128 + 4
    assert fp8_checkpoint_weight_bytes(128 * 128 + 1) == 128 * 128 + 1 + 8
    assert fp8_checkpoint_weight_bytes(7168 * 2048) == 7168 * 2048 + 4 * 56 * 16  # an expert's FC2: 56 x 16 blocks


def test_decode_holds_the_linear_weights_in_one_byte_and_their_scales():
    dims = model_dims(**SMALL)
    bf16 = stage_memory(dims, _decode(gemm_dtype="fp8"), 0)
    fp8 = stage_memory(dims, _decode(gemm_dtype="fp8", fp8_params=True), 0)
    blocks = -(-LINEAR // (128 * 128))
    assert LINEAR == 4 * (256 * 512 + 256 * 256 + 3 * 256 * 512)
    assert bf16.weights - fp8.weights == 2 * LINEAR - (LINEAR + 4 * blocks)
    assert fp8.kv_cache == bf16.kv_cache and fp8.activations == bf16.activations


def test_refused_without_fp8_gemms():
    dims = model_dims(**SMALL)
    with pytest.raises(ConfigError, match="--fp8-params in inference needs --gemm-dtype fp8"):
        check_config(dims, _decode(fp8_params=True))
    with pytest.raises(ConfigError, match="--fp8-params in inference needs --gemm-dtype fp8"):
        check_config(dims, _decode(gemm_dtype="mxfp8", fp8_params=True))


def test_end_to_end_deepseek_v3_decode_at_ep8_fits_in_fp8(capsys):
    """DeepSeek-V3 decode at EP 8 (32 of the 256 experts per GPU): in bf16 about 198 GB of weights per GPU, more
    than a B200's 180 GiB; as shipped (FP8) about half of that."""
    argv = ["workload", "llm", "--model", "deepseek-v3", "--mode", "decode", "--ep", "8", "--dp", "8",
            "--batch-size", "64", "--prompt-len", "4096", "--gemm-dtype", "fp8", "--summary", "--json"]

    def weights(*extra):
        assert main([*argv, *extra]) == 0
        return json.loads(capsys.readouterr().out)["memory"]["weights"]

    bf16, fp8 = weights(), weights("--fp8-params")
    assert bf16 > 180 * 2**30 > 100e9 < fp8 < 0.52 * bf16
    assert main([a for a in argv if a not in ("--gemm-dtype", "fp8")] + ["--fp8-params"]) == 2
    assert "--fp8-params in inference needs --gemm-dtype fp8" in capsys.readouterr().err
