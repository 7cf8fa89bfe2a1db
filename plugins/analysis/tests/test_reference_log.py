"""``--astra-sim-log``: the reference's stdout, line for line (core/astra_sim/reference_log.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim import simulate
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_analysis.reference_log import (
    LIBSTDCXX_BUCKET_COUNTS, libstdcxx_iteration_order, log_lines, merged_length, spdlog_line,
)
from astra_sim_testing import system_config

MIB = 1 << 20
PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[[^\]]+\] \[(info|warning)\] ")


# ---------------------------------------------------------------- libstdc++ iteration order


def test_distinct_buckets_iterate_newest_first():
    # 13 buckets after the first insertion; 5, 3 and 40 (= 1 mod 13) land in different ones
    assert libstdcxx_iteration_order([5, 3, 40]) == [40, 3, 5]


def test_a_bucket_run_keeps_its_place_and_takes_new_keys_first():
    # 1 and 14 share bucket 1: 14 goes in front of 1, the run stays behind the newer bucket 2's run
    assert libstdcxx_iteration_order([1, 2, 14]) == [2, 14, 1]


def test_rehash_at_the_fourteenth_key():
    keys = list(range(14))
    # the 14th key needs 29 buckets: the rehash walks the old list (12 .. 0) putting each key in
    # front, which reverses it; 13 then goes in front of all
    assert libstdcxx_iteration_order(keys) == [13] + list(range(13))
    assert LIBSTDCXX_BUCKET_COUNTS[:3] == (13, 29, 59)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compare with libstdc++")
def test_matches_libstdcxx(tmp_path):
    import random

    source = tmp_path / "order.cc"
    source.write_text(
        "#include <unordered_map>\n#include <cstdio>\n#include <cstdint>\n"
        "int main(){size_t n; while(scanf(\"%zu\",&n)==1){std::unordered_map<uint64_t,int> m;"
        "for(size_t i=0;i<n;i++){unsigned long long k; scanf(\"%llu\",&k); m[k]=1;}"
        "for(auto&kv:m) printf(\"%llu \",(unsigned long long)kv.first); printf(\"\\n\");}}\n")
    binary = tmp_path / "order"
    subprocess.run(["g++", "-O1", "-o", str(binary), str(source)], check=True, timeout=120)
    rng = random.Random(25)
    cases = []
    for n in (1, 12, 13, 14, 29, 30, 59, 60, 200, 1109, 1110, 2500):
        cases.append(list(range(n)))
        cases.append(rng.sample(range(20 * n), n))
        cases.append(rng.sample(range(1 << 40), n))
    text = "".join(f"{len(c)} {' '.join(map(str, c))}\n" for c in cases)
    out = subprocess.run([str(binary)], input=text, capture_output=True, text=True, check=True).stdout
    for keys, line in zip(cases, out.splitlines()):
        assert libstdcxx_iteration_order(keys) == [int(x) for x in line.split()]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10_000), unique=True, max_size=80))
def test_iteration_order_is_a_permutation(keys):
    assert sorted(libstdcxx_iteration_order(keys)) == sorted(keys)


# ---------------------------------------------------------------- interval union


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30)).map(lambda t: (t[0], t[0] + t[1])), max_size=12))
def test_merged_length_is_the_measure_of_the_union(intervals):
    covered = {t for start, end in intervals for t in range(start, end)}
    assert merged_length(intervals) == len(covered)


def test_spdlog_line_format():
    line = spdlog_line("workload", "info", "sys[0] finished, 1 cycles, exposed communication 1 cycles.", 0.25)
    assert PREFIX.match(line)
    assert line.endswith("] [workload] [info] sys[0] finished, 1 cycles, exposed communication 1 cycles.")
    assert ".250] " in line


# ---------------------------------------------------------------- whole runs


@pytest.fixture
def env(tmp_path):
    def write(name, nodes_for_rank, npus):
        prefix = tmp_path / name
        for rank in range(npus):
            write_et(f"{prefix}.{rank}.et", make_metadata(), nodes_for_rank(rank))
        return str(prefix)

    def network(dims, topology=None):
        path = tmp_path / f"net{'x'.join(map(str, dims))}.yml"
        topology = topology or ["Ring"] * len(dims)
        path.write_text(f"topology: [ {', '.join(topology)} ]\nnpus_count: [ {', '.join(map(str, dims))} ]\n"
                        f"bandwidth: [ {', '.join(['50'] * len(dims))} ]\nlatency: [ {', '.join(['500'] * len(dims))} ]\n")
        return str(path)

    def system(name="sys.json", **overrides):
        path = tmp_path / name
        path.write_text(json.dumps(system_config(**overrides)))
        return str(path)

    class Env:
        dir = tmp_path

    e = Env()
    e.trace, e.network, e.system = write, network, system
    return e


def coll(node_id, size=MIB, deps=(), **attrs):
    return make_node(node_id, f"ar{node_id}", T.COMM_COLL_NODE, data_deps=list(deps),
                     attrs={"comm_type": T.ALL_REDUCE, "comm_size": size, **attrs})


def comp(node_id, us, deps=(), **attrs):
    return make_node(node_id, f"c{node_id}", T.COMP_NODE, duration_micros=us, data_deps=list(deps), attrs=attrs)


def log_of(capsys, *args):
    capsys.readouterr()
    rc = main(["run", *args, "--astra-sim-log"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.splitlines()
    assert lines and all(PREFIX.match(line) for line in lines), out
    return [PREFIX.sub("", line) for line in lines], err


def test_rings_per_collective_and_dimension(capsys, env):
    """Ring and direct: a line per dimension (offset = NPUs below it); one*: one line over every NPU,
    and nothing after it; doubleBinaryTree: no line; a missing implementation list: no line."""
    system = env.system(**{"all-reduce-implementation": ["ring", "direct"],
                           "reduce-scatter-implementation": ["halvingDoubling"],
                           "all-gather-implementation": ["oneRing", "ring"],
                           "all-to-all-implementation": ["doubleBinaryTree", "ring"]})
    data = json.loads(Path(system).read_text())
    prefix = env.trace("ar", lambda r: [coll(1)], 8)
    lines, _ = log_of(capsys, f"--workload-configuration={prefix}", f"--system-configuration={system}",
                      f"--network-configuration={env.network([4, 2])}")
    ring = "ring of node 0, id: 0 dimension: local total nodes in ring: {n} index in ring: 0 offset: {o} " \
           "total nodes in ring: {n}"
    assert lines[:5] == [ring.format(n=4, o=1), ring.format(n=2, o=4),  # all-reduce
                         ring.format(n=4, o=1),  # reduce-scatter, one dimension listed
                         ring.format(n=8, o=1),  # all-gather: oneRing spans the 8 NPUs
                         ring.format(n=2, o=4)]  # all-to-all: the tree prints nothing
    assert lines[5].startswith("sys[")
    assert lines[-1] == "Exiting"
    del data["all-to-all-implementation"]
    Path(system).write_text(json.dumps(data))
    lines, _ = log_of(capsys, f"--workload-configuration={prefix}", f"--system-configuration={system}",
                      f"--network-configuration={env.network([4, 2])}")
    assert sum(line.startswith("ring of node 0") for line in lines) == 4


@pytest.mark.parametrize("coll_id,first", [(1, "GPU time"), (14, "Comm time")])
def test_statistics_lines_in_the_references_map_order(capsys, env, coll_id, first):
    """A compute node (id 2) and an all-reduce, both free at t=0, overlap. The kind lines follow
    the reference's unordered_map of nodes: ids 1 and 2 sit in buckets 1 and 2, the newer bucket
    (2, the compute node) first; id 14 (bucket 1), issued after 2, starts the newer run."""
    prefix = env.trace(f"ov{coll_id}", lambda r: [coll(coll_id), comp(2, 5)], 4)
    lines, _ = log_of(capsys, f"--workload-configuration={prefix}", f"--system-configuration={env.system()}",
                      f"--network-configuration={env.network([4])}")
    report = simulate(prefix, env.system(), env.network([4]))
    r0 = report.ranks[0]
    block = lines[lines.index(f"sys[0] finished, {r0.finish_ns} cycles, exposed communication "
                              f"{r0.finish_ns - 5000} cycles."):][:7]
    comm = r0.comm_ns
    expected_kinds = {"GPU time": 5000, "Comm time": comm}
    second = "GPU time" if first == "Comm time" else "Comm time"
    assert block[1:] == [
        "sys[0]. Post statistics processing start.",
        "sys[0]. Post statistics processing end.",
        f"sys[0], Wall time: {r0.finish_ns}",
        f"sys[0], {first}: {expected_kinds[first]}",
        f"sys[0], {second}: {expected_kinds[second]}",
        f"sys[0], Total compute-communication overlap: {5000 + comm - r0.finish_ns}",
    ]
    assert 0 < 5000 + comm - r0.finish_ns


def test_group_rings_when_first_used(capsys, env):
    """A collective on a group that is a subset of the NPUs logs the group's ring for each member,
    when it is issued (here at t=0, before any rank finishes); the index is in the order listed."""
    groups = env.dir / "groups.json"
    groups.write_text(json.dumps({"1": [2, 0]}))
    prefix = env.trace("grp", lambda r: [coll(1, pg_name="1"), coll(2, pg_name="1", deps=[1])]
                       if r in (0, 2) else [comp(1, 1)], 4)
    lines, _ = log_of(capsys, f"--workload-configuration={prefix}", f"--system-configuration={env.system()}",
                      f"--network-configuration={env.network([4])}", f"--comm-group-configuration={groups}")
    assert lines[4:6] == [
        "custom ring, id: 0, dimension: local total nodes in ring: 2 index in ring: 1 total nodes in ring 2",
        "custom ring, id: 2, dimension: local total nodes in ring: 2 index in ring: 0 total nodes in ring 2",
    ]
    finished = [line.split("]")[0] for line in lines if " finished, " in line]
    assert finished == ["sys[1", "sys[3", "sys[0", "sys[2"]
    assert sum("custom ring" in line for line in lines) == 2  # once per rank and collective type


def test_roofline_averages(capsys, env):
    """One compute-bound node: OI 1000 -> min(1.6e15, 9e14) = 9e14 FLOP/s, 1111 ns; the reference
    divides by 1 + the compute time (1112 ns)."""
    system = env.system(**{"roofline-enabled": 1})
    prefix = env.trace("roof", lambda r: [comp(1, 0, num_ops=1_000_000_000, tensor_size=1_000_000)], 2)
    lines, _ = log_of(capsys, f"--workload-configuration={prefix}", f"--system-configuration={system}",
                      f"--network-configuration={env.network([2])}")
    block = lines[lines.index("sys[0] finished, 1111 cycles, exposed communication 0 cycles."):][:9]
    assert block[3:] == [
        "sys[0], Wall time: 1111",
        "sys[0], GPU time: 1111",
        "sys[0], Compute bound percentage: 99.910%",
        "sys[0], Average compute utilization: 99.910%",
        "sys[0], Average memory utilization: 56.199%",
        "sys[0], Average operation intensity: 999.101",
    ]


def test_kinds_the_reference_cannot_report_warn_once(capsys, env):
    prefix = env.trace("cpu", lambda r: [comp(1, 2, is_cpu_op=True), coll(2, deps=[1])], 4)
    lines, err = log_of(capsys, f"--workload-configuration={prefix}", f"--system-configuration={env.system()}",
                        f"--network-configuration={env.network([4])}")
    assert "sys[0], CPU time: 2000" in lines
    assert err.count("astra: warning: --astra-sim-log: rank(s) 0, 1, 2, 3 ran CPU nodes") == 1


def test_stdout_is_only_the_log_and_the_table_goes_to_stderr(capsys, env):
    prefix = env.trace("ar", lambda r: [coll(1)], 4)
    lines, err = log_of(capsys, f"--workload-configuration={prefix}", f"--system-configuration={env.system()}",
                        f"--network-configuration={env.network([4])}")
    assert len(lines) == 4 + 4 * 5 + 1
    assert "finish" in err and "step time" in err


def test_python_api_lines(env):
    prefix = env.trace("ar", lambda r: [coll(1)], 4)
    report = simulate(prefix, env.system(), env.network([4]), astra_sim_log=True)
    assert log_lines(report)[-1] == "Exiting"
    assert all(PREFIX.match(line) for line in log_lines(report, prefixed=True))
    plain = simulate(prefix, env.system(), env.network([4]))
    assert plain.astra_sim_log is None
    assert all(line.startswith("sys[") for line in log_lines(plain))


def test_subprocess_log_is_the_whole_stdout(env):
    prefix = env.trace("ar", lambda r: [coll(1)], 4)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "astra"), "run", "--workload-configuration", prefix,
         "--system-configuration", env.system(), "--network-configuration", env.network([4]), "--astra-sim-log"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert all(PREFIX.match(line) for line in proc.stdout.splitlines())
    assert "step time" in proc.stderr


def test_log_simulates_every_rank(env):
    """Symmetric ranks are normally folded (one simulated per class); the log needs every rank's
    own nodes, so a run that collects it is not folded, and gives the same times."""
    prefix = env.trace("sym", lambda r: [coll(1)], 4)
    folded = simulate(prefix, env.system(), env.network([4]))
    logged = simulate(prefix, env.system(), env.network([4]), astra_sim_log=True)
    assert logged.settings["fold"]["simulated_ranks"] == 4
    assert "--astra-sim-log" in logged.settings["fold"]["reason"]
    assert [r.finish_ns for r in logged.ranks] == [r.finish_ns for r in folded.ranks]
    assert sum(" finished, " in line for line in log_lines(logged)) == 4
