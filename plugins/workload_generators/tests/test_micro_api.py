"""``generate_micro`` (issue 34): ``astra workload micro`` from Python keywords, byte for byte the command's files."""

from __future__ import annotations

import os

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError

import astra_workload_generators as awg
from astra_workload_generators.micro import generate_micro

#: (astra workload micro arguments without -o, the same options as keywords)
CASES = [
    (["--collective", "all_reduce", "--npus", "8", "--size", "64MiB"],
     dict(collective="all_reduce", npus=8, size="64MiB")),
    (["--collective", "all_gather", "--npus", "4", "--size", "1024", "--style", "chakra", "--ids", "per-file"],
     dict(collective="all_gather", npus=4, size=1024, style="chakra", ids="per-file")),
    (["--p2p", "shift", "--npus", "4", "--size", "1MiB", "--shift", "2", "--tag", "7"],
     dict(p2p="shift", npus=4, size=1 << 20, shift=2, tag=7)),
    (["--compute", "0", "--npus", "2", "--count", "3", "--dependent", "--first-id", "4"],
     {"compute": 0, "npus": 2, "count": 3, "dependent": True, "first-id": 4}),
    (["--mem-store", "4KiB", "--npus", "2", "--name", "st"], {"mem-store": "4KiB", "npus": 2, "name": "st"}),
    (["--metadata-all-types", "--style", "chakra", "--npus", "2", "--et-version", "1.0.1"],
     dict(metadata_all_types=True, style="chakra", npus=2, et_version="1.0.1")),
]


def _files(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}


@pytest.mark.parametrize("argv,options", CASES, ids=range(len(CASES)))
def test_generate_micro_writes_the_commands_bytes(tmp_path, argv, options, capsys):
    assert main(["workload", "micro", *argv, "-o", str(tmp_path / "cli" / "t")]) == 0
    summary = generate_micro(tmp_path / "api" / "t", **options)
    assert _files(tmp_path / "api") == _files(tmp_path / "cli")
    assert summary["npus"] == options["npus"] and len(summary["paths"]) == options["npus"]
    assert summary["nodes_per_rank"] >= 1


def test_graph_as_a_dict_and_the_suite(tmp_path, capsys):
    spec = {"nodes": [{"name": "c0", "type": "comp", "duration_us": 10},
                      {"name": "ar", "type": "all_reduce", "size": "1MiB", "data_deps": ["c0"]}]}
    path = tmp_path / "g.yml"
    path.write_text("nodes:\n  - {name: c0, type: comp, duration_us: 10}\n"
                    "  - {name: ar, type: all_reduce, size: 1MiB, data_deps: [c0]}\n")
    assert main(["workload", "micro", "--graph", str(path), "--npus", "4", "-o", str(tmp_path / "cli" / "g")]) == 0
    assert awg.generate_micro(tmp_path / "api" / "g", graph=spec, npus=4)["nodes_per_rank"] == 2
    assert _files(tmp_path / "api") == _files(tmp_path / "cli")
    assert main(["workload", "micro", "--chakra-suite", "--npus", "2", "-o", str(tmp_path / "suite_cli")]) == 0
    summary = generate_micro(tmp_path / "suite_api", chakra_suite=True, npus=2)
    assert summary["nodes_per_rank"] is None and len(summary["paths"]) == 28
    assert _files(tmp_path / "suite_api") == _files(tmp_path / "suite_cli")


@pytest.mark.parametrize("options,match", [
    (dict(npus=2, collectiv="all_reduce"), "'collectiv'.*did you mean 'collective'"),
    (dict(npus=2), "exactly one of"),
    (dict(npus=2, collective="all_reduce", p2p="shift", size=8), "got collective, p2p"),
    (dict(collective="all_reduce", size=8), "--npus"),
    (dict(npus=2, collective="all_reduce", size="1XB"), "--size"),
    (dict(npus=2, collective="all_reduce"), "--size is required"),
    (dict(npus=2, collective="gather", size=8), "unknown collective"),
])
def test_errors(tmp_path, options, match):
    with pytest.raises(ConfigError, match=match):
        generate_micro(tmp_path / "t", **options)
