"""The ``inSwitch`` collective algorithm (issue 26): the switch of a Switch dimension reduces.

Model (docs/collectives.md): per chunk ``c`` and phase, endpoint delay, one message of ``m`` bytes
through the switch (``2 L + m / B`` on the analytical backend), a barrier of the switch's members, the
switch's ``latency + max(0, r / rate - m / B)``, endpoint delay.
"""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import system_config

GIB = 1 << 30
BW = 100.0  # GB/s (x 2^30 / 1e9 bytes per ns, the network YAML's unit)
LAT = 500.0
E = 10  # endpoint-delay


def line_rate(gbps=BW):
    return gbps * GIB / 1e9


def run(tmp_path, impl, size, npus=(8,), topology=None, bandwidth=None, extra="", comm=T.ALL_REDUCE,
        backend="analytical", fold=False, groups=None, **system):
    topology = topology or ["Switch"] * len(npus)
    bandwidth = bandwidth or [BW] * len(npus)
    net = tmp_path / "net.yml"
    net.write_text(f"topology: {list(topology)}\nnpus_count: {list(npus)}\nbandwidth: {list(bandwidth)}\n"
                   f"latency: {[LAT] * len(npus)}\n{extra}")
    # a fast local memory: the ring's NPU-side reductions then cost (almost) nothing, as in the formula
    system.setdefault("local_mem_bw", 1_000_000)
    config = system_config(dims=len(npus), **system)
    for key in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all"):
        config[f"{key}-implementation"] = list(impl)
    sys_path = tmp_path / "sys.json"
    sys_path.write_text(json.dumps(config))
    total = 1
    for count in npus:
        total *= count
    attrs = {"is_cpu_op": False, "comm_type": comm, "comm_size": size}
    group_path = None
    if groups is not None:  # {id: [npus]}: every NPU runs the collective on its own group
        group_path = tmp_path / "groups.json"
        group_path.write_text(json.dumps({str(k): v for k, v in groups.items()}))
    for rank in range(total):
        node_attrs = dict(attrs)
        if groups is not None:
            node_attrs["pg_name"] = str(next(k for k, v in groups.items() if rank in v))
        write_et(f"{tmp_path}/w.{rank}.et", make_metadata(), [make_node(1, "c", T.COMM_COLL_NODE, attrs=node_attrs)])
    report = simulate(f"{tmp_path}/w", str(sys_path), str(net), fold=fold, network_backend=backend,
                      comm_groups=None if group_path is None else str(group_path))
    finish = [r.finish_ns for r in report.ranks]
    assert len(set(finish)) == 1
    return finish[0]


@pytest.mark.parametrize("n", [8, 64])
def test_all_reduce_takes_s_over_b_against_the_rings_2_n_minus_1_over_n(tmp_path, n):
    size = GIB
    ideal = size / line_rate()
    in_switch = run(tmp_path, ["inSwitch"], size, npus=(n,))
    ring = run(tmp_path, ["ring"], size, npus=(n,))
    assert in_switch == pytest.approx(ideal, rel=0.10)
    assert ring == pytest.approx(2 * (n - 1) / n * ideal, rel=0.10)
    # the exact closed form: 4 chunks, each E + (2 L + c / B) + E
    chunk = size // 4
    assert in_switch == 4 * (E + int(2 * LAT + chunk / line_rate()) + E)


def test_a_slower_reduction_rate_or_a_small_buffer_slows_it_down_as_the_model_says(tmp_path):
    size = GIB
    chunk = size // 4
    base = run(tmp_path, ["inSwitch"], size)
    half = run(tmp_path, ["inSwitch"], size, extra="switch_reduction_bandwidth: [50]\n")
    message = int(2 * LAT + chunk / line_rate())
    slower = int(chunk / line_rate(50) - chunk / line_rate())
    assert half == 4 * (E + message + slower + E)
    assert half / base == pytest.approx(2.0, rel=0.01)
    # 64 KiB buffer, 200 ns reduction latency: rate = 64 KiB / (2 x 500 + 200) ns
    buffered = run(tmp_path, ["inSwitch"], size,
                   extra="switch_reduction_buffer: [65536]\nswitch_reduction_latency: [200]\n")
    rate = 65536 / 1200
    assert buffered == 4 * (E + message + 200 + int(chunk / rate - chunk / line_rate()) + E)


def test_reduce_scatter_and_all_gather_are_the_reduction_and_the_multicast(tmp_path):
    size = GIB
    chunk = size // 4
    rs = run(tmp_path, ["inSwitch"], size, comm=T.REDUCE_SCATTER)
    assert rs == 4 * (E + int(2 * LAT + chunk / line_rate()) + E)  # c goes up
    ag = run(tmp_path, ["inSwitch"], size // 8, comm=T.ALL_GATHER)
    agc = size // 8 // 4
    assert ag == 4 * (E + int(2 * LAT + 7 * agc / line_rate()) + E)  # (n-1) c come down


def test_multi_dimensional_in_switch_composes_with_ring(tmp_path):
    # dim 0: a fast ring of 4 (8 B), dim 1: a switch of 8 (B, the bottleneck). localBWAware: RS on dim 0,
    # all-reduce of c / 4 on dim 1, AG on dim 0; 16 chunks keep the pipeline's fill small
    kw = dict(npus=(4, 8), topology=["Ring", "Switch"], bandwidth=[8 * BW, BW], preferred_dataset_splits=16)
    size = GIB
    ideal = size / line_rate()
    ring = run(tmp_path, ["ring", "ring"], size, **kw)
    mixed = run(tmp_path, ["ring", "inSwitch"], size, **kw)
    assert ring == pytest.approx(2 * 7 / 8 / 4 * ideal, rel=0.10)
    assert mixed == pytest.approx(1 / 4 * ideal, rel=0.10)
    assert ring / mixed == pytest.approx(2 * 7 / 8, rel=0.10)
    # baseline: AR of each chunk on dim 0 (ring), then of the whole chunk on dim 1 (c / B), pipelined
    baseline = run(tmp_path, ["ring", "inSwitch"], size, collective_optimization="baseline", **kw)
    assert baseline == pytest.approx(ideal, rel=0.10)


def test_a_group_in_one_switch_dimension_runs_that_dimensions_in_switch(tmp_path):
    """Communicator groups normally fall back to ring with a multi-dimensional list (the reference's
    rule); a group lying in one dimension whose listed algorithm is inSwitch runs inSwitch there."""
    kw = dict(npus=(4, 8), topology=["Ring", "Switch"], bandwidth=[8 * BW, BW],
              groups={1 + i: [i + 4 * k for k in range(8)] for i in range(4)})  # the 4 dim-1 groups
    size = GIB
    ideal = size / line_rate()
    in_switch = run(tmp_path, ["ring", "inSwitch"], size, **kw)
    ring = run(tmp_path, ["ring", "ring"], size, **kw)
    assert in_switch == pytest.approx(ideal, rel=0.10)
    assert ring == pytest.approx(2 * 7 / 8 * ideal, rel=0.10)
    # a group along the ring dimension keeps the reference's fallback (ring)
    along_ring = dict(kw, groups={1 + j: [4 * j + i for i in range(4)] for j in range(8)})
    assert run(tmp_path, ["ring", "inSwitch"], size, **along_ring) == run(tmp_path, ["ring", "ring"], size, **along_ring)


@pytest.mark.parametrize("impl,npus,topology", [
    (["inSwitch"], (8,), ["Switch"]),
    (["ring", "inSwitch"], (4, 8), ["Ring", "Switch"]),
    (["inSwitch", "inSwitch"], (8, 4), ["Switch", "Switch"]),
])
def test_folded_runs_give_the_unfolded_answer(tmp_path, monkeypatch, impl, npus, topology):
    """Folded, the switch waits only for the simulated members (the others are their mirror images)."""
    from astra_sim.simulation import Simulation

    seen = []
    real_run = Simulation.run

    def spy(self, *args, **kwargs):
        out = real_run(self, *args, **kwargs)
        seen.append(self.fold_info["simulated_ranks"])
        return out

    monkeypatch.setattr(Simulation, "run", spy)
    for comm in (T.ALL_REDUCE, T.REDUCE_SCATTER):
        unfolded = run(tmp_path, impl, 16 << 20, npus=npus, topology=topology, comm=comm)
        folded = run(tmp_path, impl, 16 << 20, npus=npus, topology=topology, comm=comm, fold=True)
        assert folded == unfolded
    assert seen[1] == 1 and seen[0] > 1


@pytest.mark.parametrize("backend", ["analytical", "congestion", "flow"])
@pytest.mark.parametrize("n", [8, 64])
def test_the_switch_streams_an_all_reduce_in_s_over_b_on_every_backend(tmp_path, backend, n):
    """Issue 41: the reduction and the multicast pipeline (as SHARP and NVLS do), so an all-reduce on one Switch
    dimension takes S / B on every backend; the congestion model's store-and-forward switch used to double it."""
    size = 256 << 20
    ideal = size / line_rate()
    in_switch = run(tmp_path, ["inSwitch"], size, npus=(n,), backend=backend)
    assert in_switch == pytest.approx(ideal, rel=0.10)
    # the ring sends 2 (n - 1) / n S (and its 2 (n - 1) steps' latencies), not streamed: the congestion model
    # still stores and forwards its messages at the switch
    ring = run(tmp_path, ["ring"], size, npus=(n,), backend=backend)
    hops = 2 if backend == "congestion" else 1
    assert ring / in_switch >= 0.9 * hops * 2 * (n - 1) / n


def test_on_the_congestion_backend_the_segments_pipeline_through_the_switch(tmp_path):
    """32 segments through two store-and-forward hops: one segment's time more than the cut-through S / B."""
    from astra_network_analytical.in_switch import STREAM_SEGMENTS

    size = 256 << 20
    chunk = size // 4
    segment = chunk // STREAM_SEGMENTS
    congestion = run(tmp_path, ["inSwitch"], size, backend="congestion")
    per_chunk = E + 2 * int(LAT + segment / line_rate()) + (STREAM_SEGMENTS - 1) * int(segment / line_rate()) + E
    assert congestion == 4 * per_chunk
    # the flow backend is cut-through already: no segments, the analytical closed form
    assert run(tmp_path, ["inSwitch"], size, backend="flow") == 4 * (E + int(2 * LAT + chunk / line_rate()) + E)


def test_segment_sizes_add_up_to_the_message():
    from hypothesis import given, strategies as st

    from astra_network_analytical.in_switch import segment_sizes

    @given(st.integers(1, 1 << 40), st.integers(1, 64))
    def check(size, segments):
        segments = min(segments, size)
        sizes = segment_sizes(size, segments)
        assert len(sizes) == segments and sum(sizes) == size and max(sizes) - min(sizes) <= 1 and min(sizes) > 0

    check()


def test_refused_where_there_is_no_reducing_switch(tmp_path):
    with pytest.raises(ConfigError, match="network dimension 0 is not a Switch"):
        run(tmp_path, ["inSwitch", "ring"], GIB, npus=(4, 8), topology=["Ring", "Switch"])
    with pytest.raises(ConfigError, match="dimension 0: its switch cannot reduce"):
        run(tmp_path, ["inSwitch"], GIB, extra="switch_reduction: [false]\n")
    with pytest.raises(ConfigError, match="switch_reduction_bandwidth"):
        run(tmp_path, ["inSwitch"], GIB, extra="switch_reduction_bandwidth: [1, 2]\n")
    with pytest.raises(ConfigError, match="all-to-all"):
        run(tmp_path, ["inSwitch"], GIB, comm=T.ALL_TO_ALL)


def _example():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "examples" / "in_switch"
    spec = importlib.util.spec_from_file_location("in_switch_example", root / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return root, module


def test_the_examples_configurations_are_what_its_script_writes(tmp_path):
    root, module = _example()
    module.write_configs(tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in (root / "configs").iterdir())
    for name in written:
        assert (tmp_path / name).read_text() == (root / "configs" / name).read_text(), name


def test_a_small_version_of_the_example_answers_its_question(tmp_path):
    """128 GPUs, GPT-3 175B's layers cut to 4: in-switch reduction where the data-parallel all-reduce runs pays;
    where it does not run (the spine, when DP stays in a leaf) the DP all-reduce is unchanged (GPT-3 ties its
    embeddings: the word-embedding gradient all-reduce between the first and last stage crosses the spine, and only
    it gains there, a fraction of a percent); a DP group across leaf and spine gains from either tier and most from
    both (an aggregation tree)."""
    _, module = _example()
    out = tmp_path / "times.json"
    assert module.main_(["--small", "--out", str(tmp_path), "--json", str(out)]) == 0
    t = {k: v["step_ns"] for k, v in json.loads(out.read_text()).items()}
    assert t["dp-in-leaf/leaf"] < 0.95 * t["dp-in-leaf/none"]
    results = json.loads(out.read_text())
    in_leaf = {name: results[f"dp-in-leaf/{name}"] for name in ("none", "leaf", "spine", "both")}
    assert in_leaf["spine"]["exposed_dp_ns"] == in_leaf["none"]["exposed_dp_ns"]
    assert in_leaf["spine"]["exposed_in_switch_dp_ns"] == 0
    assert 0.99 * t["dp-in-leaf/none"] < t["dp-in-leaf/spine"] <= t["dp-in-leaf/none"]  # the embedding group's gain
    assert in_leaf["both"]["exposed_dp_ns"] == in_leaf["leaf"]["exposed_dp_ns"]
    assert 0.99 * t["dp-in-leaf/leaf"] < t["dp-in-leaf/both"] <= t["dp-in-leaf/leaf"]
    across = {name: t[f"dp-across-spine/{name}"] for name in ("none", "leaf", "spine", "both")}
    assert across["both"] <= min(across["leaf"], across["spine"]) < across["none"]
    assert all(not row["warnings"] for row in results.values())
    assert results["dp-across-spine/both"]["exposed_in_switch_dp_ns"] > 0
