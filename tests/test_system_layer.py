"""System layer against hand-computed closed forms (semantics §4.3-§4.8, §6.2, §9).

Notation as in the reference notes: n NPUs in the ring, p = preferred-dataset-splits,
chunk = S // p (inflated to n_total for tiny non-all-gather collectives), one queue and
active-chunks 1 so the chunks run back to back;
T(m) = trunc(hops*lat + m / (bw * 2^30 / 1e9)) for one message of m bytes,
E = endpoint-delay (x injection-scale), R(m) = 3 * trunc(m / (local_mem_bw * 1e9) * 1e9).

The networks here (bandwidths/latencies) are deliberately not those of shared/parity.
"""

from __future__ import annotations

import json
import math

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import ConfigError, SimulationError, WorkloadError
from astra_sim.simulation import Simulation, simulate
from astra_sim_testing import system_config

GIB = 1 << 30
MIB = 1 << 20

SYSTEM = system_config()


# ---------------------------------------------------------------- helpers


def t_msg(m, bw, lat, hops=1):
    return int(hops * lat + m / (bw * GIB / 1e9))


def r_red(m, local_mem_bw=1600):
    return 3 * int(m / (local_mem_bw * 1e9) * 1e9)


def write_network(path, topology, npus, bw, lat):
    path.write_text(
        f"topology: [ {topology} ]\nnpus_count: [ {npus} ]\nbandwidth: [ {bw} ]\nlatency: [ {lat} ]\n"
    )
    return str(path)


def write_system(path, **overrides):
    data = dict(SYSTEM)
    for key, value in overrides.items():
        data[key.replace("_", "-")] = value
    path.write_text(json.dumps(data))
    return str(path)


def coll_node(node_id, comm_type, size, deps=(), **attrs):
    a = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size}
    a.update(attrs)
    return make_node(node_id, f"coll{node_id}", T.COMM_COLL_NODE, data_deps=list(deps), attrs=a)


def comp_node(node_id, micros, deps=(), **attrs):
    return make_node(node_id, f"comp{node_id}", T.COMP_NODE, data_deps=list(deps), duration_micros=micros,
                     attrs=attrs or None)


def write_trace(tmp_path, name, nodes_for_rank, npus):
    prefix = tmp_path / name
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes_for_rank(rank))
    return str(prefix)


def single_collective(tmp_path, comm_type, size, npus, name="c"):
    return write_trace(tmp_path, name, lambda r: [coll_node(1, comm_type, size)], npus)


def expected_chunks(comm_type, size, splits, total_npus):
    """(number of chunks, chunk bytes) as generate_collective computes them (§4.3)."""
    chunk = size // splits
    if comm_type != T.ALL_GATHER and total_npus > chunk:
        chunk = total_npus
        size = splits * total_npus
    return math.ceil(size / chunk), chunk


def ring_chunk_ns(comm_type, chunk, n, bw, lat, e, local_mem_bw=1600, hops=1):
    """One chunk of a 1-D ring collective (§4.7 closed forms)."""
    if comm_type == T.ALL_REDUCE:
        m = chunk // n
        return 2 * (n - 1) * t_msg(m, bw, lat, hops) + (2 * n - 1) * e + (n - 1) * r_red(m, local_mem_bw)
    if comm_type == T.REDUCE_SCATTER:
        m = chunk // n
        return (n - 1) * t_msg(m, bw, lat, hops) + n * e + (n - 1) * r_red(m, local_mem_bw)
    if comm_type == T.ALL_GATHER:
        return (n - 1) * t_msg(chunk, bw, lat, hops) + n * e
    if comm_type == T.ALL_TO_ALL:
        steps = n * (n - 1) // 2
        return steps * t_msg(chunk // n, bw, lat, hops) + (steps + 1) * e
    raise AssertionError(comm_type)


def finishes(report):
    return [r.finish_ns for r in report.ranks]


# ---------------------------------------------------------------- ring closed forms

COLLECTIVES = [T.ALL_REDUCE, T.REDUCE_SCATTER, T.ALL_GATHER, T.ALL_TO_ALL]


@pytest.mark.parametrize("topology,bw,lat", [("Ring", 100.0, 200.0), ("FullyConnected", 25.0, 700.0)])
@pytest.mark.parametrize("comm_type", COLLECTIVES, ids=["AR", "RS", "AG", "A2A"])
@pytest.mark.parametrize("size,splits", [(MIB, 4), (10_000_000, 3), (3 * MIB, 8), (65536, 1)])
def test_ring_collectives_closed_form_4_npus(tmp_path, topology, bw, lat, comm_type, size, splits):
    net = write_network(tmp_path / "net.yml", topology, 4, bw, lat)
    system = write_system(tmp_path / "sys.json", preferred_dataset_splits=splits)
    prefix = single_collective(tmp_path, comm_type, size, 4)
    streams, chunk = expected_chunks(comm_type, size, splits, 4)
    expected = streams * ring_chunk_ns(comm_type, chunk, 4, bw, lat, 10)
    report = simulate(prefix, system, net)
    assert finishes(report) == [expected] * 4
    # A collective-only trace: everything is exposed communication.
    assert [r.exposed_comm_ns for r in report.ranks] == [expected] * 4
    assert [r.compute_ns for r in report.ranks] == [0] * 4
    assert [r.comm_ns for r in report.ranks] == [expected] * 4


def test_ring_all_reduce_hand_numbers(tmp_path):
    """One case written out: Ring-4, 100 GB/s, 200 ns, 1 MiB, p=4, E=10, local-mem-bw 1600."""
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    # m = 65536 B: T = trunc(200 + 65536 / 107.3741824) = trunc(810.35) = 810
    # R = 3 * trunc(65536 / 1.6e12 * 1e9) = 3 * 40 = 120
    # chunk = 6*810 + 7*10 + 3*120 = 5290; 4 chunks = 21160
    assert t_msg(65536, 100.0, 200.0) == 810
    assert r_red(65536) == 120
    assert finishes(simulate(prefix, system, net)) == [21160] * 4


def test_switch_all_reduce_charges_two_hops(tmp_path):
    net = write_network(tmp_path / "net.yml", "Switch", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    expected = 4 * ring_chunk_ns(T.ALL_REDUCE, MIB // 4, 4, 100.0, 200.0, 10, hops=2)
    assert finishes(simulate(prefix, system, net)) == [expected] * 4


def test_local_mem_bw_and_endpoint_delay_enter_the_closed_form(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", local_mem_bw=50, endpoint_delay=37)
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    expected = 4 * ring_chunk_ns(T.ALL_REDUCE, MIB // 4, 4, 100.0, 200.0, 37, local_mem_bw=50)
    # R(65536) at 50 GB/s = 3 * 1310 = 3930 per reduction.
    assert r_red(65536, 50) == 3930
    assert finishes(simulate(prefix, system, net)) == [expected] * 4


# ---------------------------------------------------------------- chunking (§4.3)


def test_small_collective_is_inflated_to_splits_times_npus(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    # 10 B, p=4: chunk 2 < 4 NPUs -> chunk = 4 B, S = 16 B, 4 chunks of messages of 1 B.
    one_chunk = 6 * t_msg(1, 100.0, 200.0) + 7 * 10 + 3 * r_red(1)
    assert one_chunk == 6 * 200 + 70
    ten = simulate(single_collective(tmp_path, T.ALL_REDUCE, 10, 4, "ten"), system, net)
    sixteen = simulate(single_collective(tmp_path, T.ALL_REDUCE, 16, 4, "sixteen"), system, net)
    assert finishes(ten) == finishes(sixteen) == [4 * one_chunk] * 4
    # 17 B: chunk 4 (not inflated), ceil(17/4) = 5 chunks.
    seventeen = simulate(single_collective(tmp_path, T.ALL_REDUCE, 17, 4, "seventeen"), system, net)
    assert finishes(seventeen) == [5 * one_chunk] * 4


def test_small_reduce_scatter_inflated_but_all_gather_not(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    rs = simulate(single_collective(tmp_path, T.REDUCE_SCATTER, 8, 4, "rs"), system, net)
    assert finishes(rs) == [4 * (3 * t_msg(1, 100.0, 200.0) + 4 * 10)] * 4
    # All-gather of 8 B per rank: chunk 2 B, 4 chunks, whole chunk per message.
    ag = simulate(single_collective(tmp_path, T.ALL_GATHER, 8, 4, "ag"), system, net)
    assert finishes(ag) == [4 * (3 * t_msg(2, 100.0, 200.0) + 4 * 10)] * 4


def test_all_gather_smaller_than_splits_is_a_clear_error(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_GATHER, 3, 4)
    with pytest.raises(SimulationError, match=r"all-gather of 3 bytes.*4 chunks.*preferred-dataset-splits"):
        simulate(prefix, system, net)
    # 5 B works: chunk 1 B, 5 chunks (the remainder is a full chunk).
    ok = simulate(single_collective(tmp_path, T.ALL_GATHER, 5, 4, "ok"), system, net)
    assert finishes(ok) == [5 * (3 * t_msg(1, 100.0, 200.0) + 4 * 10)] * 4


def test_remainder_chunk_is_full_size(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_REDUCE, 1_000_003, 4)
    # chunk = 250000, ceil(1000003 / 250000) = 5 chunks, each a full 250000 B.
    m = 62500
    per_chunk = 6 * t_msg(m, 100.0, 200.0) + 7 * 10 + 3 * r_red(m)
    assert finishes(simulate(prefix, system, net)) == [5 * per_chunk] * 4
    exact = simulate(single_collective(tmp_path, T.ALL_REDUCE, 1_000_000, 4, "exact"), system, net)
    assert finishes(exact) == [4 * per_chunk] * 4


# ---------------------------------------------------------------- direct, injection scale, E = 0


def test_direct_all_reduce_on_fully_connected(tmp_path):
    net = write_network(tmp_path / "net.yml", "FullyConnected", 4, 25.0, 700.0)
    system = write_system(tmp_path / "sys.json", all_reduce_implementation=["direct"])
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    m = MIB // 4 // 4
    per_chunk = 2 * t_msg(m, 25.0, 700.0) + 3 * 10 + r_red(m)
    assert finishes(simulate(prefix, system, net)) == [4 * per_chunk] * 4


def test_direct_all_reduce_on_ring_waits_for_the_farthest_peer(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", all_reduce_implementation=["direct"])
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    m = MIB // 16
    per_chunk = 2 * t_msg(m, 100.0, 200.0, hops=2) + 3 * 10 + r_red(m)
    assert finishes(simulate(prefix, system, net)) == [4 * per_chunk] * 4


def test_injection_scale_multiplies_endpoint_delay(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    base = simulate(prefix, system, net).max_finish_ns
    doubled = simulate(prefix, system, net, injection_scale=2).max_finish_ns
    # 4 chunks x (2n-1) = 7 endpoint delays of 10 ns more each.
    assert doubled - base == 4 * 7 * 10
    assert doubled == 4 * ring_chunk_ns(T.ALL_REDUCE, MIB // 4, 4, 100.0, 200.0, 20)
    half = simulate(prefix, system, net, injection_scale=0.5).max_finish_ns
    assert half == 4 * ring_chunk_ns(T.ALL_REDUCE, MIB // 4, 4, 100.0, 200.0, 5)


def test_endpoint_delay_zero_simulates(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", endpoint_delay=0)
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    expected = 4 * (6 * t_msg(65536, 100.0, 200.0) + 3 * r_red(65536))
    assert finishes(simulate(prefix, system, net)) == [expected] * 4


# ---------------------------------------------------------------- queues and active chunks


def test_num_queues_per_dim_2(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    rs_prefix = single_collective(tmp_path, T.REDUCE_SCATTER, MIB, 4, "rs")
    ar_prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4, "ar")
    rs_chunk = ring_chunk_ns(T.REDUCE_SCATTER, MIB // 4, 4, 100.0, 200.0, 10)
    ar_chunk = ring_chunk_ns(T.ALL_REDUCE, MIB // 4, 4, 100.0, 200.0, 10)
    assert simulate(rs_prefix, system, net).max_finish_ns == 4 * rs_chunk
    # Non-AR collectives round-robin over both queues: two chunks at a time.
    assert simulate(rs_prefix, system, net, num_queues_per_dim=2).max_finish_ns == 2 * rs_chunk
    # localBWAware 1-D all-reduce puts every chunk on the first queue: no change.
    assert simulate(ar_prefix, system, net, num_queues_per_dim=2).max_finish_ns == 4 * ar_chunk
    # baseline all-reduce round-robins like the others.
    baseline = write_system(tmp_path / "base.json", collective_optimization="baseline")
    assert simulate(ar_prefix, baseline, net, num_queues_per_dim=2).max_finish_ns == 2 * ar_chunk
    # 4 queues, 4 chunks: all concurrent.
    assert simulate(rs_prefix, system, net, num_queues_per_dim=4).max_finish_ns == rs_chunk


def test_num_queues_must_be_positive(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    with pytest.raises(ConfigError, match="num-queues-per-dim"):
        simulate(prefix, system, net, num_queues_per_dim=0)


@pytest.mark.parametrize("active,expected", [(1, 2326112), (2, 1163056), (4, 581528)])
def test_active_chunks_divide_time_when_congestion_unaware(tmp_path, parity_dir, active, expected):
    data = json.loads((parity_dir / "configs" / "sys_ring_1d.json").read_text())
    data["active-chunks-per-dimension"] = active
    system = tmp_path / "sys.json"
    system.write_text(json.dumps(data))
    report = simulate(
        str(parity_dir / "traces" / "single_all_reduce_8_64MB" / "t"),
        str(system),
        str(parity_dir / "configs" / "Ring_8.yml"),
    )
    assert finishes(report) == [expected] * 8


def test_active_chunks_and_queues_combine_as_ceil(tmp_path):
    # threshold per queue = ceil(active / queues): active 3, 2 queues -> 2 per queue -> all 4 chunks at once.
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", active_chunks_per_dimension=3)
    prefix = single_collective(tmp_path, T.REDUCE_SCATTER, MIB, 4)
    rs_chunk = ring_chunk_ns(T.REDUCE_SCATTER, MIB // 4, 4, 100.0, 200.0, 10)
    assert simulate(prefix, system, net, num_queues_per_dim=2).max_finish_ns == rs_chunk
    assert simulate(prefix, system, net).max_finish_ns == 2 * rs_chunk  # 3 then 1


# ---------------------------------------------------------------- rendezvous


def test_rendezvous_adds_one_handshake_per_message(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    plain = simulate(prefix, system, net).max_finish_ns
    rdv = simulate(prefix, system, net, rendezvous=True).max_finish_ns
    handshake = t_msg(8192, 100.0, 200.0)
    # Every one of the 2(n-1) sequential messages of each of the 4 chunks waits
    # for the receiver's 8 KiB handshake first.
    assert rdv - plain == 4 * 6 * handshake
    assert rdv > plain


def test_rendezvous_send_recv(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")

    def nodes(rank):
        if rank == 0:
            return [make_node(1, "send", T.COMM_SEND_NODE, attrs={"comm_dst": 2, "comm_size": MIB, "comm_tag": 4})]
        if rank == 2:
            return [make_node(1, "recv", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": MIB, "comm_tag": 4})]
        return []

    prefix = write_trace(tmp_path, "p2p", nodes, 4)
    plain = t_msg(MIB, 100.0, 200.0, hops=2)
    assert finishes(simulate(prefix, system, net)) == [plain, 0, plain, 0]
    rdv = t_msg(8192, 100.0, 200.0, hops=2) + plain
    assert finishes(simulate(prefix, system, net, rendezvous=True)) == [rdv, 0, rdv, 0]


# ---------------------------------------------------------------- workload interaction


def test_two_independent_collectives_serialize(tmp_path, parity_dir):
    prefix = write_trace(
        tmp_path, "two", lambda r: [coll_node(1, T.ALL_REDUCE, MIB), coll_node(2, T.ALL_REDUCE, MIB)], 8
    )
    report = simulate(prefix, str(parity_dir / "configs" / "sys_ring_1d.json"),
                      str(parity_dir / "configs" / "Ring_8.yml"))
    assert finishes(report) == [128880] * 8
    assert [r.comm_ns for r in report.ranks] == [128880] * 8


def test_compute_overlaps_communication(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    ar = 4 * ring_chunk_ns(T.ALL_REDUCE, MIB // 4, 4, 100.0, 200.0, 10)  # 21160
    # Independent: the 30 us compute hides the whole all-reduce.
    par = write_trace(tmp_path, "par", lambda r: [coll_node(1, T.ALL_REDUCE, MIB), comp_node(2, 30)], 4)
    report = simulate(par, system, net)
    assert finishes(report) == [30000] * 4
    assert [r.exposed_comm_ns for r in report.ranks] == [0] * 4
    assert [r.compute_ns for r in report.ranks] == [30000] * 4
    # Compute shorter than the all-reduce: part of it is exposed.
    short = write_trace(tmp_path, "short", lambda r: [coll_node(1, T.ALL_REDUCE, MIB), comp_node(2, 5)], 4)
    report = simulate(short, system, net)
    assert finishes(report) == [ar] * 4
    assert [r.exposed_comm_ns for r in report.ranks] == [ar - 5000] * 4
    # Dependent: they add up.
    seq = write_trace(tmp_path, "seq", lambda r: [comp_node(1, 5), coll_node(2, T.ALL_REDUCE, MIB, deps=[1])], 4)
    report = simulate(seq, system, net)
    assert finishes(report) == [5000 + ar] * 4
    assert [r.exposed_comm_ns for r in report.ranks] == [ar] * 4


# ---------------------------------------------------------------- communicator groups


def _group_expected(bw, lat, hops, size=MIB, splits=4):
    # A 2-member local ring: 2(n-1) = 2 messages of chunk/2, 2n-1 = 3 bus delays of 10 ns (not E),
    # n-1 = 1 reduction. Chunking still uses all 4 NPUs (no inflation here).
    chunk = size // splits
    m = chunk // 2
    return splits * (2 * t_msg(m, bw, lat, hops) + 3 * 10 + r_red(m))


def test_comm_group_from_json_uses_local_ring_with_10ns_bus(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", endpoint_delay=100)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 2]}))

    def nodes(rank):
        if rank in (0, 2):
            return [coll_node(1, T.ALL_REDUCE, MIB, pg_name="1")]
        return [comp_node(1, 1)]

    prefix = write_trace(tmp_path, "grp", nodes, 4)
    expected = _group_expected(100.0, 200.0, hops=2)
    report = simulate(prefix, system, net, comm_groups=str(groups))
    assert finishes(report) == [expected, 1000, expected, 1000]
    # chunk 262144 B split over the 2 members: m = 131072 B, 2 hops apart on Ring-4;
    # 3 bus delays of 10 ns per chunk although endpoint-delay is 100.
    assert expected == 4 * (2 * t_msg(131072, 100.0, 200.0, 2) + 3 * 10 + r_red(131072)) == 14052


def test_comm_group_spanning_all_npus_uses_native_topology(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", endpoint_delay=100)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"3": [3, 2, 1, 0]}))
    prefix = write_trace(tmp_path, "all", lambda r: [coll_node(1, T.ALL_REDUCE, MIB, pg_name="3")], 4)
    expected = 4 * ring_chunk_ns(T.ALL_REDUCE, MIB // 4, 4, 100.0, 200.0, 100)
    assert finishes(simulate(prefix, system, net, comm_groups=str(groups))) == [expected] * 4


def test_comm_group_path_containing_empty_disables_groups(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 4)
    report = simulate(prefix, system, net, comm_groups="empty")
    assert finishes(report) == [4 * ring_chunk_ns(T.ALL_REDUCE, MIB // 4, 4, 100.0, 200.0, 10)] * 4


def test_comm_group_from_metadata_node(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", endpoint_delay=100)
    # PyTorch's process_group:init METADATA node: the reference strips 2 chars each side.
    pg_info = "['" + json.dumps([
        {"pg_name": "0", "backend_id": 1, "ranks": [], "group_size": 4},
        {"pg_name": "5", "backend_id": 2, "ranks": [0, 2], "group_size": 2},
    ]) + "']"

    def nodes(rank):
        md = make_node(0, "## process_group:init ##", T.METADATA_NODE, inputs_values=pg_info)
        if rank in (0, 2):
            return [md, coll_node(1, T.ALL_REDUCE, MIB, deps=[0], pg_name="5")]
        return [md, comp_node(1, 1, deps=[0])]

    prefix = write_trace(tmp_path, "md", nodes, 4)
    report = simulate(prefix, system, net)
    expected = _group_expected(100.0, 200.0, hops=2)
    assert finishes(report) == [expected, 1000, expected, 1000]
    assert report.warnings == []


def test_unknown_comm_group_names_file_and_node(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 4, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = write_trace(tmp_path, "nogrp", lambda r: [coll_node(7, T.ALL_REDUCE, MIB, pg_name="9")], 4)

    with pytest.raises(WorkloadError, match=r"nogrp\.0\.et: node 7 .*communicator group 9 is not defined"):
        simulate(prefix, system, net)


# ---------------------------------------------------------------- compute models


def test_roofline_compute_and_memory_bound(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", roofline_enabled=1, local_mem_bw=1600, peak_perf=900)

    def nodes(rank):
        return [
            # OI = 1000 -> 1.6e15 > 9e14: compute bound, t = trunc(1e9 / 9e14 * 1e9) = 1111
            make_node(1, "gemm", T.COMP_NODE, attrs={"num_ops": 10**9, "tensor_size": 10**6}),
            # OI = 1 -> 1.6e12: memory bound, t = trunc(1e6 / 1.6e12 * 1e9) = 625
            make_node(2, "eltwise", T.COMP_NODE, data_deps=[1], attrs={"num_ops": 10**6, "tensor_size": 10**6}),
            # tensor_size 0: takes no time at all
            make_node(3, "empty", T.COMP_NODE, data_deps=[2], attrs={"num_ops": 10**6, "tensor_size": 0}),
        ]

    prefix = write_trace(tmp_path, "roof", nodes, 2)
    report = simulate(prefix, system, net)
    assert finishes(report) == [1736, 1736]
    assert [r.compute_ns for r in report.ranks] == [1736, 1736]
    assert report.settings["compute_model"] == "roofline"


def test_roofline_formula_matches_for_odd_values(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", roofline_enabled=1, local_mem_bw=123, peak_perf=7)
    ops, size = 987_654_321, 3_456_789
    perf = min(123e9 * (ops / size), 7e12)
    expected = int(ops / perf * 1e9)
    prefix = write_trace(tmp_path, "odd", lambda r: [
        make_node(1, "k", T.COMP_NODE, attrs={"num_ops": ops, "tensor_size": size})], 2)
    assert finishes(simulate(prefix, system, net)) == [expected, expected]


def test_roofline_tensor_size_zero_takes_no_time(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", roofline_enabled=1)
    prefix = write_trace(tmp_path, "z", lambda r: [
        make_node(1, "k", T.COMP_NODE, attrs={"num_ops": 5, "tensor_size": 0})], 2)
    report = simulate(prefix, system, net)
    assert finishes(report) == [0, 0]
    assert [r.compute_ns for r in report.ranks] == [0, 0]


def test_roofline_replays_cpu_ops(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", roofline_enabled=1)
    prefix = write_trace(tmp_path, "cpu", lambda r: [
        make_node(1, "host", T.COMP_NODE, duration_micros=3, attrs={"is_cpu_op": True})], 2)
    report = simulate(prefix, system, net)
    assert finishes(report) == [3000, 3000]
    assert [r.cpu_ns for r in report.ranks] == [3000, 3000]


def test_replay_only_replays_every_node(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json", replay_only=1)

    def nodes(rank):
        return [
            make_node(1, "ar", T.COMM_COLL_NODE, duration_micros=7,
                      attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 30}),
            comp_node(2, 3),
            comp_node(3, 2, deps=[2]),
        ]

    prefix = write_trace(tmp_path, "replay", nodes, 2)
    # The 1 GiB all-reduce is not simulated: it takes its recorded 7 us, beside 3+2 us of compute.
    assert finishes(simulate(prefix, system, net)) == [7000, 7000]


def test_zero_duration_compute_takes_one_ns(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    prefix = write_trace(tmp_path, "z", lambda r: [comp_node(1, 0), comp_node(2, 0, deps=[1])], 2)
    report = simulate(prefix, system, net)
    assert finishes(report) == [2, 2]
    assert [r.compute_ns for r in report.ranks] == [2, 2]


def test_broadcast_replays_its_duration(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")

    def nodes(rank):
        return [
            make_node(1, "bcast", T.COMM_COLL_NODE, duration_micros=7,
                      attrs={"is_cpu_op": False, "comm_type": T.BROADCAST, "comm_size": 1 << 30}),
            make_node(2, "bcast0", T.COMM_COLL_NODE, data_deps=[1],
                      attrs={"is_cpu_op": False, "comm_type": T.BROADCAST, "comm_size": 100}),
        ]

    report = simulate(write_trace(tmp_path, "b", nodes, 2), system, net)
    assert finishes(report) == [7001, 7001]
    assert [r.comm_ns for r in report.ranks] == [7001, 7001]
    assert [r.exposed_comm_ns for r in report.ranks] == [7001, 7001]


# ---------------------------------------------------------------- point to point


def _record_nodes(sim):
    times = {}

    def record(rank, node, start_ns, end_ns):
        times[(rank, node.id)] = (start_ns, end_ns)

    sim.record_node = record
    return times


def test_send_recv_match_by_tag(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    size = 4096
    t = t_msg(size, 100.0, 200.0)

    def nodes(rank):
        if rank == 0:  # two sends, tag 7 then tag 8 (one comm slot: one after the other)
            return [
                make_node(1, "s7", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_size": size, "comm_tag": 7}),
                make_node(2, "s8", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_size": size, "comm_tag": 8}),
            ]
        return [  # receives posted in the other order, both at t=0
            make_node(1, "r8", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": size, "comm_tag": 8}),
            make_node(2, "r7", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": size, "comm_tag": 7}),
            comp_node(3, 10, deps=[1]),
        ]

    sim = Simulation(write_trace(tmp_path, "tags", nodes, 2), system, net)
    times = _record_nodes(sim)
    report = sim.run()
    assert times[(0, 1)] == (0, t)
    assert times[(0, 2)] == (t, 2 * t)
    assert times[(1, 2)] == (0, t)  # tag 7 arrives first
    assert times[(1, 1)] == (0, 2 * t)  # tag 8 only with the second send
    assert finishes(report) == [2 * t, 2 * t + 10000]


def test_recv_posted_after_arrival_completes_at_once(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 2, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")
    t = t_msg(1024, 100.0, 200.0)

    def nodes(rank):
        if rank == 0:
            return [make_node(1, "s", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_size": 1024, "comm_tag": 1})]
        return [
            comp_node(1, 5),
            make_node(2, "r", T.COMM_RECV_NODE, data_deps=[1],
                      attrs={"comm_src": 0, "comm_size": 1024, "comm_tag": 1}),
        ]

    sim = Simulation(write_trace(tmp_path, "late", nodes, 2), system, net)
    times = _record_nodes(sim)
    report = sim.run()
    assert t < 5000
    assert times[(1, 2)] == (5000, 5000)
    # The send completes when the data arrives, whether or not it was received.
    assert finishes(report) == [t, 5000]


def test_send_recv_uses_hops_of_the_first_differing_dim(tmp_path):
    net = write_network(tmp_path / "net.yml", "Ring", 8, 100.0, 200.0)
    system = write_system(tmp_path / "sys.json")

    def nodes(rank):
        if rank == 1:
            return [make_node(1, "s", T.COMM_SEND_NODE, attrs={"comm_dst": 6, "comm_size": MIB, "comm_tag": 0})]
        if rank == 6:
            return [make_node(1, "r", T.COMM_RECV_NODE, attrs={"comm_src": 1, "comm_size": MIB, "comm_tag": 0})]
        return []

    report = simulate(write_trace(tmp_path, "far", nodes, 8), system, net)
    t = t_msg(MIB, 100.0, 200.0, hops=3)  # 1 -> 6 on a ring of 8: 3 hops anticlockwise
    assert report.ranks[1].finish_ns == report.ranks[6].finish_ns == t


def test_ring_2_all_reduce_reference_number(tmp_path):
    # §9.13: the congestion-unaware Ring-2 all-reduce of 1 MiB takes 24620 ns (50 GB/s, 500 ns).
    net = write_network(tmp_path / "net.yml", "Ring", 2, 50.0, 500.0)
    system = write_system(tmp_path / "sys.json")
    prefix = single_collective(tmp_path, T.ALL_REDUCE, MIB, 2)
    assert finishes(simulate(prefix, system, net)) == [24620, 24620]


def test_multi_dim_message_charges_only_the_first_differing_dim(tmp_path):
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring, FullyConnected ]\nnpus_count: [ 2, 4 ]\n"
                   "bandwidth: [ 100.0, 10.0 ]\nlatency: [ 200.0, 3000.0 ]\n")
    system = write_system(tmp_path / "sys.json")

    def nodes(rank):
        # 0 = (0, 0) -> 3 = (1, 1): differs in both dims, charged in dim 0 only (§6.2).
        # 0 -> 2 = (0, 1): dim 1 only.
        if rank == 0:
            return [
                make_node(1, "s3", T.COMM_SEND_NODE, attrs={"comm_dst": 3, "comm_size": MIB, "comm_tag": 1}),
                make_node(2, "s2", T.COMM_SEND_NODE, data_deps=[1],
                          attrs={"comm_dst": 2, "comm_size": MIB, "comm_tag": 2}),
            ]
        if rank == 3:
            return [make_node(1, "r", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": MIB, "comm_tag": 1})]
        if rank == 2:
            return [make_node(1, "r", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": MIB, "comm_tag": 2})]
        return []

    report = simulate(write_trace(tmp_path, "md", nodes, 8), system, str(net))
    dim0 = t_msg(MIB, 100.0, 200.0)
    dim1 = t_msg(MIB, 10.0, 3000.0)
    assert report.ranks[3].finish_ns == dim0
    assert report.ranks[2].finish_ns == report.ranks[0].finish_ns == dim0 + dim1


def test_comm_group_on_multi_dim_network_uses_one_local_ring(tmp_path):
    # A 2-D implementation list is replaced by a single ring over the group's members (§4.2).
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring, Ring ]\nnpus_count: [ 2, 2 ]\n"
                   "bandwidth: [ 100.0, 10.0 ]\nlatency: [ 200.0, 3000.0 ]\n")
    system = write_system(tmp_path / "sys.json", all_reduce_implementation=["ring", "ring"], endpoint_delay=100)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"2": [0, 3]}))

    def nodes(rank):
        if rank in (0, 3):
            return [coll_node(1, T.ALL_REDUCE, MIB, pg_name="2")]
        return []

    report = simulate(write_trace(tmp_path, "g2d", nodes, 4), system, str(net), comm_groups=str(groups))
    # 0 = (0, 0) and 3 = (1, 1): messages charged in dim 0 (the first differing one).
    m = MIB // 4 // 2
    expected = 4 * (2 * t_msg(m, 100.0, 200.0) + 3 * 10 + r_red(m))
    assert finishes(report) == [expected, 0, 0, expected]
