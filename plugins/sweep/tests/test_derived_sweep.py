"""A small which-machine sweep (examples/sweeps/which_machine.yaml's shape) run end to end by `astra sweep`: the
rows have step time, tokens/s per GPU, MFU, the GPU's calibration and the cost columns, and these agree with each
other and with the price table, computed by hand."""

from __future__ import annotations

import csv
import subprocess

import pytest

SPEC = """
workload:
  llm: {model: llama3.1-8b, layers: 2, seq-len: 1024, tp: 8, dp: 1, micro-batches: 2}
run: {compute-model: gpu, platform: hgx-h100}
prices: prices/gpu_prices.yaml
axes:
  grid:
    run.platform: [hgx-h100, mi300x, hgx-b200]
"""

PRICES = """
prices:
  hgx-h100: {usd_per_gpu_hour: 3.6, source: "a test's quote"}
  mi300x: {usd_per_gpu_hour: 1.8, assumption: "a test's guess"}
"""


def _rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return {row["run.platform"]: row for row in csv.DictReader(handle)}


def test_which_machine_sweep_reports_consistent_cost_columns(tmp_path, astra_exe):
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "gpu_prices.yaml").write_text(PRICES)
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "rows.csv"
    command = [astra_exe, "sweep", str(tmp_path / "spec.yaml"), "-o", str(out), "--jobs", "1", "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "the price of mi300x ($1.8/GPU-hour) is an assumption" in done.stderr
    assert "no price for hgx-b200" in done.stderr
    rows = _rows(out)
    assert set(rows) == {"hgx-h100", "mi300x", "hgx-b200"}
    for name, row in rows.items():
        assert row["status"] == "ok", row["status"]
        step_s = int(row["step_ns"]) / 1e9
        per_gpu = float(row["tokens_per_s_per_gpu"])
        # 2 sequences of 1,024 tokens per step on 8 GPUs
        assert per_gpu == pytest.approx(2 * 1024 / step_s / 8, rel=1e-6)
        assert 0 < float(row["mfu"]) < 1
    h100, mi300x, b200 = rows["hgx-h100"], rows["mi300x"], rows["hgx-b200"]
    # how far each GPU's GEMM times rest on its own measurements: the rows say which are indicative
    assert (h100["gpu_calibration"], mi300x["gpu_calibration"], b200["gpu_calibration"]) == (
        "fitted", "partial", "partial")
    # $3.6 per GPU-hour is $0.001 per GPU-second: a token costs 0.001 / (tokens per GPU-second) dollars
    assert float(h100["usd_per_million_tokens"]) == pytest.approx(
        0.001 / float(h100["tokens_per_s_per_gpu"]) * 1e6, rel=1e-9)
    assert h100["price_assumed"] == "False" and mi300x["price_assumed"] == "True"
    assert float(mi300x["usd_per_million_tokens"]) == pytest.approx(
        0.0005 / float(mi300x["tokens_per_s_per_gpu"]) * 1e6, rel=1e-9)
    assert b200["usd_per_million_tokens"] == "" and b200["usd_per_gpu_hour"] == ""

    # a changed price: the same command again simulates nothing and reprices every row
    (tmp_path / "prices" / "gpu_prices.yaml").write_text(PRICES.replace("3.6", "7.2"))
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "ran 0" in again.stdout
    repriced = _rows(out)
    assert float(repriced["hgx-h100"]["usd_per_million_tokens"]) == pytest.approx(
        2 * float(h100["usd_per_million_tokens"]), rel=1e-9)
    assert repriced["hgx-h100"]["step_ns"] == h100["step_ns"]


def test_a_bad_price_table_stops_the_sweep_before_any_point(tmp_path, astra_exe):
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "gpu_prices.yaml").write_text("prices:\n  hgx-h10: {usd_per_gpu_hour: 2, source: s}\n")
    (tmp_path / "spec.yaml").write_text(SPEC)
    done = subprocess.run([astra_exe, "sweep", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "rows.csv"),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "gpu_prices.yaml: prices.'hgx-h10': no such platform (did you mean 'hgx-h100'?)" in done.stderr
    assert not (tmp_path / "rows.csv").exists()


def test_a_row_keeps_the_gpus_calibration_as_text(tmp_path):
    import pyarrow.parquet as pq

    from astra_sweep.point import fill_row
    from astra_sweep.results import Results, result_kind

    row = {"point": "p", "status": "ok"}
    fill_row(row, {"ranks": [{"rank": 0, "finish_ns": 10, "compute_ns": 6, "exposed_comm_ns": 4}],
                   "settings": {"gpu_model": {"calibration_status": "partial"}}})
    assert row["gpu_calibration"] == "partial" and result_kind("gpu_calibration") == "str"
    results = Results(tmp_path / "rows.parquet", ["point", "step_ns", "status"], {})
    results.add(row)
    results.finish(["p"])
    assert pq.read_table(tmp_path / "rows.parquet").to_pylist()[0]["gpu_calibration"] == "partial"
