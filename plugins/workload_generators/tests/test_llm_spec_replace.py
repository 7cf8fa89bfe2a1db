"""``LlmSpec.replace`` parses only the changes (issue 37: a serving run replaces its step's shape once per new batch
shape): the same spec and the same errors as parsing every option again, the way it was done before."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_generators.llm import LlmSpec

SMALL = {"layers": 4, "hidden": 256, "heads": 8, "vocab": 1000, "seq-len": 128}
#: specs as mappings (a few of test_llm_spec's CASES, and astra serve's step spec)
SPECS = [
    {"preset": "llama3-8b", "layers": 2, "seq_len": 256, "tp": 2, "dp": 2, "micro-batches": 2,
     "sequence_parallel": True, "recompute": "selective"},
    {"model": "qwen3-30b-a3b", "layers": 2, "seq-len": 256, "dp": 2, "ep": 2, "moe_capacity_factor": 1.25,
     "moe-pad-to-capacity": True, "micro_batches": 2},
    {**SMALL, "experts": 8, "top-k": 2, "moe-ffn": 512, "dp": 4, "ep": 4, "moe_expert_load": [4, 3, 2, 1, 1, 1, 1, 1],
     "recompute": True, "gemm_dtype": "fp8"},
    {"preset": "llama2-70b", "layers": 2, "mode": "decode", "tp": 4, "batch_size": 8, "prompt_len": 128,
     "decode_len": 2, "decode_steps": 2, "logits": "last", "inference-elementwise": False},
    {**SMALL, "tp": 2, "sequence-parallel": True, "tp-comm-overlap": True, "comm_sms": {"dp": 8, "tp": 4},
     "zero": 3, "dp": 2, "reshard_after_forward": True, "dropout": False, "per_rank_files": True},
    {"model": "llama3-8b", "dtype": "bf16", "inference_elementwise": True, "tp": 1, "pp": 1, "dp": 8, "ep": 1,
     "logits": "last", "platform": "hgx-h100"},
]


def _reparsed(spec, **changes):
    """The earlier replace: every option of the spec, with the changes, parsed again."""
    current = spec.to_mapping()
    for a, b in (("model", "preset"), ("preset", "model")):
        if changes.get(a) is not None and b not in changes:
            current[b] = None
    current.update(changes)
    return LlmSpec.from_mapping(current, where="LlmSpec.replace")


CHANGES = [
    {"mode": "decode", "batch_size": 8, "prompt_len": 1023, "decode_len": 1},
    {"mode": "prefill", "batch_size": 1, "prompt_len": 700},
    {"mode": "mixed", "batch_size": 6, "prompt_len": 299, "decode_len": 1, "prefill_chunk": 256, "prefill_done": 0},
    {"tp": 2, "dp": 4, "logits": "last"}, {"platform": "hgx-h100", "gpu": None}, {"recompute": "full"},
    {"comm_sms": {"tp": 8}}, {"lora_targets": ["qkv", "proj"], "lora_rank": 8}, {"dropout": False, "causal": True},
    {"inference_elementwise": False}, {"tie_embeddings": False}, {"preset": "llama3-8b"}, {"model": "qwen3-8b"},
    {"batch_size": None, "prompt_len": None}, {},
]


@pytest.mark.parametrize("case", range(len(SPECS)))
@pytest.mark.parametrize("changes", CHANGES, ids=range(len(CHANGES)))
def test_replace_gives_the_spec_of_every_option_parsed_again(case, changes):
    spec = LlmSpec.from_mapping(SPECS[case])
    try:
        expected = _reparsed(spec, **changes)
    except ConfigError as exc:
        with pytest.raises(ConfigError) as got:
            spec.replace(**changes)
        assert str(got.value) == str(exc)
        return
    assert spec.replace(**changes) == expected


@pytest.mark.parametrize("changes", [{"tp": 0}, {"mode": "sideways"}, {"prompt_len": -1}, {"model": "x", "preset": "y"},
                                     {"recompute": "half"}, {"dtype": "fp7"}])
def test_a_bad_change_is_the_same_error(changes):
    spec = LlmSpec.from_mapping(SPECS[0])
    with pytest.raises(ConfigError) as old:
        _reparsed(spec, **changes)
    with pytest.raises(ConfigError) as new:
        spec.replace(**changes)
    assert str(new.value) == str(old.value)
