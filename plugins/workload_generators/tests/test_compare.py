"""astra workload compare: every difference per rank, counted by kind, the first N in detail."""

from __future__ import annotations

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main

from astra_workload_generators.compare import compare_nodes, diff_nodes


def _chain(n, *, first=0, dur=5, extra=None, attrs=None):
    nodes = []
    for k in range(n):
        nodes.append(make_node(first + k, f"op{k}", T.COMP_NODE, data_deps=[first + k - 1] if k else [],
                               duration_micros=dur, attrs=dict(attrs or {"is_cpu_op": True})))
    if extra is not None:  # insert one more node at position ``extra``, shifting the later ones' dependencies
        nodes.insert(extra, make_node(first + 100, "inserted", T.COMP_NODE))
    return nodes


def test_identical_graphs_whatever_the_ids():
    assert diff_nodes(_chain(4), _chain(4, first=50)) == []
    assert compare_nodes(_chain(4), _chain(4, first=50)) is None


def test_every_difference_is_reported():
    a = _chain(6)
    b = _chain(6, first=10)
    b[1] = make_node(11, "op1", T.COMP_NODE, data_deps=[10], duration_micros=9, attrs={"is_cpu_op": True})
    b[4] = make_node(14, "op4", T.COMP_NODE, data_deps=[13], duration_micros=5, attrs={"is_cpu_op": False})
    b[5] = make_node(15, "renamed", T.COMP_NODE, data_deps=[12], duration_micros=5, attrs={"is_cpu_op": True})
    kinds = [kind for kind, _ in diff_nodes(a, b)]
    assert kinds == ["duration_micros", "attributes", "name", "data_deps"]
    messages = dict((k, m) for k, m in diff_nodes(a, b))
    assert "node #4 (id 4 'op4' vs id 14 'op4'): attributes is_cpu_op: True (bool_val) vs False (bool_val)" == \
        messages["attributes"]
    assert messages["data_deps"].endswith("data_deps [4] vs [12]")
    # the first one is still what compare_nodes returns
    assert compare_nodes(a, b) == "node #1 (id 1 'op1' vs id 11 'op1'): duration_micros 5 vs 9"


def test_an_extra_node_is_one_difference_not_a_shift():
    a, b = _chain(6), _chain(6, extra=2)
    diffs = diff_nodes(a, b)
    # only the inserted node: the others align, and their dependencies are compared through the alignment
    assert diffs == [("only in B", "node #2 (id 100 'inserted') is only in B")]
    c = _chain(6, extra=2, dur=7)
    kinds = [k for k, _ in diff_nodes(a, c)]
    assert kinds.count("only in B") == 1 and kinds.count("duration_micros") == 6


def test_cli_counts_by_kind_and_details(tmp_path, capsys):
    for r in range(2):
        write_et(tmp_path / f"a.{r}.et", make_metadata(), _chain(30))
        write_et(tmp_path / f"b.{r}.et", make_metadata(), _chain(30, dur=6 if r else 5, extra=3 if r else None))
    assert main(["workload", "compare", str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    assert "same graphs on every rank" in capsys.readouterr().out
    assert main(["workload", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--details", "4"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("a.1.et vs " + str(tmp_path / "b.1.et") + " (30 nodes vs 31): 31 differences: "
                             "30 duration_micros, 1 only in B")
    assert len([line for line in lines if line.startswith("  node #")]) == 4
    assert lines[-1] == "  ... and 27 more (--details N shows more)"
    assert not any("a.0.et" in line for line in lines)  # rank 0 is the same
