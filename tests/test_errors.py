"""Bad inputs: a non-zero exit and a message naming the file (and node), never a traceback or a hang.

Most checks call the CLI in-process (``astra_sim.cli.main``); a few run the
installed ``astra`` script as a subprocess to check the real exit code and that
stderr has no traceback.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.simulation import simulate
from astra_sim_testing import system_config

GIB = 1 << 30
MIB = 1 << 20
ASTRA = Path(sys.executable).parent / "astra"

SYSTEM = system_config()


def t_msg(m, bw=50.0, lat=500.0, hops=1):
    return int(hops * lat + m / (bw * GIB / 1e9))


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch):
    monkeypatch.delenv("ASTRA_PLUGINS", raising=False)


@pytest.fixture
def env(tmp_path, capsys):
    class Env:
        dir = tmp_path

        def network(self, npus=2, topology="Ring", name=None):
            path = tmp_path / (name or f"{topology}{npus}.yml")
            path.write_text(
                f"topology: [ {topology} ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
            )
            return str(path)

        def system(self, name="sys.json", drop=(), **overrides):
            data = dict(SYSTEM)
            for key in drop:
                data.pop(key)
            for key, value in overrides.items():
                data[key.replace("_", "-")] = value
            path = tmp_path / name
            path.write_text(json.dumps(data))
            return str(path)

        def trace(self, name, nodes_for_rank, npus=2):
            prefix = tmp_path / name
            for rank in range(npus):
                write_et(f"{prefix}.{rank}.et", make_metadata(), nodes_for_rank(rank))
            return str(prefix)

        def cli(self, prefix, system=None, network=None, *extra):
            capsys.readouterr()
            rc = main([
                "run", f"--workload-configuration={prefix}",
                "--system-configuration", system or self.system(),
                "--network-configuration", network or self.network(),
                "-q", *extra,
            ])
            out, err = capsys.readouterr()
            return rc, out, err

    return Env()


def astra_subprocess(*args, timeout=60):
    return subprocess.run([str(ASTRA), *args], capture_output=True, text=True, timeout=timeout)


def comp(node_id, micros=1, deps=(), **attrs):
    return make_node(node_id, f"comp{node_id}", T.COMP_NODE, data_deps=list(deps), duration_micros=micros,
                     attrs=attrs or None)


def coll(node_id, comm_type, size, **attrs):
    a = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size}
    a.update(attrs)
    return make_node(node_id, f"coll{node_id}", T.COMM_COLL_NODE, attrs=a)


def assert_error(rc, err, *needles, code=2):
    assert rc == code, err
    assert err.startswith("astra: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


# ---------------------------------------------------------------- workload content


def test_roofline_compute_without_num_ops(env):
    prefix = env.trace("noops", lambda r: [make_node(3, "gemm", T.COMP_NODE, attrs={"tensor_size": 100})])
    rc, out, err = env.cli(prefix, env.system(roofline_enabled=1))
    assert_error(rc, err, "noops.0.et", "node 3", "'gemm'", "num_ops")


def test_roofline_needs_bandwidth_and_peak(env):
    prefix = env.trace("k", lambda r: [make_node(1, "k", T.COMP_NODE, attrs={"num_ops": 1, "tensor_size": 1})])
    rc, out, err = env.cli(prefix, env.system("nopeak.json", roofline_enabled=1, peak_perf=0))
    assert_error(rc, err, "nopeak.json", "peak-perf")


def test_memory_node_with_no_memory_expansion(env):
    mem = env.dir / "mem.json"
    mem.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    prefix = env.trace("mem", lambda r: [make_node(4, "load", T.MEM_LOAD_NODE, attrs={"tensor_size": 1024})])
    rc, out, err = env.cli(prefix, None, None, "--remote-memory-configuration", str(mem))
    assert_error(rc, err, "mem.0.et", "node 4", "NO_MEMORY_EXPANSION", "mem.json")


def test_memory_node_without_memory_configuration(env):
    prefix = env.trace("mem", lambda r: [make_node(4, "store", T.MEM_STORE_NODE, attrs={"tensor_size": 1024})])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "mem.0.et", "node 4", "NO_MEMORY_EXPANSION")


def test_memory_node_without_memory_plugin(env):
    prefix = env.trace("mem", lambda r: [make_node(4, "load", T.MEM_LOAD_NODE, attrs={"tensor_size": 1024})])
    rc, out, err = env.cli(prefix, None, None, "-p", "network_analytical")
    assert_error(rc, err, "mem.0.et", "node 4", "remote-memory backend")


def test_memory_node_works_with_per_npu_expansion(env):
    mem = env.dir / "mem.json"
    mem.write_text(json.dumps({"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 1000,
                               "remote-mem-bw": 100}))
    prefix = env.trace("mem", lambda r: [make_node(4, "load", T.MEM_LOAD_NODE, attrs={"tensor_size": 1024})])
    report = simulate(prefix, env.system(), env.network(), str(mem))
    assert [r.finish_ns for r in report.ranks] == [1000 + 10, 1000 + 10]


def test_dependency_on_missing_node(env):
    prefix = env.trace("dangling", lambda r: [comp(1), comp(2, deps=[99])])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "dangling.0.et", "node 2", "node 99")


def test_cycle(env):
    prefix = env.trace("cycle", lambda r: [comp(1, deps=[2]), comp(2, deps=[1])])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "cycle.0.et", "cycle", "1 ('comp1')", "2 ('comp2')")


def test_truncated_file(env):
    prefix = env.trace("trunc", lambda r: [comp(1), comp(2, deps=[1])])
    path = Path(f"{prefix}.1.et")
    path.write_bytes(path.read_bytes()[:-4])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "trunc.1.et", "truncated")


def test_gzip_compressed_trace_is_read_transparently(env):
    prefix = env.trace("gz", lambda r: [comp(1, 2), comp(2, 3, deps=[1])])
    for rank in range(2):
        path = Path(f"{prefix}.{rank}.et")
        path.write_bytes(gzip.compress(path.read_bytes()))
        assert path.read_bytes()[:2] == b"\x1f\x8b"
    report = simulate(prefix, env.system(), env.network())
    assert [r.finish_ns for r in report.ranks] == [5000, 5000]


def test_corrupt_gzip_file(env):
    prefix = env.trace("badgz", lambda r: [comp(1)])
    path = Path(f"{prefix}.0.et")
    path.write_bytes(gzip.compress(path.read_bytes())[:-6])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "badgz.0.et", "gzip")


@pytest.mark.parametrize("comm_type,name", [
    (T.REDUCE, "REDUCE"), (T.BARRIER, "BARRIER"), (T.GATHER, "GATHER"), (T.SCATTER, "SCATTER"),
    (T.REDUCE_SCATTER_BLOCK, "REDUCE_SCATTER_BLOCK"),
])
def test_unsupported_collective_type(env, comm_type, name):
    prefix = env.trace("unsup", lambda r: [coll(6, comm_type, 1024)])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "unsup.0.et", "node 6", f"collective type {name} is not supported")


def test_collective_without_comm_size(env):
    prefix = env.trace("nosize", lambda r: [make_node(1, "ar", T.COMM_COLL_NODE, attrs={"comm_type": 0})])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "nosize.0.et", "node 1", "comm_size")


def test_comm_node_marked_cpu_op(env):
    prefix = env.trace("cpucomm", lambda r: [coll(1, T.ALL_REDUCE, MIB, is_cpu_op=True)])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "cpucomm.0.et", "node 1", "CPU")


def test_send_from_wrong_rank(env):
    def nodes(rank):
        return [make_node(1, "s", T.COMM_SEND_NODE,
                          attrs={"comm_src": 1 - rank, "comm_dst": 1 - rank, "comm_size": 8, "comm_tag": 0})]

    rc, out, err = env.cli(env.trace("wrong", nodes))
    assert_error(rc, err, "wrong.0.et", "node 1", "comm_src")


def test_send_to_npu_outside_network(env):
    prefix = env.trace("out", lambda r: [make_node(1, "s", T.COMM_SEND_NODE,
                                                   attrs={"comm_dst": 7, "comm_size": 8, "comm_tag": 0})])
    rc, out, err = env.cli(prefix)
    assert_error(rc, err, "out.0.et", "node 1", "comm_dst is 7")


# ---------------------------------------------------------------- deadlocks


def test_recv_whose_send_never_comes_is_a_deadlock(env):
    def nodes(rank):
        if rank == 1:
            return [make_node(8, "lonely", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": 64, "comm_tag": 2})]
        return [comp(1, 1)]

    rc, out, err = env.cli(env.trace("dl", nodes))
    assert_error(rc, err, "deadlock", "rank 1", "dl.1.et", "node 8", "'lonely'", "0 -> 1, 64 bytes", code=3)
    assert "rank 0" not in err  # rank 0 finished


def test_send_whose_receive_never_comes_deadlocks_under_rendezvous(env):
    def nodes(rank):
        if rank == 0:
            return [make_node(5, "orphan", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_size": 64, "comm_tag": 2})]
        return [comp(1, 1)]

    prefix = env.trace("orphan", nodes)
    rc, out, err = env.cli(prefix, None, None, "--rendezvous-protocol")
    assert_error(rc, err, "deadlock", "rank 0", "orphan.0.et", "node 5", "'orphan'", code=3)


def test_send_whose_receive_never_comes_completes_on_arrival_when_allowed(env):
    # Reference semantics (§5): a send completes when the data reaches dst; an unmatched send alone
    # therefore does not block its rank. It is an error (tests/test_unmatched.py) unless allowed.
    def nodes(rank):
        if rank == 0:
            return [make_node(5, "orphan", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_size": 64, "comm_tag": 2})]
        return [comp(1, 1)]

    report = simulate(env.trace("orphan", nodes), env.system(), env.network(), allow_unmatched=True)
    assert [r.finish_ns for r in report.ranks] == [t_msg(64), 1000]
    assert [(m["src"], m["dst"], m["node"]) for m in report.unmatched_messages] == [(0, 1, 5)]


def test_mismatched_sizes_deadlock(env):
    def nodes(rank):
        if rank == 0:
            return [make_node(1, "s", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_size": 64, "comm_tag": 2})]
        return [make_node(1, "r", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": 65, "comm_tag": 2})]

    rc, out, err = env.cli(env.trace("sizes", nodes))
    assert_error(rc, err, "deadlock", "rank 1", "node 1", code=3)


def test_deadlock_subprocess_exit_code(env):
    def nodes(rank):
        if rank == 1:
            return [make_node(8, "lonely", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": 64, "comm_tag": 2})]
        return [comp(1, 1)]

    proc = astra_subprocess("run", f"--workload-configuration={env.trace('dl', nodes)}",
                            "--system-configuration", env.system(), "--network-configuration", env.network(), "-q")
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert "deadlock" in proc.stderr and "node 8" in proc.stderr


# ---------------------------------------------------------------- endpoint-delay 0


def test_endpoint_delay_zero_simulates_correctly(env):
    prefix = env.trace("e0", lambda r: [coll(1, T.ALL_REDUCE, MIB)], npus=4)
    rc, out, err = env.cli(prefix, env.system(endpoint_delay=0), env.network(4), "--astra-sim-log")
    assert rc == 0, err
    # Ring-4, 50 GB/s, 500 ns: m = 65536 B -> T = 1720, R = 120; no endpoint delays.
    expected = 4 * (6 * 1720 + 3 * 120)
    assert t_msg(65536) == 1720
    assert f"sys[0] finished, {expected} cycles, exposed communication {expected} cycles." in out


# ---------------------------------------------------------------- missing files


def test_missing_workload_file_for_a_rank(env):
    prefix = env.trace("three", lambda r: [comp(1)], npus=3)
    rc, out, err = env.cli(prefix, None, env.network(4))
    assert_error(rc, err, "three.3.et", "does not exist", "rank 3")


def test_no_workload_files_at_all(env):
    rc, out, err = env.cli(str(env.dir / "nothing"))
    assert_error(rc, err, "nothing", "no trace found")


def test_missing_system_and_network_files(env):
    prefix = env.trace("ok", lambda r: [comp(1)])
    rc, out, err = env.cli(prefix, str(env.dir / "nosys.json"))
    assert_error(rc, err, "nosys.json", "does not exist")
    rc, out, err = env.cli(prefix, None, str(env.dir / "nonet.yml"))
    assert_error(rc, err, "nonet.yml", "does not exist")


# ---------------------------------------------------------------- network YAML


@pytest.mark.parametrize("text,needles", [
    ("topology: [ Torus ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n", ["topology[0]", "Torus"]),
    ("topology: [ Ring, Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50, 50 ]\nlatency: [ 500, 500 ]\n",
     ["npus_count", "1 entries", "2"]),
    # (one NPU is a machine too, a lone GPU; none is not)
    ("topology: [ Ring ]\nnpus_count: [ 0 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n", ["npus_count[0]", ">= 1"]),
    ("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 0 ]\nlatency: [ 500 ]\n", ["bandwidth[0]"]),
    ("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ -1 ]\n", ["latency[0]"]),
    ("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\n", ["'latency' is missing"]),
    ("topology: [ Ring\n", ["not valid YAML"]),
    ("just a string\n", ["expected a mapping"]),
], ids=["unknown-topology", "mismatched-lengths", "npus-count-0", "zero-bw", "negative-latency",
        "missing-key", "not-yaml", "not-a-mapping"])
def test_bad_network_yaml(env, text, needles):
    net = env.dir / "bad.yml"
    net.write_text(text)
    prefix = env.trace("ok", lambda r: [comp(1)])
    rc, out, err = env.cli(prefix, None, str(net))
    assert_error(rc, err, "bad.yml", *needles)


# ---------------------------------------------------------------- system JSON


def test_system_json_invalid_json(env):
    bad = env.dir / "bad.json"
    bad.write_text('{"endpoint-delay": 10,,}')
    rc, out, err = env.cli(env.trace("ok", lambda r: [comp(1)]), str(bad))
    assert_error(rc, err, "bad.json", "invalid JSON", "line 1")


def test_system_json_not_an_object(env):
    bad = env.dir / "list.json"
    bad.write_text("[1, 2]")
    rc, out, err = env.cli(env.trace("ok", lambda r: [comp(1)]), str(bad))
    assert_error(rc, err, "list.json", "JSON object")


def test_system_json_bad_scheduling_policy(env):
    rc, out, err = env.cli(env.trace("ok", lambda r: [comp(1)]), env.system("pol.json", scheduling_policy="RANDOM"))
    assert_error(rc, err, "pol.json", "scheduling-policy", "RANDOM")


def test_system_json_bad_number(env):
    rc, out, err = env.cli(env.trace("ok", lambda r: [comp(1)]), env.system("num.json", endpoint_delay="ten"))
    assert_error(rc, err, "num.json", "endpoint-delay", "number")


def test_missing_splits_only_matters_when_a_collective_runs(env):
    system = env.system("nosplit.json", drop=["preferred-dataset-splits"])
    rc, out, err = env.cli(env.trace("compute", lambda r: [comp(1)]), system)
    assert rc == 0, err
    rc, out, err = env.cli(env.trace("ar", lambda r: [coll(1, T.ALL_REDUCE, MIB)]), system)
    assert_error(rc, err, "nosplit.json", "preferred-dataset-splits")


def test_unknown_algorithm_name(env):
    system = env.system("unk.json", all_reduce_implementation=["bogusRing"])
    rc, out, err = env.cli(env.trace("ar", lambda r: [coll(1, T.ALL_REDUCE, MIB)]), system)
    assert_error(rc, err, "unk.json", "unknown collective algorithm 'bogusRing'", "ring")


def test_missing_implementation_key(env):
    system = env.system("noag.json", drop=["all-gather-implementation"])
    rc, out, err = env.cli(env.trace("ag", lambda r: [coll(1, T.ALL_GATHER, MIB)]), system)
    assert_error(rc, err, "noag.json", "all-gather-implementation")


def test_more_implementations_than_network_dims(env):
    system = env.system("many.json", all_reduce_implementation=["ring", "ring"])
    rc, out, err = env.cli(env.trace("ar", lambda r: [coll(1, T.ALL_REDUCE, MIB)]), system)
    assert_error(rc, err, "many.json", "2 algorithms", "1 dimension")


def test_implementation_not_a_list(env):
    system = env.system("str.json", all_reduce_implementation="ring")
    rc, out, err = env.cli(env.trace("ok", lambda r: [comp(1)]), system)
    assert_error(rc, err, "str.json", "all-reduce-implementation")


def test_reduction_without_local_mem_bw(env):
    system = env.system("nobw.json", local_mem_bw=0)
    rc, out, err = env.cli(env.trace("ar", lambda r: [coll(1, T.ALL_REDUCE, MIB)]), system)
    assert_error(rc, err, "nobw.json", "local-mem-bw")


def test_comm_group_file_errors(env):
    prefix = env.trace("ok", lambda r: [comp(1)])
    groups = env.dir / "groups.json"
    groups.write_text(json.dumps({"1": [0, 5]}))
    rc, out, err = env.cli(prefix, None, None, "--comm-group-configuration", str(groups))
    assert_error(rc, err, "groups.json", "group 1", "[5]")
    groups.write_text(json.dumps({"0": [0, 1]}))
    rc, out, err = env.cli(prefix, None, None, "--comm-group-configuration", str(groups))
    assert_error(rc, err, "groups.json", "must be > 0")


def test_subprocess_errors_have_no_traceback(env):
    cyc = env.trace("cycle", lambda r: [comp(1, deps=[2]), comp(2, deps=[1])])
    proc = astra_subprocess("run", "--workload-configuration", cyc, "--system-configuration", env.system(),
                            "--network-configuration", env.network(), "-q")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "cycle.0.et" in proc.stderr and "cycle" in proc.stderr
    bad = env.dir / "bad.yml"
    bad.write_text("topology: [ Mesh ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    proc = astra_subprocess("run", "--workload-configuration", cyc, "--system-configuration", env.system(),
                            "--network-configuration", str(bad), "-q")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "bad.yml" in proc.stderr


# ---------------------------------------------------------------- shared edge-case samples

EDGE_EXPECTED = {
    # file: finish time of both ranks, or substrings of the error message
    "comm_size_double": ("error", ["node 1", "comm_size", "integer"]),
    "ctrl_only": ("ok", 10000),
    "cycle": ("error", ["cycle"]),
    "dangling_ctrl": ("error", ["node 2", "node 99"]),
    "dangling_data": ("error", ["node 2", "node 99"]),
    "dup_id": ("ok", 12000),  # later content (7 us) wins, then node 2 (5 us)
    "empty_file": ("error", ["empty"]),
    "forward_ref": ("ok", 10000),
    "gzipped": ("ok", 10000),
    "missing_comm_size": ("error", ["node 1", "comm_size"]),
    # all-gather of 4096 B on 2 NPUs: 4 chunks x (T(1024) + 2 E)
    "mixed_int_types": ("ok", 4 * (t_msg(1024) + 20)),
    "only_gm": ("ok", 0),
    "zero_id_node": ("ok", 5000),
}


@pytest.mark.parametrize("name", sorted(EDGE_EXPECTED))
def test_edge_case_samples(env, shared_dir, name):
    source = shared_dir / "samples" / "chakra" / "edge-cases" / f"{name}.et"
    if not source.exists():
        pytest.skip(f"{source} not present")
    case = env.dir / name
    case.mkdir()
    for rank in range(2):
        shutil.copy(source, case / f"t.{rank}.et")
    prefix = str(case / "t")
    kind, expected = EDGE_EXPECTED[name]
    rc, out, err = env.cli(prefix, None, None, "--astra-sim-log")
    if kind == "ok":
        assert rc == 0, err
        for rank in range(2):
            assert f"sys[{rank}] finished, {expected} cycles," in out
    else:
        assert_error(rc, err, f"{name}/t.0.et", *expected)


def test_edge_case_subprocess(env, shared_dir):
    source = shared_dir / "samples" / "chakra" / "edge-cases" / "dangling_data.et"
    if not source.exists():
        pytest.skip("edge cases not present")
    for rank in range(2):
        shutil.copy(source, env.dir / f"d.{rank}.et")
    proc = astra_subprocess("run", "--workload-configuration", str(env.dir / "d"), "--system-configuration",
                            env.system(), "--network-configuration", env.network(), "-q")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "d.0.et" in proc.stderr and "99" in proc.stderr


# ---------------------------------------------------------------- errors found by these tests, now fixed


def _write_net(path, npus_per_dim):
    dims = len(npus_per_dim)
    path.write_text(
        f"topology: [ {', '.join(['Ring'] * dims)} ]\nnpus_count: [ {', '.join(map(str, npus_per_dim))} ]\n"
        f"bandwidth: [ {', '.join(['50'] * dims)} ]\nlatency: [ {', '.join(['500'] * dims)} ]\n"
    )
    return str(path)


@pytest.mark.parametrize("npus_per_dim", [[6], [4, 4]], ids=["ring6", "2d-one-entry"])
def test_double_binary_tree_on_bad_size_is_a_clear_error(env, npus_per_dim):
    # The reference crashes on both: its BinaryTree numbers only 2^floor(log2 n) NPUs,
    # and a one-entry list on a 2-D network builds the tree over NPUs 0..3 only.
    net = _write_net(env.dir / "net.yml", npus_per_dim)
    system = env.system("dbt.json", all_reduce_implementation=["doubleBinaryTree"])
    npus = 1
    for n in npus_per_dim:
        npus *= n
    prefix = env.trace("ar", lambda r: [coll(1, T.ALL_REDUCE, MIB)], npus=npus)
    rc, out, err = env.cli(prefix, system, net)
    assert_error(rc, err, "doubleBinaryTree", "power-of-two")


def test_halving_doubling_on_non_power_of_two_is_a_clear_error(env):
    net = _write_net(env.dir / "net.yml", [6])
    system = env.system("hd.json", all_reduce_implementation=["halvingDoubling"])
    prefix = env.trace("ar", lambda r: [coll(1, T.ALL_REDUCE, MIB)], npus=6)
    rc, out, err = env.cli(prefix, system, net)
    assert_error(rc, err, "halvingDoubling", "power-of-two", "got 6")


def test_double_binary_tree_on_power_of_two_runs(env):
    net = _write_net(env.dir / "net.yml", [4])
    system = env.system("dbt.json", all_reduce_implementation=["doubleBinaryTree"])
    prefix = env.trace("ar", lambda r: [coll(1, T.ALL_REDUCE, MIB)], npus=4)
    rc, out, err = env.cli(prefix, system, net)
    assert rc == 0, err


def _send_to_self(rank):
    return [make_node(1, "s", T.COMM_SEND_NODE, attrs={"comm_dst": rank, "comm_size": 8, "comm_tag": 0})]


def _zero_byte_send(rank):
    if rank == 0:
        return [make_node(1, "s", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_size": 0, "comm_tag": 0})]
    return [make_node(1, "r", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": 0, "comm_tag": 0})]


def _not_in_group(rank):
    return [coll(1, T.ALL_REDUCE, MIB, pg_name="1")]


def _tiny_all_gather(rank):
    return [coll(1, T.ALL_GATHER, 3)]


@pytest.mark.parametrize("builder", [_send_to_self, _zero_byte_send, _not_in_group, _tiny_all_gather],
                         ids=["send-to-self", "zero-byte-send", "rank-not-in-group", "tiny-all-gather"])
def test_dispatch_errors_name_file_and_node(env, builder):
    groups = env.dir / "groups.json"
    groups.write_text(json.dumps({"1": [1]}))
    prefix = env.trace("ctx", builder)
    rc, out, err = env.cli(prefix, None, None, "--comm-group-configuration", str(groups))
    assert rc != 0
    assert "Traceback" not in err
    assert "ctx.0.et" in err and "node 1" in err, err


@pytest.mark.parametrize("key,algorithm,comm_type,npus", [
    ("all_to_all_implementation", "halvingDoubling", T.ALL_TO_ALL, 4),
    ("all_reduce_implementation", "halvingDoubling", T.ALL_REDUCE, 6),
    ("all_reduce_implementation", "doubleBinaryTree", T.ALL_REDUCE, 6),
], ids=["hd-all-to-all", "hd-ring6", "dbt-ring6"])
def test_algorithm_config_errors_name_the_system_file(env, key, algorithm, comm_type, npus):
    net = _write_net(env.dir / "net.yml", [npus])
    system = env.system("algo.json", **{key: [algorithm]})
    rc, out, err = env.cli(env.trace("algo", lambda r: [coll(1, comm_type, MIB)], npus=npus), system, net)
    assert rc == 2
    assert "Traceback" not in err
    assert "algo.json" in err, err


def test_metadata_group_with_npu_outside_network_is_rejected(env):
    pg_info = "['" + json.dumps([{"pg_name": "5", "ranks": [0, 99]}]) + "']"

    def nodes(rank):
        return [
            make_node(0, "## process_group:init ##", T.METADATA_NODE, inputs_values=pg_info),
            make_node(1, "ar", T.COMM_COLL_NODE, data_deps=[0],
                      attrs={"comm_type": T.ALL_REDUCE, "comm_size": MIB, "pg_name": "5"}),
        ]

    rc, out, err = env.cli(env.trace("md", nodes))
    assert rc != 0
    assert "md.0.et" in err and "99" in err, err
