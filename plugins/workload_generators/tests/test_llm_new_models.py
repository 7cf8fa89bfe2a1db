"""The configs shipped for current open models (Llama 3.3, DeepSeek-R1, gpt-oss, Mistral Small 3, Gemma 3 4B/12B):
each generates a step, its parameter count is the published one within 2 %, its Hugging Face id resolves to it, and
what the generator approximates is said."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main

from astra_workload_generators.llm.hf import CONFIG_DIR, resolve_model_path

# Published total parameters in billions (source: llm/configs/README.md): model cards, the gpt-oss model card's
# Table 1, and for Gemma 3 the technical report's Table 1, text model only (embedding + non-embedding: the
# generator builds the text decoder).
NEW = {
    "llama3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct", 70.6),
    "deepseek-r1": ("deepseek-ai/DeepSeek-R1", 671),
    "gpt-oss-20b": ("openai/gpt-oss-20b", 20.91),
    "gpt-oss-120b": ("openai/gpt-oss-120b", 116.83),
    "mistral-small-24b": ("mistralai/Mistral-Small-24B-Base-2501", 23.6),
    "gemma3-4b": ("google/gemma-3-4b-pt", 0.675 + 3.209),
    "gemma3-12b": ("google/gemma-3-12b-pt", 1.012 + 10.759),
}


def _summary(capsys, name):
    assert main(["workload", "llm", "--model", name, "--summary", "--json"]) == 0
    printed = capsys.readouterr()
    return json.loads(printed.out), printed.err


@pytest.mark.parametrize("name", sorted(NEW))
def test_parameter_count_is_the_published_one(name, capsys):
    summary, _ = _summary(capsys, name)
    assert summary["params_total"] / 1e9 == pytest.approx(NEW[name][1], rel=0.02)


@pytest.mark.parametrize("name", sorted(NEW))
def test_one_step_of_each_new_model(name, tmp_path, capsys):
    """Two layers (DeepSeek-R1: four) of the model, its widths, experts and attention as published: one training
    step on 2 ranks."""
    prefix = tmp_path / "w"
    layout = ["--ep", "2", "--dp", "2"] if name.startswith(("gpt-oss", "deepseek")) else ["--tp", "2"]
    layers = "4" if name == "deepseek-r1" else "2"  # (its first 3 layers are dense)
    assert main(["workload", "llm", "--model", name, "--layers", layers, "--seq-len", "256", *layout,
                 "-o", str(prefix)]) == 0
    assert "2 ranks" in capsys.readouterr().out
    workload = json.loads((tmp_path / "w.workload.json").read_text())
    assert workload["npus"] == 2 and all((tmp_path / c["trace"]).stat().st_size > 0 for c in workload["classes"])


@pytest.mark.parametrize("name", sorted(NEW))
def test_the_hugging_face_id_names_the_shipped_config(name):
    hf_id = NEW[name][0]
    assert resolve_model_path(hf_id) == CONFIG_DIR / f"{name}.json"
    assert resolve_model_path(hf_id.lower()) == CONFIG_DIR / f"{name}.json"


def test_other_spellings():
    for spelling, name in (("Llama-3.3-70B", "llama3.3-70b"), ("gemma-3-12b-it", "gemma3-12b"),
                           ("gpt-oss-120b", "gpt-oss-120b"), ("DeepSeek-R1", "deepseek-r1"),
                           ("mistralai/Mistral-Small-24B-Instruct-2501", "mistral-small-24b")):
        assert resolve_model_path(spelling) == CONFIG_DIR / f"{name}.json"


def test_deepseek_r1_is_deepseek_v3s_architecture():
    r1, v3 = (json.loads((CONFIG_DIR / f"{n}.json").read_text()) for n in ("deepseek-r1", "deepseek-v3"))
    assert {k: v for k, v in r1.items() if k != "_source"} == {k: v for k, v in v3.items() if k != "_source"}


def test_gpt_oss_alternates_windowed_layers_and_says_what_is_approximated(capsys):
    summary, err = _summary(capsys, "gpt-oss-120b")
    assert summary["experts"] == 128 and summary["top_k"] == 4 and summary["head_dim"] == 64
    assert summary["sliding_window"] == 128 and summary["local_layers"] == 18 == summary["layers"] // 2
    assert "attention sinks" in err and "swiglu_limit" in err and "quantization_config" in err
    # the active count takes the input embedding too: the card's 5.13B (embedding left out) + 201088 x 2880
    assert summary["params_active"] / 1e9 == pytest.approx(5.13 + 201088 * 2880 / 1e9, rel=0.02)


def test_gemma3_keeps_five_local_layers_to_one_global(capsys):
    summary, err = _summary(capsys, "gemma3-12b")
    assert summary["local_layers"] == 40 and summary["layers"] == 48 and "vision_config" in err
