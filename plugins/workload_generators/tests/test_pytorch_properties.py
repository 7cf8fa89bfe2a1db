"""Property tests (hypothesis) for the readers of user input added for CPU-backend traces: op schemas, c10d op
arguments and process groups, Kineto timelines."""

from __future__ import annotations

import json

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from astra_sim.chakra import types as T  # noqa: E402
from astra_sim.errors import ConfigError  # noqa: E402

from astra_workload_generators.pytorch import convert_pytorch  # noqa: E402
from astra_workload_generators.pytorch_c10d import C10D_OPS, NOT_SIMULATED, p2p_tag, schema_args  # noqa: E402
from astra_workload_generators.pytorch_kineto import Span, _exclusive_by_time  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TYPES = ["Tensor(float)", "GenericList[Tensor(float)]", "GenericList[GenericList[Tensor(float)]]", "Int", "Bool",
         "Object", "None", "String", "GenericList[Int]", "Double"]
tensor = st.builds(lambda i, s, n, b: [i, s, 0, n, b, "cpu"], st.integers(0, 50), st.integers(0, 50),
                   st.integers(-2, 10_000), st.sampled_from([1, 2, 4, 8]))
value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.text(max_size=4), tensor),
                     lambda inner: st.lists(inner, max_size=3), max_leaves=6)


@given(st.text(max_size=80))
def test_schema_args_reads_any_text(text):
    names = schema_args(text)
    assert isinstance(names, list) and all(isinstance(n, str) and n for n in names)


def _op(nid, name, parent, ins, schema=""):
    attrs = [{"name": k, "type": "uint64", "value": nid if k == "rf_id" else 0}
             for k in ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")]
    attrs.append({"name": "op_schema", "type": "string", "value": schema})
    return {"id": nid, "name": name, "ctrl_deps": parent, "attrs": attrs,
            "inputs": {"values": [v for v, _ in ins], "shapes": [[] for _ in ins], "types": [t for _, t in ins]},
            "outputs": {"values": [], "shapes": [], "types": []}}


def _host(ops, groups):
    nodes = [_op(1, "[pytorch|profiler|execution_trace|process]", 1, []),
             _op(2, "[pytorch|profiler|execution_trace|thread]", 1, []),
             _op(3, "## process_group:init ##", 2, [(json.dumps(groups), "String")])]
    for k, (name, ins) in enumerate(ops):
        nodes.append(_op(4 + k, name, 2, ins))
    return {"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}


group_strategy = st.lists(st.builds(lambda name, ranks: {"pg_name": str(name), "ranks": ranks},
                                    st.integers(0, 4), st.lists(st.integers(-1, 4), max_size=4, unique=True)),
                          min_size=0, max_size=3)
op_strategy = st.tuples(st.sampled_from(sorted(C10D_OPS) + sorted(NOT_SIMULATED)),
                        st.lists(st.tuples(value, st.sampled_from(TYPES)), max_size=6))


@SETTINGS
@given(st.lists(op_strategy, min_size=1, max_size=4), group_strategy, st.integers(0, 3))
def test_random_c10d_ops_convert_or_fail_with_a_clear_error(tmp_path, ops, groups, rank):
    path = tmp_path / "h.json"
    path.write_text(json.dumps(_host(ops, groups)))
    try:
        s = convert_pytorch(path, tmp_path / "o", rank=rank)
    except ConfigError as exc:
        assert "h.json" in str(exc) or "rank" in str(exc)
        return
    from astra_sim.chakra import read_et

    for n in read_et(f"{tmp_path / 'o'}.{rank}.et").nodes:
        if n.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE):
            peer = n.attrs.get("comm_dst", n.attrs.get("comm_src"))
            assert peer != rank and peer >= 0 and n.attrs["comm_size"] > 0
            assert 0 <= n.attrs["comm_tag"] < 2 ** 28
        if n.type == T.COMM_COLL_NODE:
            assert n.attrs["comm_size"] >= 0
    assert s["cpu_backend_comms"] + sum(s["not_simulated"].values()) <= len(ops)


@st.composite
def nested(draw, start=0.0, depth=0):
    """(spans, root id): a tree of properly nested events on one thread, children one after the other."""
    dur = draw(st.floats(1.0, 1000.0))
    spans = {}
    rid = len(spans)
    spans[rid] = (start, start + dur)
    if depth < 3:
        t = start
        for _ in range(draw(st.integers(0, 3))):
            gap = draw(st.floats(0.0, 5.0))
            child_dur = draw(st.floats(0.0, 50.0))
            if t + gap + child_dur > start + dur:
                break
            spans[len(spans)] = (t + gap, t + gap + child_dur)
            t += gap + child_dur
    return spans


@given(nested(), st.sets(st.integers(0, 3)))
def test_exclusive_times_split_a_thread_timeline(spans, markers):
    hid = {k: 10 + k for k in spans}
    names = {hid[k]: ("gloo:send" if k in markers and k != 0 else f"op{k}") for k in spans}
    out = _exclusive_by_time({hid[k]: Span(7, s, e) for k, (s, e) in spans.items()}, names)
    for k, (s, e) in spans.items():
        assert -1e-9 <= out[hid[k]] <= (e - s) + 1e-9
    # a root and its sequential children: their exclusive times add up to the root's span (events that touch within
    # the 2 ns of Kineto's float rounding count as adjacent, so a child that short at the root's very end may not)
    assert abs(sum(out.values()) - (spans[0][1] - spans[0][0])) <= 2e-3 * len(spans) + 1e-9


@given(st.text(max_size=6), st.integers(-2 ** 40, 2 ** 40))
def test_p2p_tags_fit_an_int32_and_are_the_same_on_both_sides(group, tag):
    assert p2p_tag(group, tag) == p2p_tag(group, tag)
    assert 0 <= p2p_tag(group, tag) < 2 ** 28
