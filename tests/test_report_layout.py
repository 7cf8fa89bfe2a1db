"""The report's two JSON layouts: astra run's compact default (rank classes) and --per-rank, and read_report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_sim.errors import ConfigError
from astra_sim.metrics import undeclared
from astra_sim.report import read_report

MODEL = {"layers": 2, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256, "micro_batches": 2}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """The same 32-rank LLM step on hgx-h100 written compact (the default) and --per-rank."""
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    folder = tmp_path_factory.mktemp("layout")
    prefix = str(folder / "w")
    generate_llm_workload(LlmSpec.from_mapping({**MODEL, "tp": 4, "pp": 2, "dp": 4}), prefix)
    out = {}
    for name, extra in (("compact", []), ("per_rank", ["--per-rank"])):
        path = folder / f"{name}.json"
        subprocess.run([sys.executable, "-m", "astra_sim.cli", "run", "--workload-configuration", prefix,
                        "--platform", "hgx-h100", "-q", "-o", str(path), *extra], check=True, timeout=300,
                       env={**os.environ, "ASTRA_PROGRESS": "0"})
        out[name] = path
    return out


def _without_group_ids(report):
    for rank in report["ranks"]:
        for communicator in (rank.get("breakdown") or {}).get("communicators", []):
            communicator.pop("groups", None)
    return report


def test_the_default_file_is_compact_and_reads_back_as_the_per_rank_one(reports):
    compact = json.loads(reports["compact"].read_text())
    full = json.loads(reports["per_rank"].read_text())
    assert compact["layout"] == "rank-classes" and "ranks" not in compact
    assert full["layout"] == "per-rank" and len(full["ranks"]) == 32
    assert sum(c["count"] for c in compact["rank_classes"]) == 32 and len(compact["rank_classes"]) < 32
    assert reports["compact"].stat().st_size < reports["per_rank"].stat().st_size / 2
    expanded = read_report(str(reports["compact"]))
    for key in ("summary", "breakdown", "warnings", "complete", "units"):
        assert expanded[key] == full[key], key
    assert expanded["ranks"] == _without_group_ids(full)["ranks"]
    volatile = {"build_s", "run_s", "events_per_s", "analysis_s"}  # wall-clock seconds of each run
    assert ({k: v for k, v in expanded["stats"].items() if k not in volatile}
            == {k: v for k, v in full["stats"].items() if k not in volatile})
    assert read_report(full) is full  # a per-rank report is read as it is
    assert undeclared(compact) == [] and undeclared(full) == []


def test_plots_read_the_compact_default(reports, tmp_path):
    pytest.importorskip("astra_plots")
    from astra_plots.inputs import read_report as plots_read

    assert len(plots_read(str(reports["compact"]))["ranks"]) == 32


@pytest.mark.parametrize("document, message", [
    ({"layout": "rank-classes", "rank_classes": "0-7"}, "rank_classes must be a list"),
    ({"layout": "rank-classes", "rank_classes": [{"ranks": "0-3", "count": 3}]}, "rank 3 does not exist"),
    ({"layout": "rank-classes", "rank_classes": [{"ranks": "0-1", "count": 1}, {"ranks": "2", "count": 2}]},
     "count says 1"),
    ({"layout": "rank-classes", "rank_classes": [{"ranks": "0-1", "count": 2}, {"ranks": "1-2", "count": 2}]},
     "every rank"),
    ({"layout": "rank-classes", "rank_classes": [{"ranks": "0-x", "count": 1}]}, "not a rank"),
    ({"layout": "rank-classes", "rank_classes": [{"ranks": "0", "count": 1}],
      "stats": {"t": {"rank_classes": [{"ranks": "0"}]}}}, "need 'ranks' and 'value'"),
])
def test_a_malformed_compact_report_is_a_clear_error(document, message):
    with pytest.raises(ConfigError, match=message):
        read_report(document, where="r.json")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                   max_size=3), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(classes=_json, stats=_json)
def test_read_report_never_fails_otherwise(classes, stats):
    document = {"layout": "rank-classes", "rank_classes": classes, "stats": stats if isinstance(stats, dict) else {}}
    try:
        out = read_report(document, where="r.json")
    except ConfigError:
        return
    assert [r["rank"] for r in out["ranks"]] == list(range(len(out["ranks"])))
