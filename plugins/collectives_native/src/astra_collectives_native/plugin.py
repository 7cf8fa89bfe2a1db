"""Registers the native collective algorithms under the names the reference's system configs use."""

from __future__ import annotations

from astra_sim import hookimpl
from astra_sim.api import CollectiveAlgorithmSpec
from astra_sim.errors import ConfigError

from astra_collectives_native.double_binary_tree import DoubleBinaryTree
from astra_collectives_native.halving_doubling import make_halving_doubling
from astra_collectives_native.ring import make_direct, make_ring
from astra_collectives_native.tree_topology import tree_dimension


def _double_binary_tree(com_type, rank, tree, size, direction, window):
    if rank not in tree.parent:
        members = sorted(tree.parent)
        raise ConfigError(
            f"doubleBinaryTree cannot place rank {rank}: its tree for a dimension of {tree.total_nodes} NPUs "
            f"holds NPUs {members[:8]}{' ...' if len(members) > 8 else ''}. The dimension needs a power-of-two "
            "number of NPUs, and a doubleBinaryTree implementation list shorter than the network's "
            "dimensions only covers the first NPUs (the reference crashes on both)"
        )
    return DoubleBinaryTree(rank, tree, size)


@hookimpl
def astra_register_collective_algorithms(registry):
    add = registry.collective_algorithm
    # Ring and direct look only at ring neighbours (rotation-symmetric); halving-doubling pairs the ring index i
    # with i XOR 2^k (the reference's direction rule: + 2^k when bit k is 0, else - 2^k), which every flip of an
    # index bit keeps ("xor"); the trees give ranks roles, so runs using them are not folded.
    add("ring", CollectiveAlgorithmSpec("ring", make_ring, symmetry="rotation"), "ring per dimension")
    add("oneRing", CollectiveAlgorithmSpec("one", make_ring, symmetry="rotation"), "one ring over all NPUs")
    add("direct", CollectiveAlgorithmSpec("ring", make_direct, takes_window=True, symmetry="rotation"),
        "direct, window = suffix or n-1")
    add("oneDirect", CollectiveAlgorithmSpec("one", make_direct, takes_window=True, symmetry="rotation"),
        "direct over all NPUs")
    add("halvingDoubling", CollectiveAlgorithmSpec("ring", make_halving_doubling, symmetry="xor"),
        "recursive halving/doubling")
    add("oneHalvingDoubling", CollectiveAlgorithmSpec("one", make_halving_doubling, symmetry="xor"),
        "halving/doubling over all NPUs")
    add("doubleBinaryTree", CollectiveAlgorithmSpec("tree", _double_binary_tree, dimension_topology=tree_dimension),
        "double binary tree all-reduce")
