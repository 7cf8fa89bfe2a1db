"""``astra plot``: every picture renders headless (Agg) and is a real image; bad input is exit 2 naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.report import read_report
from astra_sim_testing import write_network_config, write_system_config

pytest.importorskip("matplotlib")


def _run(folder, npus=8, backend="analytical", timeline=True):
    """A compute node, an all-reduce and a send/recv ring step on ``npus`` ranks; returns (report, timeline)."""
    folder = Path(folder)
    (folder / "t").mkdir(parents=True, exist_ok=True)
    for rank in range(npus):
        nodes = [make_node(0, "aten::mm", T.COMP_NODE, duration_micros=20 + (rank % 2) * 5, attrs={"is_cpu_op": False}),
                 make_node(1, "grad_ar", T.COMM_COLL_NODE, data_deps=[0],
                           attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20}),
                 make_node(2, "send", T.COMM_SEND_NODE, data_deps=[1], attrs={
                     "is_cpu_op": False, "comm_src": rank, "comm_dst": (rank + 1) % npus, "comm_size": 1 << 18,
                     "comm_tag": 1}),
                 make_node(3, "recv", T.COMM_RECV_NODE, data_deps=[1], attrs={
                     "is_cpu_op": False, "comm_src": (rank - 1) % npus, "comm_dst": rank, "comm_size": 1 << 18,
                     "comm_tag": 1})]
        write_et(folder / "t" / f"t.{rank}.et", make_metadata(), nodes)
    system = write_system_config(folder / "system.json")
    net = write_network_config(folder / "net.yml", npus=(npus,))
    report, trace = folder / "report.json", folder / "trace.json.gz"
    args = ["run", "--workload-configuration", str(folder / "t" / "t"), "--system-configuration", system,
            "--network-configuration", net, "--network-backend", backend, "--report-json", str(report), "-q"]
    if timeline:
        args += ["--timeline", str(trace)]
    assert main(args) == 0
    return report, trace


def _check_image(path, min_width=400, min_height=200):
    from matplotlib.image import imread

    pixels = imread(str(path))
    height, width = pixels.shape[:2]
    assert width >= min_width and height >= min_height, (path, width, height)
    flat = pixels[..., :3].reshape(-1, 3)
    assert flat.std() > 0.05, f"{path} is blank"
    colours = {tuple(p) for p in (flat[:: max(1, len(flat) // 20000)] * 255).astype(int)}
    assert len(colours) > 8, f"{path} has {len(colours)} colours"


def test_breakdown_and_timeline_pictures(tmp_path, capsys):
    report, trace = _run(tmp_path)
    out = tmp_path / "pics"
    assert main(["plot", str(report), "--timeline", str(trace), "-o", str(out), "--svg"]) == 0
    printed = capsys.readouterr().out
    for name in ("breakdown", "timeline"):
        _check_image(out / f"{name}.png")
        assert (out / f"{name}.svg").read_text().lstrip().startswith("<?xml")
        assert f"wrote {out / name}.png" in printed
    assert not (out / "links.png").exists()  # the analytical backend has no links


def test_large_runs_get_one_bar_per_group_of_identical_ranks(tmp_path):
    from astra_plots.figures import breakdown_figure

    report_path, _ = _run(tmp_path, npus=64, timeline=False)
    report = read_report(report_path)
    figure = breakdown_figure(report)
    labels = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    assert len(labels) == len(report["breakdown"]["rank_groups"]) == 2  # even and odd ranks differ
    assert "32 ranks" in labels[0]


def test_link_heat_map_for_a_backend_with_links(tmp_path):
    report, trace = _run(tmp_path, backend="congestion")
    data = json.loads(report.read_text())
    util = data["network_stats"]["link_utilisation"]
    assert util["links"] and all(0.0 <= v <= 1.0 for item in util["links"] for v in item["utilisation"])
    out = tmp_path / "pics"
    assert main(["plot", str(report), "-o", str(out)]) == 0
    _check_image(out / "links.png")


def test_sweep_table_of_several_reports(tmp_path):
    first, _ = _run(tmp_path / "a", npus=4, timeline=False)
    second, _ = _run(tmp_path / "b", npus=8, timeline=False)
    out = tmp_path / "pics"
    assert main(["plot", str(first), str(second), "-o", str(out)]) == 0
    _check_image(out / "sweep.png", min_height=100)


def test_not_a_report_names_the_file_and_exits_2(tmp_path, capsys):
    report, trace = _run(tmp_path, npus=4)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    for bad in (text, trace, tmp_path / "missing.json"):
        assert main(["plot", str(bad), "-o", str(tmp_path / "pics")]) == 2
        err = capsys.readouterr().err
        assert f"astra: error: {bad}" in err and "Traceback" not in err
    timeline_json = tmp_path / "t.json"
    assert main(["run", "--workload-configuration", str(tmp_path / "t" / "t"), "--system-configuration",
                 str(tmp_path / "system.json"), "--network-configuration", str(tmp_path / "net.yml"), "-q",
                 "--timeline", str(timeline_json)]) == 0
    assert main(["plot", str(timeline_json), "-o", str(tmp_path / "pics")]) == 2
    assert "a Chrome timeline" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["plot", str(report), "-o", str(blocker / "pics")]) == 2
    assert "-o" in capsys.readouterr().err
    assert main(["plot", str(report), "--timeline", str(text), "-o", str(tmp_path / "pics")]) == 2
    assert f"{text}: not a Chrome trace-event timeline" in capsys.readouterr().err


def test_a_sweep_results_file_is_drawn_and_a_bad_one_named(tmp_path, capsys):
    from astra_sim.cli import main

    results = tmp_path / "r.csv"
    results.write_text("point,run.platform-collective,workload.llm.tp,step_ns,compute_ns,status,wall_s\n"
                       "a,ring,1,2000000,1,ok,0.1\nb,nccl,1,1500000,1,ok,0.1\n"
                       "c,ring,2,1000000,1,ok,0.1\nd,nccl,2,,,error,0.1\n")
    assert main(["plot", str(results), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "sweep_results.png").stat().st_size > 1000
    from astra_plots.figures import sweep_results_figure
    from astra_plots.inputs import read_sweep_results

    axes, rows = read_sweep_results(results)
    assert axes == ["run.platform-collective", "workload.llm.tp"]
    fig = sweep_results_figure(axes, rows, "t")
    assert "3 of 4 points" in fig.axes[0].get_title()
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    capsys.readouterr()
    assert main(["plot", str(bad), "-o", str(tmp_path / "out")]) == 2
    assert "bad.csv" in capsys.readouterr().err


def test_each_figure_is_named_on_the_progress_line_in_turn(tmp_path, monkeypatch):
    from astra_sim import progress

    first, trace = _run(tmp_path / "a", npus=4)
    second, _ = _run(tmp_path / "b", npus=4, timeline=False)
    named = []
    monkeypatch.setattr(progress, "phase", lambda text, *a, **k: named.append(text))
    assert main(["plot", str(first), str(second), "--timeline", str(trace), "-o", str(tmp_path / "pics")]) == 0
    drawing = [text for text in named if text.startswith("drawing ")]
    assert drawing == ["drawing breakdown.png (1 of 3 figures)", "drawing timeline.png (2 of 3 figures)",
                       "drawing sweep.png (3 of 3 figures)"]
    assert f"reading the timeline {trace}" in named and f"reading {second}" in named


def test_a_slow_figure_shows_its_own_line_on_stderr(tmp_path, monkeypatch, capsys):
    """Not a terminal (capsys): the periodic plain line names the figure being drawn, not a generic 'working'."""
    import time

    from astra_plots import figures

    report, _ = _run(tmp_path, npus=4, timeline=False)
    monkeypatch.setenv("ASTRA_PROGRESS", "1")
    monkeypatch.setenv("ASTRA_PROGRESS_DELAY_S", "0")
    monkeypatch.setenv("ASTRA_PROGRESS_INTERVAL_S", "0.02")
    draw = figures.breakdown_figure

    def slow(report):
        time.sleep(0.3)
        return draw(report)

    monkeypatch.setattr(figures, "breakdown_figure", slow)
    assert main(["plot", str(report), "-o", str(tmp_path / "pics")]) == 0
    err = capsys.readouterr().err
    assert "astra plot: drawing breakdown.png (1 of 1 figures), 0 s elapsed" in err, err


def test_serve_reports_are_drawn_figure_by_figure(tmp_path, monkeypatch, capsys):
    from astra_sim import progress

    point = {"deployment": {"model": "llama3-8b", "gpu": "H100-SXM5-80GB", "description": "1 x TP 8"},
             "ttft_ns": {"p50": 1, "p99": 2}, "tpot_ns": {"p50": 1, "p99": 2}, "throughput_tokens_per_s": 10.0,
             "cdf_ns": {"ttft": list(range(1, 102)), "tpot": list(range(1, 102)), "e2e": list(range(1, 102))}}
    paths = []
    for qps in (1, 2):
        path = tmp_path / f"serve{qps}.json"
        path.write_text(json.dumps({**point, "qps": qps, "throughput_tokens_per_s": 10.0 * qps}))
        paths.append(str(path))
    named = []
    monkeypatch.setattr(progress, "phase", lambda text, *a, **k: named.append(text))
    assert main(["plot", *paths, "-o", str(tmp_path / "pics")]) == 0
    assert [t for t in named if t.startswith("drawing ")] == [
        "drawing latency_cdf.png (1 of 2 figures)", "drawing throughput_latency.png (2 of 2 figures)"]
    printed = capsys.readouterr().out
    assert "latency_cdf.png" in printed and "throughput_latency.png" in printed
