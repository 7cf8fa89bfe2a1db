"""SCALE-sim 3.0's cycles for one layer, in time proportional to the number of memory *events*.

``linesim.simulate_lines`` steps every array cycle; a 16k x 16k x 16k GEMM has 2.7e8 of them. Here the
schedule is walked from event to event: an SRAM slide (a read outside the active window), an OFMAP drain
starting, or an OFMAP word finding the SRAM full. Between events nothing stalls, so ``k`` array cycles
cost ``k`` cycles and only the OFMAP fill level moves, by a count that ``geometry`` gives in closed form.
Events are found by binary search over folds and cycles, which works because within a fold the positions an
SRAM is read at only grow (skewed streams) or only shrink (stationary tiles), the windows are rings of sets,
and the OFMAP word count is monotone in time.

The numbers are SCALE-sim's to the cycle, including its modelling choices (see docs/systolic.md): the
double-counted read stall, the re-read of a tile by every fold that needs it, the ring wrap-around.
"""

from __future__ import annotations

from astra_compute_systolic.buffers import WriteSram
from astra_compute_systolic.geometry import BlockStream, Layer, fold_layer, rect_below
from astra_compute_systolic.linesim import check_version, dram_starts, overall_util, read_srams
from astra_compute_systolic.result import LayerCycles


def first_at_least(f, a, b, target):
    """Smallest x in [a, b] with f(x) >= target, for f non-decreasing and f(b) >= target.

    Interpolation search (f is close to linear almost everywhere here: one anti-diagonal, one DRAM line or
    one fold per step), with a bisection step whenever interpolation does not halve the bracket."""
    fa = f(a)
    if fa >= target:
        return a
    fb = f(b)
    while b - a > 1:
        width = b - a
        if fb > fa:
            x = a + (target - fa) * width // (fb - fa)
        else:
            x = a + width // 2
        x = min(max(x, a + 1), b - 1)
        fx = f(x)
        if fx >= target:
            b, fb = x, fx
        else:
            a, fa = x, fx
        if b - a > width // 2 and b - a > 1:            # interpolation was poor: bisect once
            x = (a + b) // 2
            fx = f(x)
            if fx >= target:
                b, fb = x, fx
            else:
                a, fa = x, fx
    return b


class _Reads:
    """One read stream of one column-fold run, with its SRAM's window."""

    __slots__ = ("f", "stream", "sram", "osfilter", "block", "R", "eps", "hulls", "memo")

    def __init__(self, folds, stream, sram, osfilter):
        self.f = folds
        self.stream = stream
        self.sram = sram
        self.osfilter = osfilter
        self.block = isinstance(stream, BlockStream)
        self.R = folds.R
        self.eps = sram.eps if sram is not None else 1
        self.hulls = {}
        self.memo = None      # (fc, slides, from q, event q or None): valid while the window stays put

    def next_event_q(self, fc, q, rf, L):
        """Run cycle of the next read outside the window, from run cycle q (memoised per window)."""
        if self.sram is None or not self.sram.wraps:
            return None
        memo = self.memo
        if memo is not None and memo[0] == fc and memo[1] == self.sram.slides and memo[2] <= q \
                and (memo[3] is None or q <= memo[3]):
            return memo[3]
        fr, j = divmod(q, L)
        ev = self.next_event(fc, fr, j, rf)
        e = None if ev is None else ev[0] * L + ev[1]
        self.memo = (fc, self.sram.slides, q, e)
        return e

    def span(self, fc, fr):
        """First and last fold cycles that read, or None."""
        s = self.stream
        if self.block:
            ru = min(self.R, s.rows - fr * self.R)
            return self.R - ru, self.R - 1
        u = s.used(fc if self.osfilter else fr)
        return s.shift, s.shift + s.T + u - 2

    def rng(self, fc, fr, j):
        s = self.stream
        if self.block:
            return s.line(fc, fr, j)
        return s.line(fc if self.osfilter else fr, j)

    def hull(self, fc, fr):
        """Lowest and highest position a fold reads."""
        key = (fc if (self.block or self.osfilter) else 0, fr if not self.osfilter else 0)
        h = self.hulls.get(key)
        if h is None:
            a, b = self.span(fc, fr)
            if self.block:
                h = self.rng(fc, fr, b)[0], self.rng(fc, fr, a)[1]
            else:
                h = self.rng(fc, fr, a)[0], self.rng(fc, fr, b)[1]
            self.hulls[key] = h
        return h

    def held(self, lo, hi):
        sram = self.sram
        h1, h2 = lo // self.eps, hi // self.eps
        s, e = sram.start, sram.end
        if s < e:
            return s <= h1 and h2 < e
        return h1 >= s or h2 < e

    # -------------------------------------------------------------- next line that slides the window
    def next_event(self, fc, fr, j, rf):
        """(fold, cycle) of the next read outside the window in this column-fold run, or None."""
        if self.sram is None or not self.sram.wraps:
            return None
        while fr < rf:
            ev = self._in_fold(fc, fr, j)
            if ev is not None:
                return fr, ev
            a = fr + 1
            if a >= rf:
                return None
            lo = self.hull(fc, a)[0]
            if self.held(lo, self.hull(fc, rf - 1)[1]):
                return None
            # first x with folds a..x not all held: held() fails once the hull's end leaves the window
            fr = first_at_least(lambda x: 0 if self.held(lo, self.hull(fc, x)[1]) else 1, a, rf - 1, 1)
            j = 0
        return None

    def _in_fold(self, fc, fr, j0):
        ja, jb = self.span(fc, fr)
        j = max(j0, ja)
        if j > jb:
            return None
        sram, eps = self.sram, self.eps
        while True:
            lo, hi = self.rng(fc, fr, j)
            if not self.held(lo, hi):
                return j
            s, e, n = sram.start, sram.end, sram.lines
            if not self.block:                              # positions grow with j
                h = hi // eps
                if s < e:
                    bad_lo, bad_hi = e, n - 1
                elif h >= s:
                    return None
                else:
                    bad_lo, bad_hi = e, s - 1
                if bad_lo > bad_hi:
                    return None
                target = bad_lo * eps                        # first j' with hi(j') >= target
                if j + 1 > jb or self.rng(fc, fr, jb)[1] < target:
                    return None
                a = first_at_least(lambda x: self.rng(fc, fr, x)[1], j + 1, jb, target)
                if self.rng(fc, fr, a)[0] // eps <= bad_hi:
                    return a
                j = a
            else:                                           # positions shrink with j
                h = lo // eps
                if s < e:
                    bad_lo, bad_hi = 0, s - 1
                elif h < e:
                    return None
                else:
                    bad_lo, bad_hi = e, s - 1
                if bad_lo > bad_hi:
                    return None
                target = (bad_hi + 1) * eps                  # first j' with lo(j') < target
                if j + 1 > jb or self.rng(fc, fr, jb)[0] >= target:
                    return None
                a = first_at_least(lambda x: -self.rng(fc, fr, x)[0], j + 1, jb, 1 - target)
                if self.rng(fc, fr, a)[1] // eps >= bad_lo:
                    return a
                j = a


class _Writes:
    """OFMAP words per cycle of one column-fold run, cumulated in closed form."""

    __slots__ = ("f", "fc", "rf", "L", "cu", "hi", "per_fold")

    def __init__(self, folds, fc):
        self.f = folds
        self.fc = fc
        self.rf = folds.row_fold
        self.L = folds.fold_cycles
        self.cu = folds.cu(fc)
        self.hi = folds.ofmap_hi
        self.per_fold = (folds.R if folds.ofmap_rows_flip else folds.T) * self.cu

    def _in_fold(self, fr, j):
        f = self.f
        lo = f.ofmap_lo + (f.R - f.ru(fr) if f.ofmap_rows_flip else 0)
        return rect_below(j, lo, self.hi - lo + 1, 0, self.cu)

    def upto(self, q):
        """Words written before run cycle q (q = fold * fold_cycles + cycle)."""
        fr, j = divmod(q, self.L)
        if fr >= self.rf:
            return self.total()
        return fr * self.per_fold + self._in_fold(fr, j)

    def total(self):
        return (self.rf - 1) * self.per_fold + self._in_fold(self.rf - 1, self.L)

    def cycle_of_word(self, q0, k, q_end):
        """First run cycle q in [q0, q_end) whose words bring the count since q0 to k, or None."""
        target = self.upto(q0) + k
        if self.upto(q_end) < target:
            return None
        fr = min((target - 1) // self.per_fold, self.rf - 1)   # every fold but the last writes per_fold
        f = self.f
        lo = f.ofmap_lo + (f.R - f.ru(fr) if f.ofmap_rows_flip else 0)
        x = _first_x_with_words(self.hi - lo + 1, self.cu, target - fr * self.per_fold)
        return max(q0, fr * self.L + lo + x - 1)


def _first_x_with_words(rows, cols, t):
    """Smallest x with rect_below(x, 0, rows, 0, cols) >= t (1 <= t <= rows*cols), in closed form.

    The count of cells (r, c) with r + c < x rises as x(x+1)/2 up to min(rows, cols), then by min(rows,
    cols) per step, then falls off symmetrically; each piece is inverted exactly with integer square roots."""
    from math import isqrt

    a, b = min(rows, cols), max(rows, cols)
    if a * (a + 1) // 2 >= t:                                # x(x+1)/2 >= t
        x = (isqrt(8 * t + 1) - 1) // 2
        while x * (x + 1) // 2 < t:
            x += 1
        return x
    base = a * (a + 1) // 2
    if base + (b - a) * a >= t:
        return a + -(-(t - base) // a)
    room = rows * cols - t                                   # y(y-1)/2 <= room, y = a + b - x, largest y
    y = (1 + isqrt(1 + 8 * room)) // 2
    while y * (y - 1) // 2 > room:
        y -= 1
    return a + b - y


def _next_write_event(w: _Writes, ofmap: WriteSram, q, q_end, base, stalls):
    """Run cycle of the next OFMAP event (a stall on a full SRAM, or a drain starting), or None."""
    t = base + q + stalls
    q_a = q
    stored = 0
    if t < ofmap.drain_end:
        q_de = min(q_end, ofmap.drain_end - stalls - base)   # first cycle no longer under the drain
        k = ofmap.free if ofmap.free > 1 else 1
        ev = w.cycle_of_word(q, k, q_de)
        if ev is not None:
            return ev
        q_a = q_de
        if q_a >= q_end:
            return None
        stored = w.upto(q_a) - w.upto(q)
    k = ofmap.free - stored - ofmap.active + 1
    return w.cycle_of_word(q_a, k if k > 1 else 1, q_end)


def compute_cycles(layer: Layer, config, version="3.0.0") -> LayerCycles:
    """SCALE-sim's COMPUTE_REPORT numbers for ``layer`` on ``config``, event by event (``version``: 3.0.0,
    or 2021 for the scale-sim-v2 commit ASTRA-sim 1.0 pins, see linesim.VERSIONS)."""
    check_version(version)
    if config.bandwidth_mode == "USER" and not (layer.full_windows and layer.distinct_ifmap):
        from astra_compute_systolic.addrsim import simulate_addresses

        return simulate_addresses(layer, config, version)   # SCALE-sim's hits are per address there
    f = fold_layer(layer, config.rows, config.cols, config.dataflow)
    ifmap_sram, filter_sram = read_srams(f, config, version)
    short = 1 if version == "2021" else 0
    ifmap = _Reads(f, f.ifmap, ifmap_sram, False)
    filt = _Reads(f, f.filter, filter_sram, f.dataflow == "os")
    ofmap = WriteSram(config.ofmap_sram_kb, config.ofmap_write_bw)
    rf, L = f.row_fold, f.fold_cycles
    run_len = rf * L
    stalls = 0
    base = 0
    out = None
    last_event_line = -1
    # the last fold of a run may differ (OS: fewer rows); identical folds before it repeat exactly
    uniform_end = (rf - 1) * L if f.ofmap_rows_flip else run_len
    for fc in range(f.col_fold):
        w = _Writes(f, fc)
        q = 0
        seen = {}                       # OFMAP-only stretch: relative state at each event -> (q, stalls)
        while q < run_len:
            fr, j = divmod(q, L)
            e = run_len
            reads_quiet = True
            for reads in (ifmap, filt):
                ev = reads.next_event_q(fc, q, rf, L)
                if ev is not None:
                    reads_quiet = False
                    if ev < e:
                        e = ev
            if reads_quiet:
                q, stalls = _skip_periods(seen, ofmap, q, stalls, base, L, uniform_end, w)
            ev = _next_write_event(w, ofmap, q, e, base, stalls)
            if ev is not None:
                e = min(e, ev)
            if e > q:                                         # quiet cycles: no stall, words just stored
                ofmap._store(w.upto(e) - w.upto(q))
                q = e
                if q >= run_len:
                    break
            fr, j = divmod(q, L)                              # the event cycle, as linesim steps it
            t0 = base + q + stalls
            s_if = s_f = 0        # no read this cycle: served at t0 + 1, no stall
            if ifmap_sram is not None:
                r = f.ifmap_line(fc, fr, j)
                if r is not None:
                    s_if = ifmap_sram.read(r[0], r[1], t0 + 1) - t0 - 1
                r = f.filter_line(fc, fr, j)
                if r is not None:
                    s_f = filter_sram.read(r[0], r[1], t0 + 1) - t0 - 1
            o = ofmap.write(w.upto(q + 1) - w.upto(q), t0)
            s = max(s_if, s_f, o - t0 - short)
            stalls += s
            last_event_line = base + q
            out = o
            q += 1
        base += run_len
    total_lines = base
    if last_event_line != total_lines - 1:
        out = total_lines - 1 + stalls                        # the last cycle was quiet
    stop = ofmap.finish(out)
    start_if, start_f = dram_starts(layer, f, config, ifmap_sram, filter_sram)
    overall = overall_util(layer, f, out)
    mapping, util = _fold_averages(f)
    return LayerCycles(int(stop - min(start_if, start_f)), out, stalls, overall, mapping, util,
                       f.folds * L, f.folds, layer.macs)


def _skip_periods(seen, ofmap: WriteSram, q, stalls, base, L, uniform_end, w):
    """Jump over whole repetitions of an OFMAP-only stretch (no read event left in the run).

    With reads quiet, what happens from run cycle q on depends only on the OFMAP SRAM's state relative to
    now and on q's place in its fold. When that relative state recurs k folds later, the k folds in between
    repeat exactly for as long as the folds stay identical, each adding the same cycles, stalls, DRAM lines
    and drained lines: so those repetitions are added at once."""
    t = base + q + stalls
    key = (q % L, ofmap.free, ofmap.fill, ofmap.rows - ofmap.drained, ofmap.drain_end - t,
           tuple(sorted((r - ofmap.drained, v) for r, v in ofmap.partial.items())))
    prev = seen.get(key)
    seen[key] = (q, stalls, ofmap.rows, ofmap.drained, ofmap.last_drain_end)
    if prev is None:
        return q, stalls
    q0, stalls0, rows0, drained0, last0 = prev
    dq, ds = q - q0, stalls - stalls0
    if dq <= 0 or q + dq > uniform_end:
        return q, stalls
    k = (uniform_end - q) // dq
    if k <= 0:
        return q, stalls
    drows, ddrained = ofmap.rows - rows0, ofmap.drained - drained0
    shift_t = k * (dq + ds)
    ofmap.rows += k * drows
    ofmap.drained += k * ddrained
    ofmap.partial = {r + k * drows: v for r, v in ofmap.partial.items()}
    ofmap.drain_end += shift_t
    if ofmap.last_drain_end is not None and last0 is not None:
        ofmap.last_drain_end += shift_t
    seen.clear()
    return q + k * dq, stalls + k * ds


def _fold_averages(f):
    """SCALE-sim's mean mapping efficiency and compute utilisation over folds (percent).

    SCALE-sim sums one float per fold in fold order; so does this, up to 2**18 folds, to keep its rounding.
    Beyond that the sum is taken per kind of fold (full, last row, last column, corner), which can differ
    from SCALE-sim in the last digits of the printed percentage, never in cycles."""
    n = f.folds
    kinds = {}
    for fc in (0, f.col_fold - 1):
        for fr in (0, f.row_fold - 1):
            kinds[(fc, fr)] = f.fold_stats(fc, fr)
    last_c, last_r = f.col_fold - 1, f.row_fold - 1
    if n <= 1 << 18:
        m_sum = u_sum = 0.0
        full, last_row = kinds[(0, 0)], kinds[(0, last_r)]
        for fc in range(f.col_fold):
            if fc == last_c:
                full, last_row = kinds[(last_c, 0)], kinds[(last_c, last_r)]
            for fr in range(last_r):
                m_sum += full[0]
                u_sum += full[1]
            m_sum += last_row[0]
            u_sum += last_row[1]
        return m_sum / n * 100, u_sum / n * 100
    m_sum = u_sum = 0.0
    for (fc, fr), (m, u) in kinds.items():
        count = (1 if fc == last_c else last_c) * (1 if fr == last_r else last_r)
        m_sum += m * count
        u_sum += u * count
    return m_sum / n * 100, u_sum / n * 100
