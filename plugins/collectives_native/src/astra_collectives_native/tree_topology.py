"""The double binary tree's topology of one network dimension (the reference's ``DoubleBinaryTreeTopology``):
``doubleBinaryTree``'s :class:`astra_sim.api.DimensionTopology` (:func:`tree_dimension`), which the kernel's
per-dimension topology asks for each phase's tree.
"""

from __future__ import annotations


class BinaryTree:
    """An in-order-numbered binary tree with a root that has a single subtree.

    ``root_max``: the subtree hangs left so the root takes the largest id;
    otherwise it hangs right and the root takes the smallest id.
    """

    __slots__ = ("total_nodes", "start", "stride", "parent", "left", "right")

    def __init__(self, total_nodes, start, stride, root_max):
        self.total_nodes = total_nodes
        self.start = start
        self.stride = stride
        depth = 1
        tmp = total_nodes
        while tmp > 1:
            depth += 1
            tmp //= 2
        # Nodes are (parent, left, right) index triples in creation order.
        parent, left, right = [-1], [-1], [-1]

        def build(depth_left, parent_index):
            me = len(parent)
            parent.append(parent_index)
            left.append(-1)
            right.append(-1)
            if depth_left > 1:
                left[me] = build(depth_left - 1, me)
                right[me] = build(depth_left - 1, me)
            return me

        sub = build(depth - 1, 0)
        if root_max:
            left[0] = sub
        else:
            right[0] = sub
        # In-order numbering gives every tree node an NPU id.
        ids = [0] * len(parent)
        counter = [start]

        def number(node):
            if left[node] >= 0:
                number(left[node])
            ids[node] = counter[0]
            counter[0] += stride
            if right[node] >= 0:
                number(right[node])

        number(0)
        self.parent, self.left, self.right = {}, {}, {}
        for node in range(len(parent)):
            npu = ids[node]
            self.parent[npu] = ids[parent[node]] if parent[node] >= 0 else -1
            self.left[npu] = ids[left[node]] if left[node] >= 0 else -1
            self.right[npu] = ids[right[node]] if right[node] >= 0 else -1

    def node_type(self, npu):
        if self.parent[npu] < 0:
            return "root"
        if self.left[npu] < 0 and self.right[npu] < 0:
            return "leaf"
        return "intermediate"

    def num_nodes(self):
        return self.total_nodes


class DoubleBinaryTreeTopology:
    """Two binary trees (root-max, root-min) handed out alternately per phase."""

    __slots__ = ("trees", "counter", "total_nodes")

    def __init__(self, total_nodes, start, stride):
        self.total_nodes = total_nodes
        self.trees = (
            BinaryTree(total_nodes, start, stride, root_max=True),
            BinaryTree(total_nodes, start, stride, root_max=False),
        )
        self.counter = 0

    def next_tree(self):
        tree = self.trees[self.counter % 2]
        self.counter += 1
        return tree

    def num_nodes(self):
        return self.total_nodes

    def basic_topology(self, dim, com_type):
        """A phase's tree: the two trees in turn."""
        return self.next_tree()


def tree_dimension(rank, npus, stride, last):
    """``rank``'s double binary tree along a dimension of ``npus`` NPUs ``stride`` apart. As in the reference, the
    tree of the implementation list's ``last`` dimension starts at ``rank % stride`` (its NPUs are the first block's
    when the list is shorter than the network's dimensions); the others start at the rank's block."""
    start = rank % stride if last else (rank - rank % (stride * npus)) + rank % stride
    return DoubleBinaryTreeTopology(npus, start, stride)
