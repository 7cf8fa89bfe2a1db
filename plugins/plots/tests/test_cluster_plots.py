"""``astra plot`` on ``astra cluster`` reports: the jobs of two reports side by side."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main

pytest.importorskip("matplotlib")

H = 3_600_000_000_000


def cluster_report(placement, completions, goodputs, corun=True):
    """A cluster report with the keys astra plot reads (times in ns, as astra cluster writes them)."""
    jobs = [{"job": f"j{i}", "completion_ns": c, "goodput": g} for i, (c, g) in enumerate(zip(completions, goodputs))]
    done = [c for c in completions if c is not None]
    report = {"cluster": {"placement": placement, "scheduler": "fifo"}, "placement": [],
              "timeline": {"jobs": jobs, "mean_completion_ns": sum(done) // len(done), "cluster_goodput": 0.5}}
    report["stragglers"] = [{"job": "j0", "nominal_step_ns": 1_000_000, "p99_step_ns": 1_300_000,
                             "step_ns_by_draw": [1_100_000, 1_300_000, 1_050_000]}]
    if corun:
        report["corun"] = {"jobs": [{"job": "j0", "slowdown": 1.0}, {"job": "j1", "slowdown": 1.9}],
                           "shared_links": [{"src": "a", "dst": "b"}]}
    return report


def test_two_cluster_reports_side_by_side(tmp_path, capsys):
    paths = []
    for name, completions in (("topology", [3 * H, 4 * H]), ("random", [5 * H, None])):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(cluster_report(name, completions, [1.0, 0.5 if completions[1] else None])))
        paths.append(str(path))
    assert main(["plot", *paths, "-o", str(tmp_path / "figs")]) == 0
    for name in ("cluster_jobs", "cluster_slowdown", "cluster_steps"):
        assert (tmp_path / "figs" / f"{name}.png").stat().st_size > 1000
    assert "wrote" in capsys.readouterr().out


def test_a_cluster_report_without_corun_notes_the_missing_figure(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cluster_report("topology", [H], [1.0], corun=False)))
    assert main(["plot", str(path), "-o", str(tmp_path / "figs")]) == 0
    out = capsys.readouterr().out
    assert "cluster_jobs.png" in out and "no cluster_slowdown.png" in out


def test_mixing_cluster_and_run_reports_is_an_error(tmp_path, capsys):
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps(cluster_report("topology", [H], [1.0])))
    other = tmp_path / "o.json"
    other.write_text("{}")
    assert main(["plot", str(cluster), str(other), "-o", str(tmp_path / "figs")]) != 0
    err = capsys.readouterr().err
    assert "o.json: not an astra cluster report" in err and len(err.strip().splitlines()) == 1
