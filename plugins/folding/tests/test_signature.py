"""Trace signatures: the lazy signature the search reads gives the same answers as the whole one (structure,
peers, groups, collective facts, refusals), and digests only the nodes a comparison needs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from astra_folding import signature
from astra_folding.groups import FoldRefused
from astra_folding.signature import LazySignature, NodeCache, trace_signature
from astra_sim.chakra import make_node, types as T

KINDS = (T.COMP_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE, T.COMM_COLL_NODE, T.METADATA_NODE, T.MEM_LOAD_NODE)


def _node(node_id, kind, name, peer, pg, size):
    attrs = {"is_cpu_op": False}
    if kind in (T.COMM_SEND_NODE, T.COMM_RECV_NODE):
        attrs.update(comm_src=peer, comm_dst=(peer + 1) % 4, comm_size=size, comm_tag=node_id)
    elif kind == T.COMM_COLL_NODE:
        attrs.update(comm_type=T.ALL_REDUCE, comm_size=size)
    else:
        attrs["tensor_size"] = size
    if pg is not None:
        attrs["pg_name"] = pg
    inputs = "[[0, 1], [2, 3]]" if kind == T.METADATA_NODE and size % 2 else None
    return make_node(node_id, name, kind, data_deps=[node_id - 1] if node_id else [], attrs=attrs,
                     inputs_values=inputs)


node_args = st.tuples(st.sampled_from(KINDS), st.sampled_from(["a", "b"]), st.integers(0, 3),
                      st.sampled_from([None, "", "0", "1", "2"]), st.sampled_from([64, 128]))


def _trace(args):
    return [_node(i, *a) for i, a in enumerate(args)]


def _whole(sig):
    return (sig.structure, sig.peers, sig.groups, sig.native_collectives, sig.group_collectives,
            sig.declares_groups, sig.uses_memory)


@settings(max_examples=60, deadline=None)
@given(st.lists(node_args, max_size=12))
def test_lazy_signature_reads_as_the_whole_one(args):
    nodes = _trace(args)
    assert _whole(LazySignature(nodes)) == _whole(trace_signature(nodes))


@settings(max_examples=40, deadline=None)
@given(st.lists(node_args, min_size=1, max_size=5), st.integers(0, 200), st.one_of(st.none(), node_args),
       st.booleans(), st.booleans())
def test_lazy_structures_compare_as_whole_digests(pattern, length, changed, longer, share):
    """Two traces of up to 200 nodes that differ in one node, or in length, or not at all, holding the same
    node objects where they are alike or not: ``same_structure`` says what comparing the whole digests
    says, whichever side is lazy."""
    args = [pattern[i % len(pattern)] for i in range(length)]
    other = list(args) + ([pattern[0]] if longer else [])
    at = (length * 7) // 11
    if changed is not None and length:
        other[at] = changed
    a, b = _trace(args), _trace(other)
    if share:  # as parse_et(shared=...) gives them: the same object wherever the nodes are the same
        b = [a[i] if i < len(a) and i != at else node for i, node in enumerate(b)]
    expected = trace_signature(a).structure == trace_signature(b).structure
    cache = NodeCache()
    lazy_a, lazy_b = LazySignature(a, cache), LazySignature(b, cache)
    assert lazy_a.same_structure(lazy_b) == expected == lazy_b.same_structure(lazy_a)
    assert lazy_a.same_structure(trace_signature(b)) == expected == trace_signature(a).same_structure(lazy_b)


@pytest.mark.parametrize("attrs, kind, message", [
    ({"comm_src": "0", "comm_dst": 1}, T.COMM_SEND_NODE, "node 3 has a comm_src of type str"),
    ({"comm_size": 64}, T.COMM_COLL_NODE, "node 3 is a collective without comm_type"),
    ({"comm_type": T.ALL_REDUCE, "pg_name": 1.5}, T.COMM_COLL_NODE, "node 3 has a pg_name of type float"),
])
def test_lazy_signature_refuses_what_the_whole_one_refuses(attrs, kind, message):
    nodes = [_node(0, T.COMP_NODE, "a", 0, None, 64), make_node(3, "x", kind, attrs=attrs)]
    for make in (trace_signature, LazySignature):
        with pytest.raises(FoldRefused, match=message):
            make(nodes)


def test_traces_that_differ_early_are_digested_no_further(monkeypatch):
    """Two long traces whose first nodes differ: those two nodes are digested, their peers never read; two alike
    traces that share node objects: only the nodes they do not share are digested."""
    calls = []
    digest = signature._structure_digest
    monkeypatch.setattr(signature, "_structure_digest", lambda node: calls.append(node) or digest(node))
    length = 500
    a = _trace([(T.COMP_NODE, "a", 0, None, 64)] * length)
    b = _trace([(T.COMP_NODE, "b", 0, None, 64)] + [(T.COMP_NODE, "a", 0, None, 64)] * (length - 1))
    lazy_a, lazy_b = LazySignature(a), LazySignature(b)
    assert not lazy_a.same_structure(lazy_b)
    assert calls == [a[0], b[0]]
    assert lazy_a._relabelled is None and lazy_b._relabelled is None
    calls.clear()
    c = list(a)
    c[100:103] = _trace([(T.COMP_NODE, "a", 0, None, 64)] * 103)[100:]
    assert lazy_a.same_structure(LazySignature(c))
    assert len(calls) == 6  # the three positions holding other objects, in both traces
