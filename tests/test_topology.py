"""Logical topologies (core/astra_sim/system/topology.py), semantics §4.2.

NPU ids map to coordinates with dimension 0 varying fastest; a dimension's
ring holds the NPUs that differ only in that coordinate. Binary trees are
numbered in order, exactly like the reference's ``BinaryTree::build_tree``.
"""

from __future__ import annotations

import pytest

from astra_sim.system.topology import (
    ANTICLOCKWISE,
    CLOCKWISE,
    DIM_LOCAL,
    DIM_NATIVE,
    BinaryTree,
    DoubleBinaryTreeTopology,
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


# ---------------------------------------------------------------- binary trees


def test_binary_tree_root_max_8():
    tree = BinaryTree(8, 0, 1, root_max=True)
    # In-order numbering: the 7-node subtree hangs left of the root, so the root is 7.
    assert tree.parent == {7: -1, 3: 7, 1: 3, 5: 3, 0: 1, 2: 1, 4: 5, 6: 5}
    assert tree.left == {7: 3, 3: 1, 1: 0, 5: 4, 0: -1, 2: -1, 4: -1, 6: -1}
    assert tree.right == {7: -1, 3: 5, 1: 2, 5: 6, 0: -1, 2: -1, 4: -1, 6: -1}
    assert tree.node_type(7) == "root"
    assert [n for n in range(8) if tree.node_type(n) == "intermediate"] == [1, 3, 5]
    assert [n for n in range(8) if tree.node_type(n) == "leaf"] == [0, 2, 4, 6]
    assert tree.num_nodes() == 8


def test_binary_tree_root_min_8():
    tree = BinaryTree(8, 0, 1, root_max=False)
    # The subtree hangs right: the root is numbered first (0), the subtree gets 1..7.
    assert tree.parent == {0: -1, 4: 0, 2: 4, 6: 4, 1: 2, 3: 2, 5: 6, 7: 6}
    assert tree.left[0] == -1 and tree.right[0] == 4
    assert (tree.left[4], tree.right[4]) == (2, 6)
    assert (tree.left[2], tree.right[2]) == (1, 3)
    assert (tree.left[6], tree.right[6]) == (5, 7)
    assert tree.node_type(0) == "root"
    assert [n for n in range(8) if tree.node_type(n) == "intermediate"] == [2, 4, 6]
    assert [n for n in range(8) if tree.node_type(n) == "leaf"] == [1, 3, 5, 7]


def test_binary_tree_with_start_and_stride():
    # The tree along dim 1 of a [4, 4] network for NPUs 1, 5, 9, 13.
    tree = BinaryTree(4, 1, 4, root_max=True)
    # 4 nodes: a 3-node subtree (1, 5, 9 in order, root 5) under root 13.
    assert tree.parent == {13: -1, 5: 13, 1: 5, 9: 5}
    assert (tree.left[13], tree.right[13]) == (5, -1)
    assert (tree.left[5], tree.right[5]) == (1, 9)
    assert tree.node_type(13) == "root"
    assert tree.node_type(5) == "intermediate"
    assert tree.node_type(1) == tree.node_type(9) == "leaf"


def test_double_binary_tree_alternates_root_max_then_root_min():
    dbt = DoubleBinaryTreeTopology(8, 0, 1)
    first, second, third = dbt.next_tree(), dbt.next_tree(), dbt.next_tree()
    assert first.node_type(7) == "root"
    assert second.node_type(0) == "root"
    assert third is first
    assert dbt.num_nodes() == 8


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


def test_general_complex_tree():
    topo = GeneralComplexTopology(3, [8], ["tree"])
    assert topo.num_dimensions() == 1
    assert topo.nodes_in_dimension(0) == 8
    first = topo.basic_topology(0, "all_reduce")
    second = topo.basic_topology(0, "all_reduce")
    assert isinstance(first, BinaryTree) and isinstance(second, BinaryTree)
    assert first.node_type(7) == "root"  # root-max first
    assert second.node_type(0) == "root"  # then root-min
    assert first.parent[3] == 7


def test_general_complex_ring_then_tree():
    # dims [2, 4]: rank 5 = (1, 2). The tree is the last dim: start = rank % offset = 1, stride 2.
    topo = GeneralComplexTopology(5, [2, 4], ["ring", "tree"])
    assert topo.num_dimensions() == 2
    assert topo.basic_topology(0, "all_reduce")._members == [4, 5]
    tree = topo.basic_topology(1, "all_reduce")
    assert sorted(tree.parent) == [1, 3, 5, 7]
    assert tree.node_type(7) == "root"
