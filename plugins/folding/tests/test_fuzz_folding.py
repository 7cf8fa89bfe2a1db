"""Fuzzing the symmetry search: collective and point-to-point attributes that differ between ranks (missing on
some, of the wrong type on others) either fold or fall back to the unfolded run, which then gives its clean
error; never a TypeError or another traceback from the search."""

from __future__ import annotations

import json

from hypothesis import example, given, strategies as st

from astra_sim.chakra import make_node, types as T
from astra_sim.errors import AstraError
from astra_folding.signature import trace_signature
from astra_folding.groups import FoldRefused
from astra_sim.simulation import simulate
from astra_sim_testing import write_system_config
from astra_sim_testing.fuzzing import fuzz_settings, hostile_values

MISSING = object()
NPUS = 4
KEYS = {T.COMM_COLL_NODE: ("comm_type", "comm_size", "pg_name"),
        T.COMM_SEND_NODE: ("comm_dst", "comm_size", "comm_tag"),
        T.COMM_RECV_NODE: ("comm_src", "comm_size", "comm_tag")}


GROUPS = {"1": [0, 1], "2": [2, 3]}


def valid_attrs(kind, rank, grouped):
    if kind == T.COMM_COLL_NODE:
        attrs = {"comm_type": T.ALL_REDUCE, "comm_size": 4096}
        if grouped:
            attrs["pg_name"] = "1" if rank < 2 else "2"
        return attrs
    if kind == T.COMM_SEND_NODE:
        return {"comm_dst": (rank + 1) % NPUS, "comm_size": 64, "comm_tag": 0}
    return {"comm_src": (rank - 1) % NPUS, "comm_size": 64, "comm_tag": 0}


@st.composite
def uneven_traces(draw):
    """Per rank, one node of the same kind; on some ranks one attribute replaced (or removed)."""
    kind = draw(st.sampled_from(sorted(KEYS)))
    key = draw(st.sampled_from(KEYS[kind]))
    changed = draw(st.lists(st.integers(0, NPUS - 1), min_size=1, max_size=NPUS, unique=True))
    value = draw(st.one_of(st.just(MISSING), hostile_values(), st.integers(-2, 12)))
    return kind, key, sorted(changed), value, draw(st.booleans())


def write_traces(tmp_path, kind, key, changed, value, grouped=False):
    paths = []
    for rank in range(NPUS):
        attrs = valid_attrs(kind, rank, grouped)
        if rank in changed:
            if value is MISSING:
                attrs.pop(key, None)
            else:
                attrs[key] = value
        try:
            node = make_node(1, "n", kind, attrs=attrs)
        except AstraError:
            return None  # protobuf cannot hold the value: nothing to read
        paths.append(node)
    from astra_sim.chakra import encode_et, make_metadata

    for rank, node in enumerate(paths):
        (tmp_path / f"w.{rank}.et").write_bytes(encode_et(make_metadata(), [node]))
    system = write_system_config(tmp_path / "sys.json")
    net = tmp_path / "net.yml"
    net.write_text(f"topology: [Ring]\nnpus_count: [{NPUS}]\nbandwidth: [50.0]\nlatency: [500.0]\n")
    groups = None
    if grouped:
        groups = tmp_path / "groups.json"
        groups.write_text(json.dumps(GROUPS))
    return str(tmp_path / "w"), system, str(net), groups and str(groups)


def outcome(prefix, system, net, groups, fold):
    try:
        report = simulate(prefix, system, net, None, groups, fold=fold, allow_unmatched=True)
    except AstraError as exc:
        return type(exc).__name__, str(exc)
    return "finished", [r.finish_ns for r in report.ranks]


@fuzz_settings(120)
@given(case=uneven_traces())
@example(case=(T.COMM_COLL_NODE, "comm_type", [0], MISSING))  # a TypeError in the search
@example(case=(T.COMM_COLL_NODE, "comm_type", [1, 2], 99))
@example(case=(T.COMM_COLL_NODE, "comm_type", [3], -1))
@example(case=(T.COMM_COLL_NODE, "pg_name", [0], "x"))
@example(case=(T.COMM_COLL_NODE, "pg_name", [0, 1], 1, True))
@example(case=(T.COMM_COLL_NODE, "pg_name", [2], MISSING, True))
@example(case=(T.COMM_COLL_NODE, "comm_type", [2, 3], MISSING, True))
@example(case=(T.COMM_COLL_NODE, "comm_size", [2], MISSING))
@example(case=(T.COMM_SEND_NODE, "comm_dst", [0], MISSING))
@example(case=(T.COMM_RECV_NODE, "comm_src", [1], "0"))
def test_uneven_attributes_fold_or_give_the_unfolded_error(tmp_path_factory, case):
    written = write_traces(tmp_path_factory.mktemp("f"), *case)
    if written is None:
        return
    folded = outcome(*written, fold=True)
    unfolded = outcome(*written, fold=False)
    assert folded == unfolded
    if folded[0] != "finished":
        assert "\n" not in folded[1].strip() or "deadlock" in folded[1]


def test_a_collective_without_comm_type_refuses_to_fold():
    node = make_node(1, "ar", T.COMM_COLL_NODE, attrs={"comm_size": 64})
    try:
        trace_signature([node])
    except FoldRefused as exc:
        assert "node 1" in str(exc) and "comm_type" in str(exc)
    else:
        raise AssertionError("a collective without comm_type was folded")
