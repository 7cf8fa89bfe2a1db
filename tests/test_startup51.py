"""Start-up (issue 37, session 51): the gpu and systolic compute models, NCCL's and the load-store collectives and the
GPU platforms are imported only by a run that uses them (their plugins register factories that import the module;
the run hooks find the model's class in ``sys.modules``; the run options' choices live in
``astra_gpu_model.names`` since session 54)."""

from __future__ import annotations

import json
import subprocess
import sys

from astra_sim_testing import small_congestion_run_argv

MODELS = ["astra_gpu_model.model", "astra_gpu_model.ops", "astra_gpu_model.nccl", "astra_gpu_model.loadstore",
          "astra_gpu_model.platforms", "astra_compute_systolic.model", "astra_compute_systolic.cycles"]

SCRIPT = """
import json, sys
from astra_sim.cli import main
from astra_sim.report import read_report
code = main(sys.argv[2:])
report = read_report(sys.argv[3].split("=", 1)[1])
print(json.dumps({"code": code, "loaded": [m for m in json.loads(sys.argv[1]) if m in sys.modules],
                  "settings": sorted(report["settings"]), "finish": [r["finish_ns"] for r in report["ranks"]]}))
"""


def _run(tmp_path, *flags, algorithm="ring"):
    argv = small_congestion_run_argv(tmp_path, *flags, algorithm=algorithm)
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(MODELS), *argv], capture_output=True, text=True,
                         check=True, timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, out.stderr
    return result


def test_a_run_on_the_default_compute_model_imports_neither_model(tmp_path):
    result = _run(tmp_path, "--no-fold")
    assert result["loaded"] == [], f"a run without --compute-model gpu/systolic imported {result['loaded']}"
    assert "gpu_model" not in result["settings"] and "systolic_model" not in result["settings"]


def test_the_gpu_model_still_loads_and_reports_when_chosen(tmp_path):
    result = _run(tmp_path, "--compute-model=gpu")
    assert "astra_gpu_model.model" in result["loaded"]
    assert "gpu_model" in result["settings"]  # (run_finish found the model)
    assert len(set(result["finish"])) == 1 and result["finish"][0] > 0


def test_nccl_still_loads_when_a_system_config_names_it(tmp_path):
    result = _run(tmp_path, "--compute-model=gpu")
    nccl = _run(tmp_path, "--compute-model=gpu", algorithm="nccl")
    assert "astra_gpu_model.nccl" in nccl["loaded"] and "astra_gpu_model.loadstore" not in nccl["loaded"]
    assert nccl["finish"] != result["finish"]  # (NCCL's model timed the all-reduce, not the ring)
