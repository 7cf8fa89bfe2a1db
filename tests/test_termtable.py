"""Tables at 80 columns: they may wrap text or leave columns out, never cut a number
(core/astra_sim/termtable.py and the commands that print tables)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.report import read_report
from astra_sim.termtable import table_width, Column, fit_columns, print_table
from astra_sim_testing import system_config

ASTRA = Path(sys.executable).parent / "astra"


def render(columns, rows, width=80, **kwargs):
    from rich.console import Console

    out = Console(file=io.StringIO(), width=width, color_system=None)
    print_table("t", columns, rows, out=out, **kwargs)
    return out.file.getvalue()


def assert_fits(text, numbers, width=80):
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width, text
    for number in numbers:
        assert re.search(rf"(?<![\d,.]){re.escape(number)}(?![\d,.])", text), f"{number} not whole in\n{text}"


def test_naive_rich_table_cuts_numbers():
    """What the check guards against: rich's own squeezing ends a number with an ellipsis."""
    from rich.console import Console
    from rich.table import Table

    out = Console(file=io.StringIO(), width=80, color_system=None)
    table = Table()
    for name in ("rank", "finish_ns", "compute_ns", "exposed_comm_ns", "comm_ns", "cpu_ns"):
        table.add_column(name, justify="right")
    table.add_row("0", *["1,082,551,234,567"] * 5)
    out.print(table)
    assert "…" in out.file.getvalue()


def test_wide_numbers_drop_columns_in_order():
    columns = [Column("rank", number=True), Column("finish_ns", number=True),
               Column("compute_ns", number=True, drop=3), Column("exposed_comm_ns", number=True),
               Column("comm_ns", number=True, drop=2), Column("cpu_ns", number=True, drop=1)]
    big = "1,082,551,234,567"
    text = render(columns, [["0", big, big, big, big, big]])
    assert_fits(text, [big])
    assert "left out to fit 80 columns: comm_ns, cpu_ns" in text
    assert "finish_ns" in text and "exposed_comm_ns" in text and "compute_ns" in text.split("left out")[0]
    assert fit_columns(columns, [["0", "1", "2", "3", "4", "5"]], 80) == list(range(6))


def test_text_folds_before_numbers_shrink():
    columns = [Column("name"), Column("value", number=True)]
    long = "word " * 40
    text = render(columns, [[long, "123,456,789"]])
    assert_fits(text, ["123,456,789"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10 ** 15), min_size=4, max_size=4), min_size=1, max_size=5),
       st.integers(40, 120))
def test_any_numbers_at_any_width(values, width):
    columns = [Column("rank", number=True), Column("a", number=True), Column("b", number=True, drop=1),
               Column("c", number=True, drop=2)]
    rows = [[f"{v:,}" for v in row] for row in values]
    text = render(columns, rows, width=width)
    shown = fit_columns(columns, rows, width)
    # The two columns that are never left out may not fit on their own: the lines are then wider, never cut.
    assert_fits(text, [row[i] for row in rows for i in shown], width=max(width, table_width(columns, rows, shown)))


# ---------------------------------------------------------------- the commands, COLUMNS=80


def run80(*args):
    proc = subprocess.run([str(ASTRA), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    return proc


def test_plugins_at_80_columns():
    text = run80("plugins").stdout
    rows = json.loads(run80("plugins", "--json").stdout)
    assert_fits(text, [row["version"] for row in rows])
    for row in rows:
        assert row["name"] in text  # names are whole too (no column is narrower than its longest word)


@pytest.mark.parametrize("nodes", ["1", "64"])
def test_platforms_at_80_columns(nodes):
    text = run80("platforms", "--nodes", nodes).stdout
    rows = json.loads(run80("platforms", "--json", "--nodes", nodes).stdout)
    numbers = [f"{r['scaleup_gb_per_s_per_direction']:g}" for r in rows]
    numbers += [str(r["total_gpus"] if nodes != "1" else r["gpus_per_node"]) for r in rows]
    assert_fits(text, numbers)
    for r in rows:
        assert r["name"] in text and r["gpu"] in text
    # machines whose GEMM times rest partly on assumptions say so at 80 columns too (issue 40)
    partial = [r for r in rows if r.get("calibration") == "partial"]
    assert partial and all(f"{r['gpu']} *" in text for r in partial)
    assert "GEMM times partly assumed" in text


def test_run_table_at_80_columns(tmp_path):
    """Compute of 10^9 us per rank: times of 17 characters; the table leaves columns out."""
    prefix = tmp_path / "big"
    for rank in range(4):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [
            make_node(1, "c", T.COMP_NODE, duration_micros=10 ** 9 + rank),
            make_node(2, "ar", T.COMM_COLL_NODE, data_deps=[1], attrs={"comm_type": T.ALL_REDUCE, "comm_size": 1 << 20}),
        ])
    system = tmp_path / "sys.json"
    system.write_text(json.dumps(system_config()))
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    report_path = tmp_path / "r.json"
    proc = run80("run", "--workload-configuration", str(prefix), "--system-configuration", str(system),
                 "--network-configuration", str(net), "--report-json", str(report_path))
    report = read_report(report_path)
    from astra_sim.humanize import format_ns

    # the terminal shows human units (JSON keeps the ns): every time is whole on its line
    numbers = [format_ns(r[key]) for r in report["ranks"] for key in ("finish_ns", "exposed_comm_ns")]
    numbers += [format_ns(report["summary"]["max_finish_ns"])]
    assert_fits(proc.stdout, numbers)
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
