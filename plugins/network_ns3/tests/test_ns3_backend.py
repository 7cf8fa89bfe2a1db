"""The ``ns3`` backend on the real ns-3: line rate, incast, the flow tier, ASTRA-sim's example inputs, FIFO,
lockstep, statistics. Loading the glue (compiled once per test session, or cppyy's ~6 s of CPU) is paid once, by
the module-scoped fixture ``glue``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.engine import EventEngine
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_network_ns3.inputs import read_config_topology, read_network_cfg

DATA = Path(__file__).parent / "data"
CFG = DATA / "scratch" / "config" / "network_cfg.txt"  # ASTRA-sim's folder layout: its relative paths work
TOPO = DATA / "scratch" / "topology" / "8_nodes_1_switch_topology.txt"
REF_TOPO = "../../scratch/topology/8_nodes_1_switch_topology.txt"
MiB = 1 << 20


@pytest.fixture(scope="module")
def glue():
    if importlib.util.find_spec("ns3") is None:
        pytest.skip("the ns3 package is not installed (pip install 'ns3==3.44.post0')")
    from astra_network_ns3.backend import load_glue

    return load_glue()


def write_inputs(tmp_path, hosts, switches, links, cc_mode=8, extra=""):
    """A network_cfg.txt + topology: ``links`` are (a, b, rate, delay) with node ids."""
    nodes = hosts + len(switches)
    lines = [f"{nodes} {len(switches)} {len(links)}", " ".join(map(str, switches))]
    lines += [f"{a} {b} {rate} {delay} 0" for a, b, rate, delay in links]
    (tmp_path / "topo.txt").write_text("\n".join(lines) + "\n")
    cfg = tmp_path / "cfg.txt"
    cfg.write_text(
        f"TOPOLOGY_FILE topo.txt\nPACKET_PAYLOAD_SIZE 1000\nCC_MODE {cc_mode}\nENABLE_QCN 1\nBUFFER_SIZE 32\n"
        "KMIN_MAP 2 100000000000 400 400000000000 800\nKMAX_MAP 2 100000000000 1600 400000000000 3200\n"
        "PMAX_MAP 2 100000000000 0.2 400000000000 0.2\n" + extra
    )
    return str(cfg)


def star(tmp_path, hosts, rate="100Gbps", delay="1us", **kwargs):
    return write_inputs(tmp_path, hosts, [hosts], [(hosts, h, rate, delay) for h in range(hosts)], **kwargs)


def network(cfg, warn=None):
    from astra_network_ns3.backend import Ns3Network

    config = read_network_cfg(cfg)
    topology = read_config_topology(config)
    engine = EventEngine()
    warnings = [] if warn is None else warn
    return Ns3Network(config, topology, [len(topology.hosts)], engine, warn=warnings.append), engine


def run_messages(net, engine, messages):
    """``messages``: (time ns, src, dst, bytes); returns [(index, arrival ns)] in arrival order."""
    got = []
    for index, (at, src, dst, size) in enumerate(messages):
        engine.schedule_at(at, lambda args: net.send(*args), (src, dst, size, lambda i: got.append((i, engine.now)),
                                                             index))
    engine.run()
    return got


def test_single_16mib_message_near_line_rate(glue, tmp_path):
    net, engine = network(star(tmp_path, 2))
    got = run_messages(net, engine, [(0, 0, 1, 16 * MiB)])
    ideal = 16 * MiB * 8 / 100e9 * 1e9 + 2 * 1000  # line rate + one-way propagation over two 1 us links
    assert len(got) == 1
    ratio = got[0][1] / ideal
    assert 1.02 <= ratio <= 1.12, ratio
    stats = net.stats()
    assert stats["drops"] == 0 and stats["flow_completion"]["count"] == 1
    sent = {(row["src"], row["dst"]): row["bytes"] for row in stats["links"]}
    assert sent[(0, 2)] > 16 * MiB and sent[(2, 1)] > 16 * MiB  # payload plus headers, both hops


@pytest.mark.parametrize("cc_mode", [8, 0, 1])
def test_incast_four_to_one_takes_four_times_and_nobody_starves(glue, tmp_path, cc_mode):
    size = 4 * MiB
    cfg = star(tmp_path, 5, cc_mode=cc_mode)
    net, engine = network(cfg)
    alone = run_messages(net, engine, [(0, 0, 4, size)])[0][1]
    net, engine = network(cfg)
    got = run_messages(net, engine, [(0, s, 4, size) for s in range(4)])
    ends = sorted(t for _, t in got)
    assert len(ends) == 4
    assert 0.8 * 4 <= ends[-1] / alone <= 1.2 * 4, (ends, alone)
    assert ends[0] >= 0.6 * ends[-1], ends  # every flow got a share until near the end
    stats = net.stats()
    into = next(row for row in stats["links"] if (row["src"], row["dst"]) == (5, 4))
    assert into["peak_queue_bytes"] > 0
    if cc_mode in (1, 8):
        assert into["ecn_marks"] > 0 and stats["ecn_marks"] == into["ecn_marks"]
        assert (stats["cnps"] > 0) == (cc_mode == 1)  # DCQCN's receiver answers marks with CNPs
    else:
        assert stats["ecn_marks"] == 0


def test_dcqcn_single_message_near_line_rate(glue, tmp_path):
    net, engine = network(star(tmp_path, 2, cc_mode=1))
    got = run_messages(net, engine, [(0, 0, 1, 16 * MiB)])
    ratio = got[0][1] / (16 * MiB * 8 / 100e9 * 1e9 + 2 * 1000)
    assert 1.02 <= ratio <= 1.12, ratio  # 30 header bytes per 1000, paced at line rate from the start


def test_dcqcn_drop_is_an_error_not_a_hang(glue, tmp_path):
    """No PFC and no retransmission: a full queue that drops a DCQCN packet stops the run and says why."""
    from astra_sim.errors import SimulationError

    star(tmp_path, 5, cc_mode=1)
    cfg = tmp_path / "cfg.txt"
    cfg.write_text(cfg.read_text().replace("BUFFER_SIZE 32", "BUFFER_SIZE 0.05"))
    net, engine = network(str(cfg))
    with pytest.raises(SimulationError, match="DCQCN packet was dropped .*raise BUFFER_SIZE"):
        run_messages(net, engine, [(0, s, 4, MiB) for s in range(4)])


def test_messages_of_a_pair_arrive_in_send_order(glue, tmp_path):
    net, engine = network(star(tmp_path, 3))
    got = run_messages(net, engine, [(0, 0, 1, 4 * MiB), (10, 0, 1, 1000), (10, 2, 1, 1000)])
    order = [i for i, _ in got]
    assert order.index(0) < order.index(1)  # FIFO between one pair, however small the second
    assert order[0] == 2  # another pair is not held behind it


def test_a_send_enters_ns3_at_its_time(glue, tmp_path):
    cfg = star(tmp_path, 2)
    net, engine = network(cfg)
    at_zero = run_messages(net, engine, [(0, 0, 1, 100_000)])[0][1]
    net, engine = network(cfg)
    later = run_messages(net, engine, [(123_457, 0, 1, 100_000)])[0][1]
    assert later - 123_457 == at_zero


def test_a_send_lands_at_its_time_while_ns3_is_busy(glue, tmp_path):
    """A message sent while another pair's flow is in flight (ns-3 running in slices) enters ns-3 at its time."""
    cfg = star(tmp_path, 4)
    net, engine = network(cfg)
    alone = run_messages(net, engine, [(0, 2, 3, 1000)])[0][1]
    net, engine = network(cfg)
    got = dict(run_messages(net, engine, [(0, 0, 1, 4 * MiB), (50_001, 2, 3, 1000), (50_001, 3, 2, 1000)]))
    assert got[1] - 50_001 == alone and got[2] - 50_001 == alone  # disjoint ports: as if alone
    assert got[0] > got[1]


def coll_trace(tmp_path, npus, size, comm_type=T.ALL_REDUCE):
    prefix = tmp_path / "ar"
    node = make_node(1, "c", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": comm_type, "comm_size": size})
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [node])
    return str(prefix)


def test_all_reduce_within_25_percent_of_flow(glue, tmp_path):
    """One switch, 8 NPUs, 400 Gbps links of 500 ns: the same topology for both tiers."""
    prefix = coll_trace(tmp_path, 8, MiB)
    system = write_system_config(tmp_path / "sys.json")
    ns3 = simulate(prefix, system, str(CFG), network_backend="ns3",
                   options={"logical_topology_configuration": str(DATA / "logical_topology.json")})
    yml = write_network_config(tmp_path / "net.yml", ("Switch",), (8,), (400e9 / 8 / (1 << 30),), (500.0,))
    flow = simulate(prefix, system, yml, network_backend="flow")
    ns3_ns, flow_ns = ns3.ranks[0].finish_ns, flow.ranks[0].finish_ns
    assert abs(ns3_ns - flow_ns) <= 0.25 * flow_ns, (ns3_ns, flow_ns)
    stats = ns3.network_stats
    assert stats["backend"] == "ns3" and stats["messages"] == flow.network_stats["messages"]
    assert stats["flow_completion"]["count"] == stats["messages"] and stats["packets_sent"] > 0
    assert all(row["bytes"] > 0 for row in stats["links"]) and len(stats["links"]) == 16
    assert ns3.settings["network"]["backend"] == "ns3"


def test_astra_sim_example_inputs_finish_every_rank(glue, tmp_path, capsys):
    prefix = coll_trace(tmp_path, 8, MiB)
    system = write_system_config(tmp_path / "sys.json")
    fct = tmp_path / "fct.txt"
    report = tmp_path / "report.json"
    code = main(["run", "--workload-configuration", prefix, "--system-configuration", system,
                 "--network-configuration", str(CFG), "--network-backend", "ns3",
                 "--logical-topology-configuration", str(DATA / "logical_topology.json"),
                 "--astra-sim-log", "--ns3-fct-file", str(fct), "--report-json", str(report),
                 "--timeline", str(tmp_path / "timeline.json")])
    out = capsys.readouterr()
    assert code == 0, out.err
    for rank in range(8):
        assert f"sys[{rank}] finished" in out.out
    assert "keys not modelled by the ns3 backend (ignored): USE_DYNAMIC_PFC_THRESHOLD" in out.err + out.out
    rows = [line.split() for line in fct.read_text().splitlines()]
    data = json.loads(report.read_text())
    assert len(rows) == data["network_stats"]["messages"] and all(len(r) == 8 for r in rows)
    for sip, dip, sport, dport, size, start, fct_ns, standalone in rows:
        assert int(sip, 16) >> 24 == 10 and int(fct_ns) >= int(standalone) > 0
    timeline = json.loads((tmp_path / "timeline.json").read_text())
    names = json.dumps(timeline)
    assert "npu 0 -> switch 8" in names  # the flows appear on their links
    use = data["network_stats"]["link_utilisation"]
    assert len(use["links"]) == 16  # every port of the star carried the ring's packets
    busiest = max(max(link["utilisation"]) for link in use["links"])
    assert 0.3 < busiest <= 1.0


def test_the_shipped_cc_mode_12_is_refused_before_ns3_starts(tmp_path, capsys):
    cfg = tmp_path / "cfg.txt"
    cfg.write_text(CFG.read_text().replace("CC_MODE 8", "CC_MODE 12")
                   .replace(REF_TOPO, str(TOPO)))
    prefix = coll_trace(tmp_path, 8, MiB)
    code = main(["run", "--workload-configuration", prefix, "--system-configuration",
                 write_system_config(tmp_path / "sys.json"), "--network-configuration", str(cfg),
                 "--network-backend", "ns3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1
    assert "CC_MODE 12" in err[0] and "supported modes: 0 = plain TCP" in err[0] and "8 = DCTCP" in err[0]


def test_an_unwritable_fct_file_folder_is_refused_before_ns3_starts(tmp_path, capsys, monkeypatch):
    """--ns3-fct-file under a regular file (a folder that cannot be made, even for root): one line naming the flag
    and the path, before ns-3 is loaded (which would take seconds, then the whole packet-level run)."""
    import astra_network_ns3.backend as backend

    def refused():
        raise AssertionError("ns-3 was loaded before --ns3-fct-file's folder was checked")

    monkeypatch.setattr(backend, "load_glue", refused)
    cfg = tmp_path / "cfg.txt"
    cfg.write_text(CFG.read_text().replace(REF_TOPO, str(TOPO)))
    (tmp_path / "blocker").write_text("a file, not a folder")
    fct = tmp_path / "blocker" / "sub" / "fct.txt"
    code = main(["run", "--workload-configuration", coll_trace(tmp_path, 8, MiB), "--system-configuration",
                 write_system_config(tmp_path / "sys.json"), "--network-configuration", str(cfg),
                 "--network-backend", "ns3", "--ns3-fct-file", str(fct), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"astra: error: --ns3-fct-file {fct}: cannot create the output folder"), err
    assert (tmp_path / "blocker").read_text() == "a file, not a folder"


def test_a_full_disk_at_the_fct_write_is_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch):
    """The late write goes through the kernel's atomic writer: ENOSPC is a ConfigError naming the flag, and the
    folder holds neither the file nor a part of it."""
    import errno
    import os

    import astra_sim.safeio as safeio
    from astra_network_ns3.backend import Ns3Network

    real = safeio.atomic_output

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(data[:10])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    import contextlib

    @contextlib.contextmanager
    def full(path):
        with real(path) as handle:
            yield Full(handle)

    monkeypatch.setattr(safeio, "atomic_output", full)
    net = Ns3Network.__new__(Ns3Network)  # write_fct reads only the recorded flows (none here)
    net._fcts = []
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=rf"^astra run: could not write --ns3-fct-file {out}/fct.txt "
                                          r"\(No space left on device\); kept it as "):
        net.write_fct(str(out / "fct.txt"))
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("edit,expected", [
    (("TOPOLOGY_FILE topo.txt", "TOPOLOGY_FILE missing.txt"), "cfg.txt:4: TOPOLOGY_FILE"),
    (("8 7 400Gbps", "8 9 400Gbps"), "topo.txt:10: link to unknown node 9"),
    (("8 3 400Gbps", "8 3 400"), "topo.txt:6: rate: rate '400' has no unit"),
])
def test_cli_input_errors_are_one_line(tmp_path, capsys, edit, expected):
    topo = TOPO.read_text()
    cfg = CFG.read_text().replace(REF_TOPO, "topo.txt")
    old, new = edit
    topo = topo.replace(old, new)
    cfg = cfg.replace(old, new)
    (tmp_path / "topo.txt").write_text(topo)
    (tmp_path / "cfg.txt").write_text(cfg)
    prefix = coll_trace(tmp_path, 8, MiB)
    code = main(["run", "--workload-configuration", prefix, "--system-configuration",
                 write_system_config(tmp_path / "sys.json"), "--network-configuration", str(tmp_path / "cfg.txt"),
                 "--network-backend", "ns3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and expected in err[0], err


def test_cli_logical_dims_must_match_the_npus(tmp_path, capsys):
    logical = tmp_path / "logical.json"
    logical.write_text('{"logical-dims": ["4", "4"]}')
    prefix = coll_trace(tmp_path, 8, MiB)
    code = main(["run", "--workload-configuration", prefix, "--system-configuration",
                 write_system_config(tmp_path / "sys.json"), "--network-configuration",
                 str(CFG), "--network-backend", "ns3",
                 "--logical-topology-configuration", str(logical)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1
    assert f"{logical}:1: logical-dims [4, 4] multiply to 16 but the topology has 8 NPUs" in err[0]


def test_missing_ecn_rate_is_an_error_naming_the_link(tmp_path):  # before ns-3 is imported
    cfg = star(tmp_path, 2, rate="25Gbps")
    with pytest.raises(ConfigError, match=r"KMIN_MAP, KMAX_MAP, PMAX_MAP has no entry for 25000000000 bit/s"):
        network(cfg)


def test_two_dimensional_logical_topology_on_two_switches(glue, tmp_path):
    """8 NPUs behind two switches (4 each), logical dims [4, 2]: a 2-D all-reduce finishes on every rank."""
    links = [(8, h, "100Gbps", "1us") for h in range(4)] + [(9, h, "100Gbps", "1us") for h in range(4, 8)]
    links.append((8, 9, "400Gbps", "1us"))
    cfg = write_inputs(tmp_path, 8, [8, 9], links)
    logical = tmp_path / "logical.json"
    logical.write_text('{"logical-dims": ["4", "2"]}')
    prefix = coll_trace(tmp_path, 8, MiB)
    report = simulate(prefix, write_system_config(tmp_path / "sys.json", dims=2), cfg, network_backend="ns3",
                      options={"logical_topology_configuration": str(logical)})
    assert len({r.finish_ns for r in report.ranks}) >= 1 and all(r.finish_ns > 0 for r in report.ranks)
    uplink = next(row for row in report.network_stats["links"] if (row["src"], row["dst"]) == (8, 9))
    assert uplink["bytes"] > 0


def test_in_switch_runs_on_a_one_switch_dimension(glue, tmp_path):
    """ASTRA-sim's example (8 NPUs on one switch): ``inSwitch`` sends its messages through ns-3 and beats the ring."""
    prefix = coll_trace(tmp_path, 8, MiB)
    cfg = str(CFG)
    ring = simulate(prefix, write_system_config(tmp_path / "ring.json"), cfg, network_backend="ns3")
    switch = simulate(prefix, write_system_config(tmp_path / "insw.json", algorithm="inSwitch"), cfg,
                      network_backend="ns3")
    assert 0 < switch.ranks[0].finish_ns < ring.ranks[0].finish_ns
    assert switch.network_stats["messages"] > 0 and switch.network_stats["packets_sent"] > 0


def test_in_switch_is_refused_where_a_dimension_spans_two_switches(glue, tmp_path):
    from astra_network_ns3.backend import Ns3Network

    links = [(4, h, "100Gbps", "1us") for h in range(2)] + [(5, h, "100Gbps", "1us") for h in range(2, 4)]
    links.append((4, 5, "100Gbps", "1us"))
    cfg = write_inputs(tmp_path, 4, [4, 5], links)
    config = read_network_cfg(cfg)
    topology = read_config_topology(config)
    one = Ns3Network(config, topology, [4], EventEngine(), warn=lambda _: None)
    assert one.in_switch(0) is None  # NPUs 0-1 and 2-3 sit on different switches
    two = Ns3Network(config, topology, [2, 2], EventEngine(), warn=lambda _: None)
    spec = two.in_switch(0)  # groups {0, 1} and {2, 3}: each on its own switch
    assert spec.can_reduce and spec.line_rate == 12.5 and spec.link_latency_ns == 1000.0
    assert two.in_switch(1) is None  # groups {0, 2} and {1, 3} cross the switches


def test_docs_incast_example_is_what_the_example_gives(glue, tmp_path, capsys):
    """docs/ns3.md's worked incast example: its fct.txt block is the run's, line for line."""
    import runpy
    import sys

    root = Path(__file__).resolve().parents[3]
    folder = tmp_path / "incast"
    argv = sys.argv
    sys.argv = ["make_incast.py", str(folder)]
    try:
        runpy.run_path(str(root / "examples" / "ns3" / "make_incast.py"), run_name="__main__")
    finally:
        sys.argv = argv
    code = main(["run", "--workload-configuration", str(folder / "incast"), "--system-configuration",
                 str(root / "examples" / "ns3" / "system.json"), "--network-configuration",
                 str(folder / "network_cfg.txt"), "--network-backend", "ns3", "--ns3-fct-file",
                 str(folder / "fct.txt"), "-q"])
    assert code == 0, capsys.readouterr().err
    docs = (root / "docs" / "ns3.md").read_text()
    block = docs[docs.index("```text\n", docs.index("## A worked incast example")) + 8:]
    block = block[:block.index("```")]
    assert (folder / "fct.txt").read_text() == block


def test_ecmp_spreads_connections_over_equal_cost_paths(glue, tmp_path):
    """Two leaves (8, 9) and two spines (10, 11): connections NPU i -> i + 4 take both spines, each one path."""
    links = [(8, h, "100Gbps", "1us") for h in range(4)] + [(9, h, "100Gbps", "1us") for h in range(4, 8)]
    links += [(leaf, spine, "100Gbps", "1us") for leaf in (8, 9) for spine in (10, 11)]
    net, engine = network(write_inputs(tmp_path, 8, [8, 9, 10, 11], links))
    got = run_messages(net, engine, [(0, i, i + 4, MiB) for i in range(4)])
    assert len(got) == 4
    stats = net.stats()
    up = {row["dst"]: row["bytes"] for row in stats["links"] if row["src"] == 8 and row["dst"] in (10, 11)}
    assert len(up) == 2 and min(up.values()) >= MiB  # both spines carry whole connections
    assert stats["drops"] == 0


def test_ring_topology_without_switches(glue, tmp_path):
    """ASTRA-sim's ring topology file shape (no switches, NPU-NPU links): neighbours talk; others have no route."""
    from astra_sim.errors import SimulationError

    (tmp_path / "topo.txt").write_text("4 0 4\n\n" + "".join(f"{i} {(i + 1) % 4} 25Gbps 0.005ms 0\n" for i in range(4)))
    cfg = tmp_path / "cfg.txt"
    cfg.write_text("TOPOLOGY_FILE topo.txt\nCC_MODE 0\n")
    net, engine = network(str(cfg))
    got = run_messages(net, engine, [(0, 0, 1, 100_000), (0, 3, 0, 100_000)])
    assert sorted(i for i, _ in got) == [0, 1]
    with pytest.raises(SimulationError, match="no route from NPU 0 to NPU 2"):
        net.send(0, 2, 1000, lambda _: None, None)


def test_astra_sim_example_with_dcqcn(glue, tmp_path):
    """The example inputs with CC_MODE 1 (their DCQCN parameters used): every rank finishes, close to flow."""
    cfg = tmp_path / "cfg.txt"
    cfg.write_text(CFG.read_text().replace("CC_MODE 8", "CC_MODE 1")
                   .replace(REF_TOPO, str(TOPO)))
    prefix = coll_trace(tmp_path, 8, MiB)
    system = write_system_config(tmp_path / "sys.json")
    report = simulate(prefix, system, str(cfg), network_backend="ns3")
    yml = write_network_config(tmp_path / "net.yml", ("Switch",), (8,), (400e9 / 8 / (1 << 30),), (500.0,))
    flow = simulate(prefix, system, yml, network_backend="flow")
    assert len(report.ranks) == 8 and all(r.finish_ns > 0 for r in report.ranks)
    assert abs(report.ranks[0].finish_ns - flow.ranks[0].finish_ns) <= 0.25 * flow.ranks[0].finish_ns
    assert report.settings["network"]["congestion_control"].startswith("DCQCN")


def test_simulator_stop_time_stops_with_an_error(glue, tmp_path):
    from astra_sim.errors import SimulationError

    net, engine = network(star(tmp_path, 2, extra="SIMULATOR_STOP_TIME 0.0001\n"))  # 100 us
    with pytest.raises(SimulationError, match=r"SIMULATOR_STOP_TIME \(0.0001 s\) reached with 1 message"):
        run_messages(net, engine, [(0, 0, 1, 16 * MiB)])


def test_warnings_name_what_is_not_modelled(glue, tmp_path):
    warnings = []
    cfg = star(tmp_path, 2, extra="HAS_WIN 1\nRATE_AI 50Mb/s\nERROR_RATE_PER_LINK 0.01\n")
    Path(cfg).write_text(Path(cfg).read_text().replace("ENABLE_QCN 1", "ENABLE_QCN 0"))
    network(cfg, warn=warnings)
    text = "\n".join(warnings)
    assert "keys not modelled by the ns3 backend (ignored): HAS_WIN, RATE_AI" in text  # RATE_AI: DCQCN's, not DCTCP's
    assert "link error rates are not modelled" in text
    assert "ENABLE_QCN 0: switches do not mark ECN, so DCTCP sees no marks" in text


def test_same_key_receives_complete_in_fifo_order(glue, tmp_path):
    """The reference's rt_ns3_recv_queue case: three sends of one (src, tag) outstanding at once, two receives
    posted before the data and one after it has arrived; every receive completes, in order."""
    cfg = star(tmp_path, 2)
    attrs = {"is_cpu_op": False, "comm_src": 0, "comm_dst": 1, "comm_size": 256 * 1024, "comm_tag": 9}
    sends = [make_node(i, f"send{i}", T.COMM_SEND_NODE, attrs=attrs) for i in range(1, 4)]
    recvs = [make_node(1, "recv1", T.COMM_RECV_NODE, attrs=attrs), make_node(2, "recv2", T.COMM_RECV_NODE, attrs=attrs),
             make_node(3, "wait", T.COMP_NODE, duration_micros=200),
             make_node(4, "recv3", T.COMM_RECV_NODE, data_deps=[3], attrs=attrs)]
    prefix = tmp_path / "p2p"
    write_et(f"{prefix}.0.et", make_metadata(), sends)
    write_et(f"{prefix}.1.et", make_metadata(), recvs)
    fct = tmp_path / "fct.txt"
    report = simulate(str(prefix), write_system_config(tmp_path / "sys.json"), cfg, network_backend="ns3",
                      options={"ns3_fct_file": str(fct)})
    assert all(r.finish_ns > 0 for r in report.ranks)
    rows = [line.split() for line in fct.read_text().splitlines()]  # in completion order
    ends = [int(row[5]) + int(row[6]) for row in rows]
    assert len(rows) == 3 and ends == sorted(ends) and len(set(ends)) == 3
    assert report.ranks[1].finish_ns >= 200_000  # the late receive completed once posted, after the wait


@pytest.mark.slow
def test_a_failed_link_reroutes_over_the_remaining_capacity(glue, tmp_path):
    """Hosts 0 and 1: a short path through switch 2 at 100 Gb/s and a detour through switches 3 and 4 whose middle
    link runs at 25 Gb/s. With the cable 2-1 down the message takes the detour: exactly as on a topology without
    that cable, and about four times as long (a quarter of the capacity)."""
    from astra_network_ns3.backend import Ns3Network

    links = [(0, 2, "100Gbps", "1us"), (2, 1, "100Gbps", "1us"), (0, 3, "100Gbps", "1us"),
             (3, 4, "25Gbps", "1us"), (4, 1, "100Gbps", "1us")]

    def took(folder, links, failed=None):
        folder.mkdir()
        config = read_network_cfg(write_inputs(folder, 2, [2, 3, 4], links, cc_mode=0))  # plain TCP: no ECN maps
        engine = EventEngine()
        net = Ns3Network(config, read_config_topology(config), [2], engine, warn=lambda _m: None,
                         failed_links=failed)
        (index, end), = run_messages(net, engine, [(0, 0, 1, 4 * MiB)])
        return end, net

    intact, _ = took(tmp_path / "intact", links)
    rerouted, net = took(tmp_path / "failed", links, [[1, 2]])
    without, _ = took(tmp_path / "without", [link for link in links if link[:2] != (2, 1)])
    assert rerouted == without
    assert 3.6 < rerouted / intact < 4.4
    assert net.describe()["failed_links"] == [[1, 2]]
    assert {(row["src"], row["dst"]) for row in net.stats()["links"] if row["bytes"] > MiB} == {(0, 3), (3, 4), (4, 1)}


@pytest.mark.slow
def test_a_link_down_mid_transfer_reroutes_and_tcp_resends_what_it_lost(glue, tmp_path):
    """The two-path topology above: 4 MiB from host 0 to host 1 over the short 100 Gb/s path, whose cable 2-1 goes
    down at 150 us (ns-3's LINK_DOWN: both interfaces down, routes computed again). The packets on the cable and
    those queued towards it are lost; TCP resends them over the 25 Gb/s detour. The message ends after the intact
    transfer and before the one without the cable from the start, no sooner than the bytes the cable had not
    carried take at the detour's rate, and within 25 % of that (TCP's recovery). network_cfg.txt's LINK_DOWN does
    the same. A cable whose loss leaves no route is one clear error naming it, not a hang."""
    from astra_sim.errors import SimulationError
    from astra_network_ns3.backend import HEADER_BYTES, Ns3Network

    links = [(0, 2, "100Gbps", "1us"), (2, 1, "100Gbps", "1us"), (0, 3, "100Gbps", "1us"),
             (3, 4, "25Gbps", "1us"), (4, 1, "100Gbps", "1us")]

    def took(name, links, failed=None, failures=None, extra="", start=0):
        folder = tmp_path / name
        folder.mkdir()
        config = read_network_cfg(write_inputs(folder, 2, [2, 3, 4], links, cc_mode=0, extra=extra))
        engine = EventEngine()
        net = Ns3Network(config, read_config_topology(config), [2], engine, warn=lambda _m: None,
                         failed_links=failed, failures=failures)
        (_index, end), = run_messages(net, engine, [(start, 0, 1, 4 * MiB)])
        return end - start, net

    at = 150_000
    intact, _ = took("intact", links)
    from_start, _ = took("from_start", links, failed=[[2, 1]])
    mid, net = took("mid", links, failures=[{"link": [1, 2], "at_ns": at}])
    assert intact < mid < from_start
    stats = net.stats()
    carried = {(row["src"], row["dst"]): row["bytes"] for row in stats["links"]}
    wire = carried[(0, 3)] + carried[(2, 1)]  # every data byte crossed one of the two paths (resent ones too)
    bound = at + (4 * MiB * (1 + HEADER_BYTES / 1000) - carried[(2, 1)]) * 8 / 25  # bits at 25 bits/ns
    assert bound <= mid < 1.25 * bound and wire > 4 * MiB
    failure, = stats["link_failures"]
    assert failure["link"] == [2, 1] and failure["at_ns"] == at and failure["packets_lost"] > 0
    assert net.describe()["link_failures"] == [{"link": [2, 1], "at_ns": at}]
    # network_cfg.txt's LINK_DOWN 150 2 1: at 2 s + 150 us, as ASTRA-sim's ns-3 books it; a message sent at 2 s
    assert took("key", links, extra="LINK_DOWN 150 2 1\n", start=2_000_000_000)[0] == mid
    with pytest.raises(SimulationError, match="link 2-1 went down at 100000 ns and left no route from NPU 0 to NPU 1"):
        took("cut", links[:2], failures=[{"link": [2, 1], "at_ns": 100_000}])
