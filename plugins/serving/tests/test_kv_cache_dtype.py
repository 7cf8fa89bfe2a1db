"""kv_capacity's ``kv_cache_dtype`` (vLLM's ``--kv-cache-dtype``): an FP8 cache stores one byte per element, so the
same budget holds twice the tokens; by hand."""

import pytest

from astra_serving.capacity import KV_CACHE_DTYPE_BYTES, kv_capacity
from astra_serving.steptime import Layout
from astra_sim.errors import ConfigError


def _layout(model="llama3-8b", tp=1):
    return Layout({"model": model}, "hgx-h100", tp=tp, pp=1, ep=1, run={}, gpus_per_node=8)


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_fp8_halves_the_bytes_per_token(dtype):
    # Llama 3 8B: 32 layers x K and V x 8 KV heads x 128; bf16 2 bytes, FP8 1
    auto = kv_capacity(_layout(), 0.9, 16, 8192, None, 256)
    fp8 = kv_capacity(_layout(), 0.9, 16, 8192, None, 256, kv_cache_dtype=dtype)
    assert auto.kv_bytes_per_token == 2 * 8 * 128 * 2 * 32 and fp8.kv_bytes_per_token == 2 * 8 * 128 * 1 * 32
    assert fp8.kv_bytes_per_token_model == 2 * 8 * 128 * 32
    # the budget (weights, activations, sampler, workspace) is the same: only the blocks grow
    assert fp8.kv_bytes == auto.kv_bytes
    assert fp8.blocks == fp8.kv_bytes // (16 * 2 * 8 * 128 * 32) and fp8.blocks >= 2 * auto.blocks


def test_auto_is_the_models_dtype_and_unknown_is_refused():
    assert KV_CACHE_DTYPE_BYTES["auto"] is None
    assert kv_capacity(_layout(), kv_cache_dtype="auto").kv_bytes_per_token == kv_capacity(_layout()).kv_bytes_per_token
    with pytest.raises(ConfigError, match="--kv-cache-dtype must be one of auto, fp8, fp8_e4m3, fp8_e5m2, got 'int8'"):
        kv_capacity(_layout(), kv_cache_dtype="int8")


def test_mla_caches_its_latent_in_fp8_too():
    """DeepSeek-V2-Lite's MLA cache: (kv_lora_rank 512 + rope 64) per layer and position, one copy (not per head),
    27 layers; one H100."""
    layout = Layout({"model": "deepseek-v2-lite"}, "hgx-h100", tp=1, pp=1, ep=1, run={}, gpus_per_node=8)
    auto = kv_capacity(layout, 0.9, 64, 2048, 4096, 16)
    fp8 = kv_capacity(layout, 0.9, 64, 2048, 4096, 16, kv_cache_dtype="fp8")
    assert auto.kv_bytes_per_token == (512 + 64) * 2 * 27 and fp8.kv_bytes_per_token == (512 + 64) * 1 * 27
    assert fp8.blocks == fp8.kv_bytes // (64 * (512 + 64) * 27)
