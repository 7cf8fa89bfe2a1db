"""Where every operand word is, and when the array asks for it: SCALE-sim's fold schedule in closed form.

SCALE-sim builds, per layer, three *demand matrices* (one row per cycle, one column per array port:
IFMAP reads, filter reads, OFMAP writes) and two *prefetch orders* (the order the IFMAP and filter SRAMs
are filled from DRAM). It materialises them; this module describes them with a few integers per fold, so
that the cycle model never builds a matrix:

* a layer is mapped onto the array as ``Sr x Sc`` spatial and ``T`` temporal (SCALE-sim's
  ``calc_spatio_temporal_params``) and cut into ``row_fold x col_fold`` folds, column folds outermost;
* every fold lasts the same number of cycles (``fold_cycles``);
* a read stream is either *diagonal* (the operand is streamed in skewed: cycle ``j`` of a fold reads one
  anti-diagonal of a ``T x W`` tile, and the SRAM is filled in anti-diagonal order) or *block* (a whole
  tile is loaded row by row, last row first, into a stationary array);
* every demanded word has a *position*: its rank among the non-empty cells of the prefetch order. SCALE-sim's
  SRAM is a ring of sets of ``ceil(size / 100)`` consecutive positions, so a position says which set holds
  the word.

Positions need the operand's words to be distinct, which holds for GEMMs and for convolutions whose windows
do not overlap (``Layer.distinct_ifmap``).
"""

from __future__ import annotations

from dataclasses import dataclass


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _tri(n: int, cap: int) -> int:
    """sum(min(x, cap) for x in 1..n) (0 for n < 1)."""
    if n <= 0:
        return 0
    if n <= cap:
        return n * (n + 1) // 2
    return cap * (cap + 1) // 2 + (n - cap) * cap


def rect_below(d: int, r0: int, rows: int, c0: int, cols: int) -> int:
    """Cells (r, c) of the rectangle [r0, r0+rows) x [c0, c0+cols) with r + c < d."""
    if rows <= 0 or cols <= 0:
        return 0
    hi = d - r0 - c0                # c = c0 contributes clamp(hi, 0, rows)
    lo = hi - cols + 1              # c = c0 + cols - 1
    return _tri(hi, rows) - _tri(lo - 1, rows)


@dataclass(frozen=True)
class Layer:
    """A SCALE-sim topology row: convolution (no padding, batch 1) or a GEMM mapped as one."""

    ifmap_h: int
    ifmap_w: int
    filter_h: int
    filter_w: int
    channels: int
    num_filters: int
    stride_h: int = 1
    stride_w: int = 1
    name: str = "layer"

    def __post_init__(self):
        for key in ("ifmap_h", "ifmap_w", "filter_h", "filter_w", "channels", "num_filters", "stride_h",
                    "stride_w"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"layer {self.name!r}: {key} must be a positive integer, got {value!r}")
        if self.filter_h > self.ifmap_h or self.filter_w > self.ifmap_w:
            raise ValueError(f"layer {self.name!r}: filter {self.filter_h}x{self.filter_w} is larger than the "
                             f"ifmap {self.ifmap_h}x{self.ifmap_w}")

    @classmethod
    def gemm(cls, m: int, n: int, k: int, name="gemm") -> "Layer":
        """``[M, K] x [K, N]`` as SCALE-sim maps it (``-i gemm``, and ASTRA-sim 1.0's generator): an
        ``M x K`` ifmap, one ``1 x K`` filter per output column."""
        return cls(m, k, 1, k, 1, n, 1, 1, name)

    @property
    def ofmap_h(self) -> int:
        return _ceil_div(self.ifmap_h - self.filter_h + self.stride_h, self.stride_h)

    @property
    def ofmap_w(self) -> int:
        return _ceil_div(self.ifmap_w - self.filter_w + self.stride_w, self.stride_w)

    @property
    def ofmap_px(self) -> int:
        """Output pixels per filter (SCALE-sim's ``ofmap_px_per_filt``)."""
        return self.ofmap_h * self.ofmap_w

    @property
    def window(self) -> int:
        return self.filter_h * self.filter_w * self.channels

    @property
    def macs(self) -> int:
        return self.ofmap_px * self.window * self.num_filters

    @property
    def full_windows(self) -> bool:
        """Every window lies inside the ifmap (else SCALE-sim leaves holes in the IFMAP operand)."""
        return (self.ifmap_h - self.filter_h) % self.stride_h == 0 and (self.ifmap_w - self.filter_w) % self.stride_w == 0

    @property
    def distinct_ifmap(self) -> bool:
        """No IFMAP word is read by two windows (GEMMs; convolutions with stride >= filter)."""
        return ((self.ofmap_h == 1 or self.stride_h >= self.filter_h)
                and (self.ofmap_w == 1 or self.stride_w >= self.filter_w))

    def ifmap_words(self) -> int:
        """Distinct IFMAP words the layer reads (rows x columns touched x channels)."""
        rows = _touched(self.ifmap_h, self.filter_h, self.stride_h, self.ofmap_h)
        cols = _touched(self.ifmap_w, self.filter_w, self.stride_w, self.ofmap_w)
        return rows * cols * self.channels

    def topology_row(self) -> str:
        """The layer as a SCALE-sim topology CSV row (trailing comma included)."""
        return (f"{self.name},{self.ifmap_h},{self.ifmap_w},{self.filter_h},{self.filter_w},{self.channels},"
                f"{self.num_filters},{self.stride_h},")


def _touched(size, filt, stride, out):
    """Indices 0..size-1 covered by ``out`` windows of ``filt`` starting every ``stride``."""
    if stride >= filt:
        covered = out * filt
    else:
        covered = (out - 1) * stride + filt
    return min(size, covered)


# ---------------------------------------------------------------------------------------------- streams
@dataclass(frozen=True)
class DiagStream:
    """An operand streamed in skewed: the prefetch order is the anti-diagonals of a ``(groups*T) x width``
    matrix (group g = rows [g*T, (g+1)*T)); group g uses ``used(g)`` columns (all but the last use
    ``width``). Cycle ``j`` of a fold on group ``g`` reads columns ``c`` with ``t = j - shift - c`` in
    ``[0, T)`` of anti-diagonal ``g*T + j - shift``."""

    T: int
    width: int
    groups: int
    last_used: int
    shift: int

    def used(self, g: int) -> int:
        return self.last_used if g == self.groups - 1 else self.width

    @property
    def cells(self) -> int:
        """Prefetch matrix size, empty cells included (what SCALE-sim's fetch matrix holds)."""
        return self.groups * self.T * self.width

    @property
    def words(self) -> int:
        return (self.groups - 1) * self.T * self.width + self.T * self.last_used

    def before_diag(self, d: int) -> int:
        """Words on anti-diagonals < d."""
        n = rect_below(d, 0, self.groups * self.T, 0, self.width)
        if self.last_used < self.width:
            n -= rect_below(d, (self.groups - 1) * self.T, self.T, self.last_used, self.width - self.last_used)
        return n

    def position(self, d: int, c: int) -> int:
        """Rank of the word in column c of anti-diagonal d (increasing column within a diagonal)."""
        rows = self.groups * self.T
        first = max(0, d - rows + 1)
        n = self.before_diag(d) + (c - first)
        if self.last_used < self.width:  # empty cells of the last group before c on this diagonal
            lo = max(first, self.last_used)
            hi = min(c - 1, d - (self.groups - 1) * self.T)
            if hi >= lo:
                n -= hi - lo + 1
        return n

    def line(self, g: int, j: int):
        """``(lo, hi)`` positions read at cycle j of a fold on group g (contiguous), or None."""
        t0 = j - self.shift
        if t0 < 0:
            return None
        a = max(0, t0 - self.T + 1)
        b = min(self.used(g) - 1, t0)
        if a > b:
            return None
        lo = self.position(g * self.T + t0, a)
        return lo, lo + (b - a)

    def first_cycle(self) -> int:
        return self.shift


@dataclass(frozen=True)
class BlockStream:
    """An operand loaded into a stationary array: prefetch order is row-major over ``groups`` tiles of
    ``rows x width`` (tile g uses ``used(g)`` columns). Fold (g, fr), cycle j < R reads row
    ``fr*R + R-1-j`` of tile g (rows arrive last first), if that row exists."""

    rows: int
    width: int
    groups: int
    last_used: int
    array_rows: int

    def used(self, g: int) -> int:
        return self.last_used if g == self.groups - 1 else self.width

    @property
    def cells(self) -> int:
        return self.groups * self.rows * self.width

    @property
    def words(self) -> int:
        return (self.groups - 1) * self.rows * self.width + self.rows * self.last_used

    def line(self, g: int, fr: int, j: int):
        R = self.array_rows
        if j >= R:
            return None
        w = fr * R + R - 1 - j
        if w >= self.rows:
            return None
        u = self.used(g)
        lo = g * self.rows * self.width + w * u
        return lo, lo + u - 1

    def first_cycle(self) -> int:
        return self.array_rows - min(self.array_rows, self.rows)


@dataclass(frozen=True)
class Folds:
    """A layer on an ``R x C`` array with one dataflow: folds, their length, and the three streams."""

    dataflow: str
    R: int
    C: int
    Sr: int
    Sc: int
    T: int
    row_fold: int
    col_fold: int
    fold_cycles: int
    ifmap: object
    filter: object
    ofmap_lo: int        # OFMAP: cycle j of a fold writes columns c < cu with j - c in [ofmap_lo(ru), ofmap_hi]
    ofmap_hi: int
    ofmap_rows_flip: bool  # OS: only the last ru of R rows are real (the fold's rows are written bottom up)

    @property
    def folds(self) -> int:
        return self.row_fold * self.col_fold

    def ru(self, fr: int) -> int:
        return min(self.R, self.Sr - fr * self.R)

    def cu(self, fc: int) -> int:
        return min(self.C, self.Sc - fc * self.C)

    def ifmap_line(self, fc, fr, j):
        return _read_line(self.ifmap, self.dataflow, "ifmap", fc, fr, j)

    def filter_line(self, fc, fr, j):
        return _read_line(self.filter, self.dataflow, "filter", fc, fr, j)

    def ofmap_count(self, fc: int, fr: int, j: int) -> int:
        lo = self.ofmap_lo + (self.R - self.ru(fr) if self.ofmap_rows_flip else 0)
        a = max(0, j - self.ofmap_hi)
        b = min(self.cu(fc) - 1, j - lo)
        return b - a + 1 if b >= a else 0

    def fold_stats(self, fc: int, fr: int):
        """(mapping efficiency, compute utilisation) of one fold, as SCALE-sim reports them."""
        mac_used = self.ru(fr) * self.cu(fc)
        if self.dataflow == "os":
            cycles = self.T + self.R + self.C - 2
        else:
            cycles = 2 * self.R + 2 * self.C + self.T - 3
        return mac_used / (self.R * self.C), mac_used * self.T / (self.R * self.C * cycles)


def _read_line(stream, dataflow, which, fc, fr, j):
    if isinstance(stream, BlockStream):
        return stream.line(fc, fr, j)
    g = fc if (dataflow == "os" and which == "filter") else fr
    return stream.line(g, j)


def fold_layer(layer: Layer, rows: int, cols: int, dataflow: str) -> Folds:
    """SCALE-sim's mapping of ``layer`` on a ``rows x cols`` array with ``dataflow`` (os, ws, is)."""
    px, win, nf = layer.ofmap_px, layer.window, layer.num_filters
    R, C = rows, cols
    if dataflow == "os":
        Sr, Sc, T = px, nf, win
    elif dataflow == "ws":
        Sr, Sc, T = win, nf, px
    elif dataflow == "is":
        Sr, Sc, T = win, px, nf
    else:
        raise ValueError(f"unknown dataflow {dataflow!r}")
    rf, cf = _ceil_div(Sr, R), _ceil_div(Sc, C)
    last_r, last_c = Sr - (rf - 1) * R, Sc - (cf - 1) * C
    if dataflow == "os":
        ifmap = DiagStream(T, R, rf, last_r, 0)
        filt = DiagStream(T, C, cf, last_c, 0)
        length = T + R + C - 2
        lo, hi, flip = T - 1, T + R - 2, True
    elif dataflow == "ws":
        ifmap = DiagStream(T, R, rf, last_r, R)
        filt = BlockStream(win, C, cf, last_c, R)
        length = 2 * R + T + C - 2
        lo, hi, flip = 2 * R - 1, 2 * R - 2 + T, False
    else:
        ifmap = BlockStream(win, C, cf, last_c, R)
        filt = DiagStream(T, R, rf, last_r, R)
        length = 2 * R + T + C - 2
        lo, hi, flip = 2 * R - 1, 2 * R - 2 + T, False
    return Folds(dataflow, R, C, Sr, Sc, T, rf, cf, length, ifmap, filt, lo, hi, flip)
