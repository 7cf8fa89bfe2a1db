"""Start-up (issue 37, session 52): a plain ``astra run`` of a congestion case imports no module it does not use. The
Chakra writer (a run only reads traces), the compact workload's held traces and relabeller (no compact workload), the
InfraGraph support and the fabrics (an analytical YAML, no --fabric), the systolic torus collective (not chosen) and,
with --no-fold, the folding search, engine and matcher load when first used; the results are the same as with every
one of them imported up front."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from astra_sim_testing import small_congestion_run_argv

#: never imported by a plain congestion run of per-rank traces on an analytical YAML
LAZY = ["astra_sim.chakra.writer", "astra_workload_compact.memory", "astra_workload_compact.relabel",
        "astra_network_congestion.infragraph", "astra_network_congestion.infragraph_validate",
        "astra_network_congestion.fabrics", "astra_compute_systolic.torus", "astra_compute_systolic.model"]
#: nor, with --no-fold, the folding plugin's search, engine and matcher
LAZY_NO_FOLD = ["astra_folding.engine", "astra_folding.matcher", "astra_folding.search", "astra_folding.signature",
                "astra_folding.groups", "astra_folding.symmetry"]

SCRIPT = """
import importlib, json, sys
wanted, first = json.loads(sys.argv[1])
for name in first:  # the eager side: every lazy module imported before the run
    importlib.import_module(name)
from astra_sim.cli import main
from astra_sim.report import read_report
code = main(sys.argv[2:])
report = read_report(sys.argv[3].split("=", 1)[1])
report["stats"] = {k: v for k, v in report["stats"].items() if not k.endswith("_s")}  # (seconds differ run to run)
print(json.dumps({"code": code, "loaded": [m for m in wanted if m in sys.modules], "report": report}))
"""


def _run(tmp_path, *flags, first=()):
    argv = small_congestion_run_argv(tmp_path, *flags)
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([LAZY + LAZY_NO_FOLD, list(first)]), *argv],
                         capture_output=True, text=True, check=True, timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, out.stderr
    return result


@pytest.mark.parametrize("flags, lazy", [((), LAZY), (("--no-fold",), LAZY + LAZY_NO_FOLD)], ids=["fold", "no-fold"])
def test_a_plain_congestion_run_imports_no_module_it_does_not_use(tmp_path, flags, lazy):
    lazy_run = _run(tmp_path, *flags)
    loaded = [m for m in lazy_run["loaded"] if m in lazy]
    assert loaded == [], f"a plain congestion run ({' '.join(flags) or 'folded'}) imported {loaded}"
    eager_run = _run(tmp_path, *flags, first=LAZY + LAZY_NO_FOLD)
    assert eager_run["report"] == lazy_run["report"]  # every rank's times, the breakdown: the same


def test_the_infragraph_precheck_never_hides_an_infragraph_file(tmp_path):
    from astra_network_congestion.congestion import INFRAGRAPH_KEYS, _may_be_infragraph
    from astra_network_congestion.infragraph import _kind_of, is_infragraph_config

    analytical = tmp_path / "net.yml"
    analytical.write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    assert not _may_be_infragraph(analytical) and not is_infragraph_config(analytical)
    for key in INFRAGRAPH_KEYS:  # every key the InfraGraph check knows is one the pre-check looks for
        assert _kind_of({key: []}) is not None
        named = tmp_path / f"{key}.yml"
        named.write_text(f"{key}: []\n")
        assert _may_be_infragraph(named) and is_infragraph_config(named)
    escaped = tmp_path / "escaped.yml"  # a key spelt by a double-quoted escape: not in the text as such
    escaped.write_text('"\\x64evices": []\n')
    assert "devices" not in escaped.read_text()
    assert _may_be_infragraph(escaped) and is_infragraph_config(escaped)
    assert _may_be_infragraph(tmp_path / "missing.yml")  # unreadable: the InfraGraph check decides, as before


def test_the_lazy_names_still_resolve():
    script = """
import json, sys
import astra_sim.chakra as chakra, astra_workload_compact as compact
before = [m for m in ("astra_sim.chakra.writer", "astra_workload_compact.memory", "astra_workload_compact.relabel")
          if m in sys.modules]
from astra_sim.chakra import writer
from astra_workload_compact import memory, relabel
names = {}
exec("from astra_sim.chakra import *", names)
try:
    chakra.no_such_name
    missing = False
except AttributeError:
    missing = True
print(json.dumps({"before": before, "writer": chakra.write_et is writer.write_et and chakra.encode_varint is
                  writer.encode_varint and names["make_node"] is writer.make_node,
                  "compact": compact.Relabeller is relabel.Relabeller and compact.trace_nodes is memory.trace_nodes,
                  "missing": missing}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == {"before": [], "writer": True, "compact": True, "missing": True}
