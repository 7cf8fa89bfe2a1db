"""The double binary tree's topology (astra_collectives_native.tree_topology): binary trees numbered in order,
exactly like the reference's ``BinaryTree::build_tree``, and the kernel's per-dimension topology built with it."""

from __future__ import annotations

from astra_sim.system.topology import GeneralComplexTopology

from astra_collectives_native.tree_topology import BinaryTree, DoubleBinaryTreeTopology, tree_dimension


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


# ---------------------------------------------------------------- in the kernel's per-dimension topology


def test_general_complex_tree():
    topo = GeneralComplexTopology(3, [8], [tree_dimension])
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
    topo = GeneralComplexTopology(5, [2, 4], ["ring", tree_dimension])
    assert topo.num_dimensions() == 2
    assert topo.basic_topology(0, "all_reduce")._members == [4, 5]
    tree = topo.basic_topology(1, "all_reduce")
    assert sorted(tree.parent) == [1, 3, 5, 7]
    assert tree.node_type(7) == "root"
