"""``astra serve --kv-cache-dtype`` (vLLM's names: auto, fp8, fp8_e4m3, fp8_e5m2) through ServeSpec to the KV
capacity: an FP8 cache on a bf16 model holds twice the tokens in the same budget, and the report says which."""

import json

import pytest
from hypothesis import given, strategies as st

from astra_serving.capacity import KV_CACHE_DTYPE_BYTES
from astra_serving.spec import ServeSpec
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim_testing.fuzzing import fuzz_settings

# Llama 3 8B in bf16 on one H100: 32 layers x K and V x 8 KV heads x 128 x 2 bytes per token
BF16_PER_TOKEN = 32 * 2 * 8 * 128 * 2


def _serve(tmp_path, *argv, name="r"):
    report = tmp_path / f"{name}.json"
    assert main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "2", "--requests", "4",
                 "--prompt-len", "64", "--output-len", "4", *argv, "-o", str(report), "-q"]) == 0
    return json.loads(report.read_text())


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_the_cli_doubles_the_kv_tokens_of_a_bf16_model(tmp_path, dtype):
    auto = _serve(tmp_path, name="auto")["kv_cache"]
    fp8 = _serve(tmp_path, "--kv-cache-dtype", dtype, name=dtype)["kv_cache"]
    assert auto["kv_cache_dtype"] == "auto" and fp8["kv_cache_dtype"] == dtype
    assert auto["kv_bytes_per_token"] == BF16_PER_TOKEN and fp8["kv_bytes_per_token"] == BF16_PER_TOKEN // 2
    assert fp8["kv_bytes"] == auto["kv_bytes"]  # the same budget
    # blocks of 16 tokens: floor(kv / (16 x bytes per token)), by hand
    assert auto["blocks"] == auto["kv_bytes"] // (16 * BF16_PER_TOKEN)
    assert fp8["blocks"] == fp8["kv_bytes"] // (16 * BF16_PER_TOKEN // 2)
    assert fp8["tokens"] in (2 * auto["tokens"], 2 * auto["tokens"] + 16)  # twice, to the block


def test_the_default_is_auto_and_a_mapping_says_the_same():
    spec = ServeSpec.from_mapping({"model": "llama3-8b", "platform": "hgx-h100", "qps": 1})
    assert spec.kv_cache_dtype == "auto"
    assert ServeSpec.from_mapping({"model": "llama3-8b", "platform": "hgx-h100", "qps": 1,
                                   "kv-cache-dtype": "fp8_e5m2"}).kv_cache_dtype == "fp8_e5m2"


def test_a_bad_value_is_one_line_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "1", "--kv-cache-dtype", "int8"])
    assert stop.value.code != 0 and "--kv-cache-dtype" in capsys.readouterr().err


@fuzz_settings(50)
@given(st.text(max_size=12))
def test_the_mapping_reader_takes_vllms_names_or_says_which(value):
    mapping = {"model": "llama3-8b", "platform": "hgx-h100", "qps": 1, "kv_cache_dtype": value}
    if value in KV_CACHE_DTYPE_BYTES:
        assert ServeSpec.from_mapping(mapping).kv_cache_dtype == value
    else:
        with pytest.raises(ConfigError) as err:
            ServeSpec.from_mapping(mapping)
        assert "kv_cache_dtype" in str(err.value) and len(str(err.value).splitlines()) == 1
