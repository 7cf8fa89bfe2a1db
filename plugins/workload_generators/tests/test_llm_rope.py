"""RoPE on Q and K (``--rope``) and the attention kernel the flash nodes name (``--attention-kernel``), each
defaulted by ``--framework fsdp2`` and absent otherwise, by hand."""

from __future__ import annotations

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, LlmSpec, generate_llm, model_dims

# head_dim 256 / 8 = 32; one sequence of 128 tokens: q is 1 x 128 x 8 x 32 = 32,768 elements, k (4 KV heads) 16,384
LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
Q, K, FREQS = 128 * 8 * 32, 128 * 4 * 32, 128 * 32 * 4  # elements, elements, bytes (fp32 (1, s, 1, d))


def _labelled(prefix, start):
    return [n for n in read_rank_nodes(prefix, 0) if (n.attrs.get("label") or "").startswith(start)]


def _generate(tmp_path, name="t", **kw):
    cfg = LlmConfig(**{"dp": 2, "zero": 3, "framework": "fsdp2", "micro_batches": 1, **kw})
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return tmp_path / name


def test_eager_rope_is_three_kernels_per_tensor_each_way(tmp_path):
    # x.float(): read 2 B, write 4 B per element; the complex product: read the fp32 view (4 B) and the fp32
    # frequencies, write 4 B; the cast back: read 4 B, write 2 B
    prefix = _generate(tmp_path)
    fwd = _labelled(prefix, "fwd.l0.mb0.rope.")
    assert [(n.attrs["label"].split("rope.")[1], n.name) for n in fwd] == [
        ("q.float", "aten::copy_"), ("q.rotate", "aten::mul"), ("q.type_as", "aten::copy_"),
        ("k.float", "aten::copy_"), ("k.rotate", "aten::mul"), ("k.type_as", "aten::copy_")]
    assert [n.attrs["tensor_size"] for n in fwd] == [Q * 6, Q * 8 + FREQS, Q * 6, K * 6, K * 8 + FREQS, K * 6]
    bwd = _labelled(prefix, "bwd.l0.mb0.rope.")
    assert [n.attrs["label"].split("rope.")[1] for n in bwd] == [
        "q.type_as.bwd", "q.rotate.bwd", "q.float.bwd", "k.type_as.bwd", "k.rotate.bwd", "k.float.bwd"]
    assert sum(n.attrs["tensor_size"] for n in bwd) == sum(n.attrs["tensor_size"] for n in fwd)
    # 20 B per element of q and k each way: about 2 x 20 x 49,152 B per layer and step here
    assert sum(n.attrs["tensor_size"] for n in fwd) == 20 * (Q + K) + 2 * FREQS


def test_rope_runs_before_the_attention_and_its_backward_before_the_qkv_gradient(tmp_path):
    nodes = {n.attrs.get("label"): n for n in read_rank_nodes(_generate(tmp_path), 0)}
    ids = {label: n.id for label, n in nodes.items()}
    assert ids["fwd.l0.mb0.qkv"] < ids["fwd.l0.mb0.rope.q.float"] < ids["fwd.l0.mb0.rope.k.type_as"] \
        < ids["fwd.l0.mb0.attn"]
    assert ids["bwd.l0.mb0.attn"] < ids["bwd.l0.mb0.rope.k.float.bwd"] < ids["bwd.l0.mb0.qkv.dgrad"]
    # the chain: the attention waits for the rotated keys (through eager repeat_kv's K and V copies, .eager_step)
    assert ids["fwd.l0.mb0.rope.k.type_as"] in nodes["fwd.l0.mb0.repeat_kv.k"].data_deps
    assert ids["fwd.l0.mb0.repeat_kv.v"] in nodes["fwd.l0.mb0.attn"].data_deps


def test_op_level_checkpointing_recomputes_the_rotation(tmp_path):
    # torchtitan's op SAC saves the attention's output, not its inputs: the rotated q and k are recomputed
    prefix = _generate(tmp_path, recompute_selective=True)
    assert [n.attrs["label"] for n in _labelled(prefix, "recompute.l0.mb0.rope.")] == [
        f"recompute.l0.mb0.rope.{t}.{s}" for t in "qk" for s in ("float", "rotate", "type_as")]


def test_fused_rope_is_one_kernel_per_tensor(tmp_path):
    # read the bf16 tensor (2 B) and the frequencies, write it (2 B)
    prefix = _generate(tmp_path, rope="fused")
    fwd = _labelled(prefix, "fwd.l0.mb0.rope.")
    assert [(n.name, n.attrs["tensor_size"]) for n in fwd] == [("aten::mul", Q * 4 + FREQS),
                                                               ("aten::mul", K * 4 + FREQS)]
    assert len(_labelled(prefix, "bwd.l0.mb0.rope.")) == 2


def test_the_flash_nodes_name_fa2_under_fsdp2_and_nothing_by_default(tmp_path):
    prefix = _generate(tmp_path)
    attn = [n for n in read_rank_nodes(prefix, 0) if "attention" in n.name]
    assert attn and {n.attrs["attention_kernel"] for n in attn} == {"fa2"}  # forward and backward
    # Megatron's default (no --framework): no attribute, no RoPE node, as every trace before
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=1, micro_batches=1), tmp_path / "m")
    nodes = read_rank_nodes(tmp_path / "m", 0)
    assert not [n for n in nodes if "attention_kernel" in n.attrs]
    assert not [n for n in nodes if ".rope." in (n.attrs.get("label") or "")]
    # named explicitly
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=1, micro_batches=1, attention_kernel="cudnn",
                                                rope="fused"), tmp_path / "c")
    nodes = read_rank_nodes(tmp_path / "c", 0)
    assert {n.attrs.get("attention_kernel") for n in nodes if "attention" in n.name} == {"cudnn"}
    assert len([n for n in nodes if ".rope." in (n.attrs.get("label") or "")]) == 2 * 2 * 2  # 2 layers, q k, fwd bwd
    # --rope none under fsdp2 drops the nodes
    assert not _labelled(_generate(tmp_path, "n", rope="none"), "fwd.l0.mb0.rope.")


def test_bad_combinations_are_config_errors():
    with pytest.raises(ConfigError, match="--attention-kernel .* needs --attention flash"):
        LlmSpec.from_argv(["--preset", "gpt3-13b", "--attention", "unfused", "--attention-kernel", "fa2"]).resolve()
    with pytest.raises(ConfigError, match="--rope: multi-head latent attention"):
        LlmSpec.from_argv(["--model", "deepseek-v2-lite", "--rope", "eager"]).resolve(on_warning=lambda line: None)
    with pytest.raises(ConfigError, match="--rope"):
        LlmSpec.from_argv(["--preset", "gpt3-13b", "--rope", "sometimes"])
    with pytest.raises(ConfigError, match="--rope: multi-head latent attention"):
        LlmSpec.from_argv(["--model", "deepseek-v2-lite", "--rope", "fused-qkv"]).resolve(on_warning=lambda line: None)
    for other in (["--framework", "fsdp2"], ["--mode", "decode"]):  # TE's fused QKV RoPE: Megatron training only
        with pytest.raises(ConfigError, match="--rope fused-qkv is Transformer Engine's fused QKV RoPE"):
            LlmSpec.from_argv(["--preset", "llama3-8b", "--rope", "fused-qkv", *other]).resolve()
    LlmSpec.from_argv(["--preset", "llama3-8b", "--rope", "fused-qkv"]).resolve()  # a Megatron step takes it


def test_the_command_line_flags(tmp_path, capsys):
    base = ["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "4", "--ffn-hidden",
            "512", "--vocab", "1000", "--seq-len", "128", "--gated", "--dp", "2"]
    assert main([*base, "--attention-kernel", "fa3", "--rope", "eager", "-o", str(tmp_path / "w")]) == 0
    nodes = read_rank_nodes(tmp_path / "w", 0)
    assert {n.attrs.get("attention_kernel") for n in nodes if "attention" in n.name} == {"fa3"}
    assert len(_labelled(tmp_path / "w", "fwd.l0.mb0.rope.")) == 6
    with pytest.raises(SystemExit) as stop:
        main([*base, "--attention-kernel", "fa4", "-o", str(tmp_path / "x")])
    assert stop.value.code != 0
    assert "--attention-kernel" in capsys.readouterr().err


def test_astra_run_on_hopper_times_the_named_kernel(tmp_path, capsys):
    """End to end: ``astra workload llm --attention-kernel ...`` then ``astra run --platform hgx-h100``: FA3 beats
    FA2 (the paper's rates), and the eager RoPE adds memory-bound time."""
    import json

    pytest.importorskip("astra_gpu_model")
    base = ["workload", "llm", "--layers", "2", "--hidden", "1024", "--heads", "8", "--kv-heads", "8",
            "--ffn-hidden", "2048", "--vocab", "1000", "--seq-len", "4096", "--gated", "--dp", "8"]
    steps = {}
    for name, extra in (("fa2", ["--attention-kernel", "fa2"]), ("fa3", ["--attention-kernel", "fa3"]),
                        ("fa2_rope", ["--attention-kernel", "fa2", "--rope", "eager"])):
        prefix = str(tmp_path / name)
        assert main([*base, *extra, "-o", prefix]) == 0
        capsys.readouterr()
        assert main(["run", "--workload-configuration", prefix, "--platform", "hgx-h100", "--nodes", "1",
                     "--json"]) == 0
        steps[name] = json.loads(capsys.readouterr().out)["summary"]["max_finish_ns"]
    assert steps["fa3"] < steps["fa2"] < steps["fa2_rope"]
