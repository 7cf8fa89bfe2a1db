"""A Dask worker killed (SIGKILL) while it runs a sweep's point (``astra sweep --dask``): the lost point is submitted
again (the executor's bounded retry) and the sweep ends with every point ok, one row each."""

from __future__ import annotations

import csv
import os
import signal
import threading
import time

import pytest

from astra_sim.cli import main

distributed = pytest.importorskip("distributed")
pytest.importorskip("astra_sweep")  # the sweep command drives the executor here

SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 4, hidden: 512, heads: 8, kv-heads: 8, ffn-hidden: 2048, seq-len: 256, tp: 2, pp: 2, dp: 2, micro-batches: 2}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {run.platform-collective: [ring, nccl], workload.llm.tp: [2, 4], workload.llm.micro-batches: [2, 4, 8, 16]}
"""
POINTS = 16


def _journal_rows(path):
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.endswith("\n"))


@pytest.mark.slow
def test_a_dask_worker_killed_mid_sweep_loses_no_point(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "r.csv"
    killed = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  local_directory=str(tmp_path / "dask")) as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)

        def kill_a_busy_worker():
            """Once some rows are in, SIGKILL a worker process that runs a point and holds a shared workload (the
            points that need it lose it too: they must be run again with the workload shared afresh)."""
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and not killed:
                if 2 <= _journal_rows(f"{out}.journal") < POINTS - 2:
                    holders = {w for workers in client.who_has().values() for w in workers}
                    busy = [address for address, keys in client.processing().items() if keys and address in holders]
                    if busy:
                        pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                        os.kill(pid, signal.SIGKILL)
                        killed.update(address=busy[0], pid=pid, rows=_journal_rows(f"{out}.journal"))
                        return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_a_busy_worker, daemon=True)
        killer.start()
        code = main(["sweep", str(spec), "-o", str(out), "--dask", cluster.scheduler_address, "--no-progress"])
        killer.join(timeout=10)
    printed = capsys.readouterr()
    assert killed, "no worker was killed while points ran (the sweep finished first)"
    assert killed["rows"] < POINTS
    assert code == 0, printed.err
    with open(out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == POINTS and len({row["point"] for row in rows}) == POINTS
    assert [row["status"] for row in rows] == ["ok"] * POINTS, [row["status"] for row in rows]
    assert f"{POINTS} points: {POINTS} ok" in printed.out
