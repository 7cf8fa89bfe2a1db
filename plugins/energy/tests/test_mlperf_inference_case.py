"""The MLPerf Inference v4.0 power case (NVIDIA's 8x H100 MaxQ system, GPT-J Offline, GPUs limited to 350 W): the
cap reaches the simulation through the case's options, and the node power it gives is the capped GPUs plus the rest
of the system, within the case's error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from astra_sim.errors import ConfigError

from astra_energy.cases import evaluate, load_cases, parse_cases

NAME = "mlperf-inference-v4.0-nvidia-gptj-offline-maxq-8xh100-node-power"


def _case():
    return next(c for c in load_cases() if c.name == NAME)


def test_the_case_runs_under_its_power_limit_and_is_within_ten_percent():
    case = _case()
    assert case.options == {"power_limit_w": 350} and case.quantity == "mean_power_w_per_node"
    row = evaluate(case)
    # by hand: 8 GPUs at most at their 350 W limit, plus hgx-h100's 290 W per GPU beside them (one node)
    assert row["simulated"] <= 8 * (350 + 290) + 1e-6
    assert abs(row["error"]) < 0.10, row
    # the limit matters: unlimited, the GEMMs draw the 700 W TDP and attention 686.9 W
    free = evaluate(replace(case, options={}))
    assert free["simulated"] > row["simulated"] + 8 * 100


def test_options_must_be_a_mapping():
    good = {"name": "a", "source": "s", "quantity": "mean_power_w_per_gpu", "measured": 500, "platform": "hgx-h100",
            "llm": {"preset": "llama3-8b"}, "options": {"power_limit_w": 450}}
    assert parse_cases({"cases": [good]})[0].options == {"power_limit_w": 450}
    with pytest.raises(ConfigError, match="key 'options' has the wrong type"):
        parse_cases({"cases": [dict(good, options=450)]})
