"""``astra plot`` pictures people read first: the timeline has one lane per rank and stream (compute, each
communicator) with receive waits shaded on a lane, a bounded number of lanes and a bounded height on a PP 4 step;
breakdown labels are words (``exposed TP communication``, ``pipeline receive wait``); titles name the model, the
layout, MFU and tokens/s."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main
from astra_sim.report import read_report

pytest.importorskip("matplotlib")

from astra_plots import figures  # noqa: E402
from astra_plots.inputs import read_timeline  # noqa: E402


@pytest.fixture(scope="module")
def pp4_run(tmp_path_factory):
    """Llama 3 8B's widths, 8 layers, TP 2 x PP 4 (8 ranks), 4 micro-batches, on an H100 node; the report and the
    Chrome timeline."""
    folder = tmp_path_factory.mktemp("pp4")
    prefix, report, trace = folder / "w", folder / "r.json", folder / "t.json"
    assert main(["workload", "llm", "--model", "llama3-8b", "--layers", "8", "--tp", "2", "--pp", "4",
                 "--micro-batches", "4", "--seq-len", "512", "-o", str(prefix)]) == 0
    assert main(["run", "--workload-configuration", str(prefix), "--platform", "hgx-h100", "-q",
                 "-o", str(report), "--timeline", str(trace)]) == 0
    return folder, read_report(report), trace


def test_timeline_lanes_are_streams_of_ranks_and_receives_are_shading(pp4_run):
    _, report, trace = pp4_run
    timeline = read_timeline(trace)
    ranks = set(range(8))
    lanes = figures.timeline_lanes(timeline, ranks)
    names = [lane for (_, lane), _ in lanes]
    communicators = {c["communicator"] for c in report["breakdown"]["communicators"]}  # tp, pp
    assert len(lanes) <= len(ranks) * (1 + len(communicators))
    assert set(names) == {"compute", "TP", "PP"} and not any("recv" in n for n in names)
    # each rank: compute first, then its communicators; every rank's pipeline lane waits somewhere (the bubbles)
    assert [lane for (pid, lane), _ in lanes if pid == 0] == ["compute", "PP", "TP"]
    pp = {pid: entry for (pid, lane), entry in lanes if lane == "PP"}
    assert all(pp[r]["waits"] for r in ranks) and not any(e["waits"] for (_, l), e in lanes if l != "PP")
    # a wait is time with no compute on the rank: it never overlaps the rank's compute spans
    for (pid, lane), entry in lanes:
        if lane == "compute":
            busy = [s for spans in entry["spans"].values() for s in spans]
            for start, length in pp[pid]["waits"]:
                assert not any(b < start + length - 1e-9 and start < b + d - 1e-9 for b, d in busy)
    assert {"GEMM", "attention", "element-wise"} <= {k for (_, l), e in lanes if l == "compute" for k in e["spans"]}


def test_timeline_picture_of_a_pp4_step_has_a_reasonable_height(pp4_run, capsys):
    folder, _, trace = pp4_run
    out = folder / "pics"
    assert main(["plot", str(folder / "r.json"), "--timeline", str(trace), "--ranks", "0-7", "-o", str(out)]) == 0
    from matplotlib.image import imread

    height, width = imread(str(out / "timeline.png")).shape[:2]
    assert width == 1200 and 400 <= height <= 100 * figures.MAX_FIGURE_INCHES  # 24 lanes: about 9 inches
    fig = figures.timeline_figure(read_timeline(trace), set(range(8)), figures.run_title(json.loads(
        (folder / "r.json").read_text())))
    assert len(fig.axes[0].get_yticklabels()) == 24 and "llama3-8b" in fig.axes[0].get_title()


def test_breakdown_labels_are_words_and_the_title_says_what_ran(pp4_run):
    _, report, _ = pp4_run
    fig = figures.breakdown_figure(report)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "pipeline receive wait" in legend and "exposed TP communication" in legend and "GEMM compute" in legend
    assert not any(":" in t or "_" in t for t in legend)
    title = fig._suptitle.get_text()
    t = report["stats"]["throughput"]
    assert "llama3-8b, TP 2 x PP 4 x DP 1 on 8 x H100-SXM5-80GB" in title
    assert f"{100 * t['mfu']:.1f} % MFU" in title and f"{t['tokens_per_s']:,.0f} tokens/s" in title


@pytest.mark.parametrize("part,label", [
    ("exposed:tp", "exposed TP communication"), ("recv_wait:pp", "pipeline receive wait"),
    ("recv_wait:dp", "DP receive wait"), ("exposed_in_switch:dp", "exposed in-switch DP communication"),
    ("exposed:world", "exposed communication"), ("exposed:p2p", "exposed point-to-point communication"),
    ("exposed:group 7", "exposed group 7 communication"), ("compute:gemm", "GEMM compute"),
    ("compute:elementwise", "element-wise compute"), ("compute:other", "other compute"), ("cpu", "CPU"),
    ("idle", "idle"), ("remote_memory", "remote memory"),
])
def test_part_labels(part, label):
    assert figures.part_label(part) == label


def test_a_title_without_throughput_names_the_npus():
    report = {"summary": {"npus": 16, "max_finish_ns": 2_500_000}, "settings": {}, "stats": {}, "ranks": []}
    assert figures.run_title(report) == "16 NPUs\nstep 2.500 ms"


def test_serve_figures_name_the_model_and_gpu():
    from astra_plots.serving import cdf_figure, serve_title

    point = {"deployment": {"model": "llama3-8b", "gpu": "H100-SXM5-80GB", "description": "1 x TP 8"},
             "cdf_ns": {"ttft": list(range(1, 102)), "tpot": list(range(1, 102)), "e2e": list(range(1, 102))}}
    assert serve_title([point, point]) == ": llama3-8b on H100-SXM5-80GB"
    other = {**point, "deployment": {**point["deployment"], "model": "qwen3-8b"}}
    assert serve_title([point, other]) == ""
    fig = cdf_figure([point], ["a"])
    assert fig._suptitle.get_text() == "latency CDFs (astra serve): llama3-8b on H100-SXM5-80GB"


def test_latency_axes_are_log_only_over_a_decade_and_label_plain_numbers():
    """A CDF spanning 16-18 ms stays linear (a log axis over less than a decade labelled its minor ticks 1.6x10^1 ...
    and they overlapped); one spanning 1-1000 ms is log with plain major labels and no minor labels."""
    from astra_plots.serving import cdf_figure

    def point(lo_ms, hi_ms):
        values = [int((lo_ms + (hi_ms - lo_ms) * i / 100) * 1_000_000) for i in range(101)]
        return {"deployment": {}, "cdf_ns": {"ttft": values, "tpot": values, "e2e": values}}

    narrow = cdf_figure([point(16, 18)], ["a"])
    assert [ax.get_xscale() for ax in narrow.axes] == ["linear"] * 3
    wide = cdf_figure([point(1, 1000)], ["a"])
    wide.canvas.draw()
    ax = wide.axes[0]
    assert ax.get_xscale() == "log"
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all("10^" not in t and "times" not in t for t in labels), labels
    assert not [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_text()]
