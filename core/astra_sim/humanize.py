"""Numbers for people (terminals; JSON keeps integer ns): times with 3-4 significant digits, ranks as ranges."""

from __future__ import annotations

import itertools

_UNITS = ((1, "ns"), (1_000, "µs"), (1_000_000, "ms"), (1_000_000_000, "s"))


def format_ns(ns):
    """``372_123_456`` -> ``'372.1 ms'``; ``1_234`` -> ``'1.234 µs'``; ``850`` -> ``'850 ns'``; 4 significant
    digits at most (3 from 100 up in a unit), in the largest unit the time reaches (999.96 ms is 1.000 s)."""
    if ns is None:
        return "-"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1000:
        return f"{sign}{int(ns)} ns"
    unit = 1
    while unit + 1 < len(_UNITS) and ns >= _UNITS[unit + 1][0]:
        unit += 1
    text = _four(ns / _UNITS[unit][0])
    if float(text) >= 1000 and unit + 1 < len(_UNITS):
        unit += 1
        text = _four(ns / _UNITS[unit][0])
    return f"{sign}{text} {_UNITS[unit][1]}"


def _four(value):
    """Four significant digits (three from 100 up), decided after rounding (99.996 is '100.0')."""
    for digits, below in ((3, 9.9995), (2, 99.995), (1, 999.95)):
        if value < below:
            return f"{value:.{digits}f}"
    return f"{value:.0f}"


def rank_ranges(ranks):
    """``[0, 1, 2, 3, 8, 10, 11]`` -> ``'0-3,8,10-11'`` (sorted, duplicates ignored)."""
    out = []
    for _, run in itertools.groupby(enumerate(sorted(set(ranks))), lambda pair: pair[1] - pair[0]):
        run = [rank for _, rank in run]
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def parse_rank_ranges(text, total, flag="--timeline-ranks"):
    """``'0-7,64'`` -> ``[0, ..., 7, 64]``; a ValueError names the flag and what is wrong."""
    ranks = set()
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        low, dash, high = item.partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise ValueError(f"{flag}: {item!r} is not a rank or a range like 0-7") from None
        if first < 0 or last < first:
            raise ValueError(f"{flag}: {item!r} is not a rank or a range like 0-7")
        if last >= total:
            raise ValueError(f"{flag}: rank {last} does not exist (the run has ranks 0-{total - 1})")
        ranks.update(range(first, last + 1))
    if not ranks:
        raise ValueError(f"{flag}: no rank given (e.g. 0-7,64)")
    return sorted(ranks)
