"""Issue 18's case: a GPT-3 13B step on 256 H100s (TP 8, PP 2, DP 16): the timeline has one complete event per
executed node of the written ranks, the breakdown names the exposed TP, DP and PP parts and adds up to the
finish time, the critical path is printed and ``astra plot`` writes the pictures."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from astra_sim.cli import main
from astra_sim.report import read_report

pytest.importorskip("astra_workload_generators", reason="the workload_generators plugin is not installed")
pytest.importorskip("astra_gpu_model", reason="the gpu_model plugin is not installed")


def test_gpt3_13b_on_256_gpus(tmp_path, capsys):
    prefix = tmp_path / "gpt3"
    assert main(["workload", "llm", "--preset", "gpt3-13b", "--tp", "8", "--pp", "2", "--dp", "16",
                 "--micro-batches", "2", "-o", str(prefix)]) == 0
    capsys.readouterr()
    report_path, timeline = tmp_path / "report.json", tmp_path / "timeline.json.gz"
    written = [0, 1, 7, 128, 255]
    assert main(["run", "--platform", "hgx-h100", "--nodes", "32", "--compute-model", "gpu",
                 "--workload-configuration", str(prefix), "--critical-path", "--report-json", str(report_path),
                 "--timeline", str(timeline), "--timeline-ranks", "0-1,7,128,255"]) == 0
    out = capsys.readouterr().out
    assert "critical path:" in out and "where the time went: rank 0" in out
    report = read_report(report_path)
    assert report["settings"]["fold"]["simulated_ranks"] == 2
    with gzip.open(timeline, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    per_rank = Counter(e["pid"] for e in events if e["ph"] == "X")
    assert per_rank == {r: report["ranks"][r]["nodes"] for r in written}
    for rank in report["ranks"]:
        parts = rank["breakdown"]["parts"]
        assert sum(parts.values()) == rank["finish_ns"]
        assert {"exposed:tp", "exposed:dp", "exposed:pp"} <= set(parts)
    assert any(name.startswith("recv_wait:pp") for name in report["ranks"][0]["breakdown"]["parts"])
    groups = report["breakdown"]["rank_groups"]
    assert sorted((g["ranks"], g["count"]) for g in groups) == [("0-127", 128), ("128-255", 128)]
    path = report["critical_path"]
    assert sum(i["end_ns"] - i["start_ns"] for i in path["items"]) == report["summary"]["max_finish_ns"]
    assert {"collective:tp", "collective:dp"} <= set(path["totals"])
    pictures = tmp_path / "pictures"
    assert main(["plot", str(report_path), "--timeline", str(timeline), "-o", str(pictures)]) == 0
    assert (pictures / "breakdown.png").stat().st_size > 10_000 and (pictures / "timeline.png").stat().st_size > 10_000
