"""The cluster over time: checkpoints against Young/Daly, failures and repairs, the schedulers."""

import pytest

from astra_cluster import daly_goodput, run_cluster, young_interval_ns
from astra_cluster.timeline import daly_interval_ns

#: one 8-GPU node of the ring; a job's step is one 100 us compute node per rank (replay)
NODE = """
system: sys.json
network: net.yml
gpus_per_node: {gpn}
corun: false
"""


def job(name, gpus, steps, arrival_s=0, extra=""):
    return (f"  - {{name: {name}, gpus: {gpus}, steps: {steps}, arrival_s: {arrival_s}, "
            f"workload: {{micro: {{compute: 100}}}}{extra}}}\n")


def run(ring, write_spec, text, gpn=8):
    return run_cluster(write_spec(ring, NODE.format(gpn=gpn) + text))["timeline"]


def test_without_failures_a_job_takes_its_steps(ring, write_spec):
    t = run(ring, write_spec, "horizon_h: 1\njobs:\n" + job("a", 8, 1000))
    row = t["jobs"][0]
    assert row["completion_ns"] == 1000 * 100_000
    assert row["goodput"] == 1.0 and row["interval_steps"] is None and t["failures"] == 0


def test_a_failure_costs_the_lost_work_the_repair_and_the_restart(ring, write_spec):
    text = ("horizon_h: 1\ncheckpoint: {interval_steps: 100, restart_s: 0.01}\n"
            "failures: {repair_h: %r, events: [{at_h: %r, node: 0}]}\njobs:\n" % (0.02 / 3600, 0.055 / 3600)
            + job("a", 8, 1000, extra=", checkpoint_bytes: 0"))
    row = run(ring, write_spec, text)["jobs"][0]
    # 100 ms of steps, 5 ms since the checkpoint at 50 ms lost, 20 ms of repair, 10 ms of restart
    assert row["completion_ns"] == 100_000_000 + 5_000_000 + 20_000_000 + 10_000_000
    assert row["failures"] == 1 and row["lost_ns"] == 5_000_000 and row["restart_ns"] == 10_000_000


def _daly_case(ring, write_spec, interval):
    # node MTBF 10 s, checkpoint write 0.5 s (5 GB at 10 GB/s), restart 1 s + reading it back 0.5 s
    text = ("horizon_h: 14\nseed: 3\ncheckpoint: {interval_steps: %s, write_gb_per_s: 10, read_gb_per_s: 10, "
            "restart_s: 1}\nfailures: {node_mtbf_h: %r}\njobs:\n" % (interval, 10 / 3600)
            + job("a", 8, 10**12, extra=", checkpoint_bytes: 5e9"))
    return run(ring, write_spec, text)["jobs"][0]


@pytest.mark.parametrize("interval", ["young-daly", 10_000, 100_000])
def test_goodput_under_exponential_failures_is_daly_s(ring, write_spec, interval):
    row = _daly_case(ring, write_spec, interval)
    tau = row["interval_steps"] * 100_000
    expected = daly_goodput(tau, 0.5e9, 1.5e9, 10e9)
    assert row["failures"] > 3000
    assert row["goodput"] == pytest.approx(expected, rel=0.05)
    assert row["daly_goodput"] == pytest.approx(expected, rel=1e-12)  # the report's closed form, to compare with


def test_young_s_interval_beats_longer_and_shorter_ones(ring, write_spec):
    young = _daly_case(ring, write_spec, "young-daly")
    assert young["interval_steps"] == round(young_interval_ns(0.5e9, 10e9) / 100_000)
    for other in (3_000, 100_000):
        assert young["goodput"] > _daly_case(ring, write_spec, other)["goodput"]


def test_the_closed_forms():
    assert young_interval_ns(2, 100) == pytest.approx(20.0)
    assert daly_interval_ns(2, 100) == pytest.approx(20 * (1 + 0.1 / 3 + 0.01 / 9) - 2)
    assert daly_interval_ns(300, 100) == 100  # delta >= 2M: M
    assert daly_goodput(1.0, 0.0, 0.0, 1e12) == pytest.approx(1.0, rel=1e-9)  # no failures to speak of


QUEUE = "horizon_h: 1\nscheduler: SCHEDULER\njobs:\n" + job("x", 4, 100) + job("y", 8, 100, 1e-6) \
        + job("z", 4, 50, 2e-6)


def completions(timeline):
    return {row["job"]: row["end_ns"] for row in timeline["jobs"]}


def test_fifo_holds_a_small_job_behind_the_head(ring, write_spec):
    ends = completions(run(ring, write_spec, QUEUE.replace("SCHEDULER", "fifo"), gpn=4))
    assert ends["x"] < ends["y"] < ends["z"]  # z waits for y, which waits for x


def test_backfill_starts_a_job_that_ends_before_the_head_s_reservation(ring, write_spec):
    ends = completions(run(ring, write_spec, QUEUE.replace("SCHEDULER", "backfill"), gpn=4))
    assert ends["z"] < ends["x"] < ends["y"]
    assert ends["y"] == 20_000_000  # the head starts on time, when x ends (10 ms)


def test_sjf_runs_the_shortest_waiting_job_first(ring, write_spec):
    text = "horizon_h: 1\nscheduler: S\njobs:\n" + job("x", 8, 100) + job("long", 8, 200, 1e-6) \
        + job("short", 8, 10, 2e-6)
    fifo = completions(run(ring, write_spec, text.replace("S\n", "fifo\n", 1)))
    sjf = completions(run(ring, write_spec, text.replace("S\n", "sjf\n", 1)))
    assert fifo["long"] < fifo["short"] and sjf["short"] < sjf["long"]


def test_distinct_steps_are_simulated_once(ring, write_spec):
    text = ("horizon_h: 1\ncheckpoint: {interval_steps: 10}\nfailures: {events: [{at_h: %r, node: 0}, "
            "{at_h: %r, node: 1}]}\njobs:\n" % (1e-6, 2e-6) + job("a", 4, 100) + job("b", 4, 100))
    out = run_cluster(write_spec(ring, NODE.format(gpn=4) + text))
    assert out["timeline"]["failures"] == 2
    assert sum(row["placements_total"] for row in out["timeline"]["jobs"]) == 4  # each started twice
    assert out["distinct_steps_simulated"] == 2  # the same (job, GPUs) again: not simulated again


def test_a_slow_gpu_lowers_goodput_as_a_rate(ring, write_spec):
    text = "horizon_h: 1\nstragglers: {slow_gpus: {3: 1.5}}\njobs:\n" + job("a", 8, 1000)
    row = run(ring, write_spec, text)["jobs"][0]
    assert row["reference_step_ns"] == 100_000 and row["placements"][0]["step_ns"] == 150_000
    assert row["goodput"] == pytest.approx(1 / 1.5)
    assert row["goodput_steps_per_h"] == pytest.approx(3600e9 / 150_000)


def test_a_switch_stops_every_job_under_it_and_a_link_only_its_gpu_s(ring, write_spec):
    text = ("horizon_h: 1\ncheckpoint: {interval_steps: 10}\nfailures: {nodes_per_switch: 2, events: "
            "[{at_h: %r, link: 5}, {at_h: %r, switch: 0}]}\njobs:\n" % (1e-6, 2e-6)
            + job("a", 4, 100) + job("b", 4, 100))
    t = run(ring, write_spec, text, gpn=4)
    assert [f["kind"] for f in t["failure_events"]] == ["link", "switch"]
    assert {row["job"]: row["failures"] for row in t["jobs"]} == {"a": 1, "b": 2}


def test_gpu_mtbf_is_the_job_s_over_its_gpus(ring, write_spec):
    # 8 GPUs at an 80 s MTBF each: the job fails every 10 s, as in the node case above
    text = ("horizon_h: 14\nseed: 5\ncheckpoint: {write_gb_per_s: 10, read_gb_per_s: 10, restart_s: 1}\n"
            "failures: {gpu_mtbf_h: %r}\njobs:\n" % (80 / 3600) + job("a", 8, 10**12, extra=", checkpoint_bytes: 5e9"))
    row = run(ring, write_spec, text)["jobs"][0]
    assert row["job_mtbf_ns"] == pytest.approx(10e9)
    tau = row["interval_steps"] * 100_000
    assert row["goodput"] == pytest.approx(daly_goodput(tau, 0.5e9, 1.5e9, 10e9), rel=0.05)


SHARED = """
system: sys.json
network: net.yml
gpus_per_node: 2
placement: fixed
network_backend: flow
corun: false
timeline_corun: {corun}
horizon_h: 1
jobs:
  - {{name: a, gpus: 4, steps: 100, place: [0, 2, 4, 6], workload: {{micro: {{collective: all_reduce, size: 64MiB}}}}}}
  - {{name: b, gpus: 4, steps: 100, place: [1, 3, 5, 7], arrival_s: {arrival_s},
     workload: {{micro: {{collective: all_reduce, size: 64MiB}}}}}}
"""


def test_over_time_jobs_sharing_links_slow_each_other_while_both_run(ring, write_spec):
    alone = run_cluster(write_spec(ring, SHARED.format(corun="false", arrival_s=0)))["timeline"]["jobs"][0]
    step = alone["placements"][0]["step_ns"]
    assert alone["completion_ns"] == 100 * step  # without timeline_corun: each job alone
    # b arrives when a is half done: a runs 50 steps alone, then 50 beside b; b then finishes alone
    together_spec = write_spec(ring, SHARED.format(corun="true", arrival_s=0), "both.yaml")
    together = run_cluster(together_spec)["timeline"]["jobs"][0]["completion_ns"] // 100
    assert together > 1.9 * step
    half = 50 * step / 1e9
    out = run_cluster(write_spec(ring, SHARED.format(corun="true", arrival_s=half), "late.yaml"))
    a, b = out["timeline"]["jobs"]
    assert a["end_ns"] == pytest.approx(50 * step + 50 * together, abs=100)
    assert b["end_ns"] == pytest.approx(a["end_ns"] + 50 * step, abs=100)
    # a alone, b alone, the two together, and the jobs' reference (packed on GPUs 0-3, one workload: once)
    assert out["distinct_steps_simulated"] == 4
