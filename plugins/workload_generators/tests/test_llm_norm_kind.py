"""The layers' norms follow the model (issue 36): an RMSNorm model's norms are ATen's ``_fused_rms_norm`` and
``_fused_rms_norm_backward`` (what ``torch.nn.functional.rms_norm`` runs on CUDA), a LayerNorm model's
``native_layer_norm`` as before, and the gpu model times each at its own measured rate and Hopper floor."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from astra_sim.chakra import types as T
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.hf import load_hf_config, shipped_configs

SMALL = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
BF = "Tensor(c10::BFloat16)"


def _norm_nodes(tmp_path, dims, **cfg):
    generate_llm(dims, LlmConfig(**{"micro_batches": 1, "micro_batch_size": 2, **cfg}), tmp_path / "t")
    nodes = read_rank_nodes(tmp_path / "t", 0)
    return {n.attrs["label"]: n for n in nodes if n.type == T.COMP_NODE and n.attrs.get("label", "").endswith(".ln")}


def test_rms_norm_model_emits_fused_rms_norm(tmp_path):
    dims = model_dims(**SMALL, rms_norm=True)
    nodes = _norm_nodes(tmp_path, dims)
    r, h = 2 * 128, 256
    fwd, bwd = nodes["fwd.l0.mb0.ln1.ln"], nodes["bwd.l0.mb0.ln1.ln"]
    assert fwd.name == "aten::_fused_rms_norm"
    assert fwd.inputs_shapes == f"[[{r}, {h}], [{h}]]" and fwd.inputs_types == f"['{BF}', '{BF}']"
    assert fwd.attrs["tensor_size"] == (2 * r * h + h) * 2  # x and the weight read, y written (no bias, no mean)
    assert bwd.name == "aten::_fused_rms_norm_backward"
    assert bwd.inputs_shapes == f"[[{r}, {h}], [{r}, {h}], [{r}, 1], [{h}]]"
    assert bwd.inputs_types == f"['{BF}', '{BF}', 'Tensor(float)', '{BF}']"
    assert bwd.attrs["tensor_size"] == (3 * r * h + h) * 2 + r * 4  # dy, x, weight, fp32 rstd read; dx written
    counts = Counter(n.name for n in nodes.values())
    # two per layer and the final norm before the LM head (test_llm_final_norm.py)
    assert counts == {"aten::_fused_rms_norm": 2 * dims.layers + 1,
                      "aten::_fused_rms_norm_backward": 2 * dims.layers + 1}


def test_layer_norm_model_unchanged(tmp_path):
    nodes = _norm_nodes(tmp_path, model_dims(**{**SMALL, "gated": False}))
    assert Counter(n.name for n in nodes.values()) == {"aten::native_layer_norm": 5,  # (+ the final norm)
                                                       "aten::native_layer_norm_backward": 5}


def test_inference_and_recompute_norms_follow_the_model(tmp_path):
    dims = model_dims(**SMALL, rms_norm=True)
    decode = _norm_nodes(tmp_path, dims, mode="decode", prompt_len=64, decode_len=2)
    assert {n.name for n in decode.values()} == {"aten::_fused_rms_norm"}
    recompute = _norm_nodes(tmp_path, dims, recompute=True)
    assert Counter(n.name for k, n in recompute.items() if k.startswith("recompute.")) == {
        "aten::_fused_rms_norm": 2 * dims.layers}


@pytest.mark.parametrize("name", shipped_configs())
def test_shipped_configs_norm_kind(name):
    """LayerNorm for GPT-2, GPT-3 and GPT-NeoX (their Hugging Face / Megatron modules: nn.LayerNorm), RMSNorm for
    every other family shipped (Llama, Mistral, Mixtral, Qwen, Phi-3, Gemma, DeepSeek, GPT-OSS)."""
    dims, _, _ = load_hf_config(name)
    layer_norm = name.startswith(("gpt2", "gpt3", "gpt-neox"))
    assert model_dims(base=dims).rms_norm is (not layer_norm)


@pytest.mark.parametrize("preset, rms", [("gpt3-175b", False), ("gpt3-13b", False), ("llama2-7b", True),
                                         ("llama3-70b", True), ("mixtral-8x7b", True), ("deepseek-moe-16b", True)])
def test_presets_norm_kind(preset, rms):
    assert model_dims(preset).rms_norm is rms


def test_gpu_model_times_each_norm_at_its_own_rate_and_floor(tmp_path):
    """On the H100 SXM (Hopper: the H200's measured floors; the same SMs and clock as the H200, so the measured
    rates unscaled, below HBM's): floor + bytes / rate, from the data files, for both kinds both ways."""
    gpu_model = pytest.importorskip("astra_gpu_model.model")
    data = Path(gpu_model.__file__).with_name("data")
    rates = json.loads((data / "memops_fit.json").read_text())["rates_bytes_per_s"]
    floors = json.loads((data / "memops_floor.json").read_text())["floors_us"]
    assert floors["_fused_rms_norm"] == pytest.approx(4.683) and floors["native_layer_norm"] == pytest.approx(6.923)
    model = gpu_model.GpuComputeModel(gpu="H100-SXM")
    gpu = model.gpu
    assert (gpu.sm_count, gpu.boost_clock_mhz) == (132, 1980)  # the H200's: the rates apply unscaled
    hbm = gpu.gemm.hbm_efficiency * gpu.hbm_bytes_per_s
    r, h = 2 * 128, 256
    expected_bytes = {"_fused_rms_norm": (2 * r * h + h) * 2, "_fused_rms_norm_backward": (3 * r * h + h) * 2 + 4 * r,
                      "native_layer_norm": (2 * r * h + 2 * h) * 2,
                      "native_layer_norm_backward": (3 * r * h + 2 * h) * 2 + 8 * r}
    times = {}
    for rms in (True, False):
        nodes = _norm_nodes(tmp_path / str(rms), model_dims(**SMALL, rms_norm=rms))
        for label in ("fwd.l0.mb0.ln1.ln", "bwd.l0.mb0.ln1.ln"):
            node = nodes[label]
            op = node.name.split("::", 1)[1]
            rate = min(rates["aten::" + op], hbm)
            seconds = floors[op] * 1e-6 + expected_bytes[op] / rate
            assert model.compute_time_ns(node, 0) == pytest.approx(seconds * 1e9, abs=1)
            times[op] = model.compute_time_ns(node, 0)
    assert times["_fused_rms_norm"] < times["native_layer_norm"]
    assert times["_fused_rms_norm_backward"] < times["native_layer_norm_backward"]
