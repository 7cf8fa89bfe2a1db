"""Logical topologies the native collective algorithms walk. NPU ids map to coordinates with dimension 0 varying
fastest; a dimension's ring is the NPUs differing only in that coordinate (their index). ``one*`` algorithms use one
ring over every NPU, communicator groups a "local" ring over their members.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final  # (compiled, a Final constant is inlined, not looked up in the module's globals)

from astra_sim.system.collectives import mypyc_attr

CLOCKWISE: Final = 0
ANTICLOCKWISE: Final = 1

#: Ring dimension kinds: native dims vs. communicator-group ("local") rings.
DIM_NATIVE: Final = 0
DIM_LOCAL: Final = 1


def coordinates(npu, npus_per_dim):
    """``npu``'s coordinate in each network dimension (dimension 0 varies fastest)."""
    out = []
    for count in npus_per_dim:
        out.append(npu % count)
        npu //= count
    return out


def differing_dims(npus, npus_per_dim):
    """The network dimensions in which the coordinates of ``npus`` differ (sorted)."""
    first = coordinates(npus[0], npus_per_dim)
    return sorted({dim for npu in npus[1:] for dim, c in enumerate(coordinates(npu, npus_per_dim)) if c != first[dim]})


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (tools/compile_core.py); TreeRingTopology subclasses it
class RingTopology:
    """A ring of NPUs: either ``base + k*offset`` (native) or an explicit member list."""

    __slots__ = ("nodes_in_ring", "index_in_ring", "dimension", "native_dim", "_members", "_index_of")

    def __init__(self, rank, members, dimension=DIM_NATIVE):
        self.nodes_in_ring = len(members)
        self.dimension = dimension
        #: the network dimension a per-dimension ring runs along (None: a group's or one* ring)
        self.native_dim = None
        self._members = members
        self._index_of = {npu: i for i, npu in enumerate(members)}
        if rank not in self._index_of:
            raise ValueError(f"rank {rank} is not a member of ring {list(members)}")
        self.index_in_ring = self._index_of[rank]

    @classmethod
    def homogeneous(cls, rank, nodes_in_ring, offset):
        """The ring of ``rank`` along one dimension (stride ``offset``)."""
        index = (rank % (offset * nodes_in_ring)) // offset
        base = rank - index * offset
        return cls(rank, [base + k * offset for k in range(nodes_in_ring)])

    @property
    def members(self) -> Sequence[int]:
        """The ring's NPUs in ring order (do not modify)."""
        return self._members

    def get_receiver(self, node, direction):
        i = self._index_of[node] + (1 if direction == CLOCKWISE else -1)
        return self._members[i % self.nodes_in_ring]

    def get_sender(self, node, direction):
        i = self._index_of[node] + (-1 if direction == CLOCKWISE else 1)
        return self._members[i % self.nodes_in_ring]

    def num_nodes(self):
        return self.nodes_in_ring

    def num_dimensions(self):
        return 1

    def nodes_in_dimension(self, dim):
        return self.nodes_in_ring

    def basic_topology(self, dim, com_type):
        return self


class GeneralComplexTopology:
    """One logical dimension per entry of a collective's implementation list."""

    __slots__ = ("dims",)

    def __init__(self, rank, npus_per_dim, impl_kinds):
        """``impl_kinds``: per logical dim, ``'ring'``, ``'one'`` or a :class:`astra_sim.api.DimensionTopology`."""
        self.dims = []
        offset = 1
        last_dim = len(impl_kinds) - 1
        for dim, kind in enumerate(impl_kinds):
            size = npus_per_dim[dim]
            if kind == "ring":
                ring = RingTopology.homogeneous(rank, size, offset)
                ring.native_dim = dim
                self.dims.append(ring)
            elif kind == "one":
                self.dims.append(RingTopology.homogeneous(rank, math.prod(npus_per_dim), 1))
                return
            elif callable(kind):
                self.dims.append(kind(rank, size, offset, dim == last_dim))
            else:  # pragma: no cover - guarded by the implementation parser
                raise ValueError(f"unknown topology kind {kind!r}")
            offset *= size

    def num_dimensions(self):
        return len(self.dims)

    def nodes_in_dimension(self, dim):
        return self.dims[dim].num_nodes()

    def basic_topology(self, dim, com_type):
        return self.dims[dim].basic_topology(dim, com_type)
