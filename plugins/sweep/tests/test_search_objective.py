"""astra search --objective time|energy|cost and --max-step-time-ms: the energy-optimal layout is not always the
fastest, the step-time bound ranks layouts out (those whose lower bound exceeds it without simulating them), the
energy bound used for pruning is a lower bound, and the JSON keeps integer ns and mJ with its units."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sweep.derived import parse_prices
from astra_sweep.objective import ROUNDING_SLACK_MJ_PER_GPU, Objective, energy_floor_w_per_gpu

PRICES = Path(__file__).resolve().parents[3] / "examples" / "sweeps" / "gpu_prices.yaml"
SYSTEM_W = 290  # hgx-h100's host, NVSwitch and NIC power per GPU on one node (docs/energy.md's table: 200+50+40)


def _row(step_ms, gpu_w, gpus=8):
    """A simulated row whose IT energy is what the energy plugin would give: GPUs x step x (GPU mean + system)."""
    step_ns = int(step_ms * 1e6)
    it_mj = round(gpus * step_ns * (gpu_w + SYSTEM_W) / 1e6)
    return {"status": "ok", "step_ns": step_ns, "it_energy_mj": it_mj, "mean_power_w_per_gpu": gpu_w,
            "tokens_per_s_per_gpu": 4096 / (step_ns / 1e9) / gpus}


def test_the_fastest_layout_is_not_the_least_energy_one_by_hand():
    """A: 100 ms at 600 W per GPU; B: 110 ms at 400 W (its GPUs idle more). IT energy: 8 x 0.100 s x 890 W =
    712 J against 8 x 0.110 s x 690 W = 607.2 J: time picks A, energy B; a 105 ms bound ranks B out."""
    a, b = _row(100, 600), _row(110, 400)
    assert (a["it_energy_mj"], b["it_energy_mj"]) == (712000, 607200)
    fastest = min((a, b), key=Objective("time").key)
    energy = Objective("energy", gpus=8, floor_w_per_gpu=370)
    assert fastest is a and min((a, b), key=energy.key) is b
    bounded = Objective("energy", max_step_ns=105_000_000, gpus=8, floor_w_per_gpu=370)
    assert bounded.key(b) is None and bounded.key(a) == (712000, 100_000_000)
    assert not bounded.meets_bound(105_000_001) and bounded.meets_bound(105_000_000)


def test_the_energy_limit_by_hand():
    """A layout whose step is at least L draws at least 8 x 370 W x L, less the rounding slack: it cannot beat
    607.2 J once 8 x 370 x L / 1e6 - 8 x 32 mJ >= 607,200 mJ, i.e. L >= 205.22 ms."""
    energy = Objective("energy", gpus=8, floor_w_per_gpu=370)
    best = _row(110, 400)
    expected = math.ceil((607200 + 8 * ROUNDING_SLACK_MJ_PER_GPU) * 1e6 / (8 * 370))
    assert energy.limit_ns(best) == expected and 205_000_000 < expected < 205_300_000
    assert energy.limit_ns(None) is None
    assert Objective("time").limit_ns(best) == 110_000_000
    # the step-time bound alone: a layout whose bound is above it cannot meet it
    assert Objective("time", max_step_ns=50_000_000).limit_ns(None) == 50_000_001
    assert Objective("time", max_step_ns=50_000_000).limit_ns(best) == 50_000_001


def test_cost_ranks_as_time_and_reuses_the_sweeps_price_table():
    table = parse_prices({"prices": {"hgx-h100": {"usd_per_gpu_hour": 3.6, "source": "a test's price"}}}, "p.yaml")
    cost = Objective("cost", prices=table, platform="hgx-h100")
    a, b = _row(100, 600), _row(110, 400)
    assert min((b, a), key=cost.key) is a
    # 8 GPUs x 0.1 s at $3.6/GPU-hour for 4096 tokens: 8 x 0.1 x 0.001 / 4096 dollars per token
    assert cost.columns(a)["usd_per_million_tokens"] == pytest.approx(8 * 0.1 * 0.001 / 4096 * 1e6)
    with pytest.raises(ConfigError, match="--objective cost needs --prices"):
        Objective("cost", platform="hgx-h100")
    with pytest.raises(ConfigError, match="p.yaml: no price for hgx-b200"):
        Objective("cost", prices=table, platform="hgx-b200")


def test_a_points_file_of_the_other_kind_is_refused():
    with_energy, without = {1: {"status": "ok", "it_energy_mj": 5}}, {1: {"status": "ok", "it_energy_mj": None}}
    Objective("energy", gpus=8, floor_w_per_gpu=370).check_resumed(with_energy, "p.csv")
    Objective("time").check_resumed(without, "p.csv")
    with pytest.raises(ConfigError, match="--points p.csv: .*without a breakdown"):
        Objective("energy", gpus=8, floor_w_per_gpu=370).check_resumed(without, "p.csv")
    with pytest.raises(ConfigError, match="--points p.csv: .*for --objective energy or cost"):
        Objective("time").check_resumed(with_energy, "p.csv")


def test_the_energy_floor_is_below_a_simulated_step(tmp_path):
    """The pruning bound (GPUs x (idle + system power) x step - slack) is below the simulated IT energy, the floor
    is the energy plugin's idle and system power, and a rank's breakdown has fewer parts than the slack allows."""
    from astra_sim import simulate
    from astra_sim.platforms import get_platform
    from astra_workload_generators import LlmSpec, generate_llm_workload

    prefix = str(tmp_path / "w")
    generate_llm_workload(LlmSpec(preset="llama2-7b", layers=2, seq_len=256, tp=2, pp=2, dp=2, micro_batches=2), prefix)
    report = simulate(workload=prefix, platform="hgx-h100")
    e = report.stats["energy"]
    floor = energy_floor_w_per_gpu(get_platform("hgx-h100"), 8)
    assert floor == e["idle_power_w"] + sum(e["system_power_w_per_gpu"].values()) == 81.9 + SYSTEM_W  # the H100's idle power (astra_energy data/power.json)
    lower = 8 * floor * report.max_finish_ns / 1e6 - 8 * ROUNDING_SLACK_MJ_PER_GPU
    assert lower < e["it_energy_mj"]
    assert max(len(r.breakdown["parts"]) for r in report.ranks) + 1 < 2 * ROUNDING_SLACK_MJ_PER_GPU


def test_a_mixed_recompute_axis_is_read_back_from_parquet(tmp_path, capsys):
    """--recompute none,full: the Parquet column mixes False and "full" and is stored as text; both layouts are
    ranked (they were lost from the ranking before layouts' keys compared as text)."""
    out = tmp_path / "a.json"
    assert main(["search", "--preset", "llama2-7b", "--gpus", "8", "--platform", "hgx-h100", "--global-batch", "8",
                 "--seq-len", "256", "--tp", "1", "--pp", "1", "--mbs", "1", "--zero", "1", "--recompute", "none,full",
                 "--jobs", "1", "--no-progress", "--exhaustive", "--points", str(tmp_path / "p.parquet"),
                 "-o", str(out)]) == 0
    ranked = json.loads(out.read_text())["ranked"]
    assert sorted(str(r["layout"]["recompute"]) for r in ranked) == ["False", "full"]


# test_energy_cost_and_the_step_time_bound_end_to_end (--objective energy and cost, --max-step-time-ms, on Llama 2 7B's
# layouts over 8 H100s) runs in plugins/energy/tests/test_docs_energy.py: its first search is docs/energy.md's
# example, the same layouts, so the two tests are one (CI margin: five simulations fewer).


def test_flags_are_checked_in_one_line(tmp_path, capsys):
    base = ["search", "--preset", "llama2-7b", "--gpus", "8", "--platform", "hgx-h100", "--global-batch", "8",
            "--seq-len", "256", "--tp", "1", "--pp", "1", "--mbs", "1", "--zero", "1", "--recompute", "none",
            "--jobs", "1", "--no-progress"]
    assert main([*base, "--objective", "cost"]) == 2
    assert "--objective cost needs --prices" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse's error
        main([*base, "--max-step-time-ms", "0"])
    assert exited.value.code == 2 and "--max-step-time-ms: expected a number > 0" in capsys.readouterr().err
    missing = tmp_path / "none.yaml"
    assert main([*base, "--prices", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert main([*base, "--max-step-time-ms", "1"]) == 2  # every layout's lower bound is above 1 ms
    err = capsys.readouterr().err
    assert "--max-step-time-ms 1: no layout can meet it" in err and len(err.strip().splitlines()) == 1
    assert main(["search", "--serve", "--preset", "llama2-7b", "--platform", "hgx-h100", "--objective",
                 "energy"]) == 2
    assert "--objective energy is for training layouts" in capsys.readouterr().err
