"""astra search's ranking with each layout's empirical 90 % interval (issue 36): a layout whose interval overlaps
the fastest's is marked, since the model cannot tell the two apart; a layout skipped by its lower bound is counted
when that bound lies inside the fastest's interval."""

from __future__ import annotations

import json

from astra_sim.cli import main

from astra_sweep.objective import Objective
from astra_sweep.search import _interval_columns, _overlapping_the_best, _skipped_inside


def _ranked(*intervals):
    """Ranked items as the search holds them (step s, MFU, memory, layout, row), steps in ns."""
    rows = [{"step_ns": (low + high) // 2, "step_interval_90_low_ns": low, "step_interval_90_high_ns": high}
            for low, high in intervals]
    return [(row["step_ns"] / 1e9, 0.5, 1e9, None, row) for row in rows]


def test_overlap_is_the_interval_reaching_below_the_fastests_upper_end():
    ranked = _ranked((100, 120), (119, 140), (120, 150), (121, 160))
    assert _overlapping_the_best(ranked, Objective("time")) == {0, 1, 2}  # 121 > 120: apart
    assert _overlapping_the_best(ranked, Objective("time", max_step_ns=10**9)) == {0, 1, 2}


def test_no_flag_without_intervals_or_when_ranking_by_energy():
    ranked = _ranked((100, 120), (110, 130))
    del ranked[1][4]["step_interval_90_low_ns"]
    assert _overlapping_the_best(ranked, Objective("time")) == set()
    assert _overlapping_the_best(_ranked((100, 120), (110, 130)),
                                 Objective("energy", gpus=8, floor_w_per_gpu=100.0)) == set()
    assert _interval_columns({"step_interval_90_low_ns": float("nan"), "step_interval_90_high_ns": 5}, None) == {}


def test_a_skipped_layout_counts_when_its_bound_times_the_low_factor_is_inside():
    # the fastest: step 1000 ns, interval 900-1200 (low factor 0.9): a bound b overlaps when 0.9 b <= 1200
    best = {"step_ns": 1000, "step_interval_90_low_ns": 900, "step_interval_90_high_ns": 1200}
    assert _skipped_inside(best, [1000, 1333, 1334, 5000]) == 2


def test_search_ranks_with_intervals_and_marks_the_overlaps(tmp_path, capsys):
    out = tmp_path / "search.json"
    assert main(["search", "--preset", "gpt3-13b", "--gpus", "16", "--platform", "hgx-h100", "--global-batch", "16",
                 "--tp", "4,8", "--pp", "1,2", "--vp", "1", "--mbs", "1", "--zero", "1", "--recompute", "full",
                 "--seq-len", "1024", "--jobs", "1", "--no-progress", "--exhaustive", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    ranked = json.loads(out.read_text())["ranked"]
    assert len(ranked) == 4
    best_low, best_high = ranked[0]["step_interval_90_ns"]
    assert best_low < ranked[0]["step_ns"] < best_high and ranked[0]["overlaps_fastest"] is False
    flagged = [r["overlaps_fastest"] for r in ranked[1:]]
    assert flagged == [r["step_interval_90_ns"][0] <= best_high for r in ranked[1:]]
    # every step's interval is the step scaled by the same two factors
    factors = {tuple(round(end / r["step_ns"], 5) for end in r["step_interval_90_ns"]) for r in ranked}
    assert len(factors) == 1
    assert "90 % ms" in text
    assert (f"{sum(flagged)} of the 3 other simulated layouts" in text) == (sum(flagged) > 0)
