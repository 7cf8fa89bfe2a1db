"""The ``torus`` collective: a TPU slice's collectives over its ICI torus, timed by the scaling book's cost rule.

XLA runs a collective over every torus axis the group spans at once, each axis as a bidirectional ring (Austin et
al., *How to Scale Your Model*, jax-ml/scaling-book ``sharding.md`` at 0819a7d: an AllGather costs "bytes /
(bidirectional ICI bandwidth * num_axes)", an AllReduce twice that, an AllToAll "AllGather / 4 for a bidirectional
ring", and at least ``T_min * sum(|X_i|) / 2`` of hop latency). On a full v6e pod that is 2 axes x 200 GB/s = 400
GB/s a chip, Google's "All-reduce bandwidth per Pod 102.4 TB/s" over 256 chips (docs.cloud.google.com/tpu/docs/v6e).
The kernel's ``ring`` walks the axes one after the other in one direction at a time: 105 GB/s a chip on the same
pod (docs/validation.md, "TPU v6e").

Bytes: the bytes a chip receives, (n - 1) / n of the gathered array (the book writes V, the array, for large n).
A slice's axes are taken as full rings (wraparound), as the platform's network is.
"""

from __future__ import annotations

from astra_sim.errors import ConfigError
from astra_sim.system.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    TimedCollective,
)

#: Run options the TPU platforms imply (``platforms.TpuPreset.resolve``): one ICI link's rate per direction
#: (decimal GB/s) and one hop's latency (ns).
LINK_OPTION = "tpu_ici_gbps_per_link"
HOP_OPTION = "tpu_ici_hop_ns"


def group_axes(members, npus_per_dim) -> list:
    """The chips per torus axis a group spans: for each axis whose coordinate varies among ``members`` (NPU ids,
    axis 0 fastest), how many distinct coordinates it has."""
    sizes, stride = [], 1
    for dim in npus_per_dim:
        coords = {(m // stride) % dim for m in members}
        if len(coords) > 1:
            sizes.append(len(coords))
        stride *= dim
    return sizes


def torus_time_ns(com_type, data_size, axes, link_gbps, hop_ns) -> float:
    """One collective over a group spanning ``axes`` (chips per axis): the bandwidth term, bytes received /
    (2 x ``link_gbps`` x number of axes), or the latency term, ``hop_ns`` x sum(axes) / 2, whichever is longer.
    ``data_size`` is what the kernel gives a phase: a chip's input (all-gather), the whole buffer (reduce-scatter,
    all-reduce, all-to-all)."""
    n = 1
    for a in axes:
        n *= a
    if n <= 1:
        return 0.0
    if com_type == ALL_GATHER:
        moved = data_size * (n - 1)
    elif com_type == REDUCE_SCATTER:
        moved = data_size * (n - 1) / n
    elif com_type == ALL_REDUCE:
        moved = 2 * data_size * (n - 1) / n
    elif com_type == ALL_TO_ALL:
        moved = data_size * (n - 1) / n / 4
    else:
        raise ValueError(f"torus: no rule for {com_type}")
    bandwidth_bytes_per_ns = 2 * link_gbps * len(axes)  # GB/s = bytes/ns; both directions of each axis
    return max(hop_ns * sum(axes) / 2, moved / bandwidth_bytes_per_ns)


class TorusCollective(TimedCollective):
    """Waits the torus rule's time for its chunk (no packets): the group's axes from its members and the
    network's chips per dimension, the link rate and hop latency from the TPU platform's options."""

    __slots__ = ()

    def duration_ns(self):
        options = self.options
        if options.get(LINK_OPTION) is None:
            raise ConfigError("the torus collective needs --platform tpu-* (its ICI link rate and hop latency)")
        shared = self.sys.shared
        members = getattr(self.topo, "members", None) or range(shared.total_npus)
        hit = _AXES_CACHE.get(id(members))
        if hit is None or hit[0] is not members:  # a group's members list lives as long as its ring
            if len(_AXES_CACHE) >= 4096:
                _AXES_CACHE.clear()
            hit = _AXES_CACHE[id(members)] = (members, group_axes(members, shared.npus_per_dim))
        axes = hit[1]
        return torus_time_ns(self.com_type, int(self.data_size), axes, float(options[LINK_OPTION]),
                             float(options[HOP_OPTION]))


_AXES_CACHE = {}


def torus_factory(com_type, rank, topo, data_size, direction, window):
    return TorusCollective(com_type, rank, topo, data_size)


__all__ = ["HOP_OPTION", "LINK_OPTION", "TorusCollective", "group_axes", "torus_factory", "torus_time_ns"]
