"""The contention summary swept in numpy (``Contention.summary(..., arrays=True)``, taken from
``ARRAY_SUMMARY_MIN_ROWS`` intervals) is the Python sweep's, to the bit: random kernels and transfers (overlapping,
touching, zero-length, at equal times, with per-transfer or fixed HBM shares, SM counts past the GPU's), with
the timeline's cap small enough to truncate."""

from __future__ import annotations

import types

import pytest
from hypothesis import given, settings, strategies as st

from astra_gpu_model import contention
from astra_gpu_model.contention import Contention, _Intervals

_interval = st.tuples(st.integers(0, 300), st.integers(0, 60), st.integers(0, 140), st.integers(-1, 40),
                      st.floats(0.0, 0.75, width=32))


def _intervals(rows):
    out = _Intervals()
    for start, length, compute_sms, comm_sms, hbm in rows:
        out.add(start, start + length, compute_sms, comm_sms, hbm)
    return out


def _model(compute, comm, per_transfer, hbm_share):
    model = Contention.__new__(Contention)
    model.gpu = types.SimpleNamespace(sm_count=132)
    model.per_transfer = per_transfer
    model.hbm_share = hbm_share
    model.compute = {0: _intervals(compute)} if compute else {}
    model.comm = {0: _intervals(comm)} if comm else {}
    return model


@settings(max_examples=300, deadline=None)
@given(st.lists(_interval, max_size=40), st.lists(_interval, max_size=25), st.booleans(),
       st.floats(0.0, 0.9), st.integers(0, 400), st.sampled_from([2, 5, 256]))
def test_array_summary_equals_python_summary(compute, comm, per_transfer, hbm_share, finish, cap):
    model = _model(compute, comm, per_transfer, hbm_share)
    old = contention.TIMELINE_CAP
    contention.TIMELINE_CAP = cap
    try:
        python = model.summary({0: finish, 1: finish}, arrays=False)
        arrays = model.summary({0: finish, 1: finish}, arrays=True)
        # and before rounding: the same sums, to the bit (the module's round made the identity)
        contention.round = lambda value, digits=None: value
        python_raw = model.summary({0: finish}, arrays=False)
        arrays_raw = model.summary({0: finish}, arrays=True)
    finally:
        contention.TIMELINE_CAP = old
        del contention.round
    assert repr(arrays) == repr(python)  # floats to the bit, ints as ints
    assert all(type(a) is type(p) for a, p in zip(arrays[0].values(), python[0].values()))
    assert repr(arrays_raw) == repr(python_raw)


def test_by_size_takes_the_arrays_for_large_ranks(monkeypatch):
    model = _model([(i * 10, 7, 100, -1, 0.25) for i in range(50)], [(i * 10 + 3, 9, 0, 8, 0.1) for i in range(50)],
                   True, 0.1)
    called = []
    monkeypatch.setattr(Contention, "_rank_summary_arrays",
                        lambda self, *a: called.append(1) or Contention._rank_summary(self, *a))
    monkeypatch.setattr(contention, "ARRAY_SUMMARY_MIN_ROWS", 100)
    model.summary({0: 600})
    assert called
    monkeypatch.setattr(contention, "ARRAY_SUMMARY_MIN_ROWS", 101)
    called.clear()
    model.summary({0: 600})
    assert not called


@pytest.mark.parametrize("per_transfer", [True, False])
def test_a_long_rank_is_the_same(per_transfer):
    import random

    rng = random.Random(7)
    compute, comm, t = [], [], 0
    for _ in range(3000):
        length = rng.randint(1, 2000)
        compute.append((t, length, rng.choice([132, 108, 124]), rng.choice([-1, 8, 24]), rng.random() * 0.6))
        if rng.random() < 0.4:
            comm.append((t + rng.randint(0, length), rng.randint(1, 3000), 0, rng.choice([2, 8, 16]), rng.random() * 0.3))
        t += length + rng.choice([0, 0, 0, 5])
    model = _model(compute, comm, per_transfer, 0.15)
    assert repr(model.summary({0: t + 10}, arrays=True)) == repr(model.summary({0: t + 10}, arrays=False))
    contention.round = lambda value, digits=None: value
    try:
        assert repr(model.summary({0: t + 10}, arrays=True)) == repr(model.summary({0: t + 10}, arrays=False))
    finally:
        del contention.round


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4), st.floats(1e-9, 1e3)), max_size=40))
def test_a_times_float_changes_are_summed_in_the_sweeps_order(rows):
    """Many changes at few times, of very different sizes: the order of the additions shows in the last bits."""
    import numpy as np

    sums = {}
    for start, length, value in rows:
        for t, change in ((start, value), (start + length, -value)):
            sums[t] = sums.get(t, 0.0) + change
    starts = np.array([r[0] for r in rows], np.int64)
    ends = starts + np.array([r[1] for r in rows], np.int64)
    points = np.unique(np.concatenate((starts, ends)))
    got = contention._float_at_points(points, starts, ends, np.array([r[2] for r in rows], np.float64))
    assert [float(v).hex() for v in got] == [sums[int(t)].hex() for t in points]
