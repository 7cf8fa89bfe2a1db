"""The sweep spec reader under hostile input (hypothesis): a spec, or one-line error naming the spec file;
never another exception. Valid training and serving specs are mutated key by key, in the spec and in its
workload options and axes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from astra_sim.errors import AstraError
from astra_sim_testing.fuzzing import check_error, fuzz_settings, hostile_values, mutated, to_yaml

from astra_sweep.commands import command_parsers
from astra_sweep.spec import load_spec

TRAINING = {"workload": {"llm": {"preset": "gpt3-13b", "tp": 2, "dp": 4, "micro-batches": 2}},
            "run": {"platform": "hgx-h100"},
            "axes": {"grid": {"workload.llm.tp": [1, 2], "run.platform-collective": ["ring", "nccl"]}}}
SERVING = {"workload": {"serve": {"model": "llama3-8b", "platform": "hgx-h100", "requests": 10, "qps": 2}},
           "axes": {"grid": {"workload.serve.qps": [1, 2], "workload.serve.tp": [1, 2]}}}

PARSERS = command_parsers()["parsers"]


def _read(tmp_path, doc):
    path = tmp_path / "spec.yaml"
    path.write_text(to_yaml(doc), encoding="utf-8")
    try:
        return load_spec(str(path), PARSERS), path
    except AstraError as exc:
        check_error(exc, path)
        return None, path


@pytest.mark.parametrize("valid", [TRAINING, SERVING], ids=["training", "serving"])
def test_the_valid_specs_read(tmp_path, valid):
    spec, _ = _read(tmp_path, valid)
    assert spec is not None and len(spec.points) == 4


@pytest.mark.parametrize("valid", [TRAINING, SERVING], ids=["training", "serving"])
@fuzz_settings(60)
@given(data=st.data())
def test_a_mutated_spec_reads_or_names_the_file(tmp_path, valid, data):
    where = data.draw(st.sampled_from(["top", "options", "axes"]))
    doc = json.loads(json.dumps(valid))
    if where == "top":
        doc, _ = data.draw(mutated(doc))
    elif where == "options":
        kind = next(iter(doc["workload"]))
        doc["workload"][kind], _ = data.draw(mutated(doc["workload"][kind]))
    else:
        doc["axes"]["grid"], _ = data.draw(mutated(doc["axes"]["grid"]))
    _read(tmp_path, doc)


@fuzz_settings(40)
@given(value=hostile_values())
def test_any_document_reads_or_names_the_file(tmp_path, value):
    _read(tmp_path, value)
