"""The cycle model against SCALE-sim 3.0.0's own COMPUTE_REPORT.csv files (goldens/, see its README).

Every row must be equal as text: the three cycle counts to the cycle and the three percentages to the
last digit Python prints."""

from pathlib import Path

import pytest

from astra_compute_systolic.config import load_config
from astra_compute_systolic.linesim import simulate_lines
from astra_compute_systolic.topology import read_topology, report_text

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"
CONFIGS = sorted((GOLDENS / "configs").glob("*.cfg"))
TOPOLOGIES = sorted((GOLDENS / "topologies").glob("*.csv"))
CASES = [(c, t) for c in CONFIGS for t in TOPOLOGIES]


def _report(config, topology):
    return (GOLDENS / "reports" / config.stem / f"{topology.stem}.csv").read_text()


def test_the_golden_set_covers_what_it_claims():
    configs = [load_config(p) for p in CONFIGS]
    layers = [layer for t in TOPOLOGIES for layer in read_topology(t)]
    assert len(layers) >= 30
    assert {c.dataflow for c in configs} == {"os", "ws", "is"}
    assert {c.bandwidth_mode for c in configs} == {"USER", "CALC"}
    assert len({(c.rows, c.cols) for c in configs}) >= 5
    gemms = [x for x in layers if x.filter_h == 1 and x.channels == 1 and x.filter_w == x.ifmap_w]
    convs = [x for x in layers if x not in gemms]
    assert len(gemms) >= 10 and len(convs) >= 8
    assert any(not x.distinct_ifmap for x in convs) and any(not x.full_windows for x in convs)
    small = min(c.rows for c in configs)
    assert any(g.ifmap_h < small for g in gemms)                       # smaller than every array
    assert any(g.ifmap_h % 8 and g.num_filters % 8 for g in gemms)       # not multiples of the array
    assert "scalesim 3.0.0" in (GOLDENS / "reports" / "VERSIONS.txt").read_text()


@pytest.mark.parametrize("config,topology", CASES, ids=[f"{c.stem}-{t.stem}" for c, t in CASES])
def test_report_equals_scalesim(config, topology):
    expected = _report(config, topology)
    mine = report_text(read_topology(topology), load_config(config), "3.0.0")
    assert len(mine.splitlines()) == len(expected.splitlines())
    for line_mine, line_ref in zip(mine.splitlines(), expected.splitlines()):
        assert line_mine.strip() == line_ref.strip()


SMALL = ["os8x8_user_tiny", "ws16x16_user_small", "is8x32_calc"]


@pytest.mark.parametrize("name", SMALL)
def test_cycle_stepped_model_equals_scalesim_too(name):
    config = load_config(GOLDENS / "configs" / f"{name}.cfg")
    topology = GOLDENS / "topologies" / "gemms.csv"
    rows = _report(GOLDENS / "configs" / f"{name}.cfg", topology).splitlines()[1:]
    for i, (layer, row) in enumerate(zip(read_topology(topology), rows)):
        assert simulate_lines(layer, config).report_row(i).strip() == row.strip(), layer.name
