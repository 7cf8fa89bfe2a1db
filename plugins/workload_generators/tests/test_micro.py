"""Microbenchmarks: byte-identical to the parity traces, ASTRA-sim's examples and chakra_generator."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate

from astra_workload_generators.common import parse_size, size_label
from astra_workload_generators.micro import (
    chakra_suite, collective_trace, compute_trace, graph_trace, memory_trace, p2p_trace, write_trace,
)

PLUGINS = ["network_analytical", "workload_generators"]
MIB = 1 << 20


def _same(prefix, reference, npus):
    for rank in range(npus):
        ours = open(f"{prefix}.{rank}.et", "rb").read()
        theirs = open(f"{reference}.{rank}.et", "rb").read()
        assert ours == theirs, f"{prefix}.{rank}.et != {reference}.{rank}.et"


def test_every_parity_single_trace(parity_dir, tmp_path):
    """single_<collective>_<npus>_<size>: ASTRA-sim generator conventions, node id 0 in every rank file."""
    traces = sorted(p for p in (parity_dir / "traces").iterdir() if p.name.startswith("single_"))
    assert len(traces) >= 36  # 4 collectives x 9 shapes
    for folder in traces:
        collective, npus, size = folder.name[len("single_"):].rsplit("_", 2)
        prefix = tmp_path / folder.name / "t"
        write_trace(collective_trace(collective, parse_size(size), int(npus)), prefix)
        _same(prefix, folder / "t", int(npus))


def test_parity_misc_probes(parity_dir, tmp_path):
    traces = parity_dir / "traces"
    write_trace(collective_trace("all_reduce", 1000003, 8, name="ar_odd"), tmp_path / "odd")
    _same(tmp_path / "odd", traces / "misc_odd_size_8" / "t", 8)
    write_trace(p2p_trace("shift", MIB, 8, tag=7), tmp_path / "p2p")
    _same(tmp_path / "p2p", traces / "misc_p2p_shift_8" / "t", 8)
    overlap = {"nodes": [
        {"name": "c0", "type": "comp", "duration_us": 10},
        {"name": "ar", "type": "all_reduce", "size": "1MiB"},
        {"name": "c1", "type": "comp", "duration_us": 5, "data_deps": ["c0", "ar"]},
    ]}
    write_trace(graph_trace(overlap, 8), tmp_path / "overlap")
    _same(tmp_path / "overlap", traces / "misc_overlap_8" / "t", 8)
    spec = tmp_path / "ctrl.yml"
    spec.write_text("nodes:\n  - {name: ar0, type: all_reduce, size: 1MiB}\n"
                    "  - {name: ar1, type: all_reduce, size: 1MiB, ctrl_deps: [ar0]}\n")
    assert main(["workload", "micro", "--graph", str(spec), "--npus", "8", "-o", str(tmp_path / "ctrl")]) == 0
    _same(tmp_path / "ctrl", traces / "misc_ctrl_dep_8" / "t", 8)


def test_astra_sim_examples_use_a_global_counter(shared_dir, tmp_path):
    golden = shared_dir / "samples" / "chakra" / "astra-sim-golden"
    for collective in ("all_reduce", "all_to_all"):
        prefix = tmp_path / collective
        write_trace(collective_trace(collective, MIB, 4, ids="global"), prefix)
        _same(prefix, golden / f"{collective}_4npus_1MB" / collective, 4)


def test_chakra_generator_suite(shared_dir, tmp_path):
    """The whole chakra_generator run (--num_npus 2 --default_runtime 5 --default_tensor_size 1024
    --default_comm_size 65536): 14 microbenchmarks x 2 ranks, one id counter across all of them."""
    reference = shared_dir / "samples" / "chakra" / "generator"
    paths = chakra_suite(tmp_path, 2)
    assert len(paths) == 28
    expected = sorted(reference.glob("*.et"))
    assert len(expected) == 28
    for path in expected:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


def test_chakra_single_benchmarks_with_first_id(shared_dir, tmp_path):
    reference = shared_dir / "samples" / "chakra" / "generator"
    cases = [
        ("ALL_REDUCE", lambda: collective_trace("all_reduce", 65536, 2, style="chakra", first_id=16)),
        ("BARRIER", lambda: collective_trace("barrier", None, 2, style="chakra", first_id=26)),
        ("one_comm_send_node", lambda: p2p_trace("send", 1024, 2, style="chakra", first_id=28)),
        ("two_comp_nodes_dependent", lambda: compute_trace(5, 2, count=2, dependent=True, style="chakra",
                                                          first_id=12)),
        ("one_remote_mem_store_node", lambda: memory_trace("store", 1024, 2, style="chakra", first_id=4)),
    ]
    for name, make in cases:
        write_trace(make(), tmp_path / name)
        _same(tmp_path / name, reference / name, 2)


def test_micro_cli(tmp_path, capsys):
    out = tmp_path / "ar"
    assert main(["workload", "micro", "--collective", "all_reduce", "--size", "1MiB", "--npus", "8",
                 "-o", str(out)]) == 0
    node = read_et(f"{out}.7.et").nodes[0]
    assert (node.id, node.name, node.attrs) == (0, "all_reduce_8npus_1MB",
                                                {"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB})
    assert main(["workload", "micro", "--compute", "7", "--count", "3", "--dependent", "--npus", "2",
                 "-o", str(tmp_path / "c")]) == 0
    nodes = read_et(tmp_path / "c.1.et").nodes
    assert [(n.name, n.data_deps, n.duration_micros) for n in nodes] == [
        ("comp_0", [], 7), ("comp_1", [0], 7), ("comp_2", [1], 7)]
    assert main(["workload", "micro", "--chakra-suite", "--npus", "1", "-o", str(tmp_path / "suite")]) == 0
    assert len(list((tmp_path / "suite").glob("*.et"))) == 14
    assert main(["workload", "micro", "--metadata-all-types", "--npus", "1", "-o", str(tmp_path / "m")]) == 2
    assert "--style chakra" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, message", [
    (dict(collective="all_reduce", size=None), "--size is required"),
    (dict(collective="barrier", size=8), "a barrier moves no data"),
    (dict(collective="gather", size=8), "unknown collective"),
])
def test_collective_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        collective_trace(kwargs["collective"], kwargs["size"], 4)


def test_p2p_errors():
    with pytest.raises(ConfigError, match="needs an even number"):
        p2p_trace("pairs", 8, 3)
    with pytest.raises(ConfigError, match="use --style chakra"):
        p2p_trace("send", 8, 2)
    with pytest.raises(ConfigError, match="chakra_generator has no --p2p shift"):
        p2p_trace("shift", 8, 2, style="chakra")
    with pytest.raises(ConfigError, match="to itself"):
        p2p_trace("shift", 8, 4, shift=4)


def test_graph_spec_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"nodes\[1\]: data_deps names 'x'"):
        graph_trace({"nodes": [{"name": "a", "type": "comp"}, {"name": "b", "type": "comp", "data_deps": ["x"]}]}, 2)
    with pytest.raises(ConfigError, match=r"nodes\[0\]: 'type' must be one of"):
        graph_trace({"nodes": [{"type": "gemm"}]}, 2)
    with pytest.raises(ConfigError, match=r"nodes\[0\]: dst 9 is not a rank"):
        graph_trace({"nodes": [{"type": "send", "size": 8, "dst": 9}]}, 2)
    bad = tmp_path / "bad.json"
    bad.write_text("{nodes: ")
    assert main(["workload", "micro", "--graph", str(bad), "--npus", "2", "-o", str(tmp_path / "o")]) == 2


def test_generated_traces_simulate(tmp_path, configs):
    cases = {
        "ar": collective_trace("all_reduce", MIB, 8),
        "pairs": p2p_trace("pairs", MIB, 8, tag=3),
        "shift": p2p_trace("shift", MIB, 8, shift=3),
        "comp": compute_trace(4, 8, count=2, dependent=True),
        "graph": graph_trace({"nodes": [
            {"name": "c", "type": "comp", "duration_us": 2},
            {"name": "s", "type": "send", "size": "64KiB", "dst": "+1", "data_deps": ["c"]},
            {"name": "r", "type": "recv", "size": "64KiB", "src": "-1"},
            {"name": "ag", "type": "all_gather", "size": "1KiB", "data_deps": ["s", "r"],
             "attrs": {"involved_dim": [True]}},
        ]}, 8),
    }
    for name, trace in cases.items():
        write_trace(trace, tmp_path / name)
        report = simulate(tmp_path / name, configs["sys1"], configs["net8"], plugins=PLUGINS)
        assert report.max_finish_ns > 0, name
    ar = simulate(tmp_path / "ar", configs["sys1"], configs["net8"], plugins=PLUGINS)
    assert ar.max_finish_ns == 64440  # parity: Ring_8 1 MiB all-reduce
    assert simulate(tmp_path / "comp", configs["sys1"], configs["net8"], plugins=PLUGINS).max_finish_ns == 8000


@pytest.mark.parametrize("text, value", [
    ("1024", 1024), ("1KB", 1024), ("64KiB", 65536), ("1MiB", MIB), ("1 MB", MIB), ("1GB", 1 << 30), ("0", 0),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_parse_size_errors_and_labels():
    for bad in ("1.5MB", "MB", "-1", "1PB"):
        with pytest.raises(ConfigError, match="byte size"):
            parse_size(bad)
    assert [size_label(x) for x in (1024, MIB, 64 * MIB, 1 << 30, 1000003, 1536)] == [
        "1KB", "1MB", "64MB", "1GB", "1000003B", "1536B"]


def test_spec_json_roundtrip(tmp_path):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"version": "9.9", "nodes": [{"name": "x", "type": "mem_load", "size": 4096}]}))
    assert main(["workload", "micro", "--graph", str(spec), "--npus", "2", "-o", str(tmp_path / "o"),
                 "--ids", "global", "--first-id", "5"]) == 0
    trace = read_et(tmp_path / "o.1.et")
    assert trace.version == "9.9"
    assert [(n.id, n.type, n.attrs["tensor_size"]) for n in trace.nodes] == [(6, T.MEM_LOAD_NODE, 4096)]
