"""Halving-doubling folds by the XOR group (issue 37): its partner is the ring index XOR a power of two (the
reference's direction rule, /work/shared/reference/astra-sim-semantics.md §4.7), which every flip of an index bit
keeps, so a run on a network whose delays and link queues every permutation of the dimension keeps (a switch, a
fully connected dimension) folds by the bit flips, to the ns of ``--no-fold``; a ring network does not."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_folding.search import shift_refuses
from astra_folding.symmetry import BlockShift, RankSymmetry

AR, RS, AG = T.ALL_REDUCE, T.REDUCE_SCATTER, T.ALL_GATHER


def _case(folder, topology, npus, algorithms, comm_types=(AR, RS, AG), splits=4, chunks=1, size_bytes=1 << 20):
    """Every rank: compute, then each collective of ``comm_types`` in turn on the default group."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "net.yml").write_text(f"topology: [ {', '.join(topology)} ]\nnpus_count: {list(npus)}\n"
                                    f"bandwidth: {[50.0] * len(npus)}\nlatency: {[500.0] * len(npus)}\n")
    system = {"preferred-dataset-splits": splits, "local-mem-bw": 50, "endpoint-delay": 10,
              "active-chunks-per-dimension": chunks}
    for key in ("all-reduce", "all-gather", "reduce-scatter"):
        system[f"{key}-implementation"] = list(algorithms)
    system["all-to-all-implementation"] = ["ring"]
    (folder / "sys.json").write_text(json.dumps(system))
    (folder / "mem.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    total = 1
    for count in npus:
        total *= count
    nodes = [make_node(0, "c", T.COMP_NODE, duration_micros=5, attrs={"is_cpu_op": False})]
    for i, comm_type in enumerate(comm_types, 1):
        nodes.append(make_node(i, "coll", T.COMM_COLL_NODE, data_deps=[i - 1],
                               attrs={"is_cpu_op": False, "comm_type": comm_type, "comm_size": size_bytes}))
    for rank in range(total):
        write_et(f"{folder}/t.{rank}.et", make_metadata(), nodes)
    return str(folder / "t"), str(folder / "sys.json"), str(folder / "net.yml"), str(folder / "mem.json")


def _ranks(report):
    return [(r.rank, r.finish_ns, r.compute_ns, r.comm_ns, r.exposed_comm_ns, r.nodes, r.breakdown)
            for r in report.ranks]


def _both(args, backend):
    """The folded report, after checking every rank's numbers against ``--no-fold``'s."""
    folded = simulate(*args, network_backend=backend)
    assert _ranks(folded) == _ranks(simulate(*args, network_backend=backend, fold=False))
    return folded


# ------------------------------------------------------------------------------------------ what folds


@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_halving_doubling_on_a_switch_folds_to_one_rank_and_says_by_what(tmp_path, backend):
    report = _both(_case(tmp_path, ("Switch",), (16,), ("halvingDoubling",)), backend)
    info = report.settings["fold"]
    assert info["simulated_ranks"] == 1 and info["ranks_per_class"] == 16
    assert info["generators"] == [{"stride": 1 << k, "radix": 2, "block": 2} for k in range(4)]
    assert info["group"] == "rank XOR m, m any sum of {1, 2, 4, 8} (16 ranks per class)"
    assert report.stats["simulated_ranks"] == 1


@pytest.mark.parametrize("topology,npus,algorithms", [
    (("FullyConnected", "Switch"), (4, 8), ("halvingDoubling", "halvingDoubling")),
    (("Ring", "Switch"), (4, 4), ("ring", "halvingDoubling")),  # the ring rotates, the switch's bits flip
    (("Switch", "Switch"), (4, 4), ("oneHalvingDoubling",)),  # one ring over all NPUs: the rank's bits
])
@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_multi_dimensional_halving_doubling_folds_to_one_rank(tmp_path, topology, npus, algorithms, backend):
    report = _both(_case(tmp_path, topology, npus, algorithms), backend)
    assert report.settings["fold"]["simulated_ranks"] == 1, report.settings["fold"]


def test_flow_backend_folds_a_switch_of_halving_doubling(tmp_path):
    report = _both(_case(tmp_path, ("Switch",), (8,), ("halvingDoubling",), comm_types=(AR,)), "flow")
    assert report.settings["fold"]["simulated_ranks"] == 1


# ------------------------------------------------------------------------------------------ what does not


def test_a_ring_network_keeps_no_bit_flip_and_says_so(tmp_path):
    report = _both(_case(tmp_path, ("Ring",), (8,), ("halvingDoubling",), comm_types=(AR,)), "congestion")
    info = report.settings["fold"]
    assert info["simulated_ranks"] == 8
    assert "pairs NPUs by their coordinate's bits" in info["reason"] and "ring keeps its delays" in info["reason"]


def test_a_tie_the_fold_cannot_order_falls_back_to_every_rank(tmp_path):
    """Two switches of halving-doubling: rank 0 receives its two dimensions' messages at one nanosecond, scheduled
    by histories that differ only in rank numbers (their order differs between members of a class): the fold is
    abandoned and every rank simulated, with the same ns."""
    report = _both(_case(tmp_path, ("Switch", "Switch"), (4, 4), ("halvingDoubling", "halvingDoubling"),
                         comm_types=(AR,)), "analytical")
    assert report.settings["fold"]["simulated_ranks"] == 16
    assert "abandoned" in report.settings["fold"]["reason"]


def test_which_shifts_halving_doubling_keeps():
    """Per dimension: flips of one bit of the coordinate (``ring`` topology) or of the rank (``one``), nothing
    else; a rotation of a switch dimension does not keep the partners."""
    impls = {AR: [(_spec("ring"), None), (_spec("ring"), None)]}
    one = {AR: [(_spec("one"), None)]}
    npus, kinds = [4, 8], ["any", "any"]
    assert shift_refuses(BlockShift(1, 2, 2), npus, kinds, {AR}, impls.get) is None
    assert shift_refuses(BlockShift(8, 2, 2), npus, kinds, {AR}, impls.get) is None  # bit 1 of dimension 1
    assert "bits" in shift_refuses(BlockShift(4, 8, 8), npus, kinds, {AR}, impls.get)
    assert "bits" in shift_refuses(BlockShift(1, 4, 4), npus, kinds, {AR}, impls.get)
    assert shift_refuses(BlockShift(4, 2, 2), npus, kinds, {AR}, one.get) is None
    # 3 x 4 NPUs: a flip of dimension 1's bit 0 moves the rank by 3, not a bit of the id (oneHalvingDoubling)
    assert "id's bits" in shift_refuses(BlockShift(3, 2, 2), [3, 4], kinds, {AR}, one.get)
    assert shift_refuses(BlockShift(1, 2, 2), npus, ["rotation", "any"], {AR}, impls.get) is not None


def _spec(topology):
    from astra_sim.api import CollectiveAlgorithmSpec

    return CollectiveAlgorithmSpec(topology, None, symmetry="xor")


def test_the_xor_group_acts_freely_and_is_its_own_inverse():
    sym = RankSymmetry([BlockShift(1 << k, 2, 2) for k in range(3)])
    for rank in range(8):
        offsets = sym.offsets(rank)
        assert sym.moved(0, offsets) == rank == 0 ^ rank
        assert sym.moved(rank, offsets, -1) == sym.moved(rank, offsets) == 0
        assert all(sym.moved(r, offsets) == r ^ rank for r in range(8))


# ------------------------------------------------------------------------------------------ random small cases


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_small_halving_doubling_cases_fold_exactly(tmp_path_factory, data):
    ndims = data.draw(st.integers(1, 2))
    topology = [data.draw(st.sampled_from(["Switch", "Switch", "FullyConnected", "Ring"])) for _ in range(ndims)]
    npus = [data.draw(st.sampled_from([2, 4, 8])) for _ in range(ndims)]
    if npus[0] * npus[-1] > 32 and ndims == 2:
        npus[1] = 2
    if ndims == 1 or data.draw(st.booleans()):
        algorithms = [data.draw(st.sampled_from(["halvingDoubling", "ring", "direct"])) for _ in range(ndims)]
        algorithms[data.draw(st.integers(0, ndims - 1))] = "halvingDoubling"
    else:
        algorithms = ["oneHalvingDoubling"]
    comm_types = data.draw(st.lists(st.sampled_from([AR, RS, AG]), min_size=1, max_size=3))
    args = _case(tmp_path_factory.mktemp("xor"), topology, npus, algorithms, comm_types,
                 splits=data.draw(st.sampled_from([1, 2, 4])), chunks=data.draw(st.sampled_from([1, 2])),
                 size_bytes=data.draw(st.sampled_from([4096, 1 << 20])))
    _both(args, data.draw(st.sampled_from(["analytical", "congestion"])))
