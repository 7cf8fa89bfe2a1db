"""Time folding's looks and jumps (issue 37): where the state is looked at (:mod:`astra_folding.time_anchor`), the
pre-posted receives kept from look to look (:mod:`astra_folding.time_inert`) against a full scan, and runs that
jump more than once, every rank's numbers the same, to the ns, as without the flag."""

from __future__ import annotations

import os
import random
import sys
import types
from collections import deque

from hypothesis import given, settings, strategies as st

from astra_sim.chakra import types as T
from astra_sim.system.frontend import Message

from astra_folding.time_anchor import p2p_period
from astra_folding.time_inert import InertReceives

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (pytest imports test modules by path here)
from test_time_fold import check_exact, write_pipeline  # noqa: E402


def _trace(rows):
    """A stand-in workload whose nodes are ``rows`` of (type, src, dst, size, tag)."""
    nodes = {i: types.SimpleNamespace(type=t, attrs={"comm_src": s, "comm_dst": d, "comm_size": z, "comm_tag": g})
             for i, (t, s, d, z, g) in enumerate(rows)}
    return types.SimpleNamespace(nodes=nodes)


def _interleaved_rows(stages, chunks, groups):
    """Stage 1's receive and send per forward pass of an interleaved pipeline, tagged as the LLM generator tags
    them (``2 (chunk M + micro-batch)``): the tags step by 2 within a chunk's pass of ``stages`` micro-batches and
    by more at a chunk boundary."""
    micro_batches = stages * groups
    rows = []
    for group in range(groups):
        for chunk in range(chunks):
            for mb in range(group * stages, (group + 1) * stages):
                tag = 2 * (chunk * micro_batches + mb)
                rows += [(T.COMM_RECV_NODE, 0, 1, 64, tag), (T.COMM_SEND_NODE, 1, 2, 64, tag)]
    return rows


def test_looks_come_once_per_pass_of_each_chunk_of_an_interleaved_pipeline():
    # 8 stages, 12 chunks: the tags step evenly over a chunk's 8 micro-batches (16 rows) between the boundaries,
    # not over one micro-batch (the step changes at every boundary) nor only over a whole group (96 passes)
    assert p2p_period(_trace(_interleaved_rows(8, 12, 2))) == 16


def test_a_long_steady_state_is_looked_at_once_per_whole_period():
    # 8 groups: the tags step evenly over a whole group (96 passes) through the middle third and beyond, for at least
    # LONG_STEADY_PERIODS of it: fewer, longer jumps
    assert p2p_period(_trace(_interleaved_rows(8, 12, 8))) == 8 * 12 * 2


def test_a_short_trace_is_looked_at_as_before():
    # runs shorter than MIN_P2P_RUN: the period over the middle third, as before
    rows = [(T.COMM_SEND_NODE, 0, 1, 64, 2 * i) if i % 2 == 0 else (T.COMM_RECV_NODE, 1, 0, 64, 2 * i)
            for i in range(12)]
    assert p2p_period(_trace(rows)) == 2
    assert p2p_period(_trace(rows[:2])) is None


def _scan(waiting, preposted):
    """What a full scan of the matcher's waiting messages finds: {rank: {node id: key}} of the pre-posted."""
    out = {}
    for key, head in waiting.items():
        for m in ([head] if head.__class__ is Message else head):
            if preposted(m):
                out.setdefault(key[2], {})[m.recv_arg] = key
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_kept_preposted_receives_are_a_full_scans(seed):
    """Random matcher traffic (as SendRecvMatcher changes its waiting messages: a key's lone message replaced by a
    deque, deleted when matched, a deque appended to in place, new keys at the end; a jump rebuilds the dict with
    the same objects): after each round the cache, updated from the keys looked up (some deletions untold) or in
    full, equals a full scan."""
    rng = random.Random(seed)
    roots = set(range(0, 400, 2))
    preposted = lambda m: not m.posted and m.recv_arg in roots  # noqa: E731
    waiting = {}
    for n in range(0, 400, 2):  # posted at the start
        key = (n * 3 % 50, n % 4, 4 + n % 3, 64)
        if key not in waiting:
            waiting[key] = Message(key, False, None, None, print, n)
    matcher = types.SimpleNamespace(_waiting=waiting)
    cache = InertReceives(matcher, preposted, range(8))
    for _ in range(30):
        changed = set()  # what the posters since the last look looked up (TimeFolder._posted_keys)
        for _ in range(rng.randrange(8)):
            keys = list(matcher._waiting)
            op = rng.randrange(5)
            if op == 0 and keys:  # a send matches a waiting receive (told, or not: the count finds it)
                key = rng.choice(keys)
                del matcher._waiting[key]
                if rng.random() < 0.8:
                    changed.add(key)
            elif op == 1 and keys:  # another receive (not pre-posted) of a waiting key
                key = rng.choice(keys)
                changed.add(key)
                head = matcher._waiting[key]
                extra = Message(key, False, None, None, print, 1001)
                if head.__class__ is Message:
                    matcher._waiting[key] = deque((head, extra))
                else:
                    head.append(extra)
            elif op == 2:  # a send in flight, or a later receive
                key = (rng.randrange(1000, 2000), 0, 5, 64)
                changed.add(key)
                matcher._waiting.setdefault(key, Message(key, rng.random() < 0.5, print, 7, None, None))
            elif op == 3:  # a jump rebuilds the dict: the same objects under the same keys
                matcher._waiting = dict(matcher._waiting)
            elif op == 4 and keys:  # a deque drained back to one message
                key = rng.choice(keys)
                head = matcher._waiting[key]
                if head.__class__ is not Message:
                    changed.add(key)
                    matcher._waiting[key] = head[0]
        live = cache.update(changed if rng.random() < 0.7 else None)
        found = cache.receives(live)
        assert {r: d for r, d in found.items() if d} == _scan(matcher._waiting, preposted)
        cached = {k for k, m in cache.known.items()}
        assert cached | set(live) == set(matcher._waiting) and not cached & set(live)
        for channel, tags in cache.by_channel.items():
            for tag, y in tags.items():
                assert matcher._waiting[(tag,) + channel].recv_arg == y


def test_candidates_are_every_receive_a_repeat_can_find():
    rng = random.Random(5)
    roots = set(range(300))
    waiting = {}
    for n in range(300):
        key = (rng.randrange(0, 3000), 1, 2, 64)
        waiting.setdefault(key, Message(key, False, None, None, print, n))
    cache = InertReceives(types.SimpleNamespace(_waiting=waiting), lambda m: m.recv_arg in roots, [2])
    cache.update()
    for _ in range(200):
        low = rng.randrange(0, 2500)
        high = low + rng.randrange(0, 200)
        step, limit = rng.randrange(1, 60), rng.randrange(1, 30)
        got = dict(cache.candidates((1, 2, 64), low, high, step, limit))
        for (tag, *_), m in waiting.items():
            if tag - limit * step >= 0:
                wanted = range(max(1, -((high - tag) // step)), min(limit, (tag - low) // step) + 1)
            else:
                wanted = range(1, limit + 1)
            if len(wanted):
                assert got.get(tag) == m.recv_arg


def test_an_interleaved_pipeline_jumps_more_than_once_to_the_ns(tmp_path):
    """12 chunks of 8 stages, 48 micro-batches: the tags step evenly only between chunk boundaries, so each stretch
    of the steady state is a jump of its own; every number as without the flag."""
    info = check_exact(write_pipeline(tmp_path, 8, 48, 12))
    assert info["folded"] is True, info
    assert info["jumps"] >= 2, info
    assert info["skipped_ns"] >= info["periods"] * info["period_ns"]
