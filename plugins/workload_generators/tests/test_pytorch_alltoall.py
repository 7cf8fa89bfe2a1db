"""convert-pytorch on all_to_all_single with split sizes (issue 36): an uneven all-to-all runs as one send and one
receive per peer, an even one stays the ALL_TO_ALL collective it was (synthetic 4-rank NCCL traces in the host-ET
format of torch 2.x: a ``record_param_comms`` op named ``all_to_allv`` with both split lists)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.pytorch import convert_pytorch

PLUGINS = ["network_analytical", "workload_generators"]
HIDDEN = 1024  # elements per row (dim 0 is what the splits count)
ROW = HIDDEN * 4  # bytes per row (float)
# rows rank i sends to rank j: the sums differ per rank, so a collective's per-rank sizes would not match
UNEVEN = [[4, 12, 0, 8], [2, 2, 30, 6], [16, 1, 3, 4], [5, 9, 7, 1]]
EVEN = [[6] * 4 for _ in range(4)]
# rank 0 sends and receives 3 rows everywhere (even on its own), the others do not
MIXED = [[3, 3, 3, 3], [3, 1, 5, 2], [3, 7, 0, 4], [3, 2, 6, 9]]
LATENCY, GIB_S = 500.0, 50.0


def _op(nid, name, parent, ins=(), outs=(), schema=""):
    attrs = [{"name": "rf_id", "type": "uint64", "value": nid}, {"name": "fw_parent", "type": "uint64", "value": 0},
             {"name": "seq_id", "type": "int64", "value": -1}, {"name": "scope", "type": "uint64", "value": 0},
             {"name": "tid", "type": "uint64", "value": 1}, {"name": "fw_tid", "type": "uint64", "value": 0},
             {"name": "op_schema", "type": "string", "value": schema}]
    return {"id": nid, "name": name, "ctrl_deps": parent, "attrs": attrs,
            "inputs": {"values": [v for v, _, _ in ins], "shapes": [s for _, s, _ in ins],
                       "types": [t for _, _, t in ins]},
            "outputs": {"values": [v for v, _, _ in outs], "shapes": [s for _, s, _ in outs],
                        "types": [t for _, _, t in outs]}}


def _rank(matrix, r, splits=True, row_elems=HIDDEN, layout="new"):
    """Rank r's host trace: ``nccl:all_to_all`` with its record_param_comms under it, in the newer layout
    ``[tensors, seq, (pg_name, pg_desc), rank, name, in_split, out_split, start, stride, world]`` or the old one
    ``[tensors, seq, pg_id, rank, name, in_split, out_split, world]`` (see pytorch_nccl._param_comms)."""
    world = len(matrix)
    ins, outs = matrix[r], [matrix[j][r] for j in range(world)]
    tin = [10, 10, 0, sum(ins) * row_elems, 4, "cuda:0"]
    tout = [11, 11, 0, sum(outs) * row_elems, 4, "cuda:0"]
    name = "all_to_allv" if splits else "all_to_all"
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": list(range(world)), "group_size": world}]
    rpc = _op(5, "record_param_comms", 4, ins=[
        (tin, [sum(ins), row_elems], "Tensor(float)"), (1, [], "Int"), (["0", "default_pg"], [], "GenericList[String]"),
        (r, [], "Int"), (name, [], "String"), (ins if splits else [], [], "GenericList[Int]"),
        (outs if splits else [], [], "GenericList[Int]"), (0, [], "Int"), (1, [], "Int"), (world, [], "Int")],
        outs=[(tout, [sum(outs), row_elems], "Tensor(float)")])
    if layout == "old":
        values, types = rpc["inputs"]["values"], rpc["inputs"]["types"]
        values[2], types[2] = 0, "Int"
        del values[7:9], types[7:9], rpc["inputs"]["shapes"][7:9]
    nodes = [_op(1, "[pytorch|profiler|execution_trace|process]", 1), _op(2, "[pytorch|profiler|execution_trace|thread]", 1),
             _op(3, "## process_group:init ##", 2, ins=[(json.dumps(groups), [], "String")]),
             _op(4, "nccl:all_to_all", 2), rpc]
    return {"schema": "1.1.1-chakra.0.0.4", "pid": r, "time": "t", "start_ts": 1, "finish_ts": 2, "nodes": nodes}


def _kineto(r, world):
    """Rank r's Kineto trace: the host ops, and the SendRecv kernel nccl:all_to_all launched."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": name, "ts": rf, "dur": 1,
           "args": {"External id": 100 + rf, "Record function id": rf}}
          for rf, name in ((4, "nccl:all_to_all"), (5, "record_param_comms"))]
    ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
               "ts": 0, "dur": 9.0, "args": {"External id": 104, "stream": 9, "Process Group Name": "0"}})
    return {"traceEvents": ev, "distributedInfo": {"backend": "nccl", "rank": r, "world_size": world}}


def _write(tmp_path, matrix, name="a", splits=True, kineto=False, layout="new"):
    for r in range(len(matrix)):
        (tmp_path / f"{name}{r}.json").write_text(json.dumps(_rank(matrix, r, splits, layout=layout)))
        if kineto:
            (tmp_path / f"{name}k{r}.json").write_text(json.dumps(_kineto(r, len(matrix))))
    host = str(tmp_path / f"{name}{{rank}}.json")
    return host, (str(tmp_path / f"{name}k{{rank}}.json") if kineto else None)


def _convert(tmp_path, matrix, name="a", splits=True, kineto=False, layout="new", **kw):
    host, kin = _write(tmp_path, matrix, name, splits, kineto, layout)
    out = tmp_path / name / "w"
    summary = convert_pytorch(host, out, kineto=kin, ranks=len(matrix), comms_from_host=not kineto, **kw)
    return out, summary


def _comm(out, r):
    return [n for n in read_et(f"{out}.{r}.et").nodes
            if n.type in (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE)]


def _delay(nbytes, latency=LATENCY):
    """The analytical network's delay of one message over one hop (plugins/network_analytical)."""
    return int(latency + nbytes / (GIB_S * 2 ** 30 / 1e9))


@pytest.fixture
def net(tmp_path):
    """A fully connected 4-NPU network (one hop between any two ranks) and two system configurations."""
    return {"net": write_network_config(tmp_path / "fc4.yml", topology=("FullyConnected",), npus=(4,),
                                        bandwidth_gbps=(GIB_S,), latency_ns=(LATENCY,)),
            "single": write_system_config(tmp_path / "single.json"),
            "streams": write_system_config(tmp_path / "streams.json", comm_streams="per-communicator")}


@pytest.mark.parametrize("kineto,layout", [(False, "new"), (True, "new"), (False, "old")])
def test_uneven_all_to_all_becomes_one_send_and_receive_per_peer(tmp_path, kineto, layout):
    out, s = _convert(tmp_path, UNEVEN, kineto=kineto, layout=layout)
    assert s["warnings"] == []
    for r in range(4):
        comm = _comm(out, r)
        sends = {n.attrs["comm_dst"]: n.attrs["comm_size"] for n in comm if n.type == T.COMM_SEND_NODE}
        recvs = {n.attrs["comm_src"]: n.attrs["comm_size"] for n in comm if n.type == T.COMM_RECV_NODE}
        assert sends == {j: UNEVEN[r][j] * ROW for j in range(4) if j != r and UNEVEN[r][j]}
        assert recvs == {j: UNEVEN[j][r] * ROW for j in range(4) if j != r and UNEVEN[j][r]}
        assert not [n for n in comm if n.type == T.COMM_COLL_NODE]
        # launched together by the all-to-all's op, on the group's p2p tag
        launcher = 4 if kineto else 5
        assert {tuple(n.data_deps) for n in comm} == {(launcher,)}
        # (the old layout names its group by a backend id the declared groups do not list: the world group)
        group = {"0"} if layout == "new" else {None}
        assert {n.attrs["comm_tag"] for n in comm} == {0} and {n.attrs.get("pg_name") for n in comm} == group
        assert s["per_rank"][r]["a2a_uneven"] == 1
        every = read_et(f"{out}.{r}.et").nodes
        assert len({n.id for n in every}) == len(every)


def _hand_exchange(matrix, start_ns, serial_sends):
    """Each rank's finish time of the exchange, computed by hand: a message takes latency + bytes / bandwidth;
    with ``serial_sends`` a rank's sends run one after another in peer order (the reference's one communication
    slot per rank; receives take none), else all at once (a slot per destination)."""
    world = len(matrix)
    arrive = {}  # (src, dst) -> when the message arrives
    for src in range(world):
        clock = start_ns
        for dst in range(world):
            if dst == src or not matrix[src][dst]:
                continue
            delay = _delay(matrix[src][dst] * ROW)
            if serial_sends:
                clock += delay
                arrive[src, dst] = clock
            else:
                arrive[src, dst] = start_ns + delay
    return [max(t for (a, b), t in arrive.items() if r in (a, b)) for r in range(world)]


@pytest.mark.parametrize("streams", ["streams", "single"])
def test_uneven_exchange_time_is_the_hand_computed_one(tmp_path, net, streams):
    out, _ = _convert(tmp_path, UNEVEN)
    report = simulate(out, net[streams], net["net"], plugins=PLUGINS)
    assert report.warnings == []
    # the sends leave after the three CPU ops before them (1 ns each: the host ops have no measured time)
    expected = _hand_exchange(UNEVEN, 3, serial_sends=streams == "single")
    assert [rk.finish_ns for rk in report.ranks] == expected
    # the slowest rank is bound by its biggest message: rank 1 sends 30 rows (120 KiB) to rank 2
    if streams == "streams":
        assert max(expected) == 3 + _delay(30 * ROW)


def test_even_split_stays_the_collective_it_was(tmp_path, net):
    # the same exchange without split sizes (all_to_all) is what the converter did before; with even splits it
    # is one ALL_TO_ALL of the whole input, and simulates to the same times
    even, s = _convert(tmp_path, EVEN, name="e")
    plain, _ = _convert(tmp_path, EVEN, name="p", splits=False)
    assert s["a2a_even_splits"] == 1 and s["a2a_uneven"] == 0
    for r in range(4):
        (a,), (b,) = _comm(even, r), _comm(plain, r)
        assert a.type == b.type == T.COMM_COLL_NODE and a.attrs["comm_type"] == b.attrs["comm_type"] == T.ALL_TO_ALL
        assert a.attrs["comm_size"] == b.attrs["comm_size"] == 24 * ROW
    times = [[rk.finish_ns for rk in simulate(o, net["single"], net["net"], plugins=PLUGINS).ranks]
             for o in (even, plain)]
    assert times[0] == times[1] and min(times[0]) > 0


def test_a_rank_with_even_splits_joins_the_others_exchange(tmp_path, net):
    # rank 0's own splits are even, but its peers' are not: converted together, every rank exchanges
    out, s = _convert(tmp_path, MIXED, name="m")
    assert [c["a2a_uneven"] for c in s["per_rank"]] == [0, 1, 1, 1]
    assert not [n for r in range(4) for n in _comm(out, r) if n.type == T.COMM_COLL_NODE]
    assert len(_comm(out, 0)) == 6 and s["warnings"] == []
    report = simulate(out, net["streams"], net["net"], plugins=PLUGINS)
    assert report.warnings == []
    assert [rk.finish_ns for rk in report.ranks] == _hand_exchange(MIXED, 3, serial_sends=False)
    # converted alone, rank 0 cannot know: it keeps the collective
    host, _ = _write(tmp_path, MIXED, name="m")
    alone = convert_pytorch(host, tmp_path / "m0" / "w", rank=0, comms_from_host=True)
    assert alone["a2a_even_splits"] == 1 and alone["coll"] == 1


def test_cli_converts_and_runs_the_uneven_trace(tmp_path, net, capsys):
    host, _ = _write(tmp_path, UNEVEN, name="c")
    out = tmp_path / "c" / "w"
    assert main(["workload", "convert-pytorch", host, "--ranks", "4", "--comms-from-host", "-o", str(out)]) == 0
    assert main(["run", "--workload-configuration", str(out), "--system-configuration", net["streams"],
                 "--network-configuration", net["net"], "-p", "network_analytical", "-q"]) == 0
    assert "unmatched" not in capsys.readouterr().err


def test_uneven_all_to_all_errors(tmp_path):
    # a trace copied to every rank has no rank of its own, and uneven splits are rank-specific
    (tmp_path / "one.json").write_text(json.dumps(_rank(UNEVEN, 1)))
    with pytest.raises(ConfigError, match=r"one.json: .*all-to-all node \d+ .*record_param_comms host node id 5\): "
                                          r"an all-to-all with uneven split sizes needs the rank of its trace"):
        convert_pytorch(tmp_path / "one.json", tmp_path / "x", ranks=4, comms_from_host=True)
    # split lists of different lengths
    bad = _rank(UNEVEN, 1)
    bad["nodes"][4]["inputs"]["values"][5] = [1, 2]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match=r"expected input and output split sizes with one count >= 0 per group "
                                          r"rank, got \[1, 2\] and \[12, 2, 1, 9\]"):
        convert_pytorch(tmp_path / "bad.json", tmp_path / "y", rank=1, comms_from_host=True)
    # a tensor that is not a whole number of rows
    odd = _rank(UNEVEN, 1)
    odd["nodes"][4]["inputs"]["values"][0][3] += 1
    (tmp_path / "odd.json").write_text(json.dumps(odd))
    with pytest.raises(ConfigError, match=r"its input tensor has \d+ bytes, not a whole number of the 40 rows"):
        convert_pytorch(tmp_path / "odd.json", tmp_path / "z", rank=1, comms_from_host=True)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=3, max_size=3), min_size=3, max_size=3),
       st.integers(1, 3))
def test_any_split_matrix_gives_matching_sends_and_receives(tmp_path_factory, matrix, row_elems):
    tmp = tmp_path_factory.mktemp("h")
    for r in range(3):
        (tmp / f"h{r}.json").write_text(json.dumps(_rank(matrix, r, row_elems=row_elems)))
    if all(sum(row) == 0 for row in matrix):
        return  # no tensor bytes to tell a row's size from (an error, tested above)
    s = convert_pytorch(str(tmp / "h{rank}.json"), tmp / "o" / "w", ranks=3, comms_from_host=True)
    uneven = len({x for row in matrix for x in row}) > 1
    moves = any(matrix[i][j] for i in range(3) for j in range(3) if i != j)
    # every send meets a receive of its size (pytorch_checks); an exchange of local copies only sends nothing
    if moves or not uneven:
        assert s["warnings"] == []
    else:
        assert len(s["warnings"]) == 1 and s["warnings"][0].startswith("no collective or send/recv in any")
    for r in range(3):
        comm = _comm(tmp / "o" / "w", r)
        if not uneven:
            assert [n.type for n in comm] == [T.COMM_COLL_NODE]
            continue
        sent = sum(n.attrs["comm_size"] for n in comm if n.type == T.COMM_SEND_NODE)
        assert sent == sum(matrix[r][j] for j in range(3) if j != r) * row_elems * 4


FUNCTIONAL_SCHEMA = ("_c10d_functional::all_to_all_single(Tensor input, SymInt[] output_split_sizes, "
                     "SymInt[] input_split_sizes, str group_name) -> Tensor")
BASE_SCHEMA = ("c10d::alltoall_base_(Tensor output, Tensor input, __torch__.torch.classes.c10d.ProcessGroup "
               "process_group, int[] output_split_sizes, int[] input_split_sizes, int timeout) -> "
               "__torch__.torch.classes.c10d.Work")


def _gloo_rank(matrix, r, op, schema=True):
    """Rank r's host trace of a CPU (gloo) job: ``all_to_all_single`` as the functional collective (then its
    wait_tensor) or as ``c10d::alltoall_base_`` (blocking), then an op on the received rows."""
    world = len(matrix)
    ins, outs = matrix[r], [matrix[j][r] for j in range(world)]
    tin = ([20, 20, 0, sum(ins) * HIDDEN, 4, "cpu"], [sum(ins), HIDDEN], "Tensor(float)")
    tout = ([21, 21, 0, sum(outs) * HIDDEN, 4, "cpu"], [sum(outs), HIDDEN], "Tensor(float)")
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": list(range(world)), "group_size": world}]
    nodes = [_op(1, "[pytorch|profiler|execution_trace|process]", 1),
             _op(2, "[pytorch|profiler|execution_trace|thread]", 1),
             _op(3, "## process_group:init ##", 2, ins=[(json.dumps(groups), [], "String")])]
    if op == "functional":
        nodes += [_op(4, "_c10d_functional::all_to_all_single", 2, schema=FUNCTIONAL_SCHEMA if schema else "",
                      ins=[tin, (outs, [], "GenericList[Int]"), (ins, [], "GenericList[Int]"), ("0", [], "String")],
                      outs=[tout]),
                  _op(5, "_c10d_functional::wait_tensor", 2, ins=[tout], outs=[tout])]
    else:
        nodes += [_op(4, "c10d::alltoall_base_", 2, schema=BASE_SCHEMA if schema else "",
                      ins=[tout, tin, ("<Object>", [], "Object"), (outs, [], "GenericList[Int]"),
                           (ins, [], "GenericList[Int]"), (-1, [], "Int")], outs=[("<Object>", [], "Object")]),
                  _op(5, "aten::detach", 2, ins=[tout], outs=[tout])]
    nodes.append(_op(6, "aten::relu", 2, ins=[tout], outs=[tout]))
    return {"schema": "1.1.1-chakra.0.0.4", "pid": r, "time": "t", "start_ts": 1, "finish_ts": 2, "nodes": nodes}


@pytest.mark.parametrize("op,schema", [("functional", True), ("functional", False), ("base", True),
                                       ("base", False)])
def test_gloo_uneven_all_to_all_single_is_an_exchange_its_waiter_waits_for(tmp_path, net, op, schema):
    for r in range(4):
        (tmp_path / f"g{r}.json").write_text(json.dumps(_gloo_rank(UNEVEN, r, op, schema)))
    out = tmp_path / "g" / "w"
    s = convert_pytorch(str(tmp_path / "g{rank}.json"), out, ranks=4)
    assert s["warnings"] == [] and s["cpu_backend_comms"] == 1
    for r in range(4):
        every = read_et(f"{out}.{r}.et").nodes
        comm = [n for n in every if n.type in (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE)]
        sends = {n.attrs["comm_dst"]: n.attrs["comm_size"] for n in comm if n.type == T.COMM_SEND_NODE}
        recvs = {n.attrs["comm_src"]: n.attrs["comm_size"] for n in comm if n.type == T.COMM_RECV_NODE}
        assert sends == {j: UNEVEN[r][j] * ROW for j in range(4) if j != r and UNEVEN[r][j]}
        assert recvs == {j: UNEVEN[j][r] * ROW for j in range(4) if j != r and UNEVEN[j][r]}
        assert {tuple(n.data_deps) for n in comm} == {(4,)} and s["per_rank"][r]["a2a_uneven"] == 1
        # the op after it (wait_tensor, or the next op of the blocked thread) waits for every message
        waiter = next(n for n in every if n.id == 5)
        assert {n.id for n in comm} <= set(waiter.data_deps)
        assert len({n.id for n in every}) == len(every)
    report = simulate(out, net["streams"], net["net"], plugins=PLUGINS)
    assert report.warnings == []
    # messages leave after two 1 ns CPU ops (the thread root and the all-to-all's op); two more follow the exchange
    assert [rk.finish_ns for rk in report.ranks] == [t + 2 for t in _hand_exchange(UNEVEN, 2, serial_sends=False)]


def test_gloo_even_split_stays_the_collective(tmp_path):
    for r in range(4):
        (tmp_path / f"e{r}.json").write_text(json.dumps(_gloo_rank(EVEN, r, "functional")))
    s = convert_pytorch(str(tmp_path / "e{rank}.json"), tmp_path / "e" / "w", ranks=4)
    assert (s["coll"], s["p2p"], s["a2a_even_splits"], s["warnings"]) == (1, 0, 1, [])
    (coll,) = _comm(tmp_path / "e" / "w", 0)
    assert coll.attrs["comm_type"] == T.ALL_TO_ALL and coll.attrs["comm_size"] == 24 * ROW


def test_gloo_uneven_all_to_all_errors(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps(_gloo_rank(UNEVEN, 1, "functional")))
    with pytest.raises(ConfigError, match=r"one.json: node id 4 \('_c10d_functional::all_to_all_single'\): an "
                                          r"all-to-all with uneven split sizes needs the rank of its trace"):
        convert_pytorch(tmp_path / "one.json", tmp_path / "x", ranks=4)
    bad = _gloo_rank(UNEVEN, 1, "functional")
    bad["nodes"][3]["inputs"]["values"][2] = [1, 2]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match=r"bad.json: node id 4 .*: expected input and output split sizes with one "
                                          r"count per group rank, got \[1, 2\] and \[12, 2, 1, 9\]"):
        convert_pytorch(tmp_path / "bad.json", tmp_path / "y", rank=1)
    bad["nodes"][3]["inputs"]["values"][2] = [1, 2, -3, 4]
    (tmp_path / "neg.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match=r"expected input_split_sizes as a list of counts >= 0, got \[1, 2, -3, 4\]"):
        convert_pytorch(tmp_path / "neg.json", tmp_path / "z", rank=1)
