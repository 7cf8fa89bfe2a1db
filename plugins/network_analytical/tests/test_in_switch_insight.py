"""In-switch phases in the breakdown and the timelines (issue 26): ``exposed_in_switch:<communicator>`` parts
that still add up exactly to the finish time, and ``in-switch`` slices in the Chrome and Kineto timelines."""

from __future__ import annotations

import gzip
import json

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.report import read_report
from astra_sim_testing import system_config

MIB = 1 << 20


def _case(tmp_path, impl, comm=T.ALL_REDUCE, compute=True):
    """Ring of 4 x switch of 8: a collective, then (optionally) a compute node that overlaps nothing."""
    net = tmp_path / "net.yml"
    net.write_text("topology: [Ring, Switch]\nnpus_count: [4, 8]\nbandwidth: [400, 50]\nlatency: [500, 500]\n")
    config = system_config(dims=2, local_mem_bw=1_000_000)
    for key in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all"):
        config[f"{key}-implementation"] = list(impl)
    system = tmp_path / "sys.json"
    system.write_text(json.dumps(config))
    for rank in range(32):
        nodes = [make_node(1, "grad_ar", T.COMM_COLL_NODE,
                           attrs={"is_cpu_op": False, "comm_type": comm, "comm_size": 64 * MIB})]
        if compute:
            nodes.append(make_node(2, "aten::mm", T.COMP_NODE, data_deps=[1],
                                   attrs={"is_cpu_op": False, "num_ops": 10**9, "tensor_size": 0}))
        write_et(f"{tmp_path}/w.{rank}.et", make_metadata(), nodes)
    return ["run", "--workload-configuration", f"{tmp_path}/w", "--system-configuration", str(system),
            "--network-configuration", str(net), "-q"]


def _run(tmp_path, args, name="report.json"):
    out = tmp_path / name
    assert main(args + ["--report-json", str(out)]) == 0
    return read_report(out)


def _union(intervals):
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


@pytest.mark.parametrize("comm", [T.ALL_REDUCE, T.REDUCE_SCATTER, T.ALL_GATHER])
def test_in_switch_time_is_its_own_part_and_the_parts_still_add_up(tmp_path, comm):
    timeline = tmp_path / "t.json"
    report = _run(tmp_path, _case(tmp_path, ["ring", "inSwitch"], comm) + ["--timeline", str(timeline), "--no-fold"])
    trace = json.loads(timeline.read_text())["traceEvents"]
    names = {"all_reduce": "in-switch reduce + multicast", "reduce_scatter": "in-switch reduce",
             "all_gather": "in-switch multicast"}
    for rank in report["ranks"]:
        parts = rank["breakdown"]["parts"]
        assert sum(parts.values()) == rank["finish_ns"]
        assert parts["exposed_in_switch:world"] > 0
        slices = [e for e in trace if e.get("cat") == "in_switch" and e["pid"] == rank["rank"]]
        # one in-switch phase per chunk (4): on the switch dimension (1) for this collective
        assert len(slices) == 4
        assert {e["args"]["dimension"] for e in slices} == {1}
        expected = names["all_reduce" if comm == T.ALL_REDUCE else
                          "reduce_scatter" if comm == T.REDUCE_SCATTER else "all_gather"]
        assert {e["name"] for e in slices} == {expected}
        # nothing overlaps the collective: its in-switch part is exactly the union of its in-switch slices
        ns = _union((round(float(e["ts"]) * 1000), round(float(e["ts"]) * 1000) + round(float(e["dur"]) * 1000))
                    for e in slices)
        assert parts["exposed_in_switch:world"] == ns
        comms = {c["communicator"]: c for c in rank["breakdown"]["communicators"]}
        assert comms["world"]["in_switch_busy_ns"] == ns == comms["world"]["in_switch_exposed_ns"]
        # the ring phases on dimension 0 stay exposed communication of the ordinary kind (all-reduce, 3 phases)
        if comm == T.ALL_REDUCE:
            assert parts["exposed:world"] > 0
    lanes = {e["args"]["name"] for e in trace if e.get("name") == "thread_name"}
    assert "in-switch" in lanes


def test_without_in_switch_no_such_part_or_slice(tmp_path):
    timeline = tmp_path / "t.json.gz"
    report = _run(tmp_path, _case(tmp_path, ["ring", "ring"]) + ["--timeline", str(timeline)])
    assert not any(p.startswith("exposed_in_switch") for r in report["ranks"] for p in r["breakdown"]["parts"])
    assert all("in_switch_busy_ns" not in c for c in report["breakdown"]["communicators"])
    trace = json.loads(gzip.decompress(timeline.read_bytes()))["traceEvents"]
    assert not [e for e in trace if e.get("cat") == "in_switch"]


def test_folded_and_unfolded_breakdowns_agree(tmp_path):
    args = _case(tmp_path, ["ring", "inSwitch"]) + ["--per-rank"]  # whole breakdowns, group ids included
    folded = _run(tmp_path, args, "folded.json")
    unfolded = _run(tmp_path, args + ["--no-fold"], "unfolded.json")
    assert folded["settings"]["fold"].get("simulated_ranks", 32) < 32
    assert [r["breakdown"] for r in folded["ranks"]] == [r["breakdown"] for r in unfolded["ranks"]]
    summary = folded["breakdown"]["parts"]
    assert summary["exposed_in_switch:world"] > 0


def test_kineto_traces_carry_the_phases_as_gpu_annotations(tmp_path):
    folder = tmp_path / "kineto"
    report = _run(tmp_path, _case(tmp_path, ["ring", "inSwitch"]) + ["--timeline", str(folder),
                                                                      "--timeline-format", "kineto",
                                                                      "--timeline-ranks", "0-1"])
    trace = json.loads((folder / "rank1.pt.trace.json").read_text())["traceEvents"]
    notes = [e for e in trace if e.get("cat") == "gpu_user_annotation"]
    assert len(notes) == 4 and {e["name"] for e in notes} == {"in-switch reduce + multicast"}
    kernel = next(e for e in trace if e.get("name") == "ncclDevKernel_AllReduce")
    assert {e["tid"] for e in notes} == {kernel["tid"]}
    for note in notes:  # inside the collective's kernel
        assert int(kernel["ts"]) <= int(note["ts"]) <= int(note["ts"]) + int(note["dur"]) <= \
            int(kernel["ts"]) + int(kernel["dur"]) + 1
    assert report["ranks"][1]["breakdown"]["parts"]["exposed_in_switch:world"] > 0


def test_the_terminal_names_the_part():
    from astra_analysis.breakdown import part_label

    assert part_label("exposed_in_switch:dp") == "exposed in-switch comm: dp"
