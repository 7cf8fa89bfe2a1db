"""docs/energy.md's examples (the power cap, the energy-optimal layout, the 100k-GPU site) print what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "energy.md"


def test_layout_example_prints_what_the_page_shows(tmp_path):
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Example: the energy-optimal layout", 1)[1]
    script, shown = re.search(r"python - <<'EOF'\n(.*?)\nEOF\n```\n\n```text\n(.*?)```", section, re.S).groups()
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown


@pytest.mark.slow
def test_search_example_prints_what_the_page_shows(tmp_path, monkeypatch, capsys):
    """astra search --objective energy (six layouts' bounds, five simulations: 10-45 s): the page's table and its
    worked numbers are the answer's."""
    import json
    import shlex

    from astra_sim.cli import main

    section = DOC.read_text(encoding="utf-8").split("## Example: the energy-optimal layout", 1)[1]
    section = section.split("## Example:", 1)[0]
    command = re.search(r"```sh\n(astra search .*?)```", section, re.S).group(1).replace("\\\n", " ")
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    argv = shlex.split(command)[1:]
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--no-progress"]) == 0
    answer = json.loads((tmp_path / "least.json").read_text())
    def timeless(text):  # the search says how long its simulations took
        return re.sub(r"\(\d+(?:\.\d+)? s\)", "(... s)", text)

    assert timeless(shown.splitlines()[0]) in timeless(capsys.readouterr().out)
    table = [line for line in shown.splitlines() if line.startswith("│ ")]
    assert len(table) == len(answer["ranked"])
    for line, row in zip(table, answer["ranked"]):  # the page's row i is the answer's: step, J, mJ/token, W
        cells = [c.strip() for c in line.strip("│").split("│")]
        assert cells[2:3] + cells[5:] == [f"{row['step_ns'] / 1e6:,.1f}", f"{row['it_energy_mj'] / 1e3:,.1f}",
                                         f"{row['it_energy_per_token_mj']:,.2f}", f"{row['mean_power_w_per_gpu']:,.0f}"]
    least, fastest = answer["ranked"][0], min(answer["ranked"], key=lambda r: r["step_ns"])
    assert f"8 x {least['step_ns'] / 1e6:.1f} ms x ({least['mean_power_w_per_gpu']:.0f} + 290) W = " \
           f"{least['it_energy_mj'] / 1e3:.1f} J" in section
    assert f"8 x {fastest['step_ns'] / 1e6:.1f} ms x ({fastest['mean_power_w_per_gpu']:.0f} + 290) W = " \
           f"{fastest['it_energy_mj'] / 1e3:.1f} J" in section
    (pruned,) = answer["pruned"]
    assert f"({pruned['bound_ns'] / 1e6:.1f} ms) = {8 * 370 * pruned['bound_ns'] / 1e9:.1f} J" in section


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
    # the 20 % cap bullet (560 W of 700 W)
    cap20 = simulate(workload=prefix, platform="hgx-h100", power_limit_w=560)
    e2 = cap20.stats["energy"]
    t0, t2 = free.max_finish_ns, cap20.max_finish_ns
    assert (f"GEMMs settle at {e2['clock_mhz']['gemm']:.0f} MHz and attention at {e2['clock_mhz']['attention']:.0f} "
            "MHz") in section
    assert f"{t0 / 1e6:.2f} ms -> {t2 / 1e6:.2f} ms ({100 * (t2 / t0 - 1):+.1f} %)" in section
    assert f"{e0['gpu_energy_mj'] / 1000:.1f} J -> {e2['gpu_energy_mj'] / 1000:.1f} J " \
           f"({100 * (e2['gpu_energy_mj'] / e0['gpu_energy_mj'] - 1):+.1f} %)" in section
    it0, it2 = e0["it_energy_per_token_mj"], e2["it_energy_per_token_mj"]
    assert f"{it0:.2f} -> {it2:.2f} mJ\n  ({100 * (it2 / it0 - 1):+.1f} %)" in section


@pytest.mark.slow
def test_site_example_prints_what_the_page_shows(tmp_path):
    """The 100k-GPU GB200 site (about 25 s of CPU: one folded rank of 100,008)."""
    section = DOC.read_text(encoding="utf-8").split("## Example: a 100k-GPU GB200 site at the wall", 1)[1]
    section = section.split("## Validation", 1)[0]
    commands = re.search(r"```sh\n(.*?)```", section, re.S).group(1).strip().splitlines()
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    from astra_sim import simulate
    from astra_workload_generators import LlmSpec, generate_llm_workload

    assert commands == ["astra workload llm --preset llama3-70b --tp 8 --dp 12501 --zero 1 --layers 4 --seq-len 8192 "
                        "--micro-batches 4 -o site",
                        "astra run --workload-configuration site --platform gb200-nvl72 --nodes 1389 -o site.json"]
    prefix = str(tmp_path / "site")
    generate_llm_workload(LlmSpec(preset="llama3-70b", tp=8, dp=12501, zero=1, layers=4, seq_len=8192,
                                  micro_batches=4), prefix)
    e = simulate(workload=prefix, platform="gb200-nvl72", nodes=1389).stats["energy"]
    assert e["gpus"] == 100008 and e["summary_line"] + "\n" == shown
    rest = sum(e["system_power_w_per_gpu"].values())
    assert rest == 390 and e["peak_power_w_cluster"] == pytest.approx(100008 * (1000 + rest))
    assert f"{e['peak_power_w_cluster'] / 1e6:.1f} MW IT, **{e['peak_power_w_cluster'] * 1.58 / 1e6:.1f} MW at the wall" in section
    assert f"{e['peak_power_w_cluster'] * 1.1 / 1e6:.1f} MW at a liquid-cooled" in section
    assert f"{e['mean_power_w_cluster'] / 1e6:.1f} MW IT, **{e['mean_power_w_cluster'] * 1.58 / 1e6:.1f} MW at the wall" in section
    assert f"GPUs average\n  {e['mean_power_w_per_gpu']:.0f} W" in section
