"""Where time folding looks at the state (:mod:`astra_folding.time_fold`): once per so many sends and receives of the
anchor rank. Only where (and whether) the state is looked at depends on it, never what a jump does."""

from __future__ import annotations

import numpy as np

from astra_sim.chakra import types as T

_P2P = (T.COMM_SEND_NODE, T.COMM_RECV_NODE)
#: the shortest run of alike sends and receives (:func:`p2p_period`) that counts as a steady state
MIN_P2P_RUN = 24
MAX_P2P_PERIOD = 2048
#: the rows of the trace that choice reads (its cost stays within a second on the MLPerf layout at 128 micro-batches)
P2P_ROWS_READ = 1 << 15


def p2p_period(w):
    """How many sends and receives of the trace of ``w`` apart to look at the state (at most
    :data:`MAX_P2P_PERIOD`): the ``d`` whose runs of rows alike ``d`` apart promise the most repeats to jump over,
    the sum over its runs of their length less ``2 d`` (a period to reach a state that repeats, one to see it
    repeat), counting runs of at least ``max(3 d, MIN_P2P_RUN)``; None when no ``d`` has one (no steady state:
    see :meth:`~astra_folding.time_fold.TimeFolder.run`). A row is alike when the one ``d`` on and the one ``2 d``
    on have its type, peers and size and its tag moved by the same step twice (a jump's tags move by one step per channel). Every run,
    not the one over the middle third: an interleaved pipeline's tags take another step at each chunk boundary,
    so a period of one pass of each chunk (8 micro-batches at PP 8) holds only between the chunks that differ,
    and the jumps between them add up. Only where (and whether) the state is looked at depends on it, never
    what a jump does."""
    kinds = {}
    pairs = [(kinds.setdefault((n.type, n.attrs.get("comm_src"), n.attrs.get("comm_dst"), n.attrs.get("comm_size")),
                               len(kinds)), n.attrs.get("comm_tag") or 0)
             for _, n in sorted(w.nodes.items()) if n.type in _P2P][:P2P_ROWS_READ]
    if len(pairs) < 3:
        return None
    kind, tag = np.array(pairs, dtype=np.int64).T
    best, most = None, 0
    for d in range(1, min(len(kind) // 3, MAX_P2P_PERIOD) + 1):
        if 2 * np.count_nonzero(kind[d:] == kind[:-d]) < len(kind) - d:
            continue  # most rows unlike the one d on: no long run here (a cheap test first)
        n = len(kind) - 2 * d
        step = tag[d:d + n] - tag[:n]
        same = ((kind[d:d + n] == kind[:n]) & (kind[2 * d:] == kind[:n]) & (tag[2 * d:] - tag[d:d + n] == step))
        edges = np.flatnonzero(np.diff(np.concatenate(([False], same, [False])).astype(np.int8)))
        runs = edges[1::2] - edges[::2]  # (starts and ends of the runs, alternately)
        runs = runs[runs >= max(3 * d, MIN_P2P_RUN)]
        gain = int((runs - 2 * d).sum())
        if gain > most:
            best, most = d, gain
    return best if best is not None else _middle_period(pairs)


def _middle_period(pairs):
    """The smallest ``d`` with every send or receive of the middle third like the one ``d`` on (kind, its tag one
    step on per kind): what looks were spaced by before :func:`_p2p_period`, kept for short traces (whose runs are
    shorter than ``MIN_P2P_RUN``); None when none."""
    third = len(pairs) // 3
    for d in range(1, third + 1):
        steps = {}
        for i in range(third, 2 * third):
            (ka, ta), (kb, tb) = pairs[i], pairs[i + d]
            if kb != ka or steps.setdefault(ka, tb - ta) != tb - ta:
                break
        else:
            return d
    return None
