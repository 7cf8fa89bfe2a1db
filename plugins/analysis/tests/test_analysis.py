"""Where the time goes: the breakdown, the critical path and the timelines, on cases whose answers are known
by hand, folded and unfolded (astra_analysis.views)."""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.humanize import format_ns, parse_rank_ranges, rank_ranges
from astra_sim.report import read_report
from astra_sim.simulation import Simulation, simulate
from astra_sim_testing import write_network_config, write_system_config

PLUGINS = ["network_analytical", "analysis"]


def comp(i, micros, deps=(), name=None, **attrs):
    return make_node(i, name or f"comp{i}", T.COMP_NODE, data_deps=list(deps), duration_micros=micros,
                     attrs={"is_cpu_op": False, **attrs})


def allreduce(i, size, deps=(), pg=None, name=None):
    attrs = {"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size}
    if pg is not None:
        attrs["pg_name"] = str(pg)
    return make_node(i, name or f"ar{i}", T.COMM_COLL_NODE, data_deps=list(deps), attrs=attrs)


def message(i, kind, src, dst, size, deps=(), tag=7):
    node_type = T.COMM_SEND_NODE if kind == "send" else T.COMM_RECV_NODE
    return make_node(i, f"{kind}{i}", node_type, data_deps=list(deps),
                     attrs={"is_cpu_op": False, "comm_src": src, "comm_dst": dst, "comm_size": size, "comm_tag": tag})


def case(folder, traces, npus=None, groups=None, roles=None, **system):
    """Rank r runs ``traces(r)``; a Ring network of ``npus``; returns simulate()'s positional arguments."""
    folder = Path(folder)
    npus = npus or (8,)
    total = 1
    for n in npus:
        total *= n
    (folder / "t").mkdir(parents=True, exist_ok=True)
    for rank in range(total):
        write_et(folder / "t" / f"t.{rank}.et", make_metadata(), traces(rank))
    sys_path = write_system_config(folder / "system.json", dims=len(npus), **system)
    net = write_network_config(folder / "net.yml", topology=("Ring",) * len(npus), npus=npus,
                               bandwidth_gbps=(50.0,) * len(npus), latency_ns=(500.0,) * len(npus))
    groups_path = None
    if groups is not None:
        groups_path = folder / "groups.json"
        groups_path.write_text(json.dumps({str(k): v for k, v in groups.items()}))
        if roles is not None:
            (folder / "groups.roles.json").write_text(json.dumps({str(k): v for k, v in roles.items()}))
        groups_path = str(groups_path)
    return str(folder / "t" / "t"), sys_path, net, None, groups_path


def pipeline(rank):
    """Rank 0 computes 50 us and sends 1 MiB to rank 1, which receives it and computes 10 us."""
    if rank == 0:
        return [comp(0, 50), message(1, "send", 0, 1, 1 << 20, deps=[0])]
    return [message(0, "recv", 0, 1, 1 << 20), comp(1, 10, deps=[0])]


# ------------------------------------------------------------------------------------------- breakdown
def test_compute_then_collective_parts_are_known_by_hand(tmp_path):
    args = case(tmp_path, lambda r: [comp(0, 10, name="aten::mm"), allreduce(1, 1 << 20, deps=[0]),
                                     comp(2, 5, deps=[1], name="aten::add")])
    report = simulate(*args, plugins=PLUGINS)
    for rank in report.ranks:
        parts = rank.breakdown["parts"]
        assert parts == {"compute:gemm": 10_000, "compute:elementwise": 5_000,
                         "exposed:world": rank.finish_ns - 15_000, "idle": 0}
        (world,) = rank.breakdown["communicators"]
        assert world["busy_ns"] == world["exposed_ns"] == rank.comm_ns and world["overlapped_ns"] == 0
    assert report.breakdown["rank_groups"] == [{"ranks": "0-7", "count": 8, "finish_ns": report.max_finish_ns,
                                                "parts": report.ranks[0].breakdown["parts"]}]


def test_overlapped_communication_is_not_exposed(tmp_path):
    """An all-reduce that runs beside 300 us of compute: the part under compute is overlapped, only the rest
    is exposed; HTA's overlap ratio is comm_overlapped / comm_busy."""
    args = case(tmp_path, lambda r: [comp(0, 300), allreduce(1, 1 << 20)])
    report = simulate(*args, plugins=PLUGINS)
    rank = report.ranks[0]
    comm = rank.comm_ns
    b = rank.breakdown
    assert comm > 0
    overlapped = min(comm, 300_000)
    assert b["comm_busy_ns"] == comm and b["comm_overlapped_ns"] == overlapped
    assert b["parts"]["compute:other"] == 300_000
    assert b["parts"].get("exposed:world", 0) == comm - overlapped
    assert sum(b["parts"].values()) == rank.finish_ns


def test_receive_wait_is_the_bubble_named_by_role(tmp_path):
    args = case(tmp_path, pipeline, npus=(2,), groups={1: [0, 1]}, roles={1: "pp"})
    report = simulate(*args, plugins=PLUGINS)
    first, second = report.ranks
    assert second.breakdown["parts"] == {"compute:other": 10_000, "recv_wait:pp": second.finish_ns - 10_000,
                                         "idle": 0}
    assert second.finish_ns - 10_000 > 50_000  # the sender's compute plus the transfer
    assert first.breakdown["parts"]["exposed:pp"] == first.finish_ns - 50_000
    (pp,) = second.breakdown["communicators"]
    assert pp["communicator"] == "pp" and pp["groups"] == [1]


def test_without_roles_groups_are_named_by_id_and_messages_without_group_are_p2p(tmp_path):
    with_group = simulate(*case(tmp_path / "g", pipeline, npus=(2,), groups={4: [0, 1]}), plugins=PLUGINS)
    assert "recv_wait:group 4" in with_group.ranks[1].breakdown["parts"]
    without = simulate(*case(tmp_path / "p", pipeline, npus=(2,)), plugins=PLUGINS)
    assert "recv_wait:p2p" in without.ranks[1].breakdown["parts"]


def test_parallel_communicators_share_the_exposed_time_exactly(tmp_path):
    """Two collectives on two communicators at once (per-communicator streams): every exposed nanosecond is
    given to one of them, none lost to rounding."""
    groups = {1: list(range(8)), 2: list(range(8))}
    args = case(tmp_path, lambda r: [allreduce(0, 1 << 20, pg=1), allreduce(1, 3 << 20, pg=2)],
                groups=groups, roles={1: "tp", 2: "dp"}, comm_streams="per-communicator")
    report = simulate(*args, plugins=PLUGINS)
    parts = report.ranks[0].breakdown["parts"]
    assert set(parts) == {"exposed:tp", "exposed:dp", "idle"}
    assert parts["exposed:tp"] + parts["exposed:dp"] + parts["idle"] == report.ranks[0].finish_ns
    by_name = {c["communicator"]: c for c in report.ranks[0].breakdown["communicators"]}
    assert by_name["dp"]["busy_ns"] > by_name["tp"]["busy_ns"] > 0


def test_no_breakdown_records_nothing(tmp_path):
    args = case(tmp_path, lambda r: [comp(0, 10)])
    report = simulate(*args, plugins=PLUGINS, breakdown=False)
    assert report.breakdown is None and report.ranks[0].breakdown is None
    assert "breakdown" not in report.to_dict() and "breakdown" not in report.to_dict()["ranks"][0]


# ------------------------------------------------------------------------------------------- critical path
def test_critical_path_crosses_to_the_sender(tmp_path):
    report = simulate(*case(tmp_path, pipeline, npus=(2,)), plugins=PLUGINS, critical_path=True)
    path = report.critical_path
    assert path["rank"] == 1 and path["length_ns"] == report.max_finish_ns
    kinds = [(item["rank"], item["kind"]) for item in path["items"]]
    assert kinds == [(0, "compute"), (1, "message"), (1, "compute")]
    assert path["items"][1]["from_rank"] == 0
    _assert_contiguous(path)
    assert path["totals"]["compute:other"] == 60_000


def test_critical_path_follows_the_last_member_to_join_a_collective(tmp_path):
    """Rank 3 computes longer before the all-reduce and rank 0 longer after it: rank 0 finishes last, and its
    path runs through rank 3's compute, the all-reduce (from when rank 3 joined) and rank 0's compute."""
    args = case(tmp_path, lambda r: [comp(0, 40 if r == 3 else 10), allreduce(1, 1 << 16, deps=[0]),
                                     comp(2, 100 if r == 0 else 1, deps=[1])])
    report = simulate(*args, plugins=PLUGINS, critical_path=True)
    path = report.critical_path
    assert path["rank"] == 0
    assert [(i["rank"], i["kind"]) for i in path["items"]] == [(3, "compute"), (0, "collective"), (0, "compute")]
    assert path["items"][0]["end_ns"] == path["items"][1]["start_ns"] == 40_000
    assert path["items"][1]["waited_for_rank"] == 3
    _assert_contiguous(path)


def _assert_contiguous(path):
    at = 0
    for item in path["items"]:
        assert item["start_ns"] == at, item
        at = item["end_ns"]
    assert at == path["length_ns"]


# ------------------------------------------------------------------------------------------- timelines
def _events(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)["traceEvents"]


def test_chrome_timeline_has_one_complete_event_per_executed_node(tmp_path):
    args = case(tmp_path, pipeline, npus=(2,), groups={1: [0, 1]}, roles={1: "pp"})
    out = tmp_path / "out" / "trace.json"
    report = simulate(*args, plugins=PLUGINS, timeline=str(out))
    events = _events(out)
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == sum(r.nodes for r in report.ranks) == 4
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {(0, "rank 0"), (1, "rank 1")}
    recv = next(e for e in complete if e["cat"] == "recv")
    assert recv["args"]["communicator"] == "pp" and recv["args"]["peer"] == 0 and recv["args"]["bytes"] == 1 << 20
    send = next(e for e in complete if e["cat"] == "send")
    start, finish = [e for e in events if e["ph"] == "s"], [e for e in events if e["ph"] == "f"]
    assert len(start) == len(finish) == 1 and start[0]["id"] == finish[0]["id"]
    assert (start[0]["pid"], start[0]["tid"], start[0]["ts"]) == (0, send["tid"], send["ts"])
    assert finish[0]["pid"] == 1 and recv["ts"] <= finish[0]["ts"] <= recv["ts"] + recv["dur"]
    assert report.timeline["events"] == len(events) and report.timeline["flows"] == 1
    # times are exact microseconds with three decimals
    comp_event = next(e for e in complete if e["cat"] == "compute" and e["pid"] == 0)
    assert comp_event["dur"] == 50.0 and comp_event["args"]["node_id"] == 0


def test_timeline_ranks_and_gzip(tmp_path):
    args = case(tmp_path, lambda r: [comp(0, 10), allreduce(1, 1 << 20, deps=[0])])
    out = tmp_path / "trace.json.gz"
    simulate(*args, plugins=PLUGINS, timeline=str(out), timeline_ranks="0-2,6")
    with open(out, "rb") as handle:
        assert handle.read(2) == b"\x1f\x8b"
    events = _events(out)
    assert {e["pid"] for e in events if e["ph"] == "X"} == {0, 1, 2, 6}
    assert Counter(e["pid"] for e in events if e["ph"] == "X") == {0: 2, 1: 2, 2: 2, 6: 2}


def test_folded_timeline_equals_the_unfolded_one(tmp_path):
    """Every rank of a folded run gets its representative's events with peers and groups relabelled."""
    groups = {1: [0, 1, 2, 3], 2: [4, 5, 6, 7], 3: [0, 4], 4: [1, 5], 5: [2, 6], 6: [3, 7]}
    roles = {1: "tp", 2: "tp", 3: "dp", 4: "dp", 5: "dp", 6: "dp"}

    def trace(r):
        tp = 1 if r < 4 else 2
        dp = 3 + r % 4
        peer = (r + 1) % 4 + (r // 4) * 4
        back = (r - 1) % 4 + (r // 4) * 4
        return [comp(0, 20, name="aten::mm"), allreduce(1, 1 << 20, deps=[0], pg=tp),
                message(2, "send", r, peer, 1 << 16, deps=[1]), message(3, "recv", back, r, 1 << 16, deps=[1]),
                allreduce(4, 1 << 18, deps=[2, 3], pg=dp)]

    args = case(tmp_path, trace, npus=(4, 2), groups=groups, roles=roles)
    folded = simulate(*args, plugins=PLUGINS, timeline=str(tmp_path / "f.json"), critical_path=True)
    unfolded = simulate(*args, plugins=PLUGINS, timeline=str(tmp_path / "u.json"), fold=False, critical_path=True)
    assert folded.stats["simulated_ranks"] < 8 == unfolded.stats["simulated_ranks"]
    assert [r.breakdown for r in folded.ranks] == [r.breakdown for r in unfolded.ranks]
    assert folded.critical_path == unfolded.critical_path
    a, b = _events(tmp_path / "f.json"), _events(tmp_path / "u.json")
    key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
    assert sorted(map(key, a)) == sorted(map(key, b))
    dp_events = [e for e in a if e["ph"] == "X" and e["args"].get("communicator") == "dp"]
    assert sorted(e["args"]["group"] for e in dp_events) == [3, 3, 4, 4, 5, 5, 6, 6]
    labels = {e["args"]["labels"] for e in a if e["ph"] == "M" and e["name"] == "process_labels"}
    assert labels == {"node 0", "node 1"}  # 4 NPUs per scale-up domain


def test_kineto_traces_are_written_per_rank(tmp_path):
    args = case(tmp_path, pipeline, npus=(2,))
    folder = tmp_path / "kineto"
    report = simulate(*args, plugins=PLUGINS, timeline=str(folder), timeline_format="kineto")
    assert sorted(os.listdir(folder)) == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    text = (folder / "rank1.pt.trace.json").read_text()
    assert '"rank": 1' in text.split("traceEvents")[0]  # where HTA looks for the rank
    trace = json.loads(text)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert {e["name"] for e in kernels} == {"ncclDevKernel_SendRecv", "comp1"}
    assert all(e["args"]["stream"] >= 0 and e["args"]["correlation"] > 0 for e in kernels)
    launches = [e for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime"]
    assert sorted(e["args"]["correlation"] for e in launches) == sorted(e["args"]["correlation"] for e in kernels)
    assert report.timeline["files"] == 2


# ------------------------------------------------------------------------------------------- bad input
def _cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_unwritable_timeline_is_an_error_before_the_run(tmp_path, capsys, monkeypatch):
    args = case(tmp_path, lambda r: [comp(0, 10)])
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    ran = []
    monkeypatch.setattr(Simulation, "build", lambda self: ran.append(1))
    base = ["run", "--workload-configuration", args[0], "--system-configuration", args[1],
            "--network-configuration", args[2], "-q"]
    code, _, err = _cli(capsys, *base, "--timeline", str(blocker / "t.json"))
    assert code == 2 and "--timeline" in err and str(blocker) in err and "Traceback" not in err
    code, _, err = _cli(capsys, *base, "--timeline", str(tmp_path / "t.txt"))
    assert code == 2 and ".json or .json.gz" in err
    code, _, err = _cli(capsys, *base, "--timeline", str(tmp_path / "t.json"), "--timeline-ranks", "3-9")
    assert code == 2 and "--timeline-ranks" in err and "rank 9" in err
    code, _, err = _cli(capsys, *base, "--timeline", str(blocker), "--timeline-format", "kineto")
    assert code == 2 and "writes a folder" in err
    code, _, err = _cli(capsys, *base, "--report-json", str(blocker / "r.json"))
    assert code == 2 and "--output" in err  # --report-json is --output's earlier name
    assert not ran, "nothing was simulated"


def test_cli_prints_breakdown_and_critical_path(tmp_path, capsys):
    args = case(tmp_path, pipeline, npus=(2,), groups={1: [0, 1]}, roles={1: "pp"})
    code, out, _ = _cli(capsys, "run", "--workload-configuration", args[0], "--system-configuration", args[1],
                        "--network-configuration", args[2], "--comm-group-configuration", args[4],
                        "--critical-path", "--report-json", str(tmp_path / "r.json"))
    assert code == 0
    assert "where the time went: rank 1" in out and "recv wait: pp (bubble)" in out
    assert "critical path:" in out and "message: pp" in out
    report = read_report(tmp_path / "r.json")
    assert report["critical_path"]["length_ns"] == report["summary"]["max_finish_ns"]
    assert all(isinstance(v, int) for v in report["ranks"][1]["breakdown"]["parts"].values())
    assert all(len(line) <= 80 for line in out.splitlines())


# ------------------------------------------------------------------------------------------- humanize
@pytest.mark.parametrize("ns, text", [(0, "0 ns"), (850, "850 ns"), (1_234, "1.234 µs"), (12_345, "12.35 µs"),
                                      (372_123_456, "372.1 ms"), (999_960_000, "1.000 s"), (1_500_000_000, "1.500 s"),
                                      (-2_500, "-2.500 µs")])
def test_format_ns(ns, text):
    assert format_ns(ns) == text


def test_rank_ranges_round_trip():
    assert rank_ranges([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert parse_rank_ranges("0-3,8,10-11", 16) == [0, 1, 2, 3, 8, 10, 11]
    for bad in ("x", "3-1", "", "0-16"):
        with pytest.raises(ValueError, match="--timeline-ranks"):
            parse_rank_ranges(bad, 16)
