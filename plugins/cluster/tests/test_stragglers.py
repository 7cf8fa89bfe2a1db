"""Stragglers: the slowed compute model, seeded factor draws, and the step-time distribution."""

import random

import astra_sim
import pytest
from astra_sim.errors import ConfigError
from astra_workload_generators import generate_micro

from astra_cluster import run_cluster
from astra_cluster.slowed import SlowedComputeModel, check_factors
from astra_cluster.spec import StragglerSpec
from astra_cluster.stragglers import draw_factors, percentile


class _Fixed:
    foldable = True

    def compute_time_ns(self, node, rank):
        return 1000

    def op_class(self, node, rank):
        return "gemm"


def test_slowed_scales_only_its_ranks_and_does_not_fold():
    model = SlowedComputeModel(_Fixed(), {1: 1.5})
    assert [model.compute_time_ns(None, rank) for rank in (0, 1)] == [1000, 1500]
    assert model.op_class(None, 1) == "gemm"  # the inner model's other answers stay
    assert not model.foldable
    assert SlowedComputeModel(_Fixed(), {}).foldable


@pytest.mark.parametrize("factors", [[1.5], {"x": 1.5}, {1: 0}, {1: True}, {-1: 2.0}])
def test_bad_factors_are_refused(factors):
    with pytest.raises(ConfigError, match="slowed_factors"):
        check_factors(factors, "option slowed_factors")


def test_slowed_through_simulate_on_replay(ring):
    generate_micro(ring / "c", npus=8, compute=100)
    common = dict(workload=str(ring / "c"), system=str(ring / "sys.json"), network=str(ring / "net.yml"))
    report = astra_sim.simulate(**common, compute_model="slowed",
                                options={"slowed_inner": "replay", "slowed_factors": {3: 2.0}})
    finish = {rank.rank: rank.finish_ns for rank in report.ranks}
    assert finish[3] == 2 * finish[0] == 200_000


def test_slowed_without_its_inner_model_is_a_clear_error(ring):
    generate_micro(ring / "c", npus=8, compute=100)
    with pytest.raises(ConfigError, match="slowed_inner"):
        astra_sim.simulate(workload=str(ring / "c"), system=str(ring / "sys.json"),
                           network=str(ring / "net.yml"), compute_model="slowed")


def test_draws_follow_the_seed_and_the_clip():
    spec = StragglerSpec(sigma=0.2, draws=1, min_factor=1.0, slow_gpus={5: 3.0})
    a = draw_factors(spec, range(8), random.Random(7))
    b = draw_factors(spec, range(8), random.Random(7))
    assert a == b and a[5] == 3.0
    assert all(f >= 1.0 for f in a.values())
    table = StragglerSpec(table=[1.0, 1.25], draws=1)
    assert set(draw_factors(table, range(64), random.Random(1)).values()) == {1.25}


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50, 95, 99)
    assert percentile([7], 99) == 7


STRAGGLING = """
system: sys.json
network: net.yml
jobs:
  - {{name: c, gpus: 8, workload: {{micro: {{compute: 100}}}}}}
stragglers: {{{stragglers}}}
corun: false
"""


def test_a_named_slow_gpu_sets_the_pace(ring, write_spec):
    out = run_cluster(write_spec(ring, STRAGGLING.format(stragglers="slow_gpus: {6: 1.5}, draws: 2")))
    row = out["stragglers"][0]
    assert row["nominal_step_ns"] == 100_000
    assert row["median_step_ns"] == row["p99_step_ns"] == 150_000
    assert row["pace_setters"] == [{"gpu": 6, "draws": 2}]
    assert out["distinct_steps_simulated"] == 2  # nominal, and the one condition (drawn twice, simulated once)


def test_lognormal_draws_give_a_distribution(ring, write_spec):
    out = run_cluster(write_spec(ring, STRAGGLING.format(stragglers="sigma: 0.1, draws: 12")))
    row = out["stragglers"][0]
    assert row["nominal_step_ns"] < row["median_step_ns"] <= row["p95_step_ns"] <= row["p99_step_ns"]
    assert row["draws"] == 12 and row["mean_slowdown"] > 1.0
    counts = [p["draws"] for p in row["pace_setters"]]
    assert 1 <= len(counts) <= 8 and counts == sorted(counts, reverse=True)  # the 8 GPUs most often slowest


def test_a_slow_gpu_slows_an_llm_step_on_the_gpu_model(tmp_path, write_spec):
    spec = write_spec(tmp_path, """
platform: hgx-h100
nodes: 1
run: {host_launch_us: 0}
corun: false
jobs:
  - {name: llm, gpus: 8, workload: {llm: {preset: llama3-8b, layers: 1, tp: 8, seq-len: 1024}}}
stragglers: {slow_gpus: {2: 1.3}}
""")
    row = run_cluster(spec)["stragglers"][0]
    assert 1.1 * row["nominal_step_ns"] < row["median_step_ns"] <= 1.3 * row["nominal_step_ns"] + 1000


def test_op_jitter_is_per_op_seeded_and_does_not_fold():
    from astra_cluster.slowed import op_factor

    class _Op:
        def __init__(self, id_):
            self.id = id_

    model = SlowedComputeModel(_Fixed(), {1: 2.0}, jitter_sigma=0.1, jitter_seed=5)
    times = [[model.compute_time_ns(_Op(i), rank) for i in range(4)] for rank in (0, 1)]
    assert times[0] == [round(1000 * op_factor(0.1, 5, 0, i)) for i in range(4)]  # each op its own factor
    assert times[1] == [round(2000 * op_factor(0.1, 5, 1, i)) for i in range(4)]  # on top of the GPU's
    assert len(set(times[0])) == 4 and times[0] == [model.compute_time_ns(_Op(i), 0) for i in range(4)]
    assert op_factor(0.1, 6, 0, 0) != op_factor(0.1, 5, 0, 0)
    assert not SlowedComputeModel(_Fixed(), {}, jitter_sigma=0.1).foldable


#: 8 GPUs on one switch: every pair of GPUs is two hops apart, so a direct all-to-all ends a fixed time after its
#: last GPU starts it
SWITCH8 = "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
JITTERED = """
system: sys.json
network: switch8.yml
corun: false
seed: 3
jobs:
  - name: j
    gpus: {gpus}
    workload: {{micro: {{graph: {{nodes: [
      {{name: c0, type: comp, duration_us: 100}}, {{name: a0, type: all_to_all, size: 1024, data_deps: [c0]}},
      {{name: c1, type: comp, duration_us: 100, data_deps: [a0]}},
      {{name: a1, type: all_to_all, size: 1024, data_deps: [c1]}},
      {{name: c2, type: comp, duration_us: 100, data_deps: [a1]}},
      {{name: a2, type: all_to_all, size: 1024, data_deps: [c2]}}]}}}}}}
stragglers: {{op_jitter_sigma: 0.1, draws: {draws}}}
"""


def test_op_jitter_gives_the_max_of_n_at_every_synchronous_step(ring, write_spec):
    """Three rounds of 100 us of compute, each followed by an all-to-all: every round lasts as long as the slowest
    of the 8 GPUs' jittered op, so each draw's step is the nominal step plus, per round, the max over the GPUs of
    its op's extra time (to the ns); a GPU's own sum over rounds would be less. The pace setter of a draw is
    the GPU that computed longest."""
    from astra_cluster.slowed import op_factor

    (ring / "switch8.yml").write_text(SWITCH8)
    row = run_cluster(write_spec(ring, JITTERED.format(gpus=8, draws=6)))["stragglers"][0]
    rng = random.Random("stragglers-3")  # the study's stream (no GPU factors: one seed per draw)
    nominal, pace = row["nominal_step_ns"], {}
    for step in row["step_ns_by_draw"]:
        seed = rng.randrange(1 << 31)
        extra = [[round(100_000 * op_factor(0.1, seed, gpu, node)) - 100_000 for node in (0, 2, 4)]
                 for gpu in range(8)]
        assert step == nominal + sum(max(per_gpu[k] for per_gpu in extra) for k in range(3))
        assert step > nominal + max(sum(per_gpu) for per_gpu in extra)  # the max of N, not one GPU's sum
        if step > nominal:
            busiest = max(range(8), key=lambda gpu: (sum(extra[gpu]), -gpu))
            pace[busiest] = pace.get(busiest, 0) + 1
    assert {p["gpu"]: p["draws"] for p in row["pace_setters"]} == pace
    assert row["op_jitter_sigma"] == 0.1 and row["median_step_ns"] > nominal


def test_more_ranks_wait_longer_under_the_same_jitter(ring, write_spec):
    """The expected max of N lognormals grows with N: 8 GPUs lose more to the same per-op jitter than 2."""
    (ring / "switch8.yml").write_text(SWITCH8)
    two = run_cluster(write_spec(ring, JITTERED.format(gpus=2, draws=20)))["stragglers"][0]
    eight = run_cluster(write_spec(ring, JITTERED.format(gpus=8, draws=20)))["stragglers"][0]
    assert 1.0 < two["mean_slowdown"] < eight["mean_slowdown"]


def test_bad_op_jitter_is_one_line(ring, write_spec):
    for value in ("-0.1", "10", "x"):
        with pytest.raises(ConfigError, match="stragglers.op_jitter_sigma"):
            run_cluster(write_spec(ring, STRAGGLING.format(stragglers=f"op_jitter_sigma: {value}")))
