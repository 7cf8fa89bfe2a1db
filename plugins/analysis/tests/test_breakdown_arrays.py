"""The breakdown's sweep in numpy (``rank_parts(view, arrays=True)``, taken from ``ARRAY_SWEEP_MIN_SPANS`` spans)
gives the same parts, to the ns, as the sweep in Python: random spans of every kind (overlapping compute classes,
communicators sharing exposed and receive-wait time with remainders, in-switch phases, remote memory, CPU ops,
gaps, zero-length and late spans), and a real run's every rank."""

from __future__ import annotations

import types

from hypothesis import given, settings, strategies as st

from astra_analysis import breakdown
from astra_analysis.views import K_COLL, K_COMPUTE, K_CPU, K_INSTANT, K_MEM, K_RECV, K_SEND

_KINDS = (K_COMPUTE, K_COLL, K_SEND, K_RECV, K_MEM, K_CPU, K_INSTANT)
_CLASSES = ("gemm", "attention", "elementwise", "other")


class _Analysis:
    """kind_of / op_class as the view's analysis answers them, from the fake nodes' own fields."""

    def kind_of(self, rep, node):
        return node.kind, node.comm

    def op_class(self, rep, node):
        return node.op_class


class _View:
    def __init__(self, spans, phases, finish_ns):
        self.analysis = _Analysis()
        self.rep = 0
        self.finish_ns = finish_ns
        self._spans = spans
        self._phases = phases

    def records(self):
        return iter(self._spans)

    def in_switch_phases(self):
        return iter(self._phases)


def _node(kind, comm, op_class):
    return types.SimpleNamespace(kind=kind, comm=comm, op_class=op_class)


_span = st.tuples(st.sampled_from(_KINDS), st.integers(0, 5), st.sampled_from(_CLASSES),
                  st.integers(0, 400), st.integers(-3, 120))


def _parts(view, arrays):
    parts = breakdown.rank_parts(view, arrays=arrays)
    return {name: getattr(parts, name) for name in breakdown.RankParts.__slots__}


@settings(max_examples=300, deadline=None)
@given(st.lists(_span, max_size=60), st.lists(st.tuples(st.integers(0, 5), st.integers(0, 400), st.integers(0, 80)),
                                              max_size=6), st.integers(0, 700))
def test_array_sweep_equals_python_sweep(spans, phases, finish_ns):
    records = [(_node(kind, comm, cls), start, start + length) for kind, comm, cls, start, length in spans]
    switch = [(_node(K_COLL, comm, None), 0, 0, 0, start, start + length) for comm, start, length in phases]
    view = _View(records, switch, finish_ns)
    python = _parts(view, False)
    assert _parts(view, True) == python
    total = (sum(python["compute"].values()) + python["cpu"] + python["memory"] + python["idle"]
             + sum(python["exposed"].values()) + sum(python["in_switch_exposed"].values())
             + sum(python["recv_wait"].values()))
    assert total == max([finish_ns] + [e for n, s, e in records if e > s and n.kind != K_INSTANT] + [p[5] for p in switch if p[5] > p[4]])


def test_a_real_run_breaks_down_alike(gemm_then_all_reduce, monkeypatch):
    from astra_sim.simulation import simulate

    monkeypatch.setattr(breakdown, "ARRAY_SWEEP_MIN_SPANS", 10 ** 9)
    python = simulate(*gemm_then_all_reduce)
    monkeypatch.setattr(breakdown, "ARRAY_SWEEP_MIN_SPANS", 0)
    arrays = simulate(*gemm_then_all_reduce)
    assert [r.breakdown for r in arrays.ranks] == [r.breakdown for r in python.ranks]
    assert arrays.breakdown == python.breakdown


def _sends_and_receives(tmp_path):
    """Two ranks: kernels, sends and receives on the default group, a named one and none, a CPU op."""
    from astra_sim.chakra import make_metadata, make_node, types as T, write_et
    from astra_sim_testing import write_network_config, write_system_config

    (tmp_path / "p").mkdir()
    for rank in range(2):
        kind, peer = (T.COMM_SEND_NODE, "comm_dst") if rank == 0 else (T.COMM_RECV_NODE, "comm_src")
        nodes = [make_node(0, "aten::mm", T.COMP_NODE, attrs={"is_cpu_op": False}, duration_micros=3 + rank),
                 make_node(1, "cpu", T.COMP_NODE, data_deps=[0], attrs={"is_cpu_op": True}, duration_micros=1)]
        for i, pg in enumerate((None, "0", "")):
            attrs = {peer: 1 - rank, "comm_tag": i, "comm_size": 4096 << i}
            if pg is not None:
                attrs["pg_name"] = pg
            nodes.append(make_node(2 + i, f"p2p{i}", kind, data_deps=[1 + i], attrs=attrs))
        write_et(tmp_path / "p" / f"w.{rank}.et", make_metadata(), nodes)
    return (str(tmp_path / "p" / "w"), str(write_system_config(tmp_path / "sys.json")),
            str(write_network_config(tmp_path / "net.yml", npus=(2,))))


def test_span_arrays_read_as_the_records(gemm_then_all_reduce, tmp_path, monkeypatch):
    """Compute nodes read straight from a rank's span array (``_records``, no cached kind) and sends and receives
    asked of ``kind_of`` once per peer and group (``_kind``) break down as through ``view.records()`` and
    ``kind_of`` for every node, to the ns."""
    from astra_sim.simulation import simulate

    cases = (gemm_then_all_reduce, _sends_and_receives(tmp_path))
    fast = [simulate(*case) for case in cases]
    monkeypatch.setattr(breakdown, "_records", lambda view: (view.records(), False))
    for case, result in zip(cases, fast):
        slow = simulate(*case)
        assert [r.breakdown for r in result.ranks] == [r.breakdown for r in slow.ranks]
        assert result.breakdown == slow.breakdown and result.breakdown
