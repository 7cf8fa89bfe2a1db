"""The compact workload (PREFIX.workload.json + one trace per class): reading, writing, relabelling, running."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.chakra import encode_et, make_metadata, make_node, read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import WorkloadError
from astra_sim.simulation import simulate
from astra_folding.symmetry import BlockShift
from astra_workload_compact import (
    expand_workload, read_compact_workload, read_rank_nodes, write_compact_workload,
)

NPUS = (4, 3)  # dimension 0: 4 NPUs (the symmetric one), dimension 1: 3 (ranks differ along it)


def _coords(rank):
    return rank % NPUS[0], rank // NPUS[0]


def _rank(a, b):
    return a % NPUS[0] + NPUS[0] * b


def _trace(rank):
    """Rank ``rank``'s program: compute that grows along dimension 1, a collective on its dimension-0
    group, a send to its right neighbour in dimension 0 and a receive from its left one."""
    a, b = _coords(rank)
    group = 1 + b
    return [
        make_node(0, "c", T.COMP_NODE, duration_micros=5 * (b + 1), attrs={"is_cpu_op": False}),
        make_node(1, "ar", T.COMM_COLL_NODE, data_deps=[0],
                  attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20,
                         "pg_name": str(group)}),
        make_node(2, "send", T.COMM_SEND_NODE, data_deps=[1],
                  attrs={"is_cpu_op": False, "comm_src": rank, "comm_dst": _rank(a + 1, b), "comm_size": 4096,
                         "comm_tag": 9}),
        make_node(3, "recv", T.COMM_RECV_NODE, data_deps=[1],
                  attrs={"is_cpu_op": False, "comm_src": _rank(a - 1, b), "comm_dst": rank, "comm_size": 4096,
                         "comm_tag": 9}),
        make_node(4, "c2", T.COMP_NODE, data_deps=[2, 3], duration_micros=7, attrs={"is_cpu_op": False}),
    ]


@pytest.fixture
def workload(tmp_path):
    """The same job as per-rank files (``per``) and as a compact workload (``compact``)."""
    (tmp_path / "net.yml").write_text("topology: [ Switch, Switch ]\nnpus_count: [ 4, 3 ]\nbandwidth: [ 50, 25 ]\n"
                                      "latency: [ 100, 700 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring", "ring"],
                                                   "preferred-dataset-splits": 2, "local-mem-bw": 50}))
    groups = {str(1 + b): [_rank(a, b) for a in range(4)] for b in range(3)}
    (tmp_path / "groups.json").write_text(json.dumps(groups))
    for rank in range(12):
        (tmp_path / f"per.{rank}.et").write_bytes(encode_et(make_metadata(), _trace(rank)))
    classes = [(rep, encode_et(make_metadata(), _trace(rep))) for rep in (0, 4, 8)]
    write_compact_workload(tmp_path / "compact", 12, [BlockShift(1, 4, 4)], classes,
                           comm_groups=tmp_path / "groups.json")
    return tmp_path


def _finishes(report):
    return [(r.rank, r.finish_ns, r.compute_ns, r.comm_ns, r.nodes) for r in report.ranks]


def test_every_rank_of_a_compact_workload_is_its_per_rank_file(workload):
    for rank in range(12):
        assert encode_et(None, read_rank_nodes(workload / "compact", rank)) == \
            encode_et(None, read_et(workload / f"per.{rank}.et").nodes)


def test_expand_writes_the_per_rank_files(workload):
    assert expand_workload(workload / "compact", workload / "out" / "x") == 12
    for rank in range(12):
        assert (workload / "out" / f"x.{rank}.et").read_bytes() == (workload / f"per.{rank}.et").read_bytes()
    assert json.loads((workload / "out" / "x.groups.json").read_text()) == \
        json.loads((workload / "groups.json").read_text())


def test_compact_and_per_rank_runs_agree_folded_and_unfolded(workload):
    net, system = str(workload / "net.yml"), str(workload / "sys.json")
    groups = str(workload / "groups.json")
    reference = _finishes(simulate(str(workload / "per"), system, net, None, groups, fold=False))
    folded = simulate(str(workload / "compact"), system, net)  # groups from the manifest
    assert _finishes(folded) == reference
    assert folded.settings["fold"]["simulated_ranks"] in (3, 12)
    assert folded.stats["traces_parsed"] == 3
    assert _finishes(simulate(str(workload / "compact"), system, net, fold=False)) == reference
    assert folded.settings["comm_group_configuration"].endswith("groups.json")


def test_cli_runs_a_compact_workload(workload, capsys):
    assert main(["run", "--workload-configuration", str(workload / "compact"),
                 "--system-configuration", str(workload / "sys.json"),
                 "--network-configuration", str(workload / "net.yml"), "-q"]) == 0


def test_a_declared_shift_the_network_does_not_keep_is_dropped(tmp_path):
    """Dimension 0 is a ring of 4: shifting the rank digit in blocks of 2 is not a symmetry of its delays;
    the run uses the declared shift of dimension 1 only (a fold by 4: folds by 2 or 3 cost more than they save)
    and still matches the per-rank run."""
    (tmp_path / "net.yml").write_text("topology: [ Ring, Switch ]\nnpus_count: [ 4, 4 ]\nbandwidth: [ 50, 25 ]\n"
                                      "latency: [ 100, 700 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring", "ring"],
                                                   "preferred-dataset-splits": 1, "local-mem-bw": 50}))
    node = make_node(0, "ar", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                       "comm_size": 65536})
    data = encode_et(make_metadata(), [node])
    write_compact_workload(tmp_path / "w", 16, [BlockShift(1, 4, 2), BlockShift(4, 4, 4)],
                           [(0, data), (2, data)])
    report = simulate(str(tmp_path / "w"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml"))
    info = report.settings["fold"]
    assert info["simulated_ranks"] == 4
    assert any("rotations of the whole dimension" in note for note in info["notes"])
    unfolded = simulate(str(tmp_path / "w"), str(tmp_path / "sys.json"), str(tmp_path / "net.yml"), fold=False)
    assert _finishes(report) == _finishes(unfolded)


def test_llm_generator_writes_compact_by_default(tmp_path):
    args = ["workload", "llm", "--layers", "4", "--hidden", "256", "--heads", "8", "--ffn-hidden", "512",
            "--vocab", "1000", "--seq-len", "128", "--tp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "2"]
    assert main(args + ["-o", str(tmp_path / "c")]) == 0
    assert main(args + ["-o", str(tmp_path / "p"), "--per-rank-files"]) == 0
    manifest = read_compact_workload(tmp_path / "c")
    assert manifest.npus == 8 and len(manifest.traces) == 2
    assert not (tmp_path / "c.0.et").exists() and (tmp_path / "p.7.et").exists()
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Switch, Switch ]\nnpus_count: [ 2, 4 ]\nbandwidth: [ 300, 25 ]\n"
                   "latency: [ 250, 1000 ]\n")
    system = tmp_path / "sys.json"
    system.write_text(json.dumps({"all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
                                  "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
                                  "preferred-dataset-splits": 1, "local-mem-bw": 1000,
                                  "comm-streams": "per-communicator"}))
    compact = simulate(str(tmp_path / "c"), str(system), str(net))
    per_rank = simulate(str(tmp_path / "p"), str(system), str(net), None, str(tmp_path / "p.groups.json"),
                        fold=False)
    assert _finishes(compact) == _finishes(per_rank)


# ------------------------------------------------------------------------------------------ bad manifests


def _manifest(tmp_path, data):
    (tmp_path / "w.workload.json").write_text(json.dumps(data) if not isinstance(data, str) else data)
    return tmp_path / "w"


GOOD = {"format": "astra-sim-compact-workload", "version": 1, "npus": 8,
        "symmetry": [{"stride": 1, "radix": 4, "block": 4}],
        "classes": [{"representative": 0, "trace": "a.et"}, {"representative": 4, "trace": "b.et"}]}


@pytest.mark.parametrize("change,message", [
    ({"format": "x"}, "key 'format'"),
    ({"version": 2}, "key 'version'"),
    ({"npus": 0}, "key 'npus' must be a positive integer"),
    ({"npus": 6}, "symmetry[0]"),
    ({"symmetry": [{"stride": 1, "radix": 4, "block": 3}]}, "'symmetry[0].block' (3) must divide radix"),
    ({"symmetry": [{"stride": 1, "radix": 4, "block": 4}, {"stride": 2, "radix": 2, "block": 2}]}, "digits overlap"),
    ({"symmetry": "tp"}, "key 'symmetry' must be a list"),
    ({"classes": []}, "key 'classes'"),
    ({"classes": [{"representative": 0, "trace": "a.et"}]}, "lists 1 classes but the symmetry makes 2"),
    ({"classes": [{"representative": 1, "trace": "a.et"}, {"representative": 4, "trace": "b.et"}]},
     "rank 1 is not the smallest rank of its class"),
    ({"classes": [{"representative": 0, "trace": "a.et"}, {"representative": 0, "trace": "b.et"}]},
     "listed twice"),
    ({"classes": [{"representative": 0, "trace": 3}, {"representative": 4, "trace": "b.et"}]}, "'classes[0].trace'"),
    ({"extra": 1}, "unknown key 'extra'"),
])
def test_bad_manifest_names_the_file_and_key(tmp_path, change, message):
    prefix = _manifest(tmp_path, {**GOOD, **change})
    with pytest.raises(WorkloadError) as info:
        read_compact_workload(prefix)
    assert str(info.value).startswith(str(tmp_path / "w.workload.json"))
    assert message in str(info.value)


def test_manifest_that_is_not_json(tmp_path):
    with pytest.raises(WorkloadError, match="invalid JSON at line 1"):
        read_compact_workload(_manifest(tmp_path, "{nope"))


def test_missing_class_trace_is_an_error_naming_it(tmp_path):
    prefix = _manifest(tmp_path, GOOD)
    (tmp_path / "net.yml").write_text("topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring"],
                                                   "preferred-dataset-splits": 1}))
    with pytest.raises(WorkloadError, match="a.et does not exist"):
        simulate(str(prefix), str(tmp_path / "sys.json"), str(tmp_path / "net.yml"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 40) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
manifests = st.fixed_dictionaries({}, optional={
    "format": st.sampled_from(["astra-sim-compact-workload", "x"]) | json_values,
    "version": st.sampled_from([1, 2]) | json_values,
    "npus": st.integers(-2, 40) | json_values,
    "symmetry": st.lists(st.fixed_dictionaries({"stride": st.integers(-1, 9), "radix": st.integers(-1, 9),
                                                "block": st.integers(-1, 9)}), max_size=3) | json_values,
    "classes": st.lists(st.fixed_dictionaries({"representative": st.integers(-1, 40),
                                               "trace": st.text(max_size=5)}), max_size=5) | json_values,
    "comm_groups": json_values,
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(manifests)
def test_any_manifest_reads_or_fails_with_a_workload_error(tmp_path, data):
    prefix = _manifest(tmp_path, data)
    try:
        read_compact_workload(prefix)
    except WorkloadError as exc:
        assert str(exc).startswith(str(tmp_path / "w.workload.json"))


def test_class_traces_are_parsed_once_per_process(workload):
    from astra_workload_compact.plugin import PARSED_TRACES

    net, system = str(workload / "net.yml"), str(workload / "sys.json")
    first = simulate(str(workload / "compact"), system, net)
    hits = PARSED_TRACES.hits
    again = simulate(str(workload / "compact"), system, net)
    assert PARSED_TRACES.hits == hits + 3  # the three class traces came from the cache
    assert _finishes(again) == _finishes(first)
    (workload / "compact.class1.et").write_bytes((workload / "compact.class1.et").read_bytes())  # new mtime
    simulate(str(workload / "compact"), system, net)
    assert PARSED_TRACES.hits <= hits + 5
