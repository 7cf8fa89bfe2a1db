"""torchao's tensorwise FP8 step (``--fp8-recipe tensorwise``) has none of Transformer Engine's bookkeeping: no
"amax" reduction group in its communicator groups and no ``te_fp8_transposes`` in its trace (torchao writes both
layouts on every GPU: pytorch/ao eab345c ``float8/float8_linear.py``); a Megatron FP8 step keeps both."""

from __future__ import annotations

import json

from astra_sim.chakra import read_metadata
from astra_workload_compact import read_compact_workload
from astra_workload_generators.llm import LlmSpec, generate_llm_workload

SMALL = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, micro_batches=1,
             gemm_dtype="fp8")


def _step(tmp_path, name, **kw):
    prefix = str(tmp_path / name)
    generate_llm_workload(LlmSpec(**SMALL, **kw), prefix, on_warning=lambda line: None)
    with open(f"{prefix}.groups.roles.json") as f:
        roles = json.load(f)
    return read_metadata(read_compact_workload(prefix).traces[0]), roles


def test_tensorwise_step_has_no_amax_group_and_no_te_layout(tmp_path):
    meta, roles = _step(tmp_path, "tw", dp=4, zero=3, framework="fsdp2", fp8_recipe="tensorwise")
    assert "te_fp8_transposes" not in meta
    assert "amax" not in roles.values()


def test_megatron_delayed_step_keeps_both(tmp_path):
    meta, roles = _step(tmp_path, "te", dp=4, zero=1, fp8_recipe="delayed")
    assert meta["te_fp8_transposes"] is True  # no platform: Hopper's layout
    assert "amax" in roles.values()
