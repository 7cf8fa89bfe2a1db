"""The cycle model's parts: closed-form geometry, the event-driven engine against the cycle-stepped one,
and its speed."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_compute_systolic import cycles as cycles_module
from astra_compute_systolic.buffers import WriteSram
from astra_compute_systolic.config import SystolicConfig
from astra_compute_systolic.cycles import _first_x_with_words, compute_cycles
from astra_compute_systolic.geometry import BlockStream, DiagStream, Layer, fold_layer, rect_below
from astra_compute_systolic.linesim import simulate_lines


def test_rect_below_counts_cells():
    for d in range(-2, 20):
        for r0, rows, c0, cols in [(0, 3, 0, 4), (2, 5, 1, 2), (0, 1, 0, 1), (4, 2, 3, 6)]:
            brute = sum(1 for r in range(r0, r0 + rows) for c in range(c0, c0 + cols) if r + c < d)
            assert rect_below(d, r0, rows, c0, cols) == brute


@pytest.mark.parametrize("groups,T,width,last", [(3, 4, 3, 2), (1, 5, 4, 4), (4, 2, 3, 1), (2, 7, 5, 3)])
def test_diagonal_positions_enumerate_the_prefetch_order(groups, T, width, last):
    """Rank of every non-empty cell in anti-diagonal order (column ascending), as SCALE-sim flattens."""
    s = DiagStream(T, width, groups, last, 0)
    rows = groups * T
    cells = [(r, c) for d in range(rows + width - 1) for c in range(width) for r in [d - c]
             if 0 <= r < rows and (r // T < groups - 1 or c < last)]
    assert len(cells) == s.words
    for rank, (r, c) in enumerate(cells):
        assert s.position(r + c, c) == rank


def test_block_lines_read_tile_rows_last_first():
    s = BlockStream(rows=5, width=4, groups=2, last_used=3, array_rows=3)
    assert s.line(0, 0, 0) == (8, 11)        # row 2 of tile 0: positions 8..11
    assert s.line(0, 0, 2) == (0, 3)
    assert s.line(1, 1, 0) is None            # row 5 does not exist
    assert s.line(1, 1, 1) == (20 + 4 * 3, 20 + 4 * 3 + 2)   # tile 1 (3 columns), row 4
    assert s.first_cycle() == 0


def test_fold_schedule_matches_scalesim_lengths():
    layer = Layer.gemm(20, 30, 40)
    for df, length in (("os", 40 + 8 + 8 - 2), ("ws", 2 * 8 + 20 + 8 - 2), ("is", 2 * 8 + 8 + 30 - 2)):
        f = fold_layer(layer, 8, 8, df)
        assert f.fold_cycles == length
    f = fold_layer(layer, 8, 8, "os")
    assert (f.row_fold, f.col_fold) == (3, 4)
    assert sum(f.ofmap_count(fc, fr, j) for fc in range(4) for fr in range(3) for j in range(f.fold_cycles)) == 600


def test_closed_form_ofmap_inverse():
    for rows in range(1, 10):
        for cols in range(1, 10):
            for t in range(1, rows * cols + 1):
                x = _first_x_with_words(rows, cols, t)
                assert rect_below(x, 0, rows, 0, cols) >= t > rect_below(x - 1, 0, rows, 0, cols)


def test_write_sram_drains_and_stalls():
    w = WriteSram(1, 8)                # 1024 words, drain when less than 512 free, 64 lines per drain
    assert w.write(512, 0) == 0 and w.drained == 0
    assert w.write(1, 0) == 0 and w.drained == 64 and w.drain_end == 63   # the 513th word starts a drain
    assert w.write(1023, 10) == 63                                        # fills up while draining: waits
    assert w.finish(100) >= 100


# ------------------------------------------------------------------------- event engine == cycle stepping
layers = st.one_of(
    st.builds(Layer.gemm, st.integers(1, 90), st.integers(1, 90), st.integers(1, 90)),
    st.builds(lambda h, w, f, s, ch, nf: Layer(f + s * h, f + s * w, f, f, ch, nf, s, s),
              st.integers(0, 6), st.integers(0, 6), st.integers(1, 3), st.integers(1, 3), st.integers(1, 4),
              st.integers(1, 12)),
)
configs = st.builds(
    lambda r, c, i, f, o, df, mode, bw, ibw, fbw: SystolicConfig(r, c, i, f, o, df, mode, (bw,), ibw, fbw),
    st.sampled_from([1, 2, 3, 4, 8, 16]), st.sampled_from([1, 2, 4, 5, 8, 16]), st.sampled_from([1, 2, 3, 64]),
    st.sampled_from([1, 2, 4, 64]), st.sampled_from([1, 2, 64]), st.sampled_from(["os", "ws", "is"]),
    st.sampled_from(["USER", "CALC"]), st.sampled_from([1, 2, 3, 10, 50]), st.sampled_from([1, 2, 5, 10, 100]),
    st.sampled_from([1, 3, 10, 100]))


@settings(max_examples=60, deadline=None)
@given(layer=layers, config=configs, version=st.sampled_from(["3.0.0", "2021"]))
def test_property_event_engine_equals_cycle_stepping(layer, config, version):
    assert compute_cycles(layer, config, version) == simulate_lines(layer, config, version)


SKIPPING = [((300, 27, 75), (2, 3, "is", "CALC", 3)), ((102, 8, 69), (1, 2, "is", "CALC", 2)),
            ((48, 17, 107), (1, 1, "ws", "USER", 1)), ((324, 10, 23), (4, 4, "os", "USER", 8))]


@pytest.mark.parametrize("mnk,arch", SKIPPING)
def test_repeated_ofmap_stretches_are_skipped_exactly(monkeypatch, mnk, arch):
    skips = []
    original = cycles_module._skip_periods

    def counting(*args):
        result = original(*args)
        skips.append(result[0] != args[2])
        return result

    monkeypatch.setattr(cycles_module, "_skip_periods", counting)
    r, c, df, mode, bw = arch
    config = SystolicConfig(r, c, 64, 64, 1, df, mode, (bw,), 64, 64)
    layer = Layer.gemm(*mnk)
    for version in ("3.0.0", "2021"):
        assert compute_cycles(layer, config, version) == simulate_lines(layer, config, version)
    assert any(skips)


def test_version_differences_are_the_two_known_ones():
    config = SystolicConfig(8, 8, 1, 1, 1, "os", "USER", (10,), 10, 10)
    layer = Layer.gemm(64, 48, 32)
    new, old = compute_cycles(layer, config, "3.0.0"), compute_cycles(layer, config, "2021")
    assert new.stall_cycles > old.stall_cycles > 0      # 3.0.0 counts read stalls twice
    calc = config.with_(bandwidth_mode="CALC", ofmap_sram_kb=64)
    assert compute_cycles(layer, calc, "3.0.0").total_cycles == compute_cycles(layer, calc, "2021").total_cycles
    with pytest.raises(ValueError, match="unknown SCALE-sim version"):
        compute_cycles(layer, config, "2.9")


def test_a_16k_cubed_gemm_costs_a_fraction_of_a_second():
    layer = Layer.gemm(16384, 16384, 16384)
    google = SystolicConfig(256, 256, 6144, 6144, 2048, "ws", "CALC")
    start = time.perf_counter()
    r = compute_cycles(layer, google)
    assert time.perf_counter() - start < 0.5
    # compute cycles: 64 x 64 folds of 2 x 256 + 16384 + 256 - 2 cycles, no stall in CALC mode
    assert r.compute_cycles == 64 * 64 * (2 * 256 + 16384 + 256 - 2) and r.stall_cycles == 0
    assert r.total_cycles == r.compute_cycles - 1
    user = SystolicConfig(128, 1024, 32768, 32768, 8192, "ws", "USER", (380,), 380, 380)
    start = time.perf_counter()
    compute_cycles(layer, user)
    assert time.perf_counter() - start < 3.0     # USER mode: one step per SRAM slide (see docs/systolic.md)
