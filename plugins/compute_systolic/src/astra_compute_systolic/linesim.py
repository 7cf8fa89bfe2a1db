"""The cycle model, one array cycle at a time: the plain statement of SCALE-sim's schedule.

This is the readable form of what ``cycles.py`` computes fold-run by fold-run; the tests hold the two equal
on random layers and hold this one equal to SCALE-sim's own reports. It costs one Python step per array
cycle, so it is for small layers only.
"""

from __future__ import annotations

import math

from astra_compute_systolic.buffers import ReadSram, WriteSram
from astra_compute_systolic.geometry import Layer, fold_layer
from astra_compute_systolic.result import LayerCycles


#: SCALE-sim versions whose arithmetic is modelled: the PyPI release, and the scale-sim-v2 commit
#: (c28fd1b, May 2021) that ASTRA-sim 1.0 pins as its submodule. They differ in two lines: 3.0.0 counts a
#: read stall twice and an OFMAP stall in full; the 2021 code waits for a prefetch exactly and counts an
#: OFMAP stall one cycle short (``ofmap_cycle_out - cycle - 1``).
VERSIONS = ("3.0.0", "2021")


def check_version(version):
    if version not in VERSIONS:
        raise ValueError(f"unknown SCALE-sim version {version!r}; modelled: {', '.join(VERSIONS)}")
    return version


def read_srams(folds, config, version="3.0.0"):
    """The IFMAP and filter SRAMs of a USER-mode config (None in CALC mode: reads never stall there)."""
    if config.bandwidth_mode != "USER":
        return None, None
    double = version == "3.0.0"
    return (ReadSram(config.ifmap_sram_kb, config.ifmap_read_bw, folds.ifmap.words, folds.ifmap.cells, double),
            ReadSram(config.filter_sram_kb, config.filter_read_bw, folds.filter.words, folds.filter.cells, double))


def _ceil_div(a, b):
    return -(-a // b)


def calc_dram_start(words_touched: int, first_cycle: int, size_kib: int) -> int:
    """First DRAM read cycle of an IFMAP / filter SRAM in CALC mode (SCALE-sim's ``ReadBufferEstimateBw``):
    the initial fill is placed just before the first request, sized in whole sets of ``floor(words/100)``."""
    per_set = size_kib * 1024 // 100
    half = 50 * per_set
    if words_touched >= half:
        return first_cycle - _ceil_div(half, 10)
    sets = _ceil_div(words_touched, per_set)
    return -_ceil_div(sets * per_set, 10)


def dram_starts(layer, folds, config, ifmap_sram, filter_sram):
    if config.bandwidth_mode == "USER":
        return ifmap_sram.dram_start, filter_sram.dram_start
    return (calc_dram_start(layer.ifmap_words(), folds.ifmap.first_cycle(), config.ifmap_sram_kb),
            calc_dram_start(folds.filter.words, folds.filter.first_cycle(), config.filter_sram_kb))


def utilisation(layer: Layer, folds, total_cycles: int):
    """SCALE-sim's three percentages; per-fold averages are summed in fold order, as it does."""
    map_sum = util_sum = 0.0
    for fc in range(folds.col_fold):
        for fr in range(folds.row_fold):
            m, u = folds.fold_stats(fc, fr)
            map_sum += m
            util_sum += u
    n = folds.folds
    return overall_util(layer, folds, total_cycles), map_sum / n * 100, util_sum / n * 100


def overall_util(layer, folds, total_cycles) -> float:
    """SCALE-sim's "Overall Util %"; NaN for a layer of 0 total cycles (a 1x1x1 GEMM on a 1x1 array), on
    which SCALE-sim itself stops with a ZeroDivisionError."""
    if total_cycles == 0:
        return math.nan
    return layer.macs * 100 / (total_cycles * folds.R * folds.C)


def simulate_lines(layer: Layer, config, version="3.0.0") -> LayerCycles:
    """SCALE-sim's COMPUTE_REPORT numbers for ``layer``, stepping every array cycle."""
    check_version(version)
    if config.bandwidth_mode == "USER" and not (layer.full_windows and layer.distinct_ifmap):
        from astra_compute_systolic.addrsim import simulate_addresses

        return simulate_addresses(layer, config, version)
    f = fold_layer(layer, config.rows, config.cols, config.dataflow)
    ifmap, filt = read_srams(f, config, version)
    short = 1 if version == "2021" else 0
    ofmap = WriteSram(config.ofmap_sram_kb, config.ofmap_write_bw)
    stalls = 0
    i = 0
    out = 0
    for fc in range(f.col_fold):
        for fr in range(f.row_fold):
            for j in range(f.fold_cycles):
                t0 = i + stalls
                s_if = s_f = 0        # no read this cycle: served at t0 + 1, no stall
                if ifmap is not None:
                    r = f.ifmap_line(fc, fr, j)
                    if r is not None:
                        s_if = ifmap.read(r[0], r[1], t0 + 1) - t0 - 1
                    r = f.filter_line(fc, fr, j)
                    if r is not None:
                        s_f = filt.read(r[0], r[1], t0 + 1) - t0 - 1
                out = ofmap.write(f.ofmap_count(fc, fr, j), t0)
                s = max(s_if, s_f, out - t0 - short)
                stalls += s
                i += 1
    stop = ofmap.finish(out)
    start_if, start_f = dram_starts(layer, f, config, ifmap, filt)
    total = out
    overall, mapping, util = utilisation(layer, f, total)
    return LayerCycles(int(stop - min(start_if, start_f)), total, stalls, overall, mapping, util,
                       f.folds * f.fold_cycles, f.folds, layer.macs)
