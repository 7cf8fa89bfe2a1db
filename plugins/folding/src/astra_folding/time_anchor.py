"""Where time folding looks at the state (:mod:`astra_folding.time_fold`): once per so many sends and receives of the
anchor rank. Only where (and whether) the state is looked at depends on it, never what a jump does."""

from __future__ import annotations

import numpy as np

from astra_sim.chakra import types as T

_P2P = (T.COMM_SEND_NODE, T.COMM_RECV_NODE)
#: the shortest run of alike sends and receives (:func:`p2p_period`) that counts as a steady state
MIN_P2P_RUN = 24
MAX_P2P_PERIOD = 2048
#: a period over the whole middle third (:func:`_middle_period`) is taken when a run holds this many of it: the
#: MLPerf GPT-3 layout at 128 micro-batches (a whole group of 8 micro-batches per period; shorter periods, between
#: chunk boundaries, skip about as much there at the cost of more looks, checks and jumps). At 64 micro-batches (4,
#: before session 51) its whole periods repeated once and the trace no further: nothing was jumped over; with the
#: chunk's pass 7 jumps skip 577,503 of 999,781 events (mlperf-v3.1-gpt3-512's layout, its host ahead)
LONG_STEADY_PERIODS = 6
#: the rows of the trace that choice reads (its cost stays within a second on the MLPerf layout at 128 micro-batches)
P2P_ROWS_READ = 1 << 15


def p2p_period(w):
    """How many sends and receives of the trace of ``w`` apart to look at the state. A period over the whole middle
    third (:func:`_middle_period`, tags stepping evenly) when one run of rows alike holds at least
    :data:`LONG_STEADY_PERIODS` of it; else (at most :data:`MAX_P2P_PERIOD`) the ``d`` whose runs promise the most
    repeats to jump over: the sum over its runs of their length less ``2 d`` (a period to reach a state that
    repeats, one to see it repeat), counting runs of at least ``max(3 d, MIN_P2P_RUN)``; else the middle third's
    period, or None (no steady state: see :meth:`~astra_folding.time_fold.TimeFolder.run`). A row is alike when
    the rows ``d`` and ``2 d`` on have its type, peers and size and its tag moved by the same step twice (a jump
    moves tags by one step per channel). Every run, not only one over the middle third: an interleaved pipeline's
    tags take another step at each chunk boundary, so a period of one pass of each chunk (8 micro-batches at PP 8)
    holds only between the chunks that differ, and the jumps between them add up. Only where (and whether) the
    state is looked at depends on it, never what a jump does."""
    kinds = {}
    pairs = [(kinds.setdefault((n.type, n.attrs.get("comm_src"), n.attrs.get("comm_dst"), n.attrs.get("comm_size")),
                               len(kinds)), n.attrs.get("comm_tag") or 0)
             for _, n in sorted(w.nodes.items()) if n.type in _P2P]
    if len(pairs) < 3:
        return None
    kind, tag = np.array(pairs, dtype=np.int64).T
    whole = _middle_period(kind, tag)  # a period over the whole middle third (a long steady state), or None
    if whole is not None and _runs(kind, tag, whole).max(initial=0) >= LONG_STEADY_PERIODS * whole:
        return whole  # long enough to jump its whole periods: fewer jumps, each over more
    kind, tag = kind[:P2P_ROWS_READ], tag[:P2P_ROWS_READ]
    best, most = None, 0
    for d in range(1, min(len(kind) // 3, MAX_P2P_PERIOD) + 1):
        if 2 * np.count_nonzero(kind[d:] == kind[:-d]) < len(kind) - d:
            continue  # most rows unlike the one d on: no long run here (a cheap test first)
        runs = _runs(kind, tag, d)
        runs = runs[runs >= max(3 * d, MIN_P2P_RUN)]
        gain = int((runs - 2 * d).sum())
        if gain > most:
            best, most = d, gain
    return best if best is not None else whole


def _runs(kind, tag, d):
    """The lengths of the runs of rows alike ``d`` apart (see :func:`p2p_period`)."""
    n = len(kind) - 2 * d
    if n <= 0:
        return np.zeros(0, np.int64)
    step = tag[d:d + n] - tag[:n]
    same = (kind[d:d + n] == kind[:n]) & (kind[2 * d:] == kind[:n]) & (tag[2 * d:] - tag[d:d + n] == step)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], same, [False])).astype(np.int8)))
    return edges[1::2] - edges[::2]  # (starts and ends of the runs, alternately)


def _middle_period(kind, tag):
    """The smallest ``d`` with every send or receive of the middle third like the one ``d`` on (kind, its tag one
    step on per kind): what looks were spaced by before :func:`p2p_period`, kept for long steady states and short
    traces (whose runs are shorter than ``MIN_P2P_RUN``); None when none."""
    third = len(kind) // 3
    middle = slice(third, 2 * third)
    for d in range(1, third + 1):
        later = slice(third + d, 2 * third + d)
        head = min(64, third)
        if not np.array_equal(kind[third + d:third + d + head], kind[third:third + head]) or not np.array_equal(
                kind[later], kind[middle]):  # (most d differ in the first rows already)
            continue
        rows = np.stack((kind[middle], tag[later] - tag[middle]))
        if len(np.unique(rows, axis=1)[0]) == len(np.unique(kind[middle])):  # one step per kind
            return d
    return None
