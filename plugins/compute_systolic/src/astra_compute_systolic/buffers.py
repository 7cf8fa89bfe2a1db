"""SCALE-sim 3.0's double-buffered SRAMs as small state machines over positions and counts.

``ReadSram`` is the IFMAP or filter SRAM in USER bandwidth mode (SCALE-sim's ``read_buffer``): the prefetch
order is cut into sets of ``ceil(words/100)`` positions; a window of ``A`` sets is *active*. A read of a
set outside the window slides it by ``P`` sets (cyclically: the SRAM wraps around the operand) and issues
a prefetch of ``ceil(prefetch half / bandwidth)`` DRAM lines. Prefetches run back to back from the initial
fill, whatever the array does, so the k-th one completes at ``k * (lines + 1) - 1``. The array's clock
``tt`` then moves to that time if it was later (the read "waits" a negative time), or past it by twice the
gap if it was earlier: SCALE-sim 3.0.0 adds the stall twice (``read_buffer.service_reads``; fixed after
3.0.0, see docs/systolic.md). Only the *number* of slides matters for time, not which words they fetch.

``WriteSram`` is the OFMAP SRAM (``write_buffer``): words fill DRAM lines of ``bandwidth`` words; when
fewer than half the SRAM is free a drain of up to ``ceil(half / bandwidth)`` lines starts, one line per
cycle; a word that finds the SRAM full while a drain runs waits for its end. A drain credits whole lines,
except the last one, which reproduces SCALE-sim's accounting of partly filled lines.
"""

from __future__ import annotations


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class ReadSram:
    """IFMAP / filter SRAM, USER bandwidth mode."""

    __slots__ = ("eps", "lines", "active", "step", "prefetch_lines", "dram_start", "start", "end", "slides",
                 "wraps", "double_stall")

    def __init__(self, size_kib: int, bandwidth: int, words: int, cells: int, double_stall: bool = True):
        total = size_kib * 1024
        active_size = _ceil_div(total, 2)
        prefetch_size = total - active_size
        self.eps = _ceil_div(total, 100)                     # words per set
        self.lines = words // self.eps + 1                   # sets (the last one may be empty)
        self.active = min(self.lines, _ceil_div(active_size, self.eps))
        self.step = min(self.lines - self.active, _ceil_div(prefetch_size, self.eps))
        self.prefetch_lines = _ceil_div(prefetch_size, bandwidth)
        fetch_rows = _ceil_div(cells, bandwidth)
        self.dram_start = -min(_ceil_div(active_size, bandwidth), fetch_rows)
        self.start, self.end = 0, self.active                # active window [start, end) on the ring
        self.slides = 0
        self.wraps = self.active < self.lines                 # False: everything stays resident
        self.double_stall = double_stall                      # SCALE-sim 3.0.0; 2.x waits exactly

    def ready(self, k: int) -> int:
        """Cycle the k-th prefetch completes."""
        return k * (self.prefetch_lines + 1) - 1

    def holds(self, h: int) -> bool:
        s, e = self.start, self.end
        if s < e:
            return s <= h < e
        return h >= s or h < e

    def slide(self, tt: int) -> int:
        self.slides += 1
        self.start = (self.start + self.step) % self.lines
        self.end = (self.start + self.active) % self.lines
        f = self.ready(self.slides)
        return f if (f <= tt or not self.double_stall) else 2 * f - tt

    def read_held(self, lo: int, hi: int) -> bool:
        """Whether every set holding positions lo..hi is in the active window."""
        if not self.wraps:
            return True
        eps = self.eps
        return all(self.holds(h) for h in range(lo // eps, hi // eps + 1))

    def read(self, lo: int, hi: int, tt: int) -> int:
        """Positions lo..hi read in order starting at cycle tt; returns the cycle after the reads."""
        if not self.wraps:
            return tt
        eps = self.eps
        for h in range(lo // eps, hi // eps + 1):
            while not self.holds(h):
                tt = self.slide(tt)
        return tt


class WriteSram:
    """OFMAP SRAM: returns the cycle after a line's words are stored; drains to DRAM."""

    __slots__ = ("width", "total", "active", "drain_lines", "free", "fill", "rows", "partial", "drained",
                 "drain_end", "last_drain_end", "first_drain_start")

    def __init__(self, size_kib: int, bandwidth: int):
        total = size_kib * 1024
        self.width = bandwidth
        self.total = total
        self.active = _ceil_div(total, 2)
        self.drain_lines = _ceil_div(total - self.active, bandwidth)
        self.free = total
        self.fill = 0            # words in the DRAM line being filled
        self.rows = 0            # DRAM lines closed so far
        self.partial = {}        # line index -> words, for lines closed before they were full
        self.drained = 0         # lines already written to DRAM
        self.drain_end = 0
        self.last_drain_end = None
        self.first_drain_start = None

    def _store(self, n: int):
        self.free -= n
        total = self.fill + n
        self.rows += total // self.width
        self.fill = total % self.width

    def _drain(self, cycle: int):
        if self.fill:
            self.partial[self.rows] = self.fill
            self.rows += 1
            self.fill = 0
        lines = min(self.drain_lines, self.rows - self.drained)
        if lines <= 0:
            return
        last = self.drained + lines - 1
        words = (lines - 1) * self.width + self.partial.pop(last, self.width)
        for row in [r for r in self.partial if r < last]:
            del self.partial[row]
        self.drain_end = cycle + lines - 1
        self.free += words
        self.drained += lines
        if self.first_drain_start is None:
            self.first_drain_start = cycle
        if self.last_drain_end is None or self.drain_end > self.last_drain_end:
            self.last_drain_end = self.drain_end

    def write(self, n: int, cur: int) -> int:
        """Store n words arriving at cycle ``cur``; returns the cycle the last one is stored."""
        while n > 0:
            if cur < self.drain_end:
                k = self.free if self.free > 1 else 1    # words until one finds the SRAM full
                if n < k:
                    self._store(n)
                    return cur
                self._store(k)
                n -= k
                cur = self.drain_end
            else:
                k = self.free - self.active + 1          # words until less than half is free
                if k < 1:
                    k = 1
                if n < k:
                    self._store(n)
                    return cur
                self._store(k)
                n -= k
                self._drain(cur)
        return cur

    def finish(self, cycle: int):
        """Drain what is left from ``cycle``; returns the last DRAM write cycle (None if nothing written)."""
        if self.fill:
            self.partial[self.rows] = self.fill
            self.rows += 1
            self.fill = 0
        while self.drained < self.rows:
            self._drain(cycle)
            cycle = self.drain_end + 1
        return self.last_drain_end
