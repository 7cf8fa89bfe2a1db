"""The time scale: a 10,000-GPU cluster with 20 jobs over 7 simulated days finishes in minutes."""

import random

import pytest

from astra_cluster import run_cluster


def week_spec():
    rng = random.Random(1)
    jobs = []
    for i in range(20):
        dp = rng.choice([8, 16, 32, 64, 128])
        jobs.append(f"  - {{name: j{i}, gpus: {8 * dp}, steps: {rng.choice([20000, 50000, 100000])}, "
                    f"arrival_s: {rng.randint(0, 3 * 86400)}, "
                    f"workload: {{llm: {{preset: llama3-8b, tp: 8, dp: {dp}}}}}}}")
    return ("platform: hgx-h100\nnodes: 1250\nplacement: topology\nscheduler: backfill\ncorun: false\n"
            "failures: {node_mtbf_h: 20000, repair_h: 24}\n"
            "checkpoint: {restart_s: 300, write_gb_per_s: 50, read_gb_per_s: 50}\nhorizon_h: 168\njobs:\n"
            + "\n".join(jobs) + "\n")


@pytest.mark.slow
def test_a_week_of_ten_thousand_gpus_in_minutes(tmp_path, write_spec):
    out = run_cluster(write_spec(tmp_path, week_spec()))
    assert out["cluster"]["gpus"] == 10_000
    timeline = out["timeline"]
    assert timeline["jobs_done"] == 20 and timeline["failures"] >= 1
    assert out["distinct_steps_simulated"] <= 10  # five workloads, each packed the same way wherever it lands
    assert out["wall_s"] < 600
