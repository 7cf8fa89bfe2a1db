"""Checkpoint writes that share the storage system's bandwidth.

Jobs that checkpoint at the same time write to one storage system: each job can write at most at its own rate
(``checkpoint.write_gb_per_s``, and ``node_write_gb_per_s`` times its nodes), and together at most at the
storage's aggregate (``checkpoint.storage_write_gb_per_s``). The rates are max-min fair (water filling over one
shared resource): a job whose own cap is below the equal share keeps its cap, the others split what is left
equally. Rates change only when a write starts, ends or is cut short by a failure; each change gives every write
in progress a new end time (integer ns)."""

from __future__ import annotations


class SharedStorage:
    """``start(key, nbytes, cap, now)``, ``stop(key, now)``: writes in progress; both return ``{key: end_ns}``
    for every write whose end moved (the caller books those and drops its older ones). ``capacity`` and the caps
    are bytes per ns."""

    def __init__(self, capacity_bytes_per_ns):
        self.capacity = float(capacity_bytes_per_ns)
        self.writes = {}  # key -> [bytes left at `since`, cap, rate, since]

    def start(self, key, nbytes, cap, now) -> dict:
        self._advance(now)
        self.writes[key] = [float(nbytes), float(cap), 0.0, now]
        return self._rerate(now)

    def stop(self, key, now) -> dict:
        """The write of ``key`` ended (or was cut short): the others' shares grow."""
        if key not in self.writes:
            return {}
        self._advance(now)
        del self.writes[key]
        return self._rerate(now)

    def rate(self, key) -> float:
        return self.writes[key][2]

    def _advance(self, now):
        for write in self.writes.values():
            write[0] = max(0.0, write[0] - write[2] * (now - write[3]))
            write[3] = now

    def _rerate(self, now) -> dict:
        left = self.capacity
        pending = sorted(self.writes.items(), key=lambda item: item[1][1])  # smallest cap first
        ends = {}
        for i, (key, write) in enumerate(pending):
            rate = min(write[1], left / (len(pending) - i))
            left -= rate
            write[2] = rate
            ends[key] = now + int(-(-write[0] // rate)) if write[0] > 0 else now
        return ends
