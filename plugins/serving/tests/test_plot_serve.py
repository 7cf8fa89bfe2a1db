"""astra serve's QPS sweep and astra plot's latency CDF and throughput-latency curve from it."""

import json

import pytest

from astra_sim.cli import main

pytest.importorskip("astra_plots")


def test_qps_sweep_report_and_plots(tmp_path, capsys):
    report = tmp_path / "sweep.json"
    assert main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "2,50", "--requests", "60",
                 "--max-num-seqs", "16", "-o", str(report), "-q"]) == 0
    data = json.loads(report.read_text())
    assert [p["qps"] for p in data["qps_sweep"]] == [2.0, 50.0] and data["units"]["time"] == "ns"
    for point in data["qps_sweep"]:
        cdf = point["cdf_ns"]["ttft"]
        assert len(cdf) == 101 and cdf == sorted(cdf) and cdf[50] == point["ttft_ns"]["p50"]
        assert all(isinstance(v, int) for v in cdf)
    out = tmp_path / "plots"
    assert main(["plot", str(report), "-o", str(out)]) == 0
    assert (out / "latency_cdf.png").stat().st_size > 1000 and (out / "throughput_latency.png").stat().st_size > 1000


def test_bad_qps_list(capsys):
    """A bad rate is a usage error, as every flag's bad value is (the spec's parser checks --qps's type)."""
    with pytest.raises(SystemExit) as stop:
        main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "2,-1"])
    assert stop.value.code == 2
    assert "argument --qps: expected positive numbers" in capsys.readouterr().err


def test_serve_search_finds_the_cheapest_deployment(tmp_path, capsys):
    """The deprecated alias astra serve-search still works for this release (-o writes the JSON), after a one-line
    warning on stderr."""
    out = tmp_path / "search.json"
    capsys.readouterr()
    code = main(["serve-search", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "60", "--requests",
                 "60", "--prompt-len", "1000", "--output-len", "100", "--slo-ttft", "80", "--tp", "1",
                 "--max-gpus", "4", "--disaggregate-ratios", "1:1", "-o", str(out)])
    data = json.loads(out.read_text())
    assert data["units"] == {"time": "ns", "size": "bytes"}
    assert all(isinstance(c["ttft_p90_ns"], int) for c in data["candidates"] if "skipped" not in c)
    answer = data["answer"]["gpus"]
    assert code == 0 and answer >= 2 and data["answer"]["slo_fraction"] >= 0.9
    one = [c for c in data["candidates"] if c["gpus"] == 1]
    assert one and all(c["slo_fraction"] < 0.9 for c in one)  # one GPU does not meet it
    # the cheapest: every smaller deployment misses the SLO, and the search stops at the first count that meets it
    assert all(c["slo_fraction"] < 0.9 for c in data["candidates"] if c["gpus"] < answer)
    assert not any(c["gpus"] > answer for c in data["candidates"])
    printed = capsys.readouterr()
    assert "cheapest: " in printed.out
    assert printed.err.splitlines()[0] == ("astra: warning: 'astra serve-search' is deprecated; use 'astra search "
                                           "--serve' (it will be removed in the next release)")


def test_astra_search_serve_finds_the_cheapest_deployment(tmp_path, capsys):
    """astra search --serve (plugins/sweep's command) searches TP, PP, replicas and P:D ratios; --json prints the
    answer on stdout (the progress goes to stderr)."""
    capsys.readouterr()
    code = main(["search", "--serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "60",
                 "--requests", "100", "--prompt-len", "1000", "--output-len", "100", "--slo-ttft-p99", "80", "--tp",
                 "1", "--pp", "1,2", "--gpus", "4", "--disaggregate-ratios", "1:1", "--serve-arg=--frontend=none",
                 "--json"])
    printed = capsys.readouterr()
    data = json.loads(printed.out)
    assert "cheapest: " in printed.err and "deprecated" not in printed.err
    assert "TTFT p99 " in printed.err and "TTFT p90" not in printed.err  # the percentile asked for
    answer = data["answer"]["gpus"]
    assert code == 0 and answer >= 2 and data["answer"]["slo_met"] and data["answer"]["ttft_p99_ns"] <= 80_000_000
    labels = {c["deployment"] for c in data["candidates"]}
    assert {"1 x TP 1", "2 x TP 1", "1P:1D x TP 1", "1 x TP 1 PP 2"} <= labels
    assert all(not c["slo_met"] and c["ttft_p99_ns"] > 80_000_000 for c in data["candidates"]
               if c["gpus"] < answer and "skipped" not in c)
    assert not any(c["gpus"] > answer for c in data["candidates"])


def test_astra_search_serve_runs_each_gpu_count_side_by_side_with_the_same_rows(tmp_path, capsys):
    """--jobs 2: each GPU count's candidates on astra-sweep's local pool; the candidates and the answer are the
    serial search's. TP 1 with a 1:1 prefill/decode split gives two candidates at 2 and at 4 GPUs (half the batch
    shapes of TP 1 and 2; the same requests as the alias's test above, whose shapes the step cache may hold)."""
    argv = ["search", "--serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "60", "--requests", "60",
            "--prompt-len", "1000", "--output-len", "100", "--slo-ttft-p90", "80", "--tp", "1", "--gpus", "4",
            "--disaggregate-ratios", "1:1"]
    serial, pooled = tmp_path / "serial.json", tmp_path / "pooled.json"
    assert main(argv + ["-o", str(serial)]) == main(argv + ["--jobs", "2", "--output", str(pooled)])
    a, b = json.loads(serial.read_text()), json.loads(pooled.read_text())
    assert a == b and len(a["candidates"]) >= 3
    assert sum(c["gpus"] == 2 for c in a["candidates"]) == 2  # the pool had two candidates of one count to run


def test_search_serve_candidates_tile_the_node():
    from astra_serving.search import candidates, tiles

    assert tiles(4, 1, 1, 8) and tiles(8, 2, 1, 8) and not tiles(3, 1, 1, 8) and not tiles(4, 3, 1, 8)
    found = candidates(8, [2, 4], 8, [(1, 1)], pps=[1, 2])
    assert [c[0] for c in found] == sorted(c[0] for c in found) and max(c[0] for c in found) <= 8
    assert (8, "1 x TP 4 PP 2", {"tp": 4, "pp": 2, "ep": 1, "replicas": 1}) in found
    assert (8, "1P:1D x TP 4", {"tp": 4, "pp": 1, "ep": 1, "disaggregate": "1:1"}) in found


def test_astra_search_flags_belong_to_their_mode(capsys):
    assert main(["search", "--model", "llama3-8b", "--platform", "hgx-h100", "--gpus", "8"]) != 0
    assert "--global-batch is required" in capsys.readouterr().err
    assert main(["search", "--model", "llama3-8b", "--platform", "hgx-h100", "--gpus", "8", "--global-batch", "8",
                 "--qps", "3"]) != 0
    assert "--qps is for --serve" in capsys.readouterr().err
    assert main(["search", "--serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--slo-ttft", "9"]) != 0
    assert "--qps" in capsys.readouterr().err


def test_timeline_has_iterations_requests_and_transfers(tmp_path):
    path = tmp_path / "t.json"
    assert main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "5", "--requests", "10",
                 "--disaggregate", "1:1", "--timeline", str(path), "-q"]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    kinds = {(e.get("cat"), e["ph"]) for e in events}
    assert {("iteration", "X"), ("kv", "X"), ("request", "b"), ("request", "e")} <= kinds
    assert sum(1 for e in events if e.get("cat") == "kv") == 10
    assert sum(1 for e in events if e.get("cat") == "request" and e["ph"] == "b" and e["name"] == "decode") == 10
