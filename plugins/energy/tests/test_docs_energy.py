"""docs/energy.md's energy-optimal layout script runs and prints what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "energy.md"


def test_layout_example_prints_what_the_page_shows(tmp_path):
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Example: the energy-optimal layout", 1)[1]
    script = re.search(r"python - <<'EOF'\n(.*?)\nEOF\n```", section, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown


def test_power_cap_example_prints_what_the_page_shows(tmp_path):
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Example: a power cap on a training step", 1)[1].split("## Example:", 1)[0]
    commands = re.search(r"```sh\n(.*?)```", section, re.S).group(1).strip().splitlines()
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    from astra_sim import simulate
    from astra_workload_generators import LlmSpec, generate_llm_workload

    assert commands[0] == "astra workload llm --preset llama3-8b --tp 8 --layers 4 --seq-len 4096 --micro-batches 2 -o step"
    assert commands[2].endswith("--platform hgx-h100 --power-limit-w 450 -o capped.json")
    prefix = str(tmp_path / "step")
    generate_llm_workload(LlmSpec(preset="llama3-8b", tp=8, layers=4, seq_len=4096, micro_batches=2), prefix)
    free, capped = (simulate(workload=prefix, platform="hgx-h100", **options) for options in ({}, {"power_limit_w": 450}))
    e0, e1 = free.stats["energy"], capped.stats["energy"]
    assert e0["summary_line"] + "\n" + e1["summary_line"] + "\n" == shown
    # the worked numbers in the page's bullets
    assert f"{free.max_finish_ns / 1e6:.2f} ms -> {capped.max_finish_ns / 1e6:.2f} ms" in section
    assert f"{e0['gpu_energy_mj'] / 1000:.1f} J -> {e1['gpu_energy_mj'] / 1000:.1f} J" in section
    assert f"{e0['mean_power_w_per_gpu']:.0f} W -> {e1['mean_power_w_per_gpu']:.0f} W" in section
    assert f"{e0['gpu_energy_per_token_mj']:.2f} -> {e1['gpu_energy_per_token_mj']:.2f} mJ" in section
    assert f"{e0['it_energy_per_token_mj']:.2f} -> {e1['it_energy_per_token_mj']:.2f} mJ" in section
    assert f"{e1['clock_mhz']['gemm']:.0f} MHz" in section and f"{e1['clock_mhz']['attention']:.0f} MHz" in section
