"""ASTRA-sim 1.0 text workloads: Chakra parity, the dimension mapping, every input simulates, clear errors."""

from __future__ import annotations

import filecmp

import pytest

from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import WorkloadError
from astra_sim.simulation import simulate

from astra_workload_generators.compare import compare_nodes
from astra_workload_generators.text import (
    NUM_DIMS, convert_text, looks_like_text_workload, model_parallel_boundary, parse_text,
)
from astra_workload_generators.text_format import TextFormat

PLUGINS = ["network_analytical", "workload_generators"]

#: sample name -> (input file, NPUs, passes) for every output of Chakra's converter in samples/chakra/text
CHAKRA_OUTPUTS = {
    "microAllReduce": ("microAllReduce", 2, 1),
    "microAllToAll": ("microAllToAll", 2, 1),
    "Resnet50_DataParallel": ("Resnet50_DataParallel", 2, 1),
    "MLP_ModelParallel": ("MLP_ModelParallel", 2, 1),
    "MLP_HybridParallel_Data_Model": ("MLP_HybridParallel_Data_Model", 2, 1),
    "MLP_HybridParallel_Model_Data": ("MLP_HybridParallel_Model_Data", 2, 1),
    "DLRM_HybridParallel": ("DLRM_HybridParallel", 2, 1),
    "passes2/MLP_ModelParallel_p2": ("MLP_ModelParallel", 2, 2),
    "passes2/Resnet50_DataParallel_p2": ("Resnet50_DataParallel", 2, 2),
    "astra_example_8npus/MLP_ModelParallel": ("MLP_ModelParallel", 8, 1),
}
ALL_INPUTS = [
    "microAllReduce", "microAllToAll", "Resnet50_DataParallel", "MLP_ModelParallel", "MLP_HybridParallel_Data_Model",
    "MLP_HybridParallel_Model_Data", "DLRM_HybridParallel", "Transformer_HybridParallel",
    "Transformer_HybridParallel_Fwd_In_Bckwd", "sample_per_layer_parallel_HybridCustomized",
]
TRANSFORMERS = ("Transformer_HybridParallel", "Transformer_HybridParallel_Fwd_In_Bckwd")


def text_dir(shared_dir):
    path = shared_dir / "samples" / "chakra" / "text"
    if not path.is_dir():
        pytest.skip("samples/chakra/text not found")
    return path


# ------------------------------------------------------------------ parity with Chakra's converter

@pytest.mark.parametrize("sample", sorted(CHAKRA_OUTPUTS))
def test_chakra_style_is_byte_identical(shared_dir, tmp_path, sample):
    text = text_dir(shared_dir)
    name, npus, passes = CHAKRA_OUTPUTS[sample]
    convert_text(text / "inputs" / f"{name}.txt", tmp_path / "out", npus, num_passes=passes, style="chakra")
    for rank in range(npus):
        assert (tmp_path / f"out.{rank}.et").read_bytes() == (text / f"{sample}.{rank}.et").read_bytes(), rank


@pytest.mark.parametrize("sample", sorted(CHAKRA_OUTPUTS))
def test_default_style_has_chakras_graph(shared_dir, tmp_path, sample):
    """Same nodes, durations, attributes and dependencies as Chakra's output; only involved_dim is added and
    ids restart at 0 in every rank file."""
    text = text_dir(shared_dir)
    name, npus, passes = CHAKRA_OUTPUTS[sample]
    summary = convert_text(text / "inputs" / f"{name}.txt", tmp_path / "out", npus, num_passes=passes)
    assert summary["left_out"] == 0
    for rank in range(npus):
        ours = read_et(tmp_path / f"out.{rank}.et").nodes
        theirs = read_et(text / f"{sample}.{rank}.et").nodes
        assert compare_nodes(ours, theirs, drop_attrs=("involved_dim",)) is None
        assert ours[0].id == 0
        for node in ours:
            if node.type == T.COMM_COLL_NODE:
                assert len(node.attrs["involved_dim"]) == NUM_DIMS and node.attr_kind("involved_dim") == "bool_list"
                assert list(node.attrs)[:2] == ["comm_type", "comm_size"]


def test_compare_command_reports_equal_and_different(shared_dir, tmp_path, capsys):
    text = text_dir(shared_dir)
    convert_text(text / "inputs" / "MLP_ModelParallel.txt", tmp_path / "m", 2)
    assert main(["workload", "compare", str(tmp_path / "m"), str(text / "MLP_ModelParallel"),
                 "--ignore-attr", "involved_dim"]) == 0
    assert "same graphs" in capsys.readouterr().out
    assert main(["workload", "compare", str(tmp_path / "m"), str(text / "MLP_ModelParallel")]) == 1
    assert "involved_dim" in capsys.readouterr().out


# ------------------------------------------------------------------ every input converts and simulates

def _convert_all(text, out, npus=8):
    prefixes = {}
    for name in ALL_INPUTS:
        dims = [4, 2] if name in TRANSFORMERS else None
        convert_text(text / "inputs" / f"{name}.txt", out / name, npus, npus_per_dim=dims)
        prefixes[name] = out / name
    return prefixes


def test_every_input_converts_in_both_styles(shared_dir, tmp_path):
    text = text_dir(shared_dir)
    for name in ALL_INPUTS:
        for style in ("astra-sim", "chakra"):
            dims = [4, 2] if name in TRANSFORMERS else None
            summary = convert_text(text / "inputs" / f"{name}.txt", tmp_path / style / name, 8, style=style,
                                   npus_per_dim=dims, num_passes=2)
            assert summary["nodes_per_rank"] > 0
            assert len(summary["paths"]) == 8


def test_every_converted_input_simulates(shared_dir, tmp_path, configs):
    text = text_dir(shared_dir)
    for name, prefix in _convert_all(text, tmp_path).items():
        sys_cfg, net = (configs["sys2"], configs["net42"]) if name in TRANSFORMERS else (configs["sys1"], configs["net8"])
        report = simulate(prefix, sys_cfg, net, plugins=PLUGINS)
        assert len(report.ranks) == 8 and report.max_finish_ns > 0, name
        assert report.max_finish_ns == report.min_finish_ns, name  # every rank runs the same graph


def test_text_format_runs_txt_directly_and_matches_the_converted_trace(shared_dir, tmp_path, configs):
    text = text_dir(shared_dir)
    prefixes = _convert_all(text, tmp_path)
    for name in ("microAllReduce", "DLRM_HybridParallel", "sample_per_layer_parallel_HybridCustomized",
                 "Transformer_HybridParallel_Fwd_In_Bckwd"):
        sys_cfg, net = (configs["sys2"], configs["net42"]) if name in TRANSFORMERS else (configs["sys1"], configs["net8"])
        direct = simulate(text / "inputs" / f"{name}.txt", sys_cfg, net, plugins=PLUGINS)
        assert direct.settings["workload_format"] == "text"
        converted = simulate(prefixes[name], sys_cfg, net, plugins=PLUGINS)
        assert [r.finish_ns for r in direct.ranks] == [r.finish_ns for r in converted.ranks], name
    # microAllReduce = one 1 MiB all-reduce: the parity value of a Ring-8 1 MiB all-reduce
    micro = simulate(text / "inputs" / "microAllReduce.txt", configs["sys1"], configs["net8"], plugins=PLUGINS)
    assert micro.max_finish_ns == 64440


def test_astra_run_cli_on_a_txt(shared_dir, configs, capsys):
    text = text_dir(shared_dir)
    argv = ["run", "--workload-configuration", str(text / "inputs" / "MLP_ModelParallel.txt"),
            "--system-configuration", configs["sys1"], "--network-configuration", configs["net8"], "-q"]
    assert main(argv) == 0
    argv[2] = str(text / "inputs" / "Transformer_HybridParallel.txt")
    assert main(argv) == 2  # group of 4 inside a ring of 8
    assert "describe the network as [4, 2]" in capsys.readouterr().err


def test_format_detection(shared_dir, tmp_path):
    text = text_dir(shared_dir)
    assert looks_like_text_workload(text / "inputs" / "DLRM_HybridParallel.txt")
    typo = tmp_path / "w.txt"
    typo.write_text("DAT\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n")
    assert looks_like_text_workload(typo)  # reaches the parser, whose error names the bad type
    with pytest.raises(WorkloadError, match=r"w.txt:1: unknown parallelism type 'DAT'"):
        TextFormat().load_rank(str(typo), 0)
    assert not looks_like_text_workload(text / "inputs" / "README.md")
    assert not looks_like_text_workload(tmp_path / "absent.txt")
    assert not TextFormat().matches(str(text / "MLP_ModelParallel"))


# ------------------------------------------------------------------ dimension mapping

LAYER = "L{i} -1 10 {f} 1024 20 {g} 2048 30 {w} 4096 5"


def _text(kind, layers, header=""):
    lines = [f"{kind} {header}".strip(), str(len(layers))] + layers
    return "\n".join(lines) + "\n"


def _graph(tmp_path, text, npus=8, **kw):
    path = tmp_path / "w.txt"
    path.write_text(text)
    convert_text(path, tmp_path / "o", npus, **kw)
    return read_et(tmp_path / "o.0.et").nodes


def _dims(nodes):
    """comm node name -> involved dims as a string of T/F."""
    return {n.name: "".join("T" if b else "F" for b in n.attrs["involved_dim"]) for n in nodes
            if n.type == T.COMM_COLL_NODE}


ALL, NONE, D0, D19 = "T" * 10, "F" * 10, "T" + "F" * 9, "F" + "T" * 9
THREE = [LAYER.format(i=i, f="ALLGATHER", g="REDUCESCATTER", w="ALLREDUCE") for i in range(3)]


@pytest.mark.parametrize("kind, fwd, ig, wg", [
    ("MICRO", None, None, ALL),
    ("DATA", None, None, ALL),
    ("MODEL", ALL, ALL, None),
    ("HYBRID_DATA_MODEL", D0, D0, D19),
    ("HYBRID_MODEL_DATA", D19, D19, D0),
    ("DISTRIBUTED_INFERENCE", ALL, None, None),
])
def test_dimension_mapping(tmp_path, kind, fwd, ig, wg):
    dims = _dims(_graph(tmp_path, _text(kind, THREE)))
    for word, expected in (("ALLGATHER", fwd), ("REDUCESCATTER", ig), ("ALLREDUCE", wg)):
        found = {v for k, v in dims.items() if k.endswith(word)}
        assert found == ({expected} if expected else set()), (word, dims)


def test_dlrm_layer0_uses_every_dimension(tmp_path):
    layers = [LAYER.format(i=0, f="ALLTOALL", g="ALLTOALL", w="ALLREDUCE")] + \
             [LAYER.format(i=i, f="ALLTOALL", g="NONE", w="ALLREDUCE") for i in range(1, 4)]
    dims = _dims(_graph(tmp_path, _text("HYBRID_DLRM", layers, "2")))
    assert dims["COMM_COLL_NODE_L0_ALLTOALL"] == ALL  # fwd (and the ig one, same name)
    assert dims["COMM_COLL_NODE_L1_ALLREDUCE"] == ALL
    # layers 1..3 have a DATA-like mapping: their forward all-to-alls involve no dimension and are left out
    assert "COMM_COLL_NODE_L1_ALLTOALL" not in dims


def test_customized_layers_take_their_own_mapping(tmp_path):
    policies = ["HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "DATA", "MODEL"]
    layers = [LAYER.format(i=i, f="ALLGATHER", g="REDUCESCATTER", w="ALLREDUCE") + f" {p}"
              for i, p in enumerate(policies)]
    nodes = _graph(tmp_path, _text("HYBRID_CUSTOMIZED", layers))
    dims = _dims(nodes)
    assert dims["COMM_COLL_NODE_L0_ALLGATHER"] == D0 and dims["COMM_COLL_NODE_L0_ALLREDUCE"] == D19
    assert dims["COMM_COLL_NODE_L1_ALLGATHER"] == D19 and dims["COMM_COLL_NODE_L1_REDUCESCATTER"] == D19
    assert "COMM_COLL_NODE_L2_ALLGATHER" not in dims and dims["COMM_COLL_NODE_L2_ALLREDUCE"] == ALL
    assert dims["COMM_COLL_NODE_L3_ALLGATHER"] == ALL and "COMM_COLL_NODE_L3_ALLREDUCE" not in dims
    # the left-out collectives' dependants inherit their parents: L3 FWD waits for L2 FWD directly
    by_name = {n.name: n for n in nodes}
    assert by_name["COMP_NODE_L3_FWD"].data_deps == [by_name["COMP_NODE_L2_FWD"].id]


@pytest.mark.parametrize("group, dims, boundary", [
    (1, [8], -1), (8, [8], 0), (4, [4, 2], 0), (8, [4, 2], 1), (4, [2, 2, 2], 1), (2, [1, 2, 4], 1),
])
def test_model_parallel_boundary(group, dims, boundary):
    assert model_parallel_boundary(group, dims) == boundary


@pytest.mark.parametrize("group, dims, message", [
    (4, [8], r"ends inside network dimension 0 .* as \[4, 2\]"),
    (3, [8], "must be a product of leading dimensions"),
    (16, [4, 2], "larger than the network"),
])
def test_model_parallel_boundary_errors(group, dims, message):
    with pytest.raises(WorkloadError, match=message):
        model_parallel_boundary(group, dims)


def test_transformer_dims_follow_the_network(tmp_path):
    layers = [LAYER.format(i=i, f="ALLGATHER", g="REDUCESCATTER", w="ALLREDUCE") for i in range(2)]
    text = _text("HYBRID_TRANSFORMER", layers, "model_parallel_NPU_group: 4")
    dims = _dims(_graph(tmp_path, text, npus_per_dim=[2, 2, 2]))
    assert dims["COMM_COLL_NODE_L0_ALLGATHER"] == "TT" + "F" * 8  # model parallel: dims 0-1
    assert dims["COMM_COLL_NODE_L0_ALLREDUCE"] == "FF" + "T" * 8  # data parallel: the rest
    assert "COMM_COLL_NODE_L0_REDUCESCATTER" in dims  # transformers exchange input gradients of layer 0 too
    one = _dims(_graph(tmp_path, _text("HYBRID_TRANSFORMER", layers, "model_parallel_NPU_group: 1")))
    assert all(v == ALL for v in one.values())  # a group of one: no model-parallel collective at all
    assert not any(k.endswith(("ALLGATHER", "REDUCESCATTER")) for k in one)


def test_fwd_in_bckwd_recomputes_from_the_checkpoint(tmp_path):
    layers = [LAYER.format(i=i, f="ALLGATHER", g="NONE", w="NONE") for i in range(6)]
    header = "model_parallel_NPU_group: 8 checkpoints: 2 0 3 checkpoint_initiates: 2 5 2"
    nodes = _graph(tmp_path, _text("HYBRID_TRANSFORMER_FWD_IN_BCKWD", layers, header))
    names = [n.name for n in nodes]
    rec = [n for n in names if "RECOMPUTE" in n]
    # layer 5 recomputes layers 3..4 (checkpoint 3), layer 2 recomputes 0..1 (checkpoint 0)
    assert [n for n in rec if n.startswith("COMP")] == [f"COMP_NODE_L{i}_FWD_RECOMPUTE" for i in (3, 4, 0, 1)]
    assert "COMM_COLL_NODE_L4_FWD_RECOMPUTE_ALLGATHER" in rec
    by_name = {n.name: n for n in nodes}
    assert by_name["COMP_NODE_L5_BWD_IG"].data_deps == [by_name["COMM_COLL_NODE_L4_FWD_RECOMPUTE_ALLGATHER"].id]
    # what IG(2) would have waited for: WG(3) and IG-comm(3), which moves nothing (NONE) and passes on IG(3)
    assert by_name["COMP_NODE_L0_FWD_RECOMPUTE"].data_deps == [by_name["COMP_NODE_L3_BWD_WG"].id,
                                                               by_name["COMP_NODE_L3_BWD_IG"].id]
    assert names.index("COMP_NODE_L1_FWD_RECOMPUTE") < names.index("COMP_NODE_L2_BWD_IG")


def test_passes_chain_through_the_previous_pass(tmp_path):
    layers = [LAYER.format(i=i, f="ALLGATHER", g="REDUCESCATTER", w="ALLREDUCE") for i in range(2)]
    nodes = _graph(tmp_path, _text("HYBRID_TRANSFORMER", layers, "model_parallel_NPU_group: 2"), npus=4,
                   num_passes=2, npus_per_dim=[2, 2])
    fwd0 = [n for n in nodes if n.name == "COMP_NODE_L0_FWD"]
    assert len(fwd0) == 2
    first_pass = {n.name: n.id for n in nodes if n.id < fwd0[1].id}
    assert fwd0[1].data_deps == [first_pass["COMM_COLL_NODE_L0_ALLREDUCE"], first_pass["COMM_COLL_NODE_L0_REDUCESCATTER"]]
    inference = _graph(tmp_path, _text("DISTRIBUTED_INFERENCE", layers), num_passes=2)
    assert [n.data_deps for n in inference] == [[], [0], [1], [2], [3], [4], [5], [6]]


def test_keep_empty_comms_and_scales(tmp_path):
    layers = [LAYER.format(i=0, f="NONE", g="NONE", w="NONE"), LAYER.format(i=1, f="ALLGATHER", g="NONE", w="NONE")]
    path = tmp_path / "w.txt"
    path.write_text(_text("MODEL", layers))
    lean = convert_text(path, tmp_path / "a", 2)
    full = convert_text(path, tmp_path / "b", 2, keep_empty_comms=True, compute_scale=2, comm_scale=0.5)
    assert full["nodes_per_rank"] == lean["nodes_per_rank"] + lean["left_out"]
    nodes = read_et(tmp_path / "b.0.et").nodes
    none = [n for n in nodes if n.name.endswith("_NONE")]
    assert none and all(n.attrs["comm_type"] == T.ALL_REDUCE for n in none)
    assert [n.duration_micros for n in nodes if n.name == "COMP_NODE_L0_FWD"] == [20]
    assert [n.attrs["comm_size"] for n in nodes if n.name == "COMM_COLL_NODE_L1_ALLGATHER"] == [512]


def test_allreduce_alltoall_word(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(_text("MODEL", [LAYER.format(i=0, f="ALLREDUCEALLTOALL", g="NONE", w="NONE")]))
    with pytest.raises(WorkloadError, match=r"w.txt:3: column 4 \(fwd comm type\) of layer 'L0': ALLREDUCEALLTOALL"):
        convert_text(path, tmp_path / "a", 2)
    convert_text(path, tmp_path / "c", 2, style="chakra")  # Chakra's converter writes an ALL_REDUCE
    assert read_et(tmp_path / "c.0.et").nodes[1].attrs["comm_type"] == T.ALL_REDUCE


# ------------------------------------------------------------------ malformed input

OK = "l0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 5"


@pytest.mark.parametrize("text, message", [
    ("", r":1: empty first line"),
    ("DAT\n1\n" + OK, r":1: unknown parallelism type 'DAT'"),
    ("DATA 4\n1\n" + OK, r":1: unexpected '4' after DATA"),
    ("DATA\n\n" + OK, r":2: expected the number of layers alone"),
    ("DATA\n1 2\n" + OK, r":2: expected the number of layers alone on line 2, got '1 2'"),
    ("DATA\nx\n" + OK, r":2: number of layers: expected an integer, got 'x'"),
    ("DATA\n2\n" + OK, r":2: declares 2 layer\(s\) but 1 layer line\(s\) follow"),
    ("DATA\n1\n" + OK + "\n" + OK, r":4: unexpected layer line 'l0': line 2 declares 1 layer\(s\)"),
    ("DATA\n1\nl0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024", r":3: layer 'l0' has 11 columns, expected 12"),
    ("DATA\n1\nl0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 5 7", r":3: layer 'l0' has 13 columns, expected 12"),
    ("DATA\n1\nl0 -1 5 NONE 0 5 NONE 0 x ALLREDUCE 1024 5", r":3: column 9 \(weight-grad compute time\)"),
    ("DATA\n1\nl0 -1 -5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 5", r":3: column 3 \(fwd compute time\) .* >= 0"),
    ("DATA\n1\nl0 -1 5 NONE 0 5 NONE 0 5 ALLREDUSE 1024 5", r":3: column 10 .* unknown communication type"),
    ("DATA\n1\nl0 x 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 5", r":3: column 2 \(reserved\)"),
    ("HYBRID_DLRM\n1\n" + OK, r":1: HYBRID_DLRM takes one value"),
    ("HYBRID_DLRM 0\n2\n" + OK + "\n" + OK, r":1: last bottom layer 0 must be between 1 and 1"),
    ("HYBRID_DLRM 1\n2\n" + OK + "\n" + OK, r":3: HYBRID_DLRM: layer 0 \('l0'\) must have an ALLTOALL"),
    ("HYBRID_TRANSFORMER\n1\n" + OK, r":1: HYBRID_TRANSFORMER header ends early"),
    ("HYBRID_TRANSFORMER ep: 1\n1\n" + OK, r":1: HYBRID_TRANSFORMER header: expected 'model_parallel_NPU_group:'"),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 0\n1\n" + OK, r":1: model_parallel_NPU_group: expected .* >= 1"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 checkpoints: 1 5 checkpoint_initiates: 0\n1\n" + OK,
     r":1: checkpoints names layer 5, but there are 1 layers"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 checkpoints: 2 0\n1\n" + OK,
     r":1: HYBRID_TRANSFORMER_FWD_IN_BCKWD header ends early"),
    ("HYBRID_CUSTOMIZED\n1\n" + OK, r":3: layer 'l0' has 12 columns, expected 13"),
    ("HYBRID_CUSTOMIZED\n1\n" + OK + " PIPELINE", r":3: column 13 \(layer parallelism\) .* 'PIPELINE' cannot be"),
])
def test_malformed_lines_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=r"bad\.txt" + message):
        convert_text(path, tmp_path / "o", 2)


def test_crlf_tabs_blank_lines_are_fine():
    text = "DATA\t\t\r\n1\t\t\r\n\r\nl0\t-1\t5\tNONE\t0\t5\tNONE\t0\t5\tALLREDUCE\t1024\t5\r\n\r\n"
    workload = parse_text(text, "x.txt")
    assert workload.num_layers == 1 and workload.layers[0].line == 4
    assert "\r" not in workload.text


def test_convert_text_cli(shared_dir, tmp_path, capsys):
    text = text_dir(shared_dir)
    out = tmp_path / "sub" / "w"
    assert main(["workload", "convert-text", str(text / "inputs" / "Resnet50_DataParallel.txt"), "--npus", "2",
                 "-o", str(out), "--num-passes", "2", "--style", "chakra"]) == 0
    assert "DATA: 54 layers x 2 pass(es)" in capsys.readouterr().out
    assert filecmp.cmp(f"{out}.1.et", text / "passes2" / "Resnet50_DataParallel_p2.1.et", shallow=False)
    assert main(["workload", "convert-text", str(text / "inputs" / "MLP_ModelParallel.txt"), "--npus", "8",
                 "--dims", "4,4", "-o", str(out)]) == 2
    assert "--dims [4, 4] multiply to 16 NPUs" in capsys.readouterr().err
    assert main(["workload", "convert-text", str(tmp_path / "nope.txt"), "--npus", "2", "-o", str(out)]) == 2
    assert "no such workload file" in capsys.readouterr().err
