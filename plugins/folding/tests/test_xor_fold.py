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


def _case(folder, topology, npus, algorithms, comm_types=(AR, RS, AG), splits=4, chunks=1, size_bytes=1 << 20,
          groups=None, bandwidth_gbps=None):
    """Every rank: compute, then each collective of ``comm_types`` in turn on the default group, or with ``groups``
    (``{id: members}``) on each group of the rank in turn."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "net.yml").write_text(f"topology: [ {', '.join(topology)} ]\nnpus_count: {list(npus)}\n"
                                    f"bandwidth: {list(bandwidth_gbps or [50.0] * len(npus))}\n"
                                    f"latency: {[500.0] * len(npus)}\n")
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
    if groups:
        (folder / "groups.json").write_text(json.dumps({str(k): v for k, v in groups.items()}))
    for rank in range(total):
        mine = [str(g) for g, members in sorted(groups.items()) if rank in members] if groups else [None]
        nodes = [make_node(0, "c", T.COMP_NODE, duration_micros=5, attrs={"is_cpu_op": False})]
        for comm_type in comm_types:
            for pg in mine:
                attrs = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size_bytes}
                if pg is not None:
                    attrs["pg_name"] = pg
                nodes.append(make_node(len(nodes), "coll", T.COMM_COLL_NODE, data_deps=[len(nodes) - 1], attrs=attrs))
        write_et(f"{folder}/t.{rank}.et", make_metadata(), nodes)
    return (str(folder / "t"), str(folder / "sys.json"), str(folder / "net.yml"), str(folder / "mem.json"),
            str(folder / "groups.json") if groups else None)


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


@pytest.mark.parametrize("topology,npus,algorithms,bandwidth_gbps", [
    (("FullyConnected", "Switch"), (4, 8), ("halvingDoubling", "halvingDoubling"), None),
    (("Switch", "Switch"), (4, 4), ("halvingDoubling", "halvingDoubling"), (50.0, 25.0)),
    (("Ring", "Switch"), (4, 4), ("ring", "halvingDoubling"), None),  # the ring rotates, the switch's bits flip
    (("Switch", "Switch"), (4, 4), ("oneHalvingDoubling",), None),  # one ring over all NPUs: the rank's bits
])
@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_multi_dimensional_halving_doubling_folds_to_one_rank(tmp_path, topology, npus, algorithms, bandwidth_gbps,
                                                              backend):
    report = _both(_case(tmp_path, topology, npus, algorithms, bandwidth_gbps=bandwidth_gbps), backend)
    assert report.settings["fold"]["simulated_ranks"] == 1, report.settings["fold"]


def test_flow_backend_folds_a_switch_of_halving_doubling(tmp_path):
    report = _both(_case(tmp_path, ("Switch",), (8,), ("halvingDoubling",), comm_types=(AR,)), "flow")
    assert report.settings["fold"]["simulated_ranks"] == 1


def _tp_dp_groups(tp, dp, dp_order=None):
    """Tensor-parallel groups (consecutive ranks) and data-parallel groups (stride ``tp``), the latter's members in
    the order ``dp_order`` (a permutation of the replica indices; default ascending)."""
    order = dp_order or list(range(dp))
    groups = {1 + d: [d * tp + t for t in range(tp)] for d in range(dp)}
    groups.update({1 + dp + t: [t + tp * d for d in order] for t in range(tp)})
    return groups


@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_halving_doubling_on_data_parallel_groups_folds_by_the_replicas_bits(tmp_path, backend):
    """A group's halving-doubling pairs its list's index ``i`` with ``i XOR 2^k``: a flip of a replica bit maps each
    data-parallel group onto itself with its index XOR a power of two, which keeps it (the groups' ``xor``
    equivalence), though not their lists as they are."""
    args = _case(tmp_path, ("Switch",), (16,), ("halvingDoubling",), comm_types=(AR, AG), groups=_tp_dp_groups(2, 8))
    report = _both(args, backend)
    info = report.settings["fold"]
    assert info["simulated_ranks"] == 1, info


def test_groups_listed_out_of_xor_order_keep_only_the_flips_they_keep(tmp_path):
    """Replicas listed 0, 1, 2, 3, 4, 5, 7, 6: flipping replica bit 0 maps the list to itself indexed XOR 1, but
    flipping bit 1 pairs list indices 4 and 7 (replicas 4 and 6), which no index XOR does: only the tensor-parallel
    bit and replica bit 0 fold, to the ns."""
    args = _case(tmp_path, ("Switch",), (16,), ("halvingDoubling",), comm_types=(AR,),
                 groups=_tp_dp_groups(2, 8, [0, 1, 2, 3, 4, 5, 7, 6]))
    info = _both(args, "congestion").settings["fold"]
    assert [g["stride"] for g in info["generators"]] == [1, 2], info


def test_a_compact_workload_folds_its_declared_replica_rotation_by_the_replicas_bits(tmp_path):
    """A compact workload declares the rotation of the data-parallel digit, which halving-doubling does not keep;
    the flips of the digit's bits it does (search.bit_flips), so the run folds to one rank, with the per-rank run's
    ns."""
    from astra_sim.chakra import encode_et, read_et
    from astra_workload_compact import write_compact_workload

    per_rank = _case(tmp_path, ("Switch",), (16,), ("halvingDoubling",), comm_types=(AR,),
                     groups=_tp_dp_groups(2, 8))
    nodes = read_et(f"{per_rank[0]}.0.et").nodes
    write_compact_workload(tmp_path / "compact", 16, [BlockShift(1, 2, 2), BlockShift(2, 8, 8)],
                           [(0, encode_et(make_metadata(), nodes))], comm_groups=per_rank[4])
    compact = simulate(str(tmp_path / "compact"), *per_rank[1:4], network_backend="congestion")
    info = compact.settings["fold"]
    assert info["simulated_ranks"] == 1 and [g["stride"] for g in info["generators"]] == [1, 2, 4, 8], info
    assert _ranks(compact) == _ranks(simulate(*per_rank, network_backend="congestion", fold=False))


# ------------------------------------------------------------------------------------------ what does not


def test_a_ring_network_keeps_no_bit_flip_and_says_so(tmp_path):
    report = _both(_case(tmp_path, ("Ring",), (8,), ("halvingDoubling",), comm_types=(AR,)), "congestion")
    info = report.settings["fold"]
    assert info["simulated_ranks"] == 8
    assert "pairs NPUs by their coordinate's bits" in info["reason"] and "ring keeps its delays" in info["reason"]


def test_a_tie_the_fold_cannot_order_falls_back_to_every_rank(tmp_path):
    """Two alike switches of halving-doubling (the same bandwidth and latency): rank 0 receives its two dimensions'
    messages at one nanosecond, scheduled by histories that differ only in rank numbers (their order differs between
    members of a class; two rings tie the same way): the fold is abandoned and every rank simulated, with the same
    ns."""
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


@settings(max_examples=10, deadline=None, derandomize=True,
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
    groups = None
    if ndims == 1 and npus[0] >= 4 and data.draw(st.booleans()):  # tensor x data parallel, replicas in any order
        dp = npus[0] // 2
        groups = _tp_dp_groups(2, dp, data.draw(st.permutations(range(dp))))
    args = _case(tmp_path_factory.mktemp("xor"), topology, npus, algorithms, comm_types,
                 splits=data.draw(st.sampled_from([1, 2, 4])), chunks=data.draw(st.sampled_from([1, 2])),
                 size_bytes=data.draw(st.sampled_from([4096, 1 << 20])), groups=groups)
    _both(args, data.draw(st.sampled_from(["analytical", "congestion"])))
