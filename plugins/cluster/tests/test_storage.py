"""Checkpoint writes share the storage: max-min fair shares of the aggregate, each job under its own cap."""

import pytest

from astra_cluster import run_cluster
from astra_cluster.storage import SharedStorage


def test_water_filling_with_caps():
    storage = SharedStorage(10.0)  # bytes per ns
    assert storage.start("a", 100, 10.0, 0) == {"a": 10}  # alone: its cap
    ends = storage.start("b", 100, 2.0, 5)  # b is capped at 2; a gets the other 8 for its 50 bytes left
    assert storage.rate("a") == 8.0 and storage.rate("b") == 2.0
    assert ends == {"a": 5 + 7, "b": 5 + 50}  # ceil(50 / 8) = 7
    ends = storage.stop("a", 12)  # a done: b keeps its cap (below the whole storage)
    assert ends == {"b": 12 + 43} and storage.stop("zz", 12) == {}  # 100 - 2 * 7 = 86 bytes left at 2 per ns


def test_three_equal_writers_split_the_aggregate_and_speed_up_as_others_stop():
    storage = SharedStorage(3.0)
    for key in "abc":
        ends = storage.start(key, 300, 5.0, 0)
    assert ends == {"a": 300, "b": 300, "c": 300}
    assert storage.stop("c", 150) == {"a": 150 + 100, "b": 150 + 100}  # 150 bytes left each, at 1.5 per ns


NODE = """
system: sys.json
network: net.yml
gpus_per_node: 4
corun: false
horizon_h: 1
checkpoint: {{interval_steps: 10, write_gb_per_s: 1{storage}}}
jobs:
"""


def jobs(count):
    """``count`` identical jobs of 4 GPUs (one node each): 100 steps of 100 us, a 1 MB checkpoint every 10 steps
    (1 ms alone at 1 GB/s), nine writes (none after the last segment)."""
    return "".join(f"  - {{name: j{i}, gpus: 4, steps: 100, checkpoint_bytes: 1e6, "
                   f"workload: {{micro: {{compute: 100}}}}}}\n" for i in range(count))


def completions(ring, write_spec, count, storage=""):
    report = run_cluster(write_spec(ring, NODE.format(storage=storage) + jobs(count)))
    return [row["completion_ns"] for row in report["timeline"]["jobs"]], report["timeline"]["jobs"]


@pytest.mark.parametrize("storage, expected_ms", [
    ("", 19),                                   # unshared: each job writes at its 1 GB/s: 10 ms + 9 x 1 ms
    (", storage_write_gb_per_s: 2", 19),        # storage enough for both
    (", storage_write_gb_per_s: 1", 28),        # both write at once at half the rate: 9 x 2 ms
    (", storage_write_gb_per_s: 1.5", 22),      # 0.75 GB/s each: 9 x 4/3 ms (to the ns: ceil per write)
    (", node_write_gb_per_s: 0.5", 28),         # one node each, capped at 0.5 GB/s: 2 ms a write, alone or not
])
def test_two_jobs_checkpointing_at_once_share_the_storage(ring, write_spec, storage, expected_ms):
    done, rows = completions(ring, write_spec, 2, storage)
    assert done[0] == done[1]
    assert done[0] == pytest.approx(expected_ms * 1e6, abs=10)
    assert rows[0]["checkpoint_ns"] == pytest.approx((expected_ms - 10) * 1e6, abs=10)


def test_a_lone_job_on_shared_storage_writes_at_its_own_rate(ring, write_spec):
    done, _ = completions(ring, write_spec, 1, ", storage_write_gb_per_s: 1")
    unshared, _ = completions(ring, write_spec, 1)
    assert done == unshared == [19_000_000]


READS = """
system: sys.json
network: net.yml
gpus_per_node: 4
corun: false
horizon_h: 1
checkpoint: {{interval_steps: 10, write_gb_per_s: 1, read_gb_per_s: 1{storage}}}
failures: {{repair_h: 0, events: [{events}]}}
jobs:
"""


def restarts(ring, write_spec, storage, events):
    text = READS.format(storage=storage, events=", ".join(f"{{at_h: {ms / 3.6e6!r}, node: {node}}}"
                                                         for ms, node in events))
    return run_cluster(write_spec(ring, text + jobs(2)))["timeline"]["jobs"]


@pytest.mark.parametrize("storage, both_fail, expected_ms", [
    ("", True, 21.5),                              # each reads alone at 1 GB/s: 1 ms
    (", storage_read_gb_per_s: 1", True, 22.5),    # both read at once at half the rate: 2 ms
    (", storage_read_gb_per_s: 2", True, 21.5),    # storage enough for both
    (", node_read_gb_per_s: 0.5", True, 22.5),     # one node each, capped at 0.5 GB/s
    (", storage_read_gb_per_s: 1", False, 21.5),   # one job restarts: it reads alone at its own rate
])
def test_restarts_at_once_share_the_storage_s_reads(ring, write_spec, storage, both_fail, expected_ms):
    """A node failure at 5.5 ms stops each job 1.5 ms into its third segment (segments of 1 ms of steps and 1 ms of
    write): 1.5 ms lost, then the read of its 1 MB checkpoint, then 80 steps and 7 writes (15 ms)."""
    events = [(5.5, 0), (5.5, 1)] if both_fail else [(5.5, 0)]
    rows = restarts(ring, write_spec, storage, events)
    assert rows[0]["completion_ns"] == pytest.approx(expected_ms * 1e6, abs=10)
    assert rows[0]["lost_ns"] == 1_500_000 and rows[0]["failures"] == 1
    assert rows[0]["restart_ns"] == pytest.approx((expected_ms - 20.5) * 1e6, abs=10)
    if not both_fail:
        assert rows[1]["completion_ns"] == 19_000_000


def test_a_read_cut_short_loses_no_work_and_gives_its_share_back(ring, write_spec):
    """Both jobs read from 5.5 ms at 0.5 GB/s each. Node 0 fails again at 6 ms, in j0's read: j0 loses no work
    (it had none since its checkpoint) and starts its read again at once. j1 (0.75 MB left) and j0 (1 MB) share the
    storage until j1 is done at 7.5 ms; j0 then reads its last 0.25 MB alone: 7.75 ms."""
    rows = restarts(ring, write_spec, ", storage_read_gb_per_s: 1", [(5.5, 0), (5.5, 1), (6.0, 0)])
    j0, j1 = rows
    assert j1["completion_ns"] == pytest.approx(22.5e6, abs=10)
    assert j0["completion_ns"] == pytest.approx(22.75e6, abs=10)
    assert j0["failures"] == 2 and j0["lost_ns"] == 1_500_000
    assert j0["restart_ns"] == pytest.approx(0.5e6 + 1.75e6, abs=10)
