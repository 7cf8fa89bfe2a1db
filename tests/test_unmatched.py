"""A send never received (or a receive never sent) is never silently a correct run.

The reference completes a send when its data arrives, so a trace whose receive is missing exits 0 with
a result, where a real NCCL or MPI job would hang. Here it is an error (exit 3) naming every unmatched
message, its trace node and its destination; ``--allow-unmatched`` makes it a warning whose list the
report keeps. Folded runs (symmetric ranks simulated once) give exactly the unfolded run's answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config
from astra_sim.unmatched import UnmatchedMessagesError

ASTRA = Path(sys.executable).parent / "astra"
BACKENDS = ("analytical", "congestion", "flow")


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch):
    monkeypatch.delenv("ASTRA_PLUGINS", raising=False)


def send(node_id, dst, size=64, tag=2, name="orphan", **deps):
    return make_node(node_id, name, T.COMM_SEND_NODE, attrs={"comm_dst": dst, "comm_size": size, "comm_tag": tag},
                     **deps)


def recv(node_id, src, size=64, tag=2, name="r", **deps):
    return make_node(node_id, name, T.COMM_RECV_NODE, attrs={"comm_src": src, "comm_size": size, "comm_tag": tag},
                     **deps)


def comp(node_id, micros=1, **deps):
    return make_node(node_id, "c", T.COMP_NODE, duration_micros=micros, **deps)


def case(tmp_path, nodes_for_rank, npus=2, name="t"):
    prefix = tmp_path / name
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes_for_rank(rank))
    system = write_system_config(tmp_path / "sys.json")
    network = write_network_config(tmp_path / f"net{npus}.yml", npus=(npus,))
    return str(prefix), system, network


def orphan(rank):
    """Rank 0 sends 64 bytes to rank 1; rank 1 posts no receive."""
    return [send(5, 1)] if rank == 0 else [comp(1)]


def run_cli(capsys, prefix, system, network, *extra):
    capsys.readouterr()
    rc = main(["run", f"--workload-configuration={prefix}", "--system-configuration", system,
               "--network-configuration", network, "-q", *extra])
    out, err = capsys.readouterr()
    return rc, err


@pytest.mark.parametrize("backend", BACKENDS)
def test_unmatched_send_exits_3_naming_the_send_node_and_destination(tmp_path, capsys, backend):
    prefix, system, network = case(tmp_path, orphan)
    rc, err = run_cli(capsys, prefix, system, network, "--network-backend", backend)
    assert rc == 3, err
    assert "unmatched messages" in err and "1 message(s)" in err
    assert "rank 0 (" in err and "t.0.et) node 5 ('orphan'): send 0 -> 1, 64 bytes, tag 2" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("backend", BACKENDS)
def test_allow_unmatched_warns_and_the_report_lists_every_message(tmp_path, capsys, backend):
    def nodes(rank):  # two orphans from rank 0 (to 1 and 2), one from rank 2; rank 1 receives one of them
        if rank == 0:
            return [send(1, 1, name="a"), send(2, 2, name="b")]
        if rank == 1:
            return [recv(1, 0)]
        return [send(7, 1, size=128, name="c")] if rank == 2 else [comp(1)]

    prefix, system, network = case(tmp_path, nodes, npus=4)
    out = tmp_path / "report.json"
    capsys.readouterr()
    rc = main(["run", f"--workload-configuration={prefix}", "--system-configuration", system,
               "--network-configuration", network, "--network-backend", backend, "--allow-unmatched",
               "--report-json", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "astra: warning: 2 unmatched message(s) (--allow-unmatched)" in err
    report = json.loads(out.read_text())
    assert report["complete"] is True and report["settings"]["allow_unmatched"] is True
    got = sorted((m["rank"], m["node"], m["src"], m["dst"], m["size"], m["state"]) for m in report["unmatched_messages"])
    assert got == [(0, 2, 0, 2, 64, "arrived, never received"), (2, 7, 2, 1, 128, "arrived, never received")]
    assert any("unmatched" in w for w in report["warnings"])


def test_matched_run_has_no_unmatched_messages(tmp_path):
    prefix, system, network = case(tmp_path, lambda r: [send(1, 1)] if r == 0 else [recv(1, 0)])
    report = simulate(prefix, system, network)
    assert report.unmatched_messages == [] and report.to_dict()["unmatched_messages"] == []
    assert report.to_dict()["complete"] is True


def test_receive_never_sent_is_still_a_deadlock(tmp_path, capsys):
    prefix, system, network = case(tmp_path, lambda r: [recv(8, 0, name="lonely")] if r == 1 else [comp(1)])
    rc, err = run_cli(capsys, prefix, system, network, "--allow-unmatched")
    assert rc == 3 and "deadlock" in err
    assert "rank 1 (" in err and "node 8 ('lonely'): receive 0 -> 1, 64 bytes, tag 2: receive posted, no send" in err


def ring_orphans(npus):
    """Every rank sends to its right neighbour and nobody receives: symmetric under every rotation."""
    return lambda rank: [comp(1), send(2, (rank + 1) % npus, size=1024, name="right", data_deps=[1])]


@pytest.mark.parametrize("allow", [False, True])
def test_folded_and_unfolded_runs_report_the_same_unmatched_messages(tmp_path, capsys, allow):
    npus = 8
    prefix, system, network = case(tmp_path, ring_orphans(npus), npus=npus)
    extra = ["--allow-unmatched"] if allow else []
    results = {}
    for mode in ("fold", "no-fold"):
        out = tmp_path / f"{mode}.json"
        # --per-rank: the ranks are compared whole, the communicators' group ids included
        flags = extra + (["--no-fold"] if mode == "no-fold" else []) + ["--per-rank", "--report-json", str(out)]
        rc, err = run_cli(capsys, prefix, system, network, *flags)
        results[mode] = (rc, err, json.loads(out.read_text()) if out.exists() else None)
    (rc_f, err_f, rep_f), (rc_u, err_u, rep_u) = results["fold"], results["no-fold"]
    assert rc_f == rc_u == (0 if allow else 3)
    if not allow:
        assert err_f == err_u and rep_f is None and rep_u is None
        assert f"{npus} message(s)" in err_f
        for rank in range(npus):
            assert f"rank {rank} (" in err_f and f"send {rank} -> {(rank + 1) % npus}, 1024 bytes" in err_f
        return
    assert rep_f["unmatched_messages"] == rep_u["unmatched_messages"]
    assert sorted((m["src"], m["dst"]) for m in rep_f["unmatched_messages"]) == [
        (r, (r + 1) % npus) for r in range(npus)]
    assert rep_f["ranks"] == rep_u["ranks"] and rep_f["warnings"] == rep_u["warnings"]
    # the folded run found the symmetry, then simulated every rank to name the real ones
    assert "folding abandoned" in rep_f["settings"]["fold"]["reason"]


def test_python_api_raises_unless_allowed(tmp_path):
    prefix, system, network = case(tmp_path, orphan)
    with pytest.raises(UnmatchedMessagesError, match=r"node 5 \('orphan'\): send 0 -> 1") as info:
        simulate(prefix, system, network)
    assert info.value.exit_code == 3
    report = simulate(prefix, system, network, allow_unmatched=True)
    assert report.unmatched_messages[0]["trace"].endswith("t.0.et")


def test_unmatched_send_subprocess_exit_code(tmp_path):
    prefix, system, network = case(tmp_path, orphan)
    proc = subprocess.run([str(ASTRA), "run", "--workload-configuration", prefix, "--system-configuration", system,
                           "--network-configuration", network, "-q"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr and "node 5 ('orphan'): send 0 -> 1" in proc.stderr
