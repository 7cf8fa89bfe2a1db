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


#: the layouts of docs/energy.md's search: TP 2 with PP 1 (DP 4) or PP 2 (DP 2), or TP 8 (DP 1); micro-batches of 1
#: or 2 sequences of 512 tokens; no ZeRO (the checks of --objective energy and cost and --max-step-time-ms on them
#: were plugins/sweep/tests/test_search_objective.py's; one test with the page's search, CI margin)
LAYOUTS = ["search", "--preset", "llama2-7b", "--gpus", "8", "--platform", "hgx-h100", "--global-batch", "8",
           "--seq-len", "512", "--tp", "2,8", "--pp", "1,2", "--vp", "1", "--mbs", "1,2", "--zero", "0",
           "--recompute", "none", "--jobs", "1", "--no-progress"]
PRICES = Path(__file__).resolve().parents[3] / "examples" / "sweeps" / "gpu_prices.yaml"
SYSTEM_W = 290  # hgx-h100's host, NVSwitch and NIC power per GPU on one node (docs/energy.md's table: 200+50+40)
FLOOR_W = 81.9 + SYSTEM_W  # and the H100's idle power (data/power.json): what every GPU draws at least


def _layout(row):
    layout = row["layout"]
    return layout["tp"], layout["pp"], layout["micro-batch-size"]


@pytest.mark.slow
def test_search_example_prints_what_the_page_shows(tmp_path, monkeypatch, capsys):
    """astra search --objective energy (six layouts' bounds, five simulations: 10-45 s): the page's table and its
    worked numbers are the answer's.

    Then the same layouts (their points resumed) by cost and under --max-step-time-ms. On 8 H100s TP 2 PP 2 DP 2
    with micro-batches of 2 is both the fastest and the least-energy layout (its pipeline leaves GPUs idle at 81.9 W
    part of the step, and since Megatron's optimizer step around Adam is modelled, TP 2 DP 4's unsharded optimizer
    costs it more than the pipeline's wait: docs/energy.md). Energy does not rank as the step does: PP 2 with
    micro-batches of 1 is slower than TP 2 DP 4 with micro-batches of 2 but needs less energy, its GPUs drawing
    less. TP 8 with micro-batches of 1 is never simulated: its lower bound on the IT energy is above the best, its
    step's bound above the fastest step and above --max-step-time-ms 100, which ranks every other layout but the
    fastest out."""
    import json
    import shlex

    from astra_sim.cli import main
    from astra_sweep.objective import ROUNDING_SLACK_MJ_PER_GPU

    section = DOC.read_text(encoding="utf-8").split("## Example: the energy-optimal layout", 1)[1]
    section = section.split("## Example:", 1)[0]
    command = re.search(r"```sh\n(astra search .*?)```", section, re.S).group(1).replace("\\\n", " ")
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    argv = shlex.split(command)[1:]
    # the page's search is LAYOUTS' (but for --jobs) by energy, its points in points.csv
    assert argv == [*LAYOUTS[:-3], "--objective", "energy", "--points", "points.csv", "-o", "least.json"], argv
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--no-progress"]) == 0
    answer = json.loads((tmp_path / "least.json").read_text())
    def timeless(text):  # the search says how long its simulations took
        return re.sub(r"\(\d+(?:\.\d+)? s\)", "(... s)", text)

    text = capsys.readouterr().out
    assert timeless(shown.splitlines()[0]) in timeless(text)
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
    assert f"({pruned['bound_ns'] / 1e6:.1f} ms) = {8 * FLOOR_W * pruned['bound_ns'] / 1e9:.1f} J" in section

    # --objective energy's answer
    assert "least-energy layouts" in text and "IT mJ/" in text
    assert answer["units"] == {"time": "ns", "size": "bytes", "energy": "mJ", "power": "W"}
    assert answer["objective"] == "energy"
    ranked = answer["ranked"]
    for row in ranked:  # integer ns and mJ; energy per token = IT energy / the step's 8 x 512 tokens
        assert isinstance(row["step_ns"], int) and isinstance(row["it_energy_mj"], int)
        assert row["it_energy_per_token_mj"] == pytest.approx(row["it_energy_mj"] / 4096)
        # the hand check: IT energy = GPUs x step x (GPU mean power + the system's 290 W per GPU)
        assert row["it_energy_mj"] == pytest.approx(8 * row["step_ns"] * (row["mean_power_w_per_gpu"] + SYSTEM_W)
                                                    / 1e6, abs=8)
    assert [r["it_energy_mj"] for r in ranked] == sorted(r["it_energy_mj"] for r in ranked)
    assert _layout(least) == (2, 2, 2) and _layout(fastest) == (2, 2, 2)
    by_layout = {_layout(r): r for r in ranked}
    slower, faster = by_layout[(2, 2, 1)], by_layout[(2, 1, 2)]
    assert slower["step_ns"] > faster["step_ns"] and slower["it_energy_mj"] < faster["it_energy_mj"]
    # why: the slower layout's power is lower by more than its step is longer
    assert slower["mean_power_w_per_gpu"] + SYSTEM_W < (faster["mean_power_w_per_gpu"] + SYSTEM_W) * (
        faster["step_ns"] / slower["step_ns"])
    # pruned: a bound of at least the least energy over 8 x 371.9 W (idle GPU and system), plus the rounding slack
    assert [_layout(p) for p in answer["pruned"]] == [(8, 1, 1)]
    limit = (least["it_energy_mj"] + 8 * ROUNDING_SLACK_MJ_PER_GPU) * 1e6 / (8 * FLOOR_W)
    assert answer["pruned"][0]["bound_ns"] >= limit

    points = str(tmp_path / "points.csv")
    cost_json, bound_json = tmp_path / "cost.json", tmp_path / "bound.json"
    # cost per token ranks as the step does (one price, GPU count and batch); the same points are resumed
    assert main([*LAYOUTS, "--objective", "cost", "--prices", str(PRICES), "--points", points, "-o",
                 str(cost_json)]) == 0
    assert "$/M" in capsys.readouterr().out
    cost = json.loads(cost_json.read_text())
    assert cost["units"]["cost"] == "USD" and _layout(cost["ranked"][0]) == (2, 2, 2)
    dollars = [r["usd_per_million_tokens"] for r in cost["ranked"]]
    assert dollars == sorted(dollars) and [_layout(p) for p in cost["pruned"]] == [(8, 1, 1)]

    # the step-time bound: the slower layouts are ranked out, TP 8 with micro-batches of 1 by its lower bound
    assert main([*LAYOUTS, "--objective", "energy", "--max-step-time-ms", "100", "--points", points, "-o",
                 str(bound_json)]) == 0
    assert "5 layouts ranked out: slower than --max-step-time-ms 100 (1 of them by their lower bound, not " \
           "simulated)" in capsys.readouterr().out
    bound = json.loads(bound_json.read_text())
    assert bound["max_step_ns"] == 100_000_000 and [_layout(r) for r in bound["ranked"]] == [(2, 2, 2)]
    over = {_layout(o): o for o in bound["over_max_step_time"]}
    assert all(o.get("step_ns", o.get("bound_ns")) > 100_000_000 for o in over.values()) and (8, 1, 1) in over
    assert bound["pruned"] == []


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
