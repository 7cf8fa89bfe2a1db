"""``LlmSpec`` (issue 34): one typed object behind ``astra workload llm``, built the same from the command line,
from a mapping (a sweep's ``llm:`` block, Python keywords) or in code; ``generate_llm_workload`` writes the
command's bytes; the inference element-wise kernels are on by default, as ``astra serve`` times its steps."""

from __future__ import annotations

import argparse
import json
import os

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

from astra_sim.chakra import read_et  # noqa: E402
from astra_sim.cli import main  # noqa: E402
from astra_sim.errors import ConfigError  # noqa: E402
from astra_sim_testing.fuzzing import check_error, fuzz_settings, hostile_values, mutated  # noqa: E402

import astra_workload_generators as awg  # noqa: E402
from astra_workload_generators.llm import LlmSpec, generate_llm_workload, llm_summary  # noqa: E402
from astra_workload_generators.llm.cli import dims_and_config  # noqa: E402

SMALL = {"layers": 4, "hidden": 256, "heads": 8, "vocab": 1000, "seq-len": 128}
SMALL_ARGV = ["--layers", "4", "--hidden", "256", "--heads", "8", "--vocab", "1000", "--seq-len", "128"]

#: (astra workload llm arguments, the same options as a mapping)
CASES = [
    (["--preset", "llama3-8b", "--layers", "2", "--seq-len", "256", "--tp", "2", "--dp", "2", "--micro-batches",
      "2", "--sequence-parallel", "--recompute", "selective"],
     {"preset": "llama3-8b", "layers": 2, "seq_len": 256, "tp": 2, "dp": 2, "micro-batches": 2,
      "sequence_parallel": True, "recompute": "selective"}),
    # a shipped Hugging Face config, MoE with EP, capacity and padding
    (["--model", "qwen3-30b-a3b", "--layers", "2", "--seq-len", "256", "--dp", "2", "--ep", "2",
      "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity", "--micro-batches", "2"],
     {"model": "qwen3-30b-a3b", "layers": 2, "seq-len": 256, "dp": 2, "ep": 2, "moe_capacity_factor": 1.25,
      "moe-pad-to-capacity": True, "micro_batches": 2}),
    (SMALL_ARGV + ["--experts", "8", "--top-k", "2", "--moe-ffn", "512", "--dp", "4", "--ep", "4",
                   "--moe-expert-load", "4,3,2,1,1,1,1,1", "--recompute", "--gemm-dtype", "fp8"],
     {**SMALL, "experts": 8, "top-k": 2, "moe-ffn": 512, "dp": 4, "ep": 4, "moe_expert_load": [4, 3, 2, 1, 1, 1, 1, 1],
      "recompute": True, "gemm_dtype": "fp8"}),
    # inference modes
    (SMALL_ARGV + ["--mode", "prefill", "--tp", "2", "--cp", "2", "--batch-size", "4", "--micro-batches", "2",
                   "--prompt-len", "64"],
     {**SMALL, "mode": "prefill", "tp": 2, "cp": 2, "batch-size": 4, "micro-batches": 2, "prompt-len": 64}),
    (["--preset", "llama2-70b", "--layers", "2", "--mode", "decode", "--tp", "4", "--batch-size", "8",
      "--prompt-len", "128", "--decode-len", "2", "--decode-steps", "2", "--logits", "last",
      "--no-inference-elementwise"],
     {"preset": "llama2-70b", "layers": 2, "mode": "decode", "tp": 4, "batch_size": 8, "prompt_len": 128,
      "decode_len": 2, "decode_steps": 2, "logits": "last", "inference-elementwise": False}),
    (SMALL_ARGV + ["--mode", "mixed", "--tp", "2", "--pp", "2", "--batch-size", "4", "--prefill-chunk", "32",
                   "--prefill-done", "16", "--no-causal", "--dtype", "fp16"],
     {**SMALL, "mode": "mixed", "tp": 2, "pp": 2, "batch_size": 4, "prefill_chunk": 32, "prefill_done": 16,
      "causal": False, "dtype": "fp16"}),
    (SMALL_ARGV + ["--tp", "2", "--sequence-parallel", "--tp-comm-overlap", "--comm-sms", "dp=8,tp=4", "--zero",
                   "3", "--dp", "2", "--reshard-after-forward", "--no-dropout", "--per-rank-files"],
     {**SMALL, "tp": 2, "sequence-parallel": True, "tp-comm-overlap": True, "comm_sms": {"dp": 8, "tp": 4},
      "zero": 3, "dp": 2, "reshard_after_forward": True, "dropout": False, "per_rank_files": True}),
]


def _parser():
    return LlmSpec.add_cli_args(argparse.ArgumentParser(prog="t"))


def test_the_spec_defaults_are_the_parsers():
    assert LlmSpec.from_cli_args(_parser().parse_args([])) == LlmSpec()
    assert LlmSpec.from_mapping({}) == LlmSpec()
    assert LlmSpec().inference_elementwise is True


@pytest.mark.parametrize("argv,mapping", CASES, ids=range(len(CASES)))
def test_from_mapping_equals_from_cli_args(argv, mapping):
    cli = LlmSpec.from_cli_args(_parser().parse_args(argv))
    spec = LlmSpec.from_mapping(mapping)
    assert spec == cli
    assert spec.resolve() == cli.resolve()
    assert LlmSpec.from_mapping(spec.to_mapping()) == spec
    # the command's own namespace (with --summary, -o) gives the same through the kept wrapper
    assert dims_and_config(_parser().parse_args(argv)) == spec.resolve()


@pytest.mark.parametrize("mapping,words", [
    ({"tpp": 2}, ["'tpp'", "did you mean 'tp'"]),
    ({"micro_batch": 2}, ["'micro_batch'", "micro-batch"]),
    ({"output": "x"}, ["'output'"]),
    ({"tp": "two"}, ["tp", "--tp"]),
    ({"tp": 0}, ["tp"]),
    ({"tp": True}, ["tp"]),
    ({"mode": "training"}, ["mode", "train"]),
    ({"recompute": "partial"}, ["recompute"]),
    ({"sequence-parallel": "yes"}, ["sequence-parallel"]),
    ({"tp": 2, "TP": 3}, ["'TP'"]),
    ({"seq_len": 8, "seq-len": 9}, ["'seq-len'", "'seq_len'"]),
    ({"preset": "llama3-8b", "model": "llama3-8b"}, ["--model", "--preset"]),
])
def test_errors_name_the_key(mapping, words):
    with pytest.raises(ConfigError) as info:
        LlmSpec.from_mapping(mapping, where="sweep.yaml: llm")
    message = str(info.value)
    assert message.startswith("sweep.yaml: llm")
    for word in words:
        assert word in message, message


def test_replace():
    spec = LlmSpec(preset="llama3-8b", layers=2, seq_len=256)
    assert spec.replace(tp=2).tp == 2 and spec.replace(tp=2).preset == "llama3-8b"
    other = spec.replace(model="qwen3-8b")
    assert other.model == "qwen3-8b" and other.preset is None
    with pytest.raises(ConfigError, match="'tpp'.*'tp'"):
        spec.replace(tpp=2)
    with pytest.raises(ConfigError, match="tp"):
        spec.replace(tp=0)


def test_resolve_checks_the_layout():
    with pytest.raises(ConfigError, match="--ep needs a mixture-of-experts"):
        LlmSpec.from_mapping({**SMALL, "dp": 2, "ep": 2}).resolve()
    with pytest.raises(ConfigError, match="--batch-size is for"):
        LlmSpec.from_mapping({**SMALL, "batch-size": 2}).resolve()


def test_hf_warnings_go_to_on_warning(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                                "num_attention_heads": 8, "intermediate_size": 512, "vocab_size": 1000,
                                "max_position_embeddings": 128, "quantization_config": {"bits": 4}}))
    seen = []
    LlmSpec(model=str(path)).resolve(on_warning=seen.append)
    assert seen and "quantization_config" in seen[0]


# -------------------------------------------------------------------------------------- random mappings
_KEYS = sorted({name for f in LlmSpec.__dataclass_fields__ for name in (f, f.replace("_", "-"))})
_WORDS = st.sampled_from(["llama3-8b", "qwen3-30b-a3b", "prefill", "decode", "mixed", "full", "selective", "last",
                          "zipf:1.2", "zipf:1:3", "dp=8", "fp8", "unfused", "-1", "--tp", "2", "0.5", "nan", "x.json",
                          "/", "."])
_VALUES = st.one_of(hostile_values(), _WORDS, st.integers(0, 16), st.lists(st.integers(-1, 5), max_size=4))
_MAPPINGS = st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.text(max_size=6)), _VALUES, max_size=6)


@fuzz_settings(200)
@given(_MAPPINGS, st.booleans())
def test_random_mappings_raise_only_config_errors(mapping, small):
    """Whatever a sweep file holds, the user gets one ConfigError line naming where it comes from, never a
    traceback (the spec, then its resolution against the model)."""
    base = dict(SMALL) if small else {}
    if any(str(k).replace("-", "_") in ("preset", "model") for k in mapping):
        base = {}
    try:
        spec = LlmSpec.from_mapping({**base, **mapping}, where="sweep.yaml: llm")
        spec.resolve(on_warning=lambda line: None)
    except ConfigError as exc:
        assert "\n" not in str(exc)
    # any other exception fails the test


@fuzz_settings(150)
@given(mutated({**SMALL, "tp": 2, "mode": "decode", "batch-size": 4, "logits": "last", "dtype": "fp16",
                "sequence-parallel": True, "comm-sms": "tp=4"}))
def test_a_bad_value_names_its_key(case):
    doc, key = case
    try:
        LlmSpec.from_mapping(doc, where="sweep.yaml: llm")
    except ConfigError as exc:
        check_error(exc, "sweep.yaml", keys=(key, str(key).replace("_", "-")))


# ------------------------------------------------------------------------------------------ generating
def _files(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}


@pytest.mark.parametrize("index", [0, 2, 4, 5, 6])
def test_generate_llm_workload_writes_the_commands_bytes(tmp_path, index, capsys):
    argv, mapping = CASES[index]
    assert main(["workload", "llm", *argv, "-o", str(tmp_path / "cli" / "w")]) == 0
    summary = generate_llm_workload(LlmSpec.from_mapping(mapping), tmp_path / "api" / "w")
    ours, theirs = _files(tmp_path / "api"), _files(tmp_path / "cli")
    assert ours == theirs and ours
    assert summary["npus"] == LlmSpec.from_mapping(mapping).resolve()[1].npus
    # a mapping is accepted as well, and per_rank_files overrides the spec's
    summary = awg.generate_llm_workload(mapping, tmp_path / "per" / "w", per_rank_files=True)
    assert os.path.exists(tmp_path / "per" / f"w.{summary['npus'] - 1}.et")


def test_llm_summary_is_the_commands(capsys):
    argv, mapping = CASES[1]
    capsys.readouterr()
    assert main(["workload", "llm", *argv, "--summary", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == llm_summary(mapping) == awg.llm_summary(LlmSpec.from_mapping(
        mapping))


def _names(prefix):
    names = set()
    for name in os.listdir(os.path.dirname(prefix)):
        if name.endswith(".et"):
            names |= {n.name for n in read_et(os.path.join(os.path.dirname(prefix), name)).nodes}
    return names


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_inference_elementwise_is_on_by_default(tmp_path, mode, capsys):
    """``astra workload llm --mode prefill`` emits the norms, residual adds and activation that ``astra serve``
    times; --no-inference-elementwise leaves them out."""
    argv = SMALL_ARGV + ["--mode", mode, "--tp", "2"]
    assert main(["workload", "llm", *argv, "-o", str(tmp_path / "on" / "w")]) == 0
    assert main(["workload", "llm", *argv, "--no-inference-elementwise", "-o", str(tmp_path / "off" / "w")]) == 0
    on, off = _names(str(tmp_path / "on" / "w")), _names(str(tmp_path / "off" / "w"))
    assert {"aten::native_layer_norm", "aten::add_"} <= on - off
    assert LlmSpec.from_mapping({**SMALL, "mode": mode}).resolve()[1].ew_forward


def test_training_ignores_inference_elementwise(tmp_path, capsys):
    argv = SMALL_ARGV + ["--tp", "2", "--micro-batches", "2"]
    assert main(["workload", "llm", *argv, "-o", str(tmp_path / "a" / "w")]) == 0
    assert main(["workload", "llm", *argv, "--no-inference-elementwise", "-o", str(tmp_path / "b" / "w")]) == 0
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_a_runs_throughput_is_its_steps_flops_and_tokens_over_the_simulated_time(tmp_path):
    """astra run on an LLM step reports model FLOP/s per GPU, MFU against the platform's peak, HFU with full
    recomputation, and tokens/s, from the numbers the generator writes into the traces."""
    import astra_sim
    from astra_sim.platforms import get_platform

    from astra_workload_generators.llm import LlmSpec, generate_llm_workload
    from astra_workload_generators.llm.model import training_flops

    spec = LlmSpec.from_mapping({"preset": "llama3-8b", "tp": 8, "dp": 2, "micro_batches": 2, "seq_len": 1024,
                                 "recompute": "full"})
    generate_llm_workload(spec, str(tmp_path / "w"))
    report = astra_sim.simulate(workload=str(tmp_path / "w"), platform="hgx-h100", nodes=2)
    t = report.stats["throughput"]
    seconds = report.max_finish_ns / 1e9
    dims, cfg = spec.resolve()
    flops = training_flops(dims, 4, 8, 128 * 8)  # dp 2 x 2 micro-batches of 1 sequence; Megatron's padded vocab
    assert t["model_flops_per_step"] == float(flops) and t["tokens_per_step"] == 4 * 1024
    assert t["model_flop_per_s_per_gpu"] == pytest.approx(flops / seconds / 16)
    assert t["tokens_per_s"] == pytest.approx(4 * 1024 / seconds)
    peak = get_platform("hgx-h100").peak_tflops("bf16") * 1e12
    assert t["mfu"] == pytest.approx(flops / seconds / 16 / peak)
    assert t["hfu"] == pytest.approx(t["mfu"] * 4 / 3)  # full recomputation runs the forward (1/3) again
    # --gpu replaces the platform's GPU: MFU is against the GPU that ran
    b200 = astra_sim.simulate(workload=str(tmp_path / "w"), platform="hgx-h100", nodes=2, gpu="B200")
    assert b200.stats["throughput"]["peak_flop_per_s_per_gpu"] > peak
