"""Hierarchical in-network reduction: how ``inSwitch`` runs on a communicator group that spans several network
dimensions (the kernel asks the algorithm's :class:`astra_sim.api.GroupPlanner`, this module's
:data:`IN_SWITCH_GROUP_PLANNER`, for the group's plan).

When every dimension the group spans lists ``inSwitch``: one in-switch phase over the whole group (an aggregation
tree: each switch tier reduces once, :class:`TreeRingTopology`). Otherwise the group is walked per dimension like
the whole network (:class:`GroupGridTopology`: e.g. reduce-scatter in the leaf switch, ring across the spine,
multicast back).
"""

from __future__ import annotations

import math

from astra_sim.system.collectives import ALL_TO_ALL
from astra_sim.system.topology import DIM_LOCAL, RingTopology, coordinates


class TreeRingTopology(RingTopology):
    """A communicator group spanning several switch dimensions that all reduce: one in-switch phase over the
    whole group (the leaf switches reduce their members, the next tier the leaves, as SHARP aggregation trees
    do). ``switch_dims``: the network dimensions of the tree, lowest first."""

    __slots__ = ("switch_dims",)

    def __init__(self, rank, members, switch_dims):
        super().__init__(rank, members, DIM_LOCAL)
        self.switch_dims = tuple(switch_dims)


def box_dims(npus, npus_per_dim):
    """The dimensions a group of NPUs spans when it is a box (every combination of the coordinates it uses in
    each dimension is one of its NPUs), else None."""
    coords = [set() for _ in npus_per_dim]
    for npu in npus:
        for dim, coordinate in enumerate(coordinates(npu, npus_per_dim)):
            coords[dim].add(coordinate)
    if math.prod(len(used) for used in coords) != len(set(npus)):
        return None
    return [dim for dim, used in enumerate(coords) if len(used) > 1]


class GroupGridTopology:
    """A communicator group that is a box of the network's dimensions, walked one dimension at a time like the
    whole network (so per-dimension algorithm lists apply to it): along each dimension the ring of the group's
    NPUs that share this rank's other coordinates (one NPU, i.e. inactive, where the group does not spread)."""

    __slots__ = ("dims",)

    def __init__(self, rank, npus, npus_per_dim):
        mine = coordinates(rank, npus_per_dim)
        self.dims = []
        for dim in range(len(npus_per_dim)):
            members = sorted(n for n in npus if all(c == m for d, (c, m) in
                                                    enumerate(zip(coordinates(n, npus_per_dim), mine)) if d != dim))
            ring = RingTopology(rank, members, DIM_LOCAL)
            ring.native_dim = dim
            self.dims.append(ring)

    def num_dimensions(self):
        return len(self.dims)

    def nodes_in_dimension(self, dim):
        return self.dims[dim].nodes_in_ring

    def basic_topology(self, dim, com_type):
        return self.dims[dim]


class InSwitchGroupPlanner:
    """``inSwitch``'s :class:`astra_sim.api.GroupPlanner`."""

    def plan(self, rank, group, com_type, impls, dims, npus_per_dim, warn):
        """The plan of a group spanning ``dims`` (several) with ``inSwitch`` listed for some of them; None (with a
        warning; the kernel runs ``ring``) when the group is not a box of the dimensions or a listed algorithm
        does not walk a ring of its own dimension."""
        if box_dims(group.npus, npus_per_dim) is None:
            warn(f"communicator group {group.group_id} spans network dimensions {dims} but is not a box of them "
                 "(not every combination of its coordinates is a member): its collectives run ring, not inSwitch")
            return None
        if com_type != ALL_TO_ALL and all(d < len(impls) and impls[d][0].per_dimension_groups for d in dims):
            return (TreeRingTopology(rank, sorted(group.npus), dims), [impls[dims[0]]], [True])
        if any(d >= len(impls) or impls[d][0].topology != "ring" for d in dims):
            warn(f"communicator group {group.group_id} spans network dimensions {dims}, and one of their listed "
                 "algorithms does not walk a ring of its own dimension: its collectives run ring, not inSwitch")
            return None
        involved = [d in dims for d in range(len(npus_per_dim))]
        return (GroupGridTopology(rank, group.npus, npus_per_dim), impls, involved)


IN_SWITCH_GROUP_PLANNER = InSwitchGroupPlanner()
