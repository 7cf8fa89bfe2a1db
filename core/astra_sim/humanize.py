"""Numbers for people: times in s/ms/µs/ns with 3-4 significant digits, rank lists as ranges.

Terminals show these; JSON keeps integer nanoseconds.
"""

from __future__ import annotations

_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"))


def format_ns(ns):
    """``372_123_456`` -> ``'372.1 ms'``; ``1_234`` -> ``'1.234 µs'``; ``850`` -> ``'850 ns'``; 4 significant
    digits at most (3 from 100 up in a unit)."""
    if ns is None:
        return "-"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    for scale, unit in _UNITS:
        if ns >= scale:
            value = ns / scale
            text = _four(value)
            if text == "1000" and unit != "s":  # 999.96 ms rounds up to the next unit
                continue
            return f"{sign}{text} {unit}"
    return f"{sign}{int(ns)} ns"


def _four(value):
    if value >= 100:
        return f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    if value >= 10:
        return f"{value:.2f}"
    return f"{value:.3f}"


def format_share(part, whole):
    """``part`` as a percentage of ``whole`` (one decimal)."""
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def rank_ranges(ranks):
    """``[0, 1, 2, 3, 8, 10, 11]`` -> ``'0-3,8,10-11'`` (sorted, duplicates ignored)."""
    ranks = sorted(set(ranks))
    out = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
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
