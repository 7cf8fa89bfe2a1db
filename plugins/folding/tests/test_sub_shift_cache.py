"""``sub_shift_is_equivariant`` reads what each class trace names once for every part tried (``named``, kept by
``check_declared_symmetry``): the same answers as reading the traces on every call, on random class traces
(peers, communicator groups, default and bad ``pg_name``) and every part of a digit that spans two dimensions."""

from __future__ import annotations

import types

from hypothesis import given, settings, strategies as st

from astra_folding.search import _named_ranks, split_by_dimensions, sub_shift_is_equivariant
from astra_folding.symmetry import BlockShift, RankSymmetry


def _node(attrs):
    return types.SimpleNamespace(attrs=attrs)


_attrs = st.one_of(
    st.fixed_dictionaries({"comm_src": st.integers(0, 15)}),
    st.fixed_dictionaries({"comm_dst": st.integers(0, 15)}),
    st.fixed_dictionaries({"pg_name": st.sampled_from(["", "0", "1", "2", "3", "x"])}),
    st.fixed_dictionaries({"comm_src": st.booleans(), "other": st.integers()}),
    st.fixed_dictionaries({"pg_name": st.sampled_from([None, 2, "3", 1.0, True, float("nan"), [1]]),
                           "comm_dst": st.sampled_from([1, True, 1.0, 2, [3], "4"])}),
    st.just({}),
    st.just({"comm_type": 1}),
)


def _every_node_read(nodes):
    """What a trace names, reading every node (the reference for _named_ranks, which reads only some)."""
    peers, pgs = set(), set()
    for node in nodes:
        for key in ("comm_src", "comm_dst"):
            value = node.attrs.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                peers.add(value)
        pg = node.attrs.get("pg_name")
        if pg not in ("", "0", None):
            try:
                pgs.add(int(pg))
            except (TypeError, ValueError):
                return False
    return peers, pgs


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_attrs, max_size=6), min_size=1, max_size=2), st.booleans())
def test_read_once_gives_the_same_answers(traces, aligned):
    # 16 ranks: digit (rank // 2) % 8 rotated whole; dimensions of 4 and 4 (the digit spans both)
    whole = BlockShift(2, 8, 8)
    declared = RankSymmetry([whole])
    npus_per_dim = [4, 4]
    groups = {1: [0, 2, 4, 6, 8, 10, 12, 14], 2: [1, 3, 5, 7, 9, 11, 13, 15],
              3: [0, 1, 2, 3] if aligned else [0, 5, 10, 15]}
    class_nodes = {rep: [_node(a) for a in attrs] for rep, attrs in zip((0, 1), traces)}
    parts = split_by_dimensions(whole, npus_per_dim)
    assert len(parts) == 2
    for nodes in class_nodes.values():
        assert _named_ranks(nodes) == _every_node_read(nodes)
    named = {}
    for part in parts + parts:  # the second round reads nothing
        assert (sub_shift_is_equivariant(part, whole, declared, class_nodes, groups, named)
                == sub_shift_is_equivariant(part, whole, declared, class_nodes, groups))
    assert set(named) <= set(class_nodes)
