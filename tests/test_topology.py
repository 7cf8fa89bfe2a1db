"""Logical topologies (core/astra_sim/system/topology.py), semantics §4.2.

NPU ids map to coordinates with dimension 0 varying fastest; a dimension's
ring holds the NPUs that differ only in that coordinate. The double binary trees are
collectives_native's (its tests/test_tree_topology.py).
"""

from __future__ import annotations

import pytest

from astra_sim.system.topology import (
    ANTICLOCKWISE,
    CLOCKWISE,
    DIM_LOCAL,
    DIM_NATIVE,
    GeneralComplexTopology,
    RingTopology,
)


# ---------------------------------------------------------------- rings


def test_homogeneous_ring_dim1_of_4x4():
    # Rank 13 in dims [4, 4]: coordinates (1, 3). Dim 1 has offset 4.
    ring = RingTopology.homogeneous(13, 4, 4)
    assert ring._members == [1, 5, 9, 13]
    assert ring.nodes_in_ring == 4
    assert ring.index_in_ring == 3
    assert ring.dimension == DIM_NATIVE
    assert ring.get_receiver(13, CLOCKWISE) == 1  # wraps around
    assert ring.get_sender(13, CLOCKWISE) == 9
    assert ring.get_receiver(13, ANTICLOCKWISE) == 9
    assert ring.get_sender(13, ANTICLOCKWISE) == 1
    assert ring.get_receiver(1, CLOCKWISE) == 5
    assert ring.get_sender(1, CLOCKWISE) == 13


def test_homogeneous_ring_dim0_of_4x4():
    ring = RingTopology.homogeneous(13, 4, 1)
    assert ring._members == [12, 13, 14, 15]
    assert ring.index_in_ring == 1
    assert ring.get_receiver(13, CLOCKWISE) == 14
    assert ring.get_sender(13, CLOCKWISE) == 12
    assert ring.get_receiver(15, CLOCKWISE) == 12


def test_homogeneous_ring_middle_dim_of_3d():
    # dims [2, 3, 4]: rank 17 = (1, 2, 2); dim 1 has offset 2, ring of 3.
    ring = RingTopology.homogeneous(17, 3, 2)
    assert ring._members == [13, 15, 17]
    assert ring.index_in_ring == 2
    assert ring.get_receiver(17, CLOCKWISE) == 13
    # dim 2: offset 6, ring of 4 -> 5, 11, 17, 23
    ring2 = RingTopology.homogeneous(17, 4, 6)
    assert ring2._members == [5, 11, 17, 23]
    assert ring2.index_in_ring == 2


def test_every_rank_of_a_dim_sees_the_same_ring():
    for dim_offset, size in ((1, 4), (4, 4)):
        rings = {}
        for rank in range(16):
            ring = RingTopology.homogeneous(rank, size, dim_offset)
            rings.setdefault(tuple(ring._members), set()).add(rank)
        # Four disjoint rings covering all 16 NPUs, each listing exactly its members.
        assert len(rings) == 4
        for members, ranks in rings.items():
            assert set(members) == ranks


def test_local_ring_from_member_list():
    ring = RingTopology(5, [2, 5, 9], DIM_LOCAL)
    assert ring.dimension == DIM_LOCAL
    assert ring.nodes_in_ring == 3
    assert ring.index_in_ring == 1
    assert ring.get_receiver(5, CLOCKWISE) == 9
    assert ring.get_sender(5, CLOCKWISE) == 2
    assert ring.get_receiver(9, CLOCKWISE) == 2
    assert ring.get_receiver(2, ANTICLOCKWISE) == 9
    assert ring.num_dimensions() == 1
    assert ring.nodes_in_dimension(0) == 3
    assert ring.basic_topology(0, "all_reduce") is ring


def test_ring_rejects_non_member():
    with pytest.raises(ValueError, match="not a member"):
        RingTopology(4, [0, 1, 2])


# ---------------------------------------------------------------- general complex topology


def test_general_complex_ring_ring():
    topo = GeneralComplexTopology(13, [4, 4], ["ring", "ring"])
    assert topo.num_dimensions() == 2
    assert topo.nodes_in_dimension(0) == 4
    assert topo.nodes_in_dimension(1) == 4
    assert topo.basic_topology(0, "all_reduce")._members == [12, 13, 14, 15]
    assert topo.basic_topology(1, "all_reduce")._members == [1, 5, 9, 13]


def test_general_complex_one_list_entry_uses_dim0_only():
    # A ["ring"] list on a 2-D network runs over dim 0 only (§4.1).
    topo = GeneralComplexTopology(13, [4, 4], ["ring"])
    assert topo.num_dimensions() == 1
    assert topo.basic_topology(0, "all_reduce")._members == [12, 13, 14, 15]


def test_general_complex_one_is_a_single_ring_of_all_npus():
    topo = GeneralComplexTopology(13, [4, 4], ["one"])
    assert topo.num_dimensions() == 1
    assert topo.nodes_in_dimension(0) == 16
    ring = topo.basic_topology(0, "all_reduce")
    assert ring._members == list(range(16))
    assert ring.index_in_ring == 13
    assert ring.get_receiver(13, CLOCKWISE) == 14
    assert ring.get_receiver(15, CLOCKWISE) == 0


def test_general_complex_one_stops_building_further_dims():
    topo = GeneralComplexTopology(5, [4, 4], ["one", "ring"])
    assert topo.num_dimensions() == 1
    assert topo.nodes_in_dimension(0) == 16
