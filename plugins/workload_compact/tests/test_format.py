"""The plugin as the kernel sees it: a registered workload format (``compact``) that offers the kernel's
``compact(prefix)`` protocol (astra_sim.api.CompactWorkload) and ``ranks(prefix)``, loaded by default."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
from astra_sim.cli import main
from astra_sim.plugins import make_plugin_manager, registry_of
from astra_sim.simulation import simulate
from astra_sim.spec import workload_ranks
from astra_folding.symmetry import BlockShift
from astra_workload_compact import read_compact_workload, read_rank_nodes, write_compact_workload
from astra_workload_compact.plugin import CompactFormat

NPUS = 8


def _trace(rank):
    """A ring send/receive and an all-reduce: rank ``r``'s trace is rank 0's shifted by ``r``."""
    return [
        make_node(0, "c", T.COMP_NODE, duration_micros=3, attrs={"is_cpu_op": False}),
        make_node(1, "send", T.COMM_SEND_NODE, data_deps=[0],
                  attrs={"is_cpu_op": False, "comm_src": rank, "comm_dst": (rank + 1) % NPUS, "comm_size": 8192,
                         "comm_tag": 3}),
        make_node(2, "recv", T.COMM_RECV_NODE, data_deps=[0],
                  attrs={"is_cpu_op": False, "comm_src": (rank - 1) % NPUS, "comm_dst": rank, "comm_size": 8192,
                         "comm_tag": 3}),
        make_node(3, "ar", T.COMM_COLL_NODE, data_deps=[1, 2],
                  attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20}),
    ]


@pytest.fixture
def job(tmp_path):
    (tmp_path / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"],
                                                   "preferred-dataset-splits": 1, "local-mem-bw": 50}))
    for rank in range(NPUS):
        (tmp_path / f"per.{rank}.et").write_bytes(encode_et(make_metadata(), _trace(rank)))
    write_compact_workload(tmp_path / "c", NPUS, [BlockShift(1, NPUS, NPUS)],
                           [(0, encode_et(make_metadata(), _trace(0)))])
    return tmp_path


def _args(job, prefix):
    return ["run", "--workload-configuration", str(job / prefix), "--system-configuration", str(job / "sys.json"),
            "--network-configuration", str(job / "net.yml"), "-q"]


def test_the_format_is_registered_and_reads_what_the_per_rank_files_say(job):
    assert "compact" in registry_of(None).names("workload_format")
    net, system = str(job / "net.yml"), str(job / "sys.json")
    per_rank = simulate(str(job / "per"), system, net, fold=False)
    compact = simulate(str(job / "c"), system, net, fold=False)
    assert compact.settings["workload_format"] == "compact" and per_rank.settings["workload_format"] == "chakra"
    assert [(r.finish_ns, r.comm_ns) for r in compact.ranks] == [(r.finish_ns, r.comm_ns) for r in per_rank.ranks]
    assert compact.stats["traces_parsed"] == 1


def test_the_manifest_offers_the_kernels_protocol(job):
    """What build.py reads (api.CompactWorkload); the relabeller gives each rank its own trace."""
    manifest = CompactFormat().compact(str(job / "c"))
    assert manifest.npus == NPUS and list(manifest.traces) == [0] and manifest.comm_groups is None
    assert manifest.path.endswith("c.workload.json") and manifest.symmetry.order == NPUS
    relabeller = manifest.relabeller({})
    nodes = CompactFormat().load_trace(manifest.traces[0])
    for rank in range(NPUS):
        mine = relabeller.nodes_for(nodes, manifest.symmetry.offsets(rank))
        assert encode_et(None, mine) == encode_et(None, _trace(rank))


def test_load_rank_gives_the_ranks_relabelled_trace(job):
    path, nodes = CompactFormat().load_rank(str(job / "c"), 5)
    assert path.endswith("(as rank 5)")
    assert encode_et(None, nodes) == encode_et(None, read_rank_nodes(job / "c", 5))
    assert encode_et(None, nodes) == encode_et(None, _trace(5))


def test_workload_ranks_asks_the_format_that_reads_the_workload(job, tmp_path):
    assert workload_ranks(str(job / "c")) == NPUS == read_compact_workload(job / "c").npus
    assert workload_ranks(str(job / "per")) == NPUS
    assert workload_ranks(str(tmp_path / "nothing")) is None
    assert workload_ranks(str(job / "c"), workload_format="chakra") is None  # chakra does not read a manifest


def test_it_loads_when_p_names_only_other_plugins(job, capsys):
    assert main(["-p", "network_analytical", *_args(job, "c")]) == 0
    assert make_plugin_manager(["network_analytical"]).has_plugin("workload_compact")


def test_blocked_a_compact_workload_is_no_trace_naming_the_plugin(job, capsys):
    assert main(["-p", "no:workload_compact", *_args(job, "c")]) == 2
    err = capsys.readouterr().err
    assert "no trace found" in err and "workload_compact plugin" in err and "Traceback" not in err


def test_a_prefix_with_both_layouts_is_refused_unless_one_is_named(job, capsys):
    """Per-rank files and a manifest under one prefix (two generations into it): which one is meant is not
    guessed; ``--workload-format`` names it."""
    for rank in range(NPUS):
        (job / f"c.{rank}.et").write_bytes((job / f"per.{rank}.et").read_bytes())
    assert main(_args(job, "c")) == 2
    err = capsys.readouterr().err
    assert "reads as chakra and as compact" in err and "--workload-format" in err
    assert main([*_args(job, "c"), "--workload-format", "compact"]) == 0
    assert main([*_args(job, "c"), "--workload-format", "chakra"]) == 0
