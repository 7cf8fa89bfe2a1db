"""A ``--preset`` and the shipped config of the same name (``--model``) are one model (issue 36: the same question
gets the same answer through every door). GPT-3 ties its LM head to the token embedding (Brown et al. 2020, 2.1: GPT-2's
architecture, whose logits are ``h @ wte.T``, openai/gpt-2 122c55a5 src/model.py; Megatron-LM's GPT unless
``--untie-embeddings-and-output-weights``): the ``gpt3-*`` presets tie, as their GPT-2-format config files do."""

import json

import pytest

from astra_sim.cli import main
from astra_workload_generators.llm import LlmSpec
from astra_workload_generators.llm.hf import load_hf_config
from astra_workload_generators.llm.model import PRESETS, model_dims, total_parameters

#: what a preset states otherwise than its config, on purpose: Mixtral's preset trains at 4,096 tokens by default,
#: its config's max_position_embeddings is the 32,768-token context (the sequence length, not the model)
KNOWN = {"mixtral-8x7b": {"seq_len"}}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_is_its_config_file(name):
    """Every field of the model the generator and ``astra search`` resolve (``model_dims`` of the preset, of the
    config's keys) is the same, and so is the parameter count ``--summary`` reports."""
    by_preset, _ = LlmSpec.from_argv(["--preset", name]).resolve(on_warning=lambda line: None)
    by_model, _ = LlmSpec.from_argv(["--model", name]).resolve(on_warning=lambda line: None)
    differ = {k for k, v in vars(by_preset).items() if getattr(by_model, k) != v}
    assert differ == KNOWN.get(name, set())
    # astra search's door: model_dims of the preset, or of the config's keys (astra_sweep.search)
    base, _, _ = load_hf_config(name)
    assert model_dims(name) == by_preset and model_dims(None, base=base) == by_model
    assert total_parameters(by_preset) == total_parameters(by_model)


def test_gpt3_ties_and_its_count_is_the_papers():
    """GPT-3 175B: one table for the embedding and the LM head, 174.60B parameters (the paper's 175.0B; untied it
    would be 175.22B, a second 50,257 x 12,288 table)."""
    dims = model_dims("gpt3-175b")
    assert dims.tied_embeddings and model_dims("gpt3-13b").tied_embeddings
    assert total_parameters(dims) == 174_604_259_328
    untied, _ = LlmSpec.from_argv(["--preset", "gpt3-175b", "--no-tie-embeddings"]).resolve()
    assert total_parameters(untied) - total_parameters(dims) == 50257 * 12288


def _step_ns(tmp_path, name, *words):
    prefix, out = str(tmp_path / name), tmp_path / f"{name}.json"
    assert main(["workload", "llm", *words, "--layers", "2", "--seq-len", "256", "--tp", "2", "--pp", "2",
                 "--micro-batches", "2", "-o", prefix]) == 0
    assert main(["run", "--workload-configuration", prefix, "--platform", "hgx-h100", "--report-json", str(out),
                 "-q"]) == 0
    return json.loads(out.read_text())["summary"]["max_finish_ns"]


def test_the_same_step_through_both_doors(tmp_path):
    """At PP 2, where a tied table is one copy on the first and one on the last stage whose gradients are
    all-reduced over the embedding group: ``--preset gpt3-13b`` and ``--model gpt3-13b`` simulate the same step to
    the ns, and the untied preset (the generator's answer before) does not."""
    preset = _step_ns(tmp_path, "p", "--preset", "gpt3-13b")
    config = _step_ns(tmp_path, "m", "--model", "gpt3-13b")
    untied = _step_ns(tmp_path, "u", "--preset", "gpt3-13b", "--no-tie-embeddings")
    assert preset == config != untied
