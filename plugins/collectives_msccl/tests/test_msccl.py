"""MSCCL-IR XML custom collectives: the reader (msccl_ir) and the executor (msccl).

Timing constants used below (analytical congestion-unaware backend, 50 GB/s, 500 ns per hop):
``T(m) = trunc(500 + m / 53.687)`` ns per one-hop message, reductions ``3 x trunc(m / 1600)`` ns
(local-mem-bw 1600 GB/s), copies ``2 x trunc(m / 1600)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import find_shared_dir, system_config, write_network_config

from astra_collectives_msccl.msccl import MscclFormat
from astra_collectives_msccl.msccl_ir import OPCODES, parse_msccl

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
BW_B_PER_NS = 50 * (1 << 30) / 1e9  # the analytical backend's GB/s are GiB/s

_shared = find_shared_dir()
SAMPLES = (_shared / "samples" / "msccl") if _shared else None
needs_samples = pytest.mark.skipif(SAMPLES is None or not SAMPLES.is_dir(), reason="shared/samples/msccl not found")

COM = {"allreduce": T.ALL_REDUCE, "allgather": T.ALL_GATHER, "alltoall": T.ALL_TO_ALL,
       "reduce_scatter": T.REDUCE_SCATTER}
KEY = {"allreduce": "all-reduce", "allgather": "all-gather", "alltoall": "all-to-all",
       "reduce_scatter": "reduce-scatter"}
ANALYTICAL = {"plugins": ["network_analytical", "collectives_msccl"]}


def t_msg(m, hops=1):
    return int(500 * hops + m / BW_B_PER_NS)


def red(m):
    return 3 * int(m / 1600e9 * 1e9)


def sample(name):
    return str(SAMPLES / name)


def run(tmp_path, xml=None, size=MIB, coll="allreduce", topology="FullyConnected", npus=8, native=None,
        nodes=None, system_extra=None, **kwargs):
    """One collective node per rank; ``xml`` as the custom implementation, or ``native`` algorithm."""
    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    system = system_config(preferred_dataset_splits=1)
    if native is not None:
        system[f"{KEY[coll]}-implementation"] = [native]
    else:
        system[f"{KEY[coll]}-implementation-custom"] = [str(xml)]
    system.update(system_extra or {})
    (tmp_path / "sys.json").write_text(json.dumps(system))
    net = write_network_config(tmp_path / "net.yml", (topology,), (npus,), (50.0,), (500.0,))
    if nodes is None:
        nodes = [make_node(1, "coll", T.COMM_COLL_NODE,
                           attrs={"is_cpu_op": False, "comm_type": COM[coll], "comm_size": size})]
    for rank in range(npus):
        rank_nodes = nodes(rank) if callable(nodes) else nodes
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), rank_nodes)
    kwargs = {**ANALYTICAL, **kwargs}
    return simulate(str(tmp_path / "t"), str(tmp_path / "sys.json"), net, **kwargs)


def finish(report):
    return report.max_finish_ns


# --------------------------------------------------------------------------------------------
# the reader


@needs_samples
def test_every_sample_parses_with_its_step_count():
    counts = {
        "allreduce_ring_4gpu_1ch_Simple.xml": 28, "allreduce_ring_8gpu_1ch_LL128.xml": 120,
        "allreduce_ring_8gpu_4ch_Simple.xml": 120, "allreduce_ring_8gpu_1ch_LL128_nofusion_astrasim.xml": 224,
        "allreduce_ring_4gpu_1ch_Simple_nofusion_astrasim.xml": 48, "allreduce_allpairs_8gpu_LL.xml": 1336,
        "allreduce_hierarchical_4gpux2node_Simple.xml": 144, "allreduce_rdh_8gpu_LL.xml": 104,
        "allgather_ring_8gpu_LL128.xml": 64, "allgather_allpairs_8gpu_LL128.xml": 112,
        "alltoall_allpairs_8gpu_Simple.xml": 120, "alltoall_two_step_2nodex4gpu_Simple.xml": 152,
        "collectiveapi_allgather_hierarchical.xml": 64,
    }
    for name, steps in counts.items():
        algo = parse_msccl(sample(name))
        assert algo.nsteps == steps, name
        assert [g.id for g in algo.gpus] == list(range(algo.ngpus))
        assert MscclFormat().matches(sample(name))
    ring = parse_msccl(sample("allreduce_ring_4gpu_1ch_Simple.xml"))
    assert (ring.name, ring.proto, ring.nchannels, ring.nchunksperloop, ring.ngpus, ring.coll, ring.inplace) == (
        "allreduce_ring_1channelsperring", "Simple", 1, 4, 4, "allreduce", 1)
    tb = ring.gpus[0].threadblocks[0]
    assert (tb.id, tb.send, tb.recv, tb.chan) == (0, 1, 3, 0)
    assert [s.type for s in tb.steps] == ["s", "rrs", "rrs", "rrcs", "rcs", "rcs", "r"]
    st = tb.steps[1]
    assert (st.s, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, st.cnt, st.depid, st.deps, st.hasdep) == (
        1, "i", 3, "i", 3, 1, -1, -1, 0)
    hier = parse_msccl(sample("allreduce_hierarchical_4gpux2node_Simple.xml"))
    assert any(s.depid >= 0 for g in hier.gpus for t in g.threadblocks for s in t.steps)
    assert hier.nchannels == 12


def test_matches_only_msccl_algo_xml(tmp_path):
    (tmp_path / "other.xml").write_text("<notalgo/>")
    (tmp_path / "broken.xml").write_text("<algo")
    (tmp_path / "algo.txt").write_text("<algo/>")
    fmt = MscclFormat()
    assert not fmt.matches(str(tmp_path / "other.xml"))
    assert not fmt.matches(str(tmp_path / "broken.xml"))
    assert not fmt.matches(str(tmp_path / "algo.txt"))
    assert not fmt.matches(str(tmp_path / "missing.xml"))
    assert not fmt.matches(str(tmp_path / "t"))  # a Chakra prefix is the other format's


TWO_GPU = """<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="1">
  <gpu id="0" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""


def write_xml(tmp_path, text, name="algo.xml"):
    path = Path(tmp_path) / name
    path.write_text(text)
    return str(path)


def test_rcclteccl_dialect_extras_are_ignored(tmp_path):
    text = TWO_GPU.replace('inplace="1">', 'inplace="1" outofplace="0" redop="sum" nthreads="512" minBytes="0">')
    text = text.replace('<gpu id="0" i_chunks="2" o_chunks="0" s_chunks="0">',
                        '<gpu id="0" i_chunks="2" o_chunks="0" s_chunks="0" extra="1">\n'
                        '    <copy i_off="0" o_off="0" cnt="1"/>')
    text = text.replace('chan="0">', 'chan="0" weird="yes">').replace("</algo>", "<meta note='x'/></algo>")
    algo = parse_msccl(write_xml(tmp_path, text))
    assert algo.nsteps == 4 and algo.gpus[0].threadblocks[0].steps[1].type == "rrc"
    # Missing optional attributes take their defaults.
    bare = TWO_GPU.replace(' depid="-1" deps="-1" hasdep="0"', "").replace(' nchannels="1"', "")
    bare = bare.replace(' proto="Simple"', "").replace(' inplace="1"', ' outofplace="1"')
    algo = parse_msccl(write_xml(tmp_path, bare, "bare.xml"))
    assert (algo.nchannels, algo.proto, algo.inplace) == (1, "Simple", 0)
    assert algo.gpus[1].threadblocks[0].steps[0].depid == -1


def test_every_runtime_opcode_is_known():
    assert set(OPCODES) == {"s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "ra", "nop"}
    assert [k for k, op in OPCODES.items() if op.recv and op.reduce and op.send] == ["rrs", "rrcs"]


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda t: t.replace('type="rrc" srcbuf="i" srcoff="0"', 'type="xyz" srcbuf="i" srcoff="0"'),
         r"gpu 0, tb 0, step 1: unknown opcode type='xyz'"),
        (lambda t: t.replace('srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1"',
                             'srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="0" deps="5"', 1),
         r"gpu 0, tb 0, step 1: depends on its own threadblock's step 5|gpu 0, tb 0, step 1: depends on step 5"),
        (lambda t: t.replace('srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1"',
                             'srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="3" deps="0"', 1),
         r"gpu 0, tb 0, step 1: depends on threadblock 3, which gpu 0 does not have"),
        (lambda t: t.replace('<tb id="0" send="1" recv="1" chan="0">', '<tb id="0" send="5" recv="1" chan="0">', 1),
         r"gpu 0, tb 0: send peer 5 is outside 0..1"),
        (lambda t: t.replace('<tb id="0" send="1" recv="1" chan="0">', '<tb id="0" send="0" recv="1" chan="0">', 1),
         r"gpu 0, tb 0: send peer 0 is the gpu itself"),
        (lambda t: t.replace('<gpu id="1"', '<gpu id="2"'), r"gpu 2: gpu id 2 is outside 0..1"),
        (lambda t: t.replace('<gpu id="1"', '<gpu id="0"'), r"gpu 0: gpu id 0 appears twice"),
        (lambda t: t.replace('ngpus="2"', 'ngpus="3"'), r"ngpus=3 but no <gpu> for id\(s\) \[2\]"),
        (lambda t: t.replace('<step s="1" type="rrc" srcbuf="i" srcoff="1"', '<step s="1" type="re" srcbuf="i" srcoff="1"'),
         r"gpu 0, tb 0, step 0: send #1 to gpu 1 on channel 0 has no matching receive"),
        (lambda t: t.replace('<step s="0" type="s" srcbuf="i" srcoff="0"', '<step s="0" type="nop" srcbuf="i" srcoff="0"'),
         r"gpu 0, tb 0, step 1: receive #1 from gpu 1 on channel 0 has no matching send"),
        (lambda t: t.replace('<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1"',
                             '<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="2"'),
         r"gpu 1, tb 0, step 0: send #1 to gpu 0 on channel 0 has cnt=2 but the matching receive "
         r"\(gpu 0, tb 0, step 1\) has cnt=1"),
        (lambda t: t.replace('srcoff="1" dstbuf="i" dstoff="1" cnt="1"', 'srcoff="1" dstbuf="i" dstoff="1" cnt="7"', 1),
         r"gpu 0, tb 0, step 0: srcoff=1 cnt=7 is outside the 'i' buffer \(2 chunks on gpu 0\)"),
        (lambda t: t.replace('<step s="1" type="rrc" srcbuf="i" srcoff="0"', '<step s="2" type="rrc" srcbuf="i" srcoff="0"'),
         r"gpu 0, tb 0, step 2: step index 2 leaves a gap"),
        (lambda t: t.replace('cnt="1" depid', 'cnt="x" depid', 1), r"gpu 0, tb 0, step 0: <step> cnt='x' is not an integer"),
        (lambda t: t[:-20], r"not well-formed XML"),
        # both GPUs receive first: a cycle of receives.
        (lambda t: t.replace('<step s="0" type="s"', '<step s="9" type="s"').replace(
            '<step s="1" type="rrc"', '<step s="0" type="rrc"').replace('<step s="9" type="s"', '<step s="1" type="s"'),
         r"gpu 0, tb 0, step 0: deadlock: receive #1 from gpu 1 on channel 0 is never sent"),
    ],
)
def test_malformed_programs_are_config_errors_naming_gpu_tb_step(tmp_path, mutate, expected):
    path = write_xml(tmp_path, mutate(TWO_GPU))
    with pytest.raises(ConfigError, match=expected) as info:
        parse_msccl(path)
    assert path in str(info.value)


def test_dependency_on_a_missing_step_of_another_threadblock(tmp_path):
    text = TWO_GPU.replace(
        '    </tb>\n  </gpu>\n  <gpu id="1"',
        '    </tb>\n    <tb id="1" send="-1" recv="-1" chan="0">\n'
        '      <step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="i" dstoff="-1" cnt="0" depid="0" deps="4" hasdep="0"/>\n'
        '    </tb>\n  </gpu>\n  <gpu id="1"', 1)
    with pytest.raises(ConfigError, match=r"gpu 0, tb 1, step 0: depends on step 4 of threadblock 0, which has 2 step"):
        parse_msccl(write_xml(tmp_path, text))
    # Two threadblocks waiting on each other.
    text = TWO_GPU.replace(
        '    </tb>\n  </gpu>\n  <gpu id="1"',
        '    </tb>\n    <tb id="1" send="-1" recv="-1" chan="0">\n'
        '      <step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="i" dstoff="-1" cnt="0" depid="0" deps="1" hasdep="1"/>\n'
        '    </tb>\n  </gpu>\n  <gpu id="1"', 1).replace(
        'type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1"',
        'type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="1" deps="0"', 1)
    with pytest.raises(ConfigError, match=r"gpu 0, tb \d, step \d: dependency cycle"):
        parse_msccl(write_xml(tmp_path, text, "cycle.xml"))


# --------------------------------------------------------------------------------------------
# the executor: errors at run time


@needs_samples
def test_wrong_rank_count_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"allreduce_ring_4gpu_1ch_Simple.xml: ngpus=4 but the simulation has 8 NPUs"):
        run(tmp_path, sample("allreduce_ring_4gpu_1ch_Simple.xml"))


@needs_samples
def test_collective_type_mismatch_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"a 'allgather' algorithm cannot implement all-reduce"):
        run(tmp_path, sample("allgather_ring_8gpu_LL128.xml"))


@needs_samples
def test_errors_in_the_xml_surface_through_simulate(tmp_path):
    text = Path(sample("allreduce_ring_8gpu_1ch_LL128.xml")).read_text()
    text = text.replace('type="rrcs"', 'type="rrcsx"', 1)
    path = write_xml(tmp_path, text)
    with pytest.raises(ConfigError, match=r"algo.xml, gpu 0, tb 0, step 7: unknown opcode type='rrcsx'"):
        run(tmp_path / "run", path)


@needs_samples
def test_reductions_need_local_mem_bw(tmp_path):
    with pytest.raises(ConfigError, match="local-mem-bw"):
        run(tmp_path, sample("allreduce_ring_8gpu_1ch_LL128.xml"), system_extra={"local-mem-bw": 0})


# --------------------------------------------------------------------------------------------
# the executor: runs and timings

SAMPLE_NAMES = [
    "allgather_allpairs_8gpu_LL128.xml", "allgather_ring_8gpu_LL128.xml", "allreduce_allpairs_8gpu_LL.xml",
    "allreduce_hierarchical_4gpux2node_Simple.xml", "allreduce_rdh_8gpu_LL.xml", "allreduce_ring_4gpu_1ch_Simple.xml",
    "allreduce_ring_4gpu_1ch_Simple_nofusion_astrasim.xml", "allreduce_ring_8gpu_1ch_LL128.xml",
    "allreduce_ring_8gpu_1ch_LL128_nofusion_astrasim.xml", "allreduce_ring_8gpu_4ch_Simple.xml",
    "alltoall_allpairs_8gpu_Simple.xml", "alltoall_two_step_2nodex4gpu_Simple.xml",
    "collectiveapi_allgather_hierarchical.xml",
]


@needs_samples
def test_the_sample_list_is_complete():
    assert sorted(p.name for p in SAMPLES.glob("*.xml")) == sorted(SAMPLE_NAMES)


@needs_samples
@pytest.mark.parametrize("topology", ["FullyConnected", "Switch"])
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_sample_runs_to_completion(tmp_path, name, topology):
    algo = parse_msccl(sample(name))
    report = run(tmp_path, sample(name), size=MIB, coll=algo.coll, topology=topology, npus=algo.ngpus)
    assert all(r.finish_ns > 0 for r in report.ranks)
    assert len(report.ranks) == algo.ngpus


@needs_samples
def test_ring_allreduce_closed_form(tmp_path):
    # 14 chained messages of S/8, 7 reductions (6 rrs + 1 rrcs) of S/8 on the critical path.
    report = run(tmp_path, sample("allreduce_ring_8gpu_1ch_LL128.xml"), size=MIB, topology="Ring")
    m = MIB // 8
    assert {r.finish_ns for r in report.ranks} == {14 * t_msg(m) + 7 * red(m)} == {42875}


@needs_samples
def test_fused_and_unfused_rings_take_the_same_time(tmp_path):
    fused = finish(run(tmp_path / "a", sample("allreduce_ring_8gpu_1ch_LL128.xml"), size=16 * MIB, topology="Ring"))
    plain = finish(run(tmp_path / "b", sample("allreduce_ring_8gpu_1ch_LL128_nofusion_astrasim.xml"),
                       size=16 * MIB, topology="Ring"))
    assert fused == plain


@needs_samples
@pytest.mark.parametrize("size", [MIB, 16 * MIB, 256 * MIB, GIB])
def test_ring_xml_agrees_with_native_ring(tmp_path, size):
    """Native ring with preferred-dataset-splits 1 (one chunk, like the custom collective)."""
    xml = finish(run(tmp_path / "x", sample("allreduce_ring_8gpu_1ch_LL128.xml"), size=size, topology="Ring"))
    native = finish(run(tmp_path / "n", size=size, topology="Ring", native="ring"))
    assert abs(xml - native) / native < 0.05
    # The whole difference is the native ring's (2n-1) endpoint delays of 10 ns.
    assert native - xml == (2 * 8 - 1) * 10


@needs_samples
def test_four_channel_ring_agrees_with_native_ring(tmp_path):
    xml = finish(run(tmp_path / "x", sample("allreduce_ring_8gpu_4ch_Simple.xml"), size=256 * MIB, topology="Ring"))
    native = finish(run(tmp_path / "n", size=256 * MIB, topology="Ring", native="ring"))
    assert abs(xml - native) / native < 0.05


@needs_samples
def test_allgather_size_is_per_rank_contribution(tmp_path):
    """comm_size is what each rank contributes; nchunksperloop cuts the 8x larger output buffer."""
    xml = finish(run(tmp_path / "x", sample("allgather_ring_8gpu_LL128.xml"), size=MIB, coll="allgather",
                     topology="Ring"))
    assert xml == 7 * t_msg(MIB)
    native = finish(run(tmp_path / "n", size=MIB, coll="allgather", topology="Ring", native="ring"))
    assert native - xml == 8 * 10  # native ring AG: (n-1) T(S) + n E


@needs_samples
def test_alltoall_copy_costs_read_plus_write(tmp_path):
    """One round of 7 concurrent S/8 messages on dedicated links; tb 7 copies the own chunk after its
    send (steps run in order, a send ends when delivered), so the copy is on the critical path."""
    size = 64 * MIB
    got = finish(run(tmp_path, sample("alltoall_allpairs_8gpu_Simple.xml"), size=size, coll="alltoall"))
    assert got == t_msg(size // 8) + 2 * int(size // 8 / 1600e9 * 1e9)


@needs_samples
@pytest.mark.parametrize("size", [8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB])
def test_allpairs_beats_ring_at_small_sizes(tmp_path, size):
    allpairs = finish(run(tmp_path / "a", sample("allreduce_allpairs_8gpu_LL.xml"), size=size))
    ring = finish(run(tmp_path / "r", sample("allreduce_ring_8gpu_1ch_LL128.xml"), size=size))
    assert allpairs < ring / 4  # 2 message latencies instead of 14


@needs_samples
def test_allpairs_ring_crossover_with_shared_links_and_protocol_overheads(tmp_path):
    """Where one NIC port carries all 7 allpairs messages (Switch, congestion-aware) and LL pays 2x on the
    wire (msccl_protocol), ring wins at large sizes; the crossover is near 324 KiB (docs/msccl.md)."""
    kwargs = {"topology": "Switch", "network_backend": "congestion", "options": {"msccl_protocol": True},
              "plugins": ["network_congestion", "collectives_msccl"]}
    times = {}
    for size in (64 * KIB, MIB):
        times[size] = [
            finish(run(tmp_path / f"{name}{size}", sample(name), size=size, **kwargs))
            for name in ("allreduce_allpairs_8gpu_LL.xml", "allreduce_ring_8gpu_1ch_LL128.xml")
        ]
    assert times[64 * KIB][0] < times[64 * KIB][1]
    assert times[MIB][0] > times[MIB][1]


@needs_samples
def test_protocol_option_inflates_wire_bytes(tmp_path):
    base = finish(run(tmp_path / "a", sample("allgather_ring_8gpu_LL128.xml"), size=MIB, coll="allgather",
                      topology="Ring"))
    proto = finish(run(tmp_path / "b", sample("allgather_ring_8gpu_LL128.xml"), size=MIB, coll="allgather",
                       topology="Ring", options={"msccl_protocol": True}))
    assert base == 7 * t_msg(MIB)
    assert proto == 7 * t_msg(-(-MIB * 128 // 120))


@needs_samples
def test_tiny_sizes_send_at_least_one_byte(tmp_path):
    # nchunksperloop 64, 8 bytes: chunks of 0.125 B -> every message is 1 byte.
    report = run(tmp_path, sample("allreduce_allpairs_8gpu_LL.xml"), size=8)
    assert report.max_finish_ns == 2 * t_msg(1)


@needs_samples
def test_collectives_in_sequence_and_rendezvous(tmp_path):
    nodes = [
        make_node(1, "a", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB}),
        make_node(2, "b", T.COMM_COLL_NODE, data_deps=[1],
                  attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB}),
    ]
    xml = sample("allreduce_ring_8gpu_4ch_Simple.xml")
    one = finish(run(tmp_path / "one", xml, topology="Ring"))
    two = finish(run(tmp_path / "two", xml, topology="Ring", nodes=nodes))
    assert two == 2 * one


@needs_samples
@pytest.mark.parametrize("name", ["allreduce_ring_8gpu_1ch_LL128.xml", "allreduce_allpairs_8gpu_LL.xml"])
def test_rendezvous_does_not_deadlock_send_first_programs(tmp_path, name):
    """Both programs send before they receive. Receives are posted when the collective starts (an NCCL
    connection's receive buffer is always ready), so the 8 KiB handshakes go out at once and only the
    first message of a chain waits for one."""
    eager = finish(run(tmp_path / "e", sample(name), topology="Ring"))
    rdv = finish(run(tmp_path / "r", sample(name), topology="Ring", rendezvous=True))
    if "ring" in name:
        assert rdv == eager + t_msg(8192)
    else:
        assert eager < rdv


@needs_samples
def test_independent_collectives_run_one_after_the_other(tmp_path):
    """The workload layer never runs two collectives of one NPU at once (one GPU-comm slot)."""
    nodes = [
        make_node(1, "a", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB}),
        make_node(2, "b", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB}),
    ]
    xml = sample("allreduce_ring_8gpu_1ch_LL128.xml")
    one = finish(run(tmp_path / "one", xml, topology="Ring"))
    both = run(tmp_path / "both", xml, topology="Ring", nodes=nodes, system_extra={"active-chunks-per-dimension": 2})
    assert both.max_finish_ns == 2 * one


@needs_samples
def test_channels_and_collective_instances_have_distinct_tags():
    """Tag = 2e9 x (chan + 1) + the stream's tag: above the native, collective and rendezvous spaces."""
    from types import SimpleNamespace

    from astra_collectives_msccl.msccl import MSCCL_TAG_STRIDE

    ctx = SimpleNamespace(options={}, system_config=SimpleNamespace(local_mem_bw_bytes_per_s=1600e9, path="s.json"),
                          total_npus=8)
    coll = MscclFormat().load(sample("allreduce_ring_8gpu_4ch_Simple.xml"), ctx)
    sys = SimpleNamespace(msg_send=None, msg_recv=None, register_event=None, endpoint_delay_ns=10)
    tags = set()
    for stream_tag in (500_000_000, 500_000_001):
        algo = coll.make_algorithm("all_reduce", 0, 0, None, MIB)
        algo.bind(SimpleNamespace(sys=sys, tag=stream_tag))
        assert sorted(algo.tags) == [MSCCL_TAG_STRIDE * (c + 1) + stream_tag for c in range(4)]
        tags.update(algo.tags)
    assert len(tags) == 8 and min(tags) >= 2_000_000_000


@needs_samples
def test_communicator_group_maps_gpu_ids_to_member_ranks(tmp_path):
    """A 4-GPU ring on the communicator {1, 3, 5, 7} of an 8-NPU Ring: peers are 2 hops apart."""
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [7, 5, 3, 1]}))

    def nodes(rank):
        if rank % 2:
            return [make_node(1, "ar", T.COMM_COLL_NODE, attrs={
                "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB, "pg_name": "1"})]
        return [make_node(1, "c", T.COMP_NODE, duration_micros=1)]

    report = run(tmp_path / "run", sample("allreduce_ring_4gpu_1ch_Simple.xml"), topology="Ring", nodes=nodes,
                 comm_groups=str(groups))
    m = MIB // 4
    # 6 chained messages, 3 reductions; gpu 3 -> gpu 0 (rank 7 -> rank 1) is 2 hops on the ring too.
    expected = 6 * t_msg(m, hops=2) + 3 * red(m)
    assert [r.finish_ns for r in report.ranks] == [1000, expected, 1000, expected, 1000, expected, 1000, expected]


@needs_samples
def test_allpairs_64mib_simulates_quickly(tmp_path):
    import time

    started = time.perf_counter()
    run(tmp_path, sample("allreduce_allpairs_8gpu_LL.xml"), size=64 * MIB)
    assert time.perf_counter() - started < 2.0
