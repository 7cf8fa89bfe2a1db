"""The cycle model, one array cycle at a time: the plain statement of SCALE-sim's schedule.

This is the readable form of what ``cycles.py`` computes fold-run by fold-run; the tests hold the two equal
on random layers and hold this one equal to SCALE-sim's own reports. It costs one Python step per array
cycle, so it is for small layers only.
"""

from __future__ import annotations

from astra_compute_systolic.buffers import ReadSram, WriteSram
from astra_compute_systolic.geometry import Layer, fold_layer
from astra_compute_systolic.result import LayerCycles


def read_srams(folds, config):
    """The IFMAP and filter SRAMs of a USER-mode config (None in CALC mode: reads never stall there)."""
    if config.bandwidth_mode != "USER":
        return None, None
    return (ReadSram(config.ifmap_sram_kb, config.ifmap_read_bw, folds.ifmap.words, folds.ifmap.cells),
            ReadSram(config.filter_sram_kb, config.filter_read_bw, folds.filter.words, folds.filter.cells))


def calc_dram_start(words_touched: int, first_cycle: int, size_kib: int) -> int:
    """First DRAM read cycle of an IFMAP / filter SRAM in CALC mode (SCALE-sim's ``ReadBufferEstimateBw``):
    the initial fill is placed just before the first request, sized in whole sets of ``floor(words/100)``."""
    per_set = size_kib * 1024 // 100
    half = 50 * per_set
    if words_touched >= half:
        return first_cycle - (-(-half // 10))
    sets = -(-words_touched // per_set)
    return -(-(-(sets * per_set) // 10))


def dram_starts(layer, folds, config, ifmap_sram, filter_sram):
    if config.bandwidth_mode == "USER":
        return ifmap_sram.dram_start, filter_sram.dram_start
    ifmap_words = folds.ifmap.words if layer.distinct_ifmap else layer.ifmap_words()
    return (calc_dram_start(ifmap_words, folds.ifmap.first_cycle(), config.ifmap_sram_kb),
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
    overall = layer.macs * 100 / (total_cycles * folds.R * folds.C)
    return overall, map_sum / n * 100, util_sum / n * 100


def simulate_lines(layer: Layer, config) -> LayerCycles:
    """SCALE-sim 3.0's COMPUTE_REPORT numbers for ``layer``, stepping every array cycle."""
    if config.bandwidth_mode == "USER" and not (layer.full_windows and layer.distinct_ifmap):
        from astra_compute_systolic.addrsim import simulate_addresses

        return simulate_addresses(layer, config)
    f = fold_layer(layer, config.rows, config.cols, config.dataflow)
    ifmap, filt = read_srams(f, config)
    ofmap = WriteSram(config.ofmap_sram_kb, config.ofmap_write_bw)
    stalls = 0
    i = 0
    out = 0
    for fc in range(f.col_fold):
        for fr in range(f.row_fold):
            for j in range(f.fold_cycles):
                t0 = i + stalls
                s = 0
                if ifmap is not None:
                    r = f.ifmap_line(fc, fr, j)
                    if r is not None:
                        s = ifmap.read(r[0], r[1], t0 + 1) - t0 - 1
                    r = f.filter_line(fc, fr, j)
                    if r is not None:
                        s = max(s, filt.read(r[0], r[1], t0 + 1) - t0 - 1)
                out = ofmap.write(f.ofmap_count(fc, fr, j), t0)
                s = max(s, out - t0)
                stalls += s
                i += 1
    stop = ofmap.finish(out)
    start_if, start_f = dram_starts(layer, f, config, ifmap, filt)
    total = out
    overall, mapping, util = utilisation(layer, f, total)
    return LayerCycles(int(stop - min(start_if, start_f)), total, stalls, overall, mapping, util,
                       f.folds * f.fold_cycles, f.folds, layer.macs)
