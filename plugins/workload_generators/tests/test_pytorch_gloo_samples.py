"""The real gloo jobs in ../shared/samples/pytorch-gloo (torch 2.14.1, CPU): DDP on 4 ranks and a 2-stage send/recv
pipeline on 2 ranks, converted and simulated end to end through the CLI, against their measured step times; and
the same jobs as Chakra's own tools would convert them (a dropped process root that the thread root still
depends on)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, read_et, types as T, write_et
from astra_sim.cli import main
from astra_sim.report import read_report

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gloo"
JOBS = {"a_ddp": 4, "b_pipeline": 2}
TOLERANCE = 0.25  # simulated step vs the measured (traced) step, per rank
THREAD = "[pytorch|profiler|execution_trace|thread]"


@pytest.fixture
def samples(shared_dir):
    path = shared_dir / "samples" / "pytorch-gloo"
    if not (path / "a_ddp" / "host_rank0.json.gz").exists():
        pytest.skip(f"{path} has no gloo sample jobs")
    return path


def _convert(samples, job, out, kineto=True, capsys=None):
    args = ["workload", "convert-pytorch", str(samples / job / "host_rank{rank}.json.gz"), "--ranks",
            str(JOBS[job]), "-o", str(out)]
    if kineto:
        args += ["--kineto", str(samples / job / "kineto_rank{rank}.json.gz")]
    assert main(args) == 0
    return [read_et(f"{out}.{r}.et").nodes for r in range(JOBS[job])]


def _run(prefix, npus, report):
    rc = main(["run", "--workload-configuration", str(prefix), "--system-configuration",
               str(EXAMPLE / "system.json"), "--network-configuration", str(EXAMPLE / f"network_{npus}.yml"),
               "--report-json", str(report), "-q"])
    assert rc == 0
    return read_report(report)


def _comm(nodes, *kinds):
    return [n for n in nodes if n.type in (kinds or (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE))]


def test_ddp_all_reduces_on_the_data_parallel_group(samples, tmp_path, capsys):
    ranks = _convert(samples, "a_ddp", tmp_path / "d", kineto=False)
    out, err = capsys.readouterr()
    assert "1424 nodes per rank" in out and "gloo" in out and err == ""
    sizes = None
    for nodes in ranks:
        by_id = {n.id: n for n in nodes}
        ars = _comm(nodes)
        # the 4 DDP buckets, all-reduced on the world group "0" (the job's only group, its data-parallel group)
        assert [n.attrs["comm_type"] for n in ars] == [T.ALL_REDUCE] * 4
        assert {n.attrs["pg_name"] for n in ars} == {"0"}
        assert sizes is None or [n.attrs["comm_size"] for n in ars] == sizes
        sizes = [n.attrs["comm_size"] for n in ars]
        for ar in ars:
            assert by_id[ar.data_deps[0]].name == "c10d::allreduce_" and ar.name.endswith("gloo:all_reduce")
            # asynchronous: the op that waits is DDP's use of the reduced bucket, not the next backward op
            (waiter,) = [n for n in nodes if ar.id in n.data_deps]
            assert waiter.id > max(a.data_deps[0] for a in ars)
    # the buckets hold the model's gradients: 3.1 + 2.1 + 2.1 + 1.0 MB of fp32
    assert sizes == [3_132_320, 2_106_368, 2_107_392, 1_024_000]


def test_pipeline_send_recv_peers_and_tags_match(samples, tmp_path, capsys):
    ranks = _convert(samples, "b_pipeline", tmp_path / "p", kineto=False)
    out, err = capsys.readouterr()
    # uneven ranks are reported as such (torch writes 909 ops on rank 0 and 1049 on rank 1, without the root)
    assert "925 to 1065 nodes per rank" in out and "rank 0: 925 nodes" in out and "rank 1: 1065 nodes" in out
    assert err == ""  # every message has its match
    for me, peer in ((0, 1), (1, 0)):
        nodes = ranks[me]
        data = [n for n in _comm(nodes) if n.attrs["comm_size"] == 16 * 256 * 4]
        sends = [n for n in data if n.type == T.COMM_SEND_NODE]
        recvs = [n for n in data if n.type == T.COMM_RECV_NODE]
        assert len(sends) == len(recvs) == 4
        assert {n.attrs["comm_dst"] for n in sends} == {n.attrs["comm_src"] for n in recvs} == {peer}
        assert {n.attrs["comm_tag"] for n in data} == {0}  # dist.send(tag=0) on the world group "0"
    # rank 0 sends 4 activations (forward), rank 1 receives them in the same order; gradients come back
    first = lambda nodes, kind: sorted(n.id for n in _comm(nodes, kind) if n.attrs["comm_size"] == 16384)
    assert len(first(ranks[0], T.COMM_SEND_NODE)) == len(first(ranks[1], T.COMM_RECV_NODE)) == 4


@pytest.mark.parametrize("job", sorted(JOBS))
def test_sample_jobs_simulate_within_tolerance_of_the_measured_step(samples, tmp_path, job):
    npus = JOBS[job]
    timing = [json.loads((samples / job / f"timing_rank{r}.json").read_text()) for r in range(npus)]
    _convert(samples, job, tmp_path / "k", kineto=True)
    report = _run(tmp_path / "k", npus, tmp_path / "k.json")
    assert report["stats"]["messages"] > 0 and report["warnings"] == []
    for r, t in zip(report["ranks"], timing):
        measured_ns = t["traced_step_ms"] * 1e6
        assert abs(r["finish_ns"] - measured_ns) <= TOLERANCE * measured_ns, (job, r["rank"], r["finish_ns"])
        assert r["cpu_ns"] > 0.5 * measured_ns  # the measured CPU ops are replayed
    # host trace alone: no durations, but the same communication, which finishes
    _convert(samples, job, tmp_path / "h", kineto=False)
    report = _run(tmp_path / "h", npus, tmp_path / "h.json")
    assert report["stats"]["messages"] > 0
    assert all(r["finish_ns"] > 0 for r in report["ranks"])


def _chakra_style(host_path, out):
    """What chakra_trace_link + chakra_converter PyTorch (mlcommons/chakra 1.0.0) write for a host trace with no
    GPU kernels, built from their documented behaviour: the nodes taken in id order (trace_link sorts them); every
    op a COMP node (METADATA for process_group:init) with ctrl_deps [parent] when the parent was converted before
    it; data_deps from a DFS over each thread root's children by id, each op depending on the previous one; then
    nodes with no data dependency and no dependant dropped: the process root goes, the thread root's ctrl
    dependency on it stays. No gloo communication: the converter only knows NCCL kernels."""
    data = json.loads(gzip.decompress(Path(host_path).read_bytes()))
    nodes = sorted(data["nodes"], key=lambda n: n["id"])
    children, ctrl, seen = {}, {}, set()
    for n in nodes:
        if n["ctrl_deps"] != n["id"]:
            children.setdefault(n["ctrl_deps"], []).append(n)
        ctrl[n["id"]] = [n["ctrl_deps"]] if n["ctrl_deps"] in seen else []
        seen.add(n["id"])
    deps = {n["id"]: [] for n in nodes}
    for root in (n for n in nodes if n["name"] == THREAD):
        last, stack, visited = None, [root], set()
        while stack:
            n = stack.pop()
            if n["id"] in visited:
                continue
            visited.add(n["id"])
            if last is not None:
                deps[n["id"]].append(last)
            last = n["id"]
            stack.extend(sorted(children.get(n["id"], []), key=lambda c: -c["id"]))
    parents = {d for ds in deps.values() for d in ds}
    kept = [n for n in nodes if deps[n["id"]] or n["id"] in parents]
    out_nodes = []
    for n in kept:
        attrs = {a["name"]: a["value"] for a in n["attrs"] if a["name"] in
                 ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema")}
        attrs.update(is_cpu_op=True, stream=0)
        ntype = T.METADATA_NODE if "process_group:init" in n["name"] else T.COMP_NODE
        io = {f"{k}_{f}": str(n[k][f]) for k in ("inputs", "outputs") for f in ("values", "shapes", "types")}
        out_nodes.append(make_node(n["id"], n["name"], ntype, data_deps=deps[n["id"]], ctrl_deps=ctrl[n["id"]],
                                   attrs=attrs, **io))
    meta = make_metadata(version="", attrs={k: data[k] for k in ("schema", "pid", "time", "start_ts", "finish_ts")},
                         attr_types={"schema": "string_val", "pid": "uint64_val", "time": "string_val",
                                     "start_ts": "uint64_val", "finish_ts": "uint64_val"})
    write_et(out, meta, out_nodes)
    return out_nodes


@pytest.mark.parametrize("job", sorted(JOBS))
def test_chakra_converted_sample_jobs_run(samples, tmp_path, job, capsys):
    npus = JOBS[job]
    for r in range(npus):
        nodes = _chakra_style(samples / job / f"host_rank{r}.json.gz", tmp_path / f"c.{r}.et")
        ids = {n.id for n in nodes}
        (thread,) = [n for n in nodes if n.name == THREAD]
        assert thread.ctrl_deps == [1] and 1 not in ids  # the dependency on the dropped process root
    report = _run(tmp_path / "c", npus, tmp_path / "c.json")
    assert len(report["warnings"]) == npus
    assert all("process root" in w and "node 1" in w for w in report["warnings"])
    assert report["stats"]["messages"] == 0  # Chakra's output keeps no gloo communication
    # ours against Chakra's: every difference reported, counted by kind
    _convert(samples, job, tmp_path / "o", kineto=False)
    capsys.readouterr()
    assert main(["workload", "compare", str(tmp_path / "o"), str(tmp_path / "c"), "--details", "2"]) == 1
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "o.0.et vs" in first and "only in A" in first  # our communication nodes
    assert out.count("  node #") == 2 * npus
