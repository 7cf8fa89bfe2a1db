"""The critical path grouped by op kind and by layer, each group with its ns and share of the path, before the
per-node top list: on an LLM step whose node names carry their layers."""

from __future__ import annotations

import json

import pytest

from astra_analysis.critical_path import kind_key, layer_of
from astra_sim.cli import main


@pytest.mark.parametrize("name,layer", [
    ("fwd.l12.mb0.qkv", "layer 12"), ("tp_ar.bwd.l3.mb1.mlp_in", "layer 3"), ("layer12.attn.qkv", "layer 12"),
    ("model.layers.7.mlp.down_proj", "layer 7"), ("bwd.l0.mb0.fc1.silu", "layer 0"),
    ("fwd.embedding.mb0", "embedding"), ("bwd.head.mb1.dgrad", "head"), ("optimizer.adam", "optimizer"),
    ("send_act.mb0", "other"), ("aten::mm", "other"), ("ln1", "other"), ("fwd.l2norm", "other"), ("", "other"),
    (None, "other"), ("host_launch", "other"),
])
def test_layer_of_a_node_name(name, layer):
    assert layer_of(name) == layer


def test_kind_keys():
    assert kind_key({"kind": "compute", "op_class": "gemm"}) == "compute:gemm"
    assert kind_key({"kind": "message", "communicator": "pp"}) == "message:pp"
    assert kind_key({"kind": "collective"}) == "collective:p2p" and kind_key({"kind": "gap"}) == "gap"


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cp")
    prefix, report = folder / "w", folder / "r.json"
    assert main(["workload", "llm", "--model", "llama3-8b", "--layers", "4", "--tp", "2", "--pp", "2",
                 "--micro-batches", "2", "--seq-len", "512", "-o", str(prefix)]) == 0
    return prefix, report


def test_groups_add_up_to_the_path_and_name_the_layers(llm_run, capsys):
    prefix, report_path = llm_run
    assert main(["run", "--workload-configuration", str(prefix), "--platform", "hgx-h100", "--critical-path",
                 "-o", str(report_path)]) == 0
    out = capsys.readouterr().out
    path = json.loads(report_path.read_text())["critical_path"]
    length = path["length_ns"]
    for groups in (path["by_kind"], path["by_layer"]):
        assert sum(g["ns"] for g in groups) == length  # every item in exactly one group
        assert [g["ns"] for g in groups] == sorted((g["ns"] for g in groups), reverse=True)
        assert all(g["share"] == pytest.approx(g["ns"] / length, abs=1e-6) for g in groups)
    assert {g["name"]: g["ns"] for g in path["by_kind"]} == path["totals"]
    layers = {g["name"] for g in path["by_layer"]}
    # the last stage's layers 2-3 and its head, where the path ends; the optimizer step; no layer of another model
    # (the final norm before the head, ``fwd.final_norm...``, is a part of its own)
    assert {"layer 2", "layer 3", "head", "optimizer"} <= layers
    assert layers <= {"layer 0", "layer 1", "layer 2", "layer 3", "embedding", "final_norm", "head", "optimizer",
                      "other"}
    assert {"compute:gemm", "collective:tp"} <= {g["name"] for g in path["by_kind"]}
    # the terminal: groups first (with their shares), the per-node top list after them
    table = out[out.index("critical path:"):]
    first_layer, first_top = table.index("by layer: "), table.index("│   ")  # an indented row
    assert table.index("compute: gemm") < first_layer < first_top
    assert all(isinstance(t["share"], float) for t in path["top"])
