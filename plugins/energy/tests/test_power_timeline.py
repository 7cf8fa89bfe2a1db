"""--power-timeline: power over time as Chrome trace counters; its integral is the step's GPU energy."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import make_node, types as T
from astra_sim.cli import main as astra_main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_case

from astra_energy.power_timeline import cluster_steps

PLUGINS = ["network_analytical", "gpu_model", "energy", "workload_generators"]


def test_cluster_steps_add_the_classes_by_hand():
    a = [(0, 80.0), (10, 700.0), (30, 80.0)]
    b = [(0, 80.0), (20, 210.0), (40, 80.0)]
    assert cluster_steps([(2, a), (1, b)]) == [(0, 240.0), (10, 1480.0), (20, 1610.0), (30, 370.0), (40, 240.0)]


def integral_mj(steps, end_ns):
    total = 0.0
    for (t, w), (t_next, _) in zip(steps, steps[1:] + [(end_ns, 0)]):
        total += w * (t_next - t) / 1e6
    return total


def test_llm_step_timeline_integrates_to_the_step_energy(tmp_path):
    from astra_workload_generators import LlmSpec, generate_llm_workload

    prefix = str(tmp_path / "l")
    generate_llm_workload(LlmSpec(preset="llama3-8b", tp=8, layers=2, seq_len=2048, micro_batches=2), prefix)
    path = tmp_path / "power.json"
    report = simulate(workload=prefix, platform="hgx-h100", nodes=1, plugins=PLUGINS, power_timeline=str(path))
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {0: "cluster power (all GPUs)", 1: "ranks 0-7 power, each"}
    cluster = [(round(e["ts"] * 1000), e["args"]["W"]) for e in events if e["ph"] == "C" and e["pid"] == 0]
    assert max(w for _, w in cluster) == pytest.approx(8 * 700) and cluster[-1][1] == pytest.approx(8 * 81.9)
    energy = report.stats["energy"]["gpu_energy_mj"]
    # the lane shows the highest-power activity; the breakdown's parts give the same energy here
    assert integral_mj(cluster, report.max_finish_ns) == pytest.approx(energy, rel=1e-3)
    assert report.settings["power_timeline"]["tracks"] == 2


def test_cli_flag_and_its_errors(tmp_path, capsys):
    node = make_node(0, "aten::mm", T.COMP_NODE, duration_micros=1, attrs={
        "is_cpu_op": False, "inputs_shapes": "[[1024, 1024], [1024, 1024]]",
        "inputs_types": "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"})
    prefix, system, network = write_case(tmp_path, [node])
    args = ["run", "--workload-configuration", prefix, "--system-configuration", str(system),
            "--network-configuration", str(network)]
    out = tmp_path / "p.json"
    assert astra_main(args + ["--compute-model", "gpu", "--power-timeline", str(out)]) == 0
    counters = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "C"]
    # the cluster lane (pid 0: both GPUs at the GEMM's 700 W) and one lane per simulated rank (2 identical ranks
    # are not folded by 2: the planner's cost rule)
    assert {e["pid"] for e in counters} == {0, 1, 2}
    assert max(e["args"]["W"] for e in counters if e["pid"] == 0) == 1400
    capsys.readouterr()
    # replay: no power for the run, a warning and no file
    other = tmp_path / "q.json"
    report = simulate(prefix, system, network, plugins=PLUGINS, compute_model="replay", power_timeline=str(other))
    assert not other.exists() and any("--power-timeline" in w for w in report.warnings)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="--power-timeline"):
        simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu",
                 power_timeline=str(blocker / "p.json"))
