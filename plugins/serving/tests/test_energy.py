"""Serving energy (energy.py): each iteration's IT energy split over its requests by their tokens, idle power
between iterations, the integer mJ of the requests summing to the run's total; the step energies interpolated as
the times are; astra serve's terminal line, JSON and CSV column."""

import csv
import dataclasses
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_serving.cluster import Cluster
from astra_serving.energy import EnergyMeter, apportion
from astra_serving.engine import Engine, EngineConfig
from astra_serving.kvcache import BlockManager
from astra_serving.requests import Request
from astra_serving.stepcache import StepEnergy
from astra_serving.steptime import Layout, StepTimer
from astra_sim.cli import main


class WattTimer:
    """A stand-in step: 1 ms + 10 us per prefill token + 20 us per decode sequence, drawing 700 W (0.0007 mJ per
    ns); the replica idles at 100 W."""

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        return 1_000_000 + 10_000 * prefill + 20_000 * decode

    def energy_mj(self, prefill, decode, context, prefill_done=0, graph=False):
        return 0.0007 * self.step_ns(prefill, decode, context, prefill_done, graph)

    def idle_mw(self):
        return 100_000


class LinearTransfer:
    def transfer_ns(self, nbytes):
        return 10_000 + nbytes // 100


class Corners(dict):
    """Stand-in simulated corners' times: a fixed pseudo-random time per shape, one stage."""

    def get(self, key, default=None):
        return (random.Random(repr(key)).randrange(10 ** 5, 10 ** 8),)


def run(requests, replicas=1, fast=True, disaggregate=False, **config):
    """Serve copies of ``requests`` on WattTimer replicas with an energy meter; (requests, energy report)."""
    timer = WattTimer()
    reqs = [dataclasses.replace(r) for r in requests]

    def engines(first, role):
        return [Engine(first + i, timer, BlockManager(200, 4), EngineConfig(role=role, **config), 1000)
                for i in range(replicas)]

    if disaggregate:
        cluster = Cluster(engines(0, "prefill"), "least-loaded", engines(replicas, "decode"), LinearTransfer(), 1000)
    else:
        cluster = Cluster(engines(0, "both"), "round-robin")
    cluster.fast_forward = fast
    cluster.meter = EnergyMeter(min(r.arrival_ns for r in reqs))
    cluster.run(reqs)
    energy = cluster.meter.finish(reqs, cluster.engines + cluster.decode_engines, max(r.finish_ns for r in reqs))
    return reqs, energy


def test_a_mixed_iteration_is_split_by_tokens_by_hand():
    """A (30-token prompt) and B (10) arrive at 0, 2 output tokens each; A's arrival starts the replica alone:
    iteration 1 prefills A (1.3 ms, 910 mJ); iteration 2 decodes A and prefills B (1.12 ms, 784 mJ: 1/11 to A,
    10/11 to B); iteration 3 decodes B (1.02 ms, 714 mJ). A: 981.27 mJ, B: 1426.73 mJ, 2408 mJ in all."""
    reqs, energy = run([Request(0, 0, 30, 2), Request(1, 0, 10, 2)])
    assert [r.energy_mj for r in reqs] == [981, 1427]
    assert [r.energy_share_mj for r in reqs] == pytest.approx([910 + 784 / 11, 784 * 10 / 11 + 714])
    assert energy["it_energy_mj"] == 2408 and energy["idle_energy_mj"] == 0
    assert energy["it_energy_per_output_token_mj"] == 2408 / 4
    assert energy["mean_power_w"] == pytest.approx(700.0)  # busy throughout
    assert energy["per_request_mj"]["max"] == 1427


def test_the_idle_gap_goes_to_the_iteration_after_it_by_hand():
    """A (30 tokens, 2 out) at 0 runs 1.3 ms (910 mJ) and 1.02 ms (714 mJ), done at 2.32 ms; B (10 tokens) arrives
    at 5 ms: the replica idled 2.68 ms at 100 W (268 mJ), then 1.1 ms (770 mJ) and 1.02 ms (714 mJ)."""
    reqs, energy = run([Request(0, 0, 30, 2), Request(1, 5_000_000, 10, 2)])
    assert [r.energy_mj for r in reqs] == [910 + 714, 268 + 770 + 714]
    assert energy["it_energy_mj"] == 3376 and energy["idle_energy_mj"] == 268
    assert energy["idle_power_w_per_replica"] == 100


def test_a_replica_idle_after_its_last_iteration_is_split_over_every_request():
    """Two replicas, round-robin: replica 1 serves B (at 0), replica 0 A; replica 1 idles from B's end to A's, and
    that idle is split over both requests by their tokens."""
    reqs, energy = run([Request(0, 0, 300, 2), Request(1, 0, 10, 2)], replicas=2)
    a_end, b_end = reqs[0].finish_ns, reqs[1].finish_ns
    tail = 100_000 * (a_end - b_end) * 1e-9
    busy = 0.0007 * (a_end + b_end)  # each replica busy from 0 to its request's end
    assert energy["it_energy_mj"] == round(busy + tail)
    assert reqs[0].energy_mj == pytest.approx(0.0007 * a_end + tail * 302 / 314, abs=1)


@settings(max_examples=60, deadline=None)
@given(total=st.integers(0, 10 ** 9), shares=st.lists(st.floats(0, 1e9), min_size=1, max_size=30))
def test_apportion_sums_to_the_total_within_one_of_each_share(total, shares):
    out = apportion(total, shares)
    assert sum(out) == total and all(type(v) is int for v in out)
    whole = sum(shares)
    scaled = [s * total / whole for s in shares] if whole > 0 else [total / len(shares)] * len(shares)
    assert all(abs(v - s) < 1 + 1e-6 * max(1.0, s) for v, s in zip(out, scaled))


arrivals = st.lists(st.tuples(st.integers(0, 20_000_000), st.integers(1, 200), st.integers(1, 60)),
                    min_size=1, max_size=15)


@settings(max_examples=60, deadline=None)
@given(rows=arrivals, replicas=st.integers(1, 2), budget=st.integers(8, 256), seqs=st.integers(1, 8),
       disaggregate=st.booleans(), steps=st.sampled_from([1, 1, 3]))
def test_the_requests_energies_sum_to_the_runs_total(rows, replicas, budget, seqs, disaggregate, steps):
    """Over small arrival patterns: the requests' integer mJ sum to the total exactly, the total is the iterations'
    energy and the replicas' idle power over the run, and the lazy decoders give each request what the plain loop
    gives (within float rounding)."""
    requests = [Request(i, a, p, o) for i, (a, p, o) in enumerate(sorted(rows))]
    config = dict(max_num_batched_tokens=budget, max_num_seqs=seqs, num_scheduler_steps=steps)
    fast, energy = run(requests, replicas, True, disaggregate, **config)
    plain, plain_energy = run(requests, replicas, False, disaggregate, **config)
    assert sum(r.energy_mj for r in fast) == energy["it_energy_mj"] == plain_energy["it_energy_mj"]
    assert all(r.energy_mj >= 0 for r in fast)
    for a, b in zip(fast, plain):
        assert a.energy_share_mj == pytest.approx(b.energy_share_mj, rel=1e-9, abs=1e-6)
        assert (a.first_token_ns, a.finish_ns) == (b.first_token_ns, b.finish_ns)
    # the whole run's power: every replica busy at 700 W or idle at 100 W from the first arrival to the last end
    span = max(r.finish_ns for r in fast) - min(r.arrival_ns for r in fast)
    engines = replicas * (2 if disaggregate else 1)
    assert 1e-4 * span * engines - 1 <= energy["it_energy_mj"] <= 7e-4 * span * engines + 1  # mJ per ns


class EnergyCorners(dict):
    """Stand-in simulated corners' energies: a fixed pseudo-random StepEnergy per shape, on 8 GPUs."""

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return StepEnergy(random.Random(repr(key)).randrange(10 ** 3, 10 ** 7), 8, 2_000_000)


@settings(max_examples=100, deadline=None)
@given(prefill=st.integers(0, 9000), decode=st.integers(0, 300), context=st.integers(1, 9000))
def test_the_step_energy_is_interpolated_as_the_time(trilinear, prefill, decode, context):
    """energy_mj is the trilinear sum of the corners' energies with the time's weights, scaled to the replica's
    share of the simulated GPUs (TP 2 of 8)."""
    if prefill == decode == 0:
        decode = 1
    timer = StepTimer(Layout({"model": "x"}, "p", tp=2), cache=False)
    timer.memo, timer.energy_memo = Corners(), EnergyCorners()
    total = trilinear(prefill, decode, context, lambda key: timer.energy_memo[key].it_energy_mj)
    assert timer.energy_mj(prefill, decode, context) == pytest.approx(total * 2 / 8, rel=1e-12)
    timer.energy_memo = {(1, 0, 0, 0, False): None, (2, 0, 0, 0, False): StepEnergy(5, 8, 2_000_000)}
    assert timer.idle_mw() == 2_000_000 * 2 // 8  # the replica's share of the simulated GPUs' idle power


def test_astra_serve_shows_joules_per_request_and_keeps_integer_mj(tmp_path, capsys):
    """End to end: the terminal line in J, the report's energy in integer mJ, the CSV's energy_mj column summing to
    the total; mean power within the GPUs' idle and peak with the rest of the system."""
    report, rows = tmp_path / "r.json", tmp_path / "r.csv"
    assert main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--tp", "8", "--qps", "4",
                 "--requests", "12", "-o", str(report), "--requests-csv", str(rows)]) == 0
    out = capsys.readouterr().out
    line = [x for x in out.splitlines() if x.startswith("energy: ")]
    assert len(line) == 1 and " J IT; per request p50 " in line[0] and "J per output token" in line[0]
    energy = json.loads(report.read_text())["energy"]
    assert type(energy["it_energy_mj"]) is int and type(energy["idle_energy_mj"]) is int
    assert all(type(v) is int for v in energy["per_request_mj"].values())
    with open(rows) as handle:
        per_request = [int(r["energy_mj"]) for r in csv.DictReader(handle)]
    assert len(per_request) == 12 and sum(per_request) == energy["it_energy_mj"]
    # 8 H100s on one node: idle 81.9 W + 290 W beside each GPU (host 200, NVSwitch 50, NIC 40: the energy
    # plugin's power.json, default system), at most 700 W + 290 W
    assert energy["idle_power_w_per_replica"] == pytest.approx(8 * (81.9 + 290))
    assert 8 * 371.9 <= energy["mean_power_w"] <= 8 * 990
