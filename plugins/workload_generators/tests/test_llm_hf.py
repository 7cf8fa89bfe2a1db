"""``astra workload llm --model``: Hugging Face configs read as they are, parameter counts against the model
cards, the new parts' FLOPs and bytes against hand computations, and the bad-input paths."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.report import read_report
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.hf import FAMILIES, load_hf_config, shipped_configs
from astra_workload_generators.llm.summary import kv_cache_bytes_per_token, params_active, params_total


def _dims(name, **overrides):
    base, _, _ = load_hf_config(name)
    return model_dims(base=base, **overrides)


# Published totals and actives (model cards / papers), in billions; None: the card gives no active count.
PUBLISHED = {
    "llama2-7b": (6.74, None), "llama2-70b": (68.98, None), "llama3-8b": (8.03, None), "llama3-70b": (70.6, None),
    "llama3.1-8b": (8.03, None), "llama3.1-70b": (70.6, None), "llama3.1-405b": (405, None),
    "mistral-7b-v0.1": (7.24, None), "mixtral-8x7b": (46.7, 12.9), "qwen2-7b": (7.62, None),
    "qwen1.5-moe-a2.7b": (14.3, 2.7), "qwen2-57b-a14b": (57.4, 14), "qwen3-8b": (8.2, None),
    "qwen3-30b-a3b": (30.5, 3.3), "qwen3-235b-a22b": (235, 22), "gemma2-9b": (9.24, None),
    "gemma3-27b": (27, None), "deepseek-v3": (671, 37), "deepseek-v2": (236, 21), "deepseek-v2-lite": (15.7, None),
    "deepseek-moe-16b": (16.4, None), "gpt2": (0.124, None), "gpt-neox-20b": (20.55, None),
    "phi3-mini": (3.8, None), "gpt3-175b": (175, None), "gpt3-13b": (12.85, None),
    # (test_llm_new_models.py: gpt-oss's card counts actives without the input embedding; Gemma 3: text only)
    "llama3.3-70b": (70.6, None), "deepseek-r1": (671, 37), "gpt-oss-20b": (20.91, None),
    "gpt-oss-120b": (116.83, None), "mistral-small-24b": (23.6, None), "gemma3-4b": (3.88, None),
    "gemma3-12b": (11.77, None),
}


def _digits_tolerance(published):
    """Half a unit of the published number's last digit (37B: 0.5B), relative: cards round actives to two
    significant figures, which alone can be more than 1 % away."""
    text = repr(float(published)).rstrip("0").rstrip(".")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10 ** -decimals / published


def test_every_shipped_config_is_listed():
    assert sorted(PUBLISHED) == shipped_configs()


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_model_cards(name):
    total, active = PUBLISHED[name]
    dims = _dims(name)
    assert params_total(dims) / 1e9 == pytest.approx(total, rel=0.01)
    if active is not None:  # within 1 % of the published value's rounding interval
        assert params_active(dims) / 1e9 == pytest.approx(active, rel=0.01 + _digits_tolerance(active))
    if not dims.moe:
        assert params_active(dims) == params_total(dims)


def test_issue_examples_exactly():
    """The issue's three models: totals within 1 %; Mixtral's three-digit active count too."""
    assert params_total(_dims("deepseek-v3")) / 671e9 == pytest.approx(1, rel=0.01)
    assert params_total(_dims("qwen3-30b-a3b")) / 30.5e9 == pytest.approx(1, rel=0.01)
    assert params_total(_dims("mixtral-8x7b")) / 46.7e9 == pytest.approx(1, rel=0.01)
    assert params_active(_dims("mixtral-8x7b")) / 12.9e9 == pytest.approx(1, rel=0.01)


@pytest.mark.parametrize("preset,config", [
    ("gpt3-175b", "gpt3-175b"), ("gpt3-13b", "gpt3-13b"), ("llama2-7b", "llama2-7b"), ("llama2-70b", "llama2-70b"),
    ("llama3-8b", "llama3-8b"), ("llama3-70b", "llama3-70b"), ("mixtral-8x7b", "mixtral-8x7b"),
    ("deepseek-moe-16b", "deepseek-moe-16b")])
def test_the_presets_are_shipped_configs(preset, config):
    """Every preset has a config file with the same dimensions (the context length aside: Mixtral's preset keeps
    the 4096 it always had; the embedding tie only changes params_total)."""
    fields = dict(model_dims(preset).__dict__)
    from_file = dict(_dims(config, seq_len=fields["seq_len"]).__dict__)
    fields.pop("tied_embeddings"), from_file.pop("tied_embeddings")
    assert from_file == fields


def test_qwen3_head_dim_sets_the_attention_widths(tmp_path):
    """Qwen3-30B-A3B: hidden 2048, 32 heads of 128: Q is 4096 wide and the output projection reads 4096, not
    hidden; K and V are 4 heads of 128."""
    dims = _dims("qwen3-30b-a3b", layers=1, seq_len=64, vocab=1000)
    assert (dims.hidden, dims.heads, dims.head_dim, dims.kv_heads) == (2048, 32, 128, 4)
    generate_llm(dims, LlmConfig(), tmp_path / "q")
    mms = {n.attrs["label"]: n for n in read_rank_nodes(tmp_path / "q", 0) if n.name == "aten::mm"}
    assert mms["fwd.l0.mb0.qkv"].inputs_shapes == "[[64, 2048], [2048, 5120]]"  # 32*128 + 2*4*128
    assert mms["fwd.l0.mb0.proj"].inputs_shapes == "[[64, 4096], [4096, 2048]]"
    attn = next(n for n in read_rank_nodes(tmp_path / "q", 0)
                if n.name == "aten::_scaled_dot_product_flash_attention")
    assert attn.inputs_shapes == "[[1, 32, 64, 128], [1, 4, 64, 128], [1, 4, 64, 128]]"
    assert attn.attrs["num_ops"] == 4 * 64 * 64 * 128 * 32


def _hand_training_flops(L, s, h, H, d, dv, attn_params, moe_active, vocab):
    """6 * tokens * (attention weights + activated FFN weights + LM head) + per layer QK^T (2*s^2*H*d) and AV
    (2*s^2*H*dv) forward, twice that backward."""
    P = L * (attn_params + moe_active) + vocab * h
    return 6 * P * s + L * 3 * (2 * s * s * H * d + 2 * s * s * H * dv)


def _comp_ops(prefix, npus):
    return sum(n.attrs["num_ops"] for r in range(npus) for n in read_rank_nodes(prefix, r)
               if n.type == T.COMP_NODE)


def test_qwen3_moe_training_flops_by_hand(tmp_path):
    L, s, V = 2, 64, 1024  # (a multiple of 128 x TP: Megatron's vocabulary padding leaves it)
    dims = _dims("qwen3-30b-a3b", layers=L, seq_len=s, vocab=V)
    h, H, d, kv, E, k, f = 2048, 32, 128, 4, 128, 8, 768
    attn = h * (H * d + 2 * kv * d) + H * d * h
    moe = h * E + k * 3 * h * f
    generate_llm(dims, LlmConfig(), tmp_path / "q")
    assert _comp_ops(tmp_path / "q", 1) == _hand_training_flops(L, s, h, H, d, d, attn, moe, V)


def test_mla_gemms_flops_and_cache_by_hand(tmp_path):
    """DeepSeek-V3's MLA, TP 2: q_a 7168->1536 and kv_a 7168->512+64 whole on each rank; q_b 1536->128*192 and
    kv_b 512->128*(128+128) split over TP; the output projection reads 128*128/2; attention with 192-wide
    queries/keys and 128-wide values; the decode KV cache is (512 + 64) x 2 bytes per position and layer."""
    dims = _dims("deepseek-v3", layers=1, moe_dense_layers=0, seq_len=64, vocab=1024, mtp_layers=0)
    # (a DeepSpeed step: Megatron-Core refuses MoE at TP > 1 without sequence parallelism, which splits the rows)
    generate_llm(dims, LlmConfig(tp=2, framework="deepspeed"), tmp_path / "d")
    nodes = read_rank_nodes(tmp_path / "d", 0)
    mm = {n.attrs["label"]: n.inputs_shapes for n in nodes if n.name == "aten::mm"}
    assert mm["fwd.l0.mb0.q_a"] == "[[64, 7168], [7168, 1536]]"
    assert mm["fwd.l0.mb0.q_b"] == "[[64, 1536], [1536, 12288]]"
    assert mm["fwd.l0.mb0.kv_a"] == "[[64, 7168], [7168, 576]]"
    assert mm["fwd.l0.mb0.kv_b"] == "[[64, 512], [512, 16384]]"
    assert mm["fwd.l0.mb0.proj"] == "[[64, 8192], [8192, 7168]]"
    assert mm["bwd.l0.mb0.kv_b.dgrad"] == "[[64, 16384], [16384, 512]]"
    assert mm["bwd.l0.mb0.q_a.wgrad"] == "[[7168, 64], [64, 1536]]"
    attn = next(n for n in nodes if n.name == "aten::_scaled_dot_product_flash_attention")
    assert attn.inputs_shapes == "[[1, 64, 64, 192], [1, 64, 64, 192], [1, 64, 64, 128]]"
    assert attn.attrs["num_ops"] == 2 * 64 * 64 * (192 + 128) * 64
    # whole-model FLOPs over both ranks, by hand (TP splits the up-projections; q_a/kv_a are computed on both)
    h, H = 7168, 128
    attn_params = h * 1536 + 1536 * H * 192 + h * 576 + 512 * H * 256 + H * 128 * h
    moe = h * 256 + (8 + 1) * 3 * h * 2048
    replicated = 6 * 64 * (h * 1536 + h * 576)  # q_a, kv_a and the router run on both TP ranks
    expected = _hand_training_flops(1, 64, h, H, 192, 128, attn_params, moe, 1024) + replicated + 6 * 64 * h * 256
    assert _comp_ops(tmp_path / "d", 2) == expected
    assert kv_cache_bytes_per_token(_dims("deepseek-v3")) == 61 * (512 + 64) * 2
    generate_llm(dims, LlmConfig(tp=2, mode="decode", prompt_len=100, decode_len=1), tmp_path / "dd")
    dec = next(n for n in read_rank_nodes(tmp_path / "dd", 0) if n.name == "aten::_scaled_dot_product_flash_attention")
    assert dec.attrs["kv_cache_bytes"] == 101 * 576 * 2


def test_summary_json(capsys):
    assert main(["workload", "llm", "--model", "qwen3-30b-a3b", "--summary", "--json", "--seq-len", "4096"]) == 0
    out = json.loads(capsys.readouterr().out)
    dims = _dims("qwen3-30b-a3b")
    assert out["params_total"] == params_total(dims) and out["params_active"] == params_active(dims)
    assert out["kv_cache_bytes_per_token"] == 2 * 48 * 4 * 128 * 2
    assert out["memory_peak_bytes"] > 0 and "weights" in out["memory"]
    # issue 34: the JSON says its units, as every command's does; the memory parts (bytes) have no unit in their name
    assert out["units"] == {"size": "bytes", "memory": "bytes", "params": "count", "flops": "flop",
                            "seq_len": "tokens", "sliding_window": "tokens"}
    assert all(isinstance(v, int) for v in out["memory"].values())
    # forward FLOPs per token: 2 x activated matmul weights (LM head included, embedding lookup not) + attention
    # (less the input embedding, the RMSNorms and each layer's q_norm / k_norm of head_dim 128)
    matmul = params_active(dims) - 151936 * 2048 - (2 * 48 + 1) * 2048 - 48 * 2 * 128
    assert out["flops_per_token"] == 2 * matmul + 2 * 48 * 4096 * (2 * 32 * 128)


def test_flags_override_and_folder(tmp_path, capsys):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(json.loads(
        (load_hf_config("llama3-8b")[2]).read_text())))
    assert main(["workload", "llm", "--model", str(folder), "--layers", "2", "--summary", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layers"] == 2


def test_warnings_name_the_key(capsys):
    assert main(["workload", "llm", "--model", "deepseek-v3", "--summary"]) == 0
    err = capsys.readouterr().err
    assert "quantization_config" in err and "deepseek-v3.json" in err and "num_nextn" not in err  # (MTP modelled)
    assert main(["workload", "llm", "--model", "qwen3-8b", "--summary"]) == 0
    assert "warning" not in capsys.readouterr().err  # its sliding_window is switched off


def _write(tmp_path, data, name="c.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_errors_name_file_and_key(tmp_path, capsys):
    good = json.loads(load_hf_config("llama3-8b")[2].read_text())
    with pytest.raises(ConfigError, match="known model types: .*deepseek_v3.*llama"):
        load_hf_config(_write(tmp_path, {**good, "model_type": "mamba"}))
    with pytest.raises(ConfigError, match=r"c\.json: key 'num_attention_heads' must be an integer"):
        load_hf_config(_write(tmp_path, {**good, "num_attention_heads": "32"}))
    with pytest.raises(ConfigError, match=r"c\.json: missing key 'hidden_size'"):
        load_hf_config(_write(tmp_path, {k: v for k, v in good.items() if k != "hidden_size"}))
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_hf_config(_write(tmp_path, "{"))
    with pytest.raises(ConfigError, match="JSON object"):
        load_hf_config(_write(tmp_path, [1]))
    with pytest.raises(ConfigError, match="does not exist"):
        load_hf_config(tmp_path)  # a folder without config.json
    assert main(["workload", "llm", "--model", str(_write(tmp_path, {"model_type": "x"})), "--summary"]) == 2
    assert "model_type" in capsys.readouterr().err
    assert main(["workload", "llm", "--model", "llama3-8b"]) == 2
    assert "-o/--output" in capsys.readouterr().err


KEYS = ["model_type", "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
        "intermediate_size", "vocab_size", "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
        "n_routed_experts", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
        "first_k_dense_replace", "n_shared_experts", "shared_expert_intermediate_size", "num_local_experts",
        "n_layer", "n_embd", "n_head", "text_config", "tie_word_embeddings", "sliding_window", "decoder_sparse_step"]
VALUES = st.one_of(st.sampled_from(sorted(FAMILIES) + ["gemma3"]), st.integers(-2, 70), st.none(), st.booleans(),
                   st.floats(allow_nan=True), st.text(max_size=3), st.lists(st.integers(0, 3), max_size=2),
                   st.dictionaries(st.sampled_from(KEYS), st.integers(0, 64), max_size=6))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=len(KEYS)))
def test_any_json_config_loads_or_is_a_config_error(tmp_path, data):
    path = tmp_path / "h.json"
    path.write_text(json.dumps(data))
    try:
        base, warnings, _ = load_hf_config(path)
        dims = model_dims(base=base)
    except ConfigError:
        return
    assert all(isinstance(w, str) for w in warnings)
    assert params_total(dims) >= params_active(dims) > 0


@pytest.mark.parametrize("model,extra", [
    ("qwen3-30b-a3b", ["--layers", "2"]),
    ("deepseek-v3", ["--layers", "2", "--moe-dense-layers", "1"]),
])
@pytest.mark.parametrize("mode", ["train", "decode"])
def test_qwen3_moe_and_deepseek_v3_simulate_on_hgx_h100(tmp_path, model, extra, mode):
    """A training step (sequence-parallel: Megatron-Core refuses MoE at TP > 1 without it) and a decode step of a
    few layers, TP 2 x EP 4 on one HGX H100 node."""
    pytest.importorskip("astra_gpu_model")
    steps = ["--micro-batches", "2", "--sequence-parallel"] if mode == "train" else [
        "--mode", "decode", "--batch-size", "8", "--prompt-len", "200", "--decode-len", "4"]
    prefix = str(tmp_path / "w")
    assert main(["workload", "llm", "--model", model, *extra, "--seq-len", "256", "--tp", "2", "--dp", "4",
                 "--ep", "4", *steps, "-o", prefix]) == 0
    report = tmp_path / "r.json"
    assert main(["run", "--platform", "hgx-h100", "--nodes", "1", "--workload-configuration", prefix, "-q",
                 "--report-json", str(report)]) == 0
    data = read_report(report)
    ranks = data["ranks"]
    assert len(ranks) == 8 and min(r["finish_ns"] for r in ranks) > 0
    # the routed experts' grouped GEMMs (32 or 64 local experts per rank) are timed as such, without a warning
    assert not [w for w in data["warnings"] if "grouped" in w], data["warnings"]
    nodes = read_rank_nodes(prefix, 0)
    fc1 = next(n for n in nodes if n.attrs.get("label", "").endswith("experts.fc1"))
    assert len(fc1.attrs["grouped_gemm_sizes"]) == {"qwen3-30b-a3b": 32, "deepseek-v3": 64}[model]


def test_sliding_window_costs_s_times_w_by_hand(tmp_path):
    """Gemma 2 (layer 0 local, layer 1 global) with a 64-key window over 256 positions: the local layer's
    attention is a 256 x 64 band (timed as that block, not causal), the global one 256 x 256 causal; FLOPs
    6*P*s + 6*s*(64 + 256)*(2*H*d); decode reads a 64-position cache on the local layer."""
    dims = _dims("gemma2-9b", layers=2, seq_len=256, vocab=1024, window=64)  # (128 x 8: not padded further)
    assert [dims.is_local(i) for i in range(2)] == [True, False]
    generate_llm(dims, LlmConfig(), tmp_path / "g")
    nodes = read_rank_nodes(tmp_path / "g", 0)
    attn = {n.attrs["label"]: n for n in nodes if n.name == "aten::_scaled_dot_product_flash_attention"}
    local, glob = attn["fwd.l0.mb0.attn"], attn["fwd.l1.mb0.attn"]
    assert local.inputs_shapes == "[[1, 16, 256, 256], [1, 8, 64, 256], [1, 8, 64, 256]]"
    assert local.attrs["num_ops"] == 4 * 256 * 64 * 256 * 16 and "False, False" in local.inputs_values
    assert glob.attrs["num_ops"] == 4 * 256 * 256 * 256 * 16
    h, H, kv, d, f = 3584, 16, 8, 256, 14336
    P = 2 * (h * (H * d + 2 * kv * d) + H * d * h + 3 * h * f) + 1024 * h
    assert _comp_ops(tmp_path / "g", 1) == 6 * P * 256 + 6 * 256 * (64 + 256) * 2 * H * d
    generate_llm(dims, LlmConfig(mode="decode", prompt_len=200), tmp_path / "gd")
    dec = [n for n in read_rank_nodes(tmp_path / "gd", 0) if n.name == "aten::_scaled_dot_product_flash_attention"]
    assert [n.attrs["kv_cache_bytes"] for n in dec] == [2 * 64 * kv * d * 2, 2 * 201 * kv * d * 2]


def test_window_pattern_from_layer_types(tmp_path):
    cfg = json.loads(load_hf_config("gemma3-27b")[2].read_text())["text_config"]
    cfg.update(model_type="gemma3_text", num_hidden_layers=4,
               layer_types=["sliding_attention", "full_attention"] * 2)
    base, _, _ = load_hf_config(_write(tmp_path, cfg))
    assert (base["window"], base["window_pattern"]) == (1024, 2)
    cfg["layer_types"] = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    with pytest.raises(ConfigError, match="layer_types"):
        load_hf_config(_write(tmp_path, cfg))


def test_mtp_module_by_hand(tmp_path):
    """DeepSeek-V3's MTP module in training: eh_proj (2h -> h), one MoE layer with MLA and the shared LM head, forward
    and backward: 6 x tokens x those weights + the layer's attention; its gradients are reduced; decode has none."""
    s, V = 64, 1024  # (a multiple of 128: Megatron's vocabulary padding leaves it)
    with_mtp = _dims("deepseek-v3", layers=1, moe_dense_layers=0, seq_len=s, vocab=V)
    assert with_mtp.mtp_layers == 1
    without = _dims("deepseek-v3", layers=1, moe_dense_layers=0, seq_len=s, vocab=V, mtp_layers=0)
    cfg = LlmConfig(dp=2, ep=2)
    generate_llm(with_mtp, cfg, tmp_path / "m")
    generate_llm(without, cfg, tmp_path / "n")
    h, H = 7168, 128
    attn_params = h * 1536 + 1536 * H * 192 + h * 576 + 512 * H * 256 + H * 128 * h
    moe = h * 256 + (8 + 1) * 3 * h * 2048
    mtp = 6 * s * (2 * h * h + attn_params + moe + V * h) + 6 * s * s * H * (192 + 128)
    assert _comp_ops(tmp_path / "m", 2) - _comp_ops(tmp_path / "n", 2) == 2 * mtp  # two DP replicas
    labels = [n.attrs.get("label", n.name) for n in read_rank_nodes(tmp_path / "m", 0)]
    assert "fwd.mtp0.mb0.eh_proj" in labels and "bwd.mtp0.mb0.eh_proj.wgrad" in labels
    assert "fwd.l1.mb0.kv_b" in labels and any(x.startswith("dp_") and "mtp0" in x for x in labels)
    generate_llm(with_mtp, LlmConfig(mode="decode"), tmp_path / "md")
    assert not any("mtp" in n.attrs.get("label", "") for n in read_rank_nodes(tmp_path / "md", 0))
    with pytest.raises(ConfigError, match="multi-token prediction"):
        generate_llm(with_mtp, LlmConfig(dp=2, zero=3), tmp_path / "z")


def test_moe_keys_of_each_family():
    """Shared experts from Qwen's shared_expert_intermediate_size (a multiple of the expert size) and DeepSeek's
    n_shared_experts; dense leading layers from first_k_dense_replace."""
    q = _dims("qwen1.5-moe-a2.7b")
    assert (q.experts, q.top_k, q.moe_ffn, q.shared_experts, q.moe_dense_layers) == (60, 4, 1408, 4, 0)
    d = _dims("deepseek-v3")
    assert (d.experts, d.top_k, d.moe_ffn, d.shared_experts, d.moe_dense_layers, d.moe_layers) == \
        (256, 8, 2048, 1, 3, 58)
    assert (d.q_lora_rank, d.kv_lora_rank, d.rope_dim, d.head_dim, d.v_dim) == (1536, 512, 64, 192, 128)
    m = _dims("mixtral-8x7b")
    assert (m.experts, m.top_k, m.moe_ffn, m.shared_experts) == (8, 2, 14336, 0)


def test_model_and_preset_are_exclusive(capsys):
    with pytest.raises(SystemExit):
        main(["workload", "llm", "--model", "llama3-8b", "--preset", "llama3-8b", "--summary"])


@pytest.mark.parametrize("spelling,name", [
    ("meta-llama/Meta-Llama-3-70B", "llama3-70b"), ("llama-3-70b", "llama3-70b"), ("Llama3-70B", "llama3-70b"),
    ("meta-llama/Llama-3.1-405B", "llama3.1-405b"), ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama3.1-8b"),
    ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"), ("mistralai/Mistral-7B-v0.1", "mistral-7b-v0.1"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("google/gemma-2-9b", "gemma2-9b"),
    ("microsoft/Phi-3-mini-4k-instruct", "phi3-mini"), ("meta-llama/Llama-2-7b-hf", "llama2-7b"),
])
def test_hugging_face_ids_and_other_spellings_name_the_shipped_configs(spelling, name):
    from astra_workload_generators.llm.hf import CONFIG_DIR, resolve_model_path

    assert resolve_model_path(spelling) == CONFIG_DIR / f"{name}.json"


def test_an_unknown_model_says_what_is_near_and_how_to_list():
    from astra_workload_generators.llm.hf import resolve_model_path

    with pytest.raises(ConfigError, match=r"--model 'llama-3-7b'.*did you mean .*'llama3-8b'.*--list-models"):
        resolve_model_path("llama-3-7b")
    with pytest.raises(ConfigError, match="does not exist"):  # a file the user meant: the reader names it
        load_hf_config("./no-such-config.json")


def test_list_models_lists_every_shipped_config_with_its_id(capsys):
    import json

    from astra_sim.cli import main

    assert main(["workload", "llm", "--list-models", "--json"]) == 0
    rows = {row["model"]: row for row in json.loads(capsys.readouterr().out)}
    assert sorted(rows) == shipped_configs()
    assert rows["llama3.1-70b"]["hugging_face_id"] == "meta-llama/Llama-3.1-70B"
    assert rows["llama3-8b"]["preset"] and not rows["llama3.1-8b"]["preset"]
    assert rows["mixtral-8x7b"]["active_parameters"] < rows["mixtral-8x7b"]["parameters"]


def test_flops_are_shown_in_a_unit_that_shows_them():
    from astra_workload_generators.llm.cli import flops_text

    assert flops_text(6.03e10) == "60.3 GFLOP"
    assert flops_text(1.234e15) == "1.23 PFLOP"
    assert flops_text(4.2e12) == "4.2 TFLOP"
