"""A failed link reroutes: the step slows as the capacity left predicts, and an unknown link is a clear error."""

import pytest

from astra_sim.errors import ConfigError

from astra_cluster import run_cluster

RING4 = """topology: [ Ring ]
npus_count: [ 4 ]
bandwidth: [ {bw} ]
latency: [ 500.0 ]
"""
#: one job on GPUs 0 and 2 of a 4-GPU ring: two equal paths between them (0-1-2 and 0-3-2), each message split
#: over both (flow_ecmp: split)
SPEC = """
system: sys.json
network: {net}
gpus_per_node: 1
network_backend: {backend}
run: {run}
placement: fixed
{failed}
jobs:
  - {{name: a, gpus: 2, place: [0, 2], workload: {{micro: {{collective: all_reduce, size: 64MiB}}}}}}
"""


def spec_text(net, failed, backend="flow", template=SPEC):
    return template.format(net=net, failed=failed, backend=backend,
                           run="{flow_ecmp: split}" if backend == "flow" else "{}")


@pytest.fixture
def step_of(ring, write_spec):
    (ring / "ring4.yml").write_text(RING4.format(bw=50.0))
    (ring / "ring4_half.yml").write_text(RING4.format(bw=25.0))

    def step(net="ring4.yml", failed="", backend="flow"):
        report = run_cluster(write_spec(ring, spec_text(net, failed, backend)))
        return report["corun"]["jobs"][0]["alone_step_ns"], report

    return step


def test_a_failed_cable_on_analytical_lowers_the_ring_dimension_bandwidth(step_of):
    """analytical cannot route: the ring's NPUs 0 and 1 keep one of their two links, so the dimension runs at half
    its bandwidth, and the step is exactly the step on the ring of half the bandwidth (as flow gives here)."""
    intact, _ = step_of(backend="analytical")
    failed, report = step_of(failed="failed_links: [[npu0, npu1]]", backend="analytical")
    assert failed == step_of(net="ring4_half.yml", backend="analytical")[0]
    assert 1.9 < failed / intact < 2.0
    assert report["cluster"]["failed_links"] == [["npu0", "npu1"]]
    with pytest.raises(ConfigError, match="key 'failed_links': no link joins 'npu0' and 'npu2'"):
        step_of(failed="failed_links: [[npu0, npu2]]", backend="analytical")


def test_one_of_two_paths_down_is_half_the_capacity(step_of):
    """With the cable npu0-npu1 down, 0 and 2 talk over 0-3-2 only: the same hops, half the capacity, so the step is
    exactly the step on the intact ring with links of half the bandwidth."""
    intact, _ = step_of()
    failed, report = step_of(failed="failed_links: [[npu0, npu1]]")
    half, _ = step_of(net="ring4_half.yml")
    assert failed == half
    assert 1.9 < failed / intact < 2.0  # the transfer doubles; latency and compute do not
    assert report["cluster"]["failed_links"] == [["npu0", "npu1"]]
    # the other way round (npu3-npu2) is the same by symmetry
    assert step_of(failed="failed_links: [[npu3, npu2]]")[0] == half


def test_both_paths_down_is_an_error_not_a_hang(step_of):
    with pytest.raises(ConfigError, match="no path from 'npu0' to 'npu2'"):  # 0-1 and 2-3 down: 0 and 2 are cut off
        step_of(failed="failed_links: [[npu0, npu1], [npu2, npu3]]")


def test_unknown_link_is_one_line_naming_the_key(step_of):
    with pytest.raises(ConfigError) as info:
        step_of(failed="failed_links: [[npu0, npu2]]")
    message = str(info.value)
    assert "cluster.yaml: key 'failed_links': no link joins 'npu0' and 'npu2'" in message and "\n" not in message


@pytest.mark.parametrize("value, expected", [
    ("[npu0, npu1]", "a list of cables"), ("[[npu0]]", "a list of cables"), ("[[npu0, true]]", "a list of cables"),
    ("{a: b}", "a list of cables")])
def test_bad_failed_links_values(ring, write_spec, value, expected):
    from astra_cluster.spec import load_cluster_spec

    with pytest.raises(ConfigError, match=expected):
        load_cluster_spec(write_spec(ring, spec_text("net.yml", f"failed_links: {value}")))


def test_failed_links_are_refused_on_congestion(ring, write_spec):
    from astra_cluster.spec import load_cluster_spec

    text = spec_text("net.yml", "failed_links: [[npu0, npu1]]", "congestion")
    with pytest.raises(ConfigError, match="key 'failed_links': cables fail on the analytical, flow, ns3 backends"):
        load_cluster_spec(write_spec(ring, text))


TIMED = SPEC.replace("placement: fixed\n{failed}\n", "placement: fixed\ncorun: false\nhorizon_h: 1\n{failed}\n")


@pytest.mark.parametrize("backend", ["flow", "analytical"])
def test_a_cable_down_mid_run_reroutes_the_rest_of_the_run(step_of, ring, write_spec, backend):
    """The job runs 100 steps; the cable npu0-npu1 goes down after 40 of them and comes back 30 steps later (at the
    slower step): 40 + 30 steps at the step of half the capacity + 30 intact. No job stops, no work is lost (on
    analytical the ring dimension runs at half its bandwidth meanwhile)."""
    intact, _ = step_of(backend=backend)
    half, _ = step_of(failed="failed_links: [[npu0, npu1]]", backend=backend)
    at_ns, down_ns = 40 * intact, 30 * half
    events = ("failures: {events: [{at_h: %r, link: [npu0, npu1], for_h: %r}]}"
              % (at_ns / 3.6e12, down_ns / 3.6e12))
    text = spec_text("ring4.yml", events, backend, TIMED).replace("gpus: 2,", "gpus: 2, steps: 100,")
    t = run_cluster(write_spec(ring, text))["timeline"]
    row = t["jobs"][0]
    assert row["completion_ns"] == pytest.approx(70 * intact + 30 * half, abs=3)
    assert row["failures"] == 0 and row["lost_ns"] == 0 and row["useful_steps"] == 100
    assert [change["step_ns"] for change in row["step_changes"]] == [half, intact]
    assert t["failures"] == 1 and [e["down"] for e in t["cable_events"]] == [True, False]
    assert row["goodput"] == pytest.approx(100 * row["reference_step_ns"] / row["completion_ns"], rel=1e-12)


def test_a_cable_event_needs_a_backend_with_cables_and_a_known_cable(ring, write_spec):
    from astra_cluster.spec import load_cluster_spec

    (ring / "ring4.yml").write_text(RING4.format(bw=50.0))
    text = spec_text("ring4.yml", "failures: {events: [{at_h: 0.1, link: [npu0, npu1]}]}", template=TIMED)
    with pytest.raises(ConfigError, match="a cable .* fails on the analytical, flow, ns3 backends only"):
        load_cluster_spec(write_spec(ring, text.replace("network_backend: flow", "network_backend: congestion")))
    with pytest.raises(ConfigError, match=r"key 'failures.events\[0\]' must be"):
        load_cluster_spec(write_spec(ring, text.replace("link: [npu0, npu1]", "link: [npu0, npu1], node: 1")))
    bad = text.replace("[npu0, npu1]", "[npu0, npu2]")
    with pytest.raises(ConfigError, match="key 'failures.events': no link joins 'npu0' and 'npu2'"):
        run_cluster(write_spec(ring, bad))


#: the ns3 glue's TCP minimum retransmission timeout (astra_network_ns3.backend's _MIN_RTO_US, 1000 us)
MIN_RTO_NS = 1_000_000
NS3_CFG = ("TOPOLOGY_FILE topo.txt\nPACKET_PAYLOAD_SIZE 1000\nCC_MODE 0\nENABLE_QCN 0\nBUFFER_SIZE 32\n")
#: hosts 0 and 1; a short path through switch 2 at 100 Gb/s and a detour through switches 3 and 4 at 25 Gb/s
NS3_LINKS = [(0, 2, "100Gbps"), (2, 1, "100Gbps"), (0, 3, "100Gbps"), (3, 4, "25Gbps"), (4, 1, "100Gbps")]


@pytest.mark.slow
def test_a_failed_cable_on_ns3_through_the_cluster(ring, write_spec):
    """The ns3 backend leaves the cable out of the ns-3 world: the job's step is the step on a topology without it,
    about four times the intact one (a quarter of the capacity); an unknown cable is one line naming the key. A
    cable that fails a third of the way into the second of 3 steps goes down there in ns-3 (LINK_DOWN): that step
    takes longer than the intact one (TCP resends what the cable lost), and the third runs without it."""
    pytest.importorskip("ns3")
    tmp_path = ring  # its sys.json: ring collectives

    def step(name, links, failed="", steps=1):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "cfg.txt").write_text(NS3_CFG)
        (folder / "topo.txt").write_text("5 3 %d\n2 3 4\n" % len(links)
                                         + "".join(f"{a} {b} {rate} 1us 0\n" for a, b, rate in links))
        spec = write_spec(folder, f"""
system: {tmp_path}/sys.json
network: cfg.txt
gpus: 2
network_backend: ns3
placement: fixed
{failed}
jobs:
  - {{name: a, gpus: 2, steps: {steps}, place: [0, 1], workload: {{micro: {{collective: all_reduce, size: 4MiB}}}}}}
""")
        report = run_cluster(spec)
        return report["timeline"] if "timeline" in report else report["corun"]["jobs"][0]["alone_step_ns"]

    intact = step("intact", NS3_LINKS)
    rerouted = step("failed", NS3_LINKS, "failed_links: [[2, 1]]")
    assert rerouted == step("without", [link for link in NS3_LINKS if link[:2] != (2, 1)])
    assert 3 < rerouted / intact < 4.4
    with pytest.raises(ConfigError, match="key 'failed_links': no link joins nodes 0 and 1"):
        step("unknown", NS3_LINKS, "failed_links: [[0, 1]]")
    at_ns = intact + intact // 3
    timeline = step("mid", NS3_LINKS, "corun: false\nhorizon_h: 1\nfailures: {events: [{at_h: %r, link: [2, 1]}]}"
                    % (at_ns / 3.6e12), steps=3)
    row = timeline["jobs"][0]
    change, = row["step_changes"]
    assert change["step_ns"] == rerouted and abs(change["offset_ns"] - intact // 3) <= 1
    # TCP resends the packets lost on the cable and queued towards it (switch 2 is a dead end once 2-1 is down); with
    # hundreds lost it waits out a retransmission timeout, so this step can take longer than the step without the
    # cable from the start: no longer than the offset, that whole step and one minimum RTO (1 ms, the glue's) more
    failed = change["failed_step_ns"]
    # (measured: intact 388,461 ns, without the cable 1,476,542 ns, failed at 129,487 ns into the step: 2,276,062 ns)
    assert intact < failed < change["offset_ns"] + rerouted + MIN_RTO_NS
    assert row["completion_ns"] == pytest.approx(intact + change["failed_step_ns"] + rerouted, abs=3)


def test_a_cable_down_inside_a_step_fails_at_its_offset_there_on_flow(step_of, ring, write_spec, astra_exe):
    """`astra cluster` end to end: the cable npu0-npu1 goes down half-way through step 41 of 100 and stays down. On
    flow that step is simulated with the cable failing 'offset' ns into it (the backend's link_failures): it takes
    longer than the intact step and less than the step without the cable, as the capacity left predicts; the 59
    steps after it run without the cable. That step is a distinct step of its own."""
    import json
    import subprocess

    intact, _ = step_of()
    half, _ = step_of(failed="failed_links: [[npu0, npu1]]")
    at_ns = 40 * intact + intact // 2
    events = "failures: {events: [{at_h: %r, link: [npu0, npu1]}]}" % (at_ns / 3.6e12)
    text = spec_text("ring4.yml", events, "flow", TIMED).replace("gpus: 2,", "gpus: 2, steps: 100,")
    done = subprocess.run([astra_exe, "cluster", write_spec(ring, text), "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    row = report["timeline"]["jobs"][0]
    change, = row["step_changes"]
    offset, failed = change["offset_ns"], change["failed_step_ns"]
    assert abs(offset - intact // 2) <= 1 and change["step_ns"] == half and change["at_ns"] == at_ns
    assert intact < failed < half
    # what the remaining capacity predicts: the part of the step before the offset at the intact pace, the rest
    # (intact - offset of it) at the pace of the step without the cable (measured: 955,256 ns, to the ns)
    assert failed == pytest.approx(offset + (intact - offset) * half / intact, abs=2)
    assert row["completion_ns"] == pytest.approx(40 * intact + failed + 59 * half, abs=3)
    assert row["failures"] == 0 and row["lost_ns"] == 0 and row["useful_steps"] == 100
    # on GPUs 0 and 2: intact, without the cable and the step it failed in; and the reference (packed: 0 and 1)
    assert report["distinct_steps_simulated"] == 4
