"""``astra cluster SPEC.yaml [-o OUT.json] [--json]`` end to end: through the command's ``main`` in this process (CI
margin: each ``astra`` process spent about half a second importing; the exit code and what is printed are main's),
and once as the installed ``astra`` process (``--json``: stdout is the answer and nothing else)."""

import json
import re
import subprocess
from types import SimpleNamespace

import pytest

from astra_sim.cli import main


@pytest.fixture
def astra(capsys):
    """``astra(*args)``: ``astra cluster ...`` run by the command's main here, as subprocess.run's result."""
    def run(*args):
        capsys.readouterr()
        code = main(["cluster", *map(str, args)])
        printed = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=printed.out, stderr=printed.err)

    return run

SPEC = """
system: sys.json
network: net.yml
gpus_per_node: 2
network_backend: flow
placement: fixed
jobs:
  - {name: a, gpus: 4, steps: 20, place: [0, 2, 4, 6], workload: {micro: {collective: all_reduce, size: 1MiB}}}
  - {name: b, gpus: 4, steps: 20, place: [1, 3, 5, 7], workload: {micro: {collective: all_reduce, size: 1MiB}}}
stragglers: {slow_gpus: {2: 1.5}, draws: 2}
failures: {events: [{at_h: 0.0000001, node: 1}]}
checkpoint: {interval_steps: 5, restart_s: 0.001}
horizon_h: 1
"""


def test_cluster_writes_json_and_prints_human_units(ring, write_spec, astra, astra_exe, tmp_path):
    spec = write_spec(ring, SPEC)
    out = tmp_path / "out.json"
    done = astra(spec, "-o", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [row["job"] for row in report["corun"]["jobs"]] == ["a", "b"]
    assert all(isinstance(row["together_step_ns"], int) for row in report["corun"]["jobs"])
    assert report["timeline"]["failures"] == 1 and report["timeline"]["jobs_done"] == 2
    assert "slowdown" in done.stdout and "distinct steps simulated" in done.stdout
    assert re.search(r"step [0-9.]+ (µs|ms) together", done.stdout)  # human units, not ns
    printed = subprocess.run([astra_exe, "cluster", spec, "--json"], capture_output=True, text=True, check=True)
    assert json.loads(printed.stdout)["corun"] == report["corun"]


def test_a_bad_spec_is_one_line_and_a_non_zero_exit(ring, write_spec, astra):
    spec = write_spec(ring, SPEC.replace("scheduler", "x").replace("placement: fixed", "placement: nearest"))
    done = astra(spec)
    assert done.returncode != 0
    assert "key 'placement' must be one of" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_job_too_big_for_the_cluster(ring, write_spec, astra):
    spec = write_spec(ring, SPEC.replace("gpus: 4, steps: 20, place: [0, 2, 4, 6]", "gpus: 16, steps: 20")
                      .replace("placement: fixed", "placement: contiguous").replace(", place: [1, 3, 5, 7]", ""))
    done = astra(spec)
    assert done.returncode != 0 and "needs 16 GPUs; the cluster has 8" in done.stderr


def test_an_output_folder_that_cannot_be_written_fails_before_any_simulation(ring, write_spec, astra, tmp_path):
    """-o into a read-only folder, or under a file (a folder that cannot be made): one line, non-zero, and no
    simulation ran (the spec names traces that do not exist, which a simulation would report instead)."""
    import os
    import stat

    spec = write_spec(ring, SPEC.replace("workload: {micro: {collective: all_reduce, size: 1MiB}}",
                                         "workload: {chakra: nowhere/trace}"))
    (tmp_path / "a_file").write_text("")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    targets = [tmp_path / "a_file" / "out.json"] + ([] if os.geteuid() == 0 else [locked / "out.json"])
    for out in targets:
        done = astra(spec, "-o", str(out))
        assert done.returncode != 0
        assert f"-o {out}: cannot" in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert "nowhere" not in done.stderr
    missing = tmp_path / "new" / "folder" / "out.json"  # a folder that can be made is made
    done = astra(write_spec(ring, SPEC), "-o", str(missing))
    assert done.returncode == 0 and missing.exists()


def test_failed_links_and_cable_events_on_the_terminal(ring, write_spec, astra):
    """(Two cables down at once would cut the ring in two: one run each.)"""
    failed = write_spec(ring, SPEC.replace("network_backend: flow",
                                           "network_backend: flow\nfailed_links: [[npu0, npu1]]"), "failed.yaml")
    done = astra(failed)
    assert done.returncode == 0, done.stderr
    assert "failed links (routed around): npu0-npu1" in done.stdout
    cable = "failures: {events: [{at_h: 0.0000001, link: [npu2, npu3], for_h: 0.0000001}]}"
    event = write_spec(ring, SPEC.replace("failures: {events: [{at_h: 0.0000001, node: 1}]}", cable), "event.yaml")
    done = astra(event)
    assert done.returncode == 0, done.stderr
    assert "cables routed around: 1 down, 1 back" in done.stdout


ANALYTICAL = """
system: sys.json
network: net.yml
gpus_per_node: 4
placement: contiguous
corun: false
failed_links: [[npu0, npu1]]
jobs:
  - {name: a, gpus: 4, steps: 20, checkpoint_bytes: 1e6, workload: {micro: {compute: 100}}}
  - {name: b, gpus: 4, steps: 20, checkpoint_bytes: 1e6, workload: {micro: {compute: 100}}}
stragglers: {op_jitter_sigma: 0.05, draws: 3}
failures: {events: [{at_h: 0.0000005, node: 0}, {at_h: 0.0000005, node: 1}]}
checkpoint: {interval_steps: 5, restart_s: 0.001, storage_read_gb_per_s: 1}
horizon_h: 1
"""


def test_failed_cable_on_analytical_jitter_and_shared_reads_end_to_end(ring, write_spec, astra, tmp_path):
    out = tmp_path / "out.json"
    done = astra(write_spec(ring, ANALYTICAL), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "failed links (their dimensions' bandwidth lowered): npu0-npu1" in done.stdout
    assert "3 draws (per-op jitter sigma 0.05): step median" in done.stdout
    report = json.loads(out.read_text())
    assert report["stragglers"][0]["op_jitter_sigma"] == 0.05
    rows = report["timeline"]["jobs"]
    # both stopped at once: 1 ms of restart, then 1 MB each read at half of 1 GB/s: 2 ms
    assert [row["restart_ns"] for row in rows] == [3_000_000, 3_000_000]
    bad = astra(write_spec(ring, ANALYTICAL.replace("npu1]]", "npu2]]")))
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    assert "key 'failed_links': no link joins 'npu0' and 'npu2'" in bad.stderr
