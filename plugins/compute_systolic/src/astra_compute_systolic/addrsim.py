"""The cycle model for convolutions whose windows overlap or are clipped, in USER bandwidth mode.

There the IFMAP operand repeats words (a pixel belongs to several windows) and may have holes (windows
that run past the ifmap edge read nothing, SCALE-sim's ``-1``). SCALE-sim's SRAM hit test is by
*address*: a word is resident if any of its copies lies in the active window. So this path builds the
IFMAP prefetch order once (numpy, one entry per operand cell), keeps for every repeated word the sets its
copies fall in, and steps the array cycle by cycle like ``linesim``; filter and OFMAP are positional as
everywhere else. Cost: one Python step per array cycle, which convolution layers afford.
"""

from __future__ import annotations

import numpy as np

from astra_compute_systolic.buffers import ReadSram, WriteSram
from astra_compute_systolic.geometry import BlockStream, fold_layer
from astra_compute_systolic.linesim import dram_starts, utilisation
from astra_compute_systolic.result import LayerCycles


def ifmap_operand(layer) -> np.ndarray:
    """``ofmap_px x window`` IFMAP word ids (SCALE-sim's operand matrix; -1 where a window is clipped)."""
    ew = layer.ofmap_w
    px = np.arange(layer.ofmap_px)[:, None]
    win = np.arange(layer.window)[None, :]
    orow, ocol = px // ew, px % ew
    crow, rest = win // (layer.filter_w * layer.channels), win % (layer.filter_w * layer.channels)
    ccol, cch = rest // layer.channels, rest % layer.channels
    r = orow * layer.stride_h + crow
    c = ocol * layer.stride_w + ccol
    ids = (r * layer.ifmap_w + c) * layer.channels + cch
    return np.where((r < layer.ifmap_h) & (c < layer.ifmap_w), ids, -1)


class _IfmapOrder:
    """The IFMAP prefetch order: word id per cell, cell order index per (row, col), ranks of non-empty cells."""

    def __init__(self, layer, f):
        ops = ifmap_operand(layer)
        s = f.ifmap
        if isinstance(s, BlockStream):     # IS: tiles of C pixels, row-major over (window, pixel)
            G, rows, W = s.groups, s.rows, s.width
            g = np.arange(G)[:, None, None]
            w = np.arange(rows)[None, :, None]
            c = np.arange(W)[None, None, :]
            pix = g * W + c
            valid = pix < ops.shape[0]
            vals = np.where(valid, ops[np.minimum(pix, ops.shape[0] - 1), w], -1).reshape(-1)
            self.order_index = np.arange(vals.size).reshape(G * rows, W)
        else:                              # OS / WS: anti-diagonals of the (groups*T) x width matrix
            G, T, W = s.groups, s.T, s.width
            rows = np.arange(G * T)[:, None]
            cols = np.arange(W)[None, :]
            grp, t = rows // T, rows % T
            lane = grp * W + cols
            if f.dataflow == "os":          # lane = ofmap pixel, t = window element
                valid = lane < ops.shape[0]
                cell = ops[np.minimum(lane, ops.shape[0] - 1), np.minimum(t, ops.shape[1] - 1)]
            else:                           # ws: t = ofmap pixel, lane = window element
                valid = lane < ops.shape[1]
                cell = ops[np.minimum(t, ops.shape[0] - 1), np.minimum(lane, ops.shape[1] - 1)]
            cell = np.where(valid, cell, -1)
            rr, cc = np.broadcast_arrays(rows, cols)
            order = np.lexsort((cc.reshape(-1), (rr + cc).reshape(-1)))
            vals = cell.reshape(-1)[order]
            index = np.empty(order.size, dtype=np.int64)
            index[order] = np.arange(order.size)
            self.order_index = index.reshape(G * T, W)
        nonempty = vals >= 0
        self.rank_before = np.concatenate(([0], np.cumsum(nonempty)))   # non-empty cells before an index
        self.words = vals[nonempty]
        self.cells = vals.size

    def repeated_lines(self, eps):
        """word id -> sets holding a copy, for words whose copies span more than one set."""
        lines = np.arange(self.words.size) // eps
        pairs = np.unique(np.stack([self.words, lines]), axis=1)
        ids, counts = np.unique(pairs[0], return_counts=True)
        multi = {}
        start = 0
        for word, n in zip(ids.tolist(), counts.tolist()):
            if n > 1:
                multi[word] = pairs[1, start:start + n].tolist()
            start += n
        return multi

    def line_range(self, f, fc, fr, j):
        """Non-empty ranks (lo, hi) read at fold cycle j, or None."""
        s = f.ifmap
        R = f.R
        if isinstance(s, BlockStream):
            if j >= R:
                return None
            w = fr * R + R - 1 - j
            if w >= s.rows:
                return None
            row = fc * s.rows + w
            a, b = self.order_index[row, 0], self.order_index[row, s.used(fc) - 1]
        else:
            t0 = j - s.shift
            if t0 < 0:
                return None
            lo_c = max(0, t0 - s.T + 1)
            hi_c = min(s.used(fr) - 1, t0)
            if lo_c > hi_c:
                return None
            base = fr * s.T + t0
            a, b = self.order_index[base - lo_c, lo_c], self.order_index[base - hi_c, hi_c]
        lo, hi = int(self.rank_before[a]), int(self.rank_before[b + 1]) - 1
        return (lo, hi) if hi >= lo else None


def _read_by_address(sram: ReadSram, order: _IfmapOrder, multi, lo, hi, tt):
    eps = sram.eps
    if sram.read_held(lo, hi):
        return tt
    words = order.words
    for p in range(lo, hi + 1):
        while True:
            if sram.holds(p // eps):
                break
            copies = multi.get(int(words[p]))
            if copies is not None and any(sram.holds(h) for h in copies):
                break
            tt = sram.slide(tt)
    return tt


def simulate_addresses(layer, config, version="3.0.0") -> LayerCycles:
    """SCALE-sim 3.0's COMPUTE_REPORT numbers for a convolution with repeated or missing IFMAP words."""
    f = fold_layer(layer, config.rows, config.cols, config.dataflow)
    order = _IfmapOrder(layer, f)
    double = version == "3.0.0"
    short = 0 if double else 1
    ifmap = ReadSram(config.ifmap_sram_kb, config.ifmap_read_bw, order.words.size, order.cells, double)
    filt = ReadSram(config.filter_sram_kb, config.filter_read_bw, f.filter.words, f.filter.cells, double)
    multi = order.repeated_lines(ifmap.eps)
    ofmap = WriteSram(config.ofmap_sram_kb, config.ofmap_write_bw)
    stalls = i = out = 0
    for fc in range(f.col_fold):
        for fr in range(f.row_fold):
            for j in range(f.fold_cycles):
                t0 = i + stalls
                s_if = s_f = 0        # no read this cycle: served at t0 + 1, no stall
                r = order.line_range(f, fc, fr, j)
                if r is not None:
                    s_if = _read_by_address(ifmap, order, multi, r[0], r[1], t0 + 1) - t0 - 1
                r = f.filter_line(fc, fr, j)
                if r is not None:
                    s_f = filt.read(r[0], r[1], t0 + 1) - t0 - 1
                out = ofmap.write(f.ofmap_count(fc, fr, j), t0)
                s = max(s_if, s_f, out - t0 - short)
                stalls += s
                i += 1
    stop = ofmap.finish(out)
    start_if, start_f = ifmap.dram_start, filt.dram_start
    overall, mapping, util = utilisation(layer, f, out)
    return LayerCycles(int(stop - min(start_if, start_f)), out, stalls, overall, mapping, util,
                       f.folds * f.fold_cycles, f.folds, layer.macs)
