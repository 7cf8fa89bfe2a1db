"""--timeline's power lane: a ``power W`` counter per rank from the energy plugin's per-class watts; its integral
is the step's GPU energy."""

from __future__ import annotations

import json

import pytest

from astra_sim.simulation import simulate

from astra_analysis.timeline import power_steps


def integral_mj(steps):
    """W x ns summed over the steps (the last entry ends the lane), in mJ."""
    return sum(w * (t_next - t) for (t, w), (t_next, _) in zip(steps, steps[1:])) / 1e6


class Analysis:
    """Stand-in spans: every record's kind and op class by its name."""

    def kind_of(self, rep, node):
        return ({"gemm": 0, "attention": 0, "ar": 1, "wait": 3}[node],)

    def op_class(self, rep, node):
        return node


def test_power_steps_by_hand(monkeypatch):
    """gemm 10-30 ns beside an all-reduce 20-50: the gemm's 700 W until 30, then comm 210 W, idle 80 W from 50 and
    during a receive wait, to the step's end at 100."""
    import astra_analysis.timeline as timeline

    monkeypatch.setattr(timeline, "K_COMPUTE", 0)
    monkeypatch.setattr(timeline, "K_COLL", 1)
    monkeypatch.setattr(timeline, "K_SEND", 2)
    monkeypatch.setattr(timeline, "K_MEM", 4)
    watts = {"gemm": 700.0, "attention": 630.0, "elementwise": 301.0, "other": 301.0, "comm": 210.0, "idle": 80.0}
    records = [("gemm", 10, 30), ("ar", 20, 50), ("wait", 60, 70)]
    steps = power_steps(Analysis(), 0, records, watts, 100)
    assert steps == [(0, 80.0), (10, 700.0), (30, 210.0), (50, 80.0), (100, 80.0)]
    assert integral_mj(steps) == (80 * 10 + 700 * 20 + 210 * 20 + 80 * 50) / 1e6


def test_the_lane_integrates_to_the_step_energy(tmp_path):
    from astra_workload_generators import LlmSpec, generate_llm_workload

    prefix = str(tmp_path / "l")
    generate_llm_workload(LlmSpec(preset="llama3-8b", tp=8, layers=2, seq_len=2048, micro_batches=2), prefix)
    path = tmp_path / "t.json"
    report = simulate(workload=prefix, platform="hgx-h100", nodes=1, timeline=str(path),
                      plugins=["network_analytical", "gpu_model", "energy", "workload_generators", "analysis"])
    events = json.loads(path.read_text())["traceEvents"]
    lanes = {}
    for e in events:
        if e["ph"] == "C" and e["name"] == "power W":
            lanes.setdefault(e["pid"], []).append((round(e["ts"] * 1000), e["args"]["W"]))
    assert sorted(lanes) == list(range(8))
    assert all(lane[-1][0] == report.max_finish_ns for lane in lanes.values())
    assert max(w for lane in lanes.values() for _, w in lane) == 700.0
    total = sum(integral_mj(lane) for lane in lanes.values())
    # the lane shows the highest-power activity; the breakdown's parts give the same energy here (within rounding)
    assert total == pytest.approx(report.stats["energy"]["gpu_energy_mj"], rel=1e-3)
    assert report.timeline["power_counters"] == sum(len(lane) for lane in lanes.values())


def test_no_power_data_no_lane(tmp_path):
    from astra_workload_generators import LlmSpec, generate_llm_workload

    prefix = str(tmp_path / "l")
    generate_llm_workload(LlmSpec(preset="llama3-8b", tp=2, layers=1, seq_len=256), prefix)
    path = tmp_path / "t.json"
    simulate(workload=prefix, platform="hgx-h100", nodes=1, timeline=str(path),
             plugins=["network_analytical", "gpu_model", "workload_generators", "analysis"])
    events = json.loads(path.read_text())["traceEvents"]
    assert events and not [e for e in events if e.get("name") == "power W"]
