"""Whole runs: stats.energy in the report, a capped GEMM by hand, additivity, the options on the command line."""

from __future__ import annotations

import json
import math

import pytest

from astra_sim.chakra import make_node, types as T
from astra_sim.cli import main as astra_main
from astra_sim.errors import ConfigError
from astra_sim.metrics import undeclared
from astra_sim.simulation import simulate
from astra_sim_testing import write_case

from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import classify

PLUGINS = ["network_analytical", "gpu_model", "energy"]
BF16_PAIR = "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"
N = 8192  # a square bf16 GEMM this size is compute-bound on an H100


def gemm_case(tmp_path, n=N):
    node = make_node(0, "aten::mm", T.COMP_NODE, duration_micros=1,
                     attrs={"is_cpu_op": False, "inputs_shapes": f"[[{n}, {n}], [{n}, {n}]]", "inputs_types": BF16_PAIR})
    return write_case(tmp_path, [node])


def test_a_capped_compute_bound_gemm_by_hand(tmp_path):
    """450 W on an H100 (idle 81.9 W, GEMM 992.7 W at the boost clock, alpha 1.32): the GEMM is capped at the 700 W
    TDP too, so it runs at r = (368.1/618.1)^(1/1.32) = 0.6753 of the clock it runs at there (its boost power
    cancels), its compute time grows by 1/r and it draws 450 W instead of 700 W: energy per FLOP x 450 / (700 r) =
    0.9520 (a little less: the launch cost does not stretch)."""
    prefix, system, network = gemm_case(tmp_path)
    free = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu")
    capped = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu", options={"power_limit_w": 450})
    r = (368.1 / 618.1) ** (1 / 1.32)
    assert r == pytest.approx(0.6753, abs=1e-4)
    launch_ns = GpuComputeModel(None, "H100").gpu.gemm.launch_us * 1000
    t0, t1 = free.max_finish_ns, capped.max_finish_ns
    # the FLOP rate falls by r; the small HBM term of the GEMM model does not scale, and at the slower rate the
    # GEMM model's best split changes (split-K 4 in 63 waves instead of 16 whole waves, at the H100's sustained cap
    # of astra_gpu_model.power_clock), hence 0.6 %
    assert (t1 - launch_ns) == pytest.approx((t0 - launch_ns) / r, rel=8e-3)
    flops = 2 * 2 * N ** 3  # two ranks
    e0, e1 = free.stats["energy"], capped.stats["energy"]
    assert e0["class_power_w"]["gemm"] == pytest.approx(700) and e1["class_power_w"]["gemm"] == pytest.approx(450)
    assert e0["gpu_energy_mj"] == 2 * round(700 * t0 / 1e6)
    assert e1["gpu_energy_mj"] == 2 * round(450 * t1 / 1e6)
    per_flop0, per_flop1 = e0["gpu_energy_mj"] / flops, e1["gpu_energy_mj"] / flops
    assert per_flop1 < per_flop0
    assert per_flop1 / per_flop0 == pytest.approx(450 / (700 * r), rel=1e-2)
    assert 450 / (700 * r) == pytest.approx(0.9520, abs=1e-4)
    # the absolute clocks: 1476 MHz at 700 W (992.7 W at 1980 MHz capped to 700), 996 MHz at 450 W
    at_tdp = (618.1 / (992.7 - 81.9)) ** (1 / 1.32)
    assert e0["clock_mhz"]["gemm"] == pytest.approx(1980 * at_tdp, rel=1e-4)
    assert e1["clock_mhz"]["gemm"] == pytest.approx(1980 * at_tdp * r, rel=1e-4)
    assert capped.settings["gpu_model"]["clock_ratios"]["gemm"] == pytest.approx(r)
    assert "clock_ratios" not in free.settings["gpu_model"]
    assert e1["time_clock_ratio"]["gemm"] == pytest.approx(r)


def test_a_clock_lock_slows_compute_and_lowers_power(tmp_path):
    prefix, system, network = gemm_case(tmp_path)
    free = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu")
    locked = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu", options={"gpu_clock_mhz": 990})
    launch_ns = GpuComputeModel(None, "H100").gpu.gemm.launch_us * 1000
    # half the boost clock; unlocked at the 700 W TDP the GEMM runs at 1476 MHz (its 992.7 W boost power capped),
    # so the FLOP rate falls to 990 / 1476 (the GEMM model's HBM term does not scale)
    at_tdp = free.stats["energy"]["clock_ratio"]["gemm"]
    assert 1980 * at_tdp == pytest.approx(1980 * (618.1 / (992.7 - 81.9)) ** (1 / 1.32), rel=1e-4)
    slowdown = (locked.max_finish_ns - launch_ns) / (free.max_finish_ns - launch_ns)
    assert slowdown == pytest.approx(at_tdp / 0.5, rel=1e-2)
    assert locked.stats["energy"]["class_power_w"]["gemm"] == pytest.approx(81.9 + (992.7 - 81.9) * 0.5 ** 1.32,
                                                                            rel=1e-4)
    assert locked.stats["energy"]["gpu_clock_lock_mhz"] == 990


def test_other_plugins_find_the_class_powers_in_plugin_state(tmp_path):
    from astra_sim import hookimpl

    seen = {}

    class Watcher:
        @hookimpl
        def astra_run_finish(self, run):
            seen.update(run.plugin_state["energy"]["op_class_power_w"])

    prefix, system, network = gemm_case(tmp_path, n=256)
    simulate(prefix, system, network, plugins=PLUGINS, extra_plugins=[Watcher()], compute_model="gpu",
             options={"power_limit_w": 450})
    assert seen["gemm"] == pytest.approx(450) and seen["idle"] == 81.9
    # a saturated memory-bound kernel (572 W at the boost clock) is capped at 450 W too; comm (210 W) is not
    assert seen["elementwise"] == seen["other"] == pytest.approx(450) and seen["comm"] == pytest.approx(210)


def test_memory_bound_work_barely_slows_under_a_cap():
    model = GpuComputeModel(None, "H100")
    op = classify("aten::add", "[[8192, 8192], [8192, 8192]]", BF16_PAIR, "")
    before = model.op_seconds(op)
    model.set_clock_ratios({"gemm": 0.5, "attention": 0.5, "memory": 1.0})
    assert model.op_seconds(op) == before
    gemm = classify("aten::mm", f"[[{N}, {N}], [{N}, {N}]]", BF16_PAIR, "")
    slow = model.op_seconds(gemm)
    model.set_clock_ratios({})
    assert slow > 1.9 * model.op_seconds(gemm)
    with pytest.raises(ValueError):
        model.set_clock_ratios({"gemm": 1.5})


def test_llm_step_energy_adds_up_and_is_declared(tmp_path):
    from astra_workload_generators import LlmSpec, generate_llm_workload

    prefix = str(tmp_path / "l")
    generate_llm_workload(LlmSpec(preset="llama3-8b", tp=8, layers=2, seq_len=2048, micro_batches=2), prefix)
    report = simulate(workload=prefix, platform="hgx-h100", nodes=1, plugins=PLUGINS + ["workload_generators"])
    e = report.stats["energy"]
    assert e["gpu_energy_mj"] == sum(e["by_part_mj"].values()) == e["by_component_mj"]["gpu"]
    assert e["it_energy_mj"] == sum(e["by_component_mj"].values())
    assert e["facility_energy_mj"] == round(e["it_energy_mj"] * 1.58)
    # each rank's parts at their class's power, recomputed from the report's breakdown; memory-bound ops (elementwise)
    # at their achieved HBM bandwidth's share of the copy's power, between idle and the class (astra_energy.utilisation)
    watts = e["class_power_w"]
    classes = {"compute:gemm": "gemm", "compute:attention": "attention", "compute:elementwise": "memory",
               "idle": "idle"}
    for part, mj in e["by_part_mj"].items():
        cls = "comm" if part.startswith("exposed") else classes.get(part, "idle")
        ns = sum(r.breakdown["parts"].get(part, 0) for r in report.ranks)
        if part == "compute:elementwise":
            assert watts["idle"] * ns / 1e6 < mj < watts[cls] * ns / 1e6
        else:
            assert abs(mj - watts[cls] * ns / 1e6) <= len(report.ranks), part
    tokens = report.stats["throughput"]["tokens_per_step"]
    assert e["gpu_energy_per_token_mj"] == pytest.approx(e["gpu_energy_mj"] / tokens)
    assert 80 < e["mean_power_w_per_gpu"] < 700 and e["peak_power_w_per_gpu"] == 700
    assert e["mean_power_w_per_node"] == pytest.approx(e["it_energy_mj"] * 1e6 / report.max_finish_ns)
    assert undeclared(report.to_dict()) == []
    assert e["summary_line"].startswith("energy: ")


def test_platforms_choose_the_system_and_node_size(tmp_path):
    from astra_workload_generators import LlmSpec, generate_llm_workload

    prefix = str(tmp_path / "l")
    generate_llm_workload(LlmSpec(preset="llama3-8b", tp=8, dp=2, layers=1, seq_len=1024), prefix)
    plugins = PLUGINS + ["workload_generators"]
    for platform, system, nvswitch in (("hgx-h100", "default", 50), ("dgx-a100", "dgx-a100", 40), ("mi300x", "mi300x", 0)):
        e = simulate(workload=prefix, platform=platform, nodes=2, plugins=plugins).stats["energy"]
        assert (e["system"], e["nodes"], e["gpus_per_node"], e["gpus"]) == (system, 2, 8, 16)
        assert e["system_power_w_per_gpu"]["nvswitch"] == nvswitch
        assert e["system_power_w_per_gpu"]["network_switches"] > 0  # two nodes: the scale-out fabric counts


def test_runs_without_the_gpu_model_have_no_energy_and_refuse_caps(tmp_path):
    prefix, system, network = gemm_case(tmp_path, n=64)
    replay = simulate(prefix, system, network, plugins=PLUGINS, compute_model="replay")
    assert "energy" not in replay.stats
    with pytest.raises(ConfigError, match="--power-limit-w"):
        simulate(prefix, system, network, plugins=PLUGINS, compute_model="replay", options={"power_limit_w": 400})
    with pytest.raises(ConfigError, match="--power-limit-w 800"):
        simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu", options={"power_limit_w": 800})
    for bad in (0.5, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="--pue"):
            simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu", options={"pue": bad})


def test_cli_flags_end_to_end(tmp_path, capsys):
    prefix, system, network = gemm_case(tmp_path, n=4096)
    out = tmp_path / "r.json"
    rc = astra_main(["run", "--workload-configuration", prefix, "--system-configuration", str(system),
                     "--network-configuration", str(network), "--compute-model", "gpu", "--power-limit-w", "500",
                     "--gpu-clock-mhz", "1800", "--pue", "1.2", "-o", str(out)])
    assert rc == 0
    e = json.loads(out.read_text())["stats"]["energy"]
    assert e["power_limit_w"] == 500 and e["gpu_clock_lock_mhz"] == 1800 and e["pue"] == 1.2
    assert e["class_power_w"]["gemm"] == pytest.approx(500)
    assert e["clock_mhz"]["comm"] == pytest.approx(1800)  # the lock (210 W is under the limit)
    # memory (572 W at the boost clock) settles under the lock at 500 W
    assert e["clock_mhz"]["memory"] == pytest.approx(1980 * (418.1 / 490.1) ** (1 / 1.32))
    capsys.readouterr()
    rc = astra_main(["run", "--workload-configuration", prefix, "--system-configuration", str(system),
                     "--network-configuration", str(network), "--compute-model", "gpu", "--gpu-clock-mhz", "5000"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "--gpu-clock-mhz 5000" in err and "1980" in err
    assert math.isfinite(e["mean_power_w_per_gpu"])
