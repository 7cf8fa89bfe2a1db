"""``astra msccl to-chakra``: MSCCL-IR XML -> per-rank Chakra ETs that ASTRA-sim's CustomAlgorithm runs.

The converted ETs are checked three ways: against the reference's own converter output (the golden
ETs of astra-sim's custom_ring_allreduce_8npus_1MB example, byte for byte), by simulating them with
the ``chakra_custom`` format against per-rank times recorded from the reference binary, and (when a
reference wrapper script is available, ``$ASTRA_REFERENCE`` or /work/refbuild/run_reference.sh) by
running every sample XML through the reference live.
"""

import json
import os
import subprocess

import pytest

from astra_sim.chakra import make_metadata, make_node, read_et, types as T, write_et
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import find_shared_dir, golden_trace, reference_script
from astra_sim.workload.graph import build_graph

from astra_collectives_msccl.chakra_custom import CustomGraph
from astra_collectives_msccl.convert import comp_micros, convert_msccl, message_bytes, write_chakra
from astra_collectives_msccl.msccl_ir import parse_msccl

SHARED = find_shared_dir()
GOLDEN = golden_trace(SHARED, "custom_ring_allreduce_8npus_1MB", "custom_allreduce")
MEMORY = None if SHARED is None else SHARED / "parity" / "configs" / "mem_NO_MEMORY_EXPANSION.json"
REFERENCE = reference_script() if MEMORY is not None else None
needs_reference = pytest.mark.skipif(REFERENCE is None, reason="no reference simulator ($ASTRA_REFERENCE)")
needs_golden = pytest.mark.skipif(GOLDEN is None, reason="shared/samples/chakra/astra-sim-golden not found")
SAMPLES = None if SHARED is None else SHARED / "samples" / "msccl"
if SAMPLES is not None and not SAMPLES.is_dir():
    SAMPLES = None
needs_samples = pytest.mark.skipif(SAMPLES is None, reason="shared/samples/msccl not found")
MIB = 1 << 20


def ring_allreduce_xml(n, fused=True, proto="Simple"):
    """msccl-tools' allreduce_a100_ring.py n 1 1 (fused: s, rrs..., rrcs, rcs..., r; unfused: s/rrc/r)."""
    lines = [f'<algo name="allreduce_ring_1channelsperring" proto="{proto}" nchannels="1" nchunksperloop="{n}" '
             f'ngpus="{n}" coll="allreduce" inplace="1">']
    for r in range(n):
        lines.append(f'  <gpu id="{r}" i_chunks="{n}" o_chunks="0" s_chunks="0">')
        lines.append(f'    <tb id="0" send="{(r + 1) % n}" recv="{(r - 1) % n}" chan="0">')
        if fused:
            types = ["s"] + ["rrs"] * (n - 2) + ["rrcs"] + ["rcs"] * (n - 2) + ["r"]
        else:
            types = ["s"] + ["rrc", "s"] * (n - 1) + ["r", "s"] * (n - 2) + ["r"]
        chunk = r
        for s, kind in enumerate(types):
            if fused:
                chunk = (r - s) % n
            elif kind in ("rrc", "r"):
                chunk = (chunk - 1) % n
            lines.append(f'      <step s="{s}" type="{kind}" srcbuf="i" srcoff="{chunk}" dstbuf="i" dstoff="{chunk}" '
                         f'cnt="1" depid="-1" deps="-1" hasdep="0"/>')
        lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


#: Every opcode on two GPUs: fused ops, local cpy/re, a nop carrying a cross-threadblock dependency,
#: two nops in a row, a dependency on a fused step, and a second channel.
ALL_OPCODES_XML = """<algo name="all_opcodes" proto="Simple" nchannels="2" nchunksperloop="4" ngpus="2" coll="allreduce" inplace="1">
  <gpu id="0" i_chunks="4" o_chunks="0" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
      <step s="1" type="rrs" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="1"/>
      <step s="2" type="nop" srcbuf="i" srcoff="-1" dstbuf="i" dstoff="-1" cnt="0" depid="1" deps="0" hasdep="0"/>
      <step s="3" type="r" srcbuf="i" srcoff="2" dstbuf="i" dstoff="2" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="i" dstoff="2" cnt="2" depid="-1" deps="-1" hasdep="1"/>
      <step s="1" type="re" srcbuf="i" srcoff="1" dstbuf="i" dstoff="3" cnt="1" depid="0" deps="1" hasdep="1"/>
    </tb>
    <tb id="2" send="1" recv="-1" chan="1">
      <step s="0" type="s" srcbuf="i" srcoff="3" dstbuf="i" dstoff="3" cnt="1" depid="1" deps="1" hasdep="0"/>
    </tb>
    <tb id="3" send="-1" recv="-1" chan="0">
      <step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="i" dstoff="-1" cnt="0" depid="0" deps="0" hasdep="0"/>
      <step s="1" type="nop" srcbuf="i" srcoff="-1" dstbuf="i" dstoff="-1" cnt="0" depid="1" deps="0" hasdep="0"/>
      <step s="2" type="re" srcbuf="i" srcoff="0" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="4" o_chunks="0" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="rrcs" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rcs" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="0" chan="1">
      <step s="0" type="rrc" srcbuf="i" srcoff="3" dstbuf="i" dstoff="3" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""


_COLL = {T.ALL_REDUCE: "all-reduce", T.ALL_GATHER: "all-gather", T.ALL_TO_ALL: "all-to-all"}


def setup_run(folder, prefix, npus, topology="Ring", groups=None, comm_type=T.ALL_REDUCE, size=MIB):
    """One collective per rank (ranks outside ``groups`` idle 1 us), the reference's custom-collective
    system config naming ``prefix``, a one-dimensional 50 GB/s 500 ns network; returns the paths."""
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    group_of = {rank: gid for gid, ranks in (groups or {}).items() for rank in ranks}
    for rank in range(npus):
        attrs = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size}
        if groups and rank not in group_of:
            nodes = [make_node(0, "idle", T.COMP_NODE, duration_micros=1)]
        else:
            if groups:
                attrs["pg_name"] = str(group_of[rank])
            nodes = [make_node(0, "coll", T.COMM_COLL_NODE, attrs=attrs)]
        write_et(f"{folder}/w.{rank}.et", make_metadata(), nodes)
    with open(f"{folder}/sys.json", "w") as handle:
        json.dump({"scheduling-policy": "FIFO", "preferred-dataset-splits": 1,
                   f"{_COLL[comm_type]}-implementation-custom": [str(prefix)], "local-mem-bw": 50}, handle)
    with open(f"{folder}/net.yml", "w") as handle:
        handle.write(f"topology: [ {topology} ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    group_path = None
    if groups:
        group_path = f"{folder}/groups.json"
        with open(group_path, "w") as handle:
            json.dump({str(k): v for k, v in groups.items()}, handle)
    return f"{folder}/w", f"{folder}/sys.json", f"{folder}/net.yml", group_path


def ours(paths, **kwargs):
    workload, system, network, groups = paths
    return {r.rank: r.finish_ns for r in simulate(workload, system, network, None, groups, **kwargs).ranks}


def reference(paths, mode="unaware"):
    workload, system, network, groups = paths
    args = [REFERENCE, mode, f"--workload-configuration={workload}", f"--system-configuration={system}",
            f"--network-configuration={network}", f"--remote-memory-configuration={MEMORY}"]
    if groups:
        args.append(f"--comm-group-configuration={groups}")
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return {int(line.split("[", 1)[1].split("]", 1)[0]): int(line.split(", ")[1].split()[0])
            for line in out.stdout.splitlines()}


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _shape(nodes):
    """(id, name, type, data deps, duration, comm attrs) per node."""
    return [(n.id, n.name, T.node_type_name(n.type), list(n.data_deps), n.duration_micros,
             {k: v for k, v in n.attrs.items() if k != "comm_type"}) for n in nodes]


# --------------------------------------------------------------------------- node building


def test_every_opcode_is_split_into_send_recv_comp(tmp_path):
    algo = parse_msccl(_write(tmp_path, "ops.xml", ALL_OPCODES_XML))
    nodes = convert_msccl(algo, 16384, reduce_us=3, copy_us=2)
    chunk = 4096  # 16384 B / nchunksperloop 4

    def s(size, dst, tag):
        return {"comm_size": size, "comm_dst": dst, "comm_tag": tag}

    def r(size, src, tag):
        return {"comm_size": size, "comm_src": src, "comm_tag": tag}

    assert _shape(nodes[0]) == [
        (0, "COMM_SEND_NODE_tb0_step0", "COMM_SEND_NODE", [], 0, s(chunk, 1, 0)),
        (1, "COMM_RECV_NODE_tb0_step1", "COMM_RECV_NODE", [0], 0, r(chunk, 1, 0)),  # rrs: recv,
        (2, "COMP_NODE_tb0_step1", "COMP_NODE", [1], 3, {}),  # reduce,
        (3, "COMM_SEND_NODE_tb0_step1", "COMM_SEND_NODE", [2], 0, s(chunk, 1, 0)),  # send
        # step 2 is a nop waiting for tb1 step 0 (the cpy, node 5): step 3 inherits that dependency
        (4, "COMM_RECV_NODE_tb0_step3", "COMM_RECV_NODE", [3, 5], 0, r(chunk, 1, 0)),
        (5, "COMP_NODE_tb1_step0", "COMP_NODE", [], 2, {}),  # cpy of 2 chunks
        (6, "COMP_NODE_tb1_step1", "COMP_NODE", [3, 5], 3, {}),  # re after tb0's rrs (its send)
        (7, "COMM_SEND_NODE_tb2_step0", "COMM_SEND_NODE", [6], 0, s(chunk, 1, 1)),  # channel 1 = tag 1
        (8, "COMP_NODE_tb3_step2", "COMP_NODE", [0, 5], 3, {}),  # two nops: both dependencies
    ]
    assert _shape(nodes[1]) == [
        (0, "COMM_RECV_NODE_tb0_step0", "COMM_RECV_NODE", [], 0, r(chunk, 0, 0)),  # rrcs
        (1, "COMP_NODE_tb0_step0", "COMP_NODE", [0], 3, {}),
        (2, "COMM_SEND_NODE_tb0_step0", "COMM_SEND_NODE", [1], 0, s(chunk, 0, 0)),
        (3, "COMM_RECV_NODE_tb0_step1", "COMM_RECV_NODE", [2], 0, r(chunk, 0, 0)),  # rcs: no COMP
        (4, "COMM_SEND_NODE_tb0_step1", "COMM_SEND_NODE", [3], 0, s(chunk, 0, 0)),
        (5, "COMM_RECV_NODE_tb1_step0", "COMM_RECV_NODE", [], 0, r(chunk, 0, 1)),  # rrc
        (6, "COMP_NODE_tb1_step0", "COMP_NODE", [5], 3, {}),
    ]


def test_comm_attributes_have_the_types_the_reference_reads(tmp_path):
    algo = parse_msccl(_write(tmp_path, "ops.xml", ALL_OPCODES_XML))
    paths = write_chakra(str(tmp_path / "ops"), algo, convert_msccl(algo, 16384))
    et = read_et(paths[0])
    assert dict(et.nodes[0]._kinds) == {"comm_type": "int64_val", "comm_size": "int64_val",
                                        "comm_dst": "int32_val", "comm_tag": "int32_val"}
    assert dict(et.nodes[1]._kinds)["comm_src"] == "int32_val"
    meta = {a.name: a.string_val for a in et.metadata.attr}
    assert meta["schema"] == "1.0.2-chakra.0.0.4" and meta["collective"] == "allreduce"
    assert meta["input_file"] == ALL_OPCODES_XML
    # only data dependencies, and graphs both checkers accept
    for path in paths:
        nodes = read_et(path).nodes
        assert all(not n.ctrl_deps for n in nodes)
        build_graph(path, nodes)
        CustomGraph(path)


def test_message_sizes_and_the_all_gather_convention(tmp_path):
    ring = parse_msccl(_write(tmp_path, "ring.xml", ring_allreduce_xml(4)))
    assert message_bytes(ring, MIB, 1) == MIB // 4
    assert message_bytes(ring, 1001, 1) == 250  # remainder dropped
    assert message_bytes(ring, 3, 1) == 1  # never empty
    ag = (
        '<algo name="ag" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0">\n'
        '  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0"><tb id="0" send="1" recv="1" chan="0">\n'
        '    <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1"/>\n'
        '    <step s="1" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1"/></tb></gpu>\n'
        '  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0"><tb id="0" send="0" recv="0" chan="0">\n'
        '    <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1"/>\n'
        '    <step s="1" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1"/></tb></gpu>\n'
        "</algo>\n"
    )
    algo = parse_msccl(_write(tmp_path, "ag.xml", ag))
    # --size is each rank's contribution (the workload node's comm_size): one chunk of the output.
    nodes = convert_msccl(algo, 1000)
    assert [n.attrs["comm_size"] for n in nodes[0]] == [1000, 1000]


def test_comp_durations():
    assert comp_micros("reduce", 131072) == 0  # the reference's "free" reduction (runs as 1 ns)
    assert comp_micros("reduce", 131072, local_mem_bw=50) == 7  # 3 x trunc(2621.44 ns) -> 7 us
    assert comp_micros("copy", 131072, local_mem_bw=50) == 5  # 2 x 2621 ns
    assert comp_micros("reduce", 131072, reduce_us=4, local_mem_bw=50) == 4
    assert comp_micros("copy", 131072, reduce_us=4, copy_us=9, local_mem_bw=50) == 9


def test_bad_options(tmp_path):
    algo = parse_msccl(_write(tmp_path, "ring.xml", ring_allreduce_xml(4)))
    with pytest.raises(ConfigError, match="--size"):
        convert_msccl(algo, 0)
    with pytest.raises(ConfigError, match="--reduce-us"):
        convert_msccl(algo, 8, reduce_us=-1)
    with pytest.raises(ConfigError, match="--local-mem-bw"):
        convert_msccl(algo, 8, local_mem_bw=0)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot create the output folder"):
        write_chakra(str(tmp_path / "file" / "x"), algo, convert_msccl(algo, 8))


# --------------------------------------------------------------------------- the reference's converter


@needs_golden
@needs_samples
def test_unfused_ring_gives_the_reference_converter_output_byte_for_byte(tmp_path):
    xml = SAMPLES / "allreduce_ring_8gpu_1ch_LL128_nofusion_astrasim.xml"
    assert main(["msccl", "to-chakra", str(xml), "-o", str(tmp_path / "conv"), "--size", str(MIB),
                 "--local-mem-bw", "50", "-q"]) == 0
    for rank in range(8):
        assert (tmp_path / f"conv.{rank}.et").read_bytes() == open(f"{GOLDEN}.{rank}.et", "rb").read()


@needs_samples
def test_ring_generator_matches_the_samples(tmp_path):
    for n, fused, name in ((4, True, "allreduce_ring_4gpu_1ch_Simple.xml"),
                           (4, False, "allreduce_ring_4gpu_1ch_Simple_nofusion_astrasim.xml"),
                           (8, False, "allreduce_ring_8gpu_1ch_LL128_nofusion_astrasim.xml")):
        mine = parse_msccl(_write(tmp_path, f"{name}.gen.xml", ring_allreduce_xml(n, fused)))
        theirs = parse_msccl(str(SAMPLES / name))
        assert [[(s.type, s.srcoff, s.cnt) for tb in g.threadblocks for s in tb.steps] for g in mine.gpus] == \
               [[(s.type, s.srcoff, s.cnt) for tb in g.threadblocks for s in tb.steps] for g in theirs.gpus], name


def test_unfused_ring_simulates_to_the_reference_example_time(tmp_path):
    xml = _write(tmp_path, "ring8.xml", ring_allreduce_xml(8, fused=False, proto="LL128"))
    assert main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "conv"), "--size", str(MIB),
                 "--local-mem-bw", "50", "-q"]) == 0
    assert ours(setup_run(tmp_path / "run", tmp_path / "conv", 8)) == {r: 90174 for r in range(8)}


# --------------------------------------------------------------------------- simulation (recorded reference)


@pytest.mark.parametrize("topology, options, expected", [
    ("Ring", ["--local-mem-bw", "50"], 77292),
    ("FullyConnected", ["--reduce-us", "3", "--copy-us", "2"], 41292),
    ("Ring", [], 32295),  # free reductions: 6 hops of 256 KiB + 3 x 1 ns
])
def test_fused_ring_simulates_like_the_reference(tmp_path, topology, options, expected):
    xml = _write(tmp_path, "ring4.xml", ring_allreduce_xml(4))
    assert main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "conv"), "--size", str(MIB), "-q"] + options) == 0
    assert ours(setup_run(tmp_path / "run", tmp_path / "conv", 4, topology)) == {r: expected for r in range(4)}


# per-rank finish ns of the reference (unaware) for converted samples, 1 MiB, 50 GB/s, 500 ns
RECORDED = [
    ("allreduce_hierarchical_4gpux2node_Simple.xml", "Ring", ["--local-mem-bw", "50"],
     [56528, 56528, 55528, 56528, 56528, 56528, 55528, 56528]),
    ("allreduce_hierarchical_4gpux2node_Simple.xml", "Switch", ["--reduce-us", "3"], [39528] * 8),
    ("allreduce_allpairs_8gpu_LL.xml", "FullyConnected", ["--local-mem-bw", "50"], [5889] * 8),
    ("alltoall_two_step_2nodex4gpu_Simple.xml", "Switch", ["--local-mem-bw", "50"], [19206] * 8),
    ("allgather_ring_8gpu_LL128.xml", "Ring", [], [140217] * 8),
]


@needs_samples
@pytest.mark.parametrize("name, topology, options, expected", RECORDED, ids=[f"{r[0]}-{r[1]}" for r in RECORDED])
def test_converted_samples_simulate_like_the_reference(tmp_path, name, topology, options, expected):
    algo = parse_msccl(str(SAMPLES / name))
    assert main(["msccl", "to-chakra", str(SAMPLES / name), "-o", str(tmp_path / "conv"), "--size", str(MIB),
                 "-q"] + options) == 0
    comm_type = {"allreduce": T.ALL_REDUCE, "allgather": T.ALL_GATHER, "alltoall": T.ALL_TO_ALL}[algo.coll]
    result = ours(setup_run(tmp_path / "run", tmp_path / "conv", algo.ngpus, topology, comm_type=comm_type))
    assert [result[r] for r in range(algo.ngpus)] == expected


@needs_reference
@needs_samples
@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.xml")) if SAMPLES else [])
def test_reference_live_converted_samples(tmp_path, name):
    """Every sample, fused or not, converted and run by the reference binary and by astra-sim-py:
    the reference accepts the ETs and both give the same per-rank finish times."""
    algo = parse_msccl(str(SAMPLES / name))
    comm_type = {"allreduce": T.ALL_REDUCE, "allgather": T.ALL_GATHER, "alltoall": T.ALL_TO_ALL}[algo.coll]
    for topology in ("Ring", "FullyConnected", "Switch"):
        for options in ([], ["--local-mem-bw", "50"], ["--reduce-us", "3", "--copy-us", "2"]):
            folder = tmp_path / f"{topology}{len(options)}"
            folder.mkdir()
            assert main(["msccl", "to-chakra", str(SAMPLES / name), "-o", str(folder / "conv"), "--size",
                         str(MIB), "-q"] + options) == 0
            paths = setup_run(folder / "run", folder / "conv", algo.ngpus, topology, comm_type=comm_type)
            expected = reference(paths)
            assert len(expected) == algo.ngpus and ours(paths) == expected, (topology, options)
        expected = reference(paths, "aware")
        assert ours(paths, network_backend="congestion") == expected


@needs_reference
def test_reference_live_sub_group(tmp_path):
    """A 4-GPU algorithm on two communicator groups of an 8-NPU network."""
    xml = _write(tmp_path, "ring4.xml", ring_allreduce_xml(4))
    assert main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "conv"), "--size", str(MIB),
                 "--local-mem-bw", "50", "-q"]) == 0
    for groups in ({1: [0, 2, 4, 6], 2: [1, 3, 5, 7]}, {1: [1, 2, 5, 6]}):
        paths = setup_run(tmp_path / f"run{len(groups)}", tmp_path / "conv", 8, "Ring", groups=groups)
        assert reference(paths) == ours(paths)


def test_sub_group_recorded(tmp_path):
    xml = _write(tmp_path, "ring4.xml", ring_allreduce_xml(4))
    assert main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "conv"), "--size", str(MIB),
                 "--local-mem-bw", "50", "-q"]) == 0
    paths = setup_run(tmp_path / "run", tmp_path / "conv", 8, "Ring", groups={1: [0, 2, 4, 6], 2: [1, 3, 5, 7]})
    assert ours(paths) == {r: 80292 for r in range(8)}
    paths = setup_run(tmp_path / "run2", tmp_path / "conv", 8, "Ring", groups={1: [1, 2, 5, 6]})
    assert ours(paths) == {0: 1000, 1: 83292, 2: 83292, 3: 1000, 4: 1000, 5: 83292, 6: 83292, 7: 1000}


# --------------------------------------------------------------------------- command line


def test_cli_writes_one_file_per_gpu_and_says_how_to_use_them(tmp_path, capsys):
    xml = _write(tmp_path, "ring4.xml", ring_allreduce_xml(4))
    assert main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "out"), "--size", "4096"]) == 0
    out = capsys.readouterr().out
    assert "wrote 4 files" in out and "24 sends, 24 receives, 12 COMP nodes" in out
    assert f'"all-reduce-implementation-custom": ["{tmp_path / "out"}"]' in out
    assert sorted(os.listdir(tmp_path)) == ["out.0.et", "out.1.et", "out.2.et", "out.3.et", "ring4.xml"]


def test_cli_errors(tmp_path, capsys):
    xml = _write(tmp_path, "ring4.xml", ring_allreduce_xml(4))
    with pytest.raises(SystemExit) as info:
        main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "out")])  # --size is required
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "out"), "--size", "-5"])
    assert main(["msccl"]) == 2
    assert "to-chakra" in capsys.readouterr().err
    bad = _write(tmp_path, "bad.xml", ring_allreduce_xml(4).replace('type="rcs"', 'type="zz"', 1))
    assert main(["msccl", "to-chakra", bad, "-o", str(tmp_path / "out"), "--size", "64"]) == 2
    assert "unknown opcode" in capsys.readouterr().err
    assert main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "ring4.xml" / "out"), "--size", "64"]) == 2
    assert "cannot create the output folder" in capsys.readouterr().err


def test_cli_makes_missing_folders_like_every_o(tmp_path, capsys):
    xml = _write(tmp_path, "ring4.xml", ring_allreduce_xml(4))
    assert main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "new" / "deeper" / "out"), "--size", "4096"]) == 0
    assert sorted(os.listdir(tmp_path / "new" / "deeper")) == [f"out.{r}.et" for r in range(4)]


def test_cli_says_why_reductions_are_free(tmp_path, capsys):
    xml = _write(tmp_path, "ring8.xml", ring_allreduce_xml(8, fused=False, proto="LL128"))
    assert main(["msccl", "to-chakra", xml, "-o", str(tmp_path / "free"), "--size", str(MIB)]) == 0
    err = capsys.readouterr().err
    assert "note: the 56 reduction COMP nodes take 0 us" in err and "--local-mem-bw" in err
    from astra_sim.chakra import read_et

    for option in (["--local-mem-bw", "50"], ["--reduce-us", "7"], ["-q"]):
        out = tmp_path / option[0].strip("-")
        assert main(["msccl", "to-chakra", xml, "-o", str(out), "--size", str(MIB), *option]) == 0
        assert "reduction COMP nodes take 0 us" not in capsys.readouterr().err
        comps = [n.duration_micros for n in read_et(f"{out}.0.et").nodes if n.type == 4]
        # what the note promises: --local-mem-bw 50 gives the reference example's 7 us reductions
        assert comps == ([0] * 7 if option == ["-q"] else [7] * 7)
