"""Energy accounting: parts at their class's power, integer millijoules, exact additivity."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from astra_energy.account import millijoules, part_class, rank_energy, rank_peak_mw, step_energy

MW = {"gemm": 700_000, "gemm_fp32": 525_000, "attention": 630_000, "memory": 301_000, "comm": 210_000,
      "idle": 80_000}


def test_parts_map_to_classes():
    assert part_class("compute:gemm") == "gemm"
    assert part_class("compute:gemm", "gemm_fp32") == "gemm_fp32"
    assert part_class("compute:attention") == "attention"
    assert part_class("compute:elementwise") == part_class("compute:other") == part_class("remote_memory") == "memory"
    assert part_class("exposed:dp") == part_class("exposed_in_switch:tp") == "comm"
    assert part_class("recv_wait:pp") == part_class("cpu") == part_class("idle") == "idle"
    assert part_class("something_new") == "idle"


def test_millijoules_round_to_nearest():
    assert millijoules(700_000, 1_000_000) == 700  # 700 W for 1 ms
    assert millijoules(1, 499_999_999) == 0
    assert millijoules(1, 500_000_000) == 1


def test_rank_energy_by_hand():
    parts = {"compute:gemm": 2_000_000, "exposed:dp": 1_000_000, "idle": 500_000}
    energy = rank_energy(parts, step_ns=4_000_000, finish_ns=3_500_000, class_mw=MW)
    # 700 W x 2 ms, 210 W x 1 ms, 80 W x 0.5 ms, and 80 W x 0.5 ms waiting for the slowest rank
    assert energy == {"compute:gemm": 1400, "exposed:dp": 210, "idle": 40, "wait_for_step_end": 40}
    assert rank_peak_mw(parts, MW) == 700_000
    assert rank_peak_mw({"idle": 5}, MW) == 80_000


def test_step_energy_adds_up_and_shares_equal_ranks():
    a = {"compute:gemm": 1_000_000, "idle": 0}
    b = {"compute:elementwise": 1_000_000}
    out = step_energy([(a, 1_000_000), (a, 1_000_000), (b, 1_000_000)], 2_000_000, MW)
    assert out["by_part_mj"] == {"compute:gemm": 1400, "compute:elementwise": 301, "wait_for_step_end": 240}
    assert out["gpu_energy_mj"] == 1941 == sum(out["by_part_mj"].values())
    assert out["peak_mw_sum"] == 2 * 700_000 + 301_000 and out["peak_mw_gpu"] == 700_000
    assert (out["max_rank_energy_mj"], out["min_rank_energy_mj"]) == (780, 381)


PART_NAMES = st.sampled_from(["compute:gemm", "compute:attention", "compute:elementwise", "compute:other",
                              "exposed:dp", "exposed:tp", "recv_wait:pp", "cpu", "idle", "remote_memory"])


@settings(max_examples=100, deadline=None)
@given(ranks=st.lists(st.dictionaries(PART_NAMES, st.integers(0, 10 ** 13), max_size=8), min_size=1, max_size=6),
       extra=st.integers(0, 10 ** 9))
def test_parts_add_up_exactly_and_track_the_exact_energy(ranks, extra):
    finishes = [sum(p.values()) for p in ranks]
    step_ns = max(finishes) + extra
    out = step_energy(list(zip(ranks, finishes)), step_ns, MW)
    assert out["gpu_energy_mj"] == sum(out["by_part_mj"].values())
    exact_pj = sum(MW[part_class(k)] * ns for p in ranks for k, ns in p.items())
    exact_pj += sum(MW["idle"] * (step_ns - f) for f in finishes)
    # one rounding per rank and part, at most half a millijoule each
    parts = sum(len([v for v in p.values() if v]) + 1 for p in ranks)
    assert abs(out["gpu_energy_mj"] * 10 ** 9 - exact_pj) <= parts * 5 * 10 ** 8
