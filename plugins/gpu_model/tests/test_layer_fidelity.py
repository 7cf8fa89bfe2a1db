"""The GPU model against whole transformer layers measured on a Hopper GPU (calibration/nvidia-h200-2026-11-26/
layer.csv: four layers, forward and backward, one TP rank, eleven configurations of GPT-3 13B/175B and Llama-3
8B/70B). The measured ``kernel_busy_us`` is the union of the step's kernels; the simulated one is the sum of
the layers' compute nodes of a user's run (``astra workload llm ... --layers 4`` then ``astra run --platform
hgx-h200``), its embedding, LM head, loss and optimizer left out as the measurement left them out. The measurement
ran one TP rank without communication (the calibration README), so the run has the gpu model's contention off
(``--gpu-contention-model off``): the simulated step's TP and DP collectives, which since Megatron's asynchronous
input-gradient all-reduce run beside the wgrad GEMMs, would otherwise slow kernels the measurement ran alone. None
of these numbers was fitted on (the GEMM model is fitted on Vidur's sweeps, the memory-bound rates on single ops).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from astra_sim.cli import main

LAYERS = Path(__file__).resolve().parents[1] / "calibration" / "nvidia-h200-2026-11-26" / "layer.csv"
ROWS = [r for r in csv.DictReader(open(LAYERS)) if r["mode"] == "eager"]


def simulated_layer_us(tmp_path, row):
    tp = int(re.search(r"tp(\d+)", row["config"]).group(1))
    llama = row["config"].startswith("llama")
    prefix, timeline = str(tmp_path / "w"), str(tmp_path / "t.json")
    assert main(["workload", "llm", "--preset", "llama3-70b" if llama else "gpt3-13b", "--layers", "4",
                 "--hidden", row["hidden"], "--heads", str(int(row["heads"]) * tp),
                 "--kv-heads", str(int(row["kv_heads"]) * tp), "--ffn-hidden", str(int(row["ffn"]) * tp),
                 "--head-dim", "128", "--seq-len", row["seq"], "--vocab", "64", "--tp", str(tp), "--dp", str(8 // tp),
                 "--micro-batches", "1", "--micro-batch-size", row["batch"], "-o", prefix]) == 0
    assert main(["run", "--platform", "hgx-h200", "--workload-configuration", prefix, "--timeline", timeline,
                 "--gpu-contention-model", "off", "-q"]) == 0
    events = json.loads(Path(timeline).read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    return sum(e["dur"] for e in events if e.get("ph") == "X" and e.get("pid") == 0 and e.get("cat") == "compute"
               and re.search(r"\.l\d+\.", e.get("name", "")))


@pytest.mark.parametrize("row", ROWS, ids=[r["config"] for r in ROWS])
def test_simulated_layers_match_the_measured_hopper_kernels(tmp_path, row):
    measured = float(row["kernel_busy_us"])
    assert simulated_layer_us(tmp_path, row) == pytest.approx(measured, rel=0.10)
