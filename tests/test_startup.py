"""Start-up stays cheap (issue 37): a run that needs no LLM generator, no time fold and no gpu model imports none
of them, nor numpy, although every installed plugin's hooks load. Measured on the folded 4096-rank all-reduce:
0.46 -> 0.23 s of imports (``python -X importtime``)."""

from __future__ import annotations

import json
import subprocess
import sys

from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
from astra_sim_testing import system_config

HEAVY = ["numpy", "astra_workload_generators.llm", "astra_workload_generators.micro", "astra_workload_generators.text",
         "astra_folding.time_fold", "astra_energy.power", "astra_workload_compact.expand"]

SCRIPT = """
import json, sys
from astra_sim.cli import main
code = main(sys.argv[2:])
print(json.dumps({"code": code, "loaded": [m for m in json.loads(sys.argv[1]) if m in sys.modules]}))
"""


def test_a_plain_run_imports_no_heavy_module(tmp_path):
    node = make_node(0, "all_reduce", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20})
    data = encode_et(make_metadata(), [node])
    for rank in range(8):
        (tmp_path / f"w.{rank}.et").write_bytes(data)
    (tmp_path / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps(system_config(dims=1)))
    argv = ["run", "-q", f"--workload-configuration={tmp_path / 'w'}", f"--system-configuration={tmp_path / 'sys.json'}",
            f"--network-configuration={tmp_path / 'net.yml'}"]
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(HEAVY), *argv], capture_output=True, text=True,
                         check=True, timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, out.stderr
    assert result["loaded"] == [], f"a plain run imported {result['loaded']}"
